//! Fan-out and counting: the heart of Redlock, with no Redis in it.
//!
//! Every operation asks all N nodes **at once** and counts the answers as they
//! come in. The count stops as soon as the outcome is decided: a majority
//! (`N/2 + 1`) agreed, or so many disagreed that a majority is out of reach.
//! A slow or frozen minority therefore costs nothing, and a lost cause is
//! given up without waiting for the stragglers. With an even N a split vote
//! (two against two) is decided as a failure at once.
//!
//! An acquisition holds only if, when the majority is reached, time is left:
//!
//! ```text
//! validity = ttl − elapsed − drift        (must exceed the minimum validity)
//! ```
//!
//! where `elapsed` runs from before the first request was sent
//! ([`Moment`]). A failed acquisition is rolled back on **every** node, not
//! only those that said yes: a node that timed out may still have applied the
//! `SET`. The caller waits for the rollback only on the nodes that answered
//! (they are fast); the others are rolled back in the background.
//!
//! A waiter's failed attempt can also *observe* the key (who holds it, for
//! how long); [`Tally::seen`] sorts that into one holder on a majority, a
//! vote split among contenders, or too few answers, and [`pause`] turns it
//! into how long to sleep before the next attempt (see [`crate::waiters`]
//! for the announcements that cut the sleep short).
//!
//! The nodes are reached through the small [`Voter`] trait, so that the unit
//! tests below drive all of this with scripted answers and delays.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};

use crate::clock::Moment;
use crate::error::{NodeFailure, Report};

/// Which lock: the Redis key and the owner's token. One allocation per
/// lock, shared by every request about it.
#[derive(Debug)]
pub(crate) struct LockId {
    pub(crate) key: Box<str>,
    token: [u8; 40],
}

impl LockId {
    /// A lock on `key` with a fresh token: 20 bytes from the thread's
    /// CSPRNG, in hex.
    pub(crate) fn new(key: Box<str>) -> Arc<LockId> {
        let mut bytes = [0u8; 20];
        rand::fill(&mut bytes);
        let mut token = [0u8; 40];
        // Cannot fail: the output is exactly twice the input.
        let _ = hex::encode_to_slice(bytes, &mut token);
        Arc::new(LockId { key, token })
    }

    /// The token, 40 hex digits.
    pub(crate) fn token(&self) -> &str {
        // Hex digits are ASCII.
        std::str::from_utf8(&self.token).unwrap_or_default()
    }
}

/// One request of the protocol, sent to every node.
#[derive(Debug, Clone)]
pub(crate) enum Request {
    /// `SET key token NX PX ttl_ms`; with `observe`, also `GET key` and
    /// `PTTL key` in the same round trip, so that a waiter learns who holds
    /// the key and for how long.
    Acquire {
        id: Arc<LockId>,
        ttl_ms: u64,
        observe: bool,
    },
    /// Compare-and-delete; with `announce`, a deletion is published to the
    /// key's release channel, waking the waiters (see [`crate::waiters`]).
    /// Rollbacks of failed attempts announce only when the attempt may have
    /// reached a majority: a vote split among waiters is settled by their
    /// own back-off, and announcing it would make the waiters poll each
    /// other.
    Release { id: Arc<LockId>, announce: bool },
    /// Compare-and-pexpire.
    Extend { id: Arc<LockId>, ttl_ms: u64 },
}

/// One node's vote: agreed, or why not.
pub(crate) type Vote = Result<(), NodeFailure>;

/// One node's answer: its vote, and for a refused acquisition that asked
/// ([`Request::Acquire`] with `observe`), who holds the key there.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) vote: Vote,
    pub(crate) holder: Option<Holder>,
}

/// Another owner of a key, as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The value of the key: the owner's token.
    pub(crate) token: Box<str>,
    /// How long the key has left on that node; `None` if it has no expiry.
    pub(crate) ttl: Option<Duration>,
}

impl From<Vote> for Answer {
    fn from(vote: Vote) -> Answer {
        Answer { vote, holder: None }
    }
}

/// What the counting needs of a node.
pub(crate) trait Voter: Clone + Send + Sync + 'static {
    /// How the node is named in reports.
    fn name(&self) -> &str;
    /// Sends `request` and returns the answer. The future owns what it needs
    /// and is bounded by the node's timeout.
    fn ask(&self, request: &Request) -> BoxFuture<'static, Answer>;
}

/// The votes counted so far.
#[derive(Debug)]
pub(crate) struct Tally {
    needed: usize,
    agreed: usize,
    /// `None` while a node has not answered.
    votes: Vec<Option<Vote>>,
    /// The other owners seen, where the acquisition asked.
    holders: Vec<Holder>,
}

impl Tally {
    fn new(nodes: usize, needed: usize) -> Tally {
        Tally {
            needed,
            agreed: 0,
            votes: vec![None; nodes],
            holders: Vec::new(),
        }
    }

    fn record(&mut self, node: usize, answer: Answer) {
        if answer.vote.is_ok() {
            self.agreed += 1;
        }
        self.holders.extend(answer.holder);
        self.votes[node] = Some(answer.vote);
    }

    /// What a failed acquisition that observed the key saw of its other
    /// owners.
    pub(crate) fn seen(&self) -> Seen {
        for h in &self.holders {
            let same = || self.holders.iter().filter(|o| o.token == h.token);
            if same().count() >= self.needed {
                // The soonest expiry among its keys; `None` only if none expires.
                let ttl = same()
                    .map(|o| o.ttl)
                    .min_by_key(|t| t.unwrap_or(Duration::MAX))
                    .flatten();
                return Seen::Holder {
                    ttl,
                    token: h.token.clone(),
                };
            }
        }
        if self.agreed + self.holders.len() >= self.needed {
            Seen::Contended
        } else {
            Seen::Unreachable
        }
    }

    fn undecided(&self) -> usize {
        self.votes.iter().filter(|v| v.is_none()).count()
    }

    pub(crate) fn agreed(&self) -> usize {
        self.agreed
    }

    pub(crate) fn needed(&self) -> usize {
        self.needed
    }

    pub(crate) fn has_majority(&self) -> bool {
        self.agreed >= self.needed
    }

    /// Whether our key may be on a majority of nodes although the attempt
    /// failed: the yes votes and the nodes whose answer is unknown (timed
    /// out, connection failed, not waited for) could make one. The rollback
    /// of such an attempt is announced, since a waiter may have seen our
    /// token on a majority and be waiting for it to go.
    fn might_hold_majority(&self) -> bool {
        let unknown = self
            .votes
            .iter()
            .filter(|v| {
                matches!(
                    v,
                    None | Some(Err(NodeFailure::Timeout | NodeFailure::Connection(_)))
                )
            })
            .count();
        self.agreed + unknown >= self.needed
    }

    /// Whether the outcome no longer depends on the nodes still out.
    fn decided(&self) -> bool {
        self.has_majority() || self.agreed + self.undecided() < self.needed
    }

    /// Whether node `i` answered (yes, no or error) before the decision.
    fn answered(&self, i: usize) -> bool {
        self.votes[i].is_some()
    }

    /// The report for users: who did not agree, and why.
    pub(crate) fn report<V: Voter>(&self, nodes: &[V]) -> Report {
        Report {
            needed: self.needed,
            agreed: self.agreed,
            nodes: self
                .votes
                .iter()
                .zip(nodes)
                .filter_map(|(vote, node)| match vote {
                    Some(Ok(())) => None,
                    Some(Err(f)) => Some((node.name().to_owned(), f.clone())),
                    None => Some((node.name().to_owned(), NodeFailure::NotWaited)),
                })
                .collect(),
        }
    }
}

/// The quorum for `n` nodes: a strict majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// A node's answer future, tagged with the node's index.
struct Tagged(usize, BoxFuture<'static, Answer>);

impl Future for Tagged {
    type Output = (usize, Answer);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let i = self.0;
        self.1.poll_unpin(cx).map(|vote| (i, vote))
    }
}

/// The answers not yet in when the outcome was decided.
pub(crate) struct Stragglers(FuturesUnordered<Tagged>);

impl Stragglers {
    /// Lets the outstanding requests run to their end in the background,
    /// where it matters that they are sent (releases).
    pub(crate) fn finish_in_background(self) {
        if !self.0.is_empty() {
            detach(self.0.for_each(|_| async {}));
        }
    }
}

/// Asks every node and counts until the outcome is decided.
pub(crate) async fn decide<V: Voter>(nodes: &[V], request: &Request) -> (Tally, Stragglers) {
    let mut pending: FuturesUnordered<Tagged> = nodes
        .iter()
        .enumerate()
        .map(|(i, node)| Tagged(i, node.ask(request)))
        .collect();
    let mut tally = Tally::new(nodes.len(), quorum(nodes.len()));
    while !tally.decided() {
        match pending.next().await {
            Some((i, vote)) => tally.record(i, vote),
            None => break,
        }
    }
    (tally, Stragglers(pending))
}

/// The validity left after an acquisition that took `elapsed`, or `None`
/// when none is left: `ttl − elapsed − drift`.
pub(crate) fn validity(ttl: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)?
        .checked_sub(drift)
        .filter(|v| !v.is_zero())
}

/// The outcome of one acquisition attempt.
pub(crate) enum Attempt {
    /// A majority holds the key; the lock is valid until `deadline`.
    Held { deadline: Moment },
    /// Not held; already rolled back on the nodes that answered. Also how
    /// long the attempt took.
    Failed(Tally, Duration),
}

/// One acquisition attempt: `SET NX PX` on every node at once, a decision at
/// the first majority, the validity check, and on failure the rollback.
pub(crate) async fn acquire<V: Voter>(
    nodes: &[V],
    id: &Arc<LockId>,
    ttl: Duration,
    drift: Duration,
    min_validity: Duration,
    observe: bool,
) -> Attempt {
    let start = Moment::now();
    let request = Request::Acquire {
        id: id.clone(),
        ttl_ms: ttl.as_millis() as u64,
        observe,
    };
    let (tally, stragglers) = decide(nodes, &request).await;
    let elapsed = start.elapsed();
    let valid = validity(ttl, elapsed, drift).filter(|v| *v > min_validity);
    tracing::debug!(
        agreed = tally.agreed,
        needed = tally.needed,
        elapsed_us = elapsed.as_micros() as u64,
        validity_ms = valid.map(|v| v.as_millis() as u64),
        "acquire attempt"
    );
    if tally.has_majority() && valid.is_some() {
        // The slow nodes still get the key: a lock on more than a bare
        // majority survives the loss of more nodes.
        stragglers.finish_in_background();
        return Attempt::Held {
            deadline: start.after(ttl - drift),
        };
    }
    // Stragglers are dropped: a `SET` not yet written is then never sent,
    // and one already written is ordered before the rollback on its
    // connection.
    drop(stragglers);
    rollback(nodes, id, &tally).await;
    Attempt::Failed(tally, elapsed)
}

/// Releases on every node: waits for the nodes that answered the acquisition
/// and leaves the others to finish in the background.
async fn rollback<V: Voter>(nodes: &[V], id: &Arc<LockId>, tally: &Tally) {
    let request = Request::Release {
        id: id.clone(),
        announce: tally.might_hold_majority(),
    };
    let mut waited = FuturesUnordered::new();
    for (i, node) in nodes.iter().enumerate() {
        let release = node.ask(&request);
        if tally.answered(i) {
            waited.push(release);
        } else {
            detach(release);
        }
    }
    while waited.next().await.is_some() {}
}

/// Fires a release on every node and forgets about it: for guards dropped
/// without `release()` and acquisitions cancelled mid-flight. Does nothing
/// (the keys then expire at their TTL) outside a tokio runtime.
pub(crate) fn release_in_background<V: Voter>(nodes: &[V], id: Arc<LockId>) {
    if tokio::runtime::Handle::try_current().is_err() {
        tracing::debug!(key = %id.key, "no tokio runtime: lock keys expire at their TTL");
        return;
    }
    let request = Request::Release { id, announce: true };
    for node in nodes {
        detach(node.ask(&request));
    }
}

/// Runs a future to its end on the current tokio runtime, if there is one.
fn detach<F>(fut: F)
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(fut);
    }
}

/// The pause before the next attempt: uniform in `delay ± jitter`.
pub(crate) fn retry_delay(delay: Duration, jitter: Duration) -> Duration {
    uniform(delay.saturating_sub(jitter), delay.saturating_add(jitter))
}

fn uniform(low: Duration, high: Duration) -> Duration {
    let (low, high) = (low.as_micros() as u64, high.as_micros() as u64);
    Duration::from_micros(rand::random_range(low..=high.max(low)))
}

/// What a failed acquisition saw of the key's other owners.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// One owner, `token`, holds the key on a majority; its keys expire
    /// after `ttl` at the soonest (`None`: not known, or no expiry).
    Holder {
        ttl: Option<Duration>,
        token: Box<str>,
    },
    /// Enough nodes answered, but their votes were split among several
    /// contenders (waiters that woke together), none with a majority.
    Contended,
    /// Too few nodes answered to tell.
    Unreachable,
}

/// How long a waiter sleeps before it tries again (an announced release
/// wakes it sooner, see [`crate::waiters`]), and whether that next attempt
/// counts against the retry limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    pub(crate) sleep: Duration,
    /// False for the quick retries that settle a split vote: contention
    /// among waiters, not polling.
    pub(crate) counted: bool,
}

/// The pause of a waiter after a failed attempt that observed the key.
/// `listening` says whether announcements can be relied on: enough nodes
/// are subscribed that any release that reaches a majority is heard.
///
/// * A holder with a known expiry: sleep until its keys expire (a release
///   wakes the waiter sooner), plus up to `jitter` so that waiters do not
///   all try at the same instant. No polling while it holds.
/// * Contenders split the vote: try again after a random pause of up to
///   two attempts' time, so that one of them wins the next round; the
///   bound doubles with each split in a row (`streak`, this one included),
///   so that a split that does not resolve itself (an owner left with a
///   minority of keys) soon costs what polling does. These retries are
///   not counted until they are as slow as polling.
/// * Otherwise, and whenever announcements could be missed: the ordinary
///   retry pause, `delay ± jitter`, at the most.
pub(crate) fn pause(
    seen: &Seen,
    listening: bool,
    attempt: Duration,
    streak: u32,
    delay: Duration,
    jitter: Duration,
) -> Pause {
    let poll = retry_delay(delay, jitter);
    let (informed, counted) = match seen {
        Seen::Holder { ttl: Some(ttl), .. } => (*ttl + uniform(Duration::ZERO, jitter), true),
        Seen::Contended => {
            let bound = attempt.saturating_mul(2u32.saturating_pow(streak));
            (uniform(Duration::ZERO, bound.min(poll)), bound >= poll)
        }
        Seen::Holder { ttl: None, .. } | Seen::Unreachable => (poll, true),
    };
    Pause {
        sleep: if listening {
            informed
        } else {
            informed.min(poll)
        },
        counted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A node that answers every request after a fixed delay with a fixed
    /// vote for acquisitions (releases always succeed), and remembers what
    /// it was asked.
    #[derive(Clone)]
    struct Scripted {
        name: String,
        delay: Duration,
        acquire: Vote,
        log: Arc<Mutex<Vec<&'static str>>>,
        done: Arc<AtomicUsize>,
    }

    impl Voter for Scripted {
        fn name(&self) -> &str {
            &self.name
        }
        fn ask(&self, request: &Request) -> BoxFuture<'static, Answer> {
            let (what, vote) = match request {
                Request::Acquire { .. } => ("acquire", self.acquire.clone()),
                Request::Release { .. } => ("release", Ok(())),
                Request::Extend { .. } => ("extend", Ok(())),
            };
            self.log.lock().unwrap().push(what);
            let (delay, done) = (self.delay, self.done.clone());
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                done.fetch_add(1, Ordering::SeqCst);
                vote.into()
            })
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Nodes from `(delay_ms, vote)` pairs.
    fn cluster(spec: &[(u64, Vote)]) -> Vec<Scripted> {
        spec.iter()
            .enumerate()
            .map(|(i, (delay, vote))| Scripted {
                name: format!("n{i}"),
                delay: ms(*delay),
                acquire: vote.clone(),
                log: Arc::default(),
                done: Arc::default(),
            })
            .collect()
    }

    fn asked(nodes: &[Scripted], what: &str) -> usize {
        nodes
            .iter()
            .map(|n| n.log.lock().unwrap().iter().filter(|w| **w == what).count())
            .sum()
    }

    fn id() -> Arc<LockId> {
        LockId::new("k".into())
    }

    #[test]
    fn tokens_are_40_hex_digits_and_fresh() {
        let (a, b) = (id(), id());
        assert_eq!(a.token().len(), 40);
        assert!(a.token().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.token(), b.token());
    }

    const YES: Vote = Ok(());
    const HELD: Vote = Err(NodeFailure::Held);

    #[test]
    fn quorum_is_a_strict_majority() {
        let q: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(q, [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        assert_eq!(validity(ms(10_000), ms(30), ms(102)), Some(ms(9_868)));
        assert_eq!(validity(ms(100), ms(98), ms(2)), None);
        assert_eq!(validity(ms(100), ms(99), ms(2)), None);
        assert_eq!(validity(ms(100), ms(500), ms(2)), None);
    }

    #[test]
    fn retry_delay_stays_within_jitter_and_varies() {
        let draws: Vec<Duration> = (0..200).map(|_| retry_delay(ms(200), ms(100))).collect();
        assert!(draws.iter().all(|d| (ms(100)..=ms(300)).contains(d)));
        assert!(draws.iter().any(|d| *d != draws[0]), "no randomness");
        assert_eq!(retry_delay(ms(10), ms(50)).max(ms(60)), ms(60));
        assert_eq!(retry_delay(ms(7), Duration::ZERO), ms(7));
    }

    #[tokio::test(start_paused = true)]
    async fn decides_at_the_first_majority_without_waiting_for_stragglers() {
        // Two nodes never answer in time (frozen): the decision comes after
        // the third fast yes, at 3 ms, not at the stragglers' 10 s.
        let nodes = cluster(&[(1, YES), (2, YES), (10_000, YES), (3, YES), (10_000, YES)]);
        let t = tokio::time::Instant::now();
        let id = id();
        match acquire(&nodes, &id, ms(1_000), ms(12), Duration::ZERO, false).await {
            Attempt::Held { deadline } => {
                assert!(deadline.remaining() <= ms(1_000 - 12));
            }
            Attempt::Failed(t, _) => panic!("not held: {t:?}"),
        }
        assert_eq!(t.elapsed(), ms(3));
        assert_eq!(asked(&nodes, "release"), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn fails_as_soon_as_a_majority_is_out_of_reach() {
        let nodes = cluster(&[(1, HELD), (2, YES), (3, HELD), (4, HELD), (10_000, YES)]);
        let t = tokio::time::Instant::now();
        let id = id();
        let Attempt::Failed(tally, _) =
            acquire(&nodes, &id, ms(1_000), ms(12), Duration::ZERO, false).await
        else {
            panic!("held without a majority")
        };
        // Decided at 4 ms (three refusals of five); the rollback on the four
        // nodes that answered takes their delay once more (4 ms at most); the
        // frozen node is not waited for.
        assert!(t.elapsed() <= ms(8), "{:?}", t.elapsed());
        let report = tally.report(&nodes);
        assert_eq!(
            (report.agreed(), report.needed(), report.held_by_others()),
            (1, 3, 3)
        );
        assert_eq!(
            report.failures()[3],
            ("n4".to_owned(), NodeFailure::NotWaited)
        );
        // Rolled back on every node, the unanswered one included.
        assert_eq!(asked(&nodes, "release"), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn an_even_split_is_a_failure_not_a_hang() {
        let nodes = cluster(&[(1, YES), (1, HELD), (2, YES), (2, HELD)]);
        let id = id();
        let attempt = acquire(&nodes, &id, ms(1_000), ms(12), Duration::ZERO, false);
        let attempt = tokio::time::timeout(ms(100), attempt).await.expect("hung");
        assert!(matches!(attempt, Attempt::Failed(..)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_majority_too_slow_for_the_ttl_is_a_failure_and_rolled_back() {
        // Majority reached after 95 ms of a 100 ms TTL with 3 ms drift: 2 ms
        // of validity left, below the 5 ms minimum.
        let nodes = cluster(&[(95, YES), (95, YES), (95, YES)]);
        let id = id();
        let attempt = acquire(&nodes, &id, ms(100), ms(3), ms(5), false).await;
        assert!(matches!(&attempt, Attempt::Failed(t, _) if t.has_majority()));
        assert_eq!(asked(&nodes, "release"), 3);
        // With no minimum, the same 2 ms suffice.
        let nodes = cluster(&[(95, YES), (95, YES), (95, YES)]);
        let attempt = acquire(&nodes, &id, ms(100), ms(3), Duration::ZERO, false).await;
        assert!(matches!(attempt, Attempt::Held { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn errors_and_timeouts_count_against() {
        let nodes = cluster(&[
            (1, YES),
            (2, Err(NodeFailure::Timeout)),
            (2, Err(NodeFailure::Connection("refused".into()))),
            (2, Err(NodeFailure::OutOfMemory("OOM".into()))),
            (1, YES),
        ]);
        let id = id();
        let Attempt::Failed(tally, _) =
            acquire(&nodes, &id, ms(1_000), ms(12), Duration::ZERO, false).await
        else {
            panic!("held on two of five")
        };
        let text = tally.report(&nodes).to_string();
        assert!(text.starts_with("2 of 3 needed nodes agreed"), "{text}");
        assert!(text.contains("n3: the node is out of memory"), "{text}");
    }

    #[tokio::test(start_paused = true)]
    async fn stragglers_finish_in_the_background() {
        let nodes = cluster(&[(1, YES), (1, YES), (500, YES)]);
        let request = Request::Release {
            id: id(),
            announce: true,
        };
        let (tally, stragglers) = decide(&nodes, &request).await;
        assert!(tally.has_majority());
        stragglers.finish_in_background();
        assert_eq!(nodes[2].done.load(Ordering::SeqCst), 0);
        tokio::time::sleep(ms(600)).await;
        assert_eq!(nodes[2].done.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn background_release_reaches_every_node() {
        let nodes = cluster(&[(1, YES), (300, YES), (2, YES)]);
        release_in_background(&nodes, id());
        tokio::time::sleep(ms(400)).await;
        assert_eq!(asked(&nodes, "release"), 3);
        let done: usize = nodes.iter().map(|n| n.done.load(Ordering::SeqCst)).sum();
        assert_eq!(done, 3);
    }

    #[test]
    fn background_release_without_a_runtime_does_nothing_and_does_not_panic() {
        let nodes = cluster(&[(1, YES)]);
        release_in_background(&nodes, id());
        assert_eq!(asked(&nodes, "release"), 0);
    }

    fn tally(needed: usize, agreed: usize, holders: &[(&str, Option<u64>)]) -> Tally {
        let mut t = Tally::new(agreed + holders.len(), needed);
        for i in 0..agreed {
            t.record(i, Ok(()).into());
        }
        for (j, (token, ttl)) in holders.iter().enumerate() {
            let holder = Holder {
                token: (*token).into(),
                ttl: ttl.map(ms),
            };
            t.record(
                agreed + j,
                Answer {
                    vote: HELD,
                    holder: Some(holder),
                },
            );
        }
        t
    }

    #[test]
    fn a_failed_attempt_tells_a_holder_from_contenders() {
        // One owner on a majority: its soonest expiry.
        let t = tally(
            3,
            0,
            &[("a", Some(900)), ("a", Some(700)), ("a", Some(800))],
        );
        let holder = |ttl: Option<u64>| Seen::Holder {
            ttl: ttl.map(ms),
            token: "a".into(),
        };
        assert_eq!(t.seen(), holder(Some(700)));
        // Keys without expiry do not hide one that has one.
        let t = tally(3, 1, &[("a", None), ("a", Some(50)), ("a", None)]);
        assert_eq!(t.seen(), holder(Some(50)));
        let t = tally(3, 0, &[("a", None), ("a", None), ("a", None)]);
        assert_eq!(t.seen(), holder(None));
        // Three owners, none on a majority, with our own vote: a split.
        let t = tally(3, 1, &[("a", Some(9)), ("b", Some(9)), ("c", Some(9))]);
        assert_eq!(t.seen(), Seen::Contended);
        let t = tally(3, 2, &[("a", Some(9))]);
        assert_eq!(t.seen(), Seen::Contended);
        // Too few answers to tell.
        let t = tally(3, 1, &[("a", Some(9))]);
        assert_eq!(t.seen(), Seen::Unreachable);
        assert_eq!(tally(3, 0, &[]).seen(), Seen::Unreachable);
    }

    #[test]
    fn waiters_sleep_until_expiry_split_briefly_and_poll_when_deaf() {
        let (delay, jitter) = (ms(200), ms(100));
        let attempt = ms(1);
        let pause =
            |seen, listening, streak| pause(seen, listening, attempt, streak, delay, jitter);
        let holder = Seen::Holder {
            ttl: Some(ms(5_000)),
            token: "a".into(),
        };
        let forever = Seen::Holder {
            ttl: None,
            token: "a".into(),
        };
        for _ in 0..100 {
            // A holder whose keys expire in 5 s: no polling meanwhile.
            let p = pause(&holder, true, 0);
            assert!(
                (ms(5_000)..=ms(5_100)).contains(&p.sleep) && p.counted,
                "{p:?}"
            );
            // Not listening: never longer than a poll.
            let p = pause(&holder, false, 0);
            assert!((ms(100)..=ms(300)).contains(&p.sleep), "{p:?}");
            // A split: a few attempts' time, doubling with the streak,
            // never beyond a poll, and not counted until as slow as one.
            let p = pause(&Seen::Contended, true, 1);
            assert!(p.sleep <= ms(2) && !p.counted, "{p:?}");
            let p = pause(&Seen::Contended, true, 3);
            assert!(p.sleep <= ms(8) && !p.counted, "{p:?}");
            let p = pause(&Seen::Contended, true, 40);
            assert!(p.sleep <= ms(300) && p.counted, "{p:?}");
            // Nodes not answering, or a holder without expiry: poll.
            for seen in [&Seen::Unreachable, &forever] {
                let p = pause(seen, true, 0);
                assert!((ms(100)..=ms(300)).contains(&p.sleep) && p.counted, "{p:?}");
            }
        }
    }

    #[test]
    fn a_rollback_is_announced_only_when_the_key_may_be_on_a_majority() {
        let voted = |votes: &[Vote]| {
            let mut t = Tally::new(votes.len(), quorum(votes.len()));
            for (i, v) in votes.iter().enumerate() {
                t.record(i, v.clone().into());
            }
            t
        };
        let timeout = Err(NodeFailure::Timeout);
        let refused = Err(NodeFailure::Connection("refused".into()));
        // A split among contenders, every node answered: nothing to announce.
        assert!(!voted(&[YES, YES, HELD, HELD, HELD]).might_hold_majority());
        // A node that timed out may hold our key: with two yes, a majority.
        assert!(voted(&[YES, YES, timeout.clone(), HELD, HELD]).might_hold_majority());
        assert!(voted(&[YES, refused, HELD]).might_hold_majority());
        // A majority that came too late for the validity.
        assert!(voted(&[YES, YES, YES]).might_hold_majority());
        // Not waited for counts as unknown.
        let mut t = Tally::new(5, 3);
        t.record(0, YES.into());
        t.record(1, YES.into());
        t.record(2, HELD.into());
        assert!(t.might_hold_majority());
        assert!(!voted(&[YES, timeout, HELD, HELD, HELD]).might_hold_majority());
    }
}
