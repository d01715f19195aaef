//! Leader election under faults: three candidate processes campaign for
//! one election while nodes are killed, frozen or cut off, or while the
//! leader's own process is frozen (SIGSTOP); this process observes the
//! election meanwhile (`Redlock::observe`, through the same nodes or
//! proxies as the candidates).
//!
//! Each candidate logs the interval in which it believed it led: from when
//! `campaign` returned to when it resigned, or to the validity deadline it
//! last saw (`now + remaining()`, read before each step of its work, as a
//! leader that checks before it acts); a process frozen past its deadline
//! finds itself lost when it thaws, and its belief ended at that deadline.
//! The observer logs every change it sees. The checker (`check`) finds:
//! * **overlaps**: two candidates believing they led at one instant;
//! * **terms that do not grow** from leader to leader, in the order they
//!   began to lead;
//! * **observed terms going backwards**, and the leaders the observer
//!   never saw (with the lag from a leadership's start to its sighting,
//!   p50 and p99);
//! * **failover**: after the leader's process was frozen, how long until
//!   the next leader, against the TTL plus a stated bound.
//!
//! The negative control's candidates ignore a lost leadership (they lead
//! until they resign, whatever `is_lost` says: "holding the key is
//! leading"), while their processes are frozen past the TTL: the checker
//! must find overlaps.
//!
//! `election_come_and_go` runs the faults of the `come_and_go` scenarios
//! (see there) with candidates that join during the run: some campaign at
//! once, some read the election first (`leader()`, or the first item of
//! `observe()`), some read it, idle past the TTL and read it again.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use redquorum::{Observed, Redlock};

use crate::client::First;
use crate::history::now_ns;
use crate::scenarios::{for_the_run, partition_once, sleep_ms};

use crate::common;
use crate::common::proxy::Proxy;

/// The environment variable that makes this binary a candidate process.
pub const CANDIDATE: &str = "REDQUORUM_CHAOS_CANDIDATE";

/// The election's name.
const NAME: &str = "leader";

/// How long after its TTL a new leader may take to be elected once the
/// leader's process is frozen: the candidates wait out the PTTL they last
/// saw, then one attempt (a node timeout) — 1 s leaves the rest to a
/// loaded machine.
const FAILOVER_BOUND: Duration = Duration::from_secs(1);

/// What one candidate process does; handed over in one environment
/// variable as `key=value;…`.
#[derive(Debug, Clone)]
pub struct Spec {
    pub nodes: Vec<String>,
    pub ttl: Duration,
    pub node_timeout: Duration,
    pub run: Duration,
    pub prefix: String,
    pub name: String,
    pub history: String,
    /// The negative control: lead until resigning, whatever `is_lost` says.
    pub ignore_lost: bool,
    /// What the candidate does before it first campaigns: a newcomer of
    /// `election_come_and_go` may read the election first (`leader()` or
    /// the first item of `observe()`), or read, idle past the TTL and read
    /// again (`First::Idle`, with `leader()`).
    pub first: First,
}

impl Spec {
    fn encode(&self) -> String {
        [
            format!("nodes={}", self.nodes.join(",")),
            format!("ttl_ms={}", self.ttl.as_millis()),
            format!("node_timeout_ms={}", self.node_timeout.as_millis()),
            format!("run_ms={}", self.run.as_millis()),
            format!("prefix={}", self.prefix),
            format!("name={}", self.name),
            format!("history={}", self.history),
            format!("ignore_lost={}", self.ignore_lost),
            format!("first={}", self.first.name()),
        ]
        .join(";")
    }

    pub fn decode(s: &str) -> Spec {
        let get = |key: &str| -> String {
            s.split(';')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key} in {s:?}"))
                .to_owned()
        };
        let ms = |key: &str| Duration::from_millis(get(key).parse().expect(key));
        Spec {
            nodes: get("nodes").split(',').map(str::to_owned).collect(),
            ttl: ms("ttl_ms"),
            node_timeout: ms("node_timeout_ms"),
            run: ms("run_ms"),
            prefix: get("prefix"),
            name: get("name"),
            history: get("history"),
            ignore_lost: get("ignore_lost") == "true",
            first: First::parse(&get("first")),
        }
    }
}

/// One line of a candidate's history.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    /// It believed it led from `start` to `end`, with `term`; `lost`: it
    /// ended by finding leadership lost, not by resigning.
    Led {
        term: u64,
        start: u64,
        end: u64,
        lost: bool,
    },
    /// A campaign that failed (its error's kind).
    Failed { cause: String },
    /// A read of the election before the first campaign: `<how>/<what>`,
    /// `leader` or `observe`, and `free`, `led` or `unclear`.
    Read { what: String },
}

impl Line {
    fn encode(&self) -> String {
        match self {
            Line::Led {
                term,
                start,
                end,
                lost,
            } => format!("led {term} {start} {end} {lost}"),
            Line::Failed { cause } => format!("failed {cause}"),
            Line::Read { what } => format!("read {what}"),
        }
    }

    fn decode(s: &str) -> Line {
        let f: Vec<&str> = s.split(' ').collect();
        let n = |i: usize| -> u64 { f[i].parse().unwrap() };
        match f[0] {
            "led" => Line::Led {
                term: n(1),
                start: n(2),
                end: n(3),
                lost: f[4] == "true",
            },
            "failed" => Line::Failed {
                cause: f[1..].join(" "),
            },
            "read" => Line::Read {
                what: f[1..].join(" "),
            },
            _ => panic!("a history line {s:?}"),
        }
    }
}

/// A candidate process: campaigns, leads for a while (checking before each
/// step), resigns; writes its history at the end (this process observes).
pub fn main(spec: Spec) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let redlock = Redlock::builder()
            .nodes(&spec.nodes)
            .key_prefix(spec.prefix.clone())
            .node_timeout(spec.node_timeout)
            .build()
            .expect("candidate Redlock");
        let end = Instant::now() + spec.run;
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let read = |observe: bool| {
            let redlock = redlock.clone();
            let lines = lines.clone();
            async move {
                let (how, seen) = if observe {
                    let mut observer = redlock.observe(NAME);
                    let first = tokio::time::timeout(Duration::from_secs(1), observer.next()).await;
                    (
                        "observe",
                        first.ok().flatten().map(|l| l.leader().is_some()),
                    )
                } else {
                    (
                        "leader",
                        redlock.leader(NAME).await.ok().map(|l| l.is_some()),
                    )
                };
                let what = match seen {
                    Some(true) => "led",
                    Some(false) => "free",
                    None => "unclear",
                };
                lines.lock().unwrap().push(Line::Read {
                    what: format!("{how}/{what}"),
                });
            }
        };
        match spec.first {
            First::Lock => {}
            First::Read => read(rand::random_bool(0.5)).await,
            First::Idle => {
                read(false).await;
                tokio::time::sleep(First::idle(spec.ttl)).await;
                read(false).await;
            }
        }
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            let campaign = redlock
                .campaign(NAME, spec.name.clone(), spec.ttl)
                .wait(left);
            let leadership = match campaign.await {
                Ok(leadership) => leadership,
                Err(e) => {
                    let cause = match e {
                        redquorum::Error::NotAcquired { gave_up, .. } => {
                            format!("not_acquired/{gave_up:?}")
                        }
                        e => format!("{e:?}")
                            .split([' ', '{', '('])
                            .next()
                            .unwrap()
                            .to_owned(),
                    };
                    lines.lock().unwrap().push(Line::Failed { cause });
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let start = now_ns();
            let term = leadership.term();
            let lead_for = Duration::from_millis(rand::random_range(100..800));
            let until = Instant::now() + lead_for;
            let mut believed = start;
            let mut lost = false;
            while Instant::now() < until {
                let remaining = leadership.remaining();
                if remaining.is_zero() && !spec.ignore_lost {
                    lost = true;
                    break;
                }
                // The leader acts until the deadline it just read (or, in
                // the control, as if leading were for ever).
                believed = if spec.ignore_lost {
                    now_ns()
                } else {
                    now_ns() + remaining.as_nanos() as u64
                };
                tokio::time::sleep(Duration::from_millis(rand::random_range(5..20))).await;
            }
            // A process frozen past its deadline finds it lost on waking.
            lost |= leadership.is_lost();
            let resigned = now_ns();
            let end = if spec.ignore_lost {
                resigned
            } else {
                believed.min(resigned)
            };
            let _ = leadership.resign().await;
            lines.lock().unwrap().push(Line::Led {
                term,
                start,
                end,
                lost,
            });
        }
        let _ = redlock.drain(Duration::from_secs(5)).await;
        let mut file = std::fs::File::create(&spec.history).expect("history file");
        for line in lines.lock().unwrap().iter() {
            writeln!(file, "{}", line.encode()).unwrap();
        }
    });
}

/// What the histories say together.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Every leadership, by start: (process, term, start, end, lost).
    led: Vec<(usize, u64, u64, u64, bool)>,
    /// Pairs of leaderships of two processes that overlap.
    pub overlaps: usize,
    /// Leaderships, in the order they began, whose term is not greater
    /// than the one before.
    pub terms_not_growing: usize,
    /// Per observer, sightings whose term is below an earlier one's.
    pub observed_backwards: usize,
    /// (observer, term) pairs of leaderships an observer never saw, nor
    /// said it skipped.
    pub unseen: usize,
    /// Leaderships an observer did not see but said it may have missed
    /// (`Observed::Skipped` over their term).
    pub skipped: usize,
    /// Lags from a leadership's start to each observer's sighting, sorted.
    pub lags: Vec<Duration>,
    pub failed: BTreeMap<String, usize>,
    /// Failed campaigns, per process.
    pub failed_by: BTreeMap<usize, usize>,
    /// Reads before the first campaign, by `<how>/<what>` (`Line::Read`).
    pub reads: BTreeMap<String, usize>,
}

impl Verdict {
    fn lag(&self, q: f64) -> Duration {
        if self.lags.is_empty() {
            return Duration::ZERO;
        }
        self.lags[((self.lags.len() - 1) as f64 * q).round() as usize]
    }
}

/// Checks the candidates' histories (one list of lines per process) and
/// the observer's sightings (term, at; term 0: no leader), taken until
/// `observed_until`.
fn check(
    histories: &[Vec<Line>],
    saw: &[(u64, u64)],
    skips: &[(u64, u64)],
    observed_until: u64,
) -> Verdict {
    let mut v = Verdict::default();
    for (p, lines) in histories.iter().enumerate() {
        for line in lines {
            match line {
                Line::Led {
                    term,
                    start,
                    end,
                    lost,
                } => v.led.push((p, *term, *start, *end, *lost)),
                Line::Failed { cause } => {
                    *v.failed.entry(cause.clone()).or_default() += 1;
                    *v.failed_by.entry(p).or_default() += 1;
                }
                Line::Read { what } => *v.reads.entry(what.clone()).or_default() += 1,
            }
        }
    }
    v.led.sort_by_key(|l| l.2);
    for (i, a) in v.led.iter().enumerate() {
        for b in &v.led[i + 1..] {
            if b.2 < a.3 && a.0 != b.0 {
                v.overlaps += 1;
            }
        }
    }
    v.terms_not_growing = v.led.windows(2).filter(|w| w[1].1 <= w[0].1).count();
    let mut highest = 0;
    for &(term, _) in saw {
        if term != 0 && term < highest {
            v.observed_backwards += 1;
        }
        highest = highest.max(term);
    }
    for &(_, term, start, _, _) in &v.led {
        if start > observed_until {
            continue;
        }
        match saw.iter().find(|&&(t, _)| t == term) {
            Some(&(_, at)) => v.lags.push(Duration::from_nanos(at.saturating_sub(start))),
            None if skips.iter().any(|&(a, b)| a < term && term < b) => v.skipped += 1,
            None => v.unseen += 1,
        }
    }
    v.lags.sort();
    v
}

/// What an observer saw: (term, at), term 0 for no leader; and the ranges
/// of terms it said it skipped (after, before).
type Sightings = std::sync::Arc<std::sync::Mutex<(Vec<(u64, u64)>, Vec<(u64, u64)>)>>;

/// The candidate processes of one run.
struct Candidates {
    children: Vec<Child>,
    histories: Vec<std::path::PathBuf>,
    dir: std::path::PathBuf,
    /// What every candidate of the run shares (name, history and first
    /// step aside).
    template: Spec,
    /// This process's observer: its runtime and what it saw.
    observer: (tokio::runtime::Runtime, Sightings),
}

impl Candidates {
    fn start(
        name: &str,
        nodes: &[String],
        ttl: Duration,
        run: Duration,
        ignore_lost: bool,
    ) -> Candidates {
        let dir =
            std::env::temp_dir().join(format!("redquorum-elect-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let template = Spec {
            nodes: nodes.to_vec(),
            ttl,
            node_timeout: Duration::from_millis(50),
            run,
            prefix: format!("chaos:{name}:"),
            name: String::new(),
            history: String::new(),
            ignore_lost,
            first: First::Lock,
        };
        let rt = tokio::runtime::Runtime::new().expect("the observer's runtime");
        let saw: Sightings = std::sync::Arc::default();
        let redlock = Redlock::builder()
            .nodes(nodes)
            .key_prefix(format!("chaos:{name}:"))
            .node_timeout(Duration::from_millis(50))
            .build()
            .expect("the observer's Redlock");
        rt.spawn({
            let saw = saw.clone();
            async move {
                let mut observer = redlock.observe(NAME).every(Duration::from_millis(100));
                while let Some(change) = observer.next().await {
                    let mut saw = saw.lock().unwrap();
                    match change {
                        Observed::Skipped { after, before } => saw.1.push((after, before)),
                        change => saw
                            .0
                            .push((change.leader().map_or(0, |l| l.term), now_ns())),
                    }
                }
            }
        });
        let mut candidates = Candidates {
            children: Vec::new(),
            histories: Vec::new(),
            dir,
            template,
            observer: (rt, saw),
        };
        for p in 0..3 {
            candidates.join(&format!("c{p}"), First::Lock, run);
        }
        candidates
    }

    /// Starts a candidate process named `name` (its identity), which does
    /// `first` first and campaigns until `run` from now.
    fn join(&mut self, name: &str, first: First, run: Duration) {
        let exe = std::env::current_exe().expect("current exe");
        let history = self.dir.join(format!("{name}.history"));
        let spec = Spec {
            name: name.to_owned(),
            history: history.to_str().unwrap().to_owned(),
            first,
            run,
            ..self.template.clone()
        };
        self.children.push(
            Command::new(&exe)
                .env(CANDIDATE, spec.encode())
                .spawn()
                .expect("a candidate process"),
        );
        self.histories.push(history);
    }

    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }

    /// Waits for every candidate (thawed first), and checks.
    fn finish(mut self) -> Verdict {
        for pid in self.pids() {
            signal(pid, libc::SIGCONT);
        }
        for child in &mut self.children {
            let status = child.wait().expect("a candidate");
            assert!(status.success(), "a candidate process failed: {status}");
        }
        let histories: Vec<Vec<Line>> = self
            .histories
            .iter()
            .map(|h| {
                std::fs::read_to_string(h)
                    .expect("a history")
                    .lines()
                    .map(Line::decode)
                    .collect()
            })
            .collect();
        let _ = std::fs::remove_dir_all(&self.dir);
        let (rt, saw) = self.observer;
        // Until the last sighting: what began after it may not have been
        // read yet.
        let (saw, skips) = saw.lock().unwrap().clone();
        drop(rt);
        let until = saw.last().map_or(0, |&(_, at)| at);
        check(&histories, &saw, &skips, until)
    }
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: a signal to a child process of this test.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints a run's figures; panics if a safety property failed.
fn report(v: &Verdict, must_see_all: bool) {
    let lost = v.led.iter().filter(|l| l.4).count();
    println!(
        "   leaderships: {} ({} ended lost, the rest resigned); failed campaigns: {:?}",
        v.led.len(),
        lost,
        v.failed
    );
    println!(
        "   observers: lag from a leadership's start to its sighting p50 {:.1} ms, p99 {:.1} ms ({} sightings); leaderships never seen: {} (and {} said skipped); terms seen going back: {}",
        ms(v.lag(0.5)),
        ms(v.lag(0.99)),
        v.lags.len(),
        v.unseen,
        v.skipped,
        v.observed_backwards
    );
    println!(
        "   VIOLATIONS: {} overlapping leaderships, {} terms not growing",
        v.overlaps, v.terms_not_growing
    );
    assert!(v.led.len() >= 3, "too few leaderships to tell anything");
    assert_eq!(v.overlaps, 0, "two leaders at once");
    assert_eq!(v.terms_not_growing, 0, "a term did not grow");
    assert_eq!(v.observed_backwards, 0, "an observer saw a term go back");
    if must_see_all {
        assert_eq!(v.unseen, 0, "an observer missed a leader");
    }
}

const TTL: Duration = Duration::from_secs(1);

/// Nodes killed and restarted (empty: the restart guard quarantines them).
pub fn kill(run: Duration) {
    let mut c = common::servers(5);
    let candidates = Candidates::start("election_kill", &c.urls(), TTL, run, false);
    let mut kills = 0;
    for_the_run(run, |left| {
        sleep_ms(200, 700.min(left).max(201));
        let i = rand::random_range(0..5);
        c.kill(i);
        sleep_ms(100, 500);
        c.restart(i).expect("restart");
        kills += 1;
    });
    let v = candidates.finish();
    println!("   faults: {kills} nodes killed and restarted empty");
    report(&v, false);
}

/// Nodes frozen (SIGSTOP) for 150–600 ms.
pub fn freeze(run: Duration) {
    let mut c = common::servers(5);
    let candidates = Candidates::start("election_freeze", &c.urls(), TTL, run, false);
    let mut freezes = 0;
    for_the_run(run, |left| {
        sleep_ms(200, 800.min(left).max(201));
        let i = rand::random_range(0..5);
        c.freeze(i);
        sleep_ms(150, 600);
        c.thaw(i);
        freezes += 1;
    });
    let v = candidates.finish();
    println!("   faults: {freezes} nodes frozen for 150-600 ms");
    report(&v, false);
}

/// One or two nodes cut off (proxies that swallow or hold traffic, no RST).
pub fn partition(run: Duration) {
    let c = common::servers(5);
    let proxies: Vec<Proxy> = (0..5).map(|i| Proxy::start(c.port(i))).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let candidates = Candidates::start("election_partition", &urls, TTL, run, false);
    let mut cuts = 0;
    for_the_run(run, |left| {
        if partition_once(&proxies, left).is_some() {
            cuts += 1;
        }
    });
    let v = candidates.finish();
    println!("   faults: {cuts} partitions of 1-2 nodes");
    report(&v, false);
    drop(c);
}

/// The leader's own process frozen (SIGSTOP) past the TTL, then thawed:
/// the next leader comes within the TTL and the bound; the frozen one
/// finds itself lost when it thaws; every leader is seen by every observer
/// (nothing else fails).
pub fn freeze_leader(run: Duration) {
    leader_frozen("election_freeze_leader", run, false);
}

/// The negative control: the same, with candidates that ignore a lost
/// leadership. The checker must find two leaders at once.
pub fn control_ignore_lost(run: Duration) {
    leader_frozen("election_control_ignore_lost", run, true);
}

fn leader_frozen(name: &str, run: Duration, ignore_lost: bool) {
    let c = common::servers(5);
    let candidates = Candidates::start(name, &c.urls(), TTL, run, ignore_lost);
    let pids = candidates.pids();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let redlock = Redlock::builder()
        .nodes(c.urls())
        .key_prefix(format!("chaos:{name}:"))
        .build()
        .unwrap();
    let mut failovers = Vec::new();
    let mut freezes = 0;
    for_the_run(run, |left| {
        sleep_ms(300, 900);
        if left < 3_000 {
            return;
        }
        let Ok(Some(leader)) = rt.block_on(redlock.leader(NAME)) else {
            return;
        };
        let p: usize = leader.identity[1..].parse().unwrap();
        signal(pids[p], libc::SIGSTOP);
        let frozen = Instant::now();
        freezes += 1;
        // Until another leads (bounded), then a little more past the TTL.
        let next = loop {
            std::thread::sleep(Duration::from_millis(10));
            match rt.block_on(redlock.leader(NAME)) {
                Ok(Some(l)) if l.term != leader.term => break Some(frozen.elapsed()),
                _ if frozen.elapsed() > TTL * 5 => break None,
                _ => {}
            }
        };
        failovers.push(next);
        std::thread::sleep((TTL + TTL / 2).saturating_sub(frozen.elapsed()));
        signal(pids[p], libc::SIGCONT);
    });
    drop(rt);
    let v = candidates.finish();
    let mut took: Vec<Duration> = failovers.iter().flatten().copied().collect();
    took.sort();
    let worst = took.last().copied().unwrap_or_default();
    println!(
        "   faults: {freezes} leader processes frozen for {:.0} ms or more; a new leader after {:.0} ms (p50), {:.0} ms at worst (TTL {} ms + bound {} ms); {} without one in {} ms",
        ms(TTL + TTL / 2),
        ms(took.get(took.len() / 2).copied().unwrap_or_default()),
        ms(worst),
        TTL.as_millis(),
        FAILOVER_BOUND.as_millis(),
        failovers.iter().filter(|f| f.is_none()).count(),
        (TTL * 5).as_millis()
    );
    if ignore_lost {
        println!(
            "   (negative control) VIOLATIONS: {} overlapping leaderships",
            v.overlaps
        );
        assert!(
            v.overlaps > 0,
            "the checker found no two leaders at once among leaders that ignore a lost leadership"
        );
        return;
    }
    report(&v, true);
    assert!(freezes > 0, "no leader was frozen");
    assert!(
        failovers.iter().all(Option::is_some) && worst <= TTL + FAILOVER_BOUND,
        "a failover took longer than TTL + {FAILOVER_BOUND:?}: {failovers:?}"
    );
}

/// Candidates that come and go while nodes restart: the faults and the
/// newcomers of the `come_and_go` scenarios (see `come_and_go`), with three
/// long-lived candidates, and newcomers that campaign at once, read the
/// election first (`leader()`, or the first item of `observe()`), or read
/// it, idle past the TTL and read it again before they campaign.
pub fn come_and_go(secs: Duration) {
    use crate::come_and_go::{TTL, churn, load_time};
    let run = load_time(secs);
    let mut c = common::servers(5);
    let mut candidates = Candidates::start("election_come_and_go", &c.urls(), TTL, run, false);
    let churn = churn(&mut c, run, None, |n, first, life| {
        candidates.join(&format!("n{n}"), first, life);
    });
    let v = candidates.finish();
    churn.print();
    // The three long-lived candidates are processes 0-2.
    let newcomer = |p: usize| p >= 3;
    let led = v.led.iter().filter(|l| newcomer(l.0)).count();
    let failed: usize = v
        .failed_by
        .iter()
        .filter(|(p, _)| newcomer(**p))
        .map(|(_, n)| n)
        .sum();
    let ttl = TTL.as_nanos() as u64;
    let after_restart = |start: u64| {
        churn
            .restarted_at
            .iter()
            .any(|&at| (at..at + ttl).contains(&start))
    };
    let within = v
        .led
        .iter()
        .filter(|l| newcomer(l.0) && after_restart(l.2))
        .count();
    println!(
        "   newcomers: {led} leaderships ({within} begun within one TTL of a restart), {failed} failed campaigns; reads before campaigning: {:?}",
        v.reads
    );
    let mut theirs = 0;
    for (i, a) in v.led.iter().enumerate() {
        for b in &v.led[i + 1..] {
            if b.2 < a.3 && a.0 != b.0 && (newcomer(a.0) || newcomer(b.0)) {
                theirs += 1;
            }
        }
    }
    println!(
        "   overlapping leaderships with a newcomer as one of the two: {theirs} of {}",
        v.overlaps
    );
    report(&v, false);
    assert!(churn.cycles > 0, "no restart in the run");
    assert!(churn.newcomers() > 0, "no newcomer in the run");
}

/// The checker's own checks (run as part of `checker`): overlaps of two
/// candidates found, terms not growing found, observers' misses counted.
pub fn self_test() {
    let led = |term, start, end| Line::Led {
        term,
        start,
        end,
        lost: false,
    };
    let ok = check(
        &[vec![led(1, 0, 10)], vec![led(2, 10, 20)]],
        &[(1, 2), (2, 12)],
        &[],
        u64::MAX,
    );
    assert_eq!((ok.overlaps, ok.terms_not_growing, ok.unseen), (0, 0, 0));
    let bad = check(
        &[vec![led(1, 0, 10)], vec![led(1, 5, 20)]],
        &[(1, 1)],
        &[],
        u64::MAX,
    );
    assert_eq!((bad.overlaps, bad.terms_not_growing, bad.unseen), (1, 1, 0));
    let missed = check(
        &[vec![led(1, 0, 10)], vec![led(2, 10, 20)]],
        &[(2, 11)],
        &[],
        u64::MAX,
    );
    assert_eq!(missed.unseen, 1);
    let said = check(
        &[vec![led(1, 0, 10)], vec![led(2, 10, 20)]],
        &[(2, 11)],
        &[(0, 2)],
        u64::MAX,
    );
    assert_eq!((said.unseen, said.skipped), (0, 1));
    let back = check(&[], &[(5, 1), (4, 2)], &[], u64::MAX);
    assert_eq!(back.observed_backwards, 1);
    println!(
        "   election checker: overlaps, terms not growing, leaders unseen and terms seen going back found"
    );
}
