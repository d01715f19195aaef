//! Observing an election: every leadership, in term order, or a word on
//! the ones that could not be read.
//!
//! **What can be known, and how.** Leaderships can begin and end between
//! two reads of who leads — twenty back to back take a few milliseconds
//! each — and a notification may be lost (a subscriber connection that
//! breaks, a node that cannot be subscribed to), so who leads *now* is not
//! enough: a reader that only asks that merges short leaderships away.
//! Each node therefore keeps a **history** (`<key>:terms`, written by
//! `record.lua` in the same step as the record): the latest
//! [`HISTORY_KEEP`](crate::kinds::election::HISTORY_KEEP) leaderships whose record was written on it, by term,
//! and the highest term it dropped to keep that many. The observer reads,
//! with who leads, every node's history above the last term it accounted
//! for (its *cursor*), and a leadership whose entry a majority of nodes
//! hold is one whose record reached a majority: the same leaderships
//! [`Redlock::leader`](crate::Redlock::leader) can name.
//!
//! **Why nothing is skipped without a word.** Terms grow from leader to
//! leader (the fenced lock's guarantee), so the observer yields recorded
//! leaderships in term order and moves its cursor to each. Before yielding
//! the leadership of term `b` after the cursor `a`, it asks whether a
//! leadership with a term between them could have reached a majority
//! unseen. Call a node a *witness* of the gap when its history answered,
//! dropped nothing above `a`, and holds `b` or a later term: its history
//! holds every leadership between `a` and `b` that was recorded there
//! before `b` was. A leadership recorded on a majority is recorded on some
//! witness when at least `N − majority + 1` nodes are witnesses (two such
//! sets meet), so it is seen. A leadership seen, but on fewer than a
//! majority, is ruled out when the nodes that hold it and the nodes that
//! are no witnesses are fewer than a majority together: the witnesses that
//! lack it outnumber what it could still have. When the gap is not that
//! clear — too few witnesses (nodes down, restarted lately, histories that
//! dropped part of the gap) or a leadership that the others might still
//! hold — the observer reads again, up to [`UNSURE_READS`] times, for an
//! answer on its way (a second round still landing); then it yields
//! [`Observed::Skipped`] for the gap, and goes on with `b`. It never
//! yields a leadership twice, nor one no majority recorded.
//!
//! **What it does not see.** A record that reaches a node after a later
//! leader's record is there (a campaign's second round held in the
//! network for longer than the next leadership) is not waited for: the
//! node counts as a witness that lacks it. A node restarted without
//! persistence (or failed over to a lagging replica, or whose history was
//! evicted) has lost its history; the restart guard discounts it only
//! while it quarantines the node, for as long as the TTLs this client uses
//! or the longest key life the read shows. An observer that takes no lock
//! itself, reading a vacant election, so discounts it for no time: with
//! three nodes, a leadership recorded on two, one of which then restarts
//! empty, followed by another recorded on all three, all between two
//! reads, is taken as never having reached a majority, and no `Skipped`
//! says so.
//! The histories are read as the nodes answer: a consumer that falls more
//! than `HISTORY_KEEP` leaderships behind (the stream buffers 16 items,
//! and a full buffer pauses the reads) gets a
//! [`Skipped`](Observed::Skipped) for what the histories dropped meanwhile.

use std::collections::BTreeMap;
use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::client::Redlock;
use crate::election::leader::{Leader, judge, unexpected};
use crate::error::{Error, NodeFailure};
use crate::kinds::election::{self, Entry, Found, History};
use crate::wait::announcements;

/// How many times the observer reads again a gap it found unclear before
/// it yields it as [`Observed::Skipped`]: an answer on its way lands
/// within one or two.
const UNSURE_READS: u32 = 3;

/// The pause between two reads of an unclear gap, at most (no longer than
/// the observer's [`every`](Observer::every)).
const UNSURE_PAUSE: Duration = Duration::from_millis(50);

/// What an [`Observer`] yields.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Observed {
    /// A leader: a new leadership (each one whose record reached a
    /// majority of nodes, once, in term order), or a new value proclaimed
    /// by the current one. A leadership that had already ended when it was
    /// read has [`expires_in`](Leader::expires_in) zero, and the latest
    /// value its nodes had written.
    Leader(Leader),
    /// No leader: the election was found without one (when the observer
    /// started, or after a leader it yielded). Not every vacancy between
    /// two leaderships is yielded: only the ones a read finds.
    Vacant,
    /// A leadership with a term strictly between `after` and `before` may
    /// have reached a majority of nodes without being yielded: too few
    /// nodes could vouch for their history of those terms (see
    /// [`Observer`]). The next item is the leadership of term `before`.
    Skipped {
        /// The term of the last leadership accounted for.
        after: u64,
        /// The term of the leadership yielded next.
        before: u64,
    },
}

impl Observed {
    /// The leader, for a [`Leader`](Observed::Leader) item.
    pub fn leader(&self) -> Option<&Leader> {
        match self {
            Observed::Leader(l) => Some(l),
            _ => None,
        }
    }
}

/// A [`Stream`] of the leaderships of one election, made by
/// [`Redlock::observe`](crate::Redlock::observe): first what it finds when
/// it starts ([`Observed::Leader`] or [`Observed::Vacant`]), then
/// **every leadership whose record reached a majority of nodes, once, in
/// term order** — those that began and ended between two reads too —, the
/// current leader's new values, and [`Observed::Vacant`] when a read finds
/// no leader after one. Where it cannot rule out that a leadership with a
/// term between two it yields reached a majority unseen, it says so with
/// [`Observed::Skipped`] before the later one; exactly when is below.
/// Terms never go backwards from one item to the next.
///
/// **How.** Each node keeps, beside the record of who leads, the history
/// of the latest 32 leaderships recorded on it, without a TTL (as the
/// fencing counter: about 75 bytes per leadership plus its identity and
/// value, `<key>:terms`). Each node publishes every change of its record, and the
/// stream reads every node's history above the last term it yielded when
/// one is heard, and every [`every`](Observer::every) in any case (a
/// second by default), so a lost message, a node that cannot be subscribed
/// to, or a leader whose key expires (which publishes nothing) costs at
/// most that long, plus one read (a node timeout at most). The histories
/// make the timing of the reads matter for nothing but latency.
///
/// **When it says [`Skipped`](Observed::Skipped).** Before yielding the
/// leadership of term `b` after the term `a`, it needs `N − majority + 1`
/// nodes (3 of 5, 2 of 3) whose history answered, has dropped nothing
/// above `a`, and holds `b` or later: any leadership recorded on a
/// majority is in one of those. And a leadership between `a` and `b` seen
/// on fewer than a majority must be ruled out: the nodes that hold it and
/// the nodes that cannot vouch must be fewer than a majority together.
/// Otherwise — nodes down or cut off, nodes restarted lately (the restart
/// guard's quarantine), histories that dropped part of the range (the
/// consumer fell more than 32 leaderships behind: 16 items are buffered,
/// and a full buffer pauses the reads), or a campaign whose record reached
/// some nodes but not a majority while others cannot say — it reads again
/// up to three times, 50 ms apart at most, then yields `Skipped { after: a,
/// before: b }` and goes on. The argument is in the module doc
/// (`election::observe`). Not waited for: a record that reaches a node
/// after a later leader's record is there (held in the network for longer
/// than the next leadership).
///
/// Reads run in a background task of the tokio runtime the stream is
/// first polled on (it must be polled within one), stopped when the stream
/// is dropped; each observer subscribes on every node with a connection
/// of its own. Reads that fail are retried at the next poll; five in a
/// row are logged as a warning.
///
/// Terms never go backwards under the guarantee's assumptions. Should the
/// nodes lose their fencing counters (without
/// [`fence_time_floor`](crate::Builder::fence_time_floor), or with client
/// clocks apart), a leader of a lower term is yielded once five reads in a
/// row have named it, with a warning, rather than hidden for ever; the
/// history's leaderships are yielded again once their terms pass the
/// highest one yielded.
pub struct Observer {
    redlock: Redlock,
    name: String,
    every: Duration,
    running: Option<(mpsc::Receiver<Observed>, JoinHandle<()>)>,
}

impl Observer {
    pub(crate) fn new(redlock: Redlock, name: &str) -> Observer {
        Observer {
            redlock,
            name: name.to_owned(),
            every: Duration::from_secs(1),
            running: None,
        }
    }

    /// How often the election is read when no change is heard (a second by
    /// default; at least 10 ms). Takes effect if set before the first item
    /// is asked for.
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(10));
        self
    }

    /// The next item, without `futures::StreamExt` in scope: the stream's
    /// next item (`None` only if its task ended, which it does not while
    /// the runtime runs).
    pub async fn next(&mut self) -> Option<Observed> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Observer {
    type Item = Observed;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let (rx, _) = this.running.get_or_insert_with(|| {
            let (tx, rx) = mpsc::channel(16);
            let task = tokio::spawn(watch(
                this.redlock.clone(),
                this.name.clone(),
                this.every,
                tx,
            ));
            (rx, task)
        });
        rx.poll_recv(cx)
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        if let Some((_, task)) = &self.running {
            task.abort();
        }
    }
}

impl fmt::Debug for Observer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Observer")
            .field("name", &self.name)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// One read of every node: who leads, as a majority agrees, and each
/// node's history above the cursor (`None` where it cannot speak: no
/// answer, a reply of no shape, a node restarted lately).
struct Read {
    now: Result<Option<Leader>, Error>,
    histories: Vec<Option<History>>,
}

async fn read(redlock: &Redlock, name: &str, above: u64) -> Read {
    let key = redlock.key(name);
    let answers = redlock
        .engine()
        .gather(election::observe(&key, above))
        .await;
    let mut histories = Vec::with_capacity(answers.len());
    let seen: Vec<Result<Found, NodeFailure>> = answers
        .into_iter()
        .map(|a| {
            let read = a
                .and_then(|reply| election::read_observe(&reply).ok_or_else(|| unexpected(&reply)));
            match read {
                Ok((seen, history)) => {
                    histories.push(Some(history));
                    Ok(seen)
                }
                Err(e) => {
                    histories.push(None);
                    Err(e)
                }
            }
        })
        .collect();
    let (now, restarted) = judge(redlock, name, seen);
    for (history, restarted) in histories.iter_mut().zip(restarted) {
        if restarted {
            *history = None;
        }
    }
    Read { now, histories }
}

/// The observer's task: reads the election when a change is heard or
/// `every` has passed, and sends what it may, in order.
async fn watch(redlock: Redlock, name: String, every: Duration, tx: mpsc::Sender<Observed>) {
    let heard = Arc::new(Notify::new());
    let channel = format!("{}:leader", redlock.key(&name));
    let listeners: Vec<AbortOnDrop> = redlock
        .engine()
        .nodes
        .iter()
        .map(|node| {
            AbortOnDrop(tokio::spawn(announcements::listen(
                node.endpoint().clone(),
                node.limits().connect,
                channel.clone(),
                heard.clone(),
                every,
            )))
        })
        .collect();
    let quorum = redlock.quorum();
    let mut state = State::default();
    loop {
        let notified = heard.notified();
        let read = read(&redlock, &name, state.cursor.unwrap_or(0)).await;
        if let Err(e) = &read.now {
            state.failing += 1;
            if state.failing == BEHIND_READS {
                tracing::warn!(election = %name, error = %e, "observer: no majority agrees on the election");
            }
        } else {
            state.failing = 0;
        }
        let items = state.step(&read, quorum);
        for item in items {
            if tx.send(item).await.is_err() {
                drop(listeners);
                return;
            }
        }
        if let Some((b, highest)) = state.went_back.take() {
            // Only when the guarantee's assumptions broke: the nodes lost
            // the counters (without the time floor, or with client clocks
            // apart). Said, not hidden for ever.
            tracing::warn!(
                election = %name,
                term = b,
                highest,
                "the leader's term went back: nodes lost their counters (see fence_time_floor)"
            );
        }
        if state.unsure > 0 {
            tokio::time::sleep(every.min(UNSURE_PAUSE)).await;
            continue;
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep(every) => {}
        }
    }
}

/// What the observer's task knows between reads.
#[derive(Debug, Default)]
struct State {
    /// The highest term accounted for (yielded, or skipped); `None` before
    /// the first read a majority agreed on.
    cursor: Option<u64>,
    /// What the last item said of who leads (a leader, or none).
    last: Option<Option<Leader>>,
    /// A leader of a lower term than the cursor, and how many reads in a
    /// row named it.
    behind: Option<(Leader, u32)>,
    /// A lower term just yielded, and the cursor: to be warned of.
    went_back: Option<(u64, u64)>,
    /// How many reads in a row found the next gap unclear.
    unsure: u32,
    /// How many reads in a row no majority agreed on.
    failing: u32,
}

impl State {
    /// What one read brings: the items to send, in order.
    fn step(&mut self, read: &Read, quorum: usize) -> Vec<Observed> {
        let now = read.now.as_ref().ok();
        let Some(cursor) = self.cursor else {
            // The first read: what it finds, and nothing before it.
            let Some(now) = now else {
                return Vec::new();
            };
            let settled = settle(0, &read.histories, quorum, now.as_ref(), true);
            self.cursor = Some(settled.cursor);
            return vec![self.say(now.clone())];
        };
        let current = now.and_then(Option::as_ref).filter(|l| l.term > cursor);
        let force = self.unsure >= UNSURE_READS;
        let settled = settle(cursor, &read.histories, quorum, current, force);
        let mut items = Vec::new();
        for step in settled.steps {
            match step {
                Step::Skipped { after, before } => items.push(Observed::Skipped { after, before }),
                Step::Leader(e) => {
                    let leader = match now {
                        Some(Some(l)) if (l.term, &l.identity) == (e.term, &e.identity) => {
                            l.clone()
                        }
                        _ => Leader {
                            identity: e.identity,
                            value: e.value,
                            term: e.term,
                            expires_in: Duration::ZERO,
                            proclamation: e.seq,
                        },
                    };
                    items.push(self.say(Some(leader)));
                }
            }
        }
        self.cursor = Some(settled.cursor);
        if settled.unsure {
            // The rest, and who leads now, once the gap is clear.
            self.unsure += 1;
            return items;
        }
        self.unsure = 0;
        let cursor = settled.cursor;
        match now {
            None => {}
            Some(None) => {
                self.behind = None;
                if self.last != Some(None) {
                    items.push(self.say(None));
                }
            }
            Some(Some(l)) => {
                let last = self.last.as_ref().and_then(Option::as_ref);
                let same = last.is_some_and(|a| (a.term, &a.identity) == (l.term, &l.identity));
                if same {
                    self.behind = None;
                    if last.is_some_and(|a| a.proclamation < l.proclamation) {
                        items.push(self.say(Some(l.clone())));
                    }
                } else if l.term == cursor {
                    // Named again after a read found no leader.
                    self.behind = None;
                    items.push(self.say(Some(l.clone())));
                } else if l.term < cursor {
                    let named = match self.behind.take() {
                        Some((b, n)) if (b.term, &b.identity) == (l.term, &l.identity) => n + 1,
                        _ => 1,
                    };
                    if named >= BEHIND_READS {
                        self.went_back = Some((l.term, cursor));
                        items.push(self.say(Some(l.clone())));
                    } else {
                        self.behind = Some((l.clone(), named));
                    }
                }
            }
        }
        items
    }

    /// The item that says `now` leads (or that none does), noted as the
    /// last word on who leads.
    fn say(&mut self, now: Option<Leader>) -> Observed {
        self.last = Some(now.clone());
        match now {
            Some(l) => Observed::Leader(l),
            None => Observed::Vacant,
        }
    }
}

/// How many reads in a row must name a leader of a lower term than the
/// cursor before the observer yields it (with a warning); also how many
/// failed reads in a row are worth one.
const BEHIND_READS: u32 = 5;

/// What one read's histories let the observer yield.
#[derive(Debug, PartialEq, Eq)]
enum Step {
    /// A leadership recorded on a majority: the nodes' latest word on it.
    Leader(Entry),
    /// A gap that could not be cleared.
    Skipped { after: u64, before: u64 },
}

#[derive(Debug)]
struct Settled {
    steps: Vec<Step>,
    /// The term of the last leadership in `steps` (the cursor given, if
    /// none).
    cursor: u64,
    /// Whether it stopped before a gap it could not clear (never when
    /// forced: it yields the gap as skipped instead).
    unsure: bool,
}

/// One leadership as the histories show it: the nodes that hold it, and
/// the latest word on it among them.
struct Sighting {
    holders: Vec<usize>,
    entry: Entry,
    /// Recorded on a majority (or named by a majority now).
    recorded: bool,
}

/// The leaderships the histories (`histories[i]`: node `i`'s, above
/// `cursor`; `None` where it cannot speak) show recorded on a majority, in
/// term order, each after its gap is cleared (see the module doc); a gap
/// that is not stops it, unless `force`d, where it is yielded as skipped.
/// `current`, the leader a majority names now if its term is above the
/// cursor, counts as recorded whatever the histories hold.
fn settle(
    cursor: u64,
    histories: &[Option<History>],
    quorum: usize,
    current: Option<&Leader>,
    force: bool,
) -> Settled {
    let mut seen: BTreeMap<(u64, String), Sighting> = BTreeMap::new();
    for (i, history) in histories.iter().enumerate() {
        for e in history.iter().flat_map(|h| &h.entries) {
            if e.term <= cursor {
                continue;
            }
            let s = seen
                .entry((e.term, e.token.clone()))
                .or_insert_with(|| Sighting {
                    holders: Vec::new(),
                    entry: e.clone(),
                    recorded: false,
                });
            s.holders.push(i);
            if e.seq > s.entry.seq {
                s.entry = e.clone();
            }
        }
    }
    for s in seen.values_mut() {
        s.recorded = s.holders.len() >= quorum;
    }
    if let Some(l) = current {
        let named = seen
            .values_mut()
            .find(|s| (s.entry.term, &s.entry.identity) == (l.term, &l.identity));
        match named {
            Some(s) => s.recorded = true,
            None => {
                seen.insert(
                    (l.term, String::new()),
                    Sighting {
                        holders: Vec::new(),
                        entry: Entry {
                            term: l.term,
                            token: String::new(),
                            identity: l.identity.clone(),
                            value: l.value.clone(),
                            seq: l.proclamation,
                        },
                        recorded: true,
                    },
                );
            }
        }
    }
    let mut steps = Vec::new();
    let mut after = cursor;
    let recorded: Vec<&Sighting> = seen.values().filter(|s| s.recorded).collect();
    for r in recorded {
        let before = r.entry.term;
        if before == after {
            // A second leadership of one term (never, under the
            // guarantee's assumptions): the first stands.
            continue;
        }
        if !clear(after, before, histories, quorum, &seen) {
            if !force {
                return Settled {
                    steps,
                    cursor: after,
                    unsure: true,
                };
            }
            steps.push(Step::Skipped { after, before });
        }
        steps.push(Step::Leader(r.entry.clone()));
        after = before;
    }
    Settled {
        steps,
        cursor: after,
        unsure: false,
    }
}

/// Whether no leadership with a term strictly between `after` and
/// `before` can have been recorded on a majority without being seen (see
/// the module doc).
fn clear(
    after: u64,
    before: u64,
    histories: &[Option<History>],
    quorum: usize,
    seen: &BTreeMap<(u64, String), Sighting>,
) -> bool {
    let n = histories.len();
    let witness: Vec<bool> = histories
        .iter()
        .map(|h| {
            h.as_ref().is_some_and(|h| {
                h.dropped <= after && h.entries.last().is_some_and(|e| e.term >= before)
            })
        })
        .collect();
    let witnesses = witness.iter().filter(|&&w| w).count();
    if witnesses < n + 1 - quorum {
        return false;
    }
    seen.values()
        .filter(|s| !s.recorded && s.entry.term > after && s.entry.term < before)
        .all(|s| {
            let silent = (0..n)
                .filter(|i| !witness[*i] && !s.holders.contains(i))
                .count();
            s.holders.len() + silent < quorum
        })
}

/// A task aborted when its handle is dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(term: u64) -> Entry {
        Entry {
            term,
            token: format!("t{term}"),
            identity: format!("c{term}"),
            value: String::new(),
            seq: 0,
        }
    }

    /// A node's history holding `terms`, having dropped up to `dropped`.
    fn node(dropped: u64, terms: &[u64]) -> Option<History> {
        Some(History {
            dropped,
            entries: terms.iter().map(|&t| entry(t)).collect(),
        })
    }

    fn terms(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Leader(e) => e.term.to_string(),
                Step::Skipped { after, before } => format!("skip {after}..{before}"),
            })
            .collect()
    }

    #[test]
    fn leaderships_recorded_on_a_majority_come_in_term_order() {
        let h = [
            node(0, &[3, 5, 9]),
            node(0, &[3, 5, 9]),
            node(0, &[3, 9]),
            node(0, &[5]),
            None,
        ];
        let s = settle(0, &h, 3, None, false);
        assert_eq!(terms(&s.steps), ["3", "5", "9"]);
        assert_eq!((s.cursor, s.unsure), (9, false));
        // Above the cursor only.
        let s = settle(5, &h, 3, None, false);
        assert_eq!(terms(&s.steps), ["9"]);
    }

    #[test]
    fn a_leadership_on_a_minority_is_ruled_out_by_the_witnesses_that_lack_it() {
        // 4 on two nodes; three witnesses (they hold 7) lack it: at most
        // two of five could hold it.
        let h = [
            node(0, &[4, 7]),
            node(0, &[4, 7]),
            node(0, &[7]),
            node(0, &[7]),
            node(0, &[7]),
        ];
        let s = settle(0, &h, 3, None, false);
        assert_eq!(terms(&s.steps), ["7"]);
        // Node 4 silent: 4 may be on it too, a majority: unclear, then
        // said skipped.
        let h = [
            node(0, &[4, 7]),
            node(0, &[4, 7]),
            node(0, &[7]),
            node(0, &[7]),
            None,
        ];
        let s = settle(0, &h, 3, None, false);
        assert!(s.unsure && s.steps.is_empty() && s.cursor == 0);
        let s = settle(0, &h, 3, None, true);
        assert_eq!(terms(&s.steps), ["skip 0..7", "7"]);
        // A node whose history stops below 7 may still get 4: no witness.
        let h = [
            node(0, &[4, 7]),
            node(0, &[4, 7]),
            node(0, &[7]),
            node(0, &[7]),
            node(0, &[2]),
        ];
        assert!(settle(0, &h, 3, None, false).unsure);
    }

    #[test]
    fn too_few_witnesses_leave_a_gap_unclear() {
        // Three nodes silent: a leadership between 0 and 7 could be on
        // them alone.
        let h = [node(0, &[7]), node(0, &[7]), None, None, None];
        // (7 itself named by a majority now.)
        let now = Leader {
            identity: "c7".into(),
            value: String::new(),
            term: 7,
            expires_in: Duration::from_secs(1),
            proclamation: 0,
        };
        let s = settle(0, &h, 3, Some(&now), false);
        assert!(s.unsure);
        let s = settle(0, &h, 3, Some(&now), true);
        assert_eq!(terms(&s.steps), ["skip 0..7", "7"]);
        // Histories that dropped part of the gap are no witnesses of it.
        let h = [
            node(5, &[7]),
            node(5, &[7]),
            node(5, &[7]),
            node(0, &[7]),
            node(0, &[7]),
        ];
        let s = settle(3, &h, 3, None, true);
        assert_eq!(terms(&s.steps), ["skip 3..7", "7"]);
        let s = settle(5, &h, 3, None, false);
        assert_eq!(terms(&s.steps), ["7"]);
    }

    #[test]
    fn the_leader_named_now_counts_as_recorded() {
        // Its history entries lost on two nodes of three (never, short of
        // an operator): still yielded, in its turn.
        let now = Leader {
            identity: "c9".into(),
            value: "v".into(),
            term: 9,
            expires_in: Duration::from_secs(1),
            proclamation: 2,
        };
        let h = [node(0, &[5, 9]), node(0, &[5]), node(0, &[5])];
        let s = settle(0, &h, 2, Some(&now), true);
        assert_eq!(terms(&s.steps)[..2], ["5".to_owned(), "skip 5..9".into()]);
        let Some(Step::Leader(e)) = s.steps.last() else {
            panic!("{:?}", s.steps)
        };
        assert_eq!((e.term, e.identity.as_str()), (9, "c9"));
    }

    fn read(now: Result<Option<Leader>, ()>, histories: Vec<Option<History>>) -> Read {
        Read {
            now: now.map_err(|()| Error::Lost {
                resource: "e".into(),
            }),
            histories,
        }
    }

    fn leading(term: u64, proclamation: u64) -> Leader {
        Leader {
            identity: format!("c{term}"),
            value: format!("v{proclamation}"),
            term,
            expires_in: Duration::from_secs(1),
            proclamation,
        }
    }

    fn said(items: &[Observed]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Observed::Leader(l) => format!("{}/{}", l.term, l.proclamation),
                Observed::Vacant => "none".into(),
                Observed::Skipped { after, before } => format!("skip {after}..{before}"),
            })
            .collect()
    }

    #[test]
    fn an_observer_yields_what_it_finds_then_every_leadership_then_who_leads() {
        let mut s = State::default();
        // No majority agrees: nothing yet.
        assert!(s.step(&read(Err(()), vec![None; 3]), 2).is_empty());
        // The first read: who leads, nothing of the history before it.
        let h = vec![node(0, &[2, 4]), node(0, &[2, 4]), node(0, &[4])];
        assert_eq!(said(&s.step(&read(Ok(Some(leading(4, 0))), h), 2)), ["4/0"]);
        // Three leaderships came and went between two reads: each, then
        // none.
        let h = vec![node(0, &[6, 8, 9]), node(0, &[6, 8, 9]), node(0, &[9])];
        let items = s.step(&read(Ok(None), h.clone()), 2);
        assert_eq!(said(&items), ["6/0", "8/0", "9/0", "none"]);
        assert_eq!(items[0].leader().unwrap().expires_in, Duration::ZERO);
        // Nothing new: nothing.
        assert!(s.step(&read(Ok(None), vec![node(0, &[]); 3]), 2).is_empty());
        // A leader, then its proclamation: the current leader's own word.
        let h = vec![node(0, &[11]), node(0, &[11]), None];
        let items = s.step(&read(Ok(Some(leading(11, 0))), h.clone()), 2);
        assert_eq!(said(&items), ["11/0"]);
        assert_eq!(
            items[0].leader().unwrap().expires_in,
            Duration::from_secs(1)
        );
        assert!(
            s.step(&read(Ok(Some(leading(11, 0))), vec![node(0, &[]); 3]), 2)
                .is_empty()
        );
        let items = s.step(&read(Ok(Some(leading(11, 3))), vec![node(0, &[]); 3]), 2);
        assert_eq!(said(&items), ["11/3"]);
    }

    #[test]
    fn an_unclear_gap_holds_back_what_follows_then_is_said_skipped() {
        let mut s = State {
            cursor: Some(1),
            last: Some(None),
            ..State::default()
        };
        // 3 on one node of three, one silent: unclear; 5 and who leads
        // wait.
        let h = || vec![node(0, &[3, 5]), node(0, &[5]), None];
        for _ in 0..UNSURE_READS {
            assert!(s.step(&read(Ok(Some(leading(5, 0))), h()), 2).is_empty());
        }
        let items = s.step(&read(Ok(Some(leading(5, 0))), h()), 2);
        assert_eq!(said(&items), ["skip 1..5", "5/0"]);
        assert_eq!(s.unsure, 0);
        // Cleared on a later read (the silent node answers, without 3):
        let mut s = State {
            cursor: Some(1),
            last: Some(None),
            ..State::default()
        };
        assert!(s.step(&read(Ok(Some(leading(5, 0))), h()), 2).is_empty());
        let h = vec![node(0, &[3, 5]), node(0, &[5]), node(0, &[5])];
        let items = s.step(&read(Ok(Some(leading(5, 0))), h), 2);
        assert_eq!(said(&items), ["5/0"]);
    }

    #[test]
    fn a_term_going_back_is_yielded_only_after_five_reads_name_it() {
        let mut s = State {
            cursor: Some(9),
            last: Some(Some(leading(9, 0))),
            ..State::default()
        };
        let back = || read(Ok(Some(leading(4, 0))), vec![node(0, &[]); 3]);
        for _ in 1..BEHIND_READS {
            assert!(s.step(&back(), 2).is_empty());
        }
        assert_eq!(said(&s.step(&back(), 2)), ["4/0"]);
        assert_eq!(s.went_back, Some((4, 9)));
        assert!(s.step(&back(), 2).is_empty(), "said once");
    }
}
