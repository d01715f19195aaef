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
//!   [`ConfigError`]: what went wrong and what to fix.
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
//! * `config`, `error`, `clock` (the suspend-aware monotonic clock).
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
