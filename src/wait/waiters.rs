//! The handle on this `Redlock`'s waiting ([`Waiters`]): the channels its
//! calls wait on, registered by key, and each call's [`Listener`]. The
//! subscriber connections and the channels themselves are in
//! [`subscriber`](super::subscriber); the protocol they serve is in the
//! [module doc of `wait`](super).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::Notify;

use crate::net::Node;
use crate::net::slot::Slot;

use super::listener::Listener;
use super::subscriber::{Channel, Inner, Subscriber, lock};

/// The subscriber connections of one `Redlock`, and the channels waited on.
pub(crate) struct Waiters {
    pub(super) inner: Arc<Inner>,
}

impl Waiters {
    /// The subscriber side of `nodes`: a subscriber connection to each,
    /// made when first needed, under the same limits.
    pub(crate) fn new(nodes: &[Node]) -> Waiters {
        let quorum = crate::proto::quorum::quorum(nodes.len());
        Waiters {
            inner: Arc::new(Inner {
                client: hex::encode(rand::random::<[u8; 8]>()).into(),
                waits: AtomicU64::new(1),
                nodes: nodes
                    .iter()
                    .map(|node| Subscriber {
                        endpoint: node.endpoint().clone(),
                        node: node.clone(),
                        limits: node.limits(),
                        slot: Slot::new(node.limits().connect),
                    })
                    .collect(),
                needed: nodes.len() + 1 - quorum,
                channels: Mutex::default(),
                registered: AtomicUsize::new(0),
                drops: AtomicU64::new(0),
                closed: AtomicBool::new(false),
                closing: Notify::new(),
            }),
        }
    }

    /// The channels of `keys` if every one is already listening (kept
    /// subscribed by other waiters or lingering), so that a call can take
    /// its mark before its first attempt; `None` otherwise, and then
    /// nothing is registered.
    pub(crate) fn listening(&self, keys: &[Box<str>]) -> Option<Listener> {
        // Upgraded only once the registry is unlocked: an upgraded channel
        // may be the last reference (its other holders let go meanwhile),
        // and dropping it takes the registry's lock.
        if self.inner.registered.load(Ordering::Relaxed) == 0 {
            // Nobody waits, nothing lingers: the common case. (A channel
            // registered just now and missed here costs only the second
            // attempt this would have spared.)
            return None;
        }
        let weak = {
            let registry = lock(&self.inner.channels);
            keys.iter()
                .map(|key| registry.get(self.inner.channel_name(key).as_str()).cloned())
                .collect::<Option<Vec<_>>>()?
        };
        let channels = weak.iter().map(Weak::upgrade).collect::<Option<Vec<_>>>()?;
        // (A `Listener` made and dropped would extend the lingering.)
        if channels.iter().all(|c| c.listening()) {
            Some(self.listener(channels))
        } else {
            None
        }
    }

    /// The channel of `key`, registered (shared with this process's other
    /// waiters on it) but not yet subscribed: see [`Channel::ensure`].
    pub(super) fn channel(&self, key: &str) -> Arc<Channel> {
        let name = self.inner.channel_name(key);
        let mut channels = lock(&self.inner.channels);
        match channels.get(name.as_str()).and_then(Weak::upgrade) {
            Some(channel) => channel,
            None => {
                let channel = Arc::new(Channel::new(name.into(), self.inner.clone()));
                channels.insert(channel.name.clone(), Arc::downgrade(&channel));
                self.inner
                    .registered
                    .store(channels.len(), Ordering::Relaxed);
                channel
            }
        }
    }
}

impl Drop for Waiters {
    fn drop(&mut self) {
        self.inner.closed.store(true, Ordering::Release);
        self.inner.closing.notify_waiters();
    }
}

impl Waiters {
    /// The channels of `keys`, registered but not yet subscribed.
    pub(crate) fn listen(&self, keys: &[Box<str>]) -> Listener {
        self.listener(keys.iter().map(|key| self.channel(key)).collect())
    }

    /// A new wait on `channels`.
    pub(super) fn listener(&self, channels: Vec<Arc<Channel>>) -> Listener {
        let wait = self.inner.waits.fetch_add(1, Ordering::Relaxed);
        Listener::new(channels, wait, &self.inner.client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::{Limits, Node};
    use crate::wait::subscriber::Wake;
    use std::time::Duration;

    fn waiters() -> Waiters {
        // Nothing here connects: the registry alone is under test.
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let limits = Limits {
            request: Duration::from_secs(1),
            connect: Duration::from_secs(1),
            in_flight: 8,
        };
        Waiters::new(&[Node::new(
            crate::net::Endpoint::Server(client),
            limits,
            None,
            None,
        )])
    }

    /// A wake-up that names a wait wakes it, even when its last attempt
    /// saw no one holder (a split vote, too few answers): the nodes took it
    /// out of their queues, and ignoring it lost the turn (the waiters
    /// behind slept out the holder's PTTL). A copy of the same release
    /// (another node's) heard before the wait's next mark wakes nothing
    /// more; one heard after it wakes the wait again (that node let go only
    /// then, and took the wait out of its queue: see `Channel::announce`).
    /// One for an ended wait is passed on unless the same release woke a
    /// wait that still waits.
    #[tokio::test]
    async fn a_wake_up_that_names_a_wait_wakes_it_whatever_its_attempt_saw() {
        let waiters = waiters();
        let listener = waiters.listen(&["k".into()]);
        let marks = listener.mark();
        let channel = &listener.channels[0];
        assert!(
            channel.announce(listener.wait, b"tok"),
            "taken, not passed on"
        );
        let woke = tokio::time::timeout(Duration::from_millis(200), listener.wake(&marks)).await;
        assert_eq!(
            woke.ok(),
            Some(Wake::Released),
            "a taken wake-up was ignored"
        );
        // A copy before the next attempt's mark: nothing more.
        assert!(channel.announce(listener.wait, b"tok"), "a copy: taken");
        let marks = listener.mark();
        let woke = tokio::time::timeout(Duration::from_millis(100), listener.wake(&marks)).await;
        assert!(
            woke.is_err(),
            "a copy heard before the attempt woke the wait after it"
        );
        // A copy after it: the release reached that node only after the
        // attempt did, and the node took the wait out of its queue.
        assert!(channel.announce(listener.wait, b"tok"), "a copy: taken");
        let woke = tokio::time::timeout(Duration::from_millis(200), listener.wake(&marks)).await;
        assert_eq!(
            woke.ok(),
            Some(Wake::Released),
            "a copy heard after the attempt was ignored"
        );
        assert_eq!(channel.remembered(), 1, "one entry per wait and release");
        // After an attempt that found another holder on a majority (which
        // queued the wait again: its release will wake it), a copy of the
        // release acted on wakes nothing; a new release still wakes.
        let mut marks = listener.mark();
        marks.settle(|token| token == "tok");
        assert!(channel.announce(listener.wait, b"tok"), "a copy: taken");
        let woke = tokio::time::timeout(Duration::from_millis(100), listener.wake(&marks)).await;
        assert!(
            woke.is_err(),
            "a copy of a release the attempt passed woke it"
        );
        assert!(channel.announce(listener.wait, b"next"), "taken");
        let woke = tokio::time::timeout(Duration::from_millis(200), listener.wake(&marks)).await;
        assert_eq!(
            woke.ok(),
            Some(Wake::Released),
            "a new release after a settled mark was ignored"
        );
        // An ended wait (never registered here): passed on, unless the same
        // release woke a live one.
        assert!(!channel.announce(999, b"other"));
        assert!(channel.announce(999, b"tok"));
        let ended = listener.wait;
        drop(listener);
        let listener = waiters.listen(&["k".into()]);
        assert!(
            !listener.channels[0].announce(ended, b"tok"),
            "the wait it woke has ended: passed on"
        );
    }

    /// `listening` over several keys, one of them not registered, while
    /// another thread registers and drops the first key's channel: the
    /// channel must never be dropped (which takes the registry's lock)
    /// while `listening` holds that lock. It once upgraded the channels
    /// under the lock, and hung here within a second or so.
    #[test]
    fn listening_never_drops_a_channel_under_the_registry_lock() {
        let waiters = Arc::new(waiters());
        // Registered for the whole test, so that `listening` upgrades many
        // channels before it finds the missing last key.
        let middle: Vec<Box<str>> = (0..200).map(|i| format!("c{i}").into()).collect();
        let _held = waiters.listen(&middle);
        let mut keys: Vec<Box<str>> = vec!["a".into()];
        keys.extend(middle.iter().cloned());
        keys.push("never".into());
        let until = std::time::Instant::now() + Duration::from_millis(1_500);
        let (done, finished) = std::sync::mpsc::channel();
        for churn in [true, false] {
            let (waiters, keys, done) = (waiters.clone(), keys.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rounds = 0u64;
                loop {
                    if churn {
                        drop(waiters.listen(&keys[..1]));
                    } else {
                        assert!(waiters.listening(&keys).is_none());
                    }
                    rounds += 1;
                    if std::time::Instant::now() >= until {
                        break;
                    }
                }
                let _ = done.send(rounds);
            });
        }
        for _ in 0..2 {
            let rounds = finished
                .recv_timeout(Duration::from_secs(20))
                .expect("a thread hung: a channel was dropped under the registry lock");
            assert!(rounds > 0);
        }
    }
}
