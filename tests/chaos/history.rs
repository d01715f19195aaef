//! The history of a chaos run and the checker that judges it.
//!
//! Every client process writes one line per event to its history file, with
//! times on `CLOCK_BOOTTIME`, which all processes of this machine share; the
//! checker reads every file of a run and knows nothing of how the lock
//! works. Its one safety question is Jepsen's: did two owners ever believe
//! they held the same resource at the same time? A client believes it holds
//! a lock from the moment `lock()` (or `lock_all()`) returns it to the
//! earlier of its `release()` call and the validity deadline the lock
//! reported (moved by successful extensions); a lock on a set of resources
//! is one such interval per resource. Each interval names its owner: the
//! client task for a plain lock, the owner id for a reentrant hold. Any two
//! intervals of one resource that overlap and have different owners are a
//! violation; two of one owner are that owner's nested holds, which a
//! reentrant lock allows (a plain lock's task never holds twice at once).
//!
//! Fenced locks add a second question: the interval of a fenced lock
//! carries its fencing token, and per resource, ordered by when `lock()`
//! returned, every token must be greater than the one before it; each
//! adjacent pair that does not grow is a fence violation.
//!
//! Next to it runs a lock-protected read-modify-write register (on a Redis
//! node of its own, outside the faults): each holder reads a counter, waits
//! a little, writes it plus one, and logs the write. The counter's final
//! value against the number of logged writes gives the lost updates. A
//! holder of a fenced lock also read-modify-writes a fenced register there,
//! which keeps the highest token it has seen and refuses a read or write
//! with a lower one (see `client`); its accepted writes against its final
//! value give its lost updates, which fencing must keep at zero even when
//! holders pause past their validity.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Nanoseconds on `CLOCK_BOOTTIME`: one clock for every process here.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One line of a history file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A `lock()` call that returned the lock, after `latency_us`.
    Acquired { latency_us: u64 },
    /// A `lock()` call that gave up; `cause` names the kind of failure
    /// most nodes gave in the last attempt.
    Failed { cause: String, latency_us: u64 },
    /// A `lock()` future dropped before it finished.
    Cancelled,
    /// The interval in which an owner believed it held `resource`.
    Held {
        resource: String,
        interval: Interval,
    },
    /// A `release()`: `ok`, or the kind of error (the lock was gone).
    Released { outcome: String },
    /// A failed `lock()` call's last attempt, refused by `votes` nodes
    /// because they restarted or failed over (`NodeFailure::Restarted`: the
    /// restart guard's quarantine).
    Quarantined { votes: u64 },
    /// A register write, completed at `at`, by a holder whose validity ran
    /// out at `deadline`.
    Wrote {
        resource: String,
        at: u64,
        deadline: u64,
    },
    /// An access to the fenced register of `resource` with the lock's
    /// `token`, and what the register did with it.
    Fenced {
        resource: String,
        token: u64,
        access: Access,
    },
    /// A read of a resource before the process locked anything
    /// (`Redlock::status`): what a majority of nodes said, `free`, `held`
    /// or `unclear`.
    Read { outcome: String },
}

/// What the fenced register did with an access (see `Event::Fenced`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The write was accepted.
    Wrote,
    /// The write was refused: the register had seen a higher token.
    Refused,
    /// The read was refused, for the same reason; no write followed.
    ReadRefused,
}

impl Access {
    const ALL: [Access; 3] = [Access::Wrote, Access::Refused, Access::ReadRefused];

    fn name(self) -> &'static str {
        match self {
            Access::Wrote => "wrote",
            Access::Refused => "refused",
            Access::ReadRefused => "read_refused",
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Acquired { latency_us } => write!(f, "acquired {latency_us}"),
            Event::Failed { cause, latency_us } => write!(f, "failed {cause} {latency_us}"),
            Event::Cancelled => write!(f, "cancelled"),
            Event::Held { resource, interval } => {
                let Interval {
                    owner,
                    start,
                    end,
                    paused,
                    fence,
                } = interval;
                let paused = u8::from(*paused);
                write!(f, "held {resource} {owner} {start} {end} {paused}")?;
                // Last and only when there is one: older lines parse.
                match fence {
                    Some(token) => write!(f, " {token}"),
                    None => Ok(()),
                }
            }
            Event::Released { outcome } => write!(f, "released {outcome}"),
            Event::Quarantined { votes } => write!(f, "quarantined {votes}"),
            Event::Wrote {
                resource,
                at,
                deadline,
            } => write!(f, "wrote {resource} {at} {deadline}"),
            Event::Fenced {
                resource,
                token,
                access,
            } => write!(f, "fenced {resource} {token} {}", access.name()),
            Event::Read { outcome } => write!(f, "read {outcome}"),
        }
    }
}

impl Event {
    /// Parses one line written by `Display`.
    pub fn parse(line: &str) -> Result<Event, String> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let n = |i: usize| -> Result<u64, String> {
            w.get(i)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad history line {line:?}"))
        };
        let s = |i: usize| -> Result<String, String> {
            w.get(i)
                .map(|s| (*s).to_owned())
                .ok_or_else(|| format!("bad history line {line:?}"))
        };
        Ok(match w.first().copied() {
            Some("acquired") => Event::Acquired { latency_us: n(1)? },
            Some("failed") => Event::Failed {
                cause: s(1)?,
                latency_us: n(2)?,
            },
            Some("cancelled") => Event::Cancelled,
            Some("held") => Event::Held {
                resource: s(1)?,
                interval: Interval {
                    owner: s(2)?,
                    start: n(3)?,
                    end: n(4)?,
                    paused: n(5)? == 1,
                    fence: if w.len() > 6 { Some(n(6)?) } else { None },
                },
            },
            Some("released") => Event::Released { outcome: s(1)? },
            Some("quarantined") => Event::Quarantined { votes: n(1)? },
            Some("wrote") => Event::Wrote {
                resource: s(1)?,
                at: n(2)?,
                deadline: n(3)?,
            },
            Some("fenced") => Event::Fenced {
                resource: s(1)?,
                token: n(2)?,
                access: Access::ALL
                    .into_iter()
                    .find(|a| w.get(3) == Some(&a.name()))
                    .ok_or_else(|| format!("bad history line {line:?}"))?,
            },
            Some("read") => Event::Read { outcome: s(1)? },
            _ => return Err(format!("bad history line {line:?}")),
        })
    }
}

/// One holding interval: whose, from when to when; `paused` when the client
/// slept in it past the lock's validity; the fencing token of a fenced lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// Who held it: the client task of a plain lock (`p0t3`), the owner id
    /// of a reentrant hold (there too the task's name). Overlaps between
    /// intervals of one owner are not violations.
    pub owner: String,
    pub start: u64,
    pub end: u64,
    pub paused: bool,
    pub fence: Option<u64>,
}

impl Interval {
    /// A reader's share of a read-write lock: its owner is `<task>/r`.
    pub fn is_shared(&self) -> bool {
        self.owner.ends_with("/r")
    }
}

/// Two intervals of one resource that break a rule: two owners that
/// believed they held it at once (a violation), or two fenced acquisitions
/// in a row whose tokens did not grow (a fence violation).
#[derive(Debug, Clone)]
pub struct Violation {
    pub resource: String,
    pub first: Interval,
    pub second: Interval,
}

impl Violation {
    /// How long both believed they held it.
    pub fn overlap(&self) -> Duration {
        let from = self.first.start.max(self.second.start);
        let to = self.first.end.min(self.second.end);
        Duration::from_nanos(to.saturating_sub(from))
    }
}

/// What the checker found in a run.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Every pair of overlapping intervals of two owners on one resource.
    pub violations: Vec<Violation>,
    /// Every pair of fenced acquisitions of one resource, adjacent in the
    /// order of their starts, whose second token is not greater than the
    /// first.
    pub fence_violations: Vec<Violation>,
    /// Intervals that carry a fencing token.
    pub fenced: usize,
    /// Pairs of overlapping intervals of one owner on one resource: nested
    /// reentrant holds, allowed.
    pub nested: usize,
    /// `lock()` calls, cancelled ones included.
    pub calls: usize,
    pub acquisitions: usize,
    pub cancelled: usize,
    /// Failed `lock()` calls by cause.
    pub failures: BTreeMap<String, usize>,
    /// Failed `lock()` calls whose last attempt some node refused under
    /// the restart guard's quarantine, and how many such votes.
    pub quarantined_calls: usize,
    pub quarantined_votes: usize,
    /// Releases by outcome (`ok`, or the error kind when the lock was gone).
    pub releases: BTreeMap<String, usize>,
    /// Latency of the `lock()` calls that acquired, sorted (µs).
    pub latencies_us: Vec<u64>,
    /// The intervals, per resource, sorted by start.
    pub intervals: BTreeMap<String, Vec<Interval>>,
    /// Register writes per resource, and those completed after the writer's
    /// validity had run out (a client pause: the lock no longer covered
    /// them).
    pub writes: BTreeMap<String, u64>,
    pub late_writes: usize,
    /// Writes the fenced register accepted, per resource; and the stale
    /// writes and reads it refused.
    pub fenced_writes: BTreeMap<String, u64>,
    pub refused_writes: usize,
    pub refused_reads: usize,
    /// The most intervals of one resource that overlapped at one instant.
    pub most_at_once: usize,
    /// Pairs of overlapping readers' intervals (owners `<task>/r`): shared,
    /// allowed.
    pub shared_overlaps: usize,
    /// Paused holders during whose pause another client took the resource.
    pub moved_on: usize,
    /// Reads before locking, by what a majority said (`Event::Read`).
    pub reads: BTreeMap<String, usize>,
    pub paused: usize,
    /// When the load ran, on the history's clock.
    pub window: (u64, u64),
}

impl Verdict {
    /// Checks the events of all clients of a run: at most one holder of a
    /// resource at a time.
    pub fn check(events: impl IntoIterator<Item = Event>) -> Verdict {
        Verdict::check_at_most(events, 1)
    }

    /// Checks the events of all clients of a run: at most `capacity`
    /// holders of a resource at a time (a semaphore's permits). With a
    /// capacity above one, a violation is an interval that began while
    /// `capacity` others were held, paired with one of them.
    pub fn check_at_most(events: impl IntoIterator<Item = Event>, capacity: usize) -> Verdict {
        let mut v = Verdict::default();
        for event in events {
            match event {
                Event::Acquired { latency_us } => {
                    v.calls += 1;
                    v.acquisitions += 1;
                    v.latencies_us.push(latency_us);
                }
                Event::Failed { cause, .. } => {
                    v.calls += 1;
                    *v.failures.entry(cause).or_default() += 1;
                }
                Event::Cancelled => {
                    v.calls += 1;
                    v.cancelled += 1;
                }
                Event::Held { resource, interval } => {
                    v.intervals.entry(resource).or_default().push(interval)
                }
                Event::Released { outcome } => *v.releases.entry(outcome).or_default() += 1,
                Event::Quarantined { votes } => {
                    v.quarantined_calls += 1;
                    v.quarantined_votes += votes as usize;
                }
                Event::Wrote {
                    resource,
                    at,
                    deadline,
                } => {
                    *v.writes.entry(resource).or_default() += 1;
                    if at > deadline {
                        v.late_writes += 1;
                    }
                }
                Event::Fenced {
                    resource, access, ..
                } => match access {
                    Access::Wrote => *v.fenced_writes.entry(resource).or_default() += 1,
                    Access::Refused => v.refused_writes += 1,
                    Access::ReadRefused => v.refused_reads += 1,
                },
                Event::Read { outcome } => *v.reads.entry(outcome).or_default() += 1,
            }
        }
        v.latencies_us.sort_unstable();
        for (resource, intervals) in &mut v.intervals {
            intervals.sort_by_key(|i| i.start);
            if capacity == 1 {
                for (a, b) in overlaps(intervals) {
                    if a.owner == b.owner {
                        v.nested += 1;
                    } else if a.is_shared() && b.is_shared() {
                        v.shared_overlaps += 1;
                    } else {
                        v.violations.push(Violation {
                            resource: resource.clone(),
                            first: a.clone(),
                            second: b.clone(),
                        });
                    }
                }
            }
            // A sweep in the order of the starts: who holds at each start.
            let mut active: Vec<&Interval> = Vec::new();
            for b in intervals.iter() {
                active.retain(|a| a.end > b.start);
                if capacity > 1 && active.len() >= capacity {
                    v.violations.push(Violation {
                        resource: resource.clone(),
                        first: active[0].clone(),
                        second: b.clone(),
                    });
                }
                active.push(b);
                v.most_at_once = v.most_at_once.max(active.len());
            }
            let fenced: Vec<&Interval> = intervals.iter().filter(|i| i.fence.is_some()).collect();
            v.fenced += fenced.len();
            for pair in fenced.windows(2) {
                if pair[1].fence <= pair[0].fence {
                    v.fence_violations.push(Violation {
                        resource: resource.clone(),
                        first: pair[0].clone(),
                        second: pair[1].clone(),
                    });
                }
            }
            for (i, held) in intervals.iter().enumerate().filter(|(_, h)| h.paused) {
                v.paused += 1;
                // Taken by another after the validity ran out, while the
                // paused client still slept: sorted by start, they follow.
                let another = |o: &Interval| o.start >= held.end && o.owner != held.owner;
                if intervals[i + 1..].iter().any(another) {
                    v.moved_on += 1;
                }
            }
        }
        v
    }

    /// The `q`-quantile of the acquisition latency.
    pub fn latency(&self, q: f64) -> Duration {
        if self.latencies_us.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.latencies_us.len() - 1) as f64 * q).round() as usize;
        Duration::from_micros(self.latencies_us[i])
    }

    /// Acquisitions whose interval started within `[from, to)`.
    pub fn acquired_between(&self, from: u64, to: u64) -> usize {
        self.starts(from, to).count()
    }

    /// How long after `from` the first interval in `[from, to)` started
    /// (`to − from` if none did).
    pub fn first_acquisition_after(&self, from: u64, to: u64) -> Duration {
        let first = self.starts(from, to).min().unwrap_or(to);
        Duration::from_nanos(first - from)
    }

    /// The starts of the intervals in `[from, to)`, on any resource.
    fn starts(&self, from: u64, to: u64) -> impl Iterator<Item = u64> + '_ {
        self.intervals
            .values()
            .flatten()
            .map(|i| i.start)
            .filter(move |s| (from..to).contains(s))
    }

    /// The longest time in `[from, to)` in which no interval started on any
    /// resource: how long the lock service was unavailable at worst.
    pub fn longest_gap(&self, from: u64, to: u64) -> Duration {
        let mut starts: Vec<u64> = self.starts(from, to).collect();
        starts.sort_unstable();
        let mut last = from;
        let mut gap = 0;
        for s in starts.into_iter().chain([to]) {
            gap = gap.max(s - last);
            last = s;
        }
        Duration::from_nanos(gap)
    }
}

/// Every overlapping pair among `intervals`, sorted by start. An interval
/// overlaps the ones after it that start before it ends.
fn overlaps(intervals: &[Interval]) -> Vec<(&Interval, &Interval)> {
    let mut found = Vec::new();
    for (i, a) in intervals.iter().enumerate() {
        for b in intervals[i + 1..].iter().take_while(|b| b.start < a.end) {
            found.push((a, b));
        }
    }
    found
}

/// The checker's own checks, run as the suite's first scenario (this
/// binary has no libtest harness to run `#[test]`s).
pub mod self_test {
    use super::*;

    pub fn run() {
        events_survive_a_round_trip_through_their_lines();
        overlapping_intervals_on_one_resource_are_violations();
        overlaps_of_one_owner_pass_and_of_two_owners_do_not();
        disjoint_intervals_pass();
        tokens_that_grow_in_the_order_of_acquisition_pass();
        a_token_that_does_not_grow_is_a_fence_violation();
        the_fenced_register_is_counted();
        counts_latency_gaps_and_paused_holders_that_were_taken_over();
        more_than_capacity_at_once_is_a_violation_and_up_to_it_is_not();
        readers_overlap_and_a_writer_with_anyone_is_a_violation();
    }

    /// Readers (`<task>/r`) may overlap each other; a writer that overlaps
    /// a reader or another writer is a violation.
    fn readers_overlap_and_a_writer_with_anyone_is_a_violation() {
        let v = Verdict::check([held("a", "x/r", 0, 10), held("a", "y/r", 5, 15)]);
        assert!(v.violations.is_empty());
        assert_eq!(v.shared_overlaps, 1);
        let v = Verdict::check([held("a", "x/r", 0, 10), held("a", "y", 5, 15)]);
        assert_eq!(v.violations.len(), 1);
        let v = Verdict::check([held("a", "x", 0, 10), held("a", "y/r", 5, 15)]);
        assert_eq!(v.violations.len(), 1);
        let v = Verdict::check([held("a", "x/r", 0, 10), held("a", "y", 11, 15)]);
        assert!(v.violations.is_empty());
    }

    /// A semaphore of two: two overlapping holders pass, a third while
    /// both hold is a violation; the most at once is counted.
    fn more_than_capacity_at_once_is_a_violation_and_up_to_it_is_not() {
        let two = [
            held("a", "x", 0, 10),
            held("a", "y", 5, 15),
            held("a", "z", 12, 20),
        ];
        let v = Verdict::check_at_most(two.clone(), 2);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.most_at_once, 2);
        let three = [
            held("a", "x", 0, 10),
            held("a", "y", 5, 15),
            held("a", "z", 8, 20),
        ];
        let v = Verdict::check_at_most(three.clone(), 2);
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert_eq!(v.violations[0].second.owner, "z");
        assert_eq!(v.most_at_once, 3);
        // Other resources do not count together.
        let apart = [
            held("a", "x", 0, 10),
            held("a", "y", 5, 15),
            held("b", "z", 8, 20),
        ];
        assert!(Verdict::check_at_most(apart, 2).violations.is_empty());
        // The mutex check sees each pair of two at once: x-y and y-z.
        assert_eq!(Verdict::check(two).violations.len(), 2);
    }

    fn held(resource: &str, owner: &str, start: u64, end: u64) -> Event {
        Event::Held {
            resource: resource.into(),
            interval: Interval {
                owner: owner.into(),
                start,
                end,
                paused: false,
                fence: None,
            },
        }
    }

    /// A fenced lock's interval, with its `token`.
    fn fenced(resource: &str, owner: &str, start: u64, end: u64, token: u64) -> Event {
        let mut e = held(resource, owner, start, end);
        if let Event::Held { interval, .. } = &mut e {
            interval.fence = Some(token);
        }
        e
    }

    fn access(resource: &str, token: u64, access: Access) -> Event {
        Event::Fenced {
            resource: resource.into(),
            token,
            access,
        }
    }

    fn events_survive_a_round_trip_through_their_lines() {
        let events = [
            Event::Acquired { latency_us: 412 },
            Event::Failed {
                cause: "Held".into(),
                latency_us: 9,
            },
            Event::Cancelled,
            Event::Quarantined { votes: 2 },
            held("r1", "p0t3", 10, 20),
            Event::Released {
                outcome: "ok".into(),
            },
            Event::Wrote {
                resource: "r0".into(),
                at: 5,
                deadline: 7,
            },
            fenced("r2", "p1t0", 30, 40, 1_763_900_000_123_456),
            access("r2", 7, Access::Wrote),
            access("r2", 7, Access::Refused),
            access("r2", 7, Access::ReadRefused),
            Event::Read {
                outcome: "free".into(),
            },
        ];
        for e in events {
            assert_eq!(Event::parse(&e.to_string()), Ok(e));
        }
        assert!(Event::parse("held r1").is_err());
        assert!(Event::parse("fenced r2 7 lost").is_err());
        // A line written before intervals carried tokens.
        assert_eq!(
            Event::parse("held r1 p0t3 10 20 0"),
            Ok(held("r1", "p0t3", 10, 20))
        );
    }

    fn overlapping_intervals_on_one_resource_are_violations() {
        let v = Verdict::check([
            held("a", "x", 0, 10),
            held("a", "y", 10, 20), // touching is not overlapping
            held("a", "z", 15, 30), // overlaps y
            held("b", "w", 16, 17), // another resource
            held("a", "q", 0, 40),  // overlaps x, y, z
        ]);
        let pairs: Vec<(&str, &str)> = v
            .violations
            .iter()
            .map(|x| (x.first.owner.as_str(), x.second.owner.as_str()))
            .collect();
        assert_eq!(pairs.len(), 4, "{pairs:?}");
        assert!(pairs.contains(&("y", "z")));
        assert_eq!(
            v.violations.iter().map(|x| x.overlap()).max(),
            Some(Duration::from_nanos(15))
        );
    }

    /// A reentrant owner's nested holds overlap (an inner hold inside the
    /// outer one, or one that outlives it): allowed. Another owner inside
    /// any of them is a violation, even where the first hold that owner
    /// overlaps has ended and its belief goes on in a later hold.
    fn overlaps_of_one_owner_pass_and_of_two_owners_do_not() {
        let v = Verdict::check([
            held("a", "x", 0, 10),  // outer
            held("a", "x", 2, 5),   // nested in it
            held("a", "x", 8, 20),  // outlives the outer
            held("b", "y", 3, 4),   // another resource
            held("a", "y", 20, 30), // after every hold of x
        ]);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.nested, 2);

        let v = Verdict::check([
            held("a", "x", 0, 10),
            held("a", "x", 8, 20),
            held("a", "y", 12, 14), // inside x's second hold only
        ]);
        let pairs: Vec<(&str, &str, u64)> = v
            .violations
            .iter()
            .map(|x| {
                (
                    x.first.owner.as_str(),
                    x.second.owner.as_str(),
                    x.first.start,
                )
            })
            .collect();
        assert_eq!(pairs, [("x", "y", 8)]);
        assert_eq!(v.nested, 1);
    }

    fn disjoint_intervals_pass() {
        let v = Verdict::check([held("a", "x", 0, 10), held("a", "y", 11, 20)]);
        assert!(v.violations.is_empty());
    }

    /// In the order of the starts, not of the lines; per resource; an
    /// interval without a token is not in the order.
    fn tokens_that_grow_in_the_order_of_acquisition_pass() {
        let v = Verdict::check([
            fenced("a", "x", 0, 10, 5),
            fenced("a", "z", 20, 30, 9),
            fenced("a", "y", 10, 20, 7), // logged late, acquired second
            held("a", "w", 30, 40),
            fenced("a", "x", 40, 50, 10),
            fenced("b", "x", 0, 10, 1), // another resource, its own tokens
        ]);
        assert!(v.fence_violations.is_empty(), "{:?}", v.fence_violations);
        assert_eq!(v.fenced, 5);
    }

    /// A repeated token and one that goes back, each caught as the pair of
    /// acquisitions in a row; so is the same token logged out of order.
    fn a_token_that_does_not_grow_is_a_fence_violation() {
        let v = Verdict::check([
            fenced("a", "x", 0, 10, 5),
            fenced("a", "y", 10, 20, 5), // repeated
            fenced("a", "z", 20, 30, 8),
            fenced("a", "x", 30, 40, 6), // back
            fenced("b", "x", 10, 20, 3), // acquired after the next line's
            fenced("b", "y", 0, 10, 9),
        ]);
        let pairs: Vec<(&str, &str, u64, &str, u64)> = v
            .fence_violations
            .iter()
            .map(|x| {
                (
                    x.resource.as_str(),
                    x.first.owner.as_str(),
                    x.first.fence.unwrap(),
                    x.second.owner.as_str(),
                    x.second.fence.unwrap(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("a", "x", 5, "y", 5),
                ("a", "z", 8, "x", 6),
                ("b", "y", 9, "x", 3)
            ]
        );
        assert!(v.violations.is_empty());
    }

    fn the_fenced_register_is_counted() {
        let v = Verdict::check([
            access("a", 5, Access::Wrote),
            access("a", 6, Access::Wrote),
            access("b", 2, Access::Wrote),
            access("a", 4, Access::Refused),
            access("a", 3, Access::ReadRefused),
        ]);
        assert_eq!(v.fenced_writes.get("a"), Some(&2));
        assert_eq!(v.fenced_writes.get("b"), Some(&1));
        assert_eq!((v.refused_writes, v.refused_reads), (1, 1));
    }

    fn counts_latency_gaps_and_paused_holders_that_were_taken_over() {
        let paused = || {
            let mut paused = held("a", "x", 0, 10);
            if let Event::Held { interval, .. } = &mut paused {
                interval.paused = true;
            }
            paused
        };
        // The paused owner's own next hold is nobody taking over.
        let v = Verdict::check([paused(), held("a", "x", 12, 20)]);
        assert_eq!((v.paused, v.moved_on), (1, 0));
        let v = Verdict::check([
            paused(),
            held("a", "y", 12, 20),
            Event::Acquired { latency_us: 1 },
            Event::Acquired { latency_us: 3 },
            Event::Acquired { latency_us: 2 },
            Event::Wrote {
                resource: "a".into(),
                at: 11,
                deadline: 10,
            },
        ]);
        assert_eq!((v.paused, v.moved_on, v.late_writes), (1, 1, 1));
        assert_eq!(v.latency(0.5), Duration::from_micros(2));
        assert_eq!(v.longest_gap(0, 30), Duration::from_nanos(18));
        assert_eq!(v.acquired_between(5, 30), 1);
        assert_eq!(v.first_acquisition_after(5, 30), Duration::from_nanos(7));
    }
}
