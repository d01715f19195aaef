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
use crate::engine::acquire::{self, Budget};
use crate::engine::handle::{Context, Handle};
use crate::error::{ConfigError, Error, Report};
use crate::kinds::admin::{self, Status};
use crate::kinds::spec::Spec;
use crate::kinds::{Kind, OnEnd, fenced, mutex, rwlock};
use crate::lock::{Held, Lock};
use crate::proto::Keys;
use crate::proto::quorum::Tally;

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
///   matters, take a fenced lock ([`LockRequest::fenced`]) and have the
///   protected resource check its token (see Kleppmann, "How to do
///   distributed locking").
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
    /// What its plain locks on one resource share (see [`Context`]).
    plain: Arc<Context>,
    /// The read locks held through it (and its clones), by task: a task
    /// that reads a name is refused a write on it.
    shares: Arc<rwlock::Shares>,
}

impl Builder {
    /// Checks the configuration and builds the [`Redlock`]. Does no I/O:
    /// nodes connect on first use.
    ///
    /// # Errors
    /// [`Error::Config`] for a bad node list or option; its message says
    /// what to fix (and never shows a password).
    pub fn build(self) -> Result<Redlock, Error> {
        let (endpoints, options) = self.validate()?;
        let engine = Arc::new(Engine::new(endpoints, options));
        Ok(Redlock {
            plain: Context::plain(engine.clone(), mutex::kind()),
            engine,
            shares: Arc::default(),
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
    /// While the lock is held by another owner it queues and waits for a
    /// release to wake it, or for the holder's keys to expire, rather than
    /// polling (see [`Builder::wake_on_release`]). An attempt prompted by
    /// a release that woke it does not count as a retry (losing it means
    /// another caller got the lock), nor do the quick retries that settle a
    /// split vote: the wait deadline bounds those.
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
        self.request(Resources::One(resource), ttl)
    }

    /// Acquires every resource of `resources` at once, or none: one lock
    /// on the whole set, for `ttl`. `.await` it, with the same per-call
    /// options as [`lock`](Self::lock).
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// // Move stock between two warehouses: both or neither.
    /// let lock = redlock
    ///     .lock_all(["stock:berlin", "stock:lyon"], Duration::from_secs(5))
    ///     .await?;
    /// // … both are ours …
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// On each node one script takes all the keys or none, and the usual
    /// majority of nodes decides; a failed attempt is rolled back on every
    /// node before it waits, so a set is never held in part and sets cannot
    /// deadlock, in whatever order callers name their resources (names are
    /// sorted and duplicates dropped). A waiter wakes on the release of any
    /// resource of the set. Each resource excludes, and is excluded by,
    /// [`lock`](Self::lock) on the same name. The lock's
    /// [`resource`](Lock::resource) is the names, sorted, joined by `,`.
    ///
    /// One round trip per operation, as for one resource; the keys must all
    /// live on each node (independent nodes, not Redis Cluster).
    ///
    /// # Errors
    /// As [`lock`](Self::lock); [`ConfigError::NoResources`]
    /// for an empty set.
    pub fn lock_all<'a, I, S>(&'a self, resources: I, ttl: Duration) -> LockRequest<'a>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut names: Vec<String> = resources
            .into_iter()
            .map(|r| r.as_ref().to_owned())
            .collect();
        names.sort_unstable();
        names.dedup();
        self.request(Resources::All(names), ttl)
    }

    fn request<'a>(&'a self, resources: Resources<'a>, ttl: Duration) -> LockRequest<'a> {
        let options = &self.engine.options;
        LockRequest {
            redlock: self,
            resources,
            ttl,
            owner: None,
            fenced: false,
            permits: None,
            shared: false,
            label: None,
            call: Budget {
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
        self.lock(resource, ttl).with(work).await
    }

    /// Waits, at most `limit`, until the work this `Redlock` left to run in
    /// the background has finished: releases of locks dropped without
    /// [`Lock::release`], rollbacks of cancelled or failed acquisitions,
    /// requests to the nodes beyond a decided majority, and releases and
    /// rollbacks sent again to nodes that did not answer them. Returns
    /// whether it all finished.
    ///
    /// Call it before the process exits, so that dropped locks are released
    /// now instead of expiring at their TTL:
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) {
    /// // … on shutdown, once the tasks that hold locks have ended …
    /// if !redlock.drain(std::time::Duration::from_secs(2)).await {
    ///     eprintln!("some lock keys will expire at their TTL instead");
    /// }
    /// # }
    /// ```
    ///
    /// A request to an unreachable node is given up after the connect
    /// timeout plus the node timeout; a release or rollback it did not
    /// answer is then sent again (100 ms to 2 s apart) until the node
    /// answers or the lock's keys would have expired (a waiter's leaving of
    /// the queues: until its intent would have, 11 s), so with a node that
    /// stays unreachable `drain` returns `false` at `limit` and those keys
    /// expire at their TTL.
    pub async fn drain(&self, limit: Duration) -> bool {
        tokio::time::timeout(limit, self.engine.drained())
            .await
            .is_ok()
    }

    /// The engine, for the modules built on the client.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }

    /// The options it was built with.
    pub(crate) fn options(&self) -> &crate::config::Options {
        &self.engine.options
    }

    /// What every node holds for `resource`, for an operator or a health
    /// check: the holder's token (or a reentrant owner and its holds), the
    /// key's remaining TTL, and the fencing counter, per node; and whether a
    /// majority agrees on a holder ([`Status::holder`]) or on no lock
    /// ([`Status::is_free`]). Waits for every node, each within the node
    /// timeout. Changes nothing.
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) {
    /// let status = redlock.status("nightly-report").await;
    /// match status.holder() {
    ///     Some(holder) => println!("held: {holder:?}"),
    ///     None if status.is_free() => println!("free"),
    ///     None => println!("no majority agrees: {:?}", status.nodes()),
    /// }
    /// # }
    /// ```
    ///
    /// A snapshot: each node answers at its own moment, and a lock may
    /// move between two answers.
    pub async fn status(&self, resource: &str) -> Status {
        let key = self.key(resource);
        let keys: Keys = Arc::new([key.clone(), fenced::counter_key(&key)]);
        let answers = self.engine.gather(admin::inspect(keys)).await;
        let mut status = Status {
            resource: resource.to_owned(),
            quorum: self.quorum(),
            nodes: self
                .engine
                .nodes
                .iter()
                .zip(answers)
                .map(|(node, a)| (node.name().to_owned(), a.and_then(admin::read_inspect)))
                .collect(),
            processes: Default::default(),
        };
        // Who took them (see `who`): a second round, for the takers seen.
        let ids = status.taker_ids();
        if !ids.is_empty() {
            status.processes = self.engine.processes(&ids).await;
        }
        status
    }

    /// Clears the lock on `resource` that holds `token` (as
    /// [`Lock::token`] gave it, or [`status`](Self::status) shows it), on
    /// every node: for an operator who knows that lock is stale — its
    /// holder died, and waiting out its TTL is not an option.
    /// Compare-and-delete, never a blind delete: a key with another token is
    /// left alone, so a lock taken since is safe. For reentrant holds the
    /// token names one hold, for a semaphore one permit; the key goes with
    /// the last one. The release is announced to waiters.
    ///
    /// Clearing the lock of a holder that is still alive takes it away:
    /// that holder finds out at its next extension or when its validity
    /// ends, and may act meanwhile — a fenced lock's storage still refuses
    /// its writes once a newer token has been used.
    ///
    /// The [`Report`] counts the nodes where the lock was cleared as
    /// agreed; the others say why not (`Missing`: no key there; `Held`: the
    /// key holds another token; or why the node did not answer). Waits for
    /// every node, each within the node timeout.
    ///
    /// # Errors
    /// [`ConfigError::InvalidToken`] for a token that cannot be a lock's
    /// (40 lower-case hex digits), before any I/O.
    pub async fn release_token(&self, resource: &str, token: &str) -> Result<Report, Error> {
        // As LockId draws them: lower-case hex.
        if token.len() != 40
            || !token
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(ConfigError::InvalidToken.into());
        }
        let answers = self
            .engine
            .gather(admin::clear(Arc::new([self.key(resource)]), token))
            .await;
        let mut tally = Tally::new(answers.len());
        for (i, answer) in answers.into_iter().enumerate() {
            tally.record(i, answer.map_or_else(|e| Err(e).into(), admin::read_clear));
        }
        Ok(self.engine.report(&tally))
    }

    /// The Redis key of `resource`.
    pub(crate) fn key(&self, resource: &str) -> Box<str> {
        self.engine.options.key(resource)
    }

    /// Takes a lock of `kind` on `keys` for one call; `resource` names it
    /// in errors and on the [`Lock`]. Every acquisition goes through here:
    /// a write (`shared` false) on a name the calling task reads is refused
    /// here, with nothing sent ([`rwlock`]'s upgrade check).
    #[allow(clippy::too_many_arguments)] // One call's parts, passed once.
    pub(crate) async fn acquire(
        &self,
        kind: Arc<dyn Kind>,
        resource: &str,
        keys: Keys,
        ttl: Duration,
        call: Budget,
        shared: bool,
        label: Option<&str>,
    ) -> Result<Lock, Error> {
        if !shared && self.shares.any() {
            // An upgrade, whatever asks for it (a lock of any kind, a set,
            // a campaign): refused before it waits for its own reader.
            let options = &self.engine.options;
            let read = keys
                .iter()
                .filter_map(|k| options.resource(k))
                .find(|r| self.shares.held_here(r));
            if let Some(read) = read {
                return Err(Error::Upgrade {
                    resource: read.to_owned(),
                });
            }
        }
        let plan = self.engine.options.plan(ttl)?;
        if let Some(key) = keys.iter().find(|k| k.len() > MAX_KEY) {
            return Err(ConfigError::KeyTooLong { bytes: key.len() }.into());
        }
        let who = self.engine.who.id(label);
        let named = keys.clone();
        let acquired =
            match acquire::acquire(&self.engine, &kind, resource, keys, plan, call, &who).await {
                Ok(acquired) => acquired,
                // Never on a successful acquisition: a failed one's holder
                // is named at the end of the call (see `who`).
                Err(Error::NotAcquired {
                    resource,
                    attempts,
                    gave_up,
                    report,
                    holder,
                }) => {
                    let holder = self.engine.name_holder(holder, &named[0], &report).await;
                    return Err(Error::NotAcquired {
                        resource,
                        attempts,
                        gave_up,
                        report,
                        holder,
                    });
                }
                Err(e) => return Err(e),
            };
        // Noted in the task that asked (the request's future runs in it).
        let mark = shared.then(|| Box::new(self.shares.mark(resource)) as Box<dyn OnEnd>);
        let handle = Handle::new(&self.plain, kind, acquired, resource, plan, mark);
        Ok(Lock::new(handle))
    }
}

/// The longest key Redis takes: 512 MB.
const MAX_KEY: usize = 512 << 20;

/// What one call locks.
#[derive(Debug)]
enum Resources<'a> {
    One(&'a str),
    /// Sorted, without duplicates.
    All(Vec<String>),
}

/// One call to [`Redlock::lock`] or [`Redlock::lock_all`], with its
/// options: `.await` it to get the [`Lock`], or run work under it with
/// [`with`](Self::with).
#[must_use = "a LockRequest does nothing until it is awaited"]
pub struct LockRequest<'a> {
    redlock: &'a Redlock,
    resources: Resources<'a>,
    ttl: Duration,
    /// Set for a reentrant lock.
    owner: Option<String>,
    fenced: bool,
    /// Set for a semaphore.
    permits: Option<u32>,
    /// Set for a reader of a read-write lock.
    shared: bool,
    /// What the lock's taker is called (see [`label`](Self::label)).
    label: Option<String>,
    call: Budget,
}

impl<'a> LockRequest<'a> {
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

    /// Makes this a **reentrant** hold for `owner`: an id you choose (a job
    /// id, a request id) that may span tasks and processes. A holder whose
    /// owner already holds the resource gets it at once, as another hold;
    /// other owners, and plain locks on the same resource, are kept out
    /// until every hold of `owner` has been released or has expired.
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let ttl = Duration::from_secs(10);
    /// let outer = redlock.lock("account-9", ttl).reentrant("job-311").await?;
    /// // Deeper in the same job, maybe in another task or process:
    /// let inner = redlock.lock("account-9", ttl).reentrant("job-311").await?;
    /// inner.release().await?; // still held by the outer hold
    /// outer.release().await?; // now free
    /// # Ok(()) }
    /// ```
    ///
    /// Each hold is a [`Lock`] of its own, with its own token, validity,
    /// [`extend`](Lock::extend), [`keep_alive`](Lock::keep_alive) and
    /// release; each take refreshes the key's TTL (never shortening it). One
    /// round trip per operation. Why holds are not counted per node, and
    /// what is guaranteed, is in the README's "Lock kinds".
    ///
    /// # Errors
    /// [`ConfigError::EmptyOwner`] for an
    /// empty id; [`ConfigError::Combination`]
    /// on a [`lock_all`](Redlock::lock_all) of more than one resource, or
    /// with [`fenced`](Self::fenced).
    pub fn reentrant(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Makes this a **fenced** lock: it carries a fencing token
    /// ([`Lock::fence`]), a number greater than that of every lock on the
    /// resource handed out before it, for the protected storage to check.
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let lock = redlock.lock("ledger", Duration::from_secs(10)).fenced().await?;
    /// let token = lock.fence().expect("a fenced lock has a token");
    /// // Every write to the ledger carries `token`; the ledger refuses a
    /// // token lower than the highest it has seen.
    /// # let _ = token;
    /// lock.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// A holder paused past its validity may still write after the lock
    /// has moved on; with the token checked by the storage, its write is
    /// refused. One round trip, as for a plain lock; a second one only when
    /// the nodes' counters disagree (after failures, or a client whose clock
    /// runs ahead): see [`Builder::fence_time_floor`] and the README's
    /// "Fencing tokens" for the guarantee and why it holds.
    ///
    /// # Errors
    /// [`ConfigError::Combination`] on a
    /// reentrant hold or a set of more than one resource.
    pub fn fenced(mut self) -> Self {
        self.fenced = true;
        self
    }

    /// Makes this one of **`permits` permits** of a semaphore: up to
    /// `permits` holders at a time hold the resource, each with a [`Lock`]
    /// of its own (its token, validity, [`extend`](Lock::extend),
    /// [`keep_alive`](Lock::keep_alive), release), and the next one waits
    /// for any of them to let go.
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// // At most three workers call the rate-limited API at once.
    /// let permit = redlock
    ///     .lock("partner-api", Duration::from_secs(30))
    ///     .permits(3)
    ///     .await?;
    /// // … call the API …
    /// permit.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Each permit is one of `permits` slots, each slot a mutex held on a
    /// majority of nodes; why "each node admits `permits` holders" would
    /// not be a semaphore, and what is guaranteed, is in the README's "Lock
    /// kinds". The number belongs to the semaphore: a call that asks for
    /// another one than the holders on the nodes is refused
    /// ([`GaveUp::Mismatch`](crate::GaveUp::Mismatch), with
    /// [`NodeFailure::PermitsMismatch`](crate::NodeFailure::PermitsMismatch)
    /// from each node), never admitted beyond it. A semaphore and other
    /// kinds of lock on the same name exclude each other.
    ///
    /// # Errors
    /// [`ConfigError::Permits`] for 0 or more than 1 024 permits;
    /// [`ConfigError::Combination`] with [`reentrant`](Self::reentrant),
    /// [`fenced`](Self::fenced), or on a set of more than one resource.
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// Makes this a **reader** of a read-write lock: readers share the
    /// resource with each other, and a writer — the plain lock on the same
    /// name — excludes readers and writers.
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let ttl = Duration::from_secs(10);
    /// // Many readers of the configuration at once …
    /// let read = redlock.lock("config", ttl).shared().await?;
    /// // … read it …
    /// read.release().await?;
    /// // … and one writer, with no reader, when it changes.
    /// let write = redlock.lock("config", ttl).await?;
    /// write.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// Each reader's share is a [`Lock`] of its own and ends at its own TTL
    /// (a crashed reader does not live on through the others' renewals). A
    /// writer kept out by readers turns new readers away while it waits,
    /// so it gets in once the current readers end. A task (or, outside any
    /// task, a thread) that holds a read lock and asks this client (or a
    /// clone) to write on the same name — any lock that is not a read, a
    /// set that names it, or a [`campaign`](Redlock::campaign) — is refused
    /// with [`Error::Upgrade`] before anything is sent, since the writer
    /// would wait for its own reader: release the read lock first. Such a
    /// task's next read of the name (a nested read) goes in at once, even
    /// while a writer waits and turns other readers away: turned away, it
    /// would wait for its own first read. Branches of one task (`join!`,
    /// `select!`) count as one: spawn a writer that must wait for a read
    /// lock of its own task's.
    /// A downgrade (asking to read while holding the write lock) is not
    /// detected: the reader waits for the writer, its own, until its wait
    /// deadline; release the write lock first. The guarantee and why it
    /// holds are in the README's "Lock kinds".
    ///
    /// # Errors
    /// [`ConfigError::Combination`] with [`reentrant`](Self::reentrant),
    /// [`fenced`](Self::fenced), [`permits`](Self::permits), or on a set of
    /// more than one resource.
    pub fn shared(mut self) -> Self {
        self.shared = true;
        self
    }

    /// Names what takes this lock, for whoever looks at it: `status` and
    /// another client's [`Error::NotAcquired`] show the label beside the
    /// taker's host, pid and program ([`Who`](crate::Who)). A label names a
    /// role (`"nightly-backup"`), not a call: each one a client uses is
    /// recorded on every node (a small key, see the README's "Who holds
    /// it?"), up to 64 per client; later ones are not recorded, and their
    /// locks show as the client's unlabelled ones. Costs the acquisition
    /// nothing: its token names the label's record, written on each
    /// connection in the background the first time the label is used there.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// Runs `work` while holding the lock: acquires it, keeps it alive in
    /// the background ([`Lock::keep_alive`]) however long `work` takes, and
    /// releases it when `work` returns or panics (the panic then goes on).
    /// [`Redlock::with_lock`] is `lock(resource, ttl).with(work)`; see it
    /// for the details.
    ///
    /// # Errors
    /// As awaiting the request when the lock could not be acquired, and
    /// [`Error::Lost`] when it was lost before `work` returned: what `work`
    /// returned is then dropped, as it may have acted without the lock.
    pub async fn with<F, Fut, T>(self, work: F) -> Result<T, Error>
    where
        F: FnOnce(Held) -> Fut,
        Fut: Future<Output = T>,
    {
        let mut lock = self.await?;
        let held = lock.keep_alive();
        let outcome = AssertUnwindSafe(work(held)).catch_unwind().await;
        let lost = lock.is_lost();
        let resource = lock.resource().to_owned();
        if let Err(e) = lock.release().await {
            tracing::warn!(resource, error = %e, "with_lock: release at the end failed");
        }
        match outcome {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(_) if lost => Err(Error::Lost { resource }),
            Ok(value) => Ok(value),
        }
    }

    /// Refuses a set whose keys fall in several slots when a node is a
    /// Redis Cluster (see [`keys`](crate::keys)).
    fn one_slot(&self, keys: &Keys) -> Result<(), Error> {
        let Resources::All(names) = &self.resources else {
            return Ok(());
        };
        if !self.redlock.engine.options.cluster_keys {
            return Ok(());
        }
        let slots: Vec<u16> = keys
            .iter()
            .map(|k| crate::keys::key_slot(k.as_bytes()))
            .collect();
        if slots.windows(2).all(|w| w[0] == w[1]) {
            return Ok(());
        }
        Err(Error::CrossSlot {
            resources: names.iter().cloned().zip(slots).collect(),
        })
    }

    /// The kind (chosen by its [`Spec`]), its keys and the lock's name,
    /// checked before any I/O.
    fn parts(&self) -> Result<(Arc<dyn Kind>, Keys, String), ConfigError> {
        let options = &self.redlock.engine.options;
        let key = |r: &str| self.redlock.key(r);
        let (keys, resource): (Keys, String) = match &self.resources {
            Resources::One(r) => (Arc::new([key(r)]), (*r).to_owned()),
            Resources::All(names) => (names.iter().map(|r| key(r)).collect(), names.join(",")),
        };
        let kind = Spec {
            keys: &keys,
            resource: &resource,
            owner: self.owner.as_deref(),
            fenced: self.fenced,
            fenced_by_default: options.fenced,
            fence_time_floor: options.fence_time_floor,
            permits: self.permits,
            shared: self.shared,
            reads: &self.redlock.shares,
        }
        .kind()?;
        Ok((kind, keys, resource))
    }
}

impl<'a> IntoFuture for LockRequest<'a> {
    type Output = Result<Lock, Error>;
    type IntoFuture = BoxFuture<'a, Result<Lock, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        async move {
            let (kind, keys, resource) = self.parts()?;
            self.one_slot(&keys)?;
            let label = self.label.as_deref();
            self.redlock
                .acquire(
                    kind,
                    &resource,
                    keys,
                    self.ttl,
                    self.call,
                    self.shared,
                    label,
                )
                .await
        }
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
            .field("resources", &self.resources)
            .field("ttl", &self.ttl)
            .field("owner", &self.owner)
            .field("fenced", &self.fenced)
            .field("permits", &self.permits)
            .field("shared", &self.shared)
            .field("label", &self.label)
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
