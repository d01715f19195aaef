//! Waiting without polling: waiters are woken when the holder releases.
//!
//! The release script publishes the releaser's token on the channel
//! `<key>:released` of every node where it deletes the key (rollbacks of
//! failed attempts do not: see [`Request::Release`]). A [`Redlock`] keeps one
//! subscriber connection per node, made when the first of its `lock()` calls
//! has to wait and shared by all of them, and a registry of the channels
//! someone waits on, each subscribed while it has waiters.
//!
//! **When is an announcement sure to be heard?** A release that counts
//! reaches a majority, `Q` of `N` nodes. If the channel is subscribed on at
//! least `N − Q + 1` nodes, the two sets share a node, so the release is
//! heard. Below that the waiter is [`listening`](Channel::listening) no
//! more, and the retry loop falls back to its ordinary retry pause.
//!
//! Announcements only save time; they are never needed for progress. Every
//! wait also has a timer (the holder's remaining TTL, learnt by the failed
//! attempt, or the retry pause), so that a key that expires without a
//! release is noticed too. A subscriber connection that breaks (a restart,
//! `CLIENT KILL TYPE pubsub`) wakes every waiter, which tries again and
//! subscribes anew on its way back to waiting: a broken subscription
//! degrades to timers, never to a hang. Every subscription is bounded by the
//! node timeout, so a frozen node delays no one.
//!
//! One release is announced by every node it reached; the token in the
//! message lets a channel wake its waiters once per release.
//!
//! [`Redlock`]: crate::Redlock
//! [`Request::Release`]: crate::quorum::Request::Release

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, oneshot};

/// The subscriber connections of one `Redlock`, and the channels waited on.
pub(crate) struct Waiters {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Subscriber>,
    /// How many nodes must be subscribed for every release that reaches a
    /// majority to be heard: `N − quorum + 1`.
    needed: usize,
    channels: Mutex<HashMap<Box<str>, Weak<Channel>>>,
}

/// One node's subscriber connection.
struct Subscriber {
    client: redis::Client,
    timeout: Duration,
    /// The generation of the live connection, 0 while there is none; a
    /// copy of what `live` holds, readable without waiting.
    generation: AtomicU64,
    live: tokio::sync::Mutex<Option<Live>>,
}

/// A live subscriber connection: its command half, and the handle whose
/// drop stops the task that reads its messages (and so closes it).
struct Live {
    generation: u64,
    sink: PubSubSink,
    _reader: oneshot::Sender<()>,
}

/// The releases of one key, as heard by this process; unsubscribed when its
/// last waiter goes.
pub(crate) struct Channel {
    name: Box<str>,
    notify: Notify,
    /// The token of the last release announced, to wake once per release.
    last: Mutex<Vec<u8>>,
    /// How many releases were announced.
    releases: AtomicU64,
    /// Per node, the generation of the connection that confirmed the
    /// subscription (0: none).
    confirmed: Vec<AtomicU64>,
    inner: Arc<Inner>,
}

/// Connection generations, unique in the process; 0 means none.
static GENERATION: AtomicU64 = AtomicU64::new(1);

impl Waiters {
    pub(crate) fn new(clients: &[redis::Client], timeout: Duration, quorum: usize) -> Waiters {
        Waiters {
            inner: Arc::new(Inner {
                nodes: clients
                    .iter()
                    .map(|client| Subscriber {
                        client: client.clone(),
                        timeout,
                        generation: AtomicU64::new(0),
                        live: tokio::sync::Mutex::new(None),
                    })
                    .collect(),
                needed: clients.len() + 1 - quorum,
                channels: Mutex::default(),
            }),
        }
    }

    /// The channel of `key`, subscribed on enough nodes to hear every
    /// release if they answer within the node timeout.
    pub(crate) async fn listen(&self, key: &str) -> Arc<Channel> {
        let name = format!("{key}:released");
        let channel = {
            let mut channels = lock(&self.inner.channels);
            match channels.get(name.as_str()).and_then(Weak::upgrade) {
                Some(channel) => channel,
                None => {
                    let channel = Arc::new(Channel {
                        name: name.into(),
                        notify: Notify::new(),
                        last: Mutex::default(),
                        releases: AtomicU64::new(0),
                        confirmed: self.inner.nodes.iter().map(|_| AtomicU64::new(0)).collect(),
                        inner: self.inner.clone(),
                    });
                    channels.insert(channel.name.clone(), Arc::downgrade(&channel));
                    channel
                }
            }
        };
        channel.ensure().await;
        channel
    }
}

impl Channel {
    /// A future that resolves at the next announced release (or broken
    /// subscriber connection). `enable` it before the attempt it follows,
    /// so that a release during the attempt is not missed.
    pub(crate) fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// How many releases have been announced so far: a waiter woken while
    /// this did not change was woken by a broken subscription instead.
    pub(crate) fn releases(&self) -> u64 {
        self.releases.load(Ordering::Acquire)
    }

    /// Whether every release that reaches a majority of nodes is heard.
    pub(crate) fn listening(&self) -> bool {
        self.subscribed_nodes() >= self.inner.needed
    }

    fn subscribed_nodes(&self) -> usize {
        self.confirmed
            .iter()
            .zip(&self.inner.nodes)
            .filter(|(confirmed, node)| {
                let g = confirmed.load(Ordering::Acquire);
                g != 0 && g == node.generation.load(Ordering::Acquire)
            })
            .count()
    }

    /// Subscribes on every node where it is not subscribed, connecting
    /// first where needed; returns once [`listening`](Self::listening), or
    /// when every node has answered or timed out. The slower nodes go on in
    /// the background.
    pub(crate) async fn ensure(self: &Arc<Self>) {
        if self.subscribed_nodes() == self.inner.nodes.len() {
            return;
        }
        let mut pending: FuturesUnordered<_> = (0..self.inner.nodes.len())
            .map(|i| tokio::spawn(self.clone().subscribe(i)))
            .collect();
        while pending.next().await.is_some() {
            if self.listening() {
                return;
            }
        }
    }

    /// Subscribes on node `i`, bounded by the node timeout.
    async fn subscribe(self: Arc<Self>, i: usize) {
        let node = &self.inner.nodes[i];
        let work = async {
            let mut live = node.live.lock().await;
            if live.is_none() {
                *live = Some(self.inner.connect(i).await?);
            }
            let current = live.as_mut()?;
            node.generation.store(current.generation, Ordering::Release);
            if self.confirmed[i].load(Ordering::Acquire) == current.generation {
                return Some(());
            }
            if current.sink.subscribe(&*self.name).await.is_ok() {
                self.confirmed[i].store(current.generation, Ordering::Release);
                return Some(());
            }
            // The connection is broken: drop it; the next waiter makes a
            // new one.
            *live = None;
            node.generation.store(0, Ordering::Release);
            None
        };
        let _ = tokio::time::timeout(node.timeout, work).await;
    }

    /// Wakes the waiters for a release, once per release.
    fn announce(&self, token: &[u8]) {
        let mut last = lock(&self.last);
        if *last != token {
            last.clear();
            last.extend_from_slice(token);
            self.releases.fetch_add(1, Ordering::AcqRel);
            self.notify.notify_waiters();
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        {
            let mut channels = lock(&self.inner.channels);
            if channels
                .get(&self.name)
                .is_some_and(|w| w.strong_count() == 0)
            {
                channels.remove(&self.name);
            }
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (inner, name) = (self.inner.clone(), self.name.clone());
            handle.spawn(async move { inner.unsubscribe(&name).await });
        }
    }
}

impl Inner {
    /// A new subscriber connection to node `i`, with a task that hands its
    /// messages to the channels.
    async fn connect(self: &Arc<Self>, i: usize) -> Option<Live> {
        let (sink, mut stream) = self.nodes[i].client.get_async_pubsub().await.ok()?.split();
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let (stop, mut stopped) = oneshot::channel();
        let inner = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    // The connection was replaced or the `Redlock` dropped.
                    _ = &mut stopped => return,
                    message = stream.next() => {
                        let Some(message) = message else { break };
                        let Some(inner) = inner.upgrade() else { return };
                        if let Some(channel) = inner.channel(message.get_channel_name()) {
                            channel.announce(message.get_payload_bytes());
                        }
                    }
                }
            }
            // The connection ended: forget it, unless a newer one took over,
            // and wake every waiter, which may have counted on this node.
            let Some(inner) = inner.upgrade() else { return };
            let node = &inner.nodes[i];
            {
                let mut live = node.live.lock().await;
                if live.as_ref().is_some_and(|l| l.generation == generation) {
                    *live = None;
                    node.generation.store(0, Ordering::Release);
                }
            }
            tracing::debug!(node = i, "subscriber connection ended");
            let channels: Vec<Arc<Channel>> = lock(&inner.channels)
                .values()
                .filter_map(Weak::upgrade)
                .collect();
            for channel in channels {
                channel.notify.notify_waiters();
            }
        });
        Some(Live {
            generation,
            sink,
            _reader: stop,
        })
    }

    fn channel(&self, name: &str) -> Option<Arc<Channel>> {
        lock(&self.channels).get(name).and_then(Weak::upgrade)
    }

    /// Unsubscribes every node from `name`, unless someone waits on it
    /// again (a new waiter registers before it subscribes, and subscribes
    /// under the same per-node lock, so the check cannot go stale).
    async fn unsubscribe(&self, name: &str) {
        for node in &self.nodes {
            let work = async {
                let mut live = node.live.lock().await;
                let waited_on = self.channel(name).is_some();
                if let (Some(live), false) = (live.as_mut(), waited_on) {
                    let _ = live.sink.unsubscribe(name).await;
                }
            };
            let _ = tokio::time::timeout(node.timeout, work).await;
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
