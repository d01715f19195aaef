//! One call's wait: a [`Listener`] on the channels of all its keys at
//! once. A waiter for a multi-resource lock is woken by the release of any
//! of them, and is listening only while it is listening on each. Each
//! `lock()` call that waits is one waiter of its own, numbered, and queues
//! on the nodes under its own name ([`Listener::member`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::queue;
use super::subscriber::{Channel, Snapshot, Wake, lock};

/// The channels of one call's keys, listened to together. Dropping one
/// that was used to wait (or to subscribe) leaves each channel subscribed
/// for [`LINGER`](super::subscriber::LINGER) more; one taken by a call that then never waited
/// ([`Waiters::listening`](super::Waiters::listening), and the first attempt succeeded) does not, so
/// that a resource contended once does not stay subscribed for good.
pub(crate) struct Listener {
    pub(super) channels: Vec<Arc<Channel>>,
    used: AtomicBool,
    /// The number of this wait, and its name in the nodes' queues.
    pub(super) wait: u64,
    member: Box<str>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        for channel in &self.channels {
            lock(&channel.waits).remove(&self.wait);
        }
        if self.used.load(Ordering::Acquire) {
            for channel in &self.channels {
                channel.linger();
            }
        }
    }
}

/// What had happened on each of a [`Listener`]'s channels at some moment.
#[derive(Debug, Clone)]
pub(crate) struct Snapshots(Vec<Snapshot>);

impl Snapshots {
    /// After a failed attempt made since these marks: copies of a release
    /// that had woken the wait by then wake it no more where `passed` says
    /// that the attempt found a majority held by another holder
    /// ([`Tally::passed`](crate::proto::quorum::Tally::passed)): that
    /// majority queued the wait again, and the holder's release will wake
    /// it. A copy wakes the wait again only where a node may have refused
    /// the attempt for the very holder whose release woke it (the release
    /// had not reached it yet, and took the wait out of its queue when it
    /// came): see [`Channel::announce`](super::subscriber::Channel::announce);
    /// and always where the wake-up names no holder (a waiter's leaving, a
    /// reader joining) or the attempt was turned away by a writer's intent
    /// (see `Tally::passed`).
    /// Waking on every copy heard after the mark cost a second attempt,
    /// lost like the first, to most woken waiters that a newcomer beat to
    /// the lock (`handoff` bench, 8 waiters: 885 of 2 353 acquisitions on
    /// one node).
    pub(crate) fn settle(&mut self, passed: impl Fn(&str) -> bool) {
        for mark in &mut self.0 {
            mark.settle(|t| std::str::from_utf8(t).is_ok_and(&passed));
        }
    }
}

impl Listener {
    /// A new wait, numbered `wait`, of the client `client`, on `channels`.
    pub(super) fn new(channels: Vec<Arc<Channel>>, wait: u64, client: &str) -> Listener {
        for channel in &channels {
            lock(&channel.waits).insert(wait);
        }
        Listener {
            channels,
            used: AtomicBool::new(false),
            wait,
            member: queue::member(since_epoch_us(), client, wait).into(),
        }
    }

    /// The name this wait queues under on the nodes (see [`queue`]).
    pub(crate) fn member(&self) -> &str {
        &self.member
    }

    /// See [`Channel::mark`].
    pub(crate) fn mark(&self) -> Snapshots {
        Snapshots(self.channels.iter().map(|c| c.mark(self.wait)).collect())
    }

    /// Whether `token`'s release was announced on any of the channels.
    pub(crate) fn was_announced(&self, token: &str) -> bool {
        self.channels.iter().any(|c| c.was_announced(token))
    }

    /// Resolves when any channel would wake (see [`Channel::wake`]).
    pub(crate) async fn wake(&self, marks: &Snapshots) -> Wake {
        self.used.store(true, Ordering::Release);
        let wakes = self
            .channels
            .iter()
            .zip(&marks.0)
            .map(|(channel, mark)| Box::pin(channel.wake(mark, self.wait)));
        futures::future::select_all(wakes).await.0
    }

    /// Whether every channel heard every release since `marks`.
    pub(crate) fn heard_since(&self, marks: &Snapshots) -> bool {
        self.channels
            .iter()
            .zip(&marks.0)
            .all(|(channel, mark)| channel.heard_since(mark))
    }

    /// Whether every channel is listening.
    pub(crate) fn listening(&self) -> bool {
        self.channels.iter().all(|c| c.listening())
    }

    /// Subscribes every channel (see [`Channel::ensure`]), all at once.
    pub(crate) async fn ensure(&self) {
        self.used.store(true, Ordering::Release);
        futures::future::join_all(self.channels.iter().map(|c| c.ensure())).await;
    }
}

/// Now, in microseconds of the Unix epoch (0 for a clock set before it).
fn since_epoch_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}
