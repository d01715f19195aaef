//! The quorum rule and all its arithmetic, with no Redis in it.
//!
//! Every operation asks all N nodes **at once** and counts the answers as
//! they come in ([`decide`]). The count stops as soon as the outcome is
//! decided: a majority (`N/2 + 1`, [`quorum`]) agreed, or so many disagreed
//! that a majority is out of reach. A slow or frozen minority therefore costs
//! nothing, and a lost cause is given up without waiting for the stragglers.
//! With an even N a split vote (two against two) is decided as a failure at
//! once.
//!
//! **Why a majority.** Two majorities of the same N nodes share at least one
//! node, and a node holds a key for one owner at a time: two owners cannot
//! both hold a majority of keys at once.
//!
//! **Validity.** Keys expire on the nodes' clocks; the holder measures on its
//! own. An acquisition (or extension) holds only if, when the majority is
//! reached, time is left ([`Plan`]):
//!
//! ```text
//! validity = ttl − elapsed − drift        drift = ttl × drift_factor + 2 ms
//! ```
//!
//! where `elapsed` runs from before the first request was sent, so every
//! round trip of the operation is paid for. The lock's deadline is then
//! `start + ttl − drift`: no key granted by the operation can expire on a
//! node clock running within the drift allowance before it.
//!
//! **Waiting.** A waiter's failed attempt can also observe the key (who holds
//! it, for how long); [`Tally::seen`] sorts that into one holder on a
//! majority, a vote split among contenders, or too few answers, and
//! [`wait::pause`](crate::wait::pause) turns it into how long to sleep
//! before the next attempt.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use crate::clock::Moment;
use crate::error::{ConfigError, NodeFailure, Report};
use crate::proto::{Answer, Vote};

/// The quorum for `n` nodes: a strict majority.
pub(crate) fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// The largest TTL accepted. Redis rejects an expiry whose absolute time in
/// milliseconds overflows a signed 64-bit integer; half of that leaves room
/// for any server clock.
pub const MAX_TTL: Duration = Duration::from_millis(i64::MAX as u64 / 2);

/// The constant part of the clock drift allowance: Redis expires keys with
/// up to 1 ms of imprecision on each side.
const DRIFT_CONSTANT: Duration = Duration::from_millis(2);

/// The numbers one acquisition or extension works with, derived from its TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Plan {
    /// The TTL in whole milliseconds, as sent with `PX`.
    pub(crate) ttl_ms: u64,
    /// The TTL as a duration (`ttl_ms` exactly).
    pub(crate) ttl: Duration,
    /// The clock drift allowance, `floor(ttl_ms × factor) + 2 ms` as in the
    /// reference clients.
    pub(crate) drift: Duration,
}

impl Plan {
    /// Checks a TTL and derives its drift allowance.
    pub(crate) fn new(ttl: Duration, drift_factor: f64) -> Result<Plan, ConfigError> {
        if ttl > MAX_TTL {
            return Err(ConfigError::TtlTooLarge { ttl, max: MAX_TTL });
        }
        let ttl_ms = ttl.as_millis() as u64;
        if ttl_ms == 0 {
            return Err(ConfigError::ZeroTtl);
        }
        let plan = Plan::of_ms(ttl_ms, drift_factor);
        if plan.drift >= plan.ttl {
            return Err(ConfigError::DriftExceedsTtl {
                ttl: plan.ttl,
                drift: plan.drift,
            });
        }
        Ok(plan)
    }

    /// The plan of a TTL in milliseconds that [`new`](Self::new) accepted
    /// once: what a held lock keeps of its plan (one number, not three).
    pub(crate) fn of_ms(ttl_ms: u64, drift_factor: f64) -> Plan {
        let drift = Duration::from_millis((ttl_ms as f64 * drift_factor) as u64) + DRIFT_CONSTANT;
        Plan {
            ttl_ms,
            ttl: Duration::from_millis(ttl_ms),
            drift,
        }
    }

    /// The most validity an operation under this plan can leave:
    /// `ttl − drift`, when it takes no time at all.
    pub(crate) fn best_validity(&self) -> Duration {
        self.ttl - self.drift
    }

    /// The validity left after an operation that took `elapsed`, if more
    /// than `min` is left: `ttl − elapsed − drift`.
    pub(crate) fn validity(&self, elapsed: Duration, min: Duration) -> Option<Duration> {
        self.best_validity()
            .checked_sub(elapsed)
            .filter(|v| !v.is_zero() && *v > min)
    }

    /// The validity deadline of an operation that started at `start`.
    pub(crate) fn deadline(&self, start: Moment) -> Moment {
        start.after(self.best_validity())
    }

    /// How long a key sent now may live on a node, as our clock measures:
    /// the TTL plus the drift allowance (a node clock may run slow).
    pub(crate) fn life(&self) -> Duration {
        self.ttl + self.drift
    }
}

/// The votes counted so far.
#[derive(Debug)]
pub(crate) struct Tally {
    needed: usize,
    /// The yes votes for the grant with the most of them (see
    /// [`Answer::grant`]): yes votes for different grants (different
    /// permit slots) never add up to a majority.
    agreed: usize,
    /// The yes votes per grant, where the yes votes carry one.
    grants: Vec<(u32, usize)>,
    /// The yes votes that carry no grant (every kind but the semaphore).
    plain: usize,
    /// The yes votes, whatever they granted.
    yes: usize,
    /// `None` while a node has not answered.
    votes: Vec<Option<Vote>>,
    /// The other owners seen, where the acquisition asked.
    holders: Vec<crate::proto::Holder>,
    /// Per node, whether it named another owner of the key.
    named: Vec<bool>,
    /// The counters the yes votes carried (the fenced kind's).
    counters: Vec<u64>,
}

impl Tally {
    pub(crate) fn new(nodes: usize) -> Tally {
        Tally {
            needed: quorum(nodes),
            agreed: 0,
            grants: Vec::new(),
            plain: 0,
            yes: 0,
            votes: vec![None; nodes],
            holders: Vec::new(),
            named: vec![false; nodes],
            counters: Vec::new(),
        }
    }

    pub(crate) fn record(&mut self, node: usize, answer: Answer) {
        if answer.vote.is_ok() {
            self.yes += 1;
            self.counters.extend(answer.counter);
            match answer.grant {
                None => {
                    self.plain += 1;
                    self.agreed = self.agreed.max(self.plain);
                }
                Some(grant) => {
                    let count = match self.grants.iter_mut().find(|(g, _)| *g == grant) {
                        Some((_, count)) => {
                            *count += 1;
                            *count
                        }
                        None => {
                            self.grants.push((grant, 1));
                            1
                        }
                    };
                    self.agreed = self.agreed.max(count);
                }
            }
        }
        self.named[node] = answer.holder.is_some();
        self.holders.extend(answer.holder);
        self.votes[node] = Some(answer.vote);
    }

    /// Whether a failed acquisition that observed the key cannot tell who
    /// holds it from the answers so far: no node said yes, and no one
    /// holder has a majority among those that said no. The decision stops
    /// at the first refusals that make a majority out of reach, and those
    /// may name different holders where an owner's keys differ from node to
    /// node (a reentrant owner whose holds reached different majorities):
    /// the other answers tell.
    pub(crate) fn unclear(&self) -> bool {
        self.yes == 0 && self.seen() == Seen::Contended
    }

    /// Whether a majority of this attempt's answers named one holder other
    /// than `token` (readers by any set, a semaphore's holders by any
    /// digest, and reentrant owners by any hold, `holds:<token>`, count as
    /// one holder: their names change while they hold, and differ from
    /// node to node).
    /// The waiter is then queued again on that majority, and that holder's
    /// release, which counts only where it reaches a majority, reaches one
    /// of those nodes and wakes it; so a copy of `token`'s release heard
    /// during the attempt is no turn of its own: see
    /// [`Snapshots::settle`](crate::wait::listener::Snapshots::settle).
    ///
    /// Never for a wake-up that names no holder, a waiter's leaving
    /// (`leave:<waiter>`) or a reader joining (`joined:<token>`), and never
    /// where the holder named is a writer's `intent`. An intent has no
    /// release of its own: it ends by its writer's leaving, its writer's
    /// grant (which wakes nobody) or its expiry; and no answer can show
    /// that what a node turned the attempt away for is not what a later
    /// wake-up from it ended. A copy of such a wake-up may have taken the
    /// waiter out of that node's queue when it woke it: ignored, it left
    /// a reader in no queue at all, asleep on an intent that was gone
    /// (up to the cap on a sleep on a holder: ten retry delays, a second
    /// at least) while the lock had room (`rwlock_cancel` in the chaos
    /// suite, beside a busy loop: 5 runs in 40). A leave wakes only where
    /// the lock has room; a join wakes the next waiter whatever it is (a
    /// writer then finds readers), so its copies can take a writer out of
    /// queues just as well. Such a copy costs at most one more attempt per
    /// node.
    pub(crate) fn passed(&self, token: &str) -> bool {
        if token.starts_with("leave:") || token.starts_with("joined:") {
            return false;
        }
        matches!(
            self.seen(),
            Seen::Holder { token: held, .. }
                if &*held != "intent" && maybe_one(&held) != maybe_one(token)
        )
    }

    /// What a failed acquisition that observed the key saw of its other
    /// owners.
    pub(crate) fn seen(&self) -> Seen {
        // Readers are one holder however the nodes name their set
        // (`readers:<digest>`: a share granted on a majority but not on
        // every node, a rollback that missed one): they never contend with
        // each other, and a writer waits for all of them.
        for h in &self.holders {
            let same = || {
                self.holders
                    .iter()
                    .filter(|o| holder_group(&o.token) == holder_group(&h.token))
            };
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
        if self.yes + self.holders.len() >= self.needed {
            Seen::Contended
        } else if let Some(wait) = self.quarantine_wait() {
            Seen::Quarantined { wait }
        } else {
            Seen::Unreachable
        }
    }

    /// How long until the nodes the restart guard kept out, with those that
    /// said yes, could make a majority: the quarantine that ends `r`-th
    /// soonest, `r` being how many of them are missing; `None` if they
    /// cannot, however long one waits.
    fn quarantine_wait(&self) -> Option<Duration> {
        // Nodes that did not answer, or failed for now (a timeout, a lost
        // connection), may vote on the next try: with them, it is no wait.
        let maybe = self
            .votes
            .iter()
            .zip(&self.named)
            .filter(|(v, named)| {
                !**named
                    && !matches!(
                        v,
                        Some(Ok(_))
                            | Some(Err(NodeFailure::Restarted { .. }))
                            | Some(Err(NodeFailure::Contended))
                    )
            })
            .count();
        if self.yes + maybe >= self.needed {
            return None;
        }
        let mut ends: Vec<Duration> = self
            .votes
            .iter()
            .filter_map(|v| match v {
                Some(Err(NodeFailure::Restarted { remaining })) => Some(*remaining),
                _ => None,
            })
            .collect();
        let missing = self.needed.saturating_sub(self.yes);
        if missing == 0 || ends.len() < missing {
            return None;
        }
        ends.sort_unstable();
        Some(ends[missing - 1])
    }

    /// The counters the yes votes carried.
    pub(crate) fn counters(&self) -> &[u64] {
        &self.counters
    }

    fn undecided(&self) -> usize {
        self.votes.iter().filter(|v| v.is_none()).count()
    }

    pub(crate) fn agreed(&self) -> usize {
        self.agreed
    }

    /// The grant with the most yes votes (the first reached, of a tie), if
    /// the yes votes carried grants.
    pub(crate) fn leading_grant(&self) -> Option<u32> {
        let most = self.grants.iter().map(|(_, count)| *count).max()?;
        self.grants
            .iter()
            .find(|(_, count)| *count == most)
            .map(|(grant, _)| *grant)
    }

    pub(crate) fn needed(&self) -> usize {
        self.needed
    }

    pub(crate) fn has_majority(&self) -> bool {
        self.agreed >= self.needed
    }

    /// Whether our key may be on a majority of nodes although the attempt
    /// failed: the yes votes and the nodes whose answer is unknown (not
    /// waited for, or [`NodeFailure::unanswered`]: timed out, connection or
    /// TLS failed, a Sentinel-managed node's primary not found) could make
    /// one. The rollback
    /// of such an attempt is announced, since a waiter may have seen our
    /// token on a majority and be waiting for it to go.
    pub(crate) fn might_hold_majority(&self) -> bool {
        let unknown = self
            .votes
            .iter()
            .filter(|v| match v {
                None => true,
                Some(Err(failure)) => failure.unanswered(),
                Some(Ok(())) => false,
            })
            .count();
        self.agreed + unknown >= self.needed
    }

    /// Whether the nodes that still agree, or might, could make a majority:
    /// false once so many nodes hold another owner's key, or none, that no
    /// later try can win them back.
    pub(crate) fn recoverable(&self) -> bool {
        let hopeless = self
            .votes
            .iter()
            .filter(|v| {
                matches!(
                    v,
                    Some(Err(NodeFailure::Contended
                        | NodeFailure::Missing
                        | NodeFailure::WrongType(_)
                        | NodeFailure::PermitsMismatch { .. }))
                )
            })
            .count();
        self.votes.len() - hopeless >= self.needed
    }

    /// Whether so many nodes refused for a mismatch no retry mends (a
    /// semaphore of another number of permits) that no majority is left.
    pub(crate) fn mismatched(&self) -> bool {
        let mismatched = self
            .votes
            .iter()
            .filter(|v| matches!(v, Some(Err(NodeFailure::PermitsMismatch { .. }))))
            .count();
        mismatched > 0 && self.votes.len() - mismatched < self.needed
    }

    /// Whether a failed attempt's answers so far tell neither contention
    /// nor an outage: the nodes that answered as available (a yes, "held",
    /// any refusal but a failure of the node,
    /// [`NodeFailure::is_unavailable`]) are fewer than a majority, and
    /// those that failed are too few to rule one out. The decision stops at
    /// the first refusals that make a majority out of reach: with five
    /// nodes, one timeout and two "held" decide it, and whether the two
    /// not waited for are down (an outage) or hold the key too
    /// (contention) only their answers tell ([`crate::Error::is_contended`]).
    pub(crate) fn ambiguous(&self) -> bool {
        let (mut available, mut unavailable) = (0, 0);
        for vote in self.votes.iter().flatten() {
            match vote {
                Err(f) if f.is_unavailable() => unavailable += 1,
                _ => available += 1,
            }
        }
        !self.has_majority()
            && available < self.needed
            && unavailable <= self.votes.len() - self.needed
    }

    /// Whether no majority can agree while failures last that waiting
    /// does not mend (see [`GaveUp::Unavailable`](crate::GaveUp)): more
    /// nodes than a majority can spare failed so
    /// ([`NodeFailure::is_lasting`]). A node not heard from counts as
    /// available.
    pub(crate) fn outage_lasts(&self) -> bool {
        let lasting = self
            .votes
            .iter()
            .filter(|v| matches!(v, Some(Err(f)) if f.is_lasting()))
            .count();
        lasting > self.votes.len() - self.needed
    }

    /// Whether the outcome no longer depends on the nodes still out.
    fn decided(&self) -> bool {
        self.has_majority() || self.agreed + self.undecided() < self.needed
    }

    /// Whether node `i` said yes.
    pub(crate) fn said_yes(&self, i: usize) -> bool {
        matches!(self.votes[i], Some(Ok(())))
    }

    /// Whether node `i` named another owner of the key: a waiter's
    /// acquisition script says so only when it wrote no lock key (it answers
    /// yes when it finds our own token, as when a request is sent twice),
    /// so a rollback has nothing to do there.
    pub(crate) fn named_another(&self, i: usize) -> bool {
        self.named[i]
    }

    /// Whether node `i`'s answer came before the decision (a reply, a
    /// timeout or a failure), as opposed to not being waited for.
    pub(crate) fn counted(&self, i: usize) -> bool {
        self.votes[i].is_some()
    }

    /// Whether node `i` replied before the decision (yes, no, or an error
    /// reply), as opposed to giving no answer
    /// ([`NodeFailure::unanswered`]) or not being waited for.
    pub(crate) fn replied(&self, i: usize) -> bool {
        match &self.votes[i] {
            Some(Ok(())) => true,
            Some(Err(failure)) => !failure.unanswered(),
            None => false,
        }
    }

    /// The report for users: who did not agree, and why. `names` are the
    /// nodes' names, in node order.
    pub(crate) fn report<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> Report {
        Report {
            needed: self.needed,
            agreed: self.agreed,
            nodes: self
                .votes
                .iter()
                .zip(names)
                .filter_map(|(vote, name)| match vote {
                    Some(Ok(())) => None,
                    Some(Err(f)) => Some((name.to_owned(), f.clone())),
                    None => Some((name.to_owned(), NodeFailure::NotWaited)),
                })
                .collect(),
        }
    }
}

/// The nodes' answer futures not yet answered, by node index, in one
/// allocation. A handful of nodes: every poll polls each one still pending,
/// which costs less than a ready queue with an allocation per future
/// (`FuturesUnordered`), and the futures need no box of their own.
struct Pending<F>(Pin<Box<[Option<F>]>>);

impl<F: Future<Output = Answer>> Pending<F> {
    fn new(answers: impl IntoIterator<Item = F>) -> Pending<F> {
        let slots: Box<[Option<F>]> = answers.into_iter().map(Some).collect();
        Pending(Box::into_pin(slots))
    }

    fn len(&self) -> usize {
        self.0.len()
    }

    /// The next answer, with its node's index; `None` once all are in.
    async fn next(&mut self) -> Option<(usize, Answer)> {
        std::future::poll_fn(|cx| {
            // SAFETY: no future is ever moved out of its slot: each is
            // polled where it lies, and dropped in place (its slot set to
            // `None`) once it is done, as pinning allows.
            let slots = unsafe { self.0.as_mut().get_unchecked_mut() };
            let mut pending = false;
            for (i, slot) in slots.iter_mut().enumerate() {
                if let Some(future) = slot {
                    // SAFETY: as above; the slot stays put.
                    match unsafe { Pin::new_unchecked(future) }.poll(cx) {
                        Poll::Ready(answer) => {
                            *slot = None;
                            return Poll::Ready(Some((i, answer)));
                        }
                        Poll::Pending => pending = true,
                    }
                }
            }
            if pending {
                Poll::Pending
            } else {
                Poll::Ready(None)
            }
        })
        .await
    }
}

/// The answers not yet in when the outcome was decided.
pub(crate) struct Stragglers<F>(Pending<F>);

impl<F: Future<Output = Answer>> Stragglers<F> {
    /// Whether every node had answered.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.0.iter().all(Option::is_none)
    }

    /// Runs the outstanding requests to their end.
    pub(crate) async fn finish(mut self) {
        while self.0.next().await.is_some() {}
    }

    /// Runs the outstanding requests to their end, marking in `said_yes`
    /// (one flag per node) the nodes that agree.
    pub(crate) async fn finish_counting(mut self, mut said_yes: Vec<bool>) -> Vec<bool> {
        while let Some((i, answer)) = self.0.next().await {
            said_yes[i] |= answer.vote.is_ok();
        }
        said_yes
    }

    /// The next outstanding answer, with its node's index; `None` once all
    /// are in. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<(usize, Answer)> {
        self.0.next().await
    }

    /// Waits for the outstanding answers (each is bounded by its node's
    /// timeout) and counts them in `tally`.
    pub(crate) async fn hear_out(mut self, tally: &mut Tally) {
        while let Some((i, answer)) = self.0.next().await {
            tally.record(i, answer);
        }
    }
}

/// Counts the answers of every node (one future each, in node order) until
/// the outcome is decided.
pub(crate) async fn decide<F>(answers: impl IntoIterator<Item = F>) -> (Tally, Stragglers<F>)
where
    F: Future<Output = Answer>,
{
    let mut pending = Pending::new(answers);
    let mut tally = Tally::new(pending.len());
    while !tally.decided() {
        match pending.next().await {
            Some((i, answer)) => tally.record(i, answer),
            None => break,
        }
    }
    (tally, Stragglers(pending))
}

/// What a holder's name counts as when the nodes' answers are compared:
/// itself, but readers are one group whatever their set's digest.
fn holder_group(token: &str) -> &str {
    match token.starts_with("readers:") {
        true => "readers:",
        false => token,
    }
}

/// What a holder's name counts as when a wake-up's name is compared with
/// the holder an attempt saw (`Tally::passed`): itself, but all the names
/// one holder may go by, here and elsewhere, are one: readers of any set, a
/// semaphore's holders of any digest, a reentrant owner by any hold. (Wider
/// than [`holder_group`], which must not count a semaphore's differing
/// digests as one holder on a majority.)
fn maybe_one(name: &str) -> &str {
    match name.split_once(':') {
        Some((kind @ ("readers" | "permits" | "holds"), _)) => kind,
        _ => name,
    }
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
    /// contenders (a woken waiter and a newcomer, say), none with a majority.
    Contended,
    /// Too few nodes could vote because the restart guard kept some out
    /// (see `net::guard`): with them, a majority could vote after `wait`,
    /// when enough of their quarantines have ended.
    Quarantined { wait: Duration },
    /// Too few nodes answered to tell.
    Unreachable,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::Holder;
    use futures::future::{BoxFuture, FutureExt};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const YES: Vote = Ok(());
    const HELD: Vote = Err(NodeFailure::Contended);

    /// Answers from `(delay_ms, vote)` pairs, on tokio's (paused) clock.
    fn answers(spec: &[(u64, Vote)]) -> Vec<BoxFuture<'static, Answer>> {
        spec.iter()
            .map(|(delay, vote)| {
                let (delay, vote) = (ms(*delay), vote.clone());
                async move {
                    tokio::time::sleep(delay).await;
                    Answer::from(vote)
                }
                .boxed()
            })
            .collect()
    }

    #[test]
    fn quorum_is_a_strict_majority() {
        let q: Vec<usize> = (1..=7).map(quorum).collect();
        assert_eq!(q, [1, 2, 2, 3, 3, 4, 4]);
    }

    #[test]
    fn validity_is_ttl_minus_elapsed_minus_drift() {
        let plan = Plan::new(ms(10_000), 0.01).unwrap();
        assert_eq!(plan.drift, ms(102));
        assert_eq!(plan.validity(ms(30), Duration::ZERO), Some(ms(9_868)));
        assert_eq!(plan.validity(ms(30), ms(9_868)), None);
        assert_eq!(plan.validity(ms(30), ms(9_867)), Some(ms(9_868)));
        let plan = Plan::new(ms(100), 0.0).unwrap();
        assert_eq!(plan.validity(ms(98), Duration::ZERO), None);
        assert_eq!(plan.validity(ms(97), Duration::ZERO), Some(ms(1)));
        assert_eq!(plan.validity(ms(500), Duration::ZERO), None);
        assert_eq!(plan.life(), ms(102));
    }

    #[test]
    fn ttl_plans() {
        assert_eq!(Plan::new(Duration::ZERO, 0.01), Err(ConfigError::ZeroTtl));
        assert_eq!(
            Plan::new(Duration::from_micros(900), 0.01),
            Err(ConfigError::ZeroTtl)
        );
        assert!(matches!(
            Plan::new(MAX_TTL + ms(1), 0.01),
            Err(ConfigError::TtlTooLarge { .. })
        ));
        assert!(matches!(
            Plan::new(Duration::MAX, 0.01),
            Err(ConfigError::TtlTooLarge { .. })
        ));
        // Sub-millisecond parts are cut, as PX would.
        let p = Plan::new(Duration::from_micros(10_000_900), 0.01).unwrap();
        assert_eq!((p.ttl_ms, p.drift), (10_000, ms(102)));
        // Drift that eats the TTL: 2 ms of constant alone.
        assert_eq!(
            Plan::new(ms(2), 0.01),
            Err(ConfigError::DriftExceedsTtl {
                ttl: ms(2),
                drift: ms(2)
            })
        );
        assert!(Plan::new(ms(3), 0.01).is_ok());
        assert!(matches!(
            Plan::new(Duration::from_secs(1), 0.998),
            Err(ConfigError::DriftExceedsTtl { .. })
        ));
        assert!(Plan::new(MAX_TTL, 0.01).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn decides_at_the_first_majority_without_waiting_for_stragglers() {
        // Two nodes never answer in time (frozen): the decision comes after
        // the third fast yes, at 3 ms, not at the stragglers' 10 s.
        let t = tokio::time::Instant::now();
        let (tally, stragglers) = decide(answers(&[
            (1, YES),
            (2, YES),
            (10_000, YES),
            (3, YES),
            (10_000, YES),
        ]))
        .await;
        assert!(tally.has_majority());
        assert_eq!(t.elapsed(), ms(3));
        assert!(!stragglers.is_empty());
        stragglers.finish().await;
        assert_eq!(t.elapsed(), ms(10_000));
    }

    fn held_by(token: &str) -> Answer {
        Answer {
            holder: Some(Holder {
                token: token.into(),
                ttl: Some(ms(5_000)),
            }),
            ..Err(NodeFailure::Contended).into()
        }
    }

    /// The first three refusals name two holders; the other two nodes say
    /// which holds a majority.
    #[tokio::test(start_paused = true)]
    async fn an_unclear_refusal_is_made_clear_by_the_other_answers() {
        let spec = [(1, "a"), (2, "a"), (3, "b"), (9, "b"), (9, "b")];
        let answers: Vec<BoxFuture<'static, Answer>> = spec
            .iter()
            .map(|&(delay, token)| {
                async move {
                    tokio::time::sleep(ms(delay)).await;
                    held_by(token)
                }
                .boxed()
            })
            .collect();
        let (mut tally, stragglers) = decide(answers).await;
        assert!(tally.unclear());
        assert_eq!(tally.seen(), Seen::Contended);
        stragglers.hear_out(&mut tally).await;
        assert!(!tally.unclear());
        assert!(matches!(tally.seen(), Seen::Holder { token, .. } if &*token == "b"));
        // A vote of ours is contention among waiters, not unclear.
        let mut split = Tally::new(5);
        split.record(0, Answer::from(YES));
        split.record(1, held_by("a"));
        split.record(2, held_by("b"));
        assert!(!split.unclear());
    }

    #[tokio::test(start_paused = true)]
    async fn fails_as_soon_as_a_majority_is_out_of_reach() {
        let t = tokio::time::Instant::now();
        let (tally, _) = decide(answers(&[
            (1, HELD),
            (2, YES),
            (3, HELD),
            (4, HELD),
            (10_000, YES),
        ]))
        .await;
        assert_eq!(t.elapsed(), ms(4));
        let report = tally.report(["n0", "n1", "n2", "n3", "n4"]);
        assert_eq!(
            (report.agreed(), report.needed(), report.held_by_others()),
            (1, 3, 3)
        );
        assert_eq!(
            report.failures()[3],
            ("n4".to_owned(), NodeFailure::NotWaited)
        );
        assert!(!tally.replied(4) && tally.replied(3));
    }

    #[tokio::test(start_paused = true)]
    async fn an_even_split_is_a_failure_not_a_hang() {
        let attempt = decide(answers(&[(1, YES), (1, HELD), (2, YES), (2, HELD)]));
        let (tally, _) = tokio::time::timeout(ms(100), attempt).await.expect("hung");
        assert!(!tally.has_majority());
    }

    #[tokio::test(start_paused = true)]
    async fn errors_and_timeouts_count_against() {
        let (tally, _) = decide(answers(&[
            (1, YES),
            (2, Err(NodeFailure::Timeout)),
            (2, Err(NodeFailure::Connection("refused".into()))),
            (2, Err(NodeFailure::OutOfMemory("OOM".into()))),
            (1, YES),
        ]))
        .await;
        let text = tally.report(["n0", "n1", "n2", "n3", "n4"]).to_string();
        assert!(text.starts_with("2 of 3 needed nodes agreed"), "{text}");
        assert!(text.contains("n3: the node is out of memory"), "{text}");
    }

    fn tally(needed: usize, agreed: usize, holders: &[(&str, Option<u64>)]) -> Tally {
        let n = agreed + holders.len();
        let mut t = Tally::new(n);
        t.needed = needed;
        for i in 0..agreed {
            t.record(i, YES.into());
        }
        for (j, (token, ttl)) in holders.iter().enumerate() {
            let holder = Holder {
                token: (*token).into(),
                ttl: ttl.map(ms),
            };
            t.record(
                agreed + j,
                Answer {
                    holder: Some(holder),
                    ..HELD.into()
                },
            );
        }
        t
    }

    #[test]
    fn nodes_kept_out_by_the_restart_guard_are_waited_for() {
        let restarted = |s: u64| -> Vote {
            Err(NodeFailure::Restarted {
                remaining: Duration::from_secs(s),
            })
        };
        // Five nodes: one yes, three quarantined (9 s, 2 s, 5 s), one down.
        // Two more are needed: the second quarantine to end, 5 s.
        let mut t = Tally::new(5);
        t.record(0, YES.into());
        for (i, s) in [(1, 9), (2, 2), (3, 5)] {
            t.record(i, restarted(s).into());
        }
        t.record(4, Answer::from(Err(NodeFailure::Timeout)));
        assert_eq!(
            t.seen(),
            Seen::Quarantined {
                wait: Duration::from_secs(5)
            }
        );
        // Waited for (`wait::pause`).
        // Nodes that may answer on the next try would do without the
        // quarantined one: no wait (one yes, one timeout, one out for an
        // hour, of three).
        let mut t = Tally::new(3);
        t.record(0, YES.into());
        t.record(1, Answer::from(Err(NodeFailure::Timeout)));
        t.record(2, restarted(3_600).into());
        assert_eq!(t.seen(), Seen::Unreachable);
        // Too few of them to make a majority: nothing to wait for.
        let mut t = Tally::new(5);
        t.record(0, restarted(1).into());
        for i in 1..5 {
            t.record(i, Answer::from(Err(NodeFailure::Timeout)));
        }
        assert_eq!(t.seen(), Seen::Unreachable);
    }

    #[test]
    fn readers_are_one_holder_whatever_each_node_names_their_set() {
        // Five nodes, three reader sets (a share missing here and there):
        // one holder, the readers, with their soonest expiry.
        let t = tally(
            3,
            0,
            &[
                ("readers:aa", Some(900)),
                ("readers:bb", Some(700)),
                ("readers:cc", Some(800)),
                ("readers:aa", Some(900)),
            ],
        );
        match t.seen() {
            Seen::Holder { ttl, token } => {
                assert_eq!(ttl, Some(ms(700)));
                assert!(token.starts_with("readers:"));
            }
            other => panic!("{other:?}"),
        }
        // Semaphore holders named differently are contenders, as before.
        let t = tally(
            3,
            0,
            &[
                ("permits:1:aa", Some(900)),
                ("permits:1:bb", Some(900)),
                ("permits:1:cc", Some(900)),
            ],
        );
        assert_eq!(t.seen(), Seen::Contended);
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

    /// Three semaphore contenders across zones: each took its own node's
    /// slot first, and finds the two far nodes full, each with its own
    /// contender's slot. A full node names the holders by who holds which
    /// slot (`kinds::semaphore`), so the far nodes name the key
    /// differently: contention, a short random pause, and one of them wins
    /// the next round. Named as one, `permits:1` on both, they looked like
    /// a holder on a majority, and each slept the capped pause.
    #[test]
    fn contenders_of_a_semaphore_split_the_vote_and_its_holders_do_not() {
        let named = |names: &[&str]| {
            let holders: Vec<(&str, Option<u64>)> =
                names.iter().map(|n| (*n, Some(9_000))).collect();
            tally(2, 1, &holders)
        };
        let split = named(&["permits:1:b", "permits:1:c"]);
        assert_eq!(split.seen(), Seen::Contended);
        // A short random pause (`wait::pause`).
        // The same slot map on a majority: the semaphore is full, and the
        // waiter sleeps until its soonest permit ends (capped).
        let full = named(&["permits:1:h", "permits:1:h"]);
        assert!(matches!(full.seen(), Seen::Holder { token, .. } if &*token == "permits:1:h"));
        // The old one name: a holder on a majority, where there is none.
        let old = named(&["permits:1", "permits:1"]);
        assert!(matches!(old.seen(), Seen::Holder { .. }));
        // Refused by every node, with no name on a majority: unclear (the
        // other nodes are heard out), never a holder.
        let mut t = Tally::new(3);
        for (i, n) in ["permits:1:a", "permits:1:b"].into_iter().enumerate() {
            t.record(i, held_by(n));
        }
        assert!(t.unclear());
    }

    /// A tally of every node's vote, in node order.
    fn voted(votes: &[Vote]) -> Tally {
        let mut t = Tally::new(votes.len());
        for (i, v) in votes.iter().enumerate() {
            t.record(i, v.clone().into());
        }
        t
    }

    #[test]
    fn a_rollback_is_announced_only_when_the_key_may_be_on_a_majority() {
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
        let mut t = Tally::new(5);
        t.record(0, YES.into());
        t.record(1, YES.into());
        t.record(2, HELD.into());
        assert!(t.might_hold_majority());
        assert!(!voted(&[YES, timeout, HELD, HELD, HELD]).might_hold_majority());
    }

    #[test]
    fn a_majority_of_taken_or_gone_keys_cannot_be_won_back() {
        let missing = Err(NodeFailure::Missing);
        let timeout = Err(NodeFailure::Timeout);
        assert!(voted(&[YES, timeout.clone(), timeout.clone(), HELD, HELD]).recoverable());
        assert!(!voted(&[YES, missing.clone(), timeout, HELD, HELD]).recoverable());
        assert!(!voted(&[missing.clone(), missing, HELD]).recoverable());
    }

    /// Yes votes for different grants (a semaphore's slots) never add up,
    /// nor do they add up with yes votes that carry none; a tie leads with
    /// the grant reached first.
    #[test]
    fn yes_votes_count_per_grant() {
        let grant = |g: u32| Answer {
            grant: Some(g),
            ..YES.into()
        };
        let mut t = Tally::new(5);
        for (i, answer) in [grant(1), grant(2), YES.into(), grant(2), grant(1)]
            .into_iter()
            .enumerate()
        {
            t.record(i, answer);
        }
        assert_eq!(t.agreed(), 2);
        assert!(!t.has_majority());
        assert_eq!(t.leading_grant(), Some(1));
        let mut t = Tally::new(5);
        for (i, g) in [3, 1, 3, 3].into_iter().enumerate() {
            t.record(i, grant(g));
        }
        assert!(t.has_majority());
        assert_eq!(t.leading_grant(), Some(3));
        // Two of slot 0, two of slot 1: not decided, the fifth node may
        // still make either a majority.
        let mut t = Tally::new(5);
        for (i, g) in [0, 1, 0, 1].into_iter().enumerate() {
            t.record(i, grant(g));
        }
        assert!(!t.decided());
    }

    /// An attempt "passed" a released holder where a majority named
    /// another: not where a node of that majority named the released one,
    /// nor where too few answered to name anyone, nor where the released
    /// holder and the one named are both readers or both a semaphore's;
    /// nor for a wake-up that names no holder, nor past a writer's intent.
    #[test]
    fn an_attempt_passed_a_holder_where_a_majority_names_another() {
        let mut newcomer = Tally::new(5);
        newcomer.record(0, Answer::from(YES));
        for i in 1..4 {
            newcomer.record(i, held_by("n"));
        }
        assert!(newcomer.passed("t"), "a majority holds another");
        assert!(!newcomer.passed("n"));
        let mut early = Tally::new(5);
        early.record(0, held_by("n"));
        early.record(1, held_by("n"));
        early.record(2, held_by("t"));
        early.record(3, held_by("t"));
        early.record(4, held_by("t"));
        assert!(!early.passed("t"), "a majority still held the released one");
        let mut split = Tally::new(5);
        split.record(0, held_by("n"));
        split.record(1, held_by("n"));
        split.record(2, Answer::from(YES));
        split.record(3, Answer::from(YES));
        assert!(!split.passed("t"), "no majority names anyone");
        let mut silent = Tally::new(5);
        silent.record(0, held_by("n"));
        silent.record(1, held_by("n"));
        silent.record(2, Answer::from(Err(NodeFailure::Timeout)));
        assert!(!silent.passed("t"), "too few answers");
        let mut readers = Tally::new(3);
        for i in 0..3 {
            readers.record(i, held_by("readers:d2"));
        }
        assert!(!readers.passed("readers:d1"));
        assert!(readers.passed("t"));
        let mut permits = Tally::new(3);
        for i in 0..3 {
            permits.record(i, held_by("permits:2:h2"));
        }
        assert!(!permits.passed("permits:2:h1"));
        // A reentrant owner named by one hold on a majority may announce
        // another hold's token there later (its holds reached different
        // majorities).
        let mut owner = Tally::new(3);
        for i in 0..3 {
            owner.record(i, held_by("holds:b"));
        }
        assert!(!owner.passed("holds:a"));
        assert!(owner.passed("t"));
        // A wake-up that names no holder (a waiter's leaving, a reader
        // joining), and any wake-up after an attempt turned away by a
        // writer's intent on a majority: a copy may have taken the waiter
        // out of a node's queue, so it is not taken for a copy.
        let mut intent = Tally::new(5);
        intent.record(0, Answer::from(YES));
        for i in 1..5 {
            intent.record(i, held_by("intent"));
        }
        assert!(!intent.passed("t"));
        assert!(!intent.passed("readers:d1"));
        assert!(!intent.passed("leave:1795911690211661:aa3f6ea08348f113:1722"));
        assert!(!newcomer.passed("leave:1795911690211661:aa3f6ea08348f113:1722"));
        assert!(!readers.passed("joined:t"));
    }
}
