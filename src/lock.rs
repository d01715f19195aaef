//! The handles on a held lock: [`Lock`], which owns it, and [`Held`], a
//! cheap view of the same lock for the code it protects.
//!
//! Both read one shared state (see the engine's `handle`), so they always
//! agree: how long the lock is still valid, and whether it is lost. Lost
//! means its validity ran out (read from the suspend-aware clock on every
//! question, whether or not the watchdog got to run), or it was released or
//! dropped, or an extension found that a majority no longer holds it.
//!
//! Dropping a lock without releasing it releases it in the background (when
//! a tokio runtime is running; otherwise its keys expire at their TTL), and
//! so does dropping a release before its votes are counted.

use std::fmt;
use std::time::Duration;

use crate::engine::handle::Handle;
use crate::error::Error;

/// A held lock. Release it with [`release`](Lock::release); dropping it
/// releases it in the background.
#[must_use = "dropping a Lock releases it at once"]
pub struct Lock {
    /// The lock's state, shared with its [`Held`] views and its watchdog,
    /// whose handle it also keeps once started. It notes, too, when a
    /// [`release`](Lock::release) round has been decided: until then, a
    /// drop (of the lock, or of a release cancelled mid-flight) releases in
    /// the background.
    handle: Handle,
}

/// A view of a held lock: how long it is still valid, and whether it has
/// been lost. Cheap to clone; every clone, and the [`Lock`] it came from,
/// agree. Get one from [`Lock::keep_alive`] or [`Lock::held`].
#[derive(Clone)]
pub struct Held {
    handle: Handle,
}

impl Lock {
    pub(crate) fn new(handle: Handle) -> Lock {
        Lock { handle }
    }

    /// The resource this lock is on.
    pub fn resource(&self) -> &str {
        self.handle.resource()
    }

    /// The random token that marks this holder on the nodes (40 hex digits).
    pub fn token(&self) -> &str {
        self.handle.token()
    }

    /// The fencing token of a fenced lock
    /// ([`LockRequest::fenced`](crate::LockRequest::fenced)); `None` for
    /// other locks. Greater than the token of every lock on this resource
    /// handed out before this one; the same for this lock's whole life,
    /// extensions included. Pass it with every write to the protected
    /// storage, and have the storage refuse a token lower than the highest
    /// it has seen: that is what stops a holder paused past its validity.
    pub fn fence(&self) -> Option<u64> {
        self.handle.fence()
    }

    /// How long the lock is still valid: the TTL of the last acquisition or
    /// extension, less the time it took and the drift allowance, less the
    /// time since. Zero once lost.
    ///
    /// Check it before acting on the protected resource; a process pause
    /// between the check and the act is not covered (see
    /// [`Redlock`](crate::Redlock) on pauses and fencing).
    pub fn remaining(&self) -> Duration {
        self.handle.remaining()
    }

    /// Whether the validity has run out (or the lock was lost): the same as
    /// [`is_lost`](Self::is_lost).
    pub fn is_expired(&self) -> bool {
        self.handle.is_lost()
    }

    /// Whether the lock is lost: its validity ran out, or the watchdog found
    /// that a majority no longer holds it. Once lost, it stays lost.
    pub fn is_lost(&self) -> bool {
        self.handle.is_lost()
    }

    /// A [`Held`] view of this lock, to hand to the code it protects.
    pub fn held(&self) -> Held {
        Held {
            handle: self.handle.clone(),
        }
    }

    /// Keeps the lock alive in the background: a watchdog task extends it by
    /// its TTL every `ttl × keep_alive_fraction`
    /// ([`Builder::keep_alive_fraction`](crate::Builder::keep_alive_fraction),
    /// a third by default) until it is released or dropped, and in any case
    /// while two node timeouts of validity are left (half the validity,
    /// where that is less): also when called late, with little left.
    /// Extensions are never in flight twice: the watchdog and
    /// [`extend`](Self::extend) take turns, and the watchdog renews with
    /// the TTL of the last of them.
    ///
    /// The returned [`Held`] says when the lock has been lost: check it, or
    /// `select!` on [`Held::lost`], and stop touching the protected resource
    /// then. Nothing is cancelled for you. Calling it again returns another
    /// view of the same lock and watchdog.
    ///
    /// Must be called within a tokio runtime.
    pub fn keep_alive(&mut self) -> Held {
        self.handle.start_keeper();
        self.held()
    }

    /// Extends the lock to `ttl` from now, on a majority of nodes, and
    /// updates [`remaining`](Self::remaining) in place.
    ///
    /// A node whose key is gone (expired, or lost in a restart) is not given
    /// the key back: an extension never resurrects a lock. Nor does it take
    /// validity back: a `ttl` shorter than what is left changes nothing,
    /// on the nodes or here.
    ///
    /// # Errors
    /// * [`Error::Expired`] if the validity had already run out (nothing is
    ///   sent), or the nodes had lost the key.
    /// * [`Error::Taken`] if another owner holds it on some nodes.
    /// * [`Error::NoQuorum`] if too few nodes confirmed in time.
    /// * [`Error::Config`] for a TTL that cannot work with the options.
    ///
    /// A failed extension deletes nothing: the lock stays held until its old
    /// validity ends, and the call may be tried again.
    pub async fn extend(&mut self, ttl: Duration) -> Result<(), Error> {
        let plan = self.handle.engine().options.plan(ttl)?;
        self.handle.extend(plan).await
    }

    /// Releases the lock on every node: one bounded attempt, in parallel.
    /// Every [`Held`] view says the lock is lost from the start of the call.
    ///
    /// Returns `Ok` if a majority still held our token and deleted it while
    /// the lock was valid. Each node's answer is waited for while the lock
    /// is valid, up to the connect timeout (not just the node timeout: a
    /// slow "deleted" still counts), and the call returns as soon as a
    /// majority has answered. A node that did not answer (a timeout, a broken
    /// connection) is sent the release again in the background until it
    /// answers or the keys have expired ([`Redlock::drain`](crate::Redlock::drain)
    /// waits for that).
    ///
    /// Cancel-safe: a release dropped before its votes are counted (a
    /// `timeout` around it, say) is finished in the background, as a
    /// dropped lock's is.
    ///
    /// # Errors
    /// * [`Error::ReleasedLate`] if a majority deleted our keys, but the
    ///   validity had run out before the call: the critical section overran
    ///   the lock.
    /// * [`Error::Expired`] if the keys were already gone.
    /// * [`Error::Taken`] if another owner holds the key on some nodes.
    /// * [`Error::NoQuorum`] if too few nodes answered.
    pub async fn release(self) -> Result<(), Error> {
        self.handle.stop_keeper();
        // Only once the round is decided: dropped before, `drop` releases.
        let released = self.handle.release().await;
        self.handle.mark_released();
        released
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        self.handle.stop_keeper();
        self.handle.end_hook();
        if !self.handle.released() {
            tracing::debug!(
                resource = %self.resource(),
                "lock (or its release) dropped: releasing in the background"
            );
            self.handle.release_in_background();
        }
    }
}

impl Held {
    /// Whether the lock has been lost (see [`Lock::is_lost`]). Once lost,
    /// it stays lost; a released or dropped lock is lost.
    pub fn is_lost(&self) -> bool {
        self.handle.is_lost()
    }

    /// Resolves when the lock is lost — at the latest when its validity
    /// runs out, whether or not the watchdog ran; never, while it is kept.
    /// Use it in a `tokio::select!` against the work the lock protects.
    pub async fn lost(&self) {
        self.handle.lost().await;
    }

    /// How long the lock is still valid; zero once lost.
    pub fn remaining(&self) -> Duration {
        self.handle.remaining()
    }

    /// The resource of the lock.
    pub fn resource(&self) -> &str {
        self.handle.resource()
    }

    /// The lock's fencing token (see [`Lock::fence`]).
    pub fn fence(&self) -> Option<u64> {
        self.handle.fence()
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

impl fmt::Debug for Held {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Held")
            .field("resource", &self.resource())
            .field("remaining", &self.remaining())
            .finish_non_exhaustive()
    }
}
