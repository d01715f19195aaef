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
