//! The coordinator: [`Redlock`] holds the nodes and the options, and takes
//! locks with [`lock`](Redlock::lock) and [`try_lock`](Redlock::try_lock).
//!
//! Each attempt draws a fresh random token, so that a late rollback of one
//! attempt can never delete the key of the next. The attempt is guarded while
//! it runs: if the caller drops the `lock()` future mid-flight (under
//! `tokio::time::timeout`, or in a `select!`), the guard releases the
//! attempt's token on every node in the background, so no key is left behind
//! for its TTL.
//!
//! Between attempts, [`lock`](Redlock::lock) waits for its turn. With
//! [`wake_on_release`](crate::Builder::wake_on_release) on (the default),
//! the first failed attempt subscribes to the resource's release channel
//! ([`crate::waiters`]) and tries once more at once; later failures sleep
//! until a release is announced or the holder's keys expire, whichever
//! comes first ([`quorum::pause`]): no polling while the lock is held, and no
//! retry pause between a release and the next holder.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::FutureExt;
use tracing::Instrument;

use crate::clock::Moment;
use crate::config::{Builder, Options};
use crate::error::{Error, GaveUp};
use crate::keep_alive::Held;
use crate::lock::Lock;
use crate::node::Node;
use crate::quorum::{self, Attempt, LockId, Pause, Seen, Tally};
use crate::waiters::{Channel, Mark, Waiters, Wake};

/// A distributed lock manager over N independent Redis nodes.
///
/// Cheap to clone: clones share the nodes and their connections. Make one
/// per process and pass it around.
///
/// # What it guarantees, and what it does not
///
/// While a majority of nodes run and keep their keys, at most one holder at a
/// time believes it holds a resource *within the validity the lock reports*
/// ([`Lock::remaining`]). That belief rests on timing:
///
/// * **Clock drift.** Each node expires the key on its own clock. The
///   validity is cut by `ttl × drift_factor + 2 ms` to absorb rate
///   differences; a node clock that jumps (NTP step, manual change) can
///   still expire a key early.
/// * **Process pauses.** A holder that is paused (GC, swapping, SIGSTOP,
///   a long `await`) past its validity may act after the lock has moved
///   on. Check [`Lock::remaining`] before acting, and where correctness
///   matters, have the protected resource check a fencing token (see
///   Kleppmann, "How to do distributed locking").
/// * **Restarts without persistence.** A node restarted with no persistence
///   forgets the keys it granted and may grant them again. The restart
///   guard ([`Builder::restart_guard`], on by default) keeps such a node out
///   of acquisitions until the longest TTL this `Redlock` has asked for has
///   passed since the restart, but it cannot see restarts that happened
///   before it first met the node, nor keys other clients took with longer
///   TTLs. Keep a crashed node down for longer than the longest TTL any
///   client uses, or run it with `appendonly yes` and `appendfsync always`.
///
/// See the Redis docs, "Distributed Locks with Redis", for the algorithm.
#[derive(Clone)]
pub struct Redlock {
    core: Arc<Core>,
}

/// What locks share: the nodes, the options, and the waiters' subscriptions.
pub(crate) struct Core {
    pub(crate) nodes: Vec<Node>,
    pub(crate) options: Options,
    waiters: Waiters,
}

impl Redlock {
    /// A lock manager over the given nodes, with default options (see
    /// [`Builder`]). Does no I/O; nodes connect on first use.
    ///
    /// ```
    /// let redlock = redquorum::Redlock::new([
    ///     "redis://127.0.0.1:7001",
    ///     "redis://127.0.0.1:7002",
    ///     "redis://127.0.0.1:7003",
    /// ])?;
    /// # Ok::<(), redquorum::Error>(())
    /// ```
    pub fn new<I, S>(urls: I) -> Result<Redlock, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        Builder::default().nodes(urls).build()
    }

    /// A [`Builder`] for the other options.
    pub fn builder() -> Builder {
        Builder::default()
    }

    pub(crate) fn from_parts(clients: Vec<redis::Client>, options: Options) -> Redlock {
        let waiters = Waiters::new(
            &clients,
            options.node_timeout,
            quorum::quorum(clients.len()),
        );
        // The restart guard's record of the longest TTL asked for, shared by
        // the nodes: any of them may have granted a key with it.
        let longest_ttl = options.restart_guard.then(|| Arc::new(AtomicU64::new(0)));
        let nodes = clients
            .into_iter()
            .map(|c| Node::new(c, options.node_timeout, longest_ttl.clone()))
            .collect();
        Redlock {
            core: Arc::new(Core {
                nodes,
                options,
                waiters,
            }),
        }
    }

    /// How many nodes must agree: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        quorum::quorum(self.core.nodes.len())
    }

    /// Acquires the lock on `resource` for `ttl`, waiting while it is held
    /// elsewhere or too few nodes answer, up to the retry count and the wait
    /// deadline ([`Builder::retry_count`], [`Builder::wait_timeout`]; the
    /// error says which one ended it).
    ///
    /// While the lock is held by another owner it waits for the release to
    /// be announced, or for the holder's keys to expire, rather than
    /// polling (see [`Builder::wake_on_release`]). An attempt prompted by
    /// the announced release of the holder it waited for does not count as
    /// a retry (losing it means another waiter got the lock), nor do the
    /// quick retries that settle a vote split among waiters that woke
    /// together. Under steady contention,
    /// bound the wait with [`Builder::wait_timeout`].
    ///
    /// The lock is held for [`Lock::remaining`], less than `ttl` by the time
    /// the acquisition took and the drift allowance. Release it with
    /// [`Lock::release`]; dropping it releases it in the background.
    ///
    /// Cancel-safe: dropping this future mid-flight releases whatever it had
    /// taken, in the background.
    ///
    /// # Errors
    /// [`Error::Config`] for a TTL that cannot work with the options (checked
    /// before any I/O), [`Error::NotAcquired`] when it gave up.
    pub async fn lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(resource, ttl, self.core.options.retry_count)
            .await
    }

    /// Makes one attempt to acquire the lock, like [`lock`](Self::lock) with
    /// no retries.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.acquire(resource, ttl, 0).await
    }

    /// Runs `work` while holding the lock on `resource`: acquires it like
    /// [`lock`](Self::lock), keeps it alive in the background
    /// ([`Lock::keep_alive`]) however long `work` takes, and releases it when
    /// `work` returns or panics (the panic then goes on).
    ///
    /// `work` gets a [`Held`] handle that tells it when the lock has been
    /// lost: it is not cancelled, it is told, and must stop touching the
    /// protected resource. Returns what `work` returned; a failure to release
    /// at the end is logged, not returned (the keys expire at their TTL).
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let rows = redlock
    ///     .with_lock("reindex", Duration::from_secs(10), |held| async move {
    ///         let mut rows = 0;
    ///         while rows < 1_000_000 && !held.is_lost() {
    ///             rows += 1; // one batch of work
    ///         }
    ///         rows
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`lock`](Self::lock), when the lock could not be acquired.
    pub async fn with_lock<F, Fut, T>(
        &self,
        resource: &str,
        ttl: Duration,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut lock = self.lock(resource, ttl).await?;
        let held = lock.keep_alive();
        let outcome = AssertUnwindSafe(work(held)).catch_unwind().await;
        if let Err(e) = lock.release().await {
            tracing::warn!(resource, error = %e, "with_lock: release at the end failed");
        }
        match outcome {
            Ok(value) => Ok(value),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    async fn acquire(&self, resource: &str, ttl: Duration, retries: u32) -> Result<Lock, Error> {
        let options = &self.core.options;
        let plan = options.plan(ttl)?;
        let deadline = options.wait_timeout.map(|w| Moment::now().after(w));
        let key: Box<str> = format!("{}{resource}", options.key_prefix).into();
        let mut attempts = 0;
        // The attempts that count against the retry limit: all but those
        // prompted by an announced release (another waiter got the lock:
        // progress, not polling) and the quick ones that settle a split
        // vote among waiters.
        let mut counted = 0;
        let mut free = false;
        let mut waiting = Waiting::default();
        loop {
            attempts += 1;
            if !free {
                counted += 1;
            }
            // What the channel had seen before the attempt: a release during
            // the attempt still wakes the wait after it.
            let listened = waiting.channel.clone();
            let mark = listened.as_deref().map(Channel::mark);
            let id = LockId::new(key.clone());
            let cancel_guard = CancelGuard {
                core: &self.core,
                id: &id,
            };
            let span = tracing::debug_span!("redquorum.acquire", resource, attempt = attempts);
            let attempt = quorum::acquire(
                &self.core.nodes,
                &id,
                plan.ttl,
                plan.drift,
                options.min_validity,
                listened.is_some(),
            )
            .instrument(span)
            .await;
            // Completed: held, or already rolled back.
            std::mem::forget(cancel_guard);
            let (tally, took) = match attempt {
                Attempt::Held { deadline } => {
                    return Ok(Lock::new(self.core.clone(), id, plan, deadline));
                }
                Attempt::Failed(tally, took) => (tally, took),
            };
            let give_up = |gave_up| Error::NotAcquired {
                resource: resource.to_owned(),
                attempts,
                gave_up,
                report: tally.report(&self.core.nodes),
            };
            if counted > retries {
                return Err(give_up(GaveUp::Retries));
            }
            // How long a new attempt may still start: one that starts later
            // could end after the deadline.
            let left = deadline.map_or(Duration::MAX, |d| {
                d.remaining().saturating_sub(options.node_timeout)
            });
            let pause = waiting
                .pause(&self.core, &key, &tally, took, mark.as_ref(), left)
                .await;
            // Without a release to hope for, do not sleep into the deadline.
            if pause.sleep >= left && waiting.awaited.is_none() {
                return Err(give_up(GaveUp::Deadline));
            }
            let woken = async {
                match (&waiting.channel, &mark) {
                    (Some(channel), Some(mark)) => {
                        channel.wake(mark, waiting.awaited.as_deref()).await
                    }
                    _ => std::future::pending().await,
                }
            };
            // The holder we waited for let go: the next attempt is not a poll.
            let let_go = tokio::select! {
                wake = woken => wake == Wake::Released,
                () = tokio::time::sleep(pause.sleep.min(left)) => false,
            };
            free = let_go || !pause.counted;
            if deadline.is_some_and(|d| d.remaining() <= options.node_timeout) {
                return Err(give_up(GaveUp::Deadline));
            }
        }
    }
}

/// What one `lock()` call keeps between its attempts.
#[derive(Default)]
struct Waiting {
    /// The release channel, once an attempt has failed (with
    /// `wake_on_release`).
    channel: Option<Arc<Channel>>,
    /// The token of the holder the last attempt saw on a majority.
    awaited: Option<Box<str>>,
    /// Split votes in a row.
    streak: u32,
}

impl Waiting {
    /// How long to wait after a failed attempt, and whether the next one
    /// counts as a retry. `mark` is the channel's state from before the
    /// attempt; `left`, how long a new attempt may still start.
    async fn pause(
        &mut self,
        core: &Core,
        key: &str,
        tally: &Tally,
        took: Duration,
        mark: Option<&Mark>,
        left: Duration,
    ) -> Pause {
        let options = &core.options;
        let Some(channel) = &self.channel else {
            if !options.wake_on_release {
                return Pause {
                    sleep: quorum::retry_delay(options.retry_delay, options.retry_jitter),
                    counted: true,
                };
            }
            // Listen from now on, and try again at once: a release made
            // before the subscription would not be heard. Not a poll.
            let channel = core.waiters.channel(key);
            let _ = tokio::time::timeout(left, channel.ensure()).await;
            self.channel = Some(channel);
            return Pause {
                sleep: Duration::ZERO,
                counted: false,
            };
        };
        let mut seen = tally.seen();
        if let Seen::Holder { token, .. } = &seen {
            if channel.was_announced(token) {
                // Its release is under way (announced by the nodes it has
                // reached; the others follow): like a split, settled in a
                // round trip or two.
                seen = Seen::Contended;
            }
        }
        self.streak = if seen == Seen::Contended {
            self.streak + 1
        } else {
            0
        };
        self.awaited = match &seen {
            Seen::Holder { token, .. } => Some(token.clone()),
            _ => None,
        };
        // Judged on the subscriptions that were there before the attempt:
        // one made since may have missed a release that the attempt did not
        // see either.
        let heard = mark.is_some_and(|mark| channel.heard_since(mark));
        // Mends subscriptions that broke.
        let _ = tokio::time::timeout(left, channel.ensure()).await;
        if !heard && channel.listening() {
            // Listening again: try once more at once, as after the first
            // subscription (counted, so that a flapping node cannot make
            // this loop for ever).
            return Pause {
                sleep: Duration::ZERO,
                counted: true,
            };
        }
        quorum::pause(
            &seen,
            heard,
            took,
            self.streak,
            options.retry_delay,
            options.retry_jitter,
        )
    }
}

/// Releases an attempt's token on every node if the attempt is dropped
/// before it completes. Completed attempts `forget` it.
struct CancelGuard<'a> {
    core: &'a Arc<Core>,
    id: &'a Arc<LockId>,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        tracing::debug!(key = %self.id.key, "acquire cancelled: rolling back in the background");
        quorum::release_in_background(&self.core.nodes, self.id.clone());
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::quorum::Voter;
        f.debug_struct("Redlock")
            .field(
                "nodes",
                &self.core.nodes.iter().map(|n| n.name()).collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum())
            .field("options", &self.core.options)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_ttls_fail_before_any_io() {
        // Nothing listens on port 1: any I/O would fail differently.
        let redlock = Redlock::new(["redis://127.0.0.1:1"]).unwrap();
        for ttl in [Duration::ZERO, Duration::from_millis(50), Duration::MAX] {
            let err = redlock.lock("r", ttl).await.unwrap_err();
            assert!(matches!(err, Error::Config(_)), "{err}");
        }
    }
}
