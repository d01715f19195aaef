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
//!
//! Kinds of lock share a name's key, which has one layout at a time, so
//! they exclude each other; an interval's owner says how its holder shared
//! the resource ([`Class`]: `<task>` alone, `<task>/o` a reentrant owner,
//! `<task>/r` a reader, `<task>/s` a semaphore's permit), and the rule is
//! one: on a resource, two intervals that overlap are one owner's nested
//! holds, two readers, or two permits (at most `capacity` permits at an
//! instant); any other overlap is a violation.
//!
//! Every `lock()` call also logs its wait: from the call to its return (or
//! its drop), on which resources, for which class of hold. The **idle
//! capacity** of a run ([`Verdict::idle`]) is the time in which some waiter
//! waited while its resource had room for it: no holder, for an exclusive
//! hold; no writer or permit holding and no writer waiting (whose intent
//! turns readers away by design), for a reader; fewer permits held than the
//! semaphore has and no other kind, for a permit. A handover always costs
//! a little of it (the release, the wake-up, the next attempt); a waiter
//! that sleeps through its turn costs its whole sleep.

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
    /// One `lock()` (or `lock_all()`) call, from when it was made to when
    /// it returned or was dropped: a waiter of `class` on `resources` (a
    /// set's names joined by `,`), and how it ended (`acquired`, `failed`
    /// or `cancelled`). A reentrant owner's inner takes, which never wait
    /// for another, are not logged.
    Waited {
        resources: String,
        class: Class,
        start: u64,
        end: u64,
        outcome: String,
    },
}

/// How a holder shares a resource (its interval's owner says it: see
/// [`Interval::class`]), and what a waiter waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Class {
    /// A mutex, a fenced lock, a set, a writer: alone.
    Exclusive,
    /// A reentrant owner's hold: alone, but for the owner's other holds.
    Reentrant,
    /// A reader of a read-write lock: beside other readers.
    Reader,
    /// A semaphore's permit: beside the holders of the others.
    Permit,
}

impl Class {
    pub const ALL: [Class; 4] = [
        Class::Exclusive,
        Class::Reentrant,
        Class::Reader,
        Class::Permit,
    ];

    /// What an interval's owner ends with (the task's name before it).
    pub fn suffix(self) -> &'static str {
        match self {
            Class::Exclusive => "",
            Class::Reentrant => "/o",
            Class::Reader => "/r",
            Class::Permit => "/s",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Class::Exclusive => "exclusive",
            Class::Reentrant => "reentrant",
            Class::Reader => "reader",
            Class::Permit => "permit",
        }
    }
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
            Event::Waited {
                resources,
                class,
                start,
                end,
                outcome,
            } => write!(
                f,
                "waited {resources} {} {start} {end} {outcome}",
                class.name()
            ),
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
            Some("waited") => Event::Waited {
                resources: s(1)?,
                class: Class::ALL
                    .into_iter()
                    .find(|c| w.get(2) == Some(&c.name()))
                    .ok_or_else(|| format!("bad history line {line:?}"))?,
                start: n(3)?,
                end: n(4)?,
                outcome: s(5)?,
            },
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
        self.class() == Class::Reader
    }

    /// How the holder shared the resource, by its owner's suffix
    /// ([`Class::suffix`]): `/r` a reader, `/s` a semaphore's permit, `/o`
    /// a reentrant owner, none an exclusive holder.
    pub fn class(&self) -> Class {
        Class::ALL
            .into_iter()
            .rev()
            .find(|c| self.owner.ends_with(c.suffix()))
            .unwrap_or(Class::Exclusive)
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
    /// Every `lock()` call's wait (`Event::Waited`).
    pub waits: Vec<Wait>,
    /// How many semaphore permits may be held at once (the capacity
    /// checked).
    pub permits: usize,
}

/// One `lock()` call's wait: on which resources, for which class of hold,
/// from when to when.
#[derive(Debug, Clone)]
pub struct Wait {
    pub resources: Vec<String>,
    pub class: Class,
    pub start: u64,
    pub end: u64,
    /// `acquired`, `failed` or `cancelled`.
    pub outcome: String,
}

impl Verdict {
    /// Checks the events of all clients of a run: at most one holder of a
    /// resource at a time.
    pub fn check(events: impl IntoIterator<Item = Event>) -> Verdict {
        Verdict::check_at_most(events, 1)
    }

    /// Checks the events of all clients of a run: on each resource, at most
    /// one kind of holder at a time (see [`Class`]); exclusive holders
    /// alone (a reentrant owner beside its own holds), readers beside
    /// readers, and at most `capacity` semaphore permits at once (a
    /// permit that began while `capacity` others were held is a violation,
    /// paired with one of them).
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
                Event::Waited {
                    resources,
                    class,
                    start,
                    end,
                    outcome,
                } => v.waits.push(Wait {
                    resources: resources.split(',').map(str::to_owned).collect(),
                    class,
                    start,
                    end,
                    outcome,
                }),
            }
        }
        v.permits = capacity;
        v.latencies_us.sort_unstable();
        for (resource, intervals) in &mut v.intervals {
            intervals.sort_by_key(|i| i.start);
            for (a, b) in overlaps(intervals) {
                if a.owner == b.owner {
                    v.nested += 1;
                } else if a.is_shared() && b.is_shared() {
                    v.shared_overlaps += 1;
                } else if a.class() == Class::Permit && b.class() == Class::Permit {
                    // Up to `capacity` at once: the sweep below.
                } else {
                    v.violations.push(Violation {
                        resource: resource.clone(),
                        first: a.clone(),
                        second: b.clone(),
                    });
                }
            }
            // A sweep in the order of the starts: who holds at each start.
            let mut active: Vec<&Interval> = Vec::new();
            for b in intervals.iter() {
                active.retain(|a| a.end > b.start);
                let permits = || active.iter().filter(|a| a.class() == Class::Permit);
                if b.class() == Class::Permit && permits().count() >= capacity {
                    v.violations.push(Violation {
                        resource: resource.clone(),
                        first: (*permits().next().unwrap()).clone(),
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

/// The idle capacity of a run: the stretches in which some waiter was
/// waiting (had called `lock()` and not yet returned) while its resource
/// had room for it, as its holders' intervals tell (see
/// [`Verdict::idle`]).
#[derive(Debug, Default)]
pub struct Idle {
    /// Per resource (or set of resources a waiter waited on, named as in
    /// `Event::Waited`), the stretches merged over all its waiters: `(key,
    /// from, to)`, in the order of the keys, then of the starts.
    pub stretches: Vec<(String, u64, u64)>,
    /// The calls' waits in all, and how many calls.
    pub waited: Duration,
    pub waits: usize,
}

impl Idle {
    /// The idle time in all, summed over the resources.
    pub fn total(&self) -> Duration {
        Duration::from_nanos(self.stretches.iter().map(|(_, a, b)| b - a).sum())
    }

    /// The longest stretch.
    pub fn longest(&self) -> Option<&(String, u64, u64)> {
        self.stretches.iter().max_by_key(|(_, a, b)| b - a)
    }

    /// The `q`-quantile of the stretches' lengths.
    pub fn quantile(&self, q: f64) -> Duration {
        let mut lengths: Vec<u64> = self.stretches.iter().map(|(_, a, b)| b - a).collect();
        if lengths.is_empty() {
            return Duration::ZERO;
        }
        lengths.sort_unstable();
        let i = ((lengths.len() - 1) as f64 * q).round() as usize;
        Duration::from_nanos(lengths[i])
    }

    /// How many stretches were longer than `d`.
    pub fn longer_than(&self, d: Duration) -> usize {
        let d = d.as_nanos() as u64;
        self.stretches.iter().filter(|(_, a, b)| b - a > d).count()
    }
}

/// A change of a resource's occupancy: at an instant, one more (1) or one
/// fewer (-1) holder of a class, or waiter for anything but a reader's
/// share (`None`).
type Delta = (u64, i64, Option<Class>);

/// Who holds a resource, and who waits for it, between two instants.
#[derive(Debug, Default, Clone, Copy)]
struct Occupancy {
    /// Exclusive holders and reentrant owners' holds.
    exclusive: i64,
    readers: i64,
    permits: i64,
    /// Waiters for anything but a reader's share: a writer that waits
    /// turns new readers away, by design.
    others_waiting: i64,
}

impl Occupancy {
    /// Whether a waiter of `class` has room: nobody holds for an exclusive
    /// hold; no writer or permit holds and no writer waits, for a reader;
    /// fewer than `permits` permits and no other kind holds, for a permit.
    fn room(&self, class: Class, permits: usize) -> bool {
        match class {
            Class::Exclusive | Class::Reentrant => {
                self.exclusive + self.readers + self.permits == 0
            }
            Class::Reader => self.exclusive + self.permits + self.others_waiting == 0,
            Class::Permit => {
                self.exclusive + self.readers == 0 && (self.permits as usize) < permits
            }
        }
    }
}

impl Verdict {
    /// The idle capacity of the run ([`Idle`]). Each call's wait, from its
    /// call to its return (or its drop), is matched against the holders'
    /// intervals of its resources: where they left room for it (see
    /// `Occupancy::room`), the resource was idle while it waited. A
    /// handover always costs a little (the release reaching the nodes, the
    /// wake-up, the next attempt's round trip), and a call's first attempt
    /// on a free resource counts too; a lost wake-up, or contenders that
    /// keep splitting the vote, cost the whole sleep.
    pub fn idle(&self) -> Idle {
        // Per resource: the steps of its occupancy, from each instant on.
        let mut deltas: BTreeMap<&str, Vec<Delta>> = BTreeMap::new();
        for (resource, intervals) in &self.intervals {
            let d = deltas.entry(resource).or_default();
            for i in intervals {
                d.push((i.start, 1, Some(i.class())));
                d.push((i.end, -1, Some(i.class())));
            }
        }
        for w in &self.waits {
            for r in &w.resources {
                let d = deltas.entry(r).or_default();
                if w.class != Class::Reader {
                    d.push((w.start, 1, None));
                    d.push((w.end, -1, None));
                }
            }
        }
        // Per resource and class: the stretches with room, sorted.
        let mut room: BTreeMap<(&str, Class), Vec<(u64, u64)>> = BTreeMap::new();
        for (resource, mut d) in deltas {
            d.sort_by_key(|&(t, change, _)| (t, change));
            let mut steps: Vec<(u64, Occupancy)> = vec![(0, Occupancy::default())];
            for (t, change, class) in d {
                let mut o = steps.last().unwrap().1;
                match class {
                    Some(Class::Exclusive | Class::Reentrant) => o.exclusive += change,
                    Some(Class::Reader) => o.readers += change,
                    Some(Class::Permit) => o.permits += change,
                    None => o.others_waiting += change,
                }
                match steps.last_mut() {
                    Some(last) if last.0 == t => last.1 = o,
                    _ => steps.push((t, o)),
                }
            }
            for class in Class::ALL {
                let mut free: Vec<(u64, u64)> = Vec::new();
                for (k, &(t, o)) in steps.iter().enumerate() {
                    if !o.room(class, self.permits) {
                        continue;
                    }
                    let until = steps.get(k + 1).map_or(u64::MAX, |s| s.0);
                    match free.last_mut() {
                        Some(last) if last.1 == t => last.1 = until,
                        _ => free.push((t, until)),
                    }
                }
                room.insert((resource, class), free);
            }
        }
        let mut idle = Idle::default();
        let mut per_key: BTreeMap<String, Vec<(u64, u64)>> = BTreeMap::new();
        for w in &self.waits {
            idle.waits += 1;
            idle.waited += Duration::from_nanos(w.end.saturating_sub(w.start));
            let mut within = vec![(w.start, w.end)];
            for r in &w.resources {
                let free = &room[&(r.as_str(), w.class)];
                // Only the stretches that reach into the wait.
                let from = free.partition_point(|&(_, to)| to <= w.start);
                let to = free.partition_point(|&(from, _)| from < w.end);
                within = intersect(&within, &free[from..to.max(from)]);
            }
            per_key
                .entry(w.resources.join(","))
                .or_default()
                .extend(within.into_iter().filter(|(a, b)| a < b));
        }
        for (key, mut spans) in per_key {
            spans.sort_unstable();
            let mut merged: Vec<(u64, u64)> = Vec::new();
            for (a, b) in spans {
                match merged.last_mut() {
                    Some(last) if a <= last.1 => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            idle.stretches
                .extend(merged.into_iter().map(|(a, b)| (key.clone(), a, b)));
        }
        idle
    }
}

/// The common parts of two sorted lists of disjoint stretches.
fn intersect(x: &[(u64, u64)], y: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (mut i, mut j) = (0, 0);
    let mut both = Vec::new();
    while i < x.len() && j < y.len() {
        let from = x[i].0.max(y[j].0);
        let to = x[i].1.min(y[j].1);
        if from < to {
            both.push((from, to));
        }
        if x[i].1 < y[j].1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    both
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
        kinds_on_one_name_exclude_each_other();
        idle_capacity_is_a_waiters_time_with_room();
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

    /// A semaphore of two: two overlapping permits pass, a third while
    /// both hold is a violation; the most at once is counted.
    fn more_than_capacity_at_once_is_a_violation_and_up_to_it_is_not() {
        let two = [
            held("a", "x/s", 0, 10),
            held("a", "y/s", 5, 15),
            held("a", "z/s", 12, 20),
        ];
        let v = Verdict::check_at_most(two.clone(), 2);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.most_at_once, 2);
        let three = [
            held("a", "x/s", 0, 10),
            held("a", "y/s", 5, 15),
            held("a", "z/s", 8, 20),
        ];
        let v = Verdict::check_at_most(three.clone(), 2);
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert_eq!(v.violations[0].second.owner, "z/s");
        assert_eq!(v.most_at_once, 3);
        // Other resources do not count together.
        let apart = [
            held("a", "x/s", 0, 10),
            held("a", "y/s", 5, 15),
            held("b", "z/s", 8, 20),
        ];
        assert!(Verdict::check_at_most(apart, 2).violations.is_empty());
        // A semaphore of one: each pair of two at once, x-y and y-z.
        assert_eq!(Verdict::check(two).violations.len(), 2);
    }

    /// Kinds on one name exclude each other: a permit beside an exclusive
    /// holder, a reader or a reentrant owner is a violation, as is a
    /// reader beside a reentrant owner; each kind beside its own follows
    /// its own rule.
    fn kinds_on_one_name_exclude_each_other() {
        let pairs = [("x/s", "y"), ("x/s", "y/r"), ("x/s", "y/o"), ("x/r", "y/o")];
        for (a, b) in pairs {
            let v = Verdict::check_at_most([held("a", a, 0, 10), held("a", b, 5, 15)], 2);
            assert_eq!(v.violations.len(), 1, "{a} beside {b}");
        }
        let v = Verdict::check_at_most(
            [
                held("a", "x/o", 0, 10),
                held("a", "x/o", 2, 12), // the owner's nested hold
                held("a", "y/s", 12, 20),
                held("a", "z/s", 13, 20),
                held("a", "w/r", 20, 30),
                held("a", "v/r", 21, 30),
                held("a", "u", 30, 40),
            ],
            2,
        );
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!((v.nested, v.shared_overlaps), (1, 1));
    }

    /// A waiter's time with room for it is idle: a mutex free after its
    /// holder let go, a free permit beside a held one, a reader beside
    /// readers unless a writer waits; the stretches of two waiters of a
    /// resource merge; a set has room only where all its resources have.
    fn idle_capacity_is_a_waiters_time_with_room() {
        let stretches = |events: Vec<Event>, permits: usize| {
            let idle = Verdict::check_at_most(events, permits).idle();
            let s: Vec<(String, u64, u64)> = idle.stretches.clone();
            (s, idle.total().as_nanos() as u64)
        };
        let at = |k: &str, a: u64, b: u64| (k.to_owned(), a, b);
        // The mutex: free from 10 to 14 while y waited.
        let (s, total) = stretches(
            vec![
                held("a", "x", 0, 10),
                waited("a", Class::Exclusive, 5, 14),
                held("a", "y", 14, 20),
            ],
            1,
        );
        assert_eq!((s, total), (vec![at("a", 10, 14)], 4));
        // A waiter that got in at once on a busy resource: none.
        let (s, _) = stretches(
            vec![held("a", "x", 0, 10), waited("a", Class::Exclusive, 2, 9)],
            1,
        );
        assert!(s.is_empty(), "{s:?}");
        // Two permits: one held leaves room; both held, none until 10.
        let (s, _) = stretches(
            vec![held("a", "x/s", 0, 10), waited("a", Class::Permit, 2, 6)],
            2,
        );
        assert_eq!(s, vec![at("a", 2, 6)]);
        let (s, _) = stretches(
            vec![
                held("a", "x/s", 0, 10),
                held("a", "y/s", 0, 10),
                waited("a", Class::Permit, 2, 12),
            ],
            2,
        );
        assert_eq!(s, vec![at("a", 10, 12)]);
        // A permit waiter beside a mutex holder has no room.
        let (s, _) = stretches(
            vec![held("a", "x", 0, 10), waited("a", Class::Permit, 2, 10)],
            2,
        );
        assert!(s.is_empty(), "{s:?}");
        // A reader beside readers: room, unless a writer waits.
        let (s, _) = stretches(
            vec![held("a", "x/r", 0, 10), waited("a", Class::Reader, 2, 6)],
            1,
        );
        assert_eq!(s, vec![at("a", 2, 6)]);
        let (s, _) = stretches(
            vec![
                held("a", "x/r", 0, 10),
                waited("a", Class::Exclusive, 1, 11),
                waited("a", Class::Reader, 2, 12),
            ],
            1,
        );
        // From 10 the writer (until 11) has room, then the reader.
        assert_eq!(s, vec![at("a", 10, 12)]);
        // Two waiters' stretches merge; other resources apart.
        let (s, total) = stretches(
            vec![
                held("a", "x", 0, 10),
                waited("a", Class::Exclusive, 5, 12),
                waited("a", Class::Exclusive, 11, 15),
                waited("b", Class::Exclusive, 0, 3),
            ],
            1,
        );
        assert_eq!(s, vec![at("a", 10, 15), at("b", 0, 3)]);
        assert_eq!(total, 8);
        // A set: room where both are free.
        let (s, _) = stretches(
            vec![
                held("a", "x", 0, 10),
                held("b", "y", 5, 20),
                waited("a,b", Class::Exclusive, 0, 30),
            ],
            1,
        );
        assert_eq!(s, vec![at("a,b", 20, 30)]);
    }

    fn waited(resources: &str, class: Class, start: u64, end: u64) -> Event {
        Event::Waited {
            resources: resources.into(),
            class,
            start,
            end,
            outcome: "acquired".into(),
        }
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
            waited("r0,r2", Class::Permit, 3, 9),
            waited("r1", Class::Reader, 3, 9),
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
