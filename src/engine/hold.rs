//! A held lock's shared state: its validity deadline, whether it has ended,
//! the one extension in flight, and the watchdog.
//!
//! Every handle on a lock — the [`Lock`](crate::Lock) itself and each
//! [`Held`](crate::Held) it hands out — reads the same [`Hold`], so they
//! never disagree. A lock is **lost** as soon as any of these is true, and
//! stays lost:
//!
//! * its validity deadline has passed — read from the clock on every
//!   question, so the answer does not wait for the watchdog to run (a busy
//!   or current-thread runtime may not let it);
//! * it was released or dropped;
//! * an extension found that a majority can no longer be had (another
//!   owner's key, or keys gone, on too many nodes).
//!
//! **Extensions never take validity back.** The extension script never
//! shortens a key (see `kinds::mutex`), so every majority that took an
//! extension keeps our keys at least until the deadline that extension
//! produced: the lock's deadline is the latest of them, and a failed or
//! shorter extension leaves it where it was. At most one extension is in
//! flight ([`Hold::extend`] holds a lock for its whole round), so the
//! watchdog and a caller's `extend` take turns, and the watchdog reads the
//! TTL to renew with only when its turn has come: a caller's newer TTL is
//! never overwritten by an older one.
//!
//! **The watchdog** ([`keep_alive`]) extends the lock by its TTL every
//! `ttl × keep_alive_fraction` (a third by default, as Redisson's watchdog
//! does), and in any case while a round can still finish: an extension is
//! *sent* at the latest when two node timeouts of validity are left (one
//! round that times out, and one more), or half the validity, where that
//! is less. The cap is what renews a TTL that is short against the node
//! timeout (a 1 s node timeout with a 1.5 s TTL, say): its extensions are
//! sent with half the validity left, which is plenty for nodes that answer
//! in a few milliseconds, and not non-stop. Below about two node timeouts
//! of TTL, a lock does not survive a majority that answers only near its
//! timeout; from about four, even an extension that timed out can be
//! followed by another in time. The watchdog gives a lock up only when an
//! extension it sent failed, or the validity ran out: an extension that
//! fails for a passing reason (timeouts, connection errors) is tried again
//! soon, for as long as another one can still be sent with a node timeout
//! and a quarter of validity left; past that, the lock is given up while
//! still valid, so that its holder hears it before the validity ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::Moment;
use crate::engine::Engine;
use crate::engine::acquire::Acquired;
use crate::error::{Error, NodeFailure, Report};
use crate::kinds::Kind;
use crate::metrics;
use crate::proto::LockId;
use crate::proto::quorum::{Plan, Tally};

/// What every handle on one held lock shares.
pub(crate) struct Hold {
    pub(crate) engine: Arc<Engine>,
    pub(crate) kind: Arc<dyn Kind>,
    pub(crate) id: Arc<LockId>,
    /// The resource's name, where the key does not give it (a set's names,
    /// or a key that is not the prefix and the name): most locks keep none.
    resource: Option<Box<str>>,
    /// The fencing token, for a fenced lock: it stays the same for the
    /// lock's whole life, extensions included.
    pub(crate) fence: Option<u64>,
    /// The validity deadline, as [`Moment::as_nanos`]; [`ENDED`] once the
    /// lock has ended. Atomics and one `Notify` rather than a `watch`
    /// channel: a held lock is a few hundred bytes less (one process may
    /// hold many thousands).
    deadline: AtomicU64,
    /// Wakes [`Hold::lost`] when the deadline moves or the lock ends.
    changed: Notify,
    /// The TTL of the last acquisition or extension: what the watchdog
    /// renews with.
    plan_ttl_ms: AtomicU64,
    /// Held for the whole round of an extension.
    extending: tokio::sync::Mutex<()>,
}

/// The deadline of a lock that has ended.
const ENDED: u64 = u64::MAX;

impl Hold {
    pub(crate) fn new(
        engine: Arc<Engine>,
        kind: Arc<dyn Kind>,
        acquired: Acquired,
        resource: Box<str>,
        plan: Plan,
    ) -> Arc<Hold> {
        // The key is the prefix and the name: keep no copy of the name.
        let derivable = matches!(&acquired.id.keys[..],
            [key] if key.strip_prefix(engine.options.key_prefix.as_str()) == Some(&*resource));
        let resource = (!derivable).then_some(resource);
        Arc::new(Hold {
            engine,
            kind,
            id: acquired.id,
            resource,
            fence: acquired.fence,
            deadline: AtomicU64::new(acquired.deadline.as_nanos()),
            changed: Notify::new(),
            plan_ttl_ms: AtomicU64::new(plan.ttl_ms),
            extending: tokio::sync::Mutex::new(()),
        })
    }

    /// The validity deadline; now, once the lock has ended.
    fn deadline(&self) -> Moment {
        match self.deadline.load(Ordering::Acquire) {
            ENDED => Moment::now(),
            nanos => Moment::from_nanos(nanos),
        }
    }

    /// Whether the lock has ended (released, dropped, or found lost).
    fn ended(&self) -> bool {
        self.deadline.load(Ordering::Acquire) == ENDED
    }

    /// How long the lock is still valid; zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline().remaining()
    }

    /// Whether the lock is lost: ended, or its deadline has passed.
    pub(crate) fn is_lost(&self) -> bool {
        self.remaining().is_zero()
    }

    /// Resolves when the lock is lost.
    pub(crate) async fn lost(&self) {
        loop {
            // Registered before the deadline is read: a change after the
            // read still wakes us.
            let changed = self.changed.notified();
            let mut changed = std::pin::pin!(changed);
            changed.as_mut().enable();
            let left = self.remaining();
            if left.is_zero() {
                return;
            }
            // In steps of at most a second: tokio's timers stop while the
            // machine is suspended, the deadline's clock does not.
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(left.min(Duration::from_secs(1))) => {}
            }
        }
    }

    /// The lock is lost while held (not released): says why, counts it, and
    /// ends it.
    /// Nothing if it had already ended (a release, or another path, got
    /// there first).
    fn lose(&self, why: std::fmt::Arguments<'_>) {
        if self.end() {
            self.report_lost(why);
        }
    }

    /// Says that the lock was lost while held, and counts it: once per lock,
    /// by whichever path ended it.
    fn report_lost(&self, why: std::fmt::Arguments<'_>) {
        tracing::warn!(key = %self.id.key(), "lock lost: {why}");
        metrics::lost(self.kind.name(&self.id));
    }

    /// Marks the lock as ended: every handle says it is lost from now on.
    /// Whether this call ended it.
    pub(crate) fn end(&self) -> bool {
        let ended = self.deadline.swap(ENDED, Ordering::AcqRel) != ENDED;
        if ended {
            self.changed.notify_waiters();
        }
        ended
    }

    /// Moves the deadline to `deadline` if that is later; says whether it
    /// moved. A lock that has ended, or whose deadline has passed, stays
    /// lost: it is marked ended instead (an extension that got through
    /// after the validity ran out does not make it valid again).
    fn set_deadline(&self, deadline: Moment) -> bool {
        let mut current = self.deadline.load(Ordering::Acquire);
        loop {
            let (new, ran_out) = if current == ENDED {
                return false;
            } else if Moment::from_nanos(current).remaining().is_zero() {
                (ENDED, true)
            } else if deadline.as_nanos() > current {
                (deadline.as_nanos(), false)
            } else {
                return false;
            };
            match self.deadline.compare_exchange_weak(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.changed.notify_waiters();
                    if ran_out {
                        self.report_lost(format_args!(
                            "validity ran out before an extension got through"
                        ));
                    }
                    return !ran_out;
                }
                Err(now) => current = now,
            }
        }
    }

    fn plan(&self) -> Plan {
        let ttl_ms = self.plan_ttl_ms.load(Ordering::Acquire);
        Plan::of_ms(ttl_ms, self.engine.options.drift_factor)
    }

    /// The resource the lock is on.
    pub(crate) fn resource(&self) -> &str {
        match &self.resource {
            Some(resource) => resource,
            None => &self.id.key()[self.engine.options.key_prefix.len()..],
        }
    }

    /// One extension round, the only one in flight: to `plan.ttl`, or, for
    /// the watchdog (`None`), to the TTL of the last acquisition or
    /// extension as of when its turn comes. `None` if the lock was already
    /// lost (nothing sent); the plan used, and the outcome, otherwise.
    async fn extend_once(&self, plan: Option<Plan>) -> Option<(Plan, Result<(), Tally>)> {
        let _alone = self.extending.lock().await;
        if self.is_lost() {
            return None;
        }
        let plan = plan.unwrap_or_else(|| self.plan());
        let start = Moment::now();
        let outcome = self.engine.extend(&self.kind, &self.id, &plan, start).await;
        if outcome.is_err() {
            metrics::extend_failed(self.kind.name(&self.id));
        }
        Some((
            plan,
            outcome.map(|deadline| {
                // The TTL the keys now have: what the watchdog renews with.
                // One shorter than what was left changed nothing.
                if self.set_deadline(deadline) {
                    self.plan_ttl_ms.store(plan.ttl_ms, Ordering::Release);
                }
            }),
        ))
    }

    /// Extends the lock to `plan.ttl` on a majority.
    pub(crate) async fn extend(&self, plan: Plan) -> Result<(), Error> {
        match self.extend_once(Some(plan)).await {
            None => Err(self.gone(Report::default())),
            // Got through, but only after the validity had run out.
            Some((_, Ok(()))) if self.is_lost() => Err(self.gone(Report::default())),
            Some((_, Ok(()))) => Ok(()),
            Some((_, Err(tally))) => Err(self.refused(self.engine.report(&tally))),
        }
    }

    /// Releases the lock on every node; every handle says it is lost from
    /// the start of the call.
    pub(crate) async fn release(&self) -> Result<(), Error> {
        let late = self.is_lost();
        if self.end() && late {
            self.report_lost(format_args!("validity ran out before the release"));
        }
        let tally = self
            .engine
            .release(&self.kind, &self.id, &self.plan())
            .await;
        tracing::debug!(
            resource = %self.resource(),
            agreed = tally.agreed(),
            needed = tally.needed(),
            "release"
        );
        let report = self.engine.report(&tally);
        match (tally.has_majority(), late) {
            (true, false) => Ok(()),
            (true, true) => Err(Error::ReleasedLate {
                resource: self.resource().to_owned(),
                report,
            }),
            (false, _) => Err(self.refused(report)),
        }
    }

    /// Releases in the background, for a handle dropped without release.
    pub(crate) fn release_in_background(&self) {
        let late = self.is_lost();
        if self.end() && late {
            self.report_lost(format_args!("validity ran out before the lock was dropped"));
        }
        self.engine
            .release_in_background(&self.kind, &self.id, &self.plan());
    }

    /// The error for votes without a majority.
    fn refused(&self, report: Report) -> Error {
        if report.held_by_others() > 0 {
            Error::Taken {
                resource: self.resource().to_owned(),
                report,
            }
        } else if report.count(|f| *f == NodeFailure::Missing) > 0 {
            self.gone(report)
        } else {
            Error::NoQuorum {
                resource: self.resource().to_owned(),
                report,
            }
        }
    }

    fn gone(&self, report: Report) -> Error {
        Error::Expired {
            resource: self.resource().to_owned(),
            report,
        }
    }
}

/// How much validity is left, at the latest, when the watchdog sends an
/// extension: two node timeouts, or half the validity of `plan` where that
/// is less (see the module doc).
fn lead(plan: &Plan, node_timeout: Duration) -> Duration {
    (node_timeout * 2).min(plan.best_validity() / 2)
}

/// The least validity with which a failed extension is tried again: one
/// node timeout for the round, and a quarter more for a late timer.
fn last_try(node_timeout: Duration) -> Duration {
    node_timeout + node_timeout / 4
}

/// The watchdog: extends the lock until it is lost or has ended (the task
/// is also aborted by a release or drop).
pub(crate) async fn keep_alive(hold: Arc<Hold>) {
    let options = &hold.engine.options;
    let node_timeout = options.node_timeout;
    let every = |plan: Plan| plan.ttl.mul_f64(options.keep_alive_fraction);
    let mut next = Moment::now().after(every(hold.plan()));
    // The last failure since the last extension that got through.
    let mut failed: Option<Report> = None;
    loop {
        // Sleep until the next extension is due, but send it while there is
        // still time for it (and, after a failure, for another).
        let left = hold.remaining();
        let latest = match &failed {
            None => left.saturating_sub(lead(&hold.plan(), node_timeout)),
            Some(report) => match left.checked_sub(last_try(node_timeout)) {
                Some(room) if !room.is_zero() => room,
                _ => {
                    return hold.lose(format_args!(
                        "an extension failed ({report}), and too little validity is left \
                         for another to finish"
                    ));
                }
            },
        };
        tokio::time::sleep(next.remaining().min(latest)).await;
        if hold.ended() {
            return;
        }
        let started = Moment::now();
        match hold.extend_once(None).await {
            None => {
                return hold.lose(format_args!(
                    "validity ran out before an extension was sent"
                ));
            }
            Some((_, Ok(()))) if hold.is_lost() => {
                return hold.lose(format_args!(
                    "validity ran out before an extension succeeded"
                ));
            }
            Some((plan, Ok(()))) => {
                failed = None;
                next = started.after(every(plan));
            }
            Some((_, Err(tally))) if !tally.recoverable() => {
                let report = hold.engine.report(&tally);
                return hold.lose(format_args!("a majority no longer holds it ({report})"));
            }
            Some((plan, Err(tally))) => {
                let report = hold.engine.report(&tally);
                tracing::debug!(key = %hold.id.key(), %report, "extension failed; trying again");
                failed = Some(report);
                next = Moment::now().after((every(plan) / 4).max(node_timeout));
            }
        }
    }
}
