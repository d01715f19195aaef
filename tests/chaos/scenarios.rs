//! The scenarios: a set of servers, a load of two client processes, the faults
//! injected meanwhile, and what the checker must find.
//!
//! A scenario that takes the kind of lock the clients use lists the kinds
//! it runs: its plain run is the mutex, and `<kind>_<scenario>` runs the
//! same faults on another kind.
//!
//! | scenario | mutex | `reentrant_` | `multi_` | `fenced_` | `semaphore_` |
//! |---|---|---|---|---|---|
//! | `control_one_node_quorum` | yes | | | yes: tokens without the time floor, which must go backwards | |
//! | `kill`, `freeze` | yes | yes | yes | yes | yes: at most 2 holders of 2 permits at once, 2 seen at once |
//! | `restart_after_ttl` | yes | | | yes | |
//! | `cancel` | yes | yes | yes | yes | yes (and `rwlock_`) |
//! | `pause` | yes | | | yes: paused holders write after the pause; the plain register loses updates, the fenced one refuses the stale writes | yes |
//! | `partition` | yes | | | | yes: at most 2 holders of 2 permits at once, 2 seen at once |
//! | `come_and_go` | yes | yes | | yes | yes |
//! | `zones` | yes | | | | yes: one permit (and `rwlock_`) |
//! | `long_retry` | yes | yes | | | yes (and `rwlock_`) |
//!
//! The scenarios added for issue 35 look for waiters left asleep: each
//! asserts a bound on the **idle capacity** of its run
//! (`Verdict::idle`: a stretch in which a waiter had called `lock()` and
//! not yet returned while its resource had room for it, as the holders'
//! intervals tell), besides the checks of every run; every run prints
//! the figure. No node fault is injected in them, so a long stretch is a
//! waiter that slept through its turn: a lost wake-up, or contenders that
//! keep splitting the vote in step.
//!
//! * `cancel` runs on every kind: half the calls dropped within 2 ms, no
//!   key left behind once the clients are gone, no idle stretch over
//!   [`IDLE_BOUND`] (the kinds it gained run 60% of the time).
//! * `zones` gives each of three client processes (one task each) its own
//!   way to the three nodes: its own node directly, the two others through
//!   proxies of its own that add 40 ms each way (clients in three zones),
//!   the library's default retry options; three contenders for one
//!   resource, and no idle stretch over [`ZONES_IDLE_BOUND`] (a mutex's
//!   worst is its contenders' first split). The semaphore has one permit:
//!   its holder is named as one (`permits:1`) on every node, so
//!   contenders that split see "a holder on a majority".
//! * `long_retry`: retry delays of 3.5 s ± 1.5 s, TTL 10 s, one call in
//!   four dropped within 300 ms (queued, mostly): waiters get in only by
//!   wake-ups, past the dropped ones; no idle stretch over
//!   [`IDLE_BOUND`], no key left behind.
//! * `kinds_on_one_name`: three processes of four tasks on two resources,
//!   each call drawing its kind (mutex, reentrant, fenced, semaphore of 2,
//!   read-write: `Kind::Mixed`). A key has one layout at a time, so the
//!   kinds exclude each other: the checker allows one kind's holders at a
//!   time on a name, each kind by its own rule (a reentrant owner beside
//!   its own holds, readers beside readers, 2 permits), and fencing
//!   tokens must still grow across the other kinds' holds; the figures
//!   count how often a name passed from one kind to another. TTL and wait
//!   3 s, retry delay 1 s ± 0.5 s: a waiter sleeps on its holder's expiry
//!   unless woken. No idle stretch over [`IDLE_BOUND`], no key left
//!   behind.
//!
//! `come_and_go` (see `come_and_go`) restarts two nodes empty, then two of
//! the three others 50–200 ms later, in cycles the TTL and 1.5 s apart,
//! each lock kind's begun as a new hold begins,
//! while new client processes join the load: right after each restart and
//! every second or so, living a few seconds, some locking at once, some
//! reading every resource first (`status()`), some reading, idling past
//! the TTL and reading again before they lock. A newcomer meets restarted
//! nodes for the first time, and its guard has no earlier `run_id` to
//! compare: a newcomer refused for up to a TTL after a restart is counted
//! in the figures, a second holder is a failure. It runs on `rwlock_` too,
//! and `election_come_and_go` runs it with candidates that join (reading
//! `leader()` or `observe()` first). `control_come_and_go_unguarded` is
//! its negative control: the mutex's run with the restart guard off in
//! every process, which must show violations.
//!
//! `sentinel_failover` runs the plain lock over three Sentinel-managed
//! nodes (`redquorum::local_sentinel`): `SENTINEL FAILOVER` and killed
//! primaries under load, each failover a restart the guard quarantines
//! (its figures count the `Restarted` votes).
//!
//! `rwlock_` runs `kill`, `freeze`, `partition` and `pause` with
//! read-write locks (3 reads in 4): no writer interval overlaps any other,
//! readers are seen to overlap, and writers get in;
//! `rwlock_control_one_node_quorum` is its negative control (writers
//! overlap readers and each other).
//!
//! `control_semaphore_over_admit` is the semaphore's negative control: its
//! clients take 3 permits where the checker allows 2 holders at once.
//!
//! `partition` puts a proxy (`tests/common/proxy.rs`) in front of each node
//! and cuts nodes off without RST, in both ways a network does it; on
//! every kind it runs (mutex, semaphore, read-write lock), no lock key may
//! be left on the healed nodes once the clients are gone (see
//! [`keys_left`] for the waiters' queues and writers' intents, which
//! expire by themselves).
//!
//! A fenced run must show no fence violation (tokens that do not grow in
//! acquire order) and no lost update on the fenced register, besides the
//! checks of every run. Where no node restarts (`freeze`, `pause` and the
//! negative control) tokens are drawn without the time floor, from the
//! counters alone; `kill` and `restart_after_ttl` restart nodes empty and
//! keep the floor, which is what keeps tokens growing when counters are lost.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use redquorum::local_sentinel::LocalSentinels;
use redquorum::local_servers::{LocalServers, Reply, command};

use crate::client::{self, First, Kind, Spec};
use crate::history::{Class, Event, Verdict, now_ns};
use crate::{CLIENT, pick};

use crate::common;

use common::proxy::Proxy;
use common::{compose, servers};

/// One scenario of the suite.
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    pub run: Run,
}

/// How a scenario runs, for the given load time; it panics when it fails.
pub enum Run {
    /// Once.
    Once(fn(Duration)),
    /// Once per lock kind of the list: named as the scenario with the
    /// mutex, `<kind>_<name>` with the others (see [`cases`]).
    Kinds(&'static [Kind], fn(Duration, Kind)),
}

/// The kinds of the scenarios that run on every kind.
const EVERY_KIND: &[Kind] = &Kind::ALL;
/// The kinds of the scenarios whose load takes plain locks, and checks
/// the fencing tokens of fenced ones.
const PLAIN_AND_FENCED: &[Kind] = &[Kind::Mutex, Kind::Fenced];
/// The kinds of `pause`: the fenced register's refusals, and a
/// semaphore's permit moving on while its holder sleeps.
const PAUSE_KINDS: &[Kind] = &[Kind::Mutex, Kind::Fenced, Kind::Semaphore, Kind::Rwlock];
/// The kinds of `partition`: one holder, k holders, and readers beside
/// writers, each with its own layout of the lock key (and the read-write
/// lock's writers' intents) to be left clean once healed.
const PARTITION_KINDS: &[Kind] = &[Kind::Mutex, Kind::Semaphore, Kind::Rwlock];
/// The kinds of `come_and_go`: every kind but `multi` (whose sets go
/// through the same acquisition path as the mutex, and whose run would add
/// another 8 s to the family).
const COME_AND_GO_KINDS: &[Kind] = &[
    Kind::Mutex,
    Kind::Reentrant,
    Kind::Fenced,
    Kind::Semaphore,
    Kind::Rwlock,
];

/// The kinds of `zones`: one holder (the issue-35 figures: a mutex hands
/// over across zones in well under a second), k holders named as one on
/// each node, readers beside writers.
const ZONES_KINDS: &[Kind] = &[Kind::Mutex, Kind::Semaphore, Kind::Rwlock];
/// The kinds of `long_retry`: each layout whose holders a waiter waits on
/// (a string, an owner's hash, a semaphore's slots, readers).
const LONG_RETRY_KINDS: &[Kind] = &[Kind::Mutex, Kind::Reentrant, Kind::Semaphore, Kind::Rwlock];

/// One run of a scenario, with one kind of lock.
pub struct Case {
    pub name: String,
    pub about: String,
    run: &'static Run,
    kind: Kind,
}

impl Case {
    pub fn run(&self, secs: Duration) {
        match self.run {
            Run::Once(run) => run(secs),
            Run::Kinds(_, run) => run(secs, self.kind),
        }
    }
}

/// Every run of every scenario, in order: those of a scenario run on each
/// kind of lock follow one another.
pub fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for s in ALL {
        let kinds: &[Kind] = match s.run {
            Run::Once(_) => &[Kind::Mutex],
            Run::Kinds(kinds, _) => kinds,
        };
        cases.extend(kinds.iter().map(|&kind| Case {
            name: kind.named(s.name),
            about: match kind {
                Kind::Mutex => s.about.to_owned(),
                _ => format!("{}; with {}", s.about, kind.about()),
            },
            run: &s.run,
            kind,
        }));
    }
    cases
}

pub const ALL: &[Scenario] = &[
    Scenario {
        name: "checker",
        about: "the checker's own checks: overlaps of two owners found, of one owner's nested holds passed, disjoint intervals pass, tokens that do not grow in acquire order found, growing ones passed, figures counted",
        run: Run::Once(|_| {
            crate::history::self_test::run();
            crate::election::self_test();
        }),
    },
    Scenario {
        name: "control_one_node_quorum",
        about: "NEGATIVE CONTROL: each client process is given a different single node, a quorum of one; the checker must report violations (fenced: and tokens that do not grow, drawn without the time floor)",
        run: Run::Kinds(
            &[Kind::Mutex, Kind::Fenced, Kind::Rwlock],
            control_one_node_quorum,
        ),
    },
    Scenario {
        name: "control_semaphore_over_admit",
        about: "NEGATIVE CONTROL: the clients take semaphores of 3 permits, the checker allows 2 holders at once; it must report violations",
        run: Run::Once(control_semaphore_over_admit),
    },
    Scenario {
        name: "control_restart_at_once_unguarded",
        about: "NEGATIVE CONTROL: three nodes restarted at once without persistence, restart guard off; the checker must report violations",
        run: Run::Once(control_restart_at_once_unguarded),
    },
    Scenario {
        name: "restart_at_once_guarded",
        about: "the same restarts with the restart guard on (the default): no violation",
        run: Run::Once(restart_at_once_guarded),
    },
    Scenario {
        name: "control_come_and_go_unguarded",
        about: "NEGATIVE CONTROL: come_and_go's restarts and newcomers with the restart guard off in every process; the checker must report violations",
        run: Run::Once(crate::come_and_go::control_unguarded),
    },
    Scenario {
        name: "come_and_go",
        about: "clients that come and go during restarts: in cycles, two nodes killed and restarted empty, two of the others 50-200 ms later, then the TTL and 1.5 s of calm; new client processes start right after each restart and every second or so, living a few seconds, some reading first (status), some idling past the TTL between two reads before locking (guard on: no violation; a newcomer refused for up to a TTL after a restart is counted, not a failure)",
        run: Run::Kinds(COME_AND_GO_KINDS, crate::come_and_go::come_and_go),
    },
    Scenario {
        name: "election_come_and_go",
        about: "leader election with come_and_go's restarts and newcomers: candidates that join during the run, some reading leader() or observe() first, some idling past the TTL between two reads before campaigning; at most one leader at a time",
        run: Run::Once(crate::election::come_and_go),
    },
    Scenario {
        name: "kill",
        about: "kill -9 a random node every 0.3-1 s while acquisitions are in flight, restart it at once (guard on)",
        run: Run::Kinds(EVERY_KIND, kill),
    },
    Scenario {
        name: "sentinel_failover",
        about: "three Sentinel-managed nodes (a primary and a replica each, three sentinels): SENTINEL FAILOVER of a node, or kill -9 of its primary (restarted empty once the replica is promoted), every 0.3-1 s while acquisitions are in flight (guard on: each failover quarantined)",
        run: Run::Once(sentinel_failover),
    },
    Scenario {
        name: "freeze",
        about: "SIGSTOP a random node for 150-600 ms (node timeout 50 ms), then SIGCONT",
        run: Run::Kinds(EVERY_KIND, freeze),
    },
    Scenario {
        name: "election_kill",
        about: "leader election: three candidate processes campaign while nodes are killed and restarted empty; at most one believed leader at a time, terms growing leader to leader, an observer that never sees a term go back",
        run: Run::Once(crate::election::kill),
    },
    Scenario {
        name: "election_freeze",
        about: "leader election while nodes are frozen for 150-600 ms",
        run: Run::Once(crate::election::freeze),
    },
    Scenario {
        name: "election_partition",
        about: "leader election while 1-2 nodes are cut off (proxies, no RST)",
        run: Run::Once(crate::election::partition),
    },
    Scenario {
        name: "election_freeze_leader",
        about: "leader election while the leader's own process is frozen (SIGSTOP) past the TTL: a new leader within the TTL and a bound, the frozen one finds itself lost when thawed, every leader observed",
        run: Run::Once(crate::election::freeze_leader),
    },
    Scenario {
        name: "election_control_ignore_lost",
        about: "negative control: leaders that ignore a lost leadership, frozen past the TTL; the checker must find two leaders at once",
        run: Run::Once(crate::election::control_ignore_lost),
    },
    Scenario {
        name: "partition",
        about: "one or two nodes cut off without RST for 0.3-1.5 s, behind proxies: bytes swallowed (the heal closes those connections) or held (the heal delivers them late, as TCP's retransmissions do); no key of a released lock left once healed",
        run: Run::Kinds(PARTITION_KINDS, partition),
    },
    Scenario {
        name: "majority_down",
        about: "two of five nodes down (available), then three (unavailable, nothing held), then all restarted",
        run: Run::Once(majority_down),
    },
    Scenario {
        name: "restart_after_ttl",
        about: "restart guard off; a node killed and kept down for longer than the TTL before it restarts empty (the distlock rule)",
        run: Run::Kinds(PLAIN_AND_FENCED, restart_after_ttl),
    },
    Scenario {
        name: "cancel",
        about: "half the lock() calls dropped after 0-2 ms; no keys left behind, and no waiter left asleep while the lock has room (idle capacity)",
        run: Run::Kinds(EVERY_KIND, cancel),
    },
    Scenario {
        name: "zones",
        about: "three zones: three nodes, three client processes each next to one node and 40 ms (each way) from the other two through proxies of its own, default retry options, three contenders for one resource (a semaphore: of one permit, whatever its kind says below); no waiter left asleep while the lock has room for long (idle capacity)",
        run: Run::Kinds(ZONES_KINDS, zones),
    },
    Scenario {
        name: "long_retry",
        about: "waiters that sleep 2-5 s between retries (TTL 10 s), one call in four dropped within 300 ms: only wake-ups bring waiters in; no waiter left asleep while the lock has room (idle capacity), no keys left behind",
        run: Run::Kinds(LONG_RETRY_KINDS, long_retry),
    },
    Scenario {
        name: "kinds_on_one_name",
        about: "every kind on the same two names at once (mutex, reentrant, fenced, semaphore of 2, readers and writers; one drawn per call by 3 processes x 4 tasks): one kind's holders at a time, each by its own rule; no waiter left asleep while the lock has room (idle capacity)",
        run: Run::Once(kinds_on_one_name),
    },
    Scenario {
        name: "pause",
        about: "one holder in four sleeps past its TTL; its interval counts to its validity deadline, and the lock moves on (fenced: it writes after the pause; the plain register loses updates, the fenced one refuses the stale writes and loses none)",
        run: Run::Kinds(PAUSE_KINDS, pause),
    },
    Scenario {
        name: "clock_fast_0_5pct",
        about: "three nodes' clocks run 0.5% fast, inside the drift allowance (1% + 2 ms); every holder holds to its deadline: no violation",
        run: Run::Once(clock_fast_small),
    },
    Scenario {
        name: "clock_fast_2pct",
        about: "three nodes' clocks run 2% fast, beyond the drift allowance: the documented limit, violations expected",
        run: Run::Once(clock_fast_large),
    },
    Scenario {
        name: "clock_jump",
        about: "three nodes' wall clocks jump forward by twice the TTL: the documented limit, violations expected",
        run: Run::Once(clock_jump),
    },
    Scenario {
        name: "cluster_failover",
        about: "three local Redis Clusters (3 shards, a replica each) as the three nodes: a shard failed over (CLUSTER FAILOVER, or its primary killed) or the load's slot migrated to another primary every 0.5-1.5 s; the restart guard quarantines a node whose grant came from a primary it had not seen",
        run: Run::Once(cluster_failover),
    },
    Scenario {
        name: "compose",
        about: "the docker-compose servers: containers killed and restarted, paused, and disconnected from their network",
        run: Run::Once(compose_chaos),
    },
];

// ---------------------------------------------------------------------------
// The scenarios

fn control_one_node_quorum(secs: Duration, kind: Kind) {
    let c = servers(5);
    let mut load = Load::of(kind, "one_node", &c, secs);
    // On the wall clock's floor, the tokens of two processes on one machine
    // would mostly grow without any quorum; the counters alone must not.
    load.spec.fence_floor = false;
    // Process p sees node p alone: each is its own majority.
    let urls = c.urls();
    let clients = load.start(|p| vec![urls[p].clone()]);
    let v = clients.finish();
    let f = load.report(&v);
    assert!(
        !v.violations.is_empty(),
        "the negative control found no violation: the checker cannot fail"
    );
    assert!(f.lost_updates > 0, "no lost update under a quorum of one");
    if kind == Kind::Fenced {
        assert!(
            !v.fence_violations.is_empty(),
            "the negative control found no token that did not grow: the checker cannot fail"
        );
    }
}

fn control_semaphore_over_admit(secs: Duration) {
    let c = servers(5);
    let mut load = Load::of(Kind::Semaphore, "control_over_admit", &c, secs);
    load.spec.permits = 3;
    load.capacity = 2;
    let clients = load.start_all(&c);
    let v = clients.finish();
    load.report(&v);
    assert!(
        !v.violations.is_empty(),
        "the negative control found no third holder: the checker cannot fail"
    );
}

fn control_restart_at_once_unguarded(secs: Duration) {
    let (v, _) = restart_at_once(secs, false);
    assert!(
        !v.violations.is_empty(),
        "the negative control found no violation: the checker cannot fail"
    );
}

fn restart_at_once_guarded(secs: Duration) {
    let (v, f) = restart_at_once(secs, true);
    assert_safe(&v, &f);
}

/// Three random nodes killed and restarted empty at once, every TTL + 1 s.
fn restart_at_once(secs: Duration, guard: bool) -> (Verdict, Figures) {
    let mut c = servers(5);
    let mut load = Load::new(if guard { "at_once_guarded" } else { "at_once" }, &c, secs);
    load.spec.ttl = Duration::from_millis(1_500);
    load.spec.hold_ms = 200;
    load.spec.restart_guard = guard;
    let clients = load.start_all(&c);
    let mut restarts = 0;
    for_the_run(secs, |left| {
        sleep_ms(1_000, 1_500.min(left));
        for i in pick(5, 3) {
            c.restart(i).unwrap();
        }
        restarts += 1;
    });
    let v = clients.finish();
    println!("   faults: {restarts} times three nodes restarted at once");
    let f = load.report(&v);
    (v, f)
}

fn kill(secs: Duration, kind: Kind) {
    let mut c = servers(5);
    let load = Load::of(kind, "kill", &c, secs);
    let clients = load.start_all(&c);
    let mut kills = 0;
    for_the_run(secs, |left| {
        sleep_ms(300, 1_000.min(left));
        let i = rand::random_range(0..5);
        c.kill(i);
        sleep_ms(0, 300);
        c.restart(i).unwrap();
        kills += 1;
    });
    let v = clients.finish();
    println!("   faults: {kills} nodes killed with SIGKILL and restarted at once");
    let f = load.report(&v);
    assert_safe(&v, &f);
}

/// Faults on Sentinel-managed nodes: a node whose replica is in sync is
/// failed over by hand (the old primary stays a master no sentinel names
/// until the sentinels demote it, seconds later, closing its clients'
/// connections), or its primary is killed, and restarted empty once the
/// sentinels have promoted the replica.
fn sentinel_failover(secs: Duration) {
    let mut s = LocalSentinels::start(3)
        .unwrap_or_else(|e| panic!("cannot start Sentinel-managed nodes: {e}"));
    let urls = s.urls();
    let load = Load::with_nodes("sentinel_failover", urls.clone(), servers(1), secs);
    let clients = load.start(|_| urls.clone());
    let (mut failovers, mut kills, mut round) = (0, 0, 0);
    for_the_run(secs, |left| {
        sleep_ms(300, 1_000.min(left));
        // A node a failover can promote a replica of.
        let ready: Vec<usize> = (0..s.len())
            .filter(|&i| s.replica_in_sync(i).is_some())
            .collect();
        if ready.is_empty() {
            return;
        }
        let i = ready[rand::random_range(0..ready.len())];
        if round % 2 == 0 {
            s.failover(i).unwrap();
            failovers += 1;
        } else {
            let old = s.primary(i).unwrap();
            s.kill_server(old).unwrap();
            s.wait_for_new_primary(i, old).unwrap();
            s.restart_server(old).unwrap();
            kills += 1;
        }
        round += 1;
    });
    let v = clients.finish();
    println!(
        "   faults: {failovers} SENTINEL FAILOVERs, {kills} primaries killed (restarted empty after the promotion)"
    );
    let f = load.report(&v);
    assert_safe(&v, &f);
    assert!(failovers + kills > 0, "no fault in the run");
    assert!(
        v.quarantined_votes > 0,
        "no node was ever quarantined after a failover"
    );
}

fn freeze(secs: Duration, kind: Kind) {
    let mut c = servers(5);
    let mut load = Load::of(kind, "freeze", &c, secs);
    // No node restarts here, so none loses its counters, and fenced tokens
    // are drawn from the counters alone: with the wall clock's floor the
    // clients (one machine, one clock) would order them by themselves, and
    // a broken counter mechanism would go unseen. `pause` does the same;
    // the scenarios that restart nodes keep the floor, which is what keeps
    // tokens growing there.
    load.spec.fence_floor = false;
    let clients = load.start_all(&c);
    let mut freezes = 0;
    for_the_run(secs, |left| {
        sleep_ms(200, 800.min(left));
        let i = rand::random_range(0..5);
        c.freeze(i);
        sleep_ms(150, 600);
        c.thaw(i);
        freezes += 1;
    });
    let v = clients.finish();
    println!("   faults: {freezes} nodes frozen for 150-600 ms");
    let f = load.report(&v);
    assert_safe(&v, &f);
}

fn partition(secs: Duration, kind: Kind) {
    let c = servers(5);
    let proxies: Vec<Proxy> = (0..5).map(|i| Proxy::start(c.port(i))).collect();
    let urls = proxies.iter().map(Proxy::url).collect();
    let mut load = Load::of_nodes(kind, "partition", urls, secs);
    // Keys that outlive the run: one left behind by a late acquisition is
    // still there to be counted at the end.
    load.spec.ttl = secs + Duration::from_secs(30);
    let clients = load.start(|_| load.spec.nodes.clone());
    let (mut cuts, mut holds) = (0, 0);
    let mut partitioned = Vec::new();
    for_the_run(secs, |left| {
        let Some((hold, from, to)) = partition_once(&proxies, left) else {
            return;
        };
        partitioned.push((from, to));
        if hold {
            holds += 1;
        } else {
            cuts += 1;
        }
    });
    let v = clients.finish();
    let during: usize = partitioned
        .iter()
        .map(|&(from, to)| v.acquired_between(from, to))
        .sum();
    let cut_for: f64 = partitioned
        .iter()
        .map(|&(from, to)| (to - from) as f64 / 1e9)
        .sum();
    println!(
        "   faults: {} partitions of 1-2 nodes ({cuts} swallowing, {holds} holding), {cut_for:.1} s in all",
        cuts + holds
    );
    let (start, end) = v.window;
    println!(
        "   acquisitions during the partitions: {during} ({:.0}/s; {:.0}/s over the whole run)",
        during as f64 / cut_for.max(1e-9),
        v.acquisitions as f64 / ((end - start) as f64 / 1e9)
    );
    let f = load.report(&v);
    assert_safe(&v, &f);
    let keys = keys_left(&c, &load.spec.prefix, load.spec.ttl);
    println!(
        "   keys left on the nodes after the heal: {} (TTL {} s); auxiliary keys expired after the run: {}",
        keys.left,
        load.spec.ttl.as_secs(),
        keys.expired
    );
    assert_eq!(keys.left, 0, "keys of released locks left on healed nodes");
}

fn majority_down(secs: Duration) {
    let mut c = servers(5);
    let load = Load::new("majority_down", &c, secs);
    let clients = load.start_all(&c);
    let phase = secs / 5;
    std::thread::sleep(phase);
    c.kill(0);
    c.kill(1);
    let two_down = now_ns();
    std::thread::sleep(phase);
    c.kill(2);
    let three_down = now_ns();
    std::thread::sleep(phase);
    for i in 0..3 {
        c.restart(i).unwrap();
    }
    let back = now_ns();
    let v = clients.finish();
    let end = now_ns();
    let f = load.report(&v);
    // An attempt in flight at the third kill may still succeed; it ends
    // within a node timeout (50 ms), or a little later on a busy machine.
    let settled = three_down + 500_000_000;
    let (up2, down3, after) = (
        v.acquired_between(two_down, three_down),
        v.acquired_between(settled, back),
        v.acquired_between(back, end),
    );
    println!(
        "   acquisitions: {up2} with two nodes down, {down3} with three down, {after} after the restart \
         (unavailable after it for {:.1} s: the restart guard's quarantine)",
        v.first_acquisition_after(back, end).as_secs_f64()
    );
    assert_safe(&v, &f);
    assert!(up2 > 0, "no acquisition with two of five nodes down");
    assert_eq!(down3, 0, "acquired with three of five nodes down");
    assert!(after > 0, "no acquisition after the nodes came back");
}

fn restart_after_ttl(secs: Duration, kind: Kind) {
    let mut c = servers(5);
    let mut load = Load::of(kind, "after_ttl", &c, secs);
    load.spec.restart_guard = false;
    let clients = load.start_all(&c);
    let mut restarts = 0;
    let down = load.spec.ttl + Duration::from_millis(250);
    for_the_run(secs, |left| {
        sleep_ms(100, 400.min(left));
        let i = rand::random_range(0..5);
        c.kill(i);
        std::thread::sleep(down);
        c.restart(i).unwrap();
        restarts += 1;
    });
    let v = clients.finish();
    println!(
        "   faults: {restarts} nodes killed and restarted empty after {} ms down",
        down.as_millis()
    );
    let f = load.report(&v);
    assert_safe(&v, &f);
}

/// The load time of the scenarios added for issue 35 (`zones`,
/// `long_retry`, `kinds_on_one_name`, and `cancel` on the kinds it gained
/// then): 60% of the suite's time, 4 s at least.
fn short_run(secs: Duration) -> Duration {
    secs.mul_f64(0.6).max(Duration::from_secs(4))
}

/// The longest a resource may stay idle (`Verdict::idle`) while a waiter
/// waits, with every node and client on this machine and no fault: a
/// handover is a release, a wake-up and an attempt, a few ms each, and a
/// split vote among waiters is settled within a few attempts' time. A lost
/// wake-up costs the waiter's whole sleep: up to the holder's PTTL, capped
/// at ten retry delays and at least 1 s, which is why the scenarios that
/// look for it wait seconds between retries. The rest of the bound is for
/// a loaded machine (two cores, five nodes, several client processes).
const IDLE_BOUND: Duration = Duration::from_millis(500);

fn cancel(secs: Duration, kind: Kind) {
    // The kinds the scenario gained with issue 35 run for less time.
    let run = match kind {
        Kind::Mutex | Kind::Reentrant | Kind::Multi => secs,
        _ => short_run(secs),
    };
    let c = servers(5);
    let mut load = Load::of(kind, "cancel", &c, run);
    load.spec.cancel_one_in = 2;
    load.spec.ttl = Duration::from_secs(10);
    run_cancelling(&load, &c);
}

/// How far a client is from a node in another zone: the proxies' added
/// delay, each way (80 ms a round trip).
const FAR: Duration = Duration::from_millis(40);

/// The longest a resource may stay idle while a waiter waits in `zones`:
/// a handover there is a release reaching a majority (one far node: 40
/// ms), a wake-up (up to 40 ms) and an attempt (80 ms), and contenders
/// that split the vote (each first at its own node) retry after a random
/// pause of a few attempts' time, doubling with each split in a row; a
/// plain mutex hands over within this (see the figures of `zones`).
const ZONES_IDLE_BOUND: Duration = Duration::from_millis(1_500);

/// Three zones: three nodes, and three client processes of one task (three
/// contenders), each next to one node (directly) and 40 ms each way from
/// the other two (through proxies of its own), contending for one resource
/// with the library's default retry options; the semaphore has one permit.
fn zones(secs: Duration, kind: Kind) {
    let run = short_run(secs);
    let c = servers(3);
    let urls = c.urls();
    let mut proxies = Vec::new();
    let nodes: Vec<Vec<String>> = (0..3)
        .map(|p| {
            (0..3)
                .map(|n| {
                    if n == p {
                        return urls[n].clone();
                    }
                    let proxy = Proxy::start(c.port(n));
                    proxy.set_delay(FAR);
                    let url = proxy.url();
                    proxies.push(proxy);
                    url
                })
                .collect()
        })
        .collect();
    let mut load = Load::of_nodes(kind, "zones", urls, run);
    load.processes = 3;
    load.spec.tasks = 1;
    load.spec.resources = 1;
    load.spec.ttl = Duration::from_secs(3);
    load.spec.hold_ms = 100;
    load.spec.node_timeout = Duration::from_millis(300);
    if kind == Kind::Semaphore {
        // One permit: its holder is named `permits:1` on each node, so
        // contenders that split the vote each see a holder on a majority.
        load.spec.permits = 1;
        load.capacity = 1;
    }
    // The library's defaults.
    load.spec.retry_delay = Duration::from_millis(200);
    load.spec.retry_jitter = Duration::from_millis(100);
    load.spec.retry_count = 10;
    load.spec.wait = Some(Duration::from_secs(10));
    // Each process meets the nodes (a read of the resource, `status()`)
    // before its task locks: the first stretch is then the contenders'
    // first split, not their connections through the proxies.
    load.spec.first = First::Read;
    let clients = load.start(|p| nodes[p].clone());
    let v = clients.finish();
    println!(
        "   zones: 3 nodes; client process p next to node p, {} ms each way from the others ({} proxies)",
        FAR.as_millis(),
        proxies.len()
    );
    let f = load.report(&v);
    assert_safe_and_idle(&v, &f, ZONES_IDLE_BOUND);
}

/// Waiters that sleep for seconds between retries (`retry_delay` 3.5 s ±
/// 1.5 s, TTL 10 s): only wake-ups bring a waiter in after a release, and
/// one call in four is dropped within 300 ms (queued, mostly), so that
/// the next waiter must be woken past it.
fn long_retry(secs: Duration, kind: Kind) {
    let run = short_run(secs);
    let c = servers(5);
    let mut load = Load::of(kind, "long_retry", &c, run);
    load.spec.retry_delay = Duration::from_millis(3_500);
    load.spec.retry_jitter = Duration::from_millis(1_500);
    load.spec.retry_count = 10;
    load.spec.ttl = Duration::from_secs(10);
    load.spec.wait = Some(Duration::from_secs(6));
    load.spec.hold_ms = 30;
    load.spec.cancel_one_in = 4;
    load.spec.cancel_within = Duration::from_millis(300);
    run_cancelling(&load, &c);
}

/// Runs `load`, whose calls are cancelled now and then, on `c`: safe, no
/// waiter left asleep on room for longer than [`IDLE_BOUND`], something
/// cancelled, and no key left behind.
fn run_cancelling(load: &Load, c: &LocalServers) {
    let clients = load.start_all(c);
    let v = clients.finish();
    let f = load.report(&v);
    let keys = keys_left(c, &load.spec.prefix, load.spec.ttl);
    println!(
        "   keys left on the nodes after the run: {} (TTL {} s); auxiliary keys expired after the run: {}",
        keys.left,
        load.spec.ttl.as_secs(),
        keys.expired
    );
    assert_safe_and_idle(&v, &f, IDLE_BOUND);
    assert!(v.cancelled > 0, "nothing was cancelled");
    assert_eq!(keys.left, 0, "calls left keys behind");
}

/// Every kind on the same names at once: three processes of four tasks
/// on two resources, each call drawing its kind (`Kind::Mixed`); TTL and
/// wait 3 s, retry delay 1 s ± 0.5 s.
fn kinds_on_one_name(secs: Duration) {
    let run = short_run(secs);
    let c = servers(5);
    let mut load = Load::of(Kind::Mixed, "kinds_on_one_name", &c, run);
    load.processes = 3;
    load.spec.tasks = 4;
    load.spec.resources = 2;
    // Waiters that sleep on a holder's expiry (a PTTL of up to 3 s: ten
    // retry delays are longer) unless a wake-up comes: a turn lost between
    // kinds costs seconds, well over the bound, and not a capped second.
    load.spec.ttl = Duration::from_secs(3);
    load.spec.retry_delay = Duration::from_millis(1_000);
    load.spec.retry_jitter = Duration::from_millis(500);
    load.spec.retry_count = 10;
    let clients = load.start_all(&c);
    let v = clients.finish();
    let f = load.report(&v);
    let keys = keys_left(&c, &load.spec.prefix, load.spec.ttl);
    println!(
        "   keys left on the nodes after the run: {}; auxiliary keys expired after the run: {}",
        keys.left, keys.expired
    );
    assert_safe_and_idle(&v, &f, IDLE_BOUND);
    assert_eq!(keys.left, 0, "keys left behind");
}

fn pause(secs: Duration, kind: Kind) {
    let c = servers(5);
    let mut load = Load::of(kind, "pause", &c, secs);
    load.spec.pause_one_in = 4;
    load.spec.ttl = Duration::from_millis(500);
    // No node restarts: the counters alone order the tokens, as in `freeze`,
    // so the refused stale writes are refused by the counters' tokens and
    // not by the clock the clients share.
    load.spec.fence_floor = false;
    let clients = load.start_all(&c);
    let v = clients.finish();
    let f = load.report(&v);
    assert_safe(&v, &f);
    println!(
        "   paused holders: {}, taken over by another client during the pause: {}",
        v.paused, v.moved_on
    );
    assert!(v.paused > 0 && v.moved_on > 0, "the lock did not move on");
    if kind == Kind::Fenced {
        // What fencing is for: the paused holders' late writes.
        assert!(
            f.lost_updates > 0,
            "the plain register lost no update: no paused holder wrote after another"
        );
        assert!(v.refused_writes > 0, "no stale fenced write was refused");
    }
}

fn clock_fast_small(secs: Duration) {
    let (v, f) = clock_fast(secs, 5_000);
    assert_safe(&v, &f);
}

fn clock_fast_large(secs: Duration) {
    let (v, _) = clock_fast(secs, 20_000);
    assert!(
        !v.violations.is_empty(),
        "no violation with clocks 2% fast: the scenario does not reach the documented limit"
    );
}

/// Nodes 0-2 run `ppm` fast; every holder holds to its validity deadline,
/// where an early expiry shows. A 2 s TTL with 1% drift allows for 22 ms:
/// 0.5% fast expires keys 10 ms early, 2% fast 40 ms early.
fn clock_fast(secs: Duration, ppm: u32) -> (Verdict, Figures) {
    let mut c = servers(5);
    let shim = clockskew();
    let rate = ppm.to_string();
    for i in 0..3 {
        c.restart_with_env(
            i,
            &[
                ("LD_PRELOAD", shim.to_str().unwrap()),
                ("CLOCKSKEW_RATE_PPM", &rate),
            ],
        )
        .unwrap();
    }
    let mut load = Load::new(&format!("fast{ppm}"), &c, secs);
    load.spec.pause_one_in = 1;
    load.spec.ttl = Duration::from_secs(2);
    // Waiters poll every 20 ± 15 ms, so that one tries within the few ms
    // in which a majority's keys are gone early and the holder still
    // believes it holds: the worst case for this fault.
    load.spec.wake_on_release = false;
    let clients = load.start_all(&c);
    let v = clients.finish();
    println!(
        "   three nodes {}% fast; drift allowance {} ms of a {} ms TTL; waiters poll",
        f64::from(ppm) / 10_000.0,
        load.spec.ttl.as_millis() / 100 + 2,
        load.spec.ttl.as_millis()
    );
    let f = load.report(&v);
    (v, f)
}

fn clock_jump(secs: Duration) {
    let mut c = servers(5);
    let shim = clockskew();
    let dir = std::env::temp_dir().join(format!("redquorum-jump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let offset = dir.join("offset_ms");
    std::fs::write(&offset, "0").unwrap();
    for i in 0..3 {
        c.restart_with_env(
            i,
            &[
                ("LD_PRELOAD", shim.to_str().unwrap()),
                ("CLOCKSKEW_OFFSET_FILE", offset.to_str().unwrap()),
            ],
        )
        .unwrap();
    }
    let mut load = Load::new("jump", &c, secs);
    load.spec.hold_ms = 200;
    let clients = load.start_all(&c);
    let mut jumps = 0u64;
    let step = 2 * load.spec.ttl.as_millis() as u64;
    for_the_run(secs, |left| {
        sleep_ms(700, 1_500.min(left));
        jumps += 1;
        std::fs::write(&offset, (jumps * step).to_string()).unwrap();
    });
    let v = clients.finish();
    let _ = std::fs::remove_dir_all(&dir);
    println!("   faults: {jumps} forward jumps of {step} ms on three nodes' wall clocks");
    load.report(&v);
    assert!(
        !v.violations.is_empty(),
        "no violation after clock jumps: the scenario does not reach the documented limit"
    );
}

fn cluster_failover(secs: Duration) {
    use redquorum::local_redis_cluster::LocalRedisCluster;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let started: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(LocalRedisCluster::start))
        .collect();
    let mut clusters: Vec<LocalRedisCluster> = started
        .into_iter()
        .map(|h| h.join().unwrap().expect("a local Redis Cluster"))
        .collect();
    let urls: Vec<String> = clusters.iter().map(LocalRedisCluster::url).collect();
    let mut load = Load::with_nodes("cluster_failover", urls.clone(), servers(1), secs);
    // Eighteen servers share the machine: a little more room per request.
    load.spec.node_timeout = Duration::from_millis(100);
    load.spec.ttl = Duration::from_secs(2);
    let clients = load.start(|_| urls.clone());
    // A probe of our own, on other names: how often the guard refused a
    // node (`Restarted`) after a failover it saw. One `Redlock` per cluster,
    // with that cluster as its only node, so that every refusal fails the
    // attempt and is seen (over the three, the other two would grant the
    // lock and the refusal would go unreported).
    let stop = Arc::new(AtomicBool::new(false));
    let (quarantined, probed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let probe = {
        let (urls, stop, quarantined, probed) = (
            urls.clone(),
            stop.clone(),
            quarantined.clone(),
            probed.clone(),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let probes: Vec<redquorum::Redlock> = urls
                    .iter()
                    .map(|url| {
                        redquorum::Redlock::builder()
                            .node(url)
                            .key_prefix("chaos:cluster_probe:")
                            .node_timeout(Duration::from_millis(100))
                            .build()
                            .unwrap()
                    })
                    .collect();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    for redlock in &probes {
                        probed.fetch_add(1, Ordering::Relaxed);
                        match redlock
                            .try_lock(&format!("p{}", n % 16), Duration::from_secs(2))
                            .await
                        {
                            Ok(lock) => {
                                let _ = lock.release().await;
                            }
                            Err(e) => {
                                let restarted = e.report().is_some_and(|r| {
                                    r.failures().iter().any(|(_, f)| {
                                        matches!(f, redquorum::NodeFailure::Restarted { .. })
                                    })
                                });
                                if restarted {
                                    quarantined.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        })
    };
    // The load's keys: `{chaos:cluster_failover:r<i>}`; slot moves take
    // the slot of one of them.
    let keys: Vec<String> = (0..load.spec.resources)
        .map(|i| format!("{{{}r{i}}}", load.spec.prefix))
        .collect();
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    let mut round = 0usize;
    for_the_run(secs, |left| {
        sleep_ms(500, 1_500.min(left));
        let c = rand::random_range(0..clusters.len());
        let key = &keys[rand::random_range(0..keys.len())];
        let cluster = &mut clusters[c];
        let Ok(primary) = cluster.primary_of(key) else {
            return;
        };
        let done = match round % 3 {
            0 => cluster.failover(primary).map(|_| "failover"),
            1 => {
                let slot = cluster.slot(key).unwrap();
                let to = cluster.other_primary(primary).unwrap_or_default();
                match to {
                    Some(to) => cluster.migrate_slot(slot, to).map(|()| "slot migrated"),
                    None => Ok("no other primary"),
                }
            }
            // Once per cluster: the shard is left without a replica.
            _ => cluster.kill_primary(primary).map(|_| "primary killed"),
        };
        match done {
            Ok(what) => *faults.entry(what).or_default() += 1,
            Err(e) => {
                println!("   (a fault could not be made: {e})");
                *faults.entry("not made").or_default() += 1;
            }
        }
        round += 1;
    });
    let v = clients.finish();
    stop.store(true, Ordering::Relaxed);
    probe.join().unwrap();
    println!("   faults: {faults:?}");
    println!(
        "   quarantine: {} of {} probe attempts refused with a node's vote `Restarted` (a grant by a primary the probe had not seen)",
        quarantined.load(Ordering::Relaxed),
        probed.load(Ordering::Relaxed)
    );
    let f = load.report(&v);
    assert_safe(&v, &f);
    // The guard must have seen the promotions: every failover and kill
    // puts a primary the clients have not seen in charge of a shard (the
    // probe's names span every shard; the load's, one to three). A kill
    // on loopback may lose nothing (replication is that fast), so what is
    // asserted is the guard tripping, not a loss: `Restarted` votes, of
    // the load's clients or the probe.
    let promotions = faults.get("failover").copied().unwrap_or(0)
        + faults.get("primary killed").copied().unwrap_or(0);
    let refusals = v.quarantined_votes as u64 + quarantined.load(Ordering::Relaxed);
    if promotions > 0 {
        assert!(
            refusals > 0,
            "{promotions} promotions, and the restart guard never refused a node"
        );
    }
    // Whatever a fault left behind expires with its TTL.
    std::thread::sleep(load.spec.ttl + Duration::from_secs(1));
    for (c, cluster) in clusters.iter().enumerate() {
        for (port, keys) in cluster.keys_per_shard().unwrap() {
            assert_eq!(
                keys, 0,
                "cluster {c}: keys left on the primary on port {port}"
            );
        }
    }
    assert!(round >= 3, "only {round} faults in the run");
}

fn compose_chaos(secs: Duration) {
    use compose::{Compose, PORTS, docker_or_skip};
    if let Err(reason) = docker_or_skip() {
        println!("   SKIPPED the compose chaos scenario: {reason}");
        eprintln!("SKIPPED the compose chaos scenario: {reason}");
        return;
    }
    let project = format!("redquorumchaos{}", std::process::id());
    let compose = Compose::up(&project);
    let urls: Vec<String> = PORTS
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let register = servers(1);
    // At least long enough for each kind of fault twice: docker is slow.
    let run = secs.max(Duration::from_secs(30));
    let mut load = Load::with_nodes("compose", urls.clone(), register, run);
    // Through docker's port forwarding: slower than loopback.
    load.spec.node_timeout = Duration::from_millis(200);
    load.spec.ttl = Duration::from_secs(2);
    let clients = load.start(|_| urls.clone());
    let docker = |args: &[&str]| {
        let ok = Command::new("docker")
            .args(args)
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "docker {args:?} failed");
    };
    let mut faults = Vec::new();
    let mut round = 0;
    for_the_run(run, |left| {
        sleep_ms(100, 400.min(left));
        let service = format!("redis{}", rand::random_range(1..=5));
        let container = compose.container(&service);
        match round % 3 {
            0 => {
                compose.run(&["kill", &service]);
                compose.run(&["start", &service]);
                faults.push(format!("kill+start {service}"));
            }
            1 => {
                compose.run(&["pause", &service]);
                sleep_ms(200, 800);
                compose.run(&["unpause", &service]);
                faults.push(format!("pause {service}"));
            }
            _ => {
                docker(&["network", "disconnect", &compose.network(), &container]);
                sleep_ms(200, 800);
                docker(&["network", "connect", &compose.network(), &container]);
                faults.push(format!("disconnect {service}"));
            }
        }
        round += 1;
    });
    let v = clients.finish();
    println!("   faults: {}", faults.join(", "));
    let f = load.report(&v);
    assert_safe(&v, &f);
    assert!(round >= 3, "only {round} faults in the run");
    drop(compose);
}

// ---------------------------------------------------------------------------
// The load

/// The client processes' settings, and the register they share.
pub(crate) struct Load {
    pub(crate) spec: Spec,
    register: LocalServers,
    processes: usize,
    /// How many holders of a resource at once the checker allows: 1, or a
    /// semaphore's permits.
    capacity: usize,
}

impl Load {
    /// Two processes of six tasks on three resources, TTL 1 s, node timeout
    /// 50 ms, restart guard on, a register of its own.
    fn new(name: &str, servers: &LocalServers, run: Duration) -> Load {
        Load::with_nodes(name, servers.urls(), common::servers(1), run)
    }

    /// `new` for the scenario `fault` with locks of `kind`. Sets of
    /// resources are drawn from five, so that some are disjoint and held at
    /// once.
    pub(crate) fn of(kind: Kind, fault: &str, servers: &LocalServers, run: Duration) -> Load {
        Load::of_nodes(kind, fault, servers.urls(), run)
    }

    /// `of`, the clients given `nodes` (proxies in front of a set of servers',
    /// say).
    fn of_nodes(kind: Kind, fault: &str, nodes: Vec<String>, run: Duration) -> Load {
        let mut load = Load::with_nodes(&kind.named(fault), nodes, common::servers(1), run);
        load.spec.kind = kind;
        if kind == Kind::Multi {
            load.spec.resources = 5;
        }
        if matches!(kind, Kind::Semaphore | Kind::Mixed) {
            load.capacity = load.spec.permits as usize;
        }
        load
    }

    fn with_nodes(name: &str, nodes: Vec<String>, register: LocalServers, run: Duration) -> Load {
        Load {
            spec: Spec {
                kind: Kind::Mutex,
                nodes,
                register: register.port(0),
                tasks: 6,
                resources: 3,
                run,
                ttl: Duration::from_secs(1),
                node_timeout: Duration::from_millis(50),
                hold_min_ms: 0,
                hold_ms: 5,
                pause_one_in: 0,
                cancel_one_in: 0,
                cancel_within: Duration::from_millis(2),
                extend_one_in: 4,
                restart_guard: true,
                wake_on_release: true,
                retry_delay: Duration::from_millis(20),
                retry_jitter: Duration::from_millis(15),
                retry_count: 3,
                wait: None,
                fence_floor: true,
                permits: 2,
                first: First::Lock,
                prefix: format!("chaos:{name}:"),
                name: String::new(),
                history: String::new(),
            },
            register,
            processes: 2,
            capacity: 1,
        }
    }

    /// Starts the client processes on every node of `servers`.
    pub(crate) fn start_all(&self, servers: &LocalServers) -> Clients {
        let urls = servers.urls();
        self.start(|_| urls.clone())
    }

    /// Starts the client processes; process `p` is given `nodes(p)`.
    fn start(&self, nodes: impl Fn(usize) -> Vec<String>) -> Clients {
        let dir = std::env::temp_dir().join(format!(
            "redquorum-chaos-{}-{}",
            std::process::id(),
            self.spec.prefix.replace(':', "_")
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let children = (0..self.processes)
            .map(|p| {
                spawn(
                    &dir,
                    Spec {
                        nodes: nodes(p),
                        name: format!("p{p}"),
                        ..self.spec.clone()
                    },
                )
            })
            .collect();
        Clients {
            children,
            long_lived: self.processes,
            dir,
            limit: Instant::now() + self.spec.run + Duration::from_secs(60),
            started: now_ns(),
            capacity: self.capacity,
        }
    }

    /// Starts one more client process on `nodes` while the others run, a
    /// newcomer: named `name`, with `tasks` tasks, doing `first` first, for
    /// `life` (from its start). Its history is checked with theirs.
    pub(crate) fn join(
        &self,
        clients: &mut Clients,
        nodes: &[String],
        name: &str,
        first: First,
        tasks: usize,
        life: Duration,
    ) {
        let spec = Spec {
            nodes: nodes.to_vec(),
            name: name.to_owned(),
            tasks,
            run: life,
            first,
            ..self.spec.clone()
        };
        clients.children.push(spawn(&clients.dir, spec));
    }

    /// Prints the figures of a run and returns the lost updates.
    pub(crate) fn report(&self, v: &Verdict) -> Figures {
        let (writes, lost_updates) = self.lost_updates(&v.writes, |r| {
            self.read_register(&["GET", &client::register_key(&self.spec.prefix, r)])
        });
        let (fenced_writes, fenced_lost_updates) = self.lost_updates(&v.fenced_writes, |r| {
            let key = client::fenced_key(&self.spec.prefix, r);
            self.read_register(&["HGET", &key, "value"])
        });
        let s = &self.spec;
        println!(
            "   load: {} locks, {} processes x {} tasks, {} resources, TTL {} ms, node timeout {} ms, restart guard {}",
            s.kind.name(),
            self.processes,
            s.tasks,
            s.resources,
            s.ttl.as_millis(),
            s.node_timeout.as_millis(),
            if s.restart_guard { "on" } else { "off" }
        );
        println!(
            "   lock() calls {}: acquired {}, failed {} {:?}, cancelled {}",
            v.calls,
            v.acquisitions,
            v.failures.values().sum::<usize>(),
            v.failures,
            v.cancelled
        );
        if s.restart_guard {
            println!(
                "   restart guard: {} failed lock() calls refused by quarantined nodes, {} Restarted votes",
                v.quarantined_calls, v.quarantined_votes
            );
        }
        let intervals: usize = v.intervals.values().map(Vec::len).sum();
        println!(
            "   holding intervals: {intervals}, overlapping pairs of one owner's holds (nested): {}; most holders of a resource at once: {} (allowed: {}); overlapping readers: {}",
            v.nested, v.most_at_once, self.capacity, v.shared_overlaps
        );
        if s.kind == Kind::Rwlock {
            let all: Vec<&crate::history::Interval> = v.intervals.values().flatten().collect();
            let writes = all.iter().filter(|i| !i.is_shared()).count();
            println!(
                "   read-write: {} reader intervals, {writes} writer intervals",
                all.len() - writes
            );
        }
        println!(
            "   acquire latency p50 {:.2} ms, p99 {:.2} ms; longest time without an acquisition {:.0} ms",
            ms(v.latency(0.5)),
            ms(v.latency(0.99)),
            ms(v.longest_gap(v.window.0, v.window.1)),
        );
        println!("   releases: {:?}", v.releases);
        println!(
            "   register: {writes} writes, {lost_updates} lost updates, {} writes after the writer's validity",
            v.late_writes
        );
        let worst = v.violations.iter().map(|x| x.overlap()).max();
        println!(
            "   VIOLATIONS: {}{}",
            v.violations.len(),
            worst.map_or(String::new(), |w| format!(
                " (longest overlap {:.1} ms)",
                ms(w)
            ))
        );
        for x in v.violations.iter().take(3) {
            println!(
                "     {}: {} held {:.1} ms, {} held {:.1} ms, both for {:.1} ms",
                x.resource,
                x.first.owner,
                ms(Duration::from_nanos(x.first.end - x.first.start)),
                x.second.owner,
                ms(Duration::from_nanos(x.second.end - x.second.start)),
                ms(x.overlap())
            );
        }
        if s.kind == Kind::Mixed {
            let (held, changes) = kinds_held(v);
            println!(
                "   kinds on one name: holds by kind {held:?}; a name held by one kind, then another: {changes} times"
            );
        }
        print_idle(v, s.resources);
        if matches!(s.kind, Kind::Fenced | Kind::Mixed) {
            println!(
                "   fenced register: {fenced_writes} writes accepted, {fenced_lost_updates} lost updates; stale tokens refused: {} writes, {} reads",
                v.refused_writes, v.refused_reads
            );
            println!(
                "   fencing tokens ({}): {} acquisitions with a token; FENCE VIOLATIONS (acquired in a row, token not greater): {}",
                if s.fence_floor {
                    "on the wall clock's floor"
                } else {
                    "counters alone"
                },
                v.fenced,
                v.fence_violations.len()
            );
            let at = |ns: u64| ms(Duration::from_nanos(ns.saturating_sub(v.window.0)));
            for x in v.fence_violations.iter().take(3) {
                println!(
                    "     {}: {} token {} acquired at {:.3} ms (held to {:.3}), then {} token {} at {:.3} ms",
                    x.resource,
                    x.first.owner,
                    x.first.fence.unwrap_or_default(),
                    at(x.first.start),
                    at(x.first.end),
                    x.second.owner,
                    x.second.fence.unwrap_or_default(),
                    at(x.second.start)
                );
            }
        }
        Figures {
            lost_updates,
            fenced_lost_updates,
            kind: s.kind,
            intervals,
        }
    }

    /// The writes logged to a register (`logged`, per resource) and the
    /// updates lost: logged writes beyond the final value, `value(resource)`.
    fn lost_updates(
        &self,
        logged: &BTreeMap<String, u64>,
        value: impl Fn(&str) -> u64,
    ) -> (u64, u64) {
        let mut writes = 0;
        let mut lost = 0;
        for r in 0..self.spec.resources {
            let resource = format!("r{r}");
            let logged = logged.get(&resource).copied().unwrap_or(0);
            writes += logged;
            lost += logged.saturating_sub(value(&resource));
        }
        (writes, lost)
    }

    /// A number the register node answers to `args` (0 for none).
    fn read_register(&self, args: &[&str]) -> u64 {
        match command(self.register.port(0), args).expect("register") {
            Reply::Bulk(Some(b)) => String::from_utf8(b).unwrap().parse().unwrap(),
            _ => 0,
        }
    }
}

pub(crate) struct Figures {
    /// Of the plain register.
    lost_updates: u64,
    /// Of the fenced register.
    fenced_lost_updates: u64,
    kind: Kind,
    /// Holding intervals logged, on every resource.
    intervals: usize,
}

/// Starts the client process of `spec` (its history file in `dir`, named
/// after it).
fn spawn(dir: &std::path::Path, spec: Spec) -> (Child, PathBuf) {
    let exe = std::env::current_exe().expect("current exe");
    let history = dir.join(format!("{}.history", spec.name));
    let spec = Spec {
        history: history.to_str().unwrap().to_owned(),
        ..spec
    };
    let child = Command::new(&exe)
        .env(CLIENT, spec.encode())
        .spawn()
        .expect("cannot start a client process");
    (child, history)
}

/// The running client processes of a scenario.
pub(crate) struct Clients {
    children: Vec<(Child, PathBuf)>,
    /// The processes started with the load; those after them joined it
    /// later ([`Load::join`]).
    long_lived: usize,
    dir: PathBuf,
    limit: Instant,
    started: u64,
    /// See [`Load::capacity`].
    capacity: usize,
}

impl Clients {
    /// Waits for every client (killing one that outlives the run by a
    /// minute) and checks their histories together.
    fn finish(self) -> Verdict {
        self.finish_with_newcomers().0
    }

    /// `finish`, and the histories of the processes that joined the load
    /// later ([`Load::join`]) checked alone: their own figures.
    pub(crate) fn finish_with_newcomers(mut self) -> (Verdict, Verdict) {
        let mut events = Vec::new();
        let mut newcomers = Vec::new();
        let long_lived = self.long_lived;
        for (p, (child, history)) in self.children.iter_mut().enumerate() {
            let status = loop {
                if let Some(status) = child.try_wait().unwrap() {
                    break status;
                }
                if Instant::now() > self.limit {
                    let _ = child.kill();
                    panic!("a client process did not finish within a minute of its run");
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            assert!(status.success(), "a client process failed: {status}");
            let text = std::fs::read_to_string(&*history).expect("history file");
            let lines = text.lines().map(|l| Event::parse(l).unwrap());
            if p >= long_lived {
                let lines: Vec<Event> = lines.collect();
                newcomers.extend(lines.iter().cloned());
                events.extend(lines);
            } else {
                events.extend(lines);
            }
        }
        let window = (self.started, now_ns());
        let mut v = Verdict::check_at_most(events, self.capacity);
        v.window = window;
        let mut n = Verdict::check_at_most(newcomers, self.capacity);
        n.window = window;
        (v, n)
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for (child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// ---------------------------------------------------------------------------
// Helpers

/// No two holders at once, something acquired, and no lost update unless a
/// write completed after its writer's validity: a client stalled for a
/// quarter of the TTL between its check and its write, a pause no lock
/// without fencing can cover (reported, and then not held against the lock).
///
/// And the load did what its kind is about: reentrant owners nested holds
/// (overlaps the checker let pass), sets held 2–3 resources per lock; and
/// where no task holds a resource twice, no owner overlapped itself.
///
/// Fenced locks: every interval carries a token, the tokens grow in acquire
/// order, and the fenced register lost no update, late writes or not.
pub(crate) fn assert_safe(v: &Verdict, f: &Figures) {
    assert!(v.acquisitions > 0, "nothing was acquired");
    match f.kind {
        Kind::Reentrant => assert!(v.nested > 0, "no hold of an owner overlapped another"),
        Kind::Mutex | Kind::Multi | Kind::Fenced => {
            assert_eq!(v.nested, 0, "a task overlapped its own non-reentrant lock")
        }
        Kind::Semaphore => assert!(
            v.most_at_once >= v.permits.min(2),
            "never {} holders of a semaphore at once ({} at most)",
            v.permits.min(2),
            v.most_at_once
        ),
        Kind::Mixed => {
            let (held, changes) = kinds_held(v);
            for kind in ["exclusive", "fenced", "reentrant", "reader", "permit"] {
                assert!(
                    held.contains_key(kind),
                    "no {kind} holder in the mixed load"
                );
            }
            assert!(changes > 0, "no name changed kind between holders");
        }
        Kind::Rwlock => {
            assert_eq!(v.nested, 0, "a task overlapped its own lock");
            assert!(v.shared_overlaps > 0, "readers never overlapped");
            let writes = v
                .intervals
                .values()
                .flatten()
                .filter(|i| !i.is_shared())
                .count();
            assert!(writes > 0, "no writer got in");
        }
    }
    if f.kind == Kind::Fenced {
        assert_eq!(v.fenced, f.intervals, "fenced locks without a token");
    }
    if matches!(f.kind, Kind::Fenced | Kind::Mixed) {
        assert!(
            v.fence_violations.is_empty(),
            "{} fence violations",
            v.fence_violations.len()
        );
        assert_eq!(
            f.fenced_lost_updates, 0,
            "lost updates on the fenced register"
        );
    }
    if f.kind == Kind::Multi {
        assert!(
            f.intervals >= 2 * v.acquisitions,
            "{} intervals for {} sets of 2-3 resources",
            f.intervals,
            v.acquisitions
        );
    }
    assert!(
        v.violations.is_empty(),
        "{} safety violations",
        v.violations.len()
    );
    assert!(
        f.lost_updates == 0 || v.late_writes > 0,
        "{} lost updates with no two holders at once and no late write",
        f.lost_updates
    );
}

/// The holds of a run by kind (`exclusive`: a mutex or a writer;
/// `fenced`; `reentrant`; `reader`; `permit`: a semaphore's), and how
/// often a resource's next holder (in the order of the starts) was of
/// another kind than the one before.
fn kinds_held(v: &Verdict) -> (BTreeMap<&'static str, usize>, usize) {
    let kind = |i: &crate::history::Interval| match (i.fence, i.class()) {
        (Some(_), _) => "fenced",
        (None, Class::Exclusive) => "exclusive",
        (None, Class::Reentrant) => "reentrant",
        (None, Class::Reader) => "reader",
        (None, Class::Permit) => "permit",
    };
    let mut held = BTreeMap::new();
    let mut changes = 0;
    for intervals in v.intervals.values() {
        for i in intervals {
            *held.entry(kind(i)).or_default() += 1;
        }
        changes += intervals
            .windows(2)
            .filter(|w| kind(&w[0]) != kind(&w[1]))
            .count();
    }
    (held, changes)
}

/// Prints the idle capacity of a run (`Verdict::idle`) over `resources`.
fn print_idle(v: &Verdict, resources: usize) {
    let idle = v.idle();
    let run = v.window.1.saturating_sub(v.window.0) as f64;
    let total = idle.total();
    let longest = idle.longest().map_or(String::new(), |(key, a, b)| {
        format!(
            ", longest {:.0} ms (on {key}, {:.1} s into the run)",
            ms(Duration::from_nanos(b - a)),
            a.saturating_sub(v.window.0) as f64 / 1e9
        )
    });
    println!(
        "   idle capacity: room for a waiter while it waited, {:.0} ms in all ({:.1}% of the run per resource; {:.1}% of the {:.1} s waited by {} calls), {} stretches, p50 {:.1} ms, p99 {:.0} ms, {} over 250 ms{longest}",
        ms(total),
        100.0 * total.as_nanos() as f64 / (run * resources.max(1) as f64).max(1.0),
        100.0 * total.as_secs_f64() / idle.waited.as_secs_f64().max(1e-9),
        idle.waited.as_secs_f64(),
        idle.waits,
        idle.stretches.len(),
        ms(idle.quantile(0.5)),
        ms(idle.quantile(0.99)),
        idle.longer_than(Duration::from_millis(250)),
    );
}

/// No violation first (safety before liveness), then no stretch of idle
/// capacity over `bound` (`assert_idle`), then the rest of `assert_safe`.
pub(crate) fn assert_safe_and_idle(v: &Verdict, f: &Figures, bound: Duration) {
    assert!(
        v.violations.is_empty(),
        "{} safety violations",
        v.violations.len()
    );
    assert_idle(v, bound);
    assert_safe(v, f);
}

/// No stretch of idle capacity (`Verdict::idle`) longer than `bound`: a
/// waiter never sleeps for long while its resource has room for it.
pub(crate) fn assert_idle(v: &Verdict, bound: Duration) {
    let idle = v.idle();
    let over: Vec<String> = idle
        .stretches
        .iter()
        .filter(|(_, a, b)| b - a > bound.as_nanos() as u64)
        .map(|(key, a, b)| {
            format!(
                "{key} {:.0} ms at {:.1} s",
                ms(Duration::from_nanos(b - a)),
                a.saturating_sub(v.window.0) as f64 / 1e9
            )
        })
        .collect();
    if !over.is_empty() {
        println!(
            "   IDLE: {} stretches over the bound of {} ms: {}",
            over.len(),
            bound.as_millis(),
            over.iter().take(8).cloned().collect::<Vec<_>>().join(", ")
        );
        let longest = idle.longest().expect("a stretch");
        explain_stretch(v, longest);
    }
    assert!(
        over.is_empty(),
        "{} stretches of idle capacity over {} ms",
        over.len(),
        bound.as_millis()
    );
}

/// Prints who waited during the idle stretch `(key, from, to)`, and the
/// holders of its resources just before and after it: what a reader of a
/// failed run needs to tell a lost wake-up from a slow machine.
fn explain_stretch(v: &Verdict, (key, from, to): &(String, u64, u64)) {
    let at = |ns: u64| ns.saturating_sub(v.window.0) as f64 / 1e3 / 1e6;
    let names: Vec<&str> = key.split(',').collect();
    let waiters: Vec<String> = v
        .waits
        .iter()
        .filter(|w| w.resources.iter().any(|r| names.contains(&r.as_str())))
        .filter(|w| w.start < *to && w.end > *from)
        .take(8)
        .map(|w| {
            format!(
                "{} on {} {:.3}-{:.3} s {}",
                w.class.name(),
                w.resources.join(","),
                at(w.start),
                at(w.end),
                w.outcome
            )
        })
        .collect();
    println!(
        "     the longest, {key} {:.3}-{:.3} s: waiters {waiters:?}",
        at(*from),
        at(*to)
    );
    for name in names {
        let intervals = v.intervals.get(name).map_or(&[][..], Vec::as_slice);
        let before = intervals
            .iter()
            .filter(|i| i.start <= *from)
            .max_by_key(|i| i.end);
        let after = intervals.iter().find(|i| i.start >= *to);
        let show = |i: Option<&crate::history::Interval>| {
            i.map_or("none".to_owned(), |i| {
                let fenced = if i.fence.is_some() { " (fenced)" } else { "" };
                format!("{}{fenced} {:.3}-{:.3} s", i.owner, at(i.start), at(i.end))
            })
        };
        println!(
            "     {name}: the last holder before it {}, the next after it {}",
            show(before),
            show(after)
        );
    }
}

/// One step of a partition scenario, `left` ms before its faults stop:
/// a pause of 200–800 ms, then one or two of the nodes behind `proxies`
/// cut off for 0.3–1.5 s, their bytes swallowed or held (`hold`), then
/// healed. Returns whether they were held, and when the cut began and
/// ended; `None` when too little time was left to heal before the load
/// ends (a client process that exits while its node is cut off takes its
/// cleanup with it).
pub(crate) fn partition_once(proxies: &[Proxy], left: u64) -> Option<(bool, u64, u64)> {
    let pause = rand::random_range(200..800);
    std::thread::sleep(Duration::from_millis(pause));
    let left = left.checked_sub(pause + 300)?;
    let nodes = crate::pick(proxies.len(), rand::random_range(1..=2));
    let hold = rand::random_bool(0.5);
    for &i in &nodes {
        if hold {
            proxies[i].hold();
        } else {
            proxies[i].cut();
        }
    }
    let from = now_ns();
    // Sometimes past the second after which a silent connection is
    // replaced.
    sleep_ms(300, 1_500.min(left));
    for &i in &nodes {
        proxies[i].heal();
    }
    Some((hold, from, now_ns()))
}

/// Runs `step` until a second before the load ends; `step` is told how many
/// ms are left. The faults then stop, so that the run ends healed.
pub(crate) fn for_the_run(run: Duration, mut step: impl FnMut(u64)) {
    let end = Instant::now() + run.saturating_sub(Duration::from_secs(1));
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        step(left.as_millis() as u64);
    }
}

/// Sleeps a random time in `[low, high)` ms (`low` if the range is empty).
pub(crate) fn sleep_ms(low: u64, high: u64) {
    let ms = if high > low {
        rand::random_range(low..high)
    } else {
        low
    };
    std::thread::sleep(Duration::from_millis(ms));
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What [`keys_left`] found on the servers' nodes after a run.
struct KeysLeft {
    /// Keys still there: lock keys (of any layout: a string, a reentrant
    /// owner's, a semaphore's or the readers' hash), and auxiliary keys
    /// that outlived their bound (see [`expires_within`]).
    left: usize,
    /// Auxiliary keys there after the run that went by themselves within
    /// their bound.
    expired: usize,
}

/// Which keys under `prefix` are left on the servers' nodes, after
/// waiting up to 2 s for background releases to land: a lock key must not
/// stay. The keys that live beside a lock key and are no lock
/// ([`expires_within`]) must not stay either, but one that a waiter's lost
/// or late request left behind is given its own bounded life to expire.
/// Whether `key` is a client's record of who it is, `<prefix>who:<id>`
/// (12 hex digits; see `redquorum::Who`).
fn is_taker_record(prefix: &str, key: &str) -> bool {
    key.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix("who:"))
        .is_some_and(|id| id.len() == 12 && id.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The PTTL of `key` on the node at `port` (-1: no expiry; -2: gone).
fn pttl_ms(port: u16, key: &str) -> i64 {
    match command(port, &["PTTL", key]) {
        Ok(Reply::Int(ms)) => ms,
        other => panic!("PTTL {key}: {other:?}"),
    }
}

fn keys_left(c: &LocalServers, prefix: &str, ttl: Duration) -> KeysLeft {
    let pattern = format!("{prefix}*");
    let start = Instant::now();
    let mut auxiliary = std::collections::BTreeSet::new();
    loop {
        let names: Vec<(usize, String)> = (0..c.len())
            .flat_map(|i| match command(c.port(i), &["KEYS", &pattern]) {
                Ok(Reply::Array(Some(keys))) => keys.into_iter().map(move |k| (i, k)),
                other => panic!("KEYS on node {i}: {other:?}"),
            })
            .map(|(i, k)| match k {
                Reply::Bulk(Some(b)) => (i, String::from_utf8_lossy(&b).into_owned()),
                other => panic!("KEYS: {other:?}"),
            })
            // A fenced resource's counter is kept on purpose, without a
            // TTL (see `kinds::fenced`): no lock.
            .filter(|(_, k)| !k.ends_with(":fence"))
            // Nor is a client's record of who it is (`who`), which lives a
            // day; one without an expiry is counted as left.
            .filter(|(i, k)| !(is_taker_record(prefix, k) && pttl_ms(c.port(*i), k) > 0))
            .collect();
        let bounds: Vec<Option<Duration>> =
            names.iter().map(|(_, k)| expires_within(k, ttl)).collect();
        let locks = bounds.iter().filter(|b| b.is_none()).count();
        // Past the longest life an auxiliary key left now may have, and a
        // second for the node's expiry cycle.
        let patience =
            bounds.iter().flatten().max().copied().unwrap_or_default() + Duration::from_secs(1);
        auxiliary.extend(
            names
                .iter()
                .zip(&bounds)
                .filter(|(_, b)| b.is_some())
                .map(|(name, _)| name.clone()),
        );
        let waited = start.elapsed();
        if names.is_empty() || (locks > 0 && waited > Duration::from_secs(2)) || waited > patience {
            let expired: Vec<&(usize, String)> =
                auxiliary.iter().filter(|a| !names.contains(a)).collect();
            if !expired.is_empty() {
                println!(
                    "   auxiliary keys after the run, gone by themselves within {:.1} s: {expired:?}",
                    waited.as_secs_f64()
                );
            }
            if !names.is_empty() {
                println!("   keys left (node, key): {names:?}");
            }
            return KeysLeft {
                left: names.len(),
                expired: expired.len(),
            };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How long `key`, which lives beside a lock key and is no lock, may
/// outlive the last request that made it live (for a lock of `ttl`);
/// `None` for a lock key. Neither kind of auxiliary key holds anything, and
/// a waiter's leaving, which takes it away, is best effort (a node cut off
/// when the waiter got the lock never hears it), so each has a life of its
/// own:
/// * a waiters' queue (`<key>:waiters`, see `wait`) lives the
///   PTTL of the holder its last waiter saw plus 5 s: at most `ttl` + 5 s;
/// * a writer's intent (`<key>:intent`, see `kinds::rwlock`), which turns
///   new readers away on its node, lives a second past the readers' PTTL,
///   11 s at most (queue.lua's `refuse`), and only its own wait's attempts
///   renew it: a later wait, of any writer, is another name.
fn expires_within(key: &str, ttl: Duration) -> Option<Duration> {
    if key.ends_with(":waiters") {
        Some(ttl + Duration::from_secs(5))
    } else if key.ends_with(":intent") {
        Some(Duration::from_secs(11))
    } else {
        None
    }
}

/// Builds the clock-skewing preload library (`tests/support/clockskew.c`)
/// with the system's C compiler, once per run of this binary.
fn clockskew() -> PathBuf {
    let out = std::env::temp_dir().join(format!("redquorum-clockskew-{}.so", std::process::id()));
    if out.is_file() {
        return out;
    }
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/clockskew.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&out)
        .arg(&source)
        .arg("-ldl")
        .status()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `cc` ({e}): apt-get install -y gcc"));
    assert!(status.success(), "building {source:?} failed");
    out
}
