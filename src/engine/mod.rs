//! The quorum engine: what every lock kind gets without a line of its own.
//!
//! An [`Engine`] holds the nodes and the options of one `Redlock`. Given a
//! [`Kind`] and a lock's identity it runs the rounds of the protocol:
//!
//! * [`attempt`](Engine::attempt): the kind's acquisition on every node at
//!   once, a decision at the first majority, the validity check, and on
//!   failure the rollback on **every** node (a request that timed out may
//!   still have been applied); and, for a kind that asks for it once a
//!   majority agreed, a second round on every node before the lock is
//!   handed out (the fenced kind's counter write), counted in the validity;
//! * [`extend`](Engine::extend) and [`release`](Engine::release): the same
//!   fan-out and count for the kind's other two commands;
//! * [`acquire`]: the loop around attempts — cancel safety, retries, and
//!   waiting for a release ([`crate::wait`]);
//! * [`handle`]: what a held lock shares with its handles — its validity
//!   deadline, the one extension in flight, the watchdog.
//!
//! Counting and its arithmetic live in [`crate::proto::quorum`]; connections
//! in [`crate::net`].

pub(crate) mod acquire;
pub(crate) mod handle;
mod takers;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::Value;
use tokio::sync::Notify;

use crate::clock::Moment;
use crate::config::Options;
use crate::error::{NodeFailure, Report};
use crate::kinds::Kind;
use crate::metrics;
use crate::net::guard::Lives;
use crate::net::{Endpoint, Limits, Node, Patience};
use crate::proto::quorum::{self, Plan, Stragglers, Tally};
use crate::proto::{Answer, Command, Keys, LockId, LockState, Prepared};
use crate::wait::{Waiters, queue};
use crate::who::Registry;

/// The nodes, the options and the waiters' subscriptions of one `Redlock`.
pub(crate) struct Engine {
    pub(crate) nodes: Vec<Node>,
    pub(crate) options: Options,
    pub(crate) waiters: Waiters,
    background: Arc<Background>,
    /// Who takes its locks, and who took others' (see `who`).
    pub(crate) who: Arc<Registry>,
}

/// The requests the engine leaves to run in the background (the nodes
/// beyond a decision, rollbacks nobody waits for, releases of dropped
/// locks), counted so that [`Engine::drained`] can wait for them.
#[derive(Default)]
struct Background {
    running: AtomicUsize,
    idle: Notify,
}

impl Background {
    /// Runs `fut` to its end on the current tokio runtime, counted; not at
    /// all outside one.
    fn spawn<F>(self: &Arc<Self>, fut: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return;
        };
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(self.clone());
        handle.spawn(async move {
            let _running = running;
            fut.await;
        });
    }
}

impl queue::Detach for Arc<Background> {
    fn detach<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.spawn(fut);
    }
}

/// One background task, counted while it lives (also if it is aborted).
struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// How a round's command is sent.
#[derive(Clone, Copy)]
enum Sending<'a> {
    /// Through the gate of the lock whose record is `lock`: never once its
    /// removal has begun (acquisitions, confirmations, extensions); waiting
    /// its turn behind this process's other requests to a node (see
    /// [`Builder::max_in_flight`](crate::Builder::max_in_flight)) no longer
    /// than `queue`, after which no validity would be left.
    Gated {
        lock: &'a LockState,
        queue: Duration,
    },
    /// A removal: waits its turn until `until`, and is sent again where it
    /// got no answer, until `until`. Its answers are waited for `within`
    /// (no less than the node timeout).
    Removal { until: Moment, within: Duration },
}

impl Sending<'_> {
    /// An acquisition's or an extension's round of the lock `id` for `plan`.
    fn gated<'a>(id: &'a LockId, plan: &Plan) -> Sending<'a> {
        Sending::Gated {
            lock: id.state(),
            queue: plan.best_validity(),
        }
    }

    /// A removal of the keys of `plan`, sent now: they cannot outlive
    /// their life from now. Its answers are waited for `within`, the node
    /// timeout at least.
    fn removal(plan: &Plan, within: Duration) -> Sending<'static> {
        Sending::Removal {
            until: Moment::now().after(plan.life()),
            within,
        }
    }
}

/// A rollback's want of stragglers (see [`Engine::rollback`]).
type NoStragglers = Stragglers<std::future::Ready<Answer>>;

/// The outcome of one acquisition attempt.
pub(crate) enum Attempt {
    /// A majority holds the key; the lock is valid until `deadline`, and
    /// carries the fencing token `fence` if its kind gives one.
    Won {
        deadline: Moment,
        fence: Option<u64>,
    },
    /// Not held; already rolled back on the nodes that answered (the others
    /// in the background). Also how long the attempt took.
    Failed(Tally, Duration),
}

impl Engine {
    pub(crate) fn new(endpoints: Vec<Endpoint>, options: Options) -> Engine {
        let limits = Limits {
            request: options.node_timeout,
            connect: options.connect_timeout,
            in_flight: options.max_in_flight,
        };
        // The restart guard's record of how long keys live, shared by the
        // nodes: other clients are taken to use TTLs like ours.
        let lives = options.restart_guard.then(|| Arc::new(Lives::default()));
        // Who takes this client's locks, written on every node (see `who`).
        let who = Arc::new(Registry::new(&options.key_prefix, options.cluster_keys));
        let nodes: Vec<Node> = endpoints
            .into_iter()
            .map(|e| Node::new(e, limits, lives.clone(), Some(who.clone())))
            .collect();
        let waiters = Waiters::new(&nodes);
        Engine {
            nodes,
            options,
            waiters,
            background: Arc::default(),
            who,
        }
    }

    /// Runs `fut` to its end in the background, on the current tokio
    /// runtime if there is one (otherwise not at all: keys then expire at
    /// their TTL).
    fn detach<F>(&self, fut: F)
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.background.spawn(fut);
    }

    /// Resolves once nothing runs in the background.
    pub(crate) async fn drained(&self) {
        loop {
            let idle = self.background.idle.notified();
            let mut idle = std::pin::pin!(idle);
            idle.as_mut().enable();
            if self.background.running.load(Ordering::Acquire) == 0 {
                return;
            }
            idle.await;
        }
    }

    /// How many nodes must agree.
    pub(crate) fn quorum(&self) -> usize {
        quorum::quorum(self.nodes.len())
    }

    /// The report of `tally`, with the nodes' names.
    pub(crate) fn report(&self, tally: &Tally) -> Report {
        tally.report(self.nodes.iter().map(Node::name))
    }

    /// Sends `command` to every node; each reply, or error, is read by
    /// `read` (the kind's: a kind reads its own errors, see
    /// [`Kind::read_error`]). Node
    /// `i` is patient (cleanup nobody waits for: see `net`) if `patient(i)`.
    /// A gated round sends nothing once its lock's gate is shut. A removal
    /// that gets no answer from a node is sent there again in the
    /// background until it does, or until its keys have expired.
    ///
    /// The requests are made as the iterator is read, in node order, each
    /// future straight into its place (a burst keeps thousands of rounds at
    /// once: they are not first collected and then moved).
    fn ask<'a, R>(
        &'a self,
        command: Command,
        read: R,
        patient: &'a (dyn Fn(usize) -> bool + Sync),
        sent: Sending<'a>,
    ) -> impl Iterator<Item = impl Future<Output = Answer> + Send + 'static + use<R>> + use<'a, R>
    where
        R: Fn(Result<Value, NodeFailure>) -> Answer + Clone + Send + Sync + 'static,
    {
        let command = Prepared::new(command);
        self.nodes.iter().enumerate().map(move |(i, node)| {
            let (gate, queue, within, retry) = match sent {
                Sending::Gated { lock, queue } => (Some(lock), queue, Duration::ZERO, None),
                Sending::Removal { until, within } => (
                    None,
                    until.remaining(),
                    within,
                    Some((self.background.clone(), command.clone(), until)),
                ),
            };
            let patience = if patient(i) {
                Patience::Cleanup
            } else {
                Patience::Within(within)
            };
            let reply = node.run(&command, patience, gate, queue);
            let (read, node) = (read.clone(), node.clone());
            async move {
                let answer = match reply.await {
                    Ok(reply) => read(Ok(reply)),
                    Err(failure) => {
                        if let Some((background, command, until)) = retry
                            && failure.unanswered()
                            && let Some(send) = node.remove_later(command, until)
                        {
                            background.spawn(send);
                        }
                        read(Err(failure))
                    }
                };
                if answer.unannounced {
                    node.publish_refused();
                }
                answer
            }
        })
    }

    fn outcomes<'a>(
        &'a self,
        kind: &Arc<dyn Kind>,
        command: Command,
        patient: &'a (dyn Fn(usize) -> bool + Sync),
        sent: Sending<'a>,
    ) -> impl Iterator<Item = impl Future<Output = Answer> + Send + 'static + use<>> + use<'a> {
        let kind = kind.clone();
        self.ask(
            command,
            move |reply| match reply {
                Ok(reply) => kind.read_outcome(reply),
                Err(failure) => Err(kind.read_error(failure)).into(),
            },
            patient,
            sent,
        )
    }

    /// One acquisition attempt.
    pub(crate) async fn attempt(
        &self,
        kind: &Arc<dyn Kind>,
        id: &LockId,
        plan: &Plan,
        waiter: Option<&str>,
    ) -> Attempt {
        // The validity clock starts here, before any request of the attempt
        // is queued, let alone written: whatever the requests then spend
        // waiting their turn (`Builder::max_in_flight`), connecting or on
        // the wire is counted against the validity. A node's TTL starts
        // when it applies the command, later than this, so the keys outlive
        // the validity the lock reports.
        let start = Moment::now();
        let name = kind.name(id);
        metrics::attempt(name);
        let reader = kind.clone();
        let answers = self.ask(
            kind.acquire(id, plan, waiter),
            move |reply| match reply {
                Ok(reply) => reader.read_acquire(reply),
                Err(failure) => Err(reader.read_error(failure)).into(),
            },
            &|_| false,
            Sending::gated(id, plan),
        );
        let (mut tally, stragglers) = quorum::decide(answers).await;
        let took = start.elapsed();
        if self.holds(plan, start, &tally, "acquire") {
            let agreed = kind.agreed(id, &tally);
            if let Some(confirm) = agreed.confirm {
                // A second round, counted in the validity like the first.
                // The first round's slow nodes wait for its outcome: if it
                // fails, they are dropped before the rollback, as below.
                let outcomes = self.outcomes(kind, confirm, &|_| false, Sending::gated(id, plan));
                let (second, rest) = quorum::decide(outcomes).await;
                self.detach(rest.finish());
                if !self.holds(plan, start, &second, "confirm") {
                    let took = start.elapsed();
                    drop(stragglers);
                    self.rollback(kind, id, &tally, plan, None::<NoStragglers>)
                        .await;
                    return Attempt::Failed(second, took);
                }
            }
            // The slow nodes still get the key, and answer in the
            // background: a lock on more than a bare majority survives the
            // loss of more nodes. What has not been sent by the time the
            // lock's release begins never is (see `proto::gate`).
            match waiter {
                // A node that did not say yes may keep this waiter queued
                // (its attempt found the old holder's key there): once the
                // stragglers have answered, it leaves the queues of those
                // nodes, lest a later release wake a wait that has ended.
                Some(member) if tally.agreed() < self.nodes.len() => {
                    let said_yes: Vec<bool> =
                        (0..self.nodes.len()).map(|i| tally.said_yes(i)).collect();
                    let (nodes, leave) = (self.nodes.clone(), queue::leave(&id.keys, member));
                    let background = self.background.clone();
                    self.detach(async move {
                        let said_yes = stragglers.finish_counting(said_yes).await;
                        queue::leave_queues(nodes, leave, said_yes, background).await;
                    });
                }
                _ => self.detach(stragglers.finish()),
            }
            metrics::acquired(name);
            return Attempt::Won {
                deadline: plan.deadline(start),
                fence: agreed.fence,
            };
        }
        if (waiter.is_some() && tally.unclear()) || tally.ambiguous() {
            // A waiter that cannot tell whom to wait for hears the other
            // nodes out (each within its timeout) rather than back off as
            // if waiters split the vote; so does any attempt whose answers
            // tell neither contention nor an outage (nodes failing), so
            // that its error says which (`Error::is_contended`,
            // `is_unavailable`). The nodes not waited for were asked at
            // the same moment as the one that failed: hearing them out
            // costs little more than the failure's own timeout. Hearing
            // them out for the error's sake takes at most one node timeout
            // more (a request still waiting for its node's in-flight cap
            // would wait up to the TTL): those still out then are dropped,
            // as before, and the rollback below goes to every node.
            if waiter.is_some() && tally.unclear() {
                stragglers.hear_out(&mut tally).await;
            } else {
                let limit = self.options.node_timeout;
                let _ = tokio::time::timeout(limit, stragglers.hear_out(&mut tally)).await;
            }
            self.rollback(kind, id, &tally, plan, None::<NoStragglers>)
                .await;
        } else if waiter.is_some() {
            // The nodes not waited for are heard out in the background, and
            // rolled back only where they may have written our key: a
            // waiter's attempt names the holder where it wrote nothing, as
            // most of them do once the refusals decided the vote (rolled
            // back blindly, they cost two requests per hand-off).
            self.rollback(kind, id, &tally, plan, Some(stragglers))
                .await;
        } else {
            // Stragglers are dropped: a command not yet written is then
            // never sent, and one already written is ordered before the
            // rollback on its connection.
            drop(stragglers);
            self.rollback(kind, id, &tally, plan, None::<NoStragglers>)
                .await;
        }
        Attempt::Failed(tally, took)
    }

    /// Whether a round's votes (an acquisition's first or second, or an
    /// extension's) hold the lock: a majority agreed, and more than the
    /// minimum validity is left after the time since `start`.
    fn holds(&self, plan: &Plan, start: Moment, tally: &Tally, round: &'static str) -> bool {
        let elapsed = start.elapsed();
        let valid = plan.validity(elapsed, self.options.min_validity);
        tracing::debug!(
            round,
            agreed = tally.agreed(),
            needed = tally.needed(),
            elapsed_us = elapsed.as_micros() as u64,
            validity_ms = valid.map(|v| v.as_millis() as u64),
            "votes counted"
        );
        tally.has_majority() && valid.is_some()
    }

    /// Releases on every node: waits for the nodes that replied to the
    /// acquisition (they are fast) and leaves the others — timed out, not
    /// connected, not waited for — to finish in the background, patiently:
    /// a node that was only paused still gets it. With the attempt's
    /// `stragglers` (the nodes not waited for), each of those is sent the
    /// release once it has answered, unless its answer shows that it wrote
    /// nothing (it named the holder, or the attempt was never sent to it).
    async fn rollback<F>(
        &self,
        kind: &Arc<dyn Kind>,
        id: &LockId,
        tally: &Tally,
        plan: &Plan,
        stragglers: Option<Stragglers<F>>,
    ) where
        F: Future<Output = Answer> + Send + 'static,
    {
        // Whatever of the attempt has not been sent by now never is; what
        // has is queued ahead of the rollback.
        id.gate().shut();
        let release = kind.release(id, tally.might_hold_majority() || kind.announce_rollback());
        let mut waited = FuturesUnordered::new();
        // Per node, the rollback that waits for the node's answer.
        let mut later = Vec::with_capacity(self.nodes.len());
        let silent = |i| !tally.replied(i);
        for (i, answer) in self
            .outcomes(
                kind,
                release,
                &silent,
                Sending::removal(plan, Duration::ZERO),
            )
            .enumerate()
        {
            let mut after_answer = None;
            if tally.named_another(i) {
                // Nothing of ours there; the request is never sent.
            } else if tally.replied(i) {
                waited.push(answer);
            } else if stragglers.is_some() && !tally.counted(i) {
                after_answer = Some(answer);
            } else {
                self.detach(answer);
            }
            later.push(after_answer);
        }
        if let Some(mut stragglers) = stragglers {
            self.detach(async move {
                // Each node's rollback goes as soon as its own answer is in.
                let mut sent = FuturesUnordered::new();
                loop {
                    tokio::select! {
                        answer = stragglers.next() => {
                            let Some((i, answer)) = answer else { break };
                            let wrote_nothing = answer.holder.is_some()
                                || matches!(answer.vote, Err(NodeFailure::NotWaited));
                            if let (false, Some(rollback)) = (wrote_nothing, later[i].take()) {
                                sent.push(rollback);
                            }
                        }
                        Some(_) = sent.next(), if !sent.is_empty() => {}
                    }
                }
                while sent.next().await.is_some() {}
            });
        }
        while waited.next().await.is_some() {}
    }

    /// Extends the lock to `plan.ttl` on a majority: the new validity
    /// deadline, or the votes that did not suffice. Never creates a key.
    pub(crate) async fn extend(
        &self,
        kind: &Arc<dyn Kind>,
        id: &LockId,
        plan: &Plan,
        start: Moment,
    ) -> Result<Moment, Tally> {
        let outcomes = self.outcomes(
            kind,
            kind.extend(id, plan),
            &|_| false,
            Sending::gated(id, plan),
        );
        let (tally, stragglers) = quorum::decide(outcomes).await;
        // Slow nodes still get the extension, so that they agree with the
        // majority for as long as they can; nothing of it is sent once the
        // lock's release has begun.
        self.detach(stragglers.finish());
        if self.holds(plan, start, &tally, "extend") {
            Ok(plan.deadline(start))
        } else {
            Err(tally)
        }
    }

    /// Releases on every node, announcing it; returns once decided, the
    /// stragglers finishing in the background (and a node that does not
    /// answer asked again there, until the keys of `plan` sent now would
    /// have expired).
    pub(crate) async fn release(
        &self,
        kind: &Arc<dyn Kind>,
        id: &LockId,
        plan: &Plan,
        valid: Duration,
    ) -> Tally {
        id.gate().shut();
        // A node's answer counts for as long as the lock is valid: until
        // then, a slow "deleted" still shows that the lock was held to its
        // release. Not beyond the connect timeout, the longest this crate
        // waits for a node; nor less than the node timeout. (Cut at the
        // node timeout, a release on busy nodes reported failures for keys
        // that it did delete.) A majority of answers decides it sooner.
        let within = valid.min(self.options.connect_timeout);
        let outcomes = self.outcomes(
            kind,
            kind.release(id, true),
            &|_| false,
            Sending::removal(plan, within),
        );
        let (tally, stragglers) = quorum::decide(outcomes).await;
        self.detach(stragglers.finish());
        tally
    }

    /// Runs `command` on every node and waits for every answer, each within
    /// the node timeout: for an operator's look at a lock, or clearing of
    /// one, which count no votes.
    pub(crate) async fn gather(&self, command: Command) -> Vec<Result<Value, NodeFailure>> {
        let command = Prepared::new(command);
        futures::future::join_all(self.nodes.iter().map(|node| {
            let patience = Patience::Within(node.limits().request);
            node.run(&command, patience, None, node.limits().connect)
        }))
        .await
    }

    /// Takes the waiter `member` out of the queues of `keys` on every node,
    /// in the background: it stopped waiting without the lock (see
    /// [`wait`](crate::wait)). A node that does not answer is sent it again until
    /// it does, or until the writer's intent it may hold has lapsed.
    pub(crate) fn leave(&self, keys: &Keys, member: &str) {
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let skip = vec![false; self.nodes.len()];
        self.detach(queue::leave_queues(
            self.nodes.clone(),
            queue::leave(keys, member),
            skip,
            self.background.clone(),
        ));
    }

    /// Fires a release on every node and forgets about it: for guards
    /// dropped without `release()` and acquisitions cancelled mid-flight.
    /// Does nothing (the keys then expire at their TTL) outside a tokio
    /// runtime.
    pub(crate) fn release_in_background(&self, kind: &Arc<dyn Kind>, id: &LockId, plan: &Plan) {
        id.gate().shut();
        if tokio::runtime::Handle::try_current().is_err() {
            tracing::debug!(key = %id.key(), "no tokio runtime: lock keys expire at their TTL");
            return;
        }
        let release = kind.release(id, true);
        for answer in self.outcomes(
            kind,
            release,
            &|_| true,
            Sending::removal(plan, Duration::ZERO),
        ) {
            self.detach(answer);
        }
    }
}
