//! # redquorum
//!
//! The Redlock algorithm: a distributed mutex held on a majority of N
//! independent Redis nodes, for one job, one leader or one writer at a time
//! across a fleet.
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
//! # Ok(())
//! # }
//! ```
//!
//! ## How it works
//!
//! [`Redlock::lock`] sends `SET key token NX PX ttl` to every node at once,
//! each request under its own timeout, and holds the lock when a majority
//! said yes with validity to spare (`ttl − elapsed − drift`). Otherwise it
//! rolls back on every node and tries again after a random pause. Release and
//! extension are compare-and-delete and compare-and-pexpire scripts.
//!
//! Read the safety caveats on [`Redlock`] before relying on it: Redlock
//! depends on bounded clock drift, bounded process pauses, and nodes that do
//! not forget their keys. A node that restarted (and so may have forgotten
//! them) is kept out of acquisitions until its forgotten keys would have
//! expired, as far as this client can tell
//! ([`Builder::restart_guard`](config::Builder::restart_guard)).
//!
//! ## Modules, in the order a request flows
//!
//! * [`config`]: the [`Builder`], its defaults and its checks.
//! * `redlock`: the coordinator, [`Redlock`], and its retry loop.
//! * `quorum`: fan-out to all nodes, counting, early decision, validity.
//! * `node`: one Redis connection, its commands and their timeout, and the
//!   restart guard.
//! * `scripts`: the Lua scripts for release and extension.
//! * `lock`: the guard, [`Lock`]: remaining validity, extend, release, drop.
//! * `waiters`: waiting without polling: waiters subscribe to a release
//!   channel and are woken when the holder lets go.
//! * `keep_alive`: the watchdog that extends a lock in the background, and
//!   the [`Held`] handle that says when it is lost.
//! * [`error`]: [`Error`], [`Report`] and [`NodeFailure`]: what went wrong
//!   and what to fix.
//! * `clock`: the suspend-aware monotonic clock.
//! * `local_cluster` (feature `local-cluster`): starts local `redis-server`
//!   processes for tests, examples and benchmarks.

#![warn(missing_docs)]

mod clock;
pub mod config;
pub mod error;
mod keep_alive;
mod lock;
mod node;
mod quorum;
mod redlock;
mod scripts;
mod waiters;

#[cfg(feature = "local-cluster")]
pub mod local_cluster;

pub use config::{Builder, MAX_TTL};
pub use error::{ConfigError, Error, GaveUp, NodeFailure, Report};
pub use keep_alive::Held;
pub use lock::Lock;
pub use redlock::Redlock;
