//! The subscriber connections of one `Redlock`, one per node, and the
//! registry of the channels its waiters listen on ([`Waiters`](super::Waiters)); the
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

//!
//! **Channels.** One key's wake-up channel ([`Channel`]): what this process's waiters
//! hear of the key's releases, and when each wakes (the protocol is in the
//! [module doc of `wait`](super); one call listens on the channels of its
//! keys through a [`Listener`](super::Listener)).
//!
//! One release wakes the same waiter on every node it reached; the channel
//! counts the copies heard before the waiter's next attempt once. A copy
//! heard after that attempt began wakes it again: that node may have let
//! go only after the attempt reached it, refused it there and then taken
//! it out of its queue (see [`Channel::announce`]); unless the attempt
//! found a majority held by another holder, whose release will wake the
//! waiter from that majority (see
//! [`Snapshots::settle`](super::listener::Snapshots::settle)).
//!
//! **Hot channels stay subscribed for a while.** When a channel's last
//! waiter goes, its subscriptions are kept for [`LINGER`] before they are
//! dropped: a resource that is waited on again soon (a hand-off, a queue of
//! jobs) costs no `SUBSCRIBE` and `UNSUBSCRIBE` on every node per wait, and
//! a call that finds its channels still listening takes its mark before its
//! first attempt, so it need not try a second time at once after
//! subscribing. Only a call that waited (or subscribed) prolongs it: a
//! resource contended once and then taken freely stops lingering after
//! [`LINGER`]. The price: while a channel lingers, a call's first attempt
//! on the resource asks who holds the key (the kind's acquisition script
//! where a plain lock would send `SET NX PX`), which costs the nodes a
//! little more, as every attempt of a waiter does. A lingering channel is
//! an ordinary channel without waiters: it hears and remembers releases
//! like any other. Dropping the `Redlock` ends the lingering at once.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::aio::PubSubSink;
use tokio::sync::{Notify, oneshot};

use crate::clock::Moment;
use crate::error::NodeFailure;
use crate::net::classify::is_connection_error;
use crate::net::slot::Slot;
use crate::net::{Endpoint, Limits, Node, Patience};
use crate::proto::Prepared;

use super::queue;

/// How often an idle subscriber connection is pinged.
pub(crate) const PING_EVERY: Duration = Duration::from_secs(1);

/// How often an idle subscriber connection is pinged all the same while
/// its node answers the command connection (see [`PING_EVERY`]).
pub(crate) const PING_IDLE: Duration = Duration::from_secs(10);

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
    /// Set when the [`Waiters`](super::Waiters) are dropped: lingering channels let go.
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

/// The lock of `m`, also when a thread panicked holding it (what it guards
/// stays consistent at every step).
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// How long a channel stays subscribed after its last waiter went.
pub(crate) const LINGER: Duration = Duration::from_secs(2);

/// The releases of one key that woke this process's waiters, as heard by
/// it; unsubscribed when its last waiter has gone and [`LINGER`] has
/// passed.
pub(crate) struct Channel {
    pub(super) name: Box<str>,
    pub(super) notify: Notify,
    /// The waits on it now, by number.
    pub(super) waits: Mutex<HashSet<u64>>,
    /// The wake-ups heard lately.
    recent: Mutex<Recent>,
    /// Per node, the generation of the connection that confirmed the
    /// subscription (0: none).
    confirmed: Vec<AtomicU64>,
    /// Until when it stays subscribed without waiters, a [`Moment`] in
    /// nanoseconds; see [`Channel::linger`].
    linger_until: AtomicU64,
    /// Whether a task keeps it alive until then.
    lingering: AtomicBool,
    inner: Arc<Inner>,
}

/// The last wake-ups heard on a channel, numbered.
#[derive(Default)]
struct Recent {
    /// How many wake-ups have been heard.
    count: u64,
    /// The last few: their numbers, the wait each woke, and the token of
    /// the holder that let go.
    tokens: VecDeque<(u64, u64, Box<[u8]>)>,
}

/// How many wake-ups a channel remembers.
pub(super) const RECENT: usize = 64;

/// What had happened on a channel at some moment; see [`Channel::mark`].
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    releases: u64,
    drops: u64,
    /// Per node, the generation of the connection subscribed then (0: none).
    subscribed: Vec<u64>,
    /// The holders whose releases had woken the wait by then.
    woke: Vec<Box<[u8]>>,
    /// Those of them whose copies heard since are to wake nothing (see
    /// [`Snapshots::settle`](super::listener::Snapshots::settle)).
    stale: Vec<Box<[u8]>>,
}

impl Snapshot {
    /// Copies of the releases that had woken the wait by this mark wake
    /// nothing more, for each holder `passed` says the attempt made after
    /// the mark found overtaken: a majority held by another holder, which
    /// queued the wait again (never past a writer's intent, nor a leaving
    /// or a joining: see `Tally::passed`).
    pub(super) fn settle(&mut self, passed: impl Fn(&[u8]) -> bool) {
        self.stale = self.woke.iter().filter(|t| passed(t)).cloned().collect();
    }
}

/// Why [`Channel::wake`] woke a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    /// A release woke this wait (its turn came).
    Released,
    /// A subscriber connection was dropped.
    Dropped,
}

impl Channel {
    /// How many wake-ups the channel remembers now: for tests.
    #[cfg(test)]
    pub(super) fn remembered(&self) -> usize {
        lock(&self.recent).tokens.len()
    }

    /// The channel `name`, of no node yet, registered by its `Waiters`
    /// ([`Waiters::channel`](super::Waiters::channel)).
    pub(super) fn new(name: Box<str>, inner: Arc<Inner>) -> Channel {
        Channel {
            name,
            notify: Notify::new(),
            waits: Mutex::default(),
            recent: Mutex::default(),
            confirmed: inner.nodes.iter().map(|_| AtomicU64::new(0)).collect(),
            linger_until: AtomicU64::new(0),
            lingering: AtomicBool::new(false),
            inner,
        }
    }

    /// What has happened on the channel so far: take it before an attempt;
    /// [`wake`](Self::wake) and [`heard_since`](Self::heard_since) look
    /// only at what happens after.
    pub(crate) fn mark(&self, wait: u64) -> Snapshot {
        let (releases, woke) = {
            let recent = lock(&self.recent);
            let woke = recent
                .tokens
                .iter()
                .filter(|(_, w, _)| *w == wait)
                .map(|(_, _, t)| t.clone())
                .collect();
            (recent.count, woke)
        };
        Snapshot {
            releases,
            woke,
            stale: Vec::new(),
            drops: self.inner.drops.load(Ordering::Acquire),
            subscribed: (0..self.inner.nodes.len())
                .map(|i| {
                    if self.subscribed(i) {
                        self.confirmed[i].load(Ordering::Acquire)
                    } else {
                        0
                    }
                })
                .collect(),
        }
    }

    /// Whether `token`'s release has woken a waiter of ours (it is
    /// remembered for the last [`RECENT`] wake-ups).
    pub(crate) fn was_announced(&self, token: &str) -> bool {
        lock(&self.recent)
            .tokens
            .iter()
            .any(|(_, _, t)| **t == *token.as_bytes())
    }

    /// Whether a wake-up heard after the first `count` named `wait`. One
    /// for a wait that has ended wakes nobody: late copies of the wake-up
    /// that woke it (the other nodes'), or a wait that gave up and whose
    /// leaving a node missed (see [`wait`](super)).
    fn woken_after(&self, mark: &Snapshot, wait: u64) -> bool {
        lock(&self.recent)
            .tokens
            .iter()
            .any(|(n, w, t)| *n > mark.releases && *w == wait && !mark.stale.contains(t))
    }

    /// Resolves when, since `mark`, a release woke `wait` (see [`wait`](super)),
    /// or a subscriber connection was dropped (the waiter may have counted
    /// on it to be woken). A wake-up that names `wait` was taken for it: the
    /// nodes took it out of their queues and no one passes it on, so it
    /// acts, whatever its last attempt saw (a holder on a majority, or
    /// none: a split vote, too few answers), but for copies of a release
    /// the wait acted on whose attempt found another holder on a majority
    /// (the mark's `stale`: see [`Snapshot::settle`], and `Tally::passed`
    /// for the exceptions). Ignored after a split or an
    /// unreachable attempt, as it once was, the turn was lost and the
    /// waiters queued behind slept out the holder's whole PTTL (found under
    /// load: a 30 s stall of
    /// `wait.rs::independent_clients_hand_a_busy_lock_round…`). A named
    /// wake-up reaches one wait only, so acting on it undoes no split's
    /// random back-off. Its own timer covers every case no wake-up does.
    pub(crate) async fn wake(&self, mark: &Snapshot, wait: u64) -> Wake {
        loop {
            // Armed before the checks, so that nothing between them is missed.
            let notified = self.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.woken_after(mark, wait) {
                return Wake::Released;
            }
            if self.inner.drops.load(Ordering::Acquire) != mark.drops {
                return Wake::Dropped;
            }
            notified.await;
        }
    }

    /// Whether every release since `mark` that reached a majority was
    /// heard: enough of the subscriptions of then are still on the same
    /// connections. A subscription made since may have come after a
    /// release, so it does not count.
    pub(crate) fn heard_since(&self, mark: &Snapshot) -> bool {
        let kept = mark
            .subscribed
            .iter()
            .enumerate()
            .filter(|&(i, &g)| {
                g != 0 && self.subscribed(i) && self.confirmed[i].load(Ordering::Acquire) == g
            })
            .count();
        kept >= self.inner.needed
    }

    /// Whether every release that reaches a majority of nodes is heard.
    pub(crate) fn listening(&self) -> bool {
        self.subscribed_nodes() >= self.inner.needed
    }

    fn subscribed_nodes(&self) -> usize {
        (0..self.inner.nodes.len())
            .filter(|&i| self.subscribed(i))
            .count()
    }

    /// Whether the live connection to node `i` confirmed the subscription.
    fn subscribed(&self, i: usize) -> bool {
        let g = self.confirmed[i].load(Ordering::Acquire);
        g != 0 && g == self.inner.nodes[i].slot.generation()
    }

    /// Subscribes on every node where it is not subscribed, connecting
    /// first where needed; returns once [`listening`](Self::listening) (at
    /// once if it already is), or when every node has answered or timed
    /// out. The slower nodes go on in the background.
    pub(crate) async fn ensure(self: &Arc<Self>) {
        if self.subscribed_nodes() == self.inner.nodes.len() {
            return;
        }
        let mut pending: FuturesUnordered<_> = (0..self.inner.nodes.len())
            .filter(|&i| !self.subscribed(i))
            .map(|i| tokio::spawn(self.clone().subscribe(i)))
            .collect();
        while !self.listening() && pending.next().await.is_some() {}
    }

    /// Subscribes on node `i`, bounded by the node timeout (connecting goes
    /// on in the background).
    async fn subscribe(self: Arc<Self>, i: usize) {
        let node = &self.inner.nodes[i];
        let work = async {
            let (live, _) = self.inner.connection(i).await.ok()?;
            if self.confirmed[i].load(Ordering::Acquire) == live.generation {
                return Some(());
            }
            let mut sink = live.conn.sink.lock().await;
            match sink.subscribe(&*self.name).await {
                Ok(()) => {
                    self.confirmed[i].store(live.generation, Ordering::Release);
                    Some(())
                }
                // The connection is broken: drop it (the next waiter makes
                // a new one) and tell the waiters that counted on it.
                Err(e) if is_connection_error(&e) => {
                    self.inner.forget(i, live.generation);
                    None
                }
                // Refused (an ACL without this channel, say): the connection
                // is fine, this node just does not hear this channel.
                Err(e) => {
                    tracing::debug!(node = i, channel = %self.name, error = %e, "subscription refused");
                    None
                }
            }
        };
        let _ = tokio::time::timeout(node.limits.request, work).await;
    }

    /// Keeps the channel (and so its subscriptions) alive for [`LINGER`]
    /// from now, by a task that holds it until then; one task per channel,
    /// moved on by later calls. Where the channel is not subscribed there
    /// is nothing to keep.
    pub(super) fn linger(self: &Arc<Self>) {
        if self.inner.closed.load(Ordering::Acquire) || self.subscribed_nodes() == 0 {
            return;
        }
        let until = Moment::now().after(LINGER).as_nanos();
        self.linger_until.fetch_max(until, Ordering::AcqRel);
        if self.lingering.swap(true, Ordering::AcqRel) {
            return; // Its task sees the new time.
        }
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            self.lingering.store(false, Ordering::Release);
            return;
        };
        let mut hold = Lingering {
            channel: self.clone(),
            armed: true,
        };
        handle.spawn(async move {
            let channel = hold.channel.clone();
            loop {
                let until = channel.linger_until.load(Ordering::Acquire);
                let left = Moment::from_nanos(until).remaining();
                if !left.is_zero() {
                    let closing = channel.inner.closing.notified();
                    let mut closing = std::pin::pin!(closing);
                    closing.as_mut().enable();
                    if channel.inner.closed.load(Ordering::Acquire) {
                        return;
                    }
                    tokio::select! {
                        () = closing => return,
                        () = tokio::time::sleep(left) => continue,
                    }
                }
                // A swap, not a store: `linger` moves the time on and then
                // swaps the flag, so either its swap comes first and this
                // one, reading it, sees the new time below; or this comes
                // first and `linger` starts a task of its own.
                hold.arm(false);
                channel.lingering.swap(false, Ordering::AcqRel);
                if channel.linger_until.load(Ordering::Acquire) <= until
                    || channel.lingering.swap(true, Ordering::AcqRel)
                {
                    return;
                }
                hold.arm(true);
            }
        });
    }

    /// Wakes `wait` for a release of the holder `token` (every node it
    /// reached that has `wait` first in its queue says so). False if the
    /// wake-up is to be passed on: `wait` has ended and the release woke no
    /// wait of ours.
    ///
    /// A copy of a release heard before (from another node) is
    /// remembered anew, as of now: it wakes `wait` again if the wait has
    /// begun an attempt since the copy it acted on ([`Channel::wake`] looks
    /// only at what came after its mark). A release can reach the nodes
    /// one by one: the first node's wake-up brings the waiter in at once,
    /// the others still count the releasing holder and refuse it, and each
    /// of them, when the release reaches it, takes the waiter out of its
    /// queue and wakes it. Taken for a mere copy of the first wake-up and
    /// ignored, it left the waiter out of every queue, asleep on the holder
    /// its attempt saw. (A mutex's waiter saw the very token whose release
    /// was announced, and so retried soon; a semaphore's waiter sees its
    /// holders by a digest of theirs, `permits:<k>:…`, and slept out the
    /// soonest permit's PTTL while a permit was free: `long_retry` in the
    /// chaos suite.) A copy that comes before the next attempt wakes
    /// nothing more; one that comes during it may cost an attempt that
    /// finds what the first did, at most one per node per release.
    pub(super) fn announce(&self, wait: u64, token: &[u8]) -> bool {
        let mut recent = lock(&self.recent);
        let waits = lock(&self.waits);
        if !waits.contains(&wait) {
            // Taken only if the same release woke a wait that still waits
            // (it acts on it); else passed on (the node wakes the next
            // waiter only where the lock has room).
            return recent
                .tokens
                .iter()
                .any(|(_, w, t)| **t == *token && waits.contains(w));
        }
        drop(waits);
        // One entry per wait and release: the latest copy's.
        recent
            .tokens
            .retain(|(_, w, t)| !(*w == wait && **t == *token));
        recent.count += 1;
        let n = recent.count;
        recent.tokens.push_back((n, wait, token.into()));
        if recent.tokens.len() > RECENT {
            recent.tokens.pop_front();
        }
        drop(recent);
        self.notify.notify_waiters();
        true
    }
}

/// A lingering channel's task's hold on it. Should the task be dropped
/// before it is done (its runtime shut down), the channel may linger again
/// later by another task.
struct Lingering {
    channel: Arc<Channel>,
    armed: bool,
}

impl Lingering {
    /// Whether dropping it is to let the channel linger again: not while
    /// the task itself hands the flag over.
    fn arm(&mut self, armed: bool) {
        self.armed = armed;
    }
}

impl Drop for Lingering {
    fn drop(&mut self) {
        if self.armed {
            self.channel.lingering.store(false, Ordering::Release);
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
                self.inner
                    .registered
                    .store(channels.len(), Ordering::Relaxed);
            }
        }
        // Once the `Redlock` is dropped its subscriber connections close
        // anyway: no unsubscribing (which could queue behind a frozen node).
        if self.inner.closed.load(Ordering::Acquire) {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (inner, name) = (self.inner.clone(), self.name.clone());
            handle.spawn(async move { inner.unsubscribe(&name).await });
        }
    }
}
