//! One Redis node: a runner of bounded commands that knows nothing of locks.
//!
//! A [`Node`] runs the [`Command`](crate::proto::Command)s that lock kinds build and hands back the
//! raw reply, or a [`NodeFailure`] a user can act on. Six rules keep the
//! protocol honest:
//!
//! * **Every request is bounded** by the per-node timeout, from the call to
//!   the reply; a release, whose slower answers still count while its lock
//!   is valid, by at most the connect timeout ([`Patience`]). Connecting is
//!   not part of it: a connection is made in the background under its own
//!   connect timeout, shared by the requests that need it ([`slot`]); a
//!   request that runs out of time waiting for it votes `Timeout`, and the
//!   next one finds it made.
//! * **Nothing is replayed behind our back.** We use a plain multiplexed
//!   connection, not a connection manager that resends commands after a
//!   reconnect, where they could land after a rollback. The one retry we
//!   make ourselves, on a connection that went stale, happens inside the
//!   same request, before its vote is counted (see `Inner::run`). A node
//!   that is a Redis Cluster is one such connection per primary, routed
//!   by our own slot map; the redirects (`MOVED`, `ASK`: the command did
//!   not run) we follow ourselves, through the gate (see `cluster`,
//!   feature `cluster`).
//! * **Nothing of a lock is sent after its removal began.** An
//!   acquisition, a fenced confirmation or an extension is handed to a
//!   connection only through the lock's [`Gate`], which its rollback or
//!   release shuts first: a request still waiting for a connection (one
//!   being made as a partition heals, say), retrying on a new one, or
//!   falling back to `EVAL` is dropped unsent, instead of landing after
//!   the lock's release.
//! * **A silent connection is replaced, and kept.** A timeout alone is not
//!   a reason to drop a connection (the node may be busy or briefly paused,
//!   and a rollback on the same connection is ordered after the command it
//!   rolls back; several requests in flight time out together in one
//!   stall). A request that times out on a connection that has left a
//!   request unanswered for [`SILENT_TIMEOUTS`] request timeouts (a second
//!   at the least, [`SILENCE_FLOOR`]) replaces it: with no RST (a
//!   partition, a dead NAT entry, a failover behind a virtual IP) the
//!   connection could otherwise stay unusable until TCP gives up, minutes
//!   later. What was written on the old connection may still be delivered
//!   (TCP retransmits once the partition heals; a frozen node reads its
//!   buffer when thawed), so it is [`retired`], not closed: every removal
//!   sent to the node is also written on it, behind what it carries, until
//!   it has delivered everything or failed. A late acquisition is then
//!   followed by its release on the same connection.
//! * **A removal is sent until it is answered.** A release or a rollback
//!   that gets no answer from a node (a timeout, a broken connection) is
//!   sent there again in the background, patiently, with pauses from
//!   [`REMOVAL_PAUSE`] to [`REMOVAL_PAUSE_MAX`], until the node answers or
//!   the keys it was for have expired ([`removals`]: one queue and one
//!   task per node). Cleanup that
//!   nobody waits for (the rollback on nodes that had not answered, the
//!   release of a dropped lock) is *patient* from its first try: it waits
//!   for a connection up to the connect timeout, not the request timeout.
//! * **Errors are sorted** into [`NodeFailure`]s a user can act on. A
//!   `READONLY` answer also replaces the connection, as a broken one is
//!   ([`needs_new_connection`]): the server is no longer the primary (a
//!   Sentinel-managed node's demoted primary), and the next connection
//!   resolves the node again.
//!
//! What can still leave a key nobody holds until its TTL (it delays
//! others; it never makes two holders):
//!
//! * an acquisition on a connection closed before the node read it (more
//!   than [`retired::KEPT`] silent connections to one node at once, or the
//!   process exiting), which the kernel still delivers when the path heals
//!   (or a frozen node reads when thawed), with no release behind it;
//! * a release that timed out while still queued in the client (a socket
//!   backed up by a partition that stopped acknowledging): redis-rs does
//!   not write a request nobody waits for. It is sent again until the keys
//!   would have expired, and written on the connection once that is
//!   retired (a second or two of silence), so only a TTL shorter than that
//!   leaves a gap;
//! * a key that lives longer than the removal is sent for: the removal is
//!   retried until the lock's TTL (the last one it was given) and the drift
//!   allowance from its first sending have passed. A reentrant hold's
//!   field lives as long as its owner's other holds keep the hash alive,
//!   and a failed longer extension may have reached some nodes.
//!
//! Scripts go by `EVALSHA`; on `NOSCRIPT` (the node restarted, or someone
//! ran `SCRIPT FLUSH`) the same call is made once more with `EVAL`, which
//! also puts the script back into the node's cache. A removal that timed
//! out before its `NOSCRIPT` came back is sent again like any other
//! unanswered one. The restart guard ([`guard`]) reads every new
//! connection's `INFO server` before the connection is used.

pub(crate) mod classify;
pub(crate) mod denial;
pub(crate) mod guard;
mod removals;
mod retired;
pub(crate) mod slot;
pub(crate) mod topology;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use redis::{AsyncConnectionConfig, ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::time::timeout_at;

use crate::clock::Moment;
use crate::error::NodeFailure;
#[cfg(feature = "metrics")]
use crate::metrics;
use crate::proto::{Effect, Gate, LockState, Pass, Prepared, Script};
use crate::who::{self, Registry};
use classify::{classify, is_connection_error, needs_new_connection};
use guard::{Guard, Lives};
use removals::Removals;
use retired::Retired;
use slot::{Live, Slot};
#[cfg(feature = "cluster")]
use topology::cluster;
#[cfg(feature = "sentinel")]
use topology::sentinel;
pub(crate) use topology::{CommandConn, Endpoint};

/// For how many request timeouts a connection may leave a request
/// unanswered before a timeout on it counts it as dead.
pub(crate) const SILENT_TIMEOUTS: u32 = 3;

/// The least silence that counts a connection as dead, so that a node
/// paused for less (a fork, a slow script) keeps its connection and the
/// order of the commands queued on it.
pub(crate) const SILENCE_FLOOR: Duration = Duration::from_secs(1);

/// The longest a request waits its turn on the wire (a bound for tokio's
/// clock; the callers' own bounds are shorter).
const MAX_QUEUE: Duration = Duration::from_secs(24 * 3600);

/// The first pause before a removal that got no answer is sent again.
pub(crate) const REMOVAL_PAUSE: Duration = Duration::from_millis(100);

/// The longest pause between two tries of a removal.
pub(crate) const REMOVAL_PAUSE_MAX: Duration = Duration::from_secs(2);

/// How many commands a connection queues for writing before a sender
/// waits. Large, so that handing a command over never waits: a lock's
/// [`Gate`] relies on the hand-over being immediate. The queue costs memory
/// only as it fills.
pub(crate) const PIPELINE_BUFFER: usize = 1 << 16;

/// How a node is reached and bounded.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Bound on one request, from the call to the reply.
    pub(crate) request: Duration,
    /// Bound on making a connection (TCP, handshake, `INFO`).
    pub(crate) connect: Duration,
    /// How many requests may be on the wire at once.
    pub(crate) in_flight: usize,
}

/// A handle on one node; clones share the connection.
#[derive(Clone)]
pub(crate) struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    /// `host:port`, for reports and logs (never the password).
    name: String,
    endpoint: Endpoint,
    limits: Limits,
    slot: Arc<Slot<Conn>>,
    /// The restart guard, when on.
    guard: Option<Guard>,
    /// Whether the eviction policy has been asked about.
    policy_checked: AtomicBool,
    /// Whether the node has refused a release's announcement (`PUBLISH`).
    publish_refused: AtomicBool,
    /// Whether a command connection to the node was ever made: until one
    /// is, nothing was ever written to it, and there is nothing to remove.
    ever_connected: AtomicBool,
    /// Connections replaced for silence that may still deliver what was
    /// written on them (see [`retired`]).
    retired: Arc<Retired>,
    /// Removals not answered yet (see [`removals`]).
    removals: Removals,
    /// A permit per request on the wire ([`Limits::in_flight`]).
    in_flight: tokio::sync::Semaphore,
    /// Who this client's locks are taken by, written on each connection
    /// (see [`who`]); `None` in tests that need no record.
    who: Option<Arc<Registry>>,
    /// Whether the node has refused a record of [`who`](Self::who).
    who_refused: AtomicBool,
}

/// A command connection, since when it has left a request unanswered, and
/// when it last answered (as [`Moment::as_nanos`]; 0: nothing outstanding,
/// never).
#[derive(Clone)]
struct Conn {
    conn: CommandConn,
    waiting_since: Arc<AtomicU64>,
    heard_at: Arc<AtomicU64>,
    /// When it was made.
    made: u64,
    /// How many of the client's [`who`] records were written
    /// on it, and when they all last were (as [`Moment::as_nanos`]).
    registered: Arc<AtomicUsize>,
    registered_at: Arc<AtomicU64>,
}

impl Conn {
    /// A request is about to be sent: its moment, which starts the silence
    /// clock unless a request is already outstanding.
    fn sending(&self) -> u64 {
        let sent = Moment::now().as_nanos();
        if self.waiting_since.load(Ordering::Relaxed) == 0 {
            let _ =
                self.waiting_since
                    .compare_exchange(0, sent, Ordering::AcqRel, Ordering::Relaxed);
        }
        sent
    }

    /// A request that started the silence clock at `sent` was not sent
    /// after all: the clock is stopped again.
    fn unsent(&self, sent: u64) {
        let _ = self
            .waiting_since
            .compare_exchange(sent, 0, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// A request sent at `sent` was answered: nothing is outstanding as far
    /// as silence goes, and the connection answered (no earlier than then).
    fn heard(&self, sent: u64) {
        if self.waiting_since.load(Ordering::Relaxed) != 0 {
            self.waiting_since.store(0, Ordering::Release);
        }
        self.heard_at.fetch_max(sent, Ordering::AcqRel);
    }
}

/// How long a request may take, from its call to its answer (its turn
/// behind this process's other requests to the node aside).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Patience {
    /// Connecting and the reply within this (never less than the request
    /// timeout): the request timeout for a vote whose wait counts against
    /// a validity, longer for a release (see `Engine::release`).
    Within(Duration),
    /// Cleanup nobody waits for: a connection within the connect timeout,
    /// then the reply within the request timeout.
    Cleanup,
}

impl Node {
    /// A node reached through `client`. `lives` is shared by the nodes of
    /// one `Redlock` when the restart guard is on.
    /// `who`, when given, is written on each of its connections (see
    /// [`who`]).
    pub(crate) fn new(
        endpoint: Endpoint,
        limits: Limits,
        lives: Option<Arc<Lives>>,
        who: Option<Arc<Registry>>,
    ) -> Node {
        let failover = endpoint.fails_over().then(|| failover_margin(limits));
        Node {
            inner: Arc::new(Inner {
                name: endpoint.name(),
                endpoint,
                limits,
                slot: Slot::new(limits.connect),
                guard: lives.map(|lives| Guard::new(lives, failover)),
                policy_checked: AtomicBool::new(false),
                publish_refused: AtomicBool::new(false),
                ever_connected: AtomicBool::new(false),
                retired: Arc::default(),
                removals: Removals::default(),
                in_flight: tokio::sync::Semaphore::new(limits.in_flight),
                who,
                who_refused: AtomicBool::new(false),
            }),
        }
    }

    /// How the node's connections are made (for its subscriber ones).
    pub(crate) fn endpoint(&self) -> &Endpoint {
        &self.inner.endpoint
    }

    /// Why the node's word on the absence of a key of `life` is not to be
    /// taken: it restarted less than `life` (or the longest TTL we use)
    /// ago and may have forgotten it (the restart guard's quarantine), if
    /// the guard is on and saw it.
    pub(crate) fn quarantined(&self, life: Duration) -> Option<NodeFailure> {
        let guard = self.inner.guard.as_ref()?;
        guard.check(&self.inner.name, life).err()
    }

    /// How requests to the node are bounded.
    pub(crate) fn limits(&self) -> Limits {
        self.inner.limits
    }

    /// How the node is named in reports and logs: `host:port`.
    pub(crate) fn name(&self) -> &str {
        &self.inner.name
    }

    /// Runs `command`, bounded as `patience` says: by the request timeout,
    /// as a vote is; or, for cleanup nobody waits for, first waiting for a
    /// connection up to the connect timeout. Refused at once, with nothing
    /// sent, if it may create a key on a node that may have forgotten keys
    /// (see [`guard`]). With a `gated` lock (its record), nothing is sent
    /// once its [`Gate`] is shut ([`NodeFailure::NotWaited`]).
    /// Waits its turn behind this process's other requests to the node (at
    /// most [`Limits::in_flight`] on the wire) no longer than `queue`; that
    /// wait is not counted in its timeout.
    pub(crate) fn run(
        &self,
        command: &Arc<Prepared>,
        patience: Patience,
        gated: Option<&LockState>,
        queue: Duration,
    ) -> impl Future<Output = Result<Value, NodeFailure>> + Send + 'static + use<> {
        let admitted = match &self.inner.guard {
            Some(guard) => guard.admit(&self.inner.name, command.effect),
            None => Ok(()),
        };
        let inner = self.inner.clone();
        let command = command.clone();
        let gated = gated.cloned();
        async move {
            admitted?;
            #[cfg(feature = "metrics")]
            let start = Moment::now();
            let gate = gated.as_ref().map(|shared| &shared.gate);
            let reply = inner.run(&command, patience, gate, queue).await;
            #[cfg(feature = "metrics")]
            metrics::request(&inner.name, &reply, start.elapsed());
            if command.effect == Effect::Remove {
                // After the removal's own answer (or its timeout), never
                // before: written first on a retired connection that has
                // healed, the copy could delete the key ahead of it, and the
                // removal would find the key missing and not count as done.
                // Still behind whatever the retired connection carries.
                inner.retired.mirror(&command, &mut Vec::new());
            }
            reply
        }
    }

    /// Queues the removal `command`, which the node did not answer, to be
    /// sent again until it is answered or until `until`, when the keys it
    /// was for have expired (see [`removals`]). Returns the task that sends
    /// the node's queue, for the caller to run in the background, unless
    /// one runs already. Nothing is queued for a node no connection was
    /// ever made to (down, refusing, or refusing our credentials since
    /// this client began): no command ever reached it, so no key of ours
    /// can be there, and a removal sent again and again would only keep
    /// the process waiting (`Redlock::drain`) for a node that holds
    /// nothing. A node that timed out after a connection was made may
    /// hold the key, and is sent it again.
    pub(crate) fn remove_later(
        &self,
        command: Arc<Prepared>,
        until: Moment,
    ) -> Option<impl Future<Output = ()> + Send + 'static + use<>> {
        if !self.inner.ever_connected.load(Ordering::Acquire) {
            return None;
        }
        let start = self.inner.removals.queue(command, until);
        start.then(|| self.inner.clone().send_removals())
    }

    /// Whether this node answered a request sent within `within` on a
    /// command connection made before `known`: the network path that worked
    /// at `known` still does. (A connection made since does not count: a
    /// fault that silences the connections open at some moment and lets
    /// new ones through, a dead NAT entry, would pass unseen.)
    pub(crate) fn answered_within(&self, within: Duration, known: Moment) -> bool {
        self.inner.slot.live().is_some_and(|live| {
            Moment::from_nanos(live.conn.made) <= known
                && Moment::from_nanos(live.conn.heard_at.load(Ordering::Acquire)).elapsed() < within
        })
    }

    /// Another connection to this node went silent (a subscriber that did
    /// not answer its ping): the network path may be dead, so the command
    /// connection is replaced too, unless it answered within the last
    /// [`SILENCE_FLOOR`]. Saves the requests that would otherwise time out
    /// on it before it counts as silent by itself.
    pub(crate) fn suspect(&self) {
        let Some(live) = self.inner.slot.live() else {
            return;
        };
        let heard = Moment::from_nanos(live.conn.heard_at.load(Ordering::Acquire));
        if heard.elapsed() >= SILENCE_FLOOR && self.inner.retire(&live) {
            tracing::debug!(
                node = %self.inner.name,
                generation = live.generation,
                "another connection to this node went silent: replacing this one too"
            );
        }
    }

    /// Warns, once per node, that it refuses to announce releases.
    pub(crate) fn publish_refused(&self) {
        if !self.inner.publish_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                node = %self.inner.name,
                "this node refuses PUBLISH to lock channels: waiters elsewhere are not \
                 woken by releases and wait for the keys to expire; allow PUBLISH on \
                 the channels <key prefix>*:wake:* in the ACL"
            );
        }
    }
}

/// What the node-layer tests against real local servers
/// (`src/cluster_tests.rs`) look at and do, from outside `net`.
#[cfg(all(test, feature = "cluster"))]
impl Node {
    /// Makes (or finds) the command connection: its generation.
    pub(crate) async fn connect_now(&self) -> Result<u64, NodeFailure> {
        Ok(self.inner.connection().await?.0.generation)
    }

    /// Fails live connection `generation` with an I/O error `requests`
    /// times, as that many requests on it that met a broken socket do;
    /// false if it is not live.
    pub(crate) fn fail_connection(&self, generation: u64, requests: usize) -> bool {
        let Some(live) = self
            .inner
            .slot
            .live()
            .filter(|l| l.generation == generation)
        else {
            return false;
        };
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        for _ in 0..requests {
            self.inner.replace_connection(generation, &live.conn, &io);
        }
        true
    }

    /// The generation of the live command connection, 0 if none.
    pub(crate) fn live_generation(&self) -> u64 {
        self.inner.slot.generation()
    }

    /// The generations of the retired connections kept.
    pub(crate) fn retired_generations(&self) -> Vec<u64> {
        self.inner.retired.generations()
    }
}

impl Inner {
    /// Sends `command` by `deadline`, on a new connection if the live one
    /// turns out to be dead. That one retry is safe for every command a
    /// kind sends: it passes the round's gate like the first send, so it is
    /// made before the vote is decided and so before any rollback; an
    /// acquisition that did land on the old connection makes the retry
    /// answer "held" (a no, rolled back with the rest; one that observes
    /// the key recognises its own token), and the scripts compare the
    /// token, so running them twice changes no lock key (a waiter's place
    /// in the key's queue is kept, not doubled).
    async fn run(
        self: &Arc<Self>,
        command: &Prepared,
        patience: Patience,
        gate: Option<&Gate>,
        queue: Duration,
    ) -> Result<Value, NodeFailure> {
        let start = tokio::time::Instant::now();
        // A cleanup may wait for a connection up to the connect timeout,
        // and then has a request timeout for the reply; any other request
        // has one budget for both.
        let patient = matches!(patience, Patience::Cleanup);
        let connected_by = match patience {
            Patience::Cleanup => start + self.limits.connect.max(self.limits.request),
            Patience::Within(within) => start + within.clamp(self.limits.request, MAX_QUEUE),
        };
        // The failure of a first try on a connection that broke after it
        // was handed the command (it may have run), once a retry is made.
        let mut first_try: Option<NodeFailure> = None;
        let mut permit = None;
        // How long it waited for its turn (once: a retry keeps the permit).
        let mut queued = Duration::ZERO;
        loop {
            let (live, fresh) = timeout_at(connected_by + queued, self.connection())
                .await
                .map_err(|_| NodeFailure::Timeout)??;
            // Its turn on the wire: the time spent waiting behind this
            // process's own requests is not the node's, and is not counted.
            if permit.is_none() {
                let waiting = tokio::time::Instant::now();
                let until = waiting.checked_add(queue).unwrap_or(waiting + MAX_QUEUE);
                permit = match timeout_at(until, self.in_flight.acquire()).await {
                    Ok(Ok(permit)) => Some(permit),
                    Ok(Err(_)) | Err(_) => return Err(NodeFailure::Timeout),
                };
                queued = waiting.elapsed();
            }
            self.admit_again(command.effect)?;
            if let Some(guard) = &self.guard {
                guard.sending(command.effect);
            }
            let deadline = if patient {
                tokio::time::Instant::now() + self.limits.request
            } else {
                connected_by + queued
            };
            let conn = &live.conn;
            let first_sent = conn.sending();
            if matches!(command.effect, Effect::Grant { .. }) {
                self.register(conn, first_sent);
            }
            // When it was last sent: a cluster sends it again while its
            // slot is moving, and each `TRYAGAIN` is an answer, which
            // stops the silence clock and starts it again from there (the
            // next send follows within 40 ms). Taken for silence, a move
            // longer than the silence limit replaced the connection again
            // and again. (The clock is the whole cluster connection's, as
            // for any answer: one shard's `TRYAGAIN` stops it for a
            // request outstanding on another.)
            let sent = AtomicU64::new(first_sent);
            let answered = || {
                conn.heard(sent.load(Ordering::Acquire));
                sent.store(conn.sending(), Ordering::Release);
            };
            let watch = self.guard.is_some() && matches!(command.effect, Effect::Grant { .. });
            let reply =
                timeout_at(deadline, send(&conn.conn, command, gate, watch, &answered)).await;
            let sent = sent.load(Ordering::Acquire);
            match reply {
                Err(_) => return Err(self.timed_out(&live)),
                // The lock's removal began before this could be sent; but a
                // first try may have run, and the removal must not take
                // "never sent" for an answer then.
                Ok(None) => {
                    conn.unsent(sent);
                    return Err(first_try.unwrap_or(NodeFailure::NotWaited));
                }
                Ok(Some(Ok(Sent { reply, primary }))) => {
                    conn.heard(sent);
                    if let (Some(guard), Some(primary)) = (&self.guard, primary) {
                        // A cluster's grant, by a primary we may not know.
                        let life = command.effect.life().unwrap_or_default();
                        guard.granted_by(&self.name, life, primary)?;
                    }
                    return Ok(reply);
                }
                // A connection made earlier went stale (the node restarted,
                // say, or was demoted to a replica): make a new one and try
                // once more.
                Ok(Some(Err(e))) if needs_new_connection(&e) && !fresh && first_try.is_none() => {
                    self.replace_connection(live.generation, conn, &e);
                    first_try = Some(classify(&e));
                }
                Ok(Some(Err(e))) => return Err(self.failed(live.generation, conn, sent, &e)),
            }
        }
    }

    /// Connecting is what finds a restart: an acquisition is admitted again
    /// after it.
    fn admit_again(&self, effect: Effect) -> Result<(), NodeFailure> {
        match (&self.guard, effect) {
            (Some(guard), Effect::Grant { life }) => guard.check(&self.name, life),
            _ => Ok(()),
        }
    }

    /// A request on connection `live` timed out: the connection is retired
    /// if it has left a request unanswered for [`SILENT_TIMEOUTS`] request
    /// timeouts, and at least [`SILENCE_FLOOR`].
    fn timed_out(&self, live: &Live<Conn>) -> NodeFailure {
        let since = live.conn.waiting_since.load(Ordering::Acquire);
        let limit = (self.limits.request * SILENT_TIMEOUTS).max(SILENCE_FLOOR);
        if since != 0 && Moment::from_nanos(since).elapsed() >= limit && self.retire(live) {
            tracing::warn!(
                node = %self.name,
                generation = live.generation,
                silent_ms = Moment::from_nanos(since).elapsed().as_millis() as u64,
                "no answer on this connection for too long: replacing it"
            );
        }
        NodeFailure::Timeout
    }

    /// An error answer (the connection is alive), or a broken connection
    /// or a server no longer the primary (dropped).
    fn failed(&self, generation: u64, conn: &Conn, sent: u64, e: &RedisError) -> NodeFailure {
        if needs_new_connection(e) {
            self.replace_connection(generation, conn, e);
        } else {
            conn.heard(sent);
        }
        classify(e)
    }

    /// Replaces `live` for its silence: says whether it was still the live
    /// connection. It is kept open, not closed: what was written on it may
    /// still reach the node (TCP retransmits after a partition heals; a
    /// frozen node reads its buffer when thawed), so removals are written
    /// on it too, behind it (see [`retired`]). Retired before it leaves the
    /// slot, so that a removal sent meanwhile finds it in one or the other.
    fn retire(&self, live: &Live<Conn>) -> bool {
        self.retired.retire(
            &self.name,
            live.generation,
            live.conn.conn.clone(),
            Duration::ZERO,
        );
        self.slot.forget(live.generation)
    }

    /// Sends the node's queued removals, round after round, until none is
    /// left unanswered and unexpired (see [`removals`]).
    async fn send_removals(self: Arc<Self>) {
        let mut pause = REMOVAL_PAUSE;
        loop {
            tokio::time::sleep(pause).await;
            let Some(mut round) = self.removals.take() else {
                return;
            };
            let replies = futures::future::join_all(round.iter().map(|queued| {
                self.run(
                    &queued.command,
                    Patience::Cleanup,
                    None,
                    queued.until.remaining(),
                )
            }))
            .await;
            // After the answers, as in `Node::run`.
            for queued in &mut round {
                self.retired.mirror(&queued.command, &mut queued.mirrored);
            }
            let sent = round.len();
            let unanswered: Vec<_> = round
                .into_iter()
                .zip(replies)
                .filter(|(_, reply)| reply.as_ref().is_err_and(NodeFailure::unanswered))
                .map(|(queued, _)| queued)
                .collect();
            pause = if unanswered.len() < sent {
                REMOVAL_PAUSE
            } else {
                (pause * 2).min(REMOVAL_PAUSE_MAX)
            };
            tracing::debug!(
                node = %self.name,
                sent,
                unanswered = unanswered.len(),
                "removals sent again"
            );
            self.removals.put_back(unanswered);
        }
    }

    /// Replaces connection `generation` after error `e`. A plain one is
    /// dropped: it is broken, or its server is no longer the primary
    /// (`READONLY`), and nothing more is written on it. A cluster
    /// connection is retired ([`retire`](Self::retire)) instead: the error
    /// came from one of its servers, and requests already handed to it can
    /// still be written on its other sockets, or on a socket it reconnects
    /// after a slot refresh; the removals sent meanwhile are written on it
    /// too, behind them (see [`retired`]), for at least the connect timeout
    /// (redis-rs's own steps are bounded by fractions of it, see
    /// [`cluster`]) and until its drain.
    fn replace_connection(&self, generation: u64, conn: &Conn, e: &RedisError) {
        if conn.conn.is_cluster() {
            self.retired.retire(
                &self.name,
                generation,
                conn.conn.clone(),
                self.limits.connect,
            );
            if self.slot.forget(generation) {
                tracing::debug!(node = %self.name, generation, error = %e, "cluster connection retired after an error");
            }
            return;
        }
        self.drop_connection(generation, e);
    }

    fn drop_connection(&self, generation: u64, e: &RedisError) {
        if self.slot.forget(generation) {
            tracing::debug!(node = %self.name, generation, error = %e, "connection dropped");
        }
    }

    /// The live connection, or the one being made (in the background, see
    /// [`slot`]); says whether this call waited for it to be made.
    async fn connection(self: &Arc<Self>) -> Result<(Live<Conn>, bool), NodeFailure> {
        let inner = self.clone();
        self.slot
            .get(move |generation| async move { inner.connect(generation).await })
            .await
    }

    /// Makes a connection: TCP and handshake, then the restart guard's
    /// `INFO server`, before anyone uses it.
    async fn connect(self: Arc<Self>, generation: u64) -> Result<Conn, NodeFailure> {
        // Our own timeouts bound connecting and every request; the
        // library's would only add other ones.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None)
            .set_pipeline_buffer_size(PIPELINE_BUFFER);
        let (mut conn, primary) = self.endpoint.connect(&config).await?;
        denial::check(&conn).await?;
        // Before anything can be written on it (see `Node::remove_later`).
        self.ever_connected.store(true, Ordering::Release);
        #[cfg(feature = "cluster")]
        if let (Some(guard), CommandConn::Cluster(cluster)) = (&self.guard, &mut conn) {
            let born = !guard.knows_primaries();
            let info = match cluster::primaries(&cluster.0, born).await {
                Ok(primaries) => Ok(primaries),
                Err(e) if is_connection_error(&e) => return Err(classify(&e)),
                Err(e) => Err(e.to_string()),
            };
            guard.cluster_connected(&self.name, info);
        }
        if let (Some(guard), CommandConn::Plain(_)) = (&self.guard, &conn) {
            let fails_over = self.endpoint.fails_over();
            let born = !guard.knows_identity();
            #[allow(unused_mut)]
            let mut info = guard::ask(&mut conn, fails_over, born)
                .await
                .map_err(|e| classify(&e))?;
            // A Sentinel-managed primary first met that was promoted in its
            // life: its uptime cannot time that failover; the sentinels can.
            #[cfg(feature = "sentinel")]
            if let (Endpoint::Sentinel(sentinel), Ok(info)) = (&self.endpoint, &mut info)
                && born
                && info.promoted
            {
                info.promoted_ago = Some(sentinel.switched_ago().await.unwrap_or_default());
            }
            guard.connected(&self.name, info);
        }
        tracing::debug!(node = %self.name, generation, "connected");
        if !self.policy_checked.swap(true, Ordering::Relaxed) {
            tokio::spawn(check_eviction_policy(self.name.clone(), conn.clone()));
        }
        #[cfg(feature = "sentinel")]
        if let (Endpoint::Sentinel(sentinel), Some(primary)) = (&self.endpoint, primary) {
            tokio::spawn(recheck(
                Arc::downgrade(&self),
                generation,
                sentinel.clone(),
                primary,
            ));
        }
        #[cfg(not(feature = "sentinel"))]
        let _ = primary;
        let made = Moment::now().as_nanos();
        Ok(Conn {
            conn,
            waiting_since: Arc::default(),
            heard_at: Arc::new(AtomicU64::new(made)),
            made,
            registered: Arc::default(),
            registered_at: Arc::new(AtomicU64::new(made)),
        })
    }

    /// Before an acquisition is sent on `conn` at `now`: writes the
    /// client's [`who`] records it lacks (its first
    /// acquisition, a label new to it), or all of them again once they are
    /// half their expiry old on it, in the background: the acquisition
    /// waits for none of it, and costs nothing more when there is nothing
    /// to write (two loads). A refusal (an ACL without the key) is warned
    /// of once per node, and changes nothing else.
    fn register(self: &Arc<Self>, conn: &Conn, now: u64) {
        let Some(who) = &self.who else {
            return;
        };
        let count = who.count();
        let at = conn.registered_at.load(Ordering::Relaxed);
        let stale = now.saturating_sub(at) > (who::EXPIRY / 2).as_nanos() as u64;
        if !stale && conn.registered.load(Ordering::Relaxed) >= count {
            return;
        }
        let from = if stale {
            if conn
                .registered_at
                .compare_exchange(at, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_err()
            {
                return;
            }
            conn.registered.fetch_max(count, Ordering::AcqRel);
            0
        } else {
            let done = conn.registered.fetch_max(count, Ordering::AcqRel);
            if done >= count {
                return;
            }
            done
        };
        let records = who.records(from, count);
        let (inner, conn) = (self.clone(), conn.conn.clone());
        tokio::spawn(async move {
            let writes = records.iter().map(|record| {
                let set = record.set();
                let conn = conn.clone();
                async move { query(conn, &set).await }
            });
            let written = tokio::time::timeout(MAX_LOAD, futures::future::join_all(writes)).await;
            // A refusal (an ACL, `OOM`) is the node's word, warned of once; a
            // connection that broke or went silent says nothing of the node.
            let refusal = match written {
                Err(_) => None,
                Ok(replies) => replies.into_iter().find_map(Result::err),
            };
            match refusal {
                Some(e) if !is_connection_error(&e) => {
                    if !inner.who_refused.swap(true, Ordering::Relaxed) {
                        tracing::warn!(
                            node = %inner.name,
                            error = %e,
                            "this node refused the record of who takes this client's locks \
                             (PSETEX <key prefix>who:<id>): status and errors elsewhere cannot \
                             name them; allow PSETEX on those keys in the ACL"
                        );
                    }
                }
                _ => tracing::debug!(node = %inner.name, "who records sent"),
            }
        });
    }
}

/// How much longer than the longest TTL a Sentinel-managed node is
/// quarantined after its `run_id` changed (see [`guard`]): the time a
/// client still connected to the old primary may go on writing there after
/// a majority of the sentinels named the new one, at the most.
///
/// The argument. A client B that moved to the new primary at `t_B`
/// resolved it through a majority of the sentinels, so that majority named
/// it from some `t_p ≤ t_B` on. A client A connected to the old primary
/// re-checks it ([`recheck`]) every [`RECHECK`](sentinel::RECHECK) `P`,
/// each query bounded by the connect timeout `c`, and keeps the connection
/// only if a majority names the old primary: the query under way at `t_p`
/// may still return the old answer by `t_p + c`; the next starts by
/// `t_p + c + P` and, since a majority that named the new primary at `t_p`
/// cannot also name the old one (they share a sentinel, which names one),
/// gets no majority for it by `t_p + 2c + P` and retires the connection,
/// whatever the others answer or whether they answer at all. A new
/// connection needs a majority too. So the last request A hands to that
/// connection belongs to a lock attempt that started by `t_p + P + 2c`;
/// such a request may still wait for an in-flight permit and land on the
/// old primary later, but the lock's validity counts from the attempt's
/// start, so a lock that counts the old primary's vote is valid until at
/// most `t_p + P + 2c` plus a TTL (and an attempt that fails has its
/// removal mirrored on the retired connection, see [`retired`]). B's
/// quarantine of the new primary, the longest TTL plus this margin
/// (`P + 2c` and a request timeout `r` as slack for the request's own
/// landing) from `t_B ≥ t_p`, outlasts it: the new primary votes for no
/// one while such a lock is valid.
///
/// The margin is computed from **this client's** timeouts, and the
/// argument is about every other client's re-check: it holds only if every
/// client of a Sentinel-managed node uses the same (or smaller) connect and
/// node timeouts and the same re-check period (this library's
/// [`RECHECK`](sentinel::RECHECK)). A client with a longer connect timeout
/// may write to the old primary past the quarantine of a client with a
/// shorter one. (A partition that cuts the old primary and its clients off
/// from the sentinels leaves those clients without the node; for clients
/// that never re-check, see docs/SAFETY.md, "One Sentinel set alone".)
#[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
fn failover_margin(limits: Limits) -> Duration {
    #[cfg(feature = "sentinel")]
    let recheck = sentinel::RECHECK;
    #[cfg(not(feature = "sentinel"))]
    let recheck = Duration::ZERO;
    recheck + limits.connect * 2 + limits.request
}

/// Re-checks, every [`RECHECK`](sentinel::RECHECK), that a majority of a
/// Sentinel-managed node's sentinels still name `primary`, the server the
/// command connection `generation` goes to; retires the connection (it
/// still carries removals, see [`retired`]) when they name another, so that
/// the next request resolves the node again and the restart guard sees the
/// new `run_id`. Anything but a majority naming `primary` (another
/// primary, no majority, sentinels unreachable) retires it. Holds the node only by a `Weak`, and only between queries:
/// ends when the node is dropped or the connection is no longer live. Each
/// query is bounded ([`Sentinel::majority`](sentinel::Sentinel::majority)).
#[cfg(feature = "sentinel")]
async fn recheck(
    node: std::sync::Weak<Inner>,
    generation: u64,
    sentinels: sentinel::Sentinel,
    primary: (String, u16),
) {
    let live = |node: &std::sync::Weak<Inner>| {
        let inner = node.upgrade()?;
        let live = inner.slot.live().filter(|l| l.generation == generation)?;
        Some((inner, live))
    };
    loop {
        tokio::time::sleep(sentinel::RECHECK).await;
        if live(&node).is_none() {
            return;
        }
        // Only a majority's positive word keeps the connection: with one
        // sentinel slow and another stale there is no majority, and the
        // majority that named a new primary may be among those not heard.
        let answer = sentinels.majority().await;
        if answer.as_ref().is_ok_and(|named| *named == primary) {
            continue;
        }
        let Some((inner, live)) = live(&node) else {
            return;
        };
        if inner.retire(&live) {
            tracing::warn!(
                node = %inner.name,
                generation,
                "no majority of the sentinels confirms this connection's primary (they name \
                 another, disagree or do not answer): the connection is replaced"
            );
        }
        return;
    }
}

/// A command's reply and, on a cluster asked to watch, the identity of the
/// primary that ran it (see [`cluster`]).
struct Sent {
    reply: Value,
    primary: Option<Result<String, String>>,
}

/// Sends one command and reads its reply; `None` if `gate` was shut before
/// the command (or, after `NOSCRIPT`, its `EVAL`) could be handed over.
/// With `watch`, a cluster node also says which primary ran it: the
/// command sent is its script's twin ([`cluster::watched`]).
async fn send(
    conn: &CommandConn,
    command: &Prepared,
    gate: Option<&Gate>,
    watch: bool,
    answered: &(dyn Fn() + Sync),
) -> Option<Result<Sent, RedisError>> {
    let watch = watch && conn.is_cluster();
    let reply = routed(
        conn,
        command,
        first_of(command, watch),
        gate,
        watch,
        answered,
    )
    .await?;
    match reply {
        // Boxed: rare (after a restart or `SCRIPT FLUSH`), it would
        // otherwise add its `EVAL` to the state every request keeps.
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            match eval_of(command, watch) {
                Some((eval, script)) => {
                    Box::pin(send_eval(
                        conn, command, eval, script, gate, watch, answered,
                    ))
                    .await
                }
                None => Some(Err(e)),
            }
        }
        reply => Some(reply),
    }
}

/// Sends `cmd`, one of `command`'s calls: on a plain connection as it is;
/// on a cluster to the primary of its key's slot, redirects followed by us
/// (see [`cluster`]), and with `watch` read as a [`cluster::watched`]
/// script's reply; `answered` is called each time a cluster answers that
/// the slot is moving, before `cmd` is sent again ([`cluster::send`]).
async fn routed(
    conn: &CommandConn,
    command: &Prepared,
    cmd: &redis::Cmd,
    gate: Option<&Gate>,
    watch: bool,
    answered: &(dyn Fn() + Sync),
) -> Option<Result<Sent, RedisError>> {
    match conn {
        CommandConn::Plain(_) => {
            let _ = (command, watch, answered);
            let reply = Pass::new(gate, query(conn.clone(), cmd)).await?;
            Some(reply.map(|reply| Sent {
                reply,
                primary: None,
            }))
        }
        #[cfg(feature = "cluster")]
        CommandConn::Cluster(cluster) => {
            let key = cluster::route_key(command);
            let ran = cluster::send(&cluster.0, cmd, key.as_deref(), gate, watch, answered).await?;
            Some(ran.and_then(|ran| {
                ran.reply.map(|reply| Sent {
                    reply,
                    primary: ran.primary,
                })
            }))
        }
    }
}

/// `send`'s second try of a script the node lacked: `eval`, the `EVAL` of
/// `script`.
async fn send_eval(
    conn: &CommandConn,
    command: &Prepared,
    eval: redis::Cmd,
    script: &Script,
    gate: Option<&Gate>,
    watch: bool,
    answered: &(dyn Fn() + Sync),
) -> Option<Result<Sent, RedisError>> {
    let eval = routed(conn, command, &eval, gate, watch, answered).await;
    if eval.is_none() {
        // The round was decided (its lock's removal began) while the node
        // said it lacked the script: a node slower than the others would be
        // cut off so every time, and never learn it. Loading it runs
        // nothing and touches no key.
        let (conn, load) = (conn.clone(), script.load());
        tokio::spawn(async move {
            let _ = tokio::time::timeout(MAX_LOAD, query(conn, &load)).await;
        });
    }
    eval
}

/// The call `command` sends first: its own; or with `watch` (a cluster
/// grant with the guard on) the `EVALSHA` of its script's
/// [`cluster::watched`] twin, made once for every node.
fn first_of(command: &Prepared, watch: bool) -> &redis::Cmd {
    #[cfg(feature = "cluster")]
    if watch {
        return command
            .watched
            .get_or_init(|| cluster::watched_call("EVALSHA", command).0);
    }
    let _ = watch;
    &command.first
}

/// The `EVAL` that a node lacking the script of [`first_of`]'s call gets
/// instead, and that script; `None` for a plain command.
fn eval_of(command: &Prepared, watch: bool) -> Option<(redis::Cmd, &'static Script)> {
    #[cfg(feature = "cluster")]
    if watch {
        return Some(cluster::watched_call("EVAL", command));
    }
    let _ = watch;
    let call = command.script.as_ref()?;
    Some((call.call_of("EVAL", call.script), call.script))
}

/// How long a script's loading, in the background, may take.
const MAX_LOAD: Duration = Duration::from_secs(5);

async fn query(mut conn: CommandConn, cmd: &redis::Cmd) -> Result<Value, RedisError> {
    cmd.query_async(&mut conn).await
}

/// Warns if the node may evict lock keys under memory pressure: with a
/// `maxmemory` set, every policy but `noeviction` can evict keys that have
/// a TTL, and a lock whose key is evicted is silently lost. Asked once per
/// node; a node that forbids `CONFIG` (managed Redis) cannot tell, and
/// nothing is said.
async fn check_eviction_policy(node: String, mut conn: CommandConn) {
    let query = async {
        let (_, max): (String, u64) = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory")
            .query_async(&mut conn)
            .await?;
        let (_, policy): (String, String) = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut conn)
            .await?;
        Ok::<_, RedisError>((max, policy))
    };
    if let Ok(Ok((max, policy))) = tokio::time::timeout(Duration::from_secs(5), query).await
        && max > 0
        && policy != "noeviction"
    {
        tracing::warn!(
            node,
            maxmemory = max,
            policy = %policy,
            "this node may evict lock keys under memory pressure, silently losing locks: \
             set maxmemory-policy noeviction"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::quorum::Plan;
    use crate::proto::{Call, Command, Effect};

    /// A command with `effect`, as a kind would build one: the node looks
    /// at the effect, not at what the command is (a node knows no kind).
    fn with(effect: Effect) -> Arc<Prepared> {
        let mut cmd = redis::cmd("SET");
        cmd.arg("k").arg("token");
        Prepared::new(Command {
            call: Call::Command(cmd),
            effect,
        })
    }

    #[tokio::test]
    async fn a_quarantined_node_refuses_acquisitions_at_once_and_lets_the_rest_through() {
        // Nothing listens on port 1: what is sent fails as a connection.
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let limits = Limits {
            request: Duration::from_secs(5),
            connect: Duration::from_secs(5),
            in_flight: 8,
        };
        let node = Node::new(Endpoint::Server(client), limits, Some(Arc::default()), None);
        let plan = Plan::new(Duration::from_millis(1_500), 0.01).unwrap();
        let acquire = with(Effect::Grant { life: plan.life() });
        let extend = with(Effect::Refresh { life: plan.life() });
        let release = with(Effect::Remove);
        let sent = |r: Result<Value, NodeFailure>| matches!(r, Err(NodeFailure::Connection(_)));
        let vote = Patience::Within(limits.request);

        assert!(sent(node.run(&acquire, vote, None, limits.connect).await));
        let guard = node.inner.guard.as_ref().unwrap();
        let info = |id: &str| {
            Ok(guard::ServerInfo {
                identity: id.into(),
                uptime: Duration::ZERO,
                born_empty: id == "a",
                promoted: false,
                promoted_ago: None,
            })
        };
        guard.connected("n", info("a"));
        guard.connected("n", info("b"));
        match node.run(&acquire, vote, None, limits.connect).await {
            Err(NodeFailure::Restarted { remaining }) => {
                assert!(remaining > Duration::from_millis(1_400), "{remaining:?}");
                assert!(remaining <= Duration::from_millis(1_600), "{remaining:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(sent(node.run(&extend, vote, None, limits.connect).await));
        assert!(sent(
            node.run(&release, Patience::Cleanup, None, limits.connect)
                .await
        ));
        assert_eq!(release.effect, Effect::Remove);
    }
}
