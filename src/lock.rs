//! The guard of a held lock: how long it is still valid, extending it,
//! releasing it.
//!
//! A [`Lock`] knows its resource, its token and the moment its validity ends.
//! It does not watch the nodes: [`remaining`](Lock::remaining) is computed
//! from that moment alone, on the same suspend-aware clock as the
//! acquisition. [`extend`](Lock::extend) and [`release`](Lock::release) ask
//! every node at once under the same quorum, timeout and validity rules as
//! the acquisition.
//!
//! Dropping a lock without releasing it releases it in the background (when a
//! tokio runtime is running; otherwise its keys expire at their TTL).
//!
//! [`keep_alive`](Lock::keep_alive) hands the extending to a watchdog task
//! (see [`crate::keep_alive`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Moment;
use crate::config::TtlPlan;
use crate::error::{Error, NodeFailure, Report};
use crate::keep_alive::{self, Held, Watch};
use crate::quorum::{self, LockId, Request};
use crate::redlock::Core;

/// A held lock. Release it with [`release`](Lock::release); dropping it
/// releases it in the background.
#[must_use = "dropping a Lock releases it at once"]
pub struct Lock {
    core: Arc<Core>,
    id: Arc<LockId>,
    /// The TTL it was acquired with, for the watchdog.
    plan: TtlPlan,
    deadline: Moment,
    /// The watchdog, once started.
    keeper: Option<Keeper>,
    released: bool,
}

struct Keeper {
    watch: Arc<Watch>,
    task: tokio::task::JoinHandle<()>,
}

impl Lock {
    pub(crate) fn new(core: Arc<Core>, id: Arc<LockId>, plan: TtlPlan, deadline: Moment) -> Lock {
        Lock {
            core,
            id,
            plan,
            deadline,
            keeper: None,
            released: false,
        }
    }

    /// The resource this lock is on.
    pub fn resource(&self) -> &str {
        // The key is the prefix followed by the resource.
        &self.id.key[self.core.options.key_prefix.len()..]
    }

    /// The random token that marks this holder on the nodes (40 hex digits).
    pub fn token(&self) -> &str {
        self.id.token()
    }

    /// How long the lock is still valid: the TTL of the last acquisition or
    /// extension, less the time it took and the drift allowance, less the
    /// time since. Zero once expired.
    ///
    /// Check it before acting on the protected resource; a process pause
    /// between the check and the act is not covered (see
    /// [`Redlock`](crate::Redlock) on pauses and fencing).
    pub fn remaining(&self) -> Duration {
        self.deadline().remaining()
    }

    fn deadline(&self) -> Moment {
        self.keeper
            .as_ref()
            .map_or(self.deadline, |k| k.watch.deadline())
    }

    /// Stops the watchdog, keeping the validity it reached (none if lost).
    fn stop_keeper(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.task.abort();
            self.deadline = keeper.watch.deadline();
        }
    }

    /// Keeps the lock alive in the background: a watchdog task extends it by
    /// its TTL every `ttl × keep_alive_fraction`
    /// ([`Builder::keep_alive_fraction`](crate::Builder::keep_alive_fraction),
    /// a third by default) until it is released or dropped.
    ///
    /// The returned [`Held`] says when the lock has been lost (another owner
    /// took it, its keys were lost, or validity ran out before an extension
    /// got through): check it, or `select!` on [`Held::lost`], and stop
    /// touching the protected resource then. Nothing is cancelled for you.
    /// Calling it again returns a handle on the same watchdog.
    ///
    /// Must be called within a tokio runtime.
    pub fn keep_alive(&mut self) -> Held {
        if let Some(keeper) = &self.keeper {
            return Held::new(keeper.watch.clone());
        }
        let watch = Watch::new(self.deadline);
        let task = tokio::spawn(keep_alive::run(
            self.core.clone(),
            self.id.clone(),
            self.plan,
            watch.clone(),
        ));
        self.keeper = Some(Keeper {
            watch: watch.clone(),
            task,
        });
        Held::new(watch)
    }

    /// Whether the validity has run out.
    pub fn is_expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// Extends the lock to `ttl` from now, on a majority of nodes, and
    /// updates [`remaining`](Self::remaining) in place.
    ///
    /// A node whose key is gone (expired, or lost in a restart) is not given
    /// the key back: an extension never resurrects a lock.
    ///
    /// # Errors
    /// * [`Error::Expired`] if the validity had already run out: nothing is
    ///   sent. Also when the nodes had lost the key.
    /// * [`Error::Taken`] if another owner holds it on some nodes.
    /// * [`Error::NoQuorum`] if too few nodes confirmed in time.
    /// * [`Error::Config`] for a TTL that cannot work with the options.
    ///
    /// A failed extension deletes nothing: the lock stays held until its old
    /// validity ends, and the call may be tried again.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let plan = self.core.options.plan(ttl)?;
        if self.is_expired() {
            return Err(self.expired(Report::default()));
        }
        let deadline = extend_on_nodes(&self.core, &self.id, plan)
            .await
            .map_err(|report| self.classify(report))?;
        self.deadline = deadline;
        if let Some(keeper) = &self.keeper {
            keeper.watch.set_deadline(deadline);
        }
        Ok(())
    }

    /// Releases the lock on every node: one bounded attempt, in parallel.
    ///
    /// Returns `Ok` if a majority still held our token and deleted it while
    /// the lock was valid. Keys that could not be reached expire at their
    /// TTL.
    ///
    /// # Errors
    /// * [`Error::Expired`] if the validity had run out before the call (the
    ///   critical section overran the lock), or the keys were already gone.
    /// * [`Error::Taken`] if another owner holds the key on some nodes.
    /// * [`Error::NoQuorum`] if too few nodes answered.
    pub async fn release(mut self) -> Result<(), Error> {
        self.stop_keeper();
        let expired = self.is_expired();
        let request = Request::Release {
            id: self.id.clone(),
            announce: true,
        };
        let (tally, stragglers) = quorum::decide(&self.core.nodes, &request).await;
        stragglers.finish_in_background();
        self.released = true;
        tracing::debug!(
            resource = %self.resource(),
            agreed = tally.agreed(),
            needed = tally.needed(),
            "release"
        );
        let report = tally.report(&self.core.nodes);
        match (tally.has_majority(), expired) {
            (true, false) => Ok(()),
            (_, true) if report.held_by_others() == 0 => Err(self.expired(report)),
            _ => Err(self.classify(report)),
        }
    }

    /// The error for a report without a majority.
    fn classify(&self, report: Report) -> Error {
        let resource = self.resource().to_owned();
        if report.held_by_others() > 0 {
            Error::Taken { resource, report }
        } else if report.count(|f| *f == NodeFailure::Missing) > 0 {
            Error::Expired { resource, report }
        } else {
            Error::NoQuorum { resource, report }
        }
    }

    fn expired(&self, report: Report) -> Error {
        Error::Expired {
            resource: self.resource().to_owned(),
            report,
        }
    }
}

/// Extends `id` by the TTL of `plan` on a majority of nodes: the new validity
/// deadline, or the votes that did not suffice. Never creates a key.
pub(crate) async fn extend_on_nodes(
    core: &Core,
    id: &Arc<LockId>,
    plan: TtlPlan,
) -> Result<Moment, Report> {
    let start = Moment::now();
    let request = Request::Extend {
        id: id.clone(),
        ttl_ms: plan.ttl_ms,
    };
    let (tally, stragglers) = quorum::decide(&core.nodes, &request).await;
    // Slow nodes still get the extension, so that they agree with the
    // majority for as long as they can.
    stragglers.finish_in_background();
    let valid = quorum::validity(plan.ttl, start.elapsed(), plan.drift)
        .filter(|v| *v > core.options.min_validity);
    tracing::debug!(key = %id.key, agreed = tally.agreed(), needed = tally.needed(), "extend");
    if tally.has_majority() && valid.is_some() {
        Ok(start.after(plan.ttl - plan.drift))
    } else {
        Err(tally.report(&core.nodes))
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.stop_keeper();
        if !self.released {
            tracing::debug!(resource = %self.resource(), "lock dropped: releasing in the background");
            quorum::release_in_background(&self.core.nodes, self.id.clone());
        }
    }
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lock")
            .field("resource", &self.resource())
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}
