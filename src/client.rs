//! The handle users hold: [`Redlock`], one per process, and the calls that
//! take locks on it, each with its own options ([`LockRequest`]).

use std::fmt;
use std::future::{Future, IntoFuture};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::config::Builder;
use crate::engine::Engine;
use crate::engine::acquire::{self, Call};
use crate::engine::hold::Hold;
use crate::error::Error;
use crate::kinds::Kind;
use crate::kinds::mutex;
use crate::lock::{Held, Lock};

/// A distributed lock manager over N independent Redis nodes.
///
/// Cheap to clone: clones share the nodes and their connections. Make one
/// per process and pass it around. Needs a tokio runtime (locks are taken,
/// kept alive and released by tasks on it).
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
///   of acquisitions until the keys it may have forgotten would have
///   expired, but it cannot see restarts that happened before it first met
///   the node, nor keys other clients took with longer TTLs than ours. Keep a crashed node down for longer than the longest TTL any
///   client uses, or run it with `appendonly yes` and `appendfsync always`.
///
/// See the Redis docs, "Distributed Locks with Redis", for the algorithm.
#[derive(Clone)]
pub struct Redlock {
    engine: Arc<Engine>,
}

impl Builder {
    /// Checks the configuration and builds the [`Redlock`]. Does no I/O:
    /// nodes connect on first use.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad node list or option; its message says
    /// what to fix (and never shows a password).
    pub fn build(self) -> Result<Redlock, Error> {
        let (clients, options) = self.validate()?;
        Ok(Redlock {
            engine: Arc::new(Engine::new(clients, options)),
        })
    }
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
    ///
    /// # Errors
    /// As [`Builder::build`].
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

    /// How many nodes must agree: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.engine.quorum()
    }

    /// Acquires the lock on `resource` for `ttl`, waiting while it is held
    /// elsewhere or too few nodes answer: `.await` it. Chain
    /// [`wait`](LockRequest::wait) or [`retries`](LockRequest::retries) to
    /// bound this call otherwise than the `Redlock`'s defaults
    /// ([`Builder::wait_timeout`], 10 s; [`Builder::retry_count`], 10).
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let lock = redlock
    ///     .lock("invoice-42", Duration::from_secs(5))
    ///     .wait(Duration::from_millis(500))
    ///     .await?;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// While the lock is held by another owner it waits for the release to
    /// be announced, or for the holder's keys to expire, rather than
    /// polling (see [`Builder::wake_on_release`]). An attempt prompted by
    /// the announced release of the holder it waited for does not count as
    /// a retry (losing it means another waiter got the lock), nor do the
    /// quick retries that settle a vote split among waiters that woke
    /// together: the wait deadline bounds those.
    ///
    /// The lock is held for [`Lock::remaining`], less than `ttl` by the time
    /// the acquisition took and the drift allowance. Release it with
    /// [`Lock::release`]; dropping it releases it in the background.
    ///
    /// Cancel-safe: dropping the future mid-flight releases whatever it had
    /// taken, in the background.
    ///
    /// # Errors
    /// [`Error::Config`] for a TTL that cannot work with the options (checked
    /// before any I/O), [`Error::NotAcquired`] when it gave up (saying
    /// whether the retries or the deadline ran out).
    pub fn lock<'a>(&'a self, resource: &'a str, ttl: Duration) -> LockRequest<'a> {
        let options = &self.engine.options;
        LockRequest {
            redlock: self,
            resource,
            ttl,
            call: Call {
                retries: options.retry_count,
                wait: options.wait_timeout,
            },
        }
    }

    /// Makes one attempt to acquire the lock: `lock(resource, ttl)` with no
    /// retries.
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, resource: &str, ttl: Duration) -> Result<Lock, Error> {
        self.lock(resource, ttl).retries(0).await
    }

    /// Runs `work` while holding the lock on `resource`: acquires it like
    /// [`lock`](Self::lock), keeps it alive in the background
    /// ([`Lock::keep_alive`]) however long `work` takes, and releases it when
    /// `work` returns or panics (the panic then goes on).
    ///
    /// `work` gets a [`Held`] view that tells it when the lock has been
    /// lost: it is not cancelled, it is told, and must stop touching the
    /// protected resource. A failure to release at the end is logged, not
    /// returned (the keys expire at their TTL).
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
    /// As [`lock`](Self::lock) when the lock could not be acquired, and
    /// [`Error::Lost`] when it was lost before `work` returned: what `work`
    /// returned is then dropped, as it may have acted without the lock.
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
        let lost = lock.is_lost();
        if let Err(e) = lock.release().await {
            tracing::warn!(resource, error = %e, "with_lock: release at the end failed");
        }
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(_) if lost => Err(Error::Lost {
                resource: resource.to_owned(),
            }),
            Ok(value) => Ok(value),
        }
    }

    /// Takes a lock of `kind` on `resource` for one call.
    async fn acquire(
        &self,
        kind: Arc<dyn Kind>,
        resource: &str,
        ttl: Duration,
        call: Call,
    ) -> Result<Lock, Error> {
        let options = &self.engine.options;
        let plan = options.plan(ttl)?;
        let key: Box<str> = format!("{}{resource}", options.key_prefix).into();
        let (id, deadline) =
            acquire::acquire(&self.engine, &kind, resource, key, plan, call).await?;
        let hold = Hold::new(
            self.engine.clone(),
            kind,
            id,
            resource.into(),
            plan,
            deadline,
        );
        Ok(Lock::new(hold))
    }
}

/// One call to [`Redlock::lock`], with its options: `.await` it to get the
/// [`Lock`].
#[must_use = "a LockRequest does nothing until it is awaited"]
pub struct LockRequest<'a> {
    redlock: &'a Redlock,
    resource: &'a str,
    ttl: Duration,
    call: Call,
}

impl LockRequest<'_> {
    /// How long this call may wait in all, instead of
    /// [`Builder::wait_timeout`]. It gives up rather than start an attempt
    /// that could end after this (one that starts less than a node timeout
    /// before it); the first attempt is always made.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.call.wait = wait;
        self
    }

    /// How many retries this call may make after its first attempt, instead
    /// of [`Builder::retry_count`]; `0` is [`Redlock::try_lock`].
    pub fn retries(mut self, retries: u32) -> Self {
        self.call.retries = retries;
        self
    }
}

impl<'a> IntoFuture for LockRequest<'a> {
    type Output = Result<Lock, Error>;
    type IntoFuture = BoxFuture<'a, Result<Lock, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        self.redlock
            .acquire(mutex::kind(), self.resource, self.ttl, self.call)
            .boxed()
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redlock")
            .field(
                "nodes",
                &self
                    .engine
                    .nodes
                    .iter()
                    .map(|n| n.name())
                    .collect::<Vec<_>>(),
            )
            .field("quorum", &self.quorum())
            .field("options", &self.engine.options)
            .finish()
    }
}

impl fmt::Debug for LockRequest<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRequest")
            .field("resource", &self.resource)
            .field("ttl", &self.ttl)
            .field("call", &self.call)
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
