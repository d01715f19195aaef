//! The watchdog: keeps a held lock alive in the background, and says when it
//! has been lost.
//!
//! [`Lock::keep_alive`](crate::Lock::keep_alive) starts a task that extends
//! the lock by its TTL every `ttl × keep_alive_fraction` (a third by
//! default, as Redisson's watchdog does). An extension that fails for a
//! passing reason (timeouts, connection errors) is tried again soon, for as
//! long as one more attempt can still finish before the validity ends.
//!
//! The lock is **lost** when
//! * an extension finds another owner's token, or finds the key gone on so
//!   many nodes that no majority can confirm it any more; or
//! * the validity is about to run out (less than one node timeout left)
//!   before an extension succeeded.
//!
//! Either way the [`Held`] handle says so at once, before the validity
//! deadline passes: as a cheap check ([`Held::is_lost`]) and as a future to
//! `select!` on ([`Held::lost`]). Nothing is killed behind the holder's back:
//! the code that holds the lock is told, and must stop touching the shared
//! resource itself. The watchdog stops when the lock is released or dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::Moment;
use crate::config::TtlPlan;
use crate::error::NodeFailure;
use crate::lock::extend_on_nodes;
use crate::quorum::LockId;
use crate::redlock::Core;

/// What the watchdog and the holder share.
#[derive(Debug)]
pub(crate) struct Watch {
    /// The validity deadline, as [`Moment::as_nanos`].
    deadline: AtomicU64,
    lost: watch::Sender<bool>,
}

impl Watch {
    pub(crate) fn new(deadline: Moment) -> Arc<Watch> {
        Arc::new(Watch {
            deadline: AtomicU64::new(deadline.as_nanos()),
            lost: watch::Sender::new(false),
        })
    }

    /// The validity deadline; now, once the lock is lost.
    pub(crate) fn deadline(&self) -> Moment {
        if self.is_lost() {
            return Moment::now();
        }
        Moment::from_nanos(self.deadline.load(Ordering::Acquire))
    }

    fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    pub(crate) fn set_deadline(&self, deadline: Moment) {
        self.deadline.store(deadline.as_nanos(), Ordering::Release);
    }

    fn set_lost(&self) {
        self.lost.send_replace(true);
    }
}

/// A handle on a lock kept alive in the background: how long it is still
/// valid, and whether it has been lost. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Held {
    watch: Arc<Watch>,
}

impl Held {
    pub(crate) fn new(watch: Arc<Watch>) -> Held {
        Held { watch }
    }

    /// Whether the lock has been lost. Once lost, it stays lost.
    pub fn is_lost(&self) -> bool {
        self.watch.is_lost()
    }

    /// Resolves when the lock is lost; never, while it is kept. Use it in a
    /// `tokio::select!` against the work the lock protects.
    pub async fn lost(&self) {
        let mut rx = self.watch.lost.subscribe();
        // The sender lives as long as `self`, so this cannot fail.
        let _ = rx.wait_for(|lost| *lost).await;
    }

    /// How long the lock is still valid, as of the last extension.
    pub fn remaining(&self) -> Duration {
        self.watch.deadline().remaining()
    }
}

/// The watchdog task: extends the lock until it is lost (or aborted by a
/// release or drop).
pub(crate) async fn run(core: Arc<Core>, id: Arc<LockId>, plan: TtlPlan, watch: Arc<Watch>) {
    let options = &core.options;
    let every = plan.ttl.mul_f64(options.keep_alive_fraction);
    let mut next = Moment::now().after(every);
    loop {
        // Sleep until the next extension is due, but wake while one more
        // attempt can still finish before the validity ends.
        let latest_start = watch
            .deadline()
            .remaining()
            .saturating_sub(options.node_timeout);
        tokio::time::sleep(next.remaining().min(latest_start)).await;
        if watch.deadline().remaining() <= options.node_timeout {
            tracing::warn!(key = %id.key, "lock lost: validity ran out before an extension succeeded");
            return watch.set_lost();
        }
        let started = Moment::now();
        match extend_on_nodes(&core, &id, plan).await {
            Ok(deadline) => {
                watch.set_deadline(deadline);
                next = started.after(every);
            }
            Err(report) => {
                // Keys held by others or gone cannot come back to us.
                let hopeless = report.count(|f| {
                    matches!(
                        f,
                        NodeFailure::Held | NodeFailure::Missing | NodeFailure::WrongType(_)
                    )
                });
                if core.nodes.len() - hopeless < report.needed() {
                    tracing::warn!(key = %id.key, %report, "lock lost: a majority no longer holds it");
                    return watch.set_lost();
                }
                tracing::debug!(key = %id.key, %report, "extension failed; trying again");
                next = Moment::now().after((every / 4).max(options.node_timeout));
            }
        }
    }
}
