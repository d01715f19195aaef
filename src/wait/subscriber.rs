//! The subscriber connections of one `Redlock`, one per node, and the
//! registry of the channels its waiters listen on ([`Waiters`]); the
//! protocol they serve is in the [module doc of `wait`](super).
//!
//! A subscriber connection that breaks (a restart,
//! `CLIENT KILL TYPE pubsub`) wakes every waiter, which tries again and
//! subscribes anew on its way back to waiting: a broken subscription
//! degrades to timers, never to a hang. Every subscription is bounded by the
//! node timeout, so a frozen node delays no one. A subscriber connection
//! that goes silent without breaking (a partition with no RST, a dead NAT
//! entry) would still look subscribed, so each is pinged every
//! [`PING_EVERY`] unless a message came in since; one that does not answer
//! in time is dropped like a broken one. While the node answers this
//! process's commands on a connection made before the subscriber
//! connection was last known to work, the network path is known to work,
//! and only a fault of the idle subscriber connection alone is left to find
//! (a middlebox that drops idle connections): it is pinged every
//! [`PING_IDLE`] then. (A command connection made since does not count: a
//! fault that silences the connections open at some moment, and lets new
//! ones through, would hide behind it.)
//! (256 waiting `Redlock`s on five nodes pinged 1 280 times a second.)
//!
//! The subscriber connections live in the same kind of [`Slot`] as the
//! command connections: made in the background, shared, replaced by
//! generation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::PubSubSink;

use crate::net::Endpoint;
use tokio::sync::{Notify, oneshot};

use crate::clock::Moment;
use crate::error::NodeFailure;
use crate::net::slot::Slot;
use crate::net::{Limits, Node, Patience};
use crate::proto::Prepared;

use super::channel::Channel;
use super::listener::Listener;
use super::{lock, queue};

/// How often an idle subscriber connection is pinged.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(1);

/// How often an idle subscriber connection is pinged all the same while
/// its node answers the command connection (see [`PING_EVERY`]).
pub(crate) const PING_IDLE: Duration = Duration::from_secs(10);

/// The subscriber connections of one `Redlock`, and the channels waited on.
pub(crate) struct Waiters {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    /// This `Redlock`'s id among the waiters on the nodes: 16 random hex
    /// digits (see [`queue`]).
    pub(super) client: Box<str>,
    /// The number of the next wait.
    pub(super) waits: AtomicU64,
    pub(super) nodes: Vec<Subscriber>,
    /// How many nodes must be subscribed for every release that reaches a
    /// majority to be heard: `N − quorum + 1`.
    pub(super) needed: usize,
    pub(super) channels: Mutex<HashMap<Box<str>, Weak<Channel>>>,
    /// How many channels `channels` holds, as of its last change: every
    /// `lock()` looks, and most find none without taking the lock.
    pub(super) registered: AtomicUsize,
    /// How many subscriber connections have been dropped.
    pub(super) drops: AtomicU64,
    /// Set when the [`Waiters`] are dropped: lingering channels let go.
    pub(super) closed: AtomicBool,
    pub(super) closing: Notify,
}

/// One node's subscriber connection.
pub(super) struct Subscriber {
    pub(super) endpoint: Endpoint,
    /// The node's command side, told when this connection goes silent.
    pub(super) node: Node,
    pub(super) limits: Limits,
    pub(super) slot: Arc<Slot<Arc<Live>>>,
}

/// A live subscriber connection: its command half, and the handle whose
/// drop stops the task that reads its messages (and so closes it). The
/// command half is locked while (un)subscribing, so that an unsubscription
/// and a new subscription of the same channel cannot cross.
pub(super) struct Live {
    pub(super) sink: tokio::sync::Mutex<PubSubSink>,
    pub(super) _reader: oneshot::Sender<()>,
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

impl Inner {
    /// Node `i`'s subscriber connection, made if there is none.
    pub(super) async fn connection(
        self: &Arc<Self>,
        i: usize,
    ) -> Result<(crate::net::slot::Live<Arc<Live>>, bool), NodeFailure> {
        let inner = Arc::downgrade(self);
        let endpoint = self.nodes[i].endpoint.clone();
        let limits = self.nodes[i].limits;
        self.nodes[i]
            .slot
            .get(move |generation| connect(inner, endpoint, limits, i, generation))
            .await
    }

    /// Drops node `i`'s subscriber connection of `generation`, if it is
    /// still the live one, and wakes every waiter, which may have counted
    /// on it to hear a release: each tries again and subscribes anew.
    pub(super) fn forget(&self, i: usize, generation: u64) {
        if !self.nodes[i].slot.forget(generation) {
            return;
        }
        self.drops.fetch_add(1, Ordering::AcqRel);
        tracing::debug!(node = i, generation, "subscriber connection dropped");
        let channels: Vec<Arc<Channel>> = lock(&self.channels)
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for channel in channels {
            channel.notify.notify_waiters();
        }
    }

    /// Asks node `i` to wake the next waiter of `key` if the lock has room
    /// there, in the background (see [`queue`]).
    pub(super) fn pass_on(&self, i: usize, key: &str, token: &[u8]) {
        let node = &self.nodes[i].node;
        let command = Prepared::new(queue::pass_on(key, token));
        tokio::spawn(node.run(&command, Patience::Cleanup, None, node.limits().request));
    }

    /// The channel of `key` on which this `Redlock`'s waiters are woken.
    pub(super) fn channel_name(&self, key: &str) -> String {
        queue::channel(key, &self.client)
    }

    /// The key whose channel is `name`, if it is one of this `Redlock`'s.
    pub(super) fn key_of<'a>(&self, name: &'a str) -> Option<&'a str> {
        name.strip_suffix(queue::channel("", &self.client).as_str())
    }

    pub(super) fn channel(&self, name: &str) -> Option<Arc<Channel>> {
        lock(&self.channels).get(name).and_then(Weak::upgrade)
    }

    /// Unsubscribes every node from `name`, unless someone waits on it
    /// again (a new waiter registers before it subscribes, and subscribes
    /// under the same lock of the connection's command half, so the check
    /// cannot go stale).
    pub(super) async fn unsubscribe(&self, name: &str) {
        for node in &self.nodes {
            let Some(live) = node.slot.live() else {
                continue;
            };
            // Waits its turn behind subscriptions in progress (each bounded);
            // only the command itself is under the node timeout.
            let mut sink = live.conn.sink.lock().await;
            if self.channel(name).is_none() {
                let _ = tokio::time::timeout(node.limits.request, sink.unsubscribe(name)).await;
            }
        }
    }
}

/// A new subscriber connection to node `i`, with a task that hands its
/// messages to the channels and pings the node every [`PING_EVERY`] (or
/// [`PING_IDLE`]: see the module doc).
async fn connect(
    inner: Weak<Inner>,
    endpoint: Endpoint,
    limits: Limits,
    i: usize,
    generation: u64,
) -> Result<Arc<Live>, NodeFailure> {
    let (sink, mut stream) = endpoint.pubsub().await?.split();
    let (stop, mut stopped) = oneshot::channel();
    let mut pinger = sink.clone();
    // A silent connection must not pass for a listening one: it answers a
    // ping within this, or it is dropped.
    let ping_limit = limits.request.max(PING_EVERY);
    tokio::spawn(async move {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        // When the node was last heard from on this connection: a message
        // as good as a pong, so a busy connection is not pinged.
        let mut heard = tokio::time::Instant::now();
        // When it was last known to work (a message or a pong).
        let mut known = Moment::now();
        loop {
            tokio::select! {
                // The connection was replaced or the `Redlock` dropped.
                _ = &mut stopped => return,
                message = stream.next() => {
                    let Some(message) = message else { break };
                    heard = tokio::time::Instant::now();
                    known = Moment::now();
                    let Some(inner) = inner.upgrade() else { return };
                    let payload = message.get_payload_bytes();
                    let name = message.get_channel_name();
                    let Some((wait, token)) = queue::read_wake(payload) else {
                        tracing::debug!(node = i, "a wake-up that is not ours, ignored");
                        continue;
                    };
                    // Passed on unless a live wait of ours takes it; also
                    // where nobody waits on the channel any more (it let
                    // go, its unsubscription not yet through).
                    let taken = inner.channel(name).is_some_and(|c| c.announce(wait, token));
                    if !taken && let Some(key) = inner.key_of(name) {
                        inner.pass_on(i, key, token);
                    }
                }
                _ = ping.tick() => {
                    // Alive by a message; or known to work not long ago,
                    // and the node's command connection of then answers
                    // still: the path to the node works, and only a fault
                    // of this connection alone (an idle connection dropped
                    // by a middlebox) is left to find.
                    if heard.elapsed() < PING_EVERY
                        || (known.elapsed() < PING_IDLE
                            && inner.upgrade().is_some_and(|inner| {
                                inner.nodes[i].node.answered_within(PING_EVERY, known)
                            }))
                    {
                        continue;
                    }
                    let asked = Moment::now();
                    let pong = tokio::time::timeout(ping_limit, pinger.ping::<redis::Value>()).await;
                    if !matches!(pong, Ok(Ok(_))) {
                        tracing::debug!(node = i, generation, "subscriber connection silent");
                        if let Some(inner) = inner.upgrade() {
                            inner.nodes[i].node.suspect();
                        }
                        break;
                    }
                    known = asked;
                }
            }
        }
        // The connection ended or went silent: forget it, unless a newer
        // one took over.
        if let Some(inner) = inner.upgrade() {
            inner.forget(i, generation);
        }
    });
    Ok(Arc::new(Live {
        sink: tokio::sync::Mutex::new(sink),
        _reader: stop,
    }))
}
