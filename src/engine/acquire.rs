//! The acquire loop: attempts, retries, and waiting for a release.
//!
//! Each attempt draws a fresh random token, so that a late rollback of one
//! attempt can never delete the key of the next. The attempt is guarded while
//! it runs: if the caller drops the future mid-flight (under
//! `tokio::time::timeout`, or in a `select!`), the guard releases the
//! attempt's token on every node in the background, so no key is left behind
//! for its TTL.
//!
//! Between attempts the loop waits for its turn. With
//! [`wake_on_release`](crate::Builder::wake_on_release) on (the default), the
//! first failed attempt subscribes to the resource's wake-up channel
//! ([`wait`](crate::wait)) and tries once more at once, queueing on
//! the nodes (`wait::queue`; a release made before the subscription would
//! not be heard), unless the channel was already listening before the
//! first attempt (it lingers a while after a wait, and other waiters keep
//! it); later failures sleep until a release wakes this waiter (its turn
//! in the queue) or the holder's keys expire, whichever comes first
//! ([`pause`](crate::wait::pause::pause)): no polling while the lock is
//! held, no retry pause between a release and the next holder, and no herd
//! of waiters trying at every release. A call that ends without the lock
//! leaves the queues.
//!
//! Every call is bounded: by its retry count and by its wait deadline (ten
//! seconds unless the caller or the `Redlock` says otherwise), since some
//! retries are free (see [`Budget`]). A failed attempt whose nodes failed in
//! a way waiting does not mend, so many that no majority is left
//! (`Tally::outage_lasts`), ends the call at once
//! ([`GaveUp::Unavailable`]).

use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use super::{Attempt, Engine};
use crate::clock::Moment;
use crate::error::{Error, GaveUp};
use crate::kinds::Kind;
use crate::metrics;
use crate::proto::quorum::{Plan, Seen};
use crate::proto::{Keys, LockId};
use crate::wait::{Listener, Waiting, Wake};
use crate::who::Who;

/// How long one call may try.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Budget {
    /// Retries after the first attempt. Attempts prompted by the announced
    /// release of the holder the caller waited for (another waiter won:
    /// progress, not polling) and the quick ones that settle a split vote
    /// among waiters do not count.
    pub(crate) retries: u32,
    /// How long the call may wait in all.
    pub(crate) wait: Duration,
}

/// An acquired lock: its identity, validity deadline and fencing token.
pub(crate) struct Acquired {
    pub(crate) id: Arc<LockId>,
    pub(crate) deadline: Moment,
    pub(crate) fence: Option<u64>,
}

/// Acquires `keys` for `plan.ttl`, as taker `who` (see [`who`](crate::who)).
pub(crate) async fn acquire(
    engine: &Arc<Engine>,
    kind: &Arc<dyn Kind>,
    resource: &str,
    keys: Keys,
    plan: Plan,
    call: Budget,
    who: &crate::who::Id,
) -> Result<Acquired, Error> {
    let options = &engine.options;
    let deadline = Moment::now().after(call.wait);
    let mut attempts = 0;
    let mut counted = 0;
    let mut free = false;
    let mut waiting = Waiting::new(&engine.waiters, options);
    let mut queued = Queued {
        engine,
        keys: &keys,
        member: None,
    };
    if options.wake_on_release {
        // Channels still subscribed (by other waiters, or lingering after
        // the last wait) are listened to from the first attempt on.
        waiting.channel = engine.waiters.listening(&keys).map(Arc::new);
    }
    loop {
        attempts += 1;
        if !free {
            counted += 1;
        }
        // What the channel had seen before the attempt: a release during
        // the attempt still wakes the wait after it.
        let listened = waiting.channel.clone();
        let mut mark = listened.as_deref().map(Listener::mark);
        let id = LockId::by(keys.clone(), who);
        let cancel_guard = CancelGuard {
            engine,
            kind,
            id: &id,
            plan: &plan,
        };
        let span = tracing::debug_span!("redquorum.acquire", resource, attempt = attempts);
        let waiter = listened.as_deref().map(Listener::member);
        if let Some(listener) = &listened {
            // It may queue on the nodes: if the call ends without the lock
            // (cancelled mid-attempt too), it leaves the queues.
            queued.member = Some(listener.clone());
        }
        let attempt = engine
            .attempt(kind, &id, &plan, waiter)
            .instrument(span)
            .await;
        // Completed: held, or already rolled back.
        std::mem::forget(cancel_guard);
        let (tally, took) = match attempt {
            Attempt::Won { deadline, fence } => {
                // Taken out of the queues by the nodes that said yes, and
                // by `Engine::attempt` on the others.
                queued.member = None;
                return Ok(Acquired {
                    id,
                    deadline,
                    fence,
                });
            }
            Attempt::Failed(tally, took) => {
                kind.refused(&tally);
                if let Some(mark) = &mut mark {
                    // Copies of the release that woke this attempt wake
                    // nothing more if a majority named another holder:
                    // queued there again, its release wakes this wait
                    // (not past a writer's intent, nor for a leaving or a
                    // joining: see `Tally::passed`).
                    mark.settle(|token| tally.passed(token));
                }
                (tally, took)
            }
        };
        let give_up = |gave_up| {
            let cause = match gave_up {
                GaveUp::Retries => "retries",
                GaveUp::Deadline => "deadline",
                GaveUp::Mismatch => "mismatch",
                GaveUp::Unavailable => "unavailable",
            };
            metrics::gave_up(kind.name(&id), cause);
            Error::NotAcquired {
                resource: resource.to_owned(),
                attempts,
                gave_up,
                report: engine.report(&tally),
                holder: match tally.seen() {
                    // A reentrant owner is told as `holds:<token>`.
                    Seen::Holder { token, .. } => {
                        Who::from_token(token.strip_prefix("holds:").unwrap_or(&token))
                            .map(Box::new)
                    }
                    _ => None,
                },
            }
        };
        if tally.mismatched() {
            return Err(give_up(GaveUp::Mismatch));
        }
        // An outage that waiting does not mend (credentials, an unknown
        // master, a host name that does not resolve, TLS) ends the call
        // now, whatever its wait: a retry would only hide it until the
        // wait ran out. Refused connections are not such: a node
        // restarting refuses for a while.
        if tally.outage_lasts() {
            return Err(give_up(GaveUp::Unavailable));
        }
        if counted > call.retries {
            return Err(give_up(GaveUp::Retries));
        }
        // How long a new attempt may still start: one that starts later
        // could end after the deadline.
        let left = deadline.remaining().saturating_sub(options.node_timeout);
        let pause = waiting
            .pause(&keys, &tally, took, mark.as_ref(), left)
            .await;
        // Without a release to hope for, do not sleep into the deadline.
        if pause.sleep >= left && waiting.awaited.is_none() {
            return Err(give_up(GaveUp::Deadline));
        }
        let woken = async {
            match (&waiting.channel, &mark) {
                (Some(channel), Some(mark)) => channel.wake(mark).await,
                _ => std::future::pending().await,
            }
        };
        // The holder we waited for let go: the next attempt is not a poll.
        let let_go = tokio::select! {
            wake = woken => wake == Wake::Released,
            () = tokio::time::sleep(pause.sleep.min(left)) => false,
        };
        free = let_go || !pause.counted;
        if deadline.remaining() <= options.node_timeout {
            return Err(give_up(GaveUp::Deadline));
        }
    }
}

/// A call that may have queued for its keys on the nodes (see
/// `wait::queue`): unless it got the lock, it leaves the queues when it
/// ends, however it ends (given up, failed, or dropped).
struct Queued<'a> {
    engine: &'a Engine,
    keys: &'a Keys,
    member: Option<Arc<Listener>>,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if let Some(listener) = &self.member {
            self.engine.leave(self.keys, listener.member());
        }
    }
}

/// Releases an attempt's token on every node if the attempt is dropped
/// before it completes. Completed attempts `forget` it.
struct CancelGuard<'a> {
    engine: &'a Engine,
    kind: &'a Arc<dyn Kind>,
    id: &'a Arc<LockId>,
    plan: &'a Plan,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        tracing::debug!(key = %self.id.key(), "acquire cancelled: rolling back in the background");
        self.engine
            .release_in_background(self.kind, self.id, self.plan);
    }
}
