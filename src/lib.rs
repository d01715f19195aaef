//! # redquorum
//!
//! The Redlock algorithm: a distributed lock held on a majority of N
//! independent Redis nodes, for one job, one leader or one writer at a time
//! across a fleet. Async, on a **tokio** runtime.
//!
//! ```no_run
//! use std::time::Duration;
//! use redquorum::Redlock;
//!
//! # async fn run() -> Result<(), redquorum::Error> {
//! let redlock = Redlock::new([
//!     "redis://127.0.0.1:7001",
//!     "redis://127.0.0.1:7002",
//!     "redis://127.0.0.1:7003",
//!     "redis://127.0.0.1:7004",
//!     "redis://127.0.0.1:7005",
//! ])?;
//! let mut lock = redlock.lock("nightly-report", Duration::from_secs(10)).await?;
//! // … the critical section; `lock.remaining()` says how much validity is left …
//! lock.extend(Duration::from_secs(10)).await?;
//! lock.release().await?;
//!
//! // Per call: wait at most half a second, and carry a fencing token.
//! let lock = redlock
//!     .lock("nightly-report", Duration::from_secs(10))
//!     .wait(Duration::from_millis(500))
//!     .fenced()
//!     .await?;
//! let token: Option<u64> = lock.fence();
//! # Ok(())
//! # }
//! ```
//!
//! Read the safety caveats on [`Redlock`] before relying on it: Redlock
//! depends on bounded clock drift, bounded process pauses, and nodes that do
//! not forget their keys.
//!
//! ## Contents
//!
//! What you use:
//! * [`Redlock`] (and its [`Builder`]): one per process, over N nodes,
//!   each a server or (feature `sentinel`) a Sentinel-managed primary
//!   ([`Builder::sentinel_node`]); takes locks with
//!   [`lock`](Redlock::lock), [`try_lock`](Redlock::try_lock),
//!   [`with_lock`](Redlock::with_lock), and sets of resources, all or none,
//!   with [`lock_all`](Redlock::lock_all).
//! * [`LockRequest`]: one call's options — [`wait`](LockRequest::wait),
//!   [`retries`](LockRequest::retries), [`reentrant`](LockRequest::reentrant)
//!   holds for an owner, [`fenced`](LockRequest::fenced) locks with a
//!   fencing token, one of k [`permits`](LockRequest::permits) of a
//!   semaphore, and [`with`](LockRequest::with) to run work under it.
//! * [`Lock`]: a held lock — remaining validity, extend, release,
//!   [`keep_alive`](Lock::keep_alive); [`Held`]: a view of it for the code
//!   it protects, saying when it is lost.
//! * Leader election: [`campaign`](Redlock::campaign) for leadership of a
//!   name ([`Campaign`], then a [`Leadership`] with its term),
//!   [`leader`](Redlock::leader) to see who leads ([`Leader`]), and
//!   [`observe`](Redlock::observe) for a [`Stream`](futures::Stream) of
//!   every leadership ([`Observer`], [`Observed`]).
//! * For operators: [`status`](Redlock::status), what every node holds for
//!   a resource ([`Status`]), and [`release_token`](Redlock::release_token),
//!   clearing a stale lock by its token.
//! * [`Error`], with the per-node [`Report`] and [`NodeFailure`]s, and
//!   [`ConfigError`]: what went wrong and what to fix;
//!   [`is_contended`](Error::is_contended) tells a lock held elsewhere from
//!   an outage ([`is_unavailable`](Error::is_unavailable)).
//! * [`Who`] took a lock (and its [`Process`]): read from its token and
//!   the record its taker left on the nodes, by [`Status::taken_by`] and
//!   [`Error::NotAcquired`].
//!
//! ## Words
//!
//! One word per concept, here, in every doc and in the code:
//!
//! | word | means |
//! |---|---|
//! | **node** | one of the N independent parts a [`Redlock`] counts votes on: a server, a Sentinel-managed primary, or a Redis Cluster |
//! | **server** | one `redis-server` (or Valkey) process; the tests' and the command's local ones are [`local_servers`] (`redquorum servers up`) |
//! | **cluster** | a Redis Cluster, only |
//! | **resource** | the name a lock is on; its **key** is the prefix and the name, on every node |
//! | **token** | the random 40 hex digits that mark one acquisition on the nodes ([`Lock::token`]); it also says [`Who`] took it and when |
//! | **fencing token** | the number a fenced lock carries, greater than every earlier holder's ([`Lock::fence`]) |
//! | **lock** | one acquisition a majority granted, and the handle on it ([`Lock`]); [`Held`] is a view of it for the code it protects |
//! | **holder** | whoever a key names on a node: a token, a reentrant owner, readers, permit holders; [`Holding`] is what one node holds for a resource |
//! | **hold** | one take of a reentrant lock, by an **owner** (who may take it again); a **share** is one reader's part of a read lock; a **permit** one of a semaphore's k slots |
//! | **contended** | refused because another holder has the key ([`NodeFailure::Contended`]); **unavailable**: too few nodes could answer ([`Error::is_unavailable`]) |
//! | **validity** | how long a lock is sure to be held: its TTL less the time its acquisition took and the drift allowance ([`Lock::remaining`]) |
//! | **waiter** | one call that waits for a lock; it queues on the nodes, and a release **announces** itself to the first waiter |
//! | **quarantine** | the time the restart guard gives a node no vote, after it may have forgotten keys |
//! | **leader** | the holder of an election's lock; its **term** is the lock's fencing token ([`Leadership::term`]) |
//!
//! How it works, one layer per module, each using only those below it:
//! * `client`, `lock` and `election`: the handles above.
//! * `kinds`: what a lock is on one node — its Lua scripts and how a node's
//!   reply becomes a vote: `kinds::mutex` (one resource or a set),
//!   `kinds::reentrant`, `kinds::fenced`, `kinds::semaphore`,
//!   `kinds::rwlock`, `kinds::election` (the fenced lock and who leads). Each states
//!   its guarantee and why it holds. `kinds::keyspace` is the one owner of
//!   what a key is, for every kind; `kinds::admin` reads and clears any
//!   kind's key through it.
//! * `engine`: the acquire loop (attempt, decide, validity, rollback,
//!   cancel safety, retries) and the watchdog — the same for every kind.
//! * `wait`: waiting for a release over pub/sub — the subscriber
//!   connections and channels, the waiters' queue on the nodes and its
//!   scripts, the waiter's pause, leaving the queues.
//! * `proto`: the commands kinds build and the nodes run;
//!   `proto::quorum`, the quorum rule and all its arithmetic (majority,
//!   validity, drift), with no Redis in it.
//! * `net`: one node — a connection slot made in the background, the
//!   per-request bound, replacing silent connections, the restart guard;
//!   `net::topology`, what a node is (one server, a Sentinel-managed
//!   primary, a Redis Cluster): its URL, its redaction, its connections.
//! * `config`, `error`, `clock` (the suspend-aware monotonic clock),
//!   `keys` (a resource's key), `who` (a token's taker and its record).
//! * `local_servers` (feature `local-servers`): local `redis-server`
//!   processes for tests, examples and benchmarks; `local_sentinel`, the
//!   same for Sentinel-managed nodes (a primary and a replica each, and
//!   three sentinels).

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod client;
mod clock;
#[cfg(all(test, feature = "cluster", feature = "local-servers"))]
mod cluster_tests;
mod config;
mod election;
mod engine;
mod error;
mod info;
mod keys;
mod kinds;
mod lock;
mod metrics;
mod net;
mod proto;
mod wait;
mod who;

#[cfg(feature = "local-servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "local-servers")))]
pub mod local_sentinel;
#[cfg(feature = "local-servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "local-servers")))]
pub mod local_servers;

#[cfg(feature = "local-servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "local-servers")))]
pub mod local_redis_cluster;

pub use client::{LockRequest, Redlock};
pub use config::Builder;
pub use election::{Campaign, Leader, Leadership, MAX_LEADER_VALUE, Observed, Observer};
pub use error::{ConfigError, Error, GaveUp, NodeFailure, Report};
pub use kinds::admin::{Holding, NodeState, Status};
pub use lock::{Held, Lock};
pub use proto::quorum::MAX_TTL;
pub use who::{Process, Who};

/// How many `MOVED` and `ASK` answers for keys of a slot this process has
/// followed on cluster nodes: for the crate's own tests, not part of the
/// API.
#[cfg(feature = "cluster")]
#[doc(hidden)]
pub use net::topology::cluster::redirects_followed as cluster_redirects_followed;

/// The README's examples, compiled with the doctests so that the README
/// cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
