//! One client process of a chaos run: a few tasks that lock, use and
//! release a handful of resources until the run ends, logging what they
//! believed to their history file (see `history`).
//!
//! The critical section on a held lock is one of:
//! * a read-modify-write of the register of each resource it covers (read,
//!   wait `hold_min_ms..=hold_ms`, sometimes extend the lock, write plus
//!   one only while the lock has a quarter of its TTL left), then release;
//! * a pause (one in `pause_one_in`): sleep past the lock's validity, then
//!   release, which finds the lock gone. A fenced lock's holder reads the
//!   registers before the pause and writes them after it, as a holder that
//!   stalled inside its section would.
//!
//! A fenced lock's section also read-modify-writes the resource's fenced
//! register, a hash of a value and the highest token seen, through Lua
//! scripts that take the lock's token: the read refuses a token lower than
//! the highest seen, else records it as seen and returns the value; the
//! write refuses a lower token, else stores the token and the value read
//! plus one. The read takes the token too: with a plain read, a stale
//! holder's write lands between the next holder's read and write (the
//! register has seen no newer token yet) and that holder's write then
//! overwrites it.
//!
//! What a task locks depends on the `kind` of the run:
//! * `mutex`: `lock()` on one random resource.
//! * `reentrant`: each task is an owner (its name is the owner id) and
//!   takes an outer hold on one random resource. Half the time it then
//!   takes an inner hold with the same owner id, on the task itself or on a
//!   spawned one, runs the critical section under it and releases both:
//!   the inner hold first, or (half of those times) the outer hold first,
//!   so that the owner's belief goes on in the inner hold alone. Otherwise
//!   (or when the inner take fails) the section runs under the outer hold.
//!   Each hold logs its own interval, with the owner as its owner.
//! * `multi`: `lock_all()` on 2–3 distinct random resources, named in a
//!   random order and sometimes with one named twice; the critical section
//!   covers every resource of the set, and the hold logs one interval per
//!   resource.
//! * `fenced`: `lock().fenced()` on one random resource; its interval
//!   carries the lock's token (drawn on the wall clock's floor, unless the
//!   spec turns `fence_floor` off).
//! * `rwlock`: three calls in four read (`lock().shared()`, holding
//!   without the register; their intervals' owner is `<task>/r`, and the
//!   checker lets readers overlap), one in four write (the plain lock).
//! * `semaphore`: `lock().permits(k)` on one random resource; the section
//!   holds (sometimes extending) without the register, which several
//!   holders at once would race on by design. Its intervals' owner is
//!   `<task>/s` (a reentrant owner's, `<task>/o`): the checker tells the
//!   kinds apart by it (`history::Class`).
//! * `mixed`: each call draws one of the mutex, the reentrant lock, the
//!   fenced lock, the semaphore and the read-write lock, on the same
//!   resources as every other call: kinds that exclude each other.
//!
//! One `lock()` call in `cancel_one_in` (inner holds included) is dropped
//! after a random time below `cancel_within` (2 ms in most runs: mostly in
//! its first attempt) instead of awaited. Every call but a reentrant
//! owner's inner take logs its wait (`Event::Waited`): from the call to its
//! return or drop, on which resources, for which kind of hold; the checker
//! measures the idle capacity from them.
//!
//! The options of the `Redlock` (retry delay, jitter and count, wait
//! timeout, waking on release) come with the spec: 20 ± 15 ms, 3 retries,
//! the TTL in most runs.
//!
//! What a process does before its tasks start is its `first` step (see
//! [`First`]): nothing, a read of every resource (`status()`), or a read,
//! an idle wait past the TTL and a second read; each read is logged. The
//! newcomers of the `come_and_go` scenarios use the last two.

use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Error, Lock, LockRequest, NodeFailure, Redlock};

use crate::history::{Access, Class, Event, Interval, now_ns};

/// What one client process does; handed over in one environment variable.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The kind of lock the tasks take, and how (see the module doc).
    pub kind: Kind,
    pub nodes: Vec<String>,
    /// The port of the register's own Redis node.
    pub register: u16,
    pub tasks: usize,
    pub resources: usize,
    pub run: Duration,
    pub ttl: Duration,
    pub node_timeout: Duration,
    /// A holder holds `hold_min_ms..=hold_ms`, at random.
    pub hold_min_ms: u64,
    pub hold_ms: u64,
    /// 0: never.
    pub pause_one_in: u32,
    pub cancel_one_in: u32,
    /// A cancelled call is dropped after a random time below this.
    pub cancel_within: Duration,
    pub extend_one_in: u32,
    pub restart_guard: bool,
    /// Off: waiters poll every `retry_delay` ± `retry_jitter`, as most
    /// Redlock clients do.
    pub wake_on_release: bool,
    /// `Builder::retry_delay`, `retry_jitter` and `retry_count`.
    pub retry_delay: Duration,
    pub retry_jitter: Duration,
    pub retry_count: u32,
    /// `Builder::wait_timeout`: `None` waits up to the TTL.
    pub wait: Option<Duration>,
    /// `Builder::fence_time_floor`: off, tokens are plain counts.
    pub fence_floor: bool,
    /// The permits a semaphore's holders ask for.
    pub permits: u32,
    /// What the process does before its tasks start.
    pub first: First,
    pub prefix: String,
    /// Names this process in the history.
    pub name: String,
    pub history: String,
}

impl Spec {
    pub fn encode(&self) -> String {
        assert!(self.hold_min_ms <= self.hold_ms, "holds of {self:?}");
        [
            format!("kind={}", self.kind.name()),
            // Not commas: a Sentinel-managed node's URL lists its
            // sentinels with them.
            format!("nodes={}", self.nodes.join("|")),
            format!("register={}", self.register),
            format!("tasks={}", self.tasks),
            format!("resources={}", self.resources),
            format!("run_ms={}", self.run.as_millis()),
            format!("ttl_ms={}", self.ttl.as_millis()),
            format!("node_timeout_ms={}", self.node_timeout.as_millis()),
            format!("hold_min_ms={}", self.hold_min_ms),
            format!("hold_ms={}", self.hold_ms),
            format!("pause_one_in={}", self.pause_one_in),
            format!("cancel_one_in={}", self.cancel_one_in),
            format!("cancel_within_us={}", self.cancel_within.as_micros()),
            format!("extend_one_in={}", self.extend_one_in),
            format!("restart_guard={}", self.restart_guard),
            format!("wake_on_release={}", self.wake_on_release),
            format!("retry_delay_ms={}", self.retry_delay.as_millis()),
            format!("retry_jitter_ms={}", self.retry_jitter.as_millis()),
            format!("retry_count={}", self.retry_count),
            format!("wait_ms={}", self.wait.map_or(0, |w| w.as_millis())),
            format!("fence_floor={}", self.fence_floor),
            format!("permits={}", self.permits),
            format!("first={}", self.first.name()),
            format!("prefix={}", self.prefix),
            format!("name={}", self.name),
            format!("history={}", self.history),
        ]
        .join(";")
    }

    pub fn decode(s: &str) -> Spec {
        let get = |key: &str| {
            s.split(';')
                .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {key} in the client spec {s:?}"))
                .to_owned()
        };
        let n = |key: &str| -> u64 { get(key).parse().expect(key) };
        Spec {
            kind: Kind::parse(&get("kind")),
            nodes: get("nodes").split('|').map(str::to_owned).collect(),
            register: n("register") as u16,
            tasks: n("tasks") as usize,
            resources: n("resources") as usize,
            run: Duration::from_millis(n("run_ms")),
            ttl: Duration::from_millis(n("ttl_ms")),
            node_timeout: Duration::from_millis(n("node_timeout_ms")),
            hold_min_ms: n("hold_min_ms"),
            hold_ms: n("hold_ms"),
            pause_one_in: n("pause_one_in") as u32,
            cancel_one_in: n("cancel_one_in") as u32,
            cancel_within: Duration::from_micros(n("cancel_within_us")),
            extend_one_in: n("extend_one_in") as u32,
            restart_guard: get("restart_guard") == "true",
            wake_on_release: get("wake_on_release") == "true",
            retry_delay: Duration::from_millis(n("retry_delay_ms")),
            retry_jitter: Duration::from_millis(n("retry_jitter_ms")),
            retry_count: n("retry_count") as u32,
            wait: Some(n("wait_ms"))
                .filter(|&ms| ms > 0)
                .map(Duration::from_millis),
            fence_floor: get("fence_floor") == "true",
            permits: n("permits") as u32,
            first: First::parse(&get("first")),
            prefix: get("prefix"),
            name: get("name"),
            history: get("history"),
        }
    }
}

/// Runs the client described in `spec` to the end of its run, then writes
/// its history.
pub fn main(spec: Spec) {
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async {
        let redlock = Redlock::builder()
            .nodes(&spec.nodes)
            .key_prefix(spec.prefix.clone())
            .node_timeout(spec.node_timeout)
            .retry_count(spec.retry_count)
            .retry_delay(spec.retry_delay)
            .retry_jitter(spec.retry_jitter)
            .wait_timeout(spec.wait.unwrap_or(spec.ttl))
            .restart_guard(spec.restart_guard)
            .wake_on_release(spec.wake_on_release)
            .fence_time_floor(spec.fence_floor)
            .build()
            .expect("client Redlock");
        let register = redis::Client::open(format!("redis://127.0.0.1:{}", spec.register))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .expect("register node");
        let events = Arc::new(Mutex::new(Vec::new()));
        let spec = Arc::new(spec);
        let end = Instant::now() + spec.run;
        match spec.first {
            First::Lock => {}
            First::Read => read_all(&redlock, &spec, &events).await,
            First::Idle => {
                read_all(&redlock, &spec, &events).await;
                tokio::time::sleep(First::idle(spec.ttl)).await;
                read_all(&redlock, &spec, &events).await;
            }
        }
        let tasks: Vec<_> = (0..spec.tasks)
            .map(|t| {
                let task = Task {
                    redlock: redlock.clone(),
                    register: register.clone(),
                    spec: spec.clone(),
                    events: events.clone(),
                    name: format!("{}t{t}", spec.name),
                };
                tokio::spawn(task.run(end))
            })
            .collect();
        for task in tasks {
            task.await.expect("client task panicked");
        }
        // Cancelled acquisitions and dropped guards are released in the
        // background: wait for that work before the process exits (an
        // unreachable node is given up after the connect timeout plus the
        // node timeout).
        if !redlock.drain(Duration::from_secs(5)).await {
            eprintln!("{}: background releases still running at exit", spec.name);
        }
        let mut file = std::fs::File::create(&spec.history).expect("history file");
        for e in events.lock().unwrap().iter() {
            writeln!(file, "{e}").unwrap();
        }
    });
}

/// What a process does before its tasks lock (`Spec::first`): the
/// newcomers of the `come_and_go` scenarios meet the nodes through a read,
/// or meet them, wait past the TTL (over a restart, often) and meet them
/// again, before they take anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum First {
    /// Nothing: the tasks lock at once.
    Lock,
    /// A read of every resource (`Redlock::status`; an election's
    /// candidate reads `leader()` or `observe()`), then the tasks lock.
    Read,
    /// A read, an idle wait of [`First::idle`] (longer than the TTL),
    /// another read, then the tasks lock.
    Idle,
}

impl First {
    pub const ALL: [First; 3] = [First::Lock, First::Read, First::Idle];

    pub fn name(self) -> &'static str {
        match self {
            First::Lock => "lock",
            First::Read => "read",
            First::Idle => "idle",
        }
    }

    pub fn parse(s: &str) -> First {
        First::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .unwrap_or_else(|| panic!("no first step {s:?}"))
    }

    /// How long an idle process waits between its two reads, for locks of
    /// `ttl`: past the TTL, so that a key it saw may have expired.
    pub fn idle(ttl: Duration) -> Duration {
        ttl + Duration::from_millis(300)
    }
}

/// Reads every resource of the pool once (`Redlock::status`) and logs what
/// a majority of nodes said: `free`, `held`, or `unclear`.
async fn read_all(redlock: &Redlock, spec: &Spec, events: &Mutex<Vec<Event>>) {
    for r in 0..spec.resources {
        let status = redlock.status(&format!("r{r}")).await;
        let outcome = if status.holder().is_some() {
            "held"
        } else if status.is_free() {
            "free"
        } else {
            "unclear"
        };
        events.lock().unwrap().push(Event::Read {
            outcome: outcome.to_owned(),
        });
    }
}

/// What a client locks: its `kind` of lock, and how it uses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `lock(resource)`: one holder at a time.
    Mutex,
    /// `lock(resource).reentrant(owner)`: each task an owner, some of whose
    /// holds are nested.
    Reentrant,
    /// `lock_all(set)`: a set of resources, all or none.
    Multi,
    /// `lock(resource).fenced()`: the mutex, with a fencing token.
    Fenced,
    /// `lock(resource).permits(k)`: up to `k` holders at once; the section
    /// holds without writing the register (several holders at once would
    /// lose its updates by design).
    Semaphore,
    /// Three calls in four read (`lock(resource).shared()`, holding without
    /// writing the register, their intervals' owner `<task>/r`), one in
    /// four writes (the plain lock, writing the register).
    Rwlock,
    /// Each call draws one of [`Kind::MIXED`]: every kind on the same
    /// names at once (semaphores of `permits` permits), which exclude
    /// each other.
    Mixed,
}

impl Kind {
    pub const ALL: [Kind; 6] = [
        Kind::Mutex,
        Kind::Reentrant,
        Kind::Multi,
        Kind::Fenced,
        Kind::Semaphore,
        Kind::Rwlock,
    ];

    /// The kinds a mixed load draws from, one per call: a writer is the
    /// plain lock.
    pub const MIXED: [Kind; 5] = [
        Kind::Mutex,
        Kind::Reentrant,
        Kind::Fenced,
        Kind::Semaphore,
        Kind::Rwlock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Mixed => "mixed",
            Kind::Mutex => "mutex",
            Kind::Reentrant => "reentrant",
            Kind::Multi => "multi",
            Kind::Fenced => "fenced",
            Kind::Semaphore => "semaphore",
            Kind::Rwlock => "rwlock",
        }
    }

    /// What the clients do with it, for a scenario's description.
    pub fn about(self) -> &'static str {
        match self {
            Kind::Mutex => "plain locks",
            Kind::Reentrant => {
                "reentrant holds: each task an owner, half its holds with a nested one (some released after the outer)"
            }
            Kind::Multi => {
                "lock_all on sets of 2-3 of five resources, named in any order, sometimes one twice"
            }
            Kind::Fenced => {
                "fenced locks: tokens checked to grow per resource in acquire order; each section also read-modify-writes a register that refuses stale tokens"
            }
            Kind::Semaphore => {
                "semaphores of 2 permits: at most 2 holders of a resource at any instant, and 2 seen at once"
            }
            Kind::Rwlock => {
                "read-write locks, 3 reads in 4: no writer overlaps anyone, readers seen to overlap, writers get in"
            }
            Kind::Mixed => {
                "every kind on the same names at once, one drawn per call (mutex, reentrant, fenced, semaphore of 2, read-write): one kind's holders at a time, each by its own rule"
            }
        }
    }

    /// The name of the scenario `scenario` run with this kind: itself for
    /// the mutex, `<kind>_<scenario>` for the others.
    pub fn named(self, scenario: &str) -> String {
        match self {
            Kind::Mutex => scenario.to_owned(),
            _ => format!("{}_{scenario}", self.name()),
        }
    }

    fn parse(s: &str) -> Kind {
        Kind::ALL
            .into_iter()
            .chain([Kind::Mixed])
            .find(|k| k.name() == s)
            .unwrap_or_else(|| panic!("no lock kind {s:?}"))
    }
}

#[derive(Clone)]
struct Task {
    redlock: Redlock,
    register: redis::aio::MultiplexedConnection,
    spec: Arc<Spec>,
    events: Arc<Mutex<Vec<Event>>>,
    /// The task's name (`p0t3`): the owner of its intervals, and the owner
    /// id of its reentrant holds.
    name: String,
}

/// One hold as its holder believes it: from when `lock()` returned to the
/// validity deadline, moved by successful extensions (or to the release).
struct Holding {
    lock: Lock,
    begin: u64,
    deadline: u64,
    /// How it shares the resource: its interval's owner says it.
    class: Class,
}

impl Holding {
    fn new(lock: Lock, begin: u64, class: Class) -> Holding {
        Holding {
            begin,
            deadline: deadline(&lock),
            lock,
            class,
        }
    }

    /// Extends the lock by `ttl`; false when that failed.
    async fn extend(&mut self, ttl: Duration) -> bool {
        let extended = self.lock.extend(ttl).await.is_ok();
        if extended {
            self.deadline = deadline(&self.lock);
        }
        extended
    }
}

impl Task {
    fn log(&self, e: Event) {
        self.events.lock().unwrap().push(e);
    }

    /// One in `n` (never when `n` is 0).
    fn one_in(n: u32) -> bool {
        n > 0 && rand::random_range(0..n) == 0
    }

    async fn run(self, end: Instant) {
        while Instant::now() < end {
            let kind = match self.spec.kind {
                Kind::Mixed => Kind::MIXED[rand::random_range(0..Kind::MIXED.len())],
                kind => kind,
            };
            match kind {
                Kind::Mutex | Kind::Fenced => {
                    let on = [self.resource()];
                    let mut request = self.redlock.lock(&on[0], self.spec.ttl);
                    if kind == Kind::Fenced {
                        request = request.fenced();
                    }
                    if let Some(holding) = self.take(request, &on, Class::Exclusive).await {
                        self.hold(holding, &on).await;
                    }
                }
                Kind::Reentrant => self.reentrant().await,
                Kind::Multi => self.multi().await,
                Kind::Rwlock => {
                    let on = [self.resource()];
                    let shared = !Self::one_in(4);
                    let mut request = self.redlock.lock(&on[0], self.spec.ttl);
                    let mut class = Class::Exclusive;
                    if shared {
                        request = request.shared();
                        class = Class::Reader;
                    }
                    if let Some(holding) = self.take(request, &on, class).await {
                        self.hold(holding, &on).await;
                    }
                }
                Kind::Semaphore => {
                    let on = [self.resource()];
                    let request = self.redlock.lock(&on[0], self.spec.ttl);
                    let request = request.permits(self.spec.permits);
                    if let Some(holding) = self.take(request, &on, Class::Permit).await {
                        self.hold(holding, &on).await;
                    }
                }
                Kind::Mixed => unreachable!("a mixed load draws a kind per call"),
            }
        }
    }

    /// A random resource of the pool.
    fn resource(&self) -> String {
        format!("r{}", rand::random_range(0..self.spec.resources))
    }

    /// Awaits one `lock()` or `lock_all()` call on `on`, for a hold of
    /// `class` (or drops it after a random time below `cancel_within`, one
    /// in `cancel_one_in`), and logs how it ended and its wait.
    async fn take(&self, request: LockRequest<'_>, on: &[String], class: Class) -> Option<Holding> {
        self.take_as(request, Some(on), class).await
    }

    /// `take`; `on` is `None` for a reentrant owner's inner take, which
    /// never waits for another: its wait is not logged, and the cause of
    /// its failure says `inner/`.
    async fn take_as(
        &self,
        request: LockRequest<'_>,
        on: Option<&[String]>,
        class: Class,
    ) -> Option<Holding> {
        let start = now_ns();
        let waited = |outcome: &str| {
            let end = now_ns();
            if let Some(on) = on {
                self.log(Event::Waited {
                    resources: on.join(","),
                    class,
                    start,
                    end,
                    outcome: outcome.to_owned(),
                });
            }
            end
        };
        let result = if Self::one_in(self.spec.cancel_one_in) {
            let within = self.spec.cancel_within.as_micros().max(1) as u64;
            let after = Duration::from_micros(rand::random_range(0..within));
            match tokio::time::timeout(after, request).await {
                Ok(result) => result,
                Err(_) => {
                    waited("cancelled");
                    self.log(Event::Cancelled);
                    return None;
                }
            }
        } else {
            request.await
        };
        let end = waited(if result.is_ok() { "acquired" } else { "failed" });
        let latency_us = (end - start) / 1_000;
        let inner = on.is_none();
        match result {
            Ok(lock) => {
                self.log(Event::Acquired { latency_us });
                Some(Holding::new(lock, end, class))
            }
            Err(e) => {
                let cause = cause(&e);
                let votes = e.report().map_or(0, |r| {
                    r.failures()
                        .iter()
                        .filter(|(_, f)| matches!(f, NodeFailure::Restarted { .. }))
                        .count()
                });
                if votes > 0 {
                    self.log(Event::Quarantined {
                        votes: votes as u64,
                    });
                }
                self.log(Event::Failed {
                    cause: if inner {
                        format!("inner/{cause}")
                    } else {
                        cause
                    },
                    latency_us,
                });
                // Not a busy loop while the servers is down.
                tokio::time::sleep(Duration::from_millis(10)).await;
                None
            }
        }
    }

    /// A reentrant critical section: the task's outer hold, and half the
    /// time a nested one (see `nested`).
    async fn reentrant(&self) {
        let resource = self.resource();
        let request = self.redlock.lock(&resource, self.spec.ttl);
        let on = [resource.clone()];
        let request = request.reentrant(&self.name);
        let Some(mut outer) = self.take(request, &on, Class::Reentrant).await else {
            return;
        };
        if !Self::one_in(2) {
            return self.hold(outer, &[resource]).await;
        }
        if Self::one_in(self.spec.extend_one_in) {
            outer.extend(self.spec.ttl).await;
        }
        let nested = self.clone().nested(resource, outer, Self::one_in(2));
        if Self::one_in(2) {
            // The owner spans tasks: the inner hold is taken on another.
            tokio::spawn(nested).await.expect("nested hold panicked");
        } else {
            nested.await;
        }
    }

    /// Under the `outer` hold, takes an inner hold of the same owner and
    /// runs the critical section under it, then releases both: the inner
    /// first, or the outer first (`inner_last`), so that the owner's belief
    /// goes on in the inner hold alone. Without an inner hold the section
    /// runs under the outer one.
    async fn nested(self, resource: String, outer: Holding, inner_last: bool) {
        let resources = [resource];
        let request = self.redlock.lock(&resources[0], self.spec.ttl);
        let request = request.reentrant(&self.name);
        let Some(inner) = self.take_as(request, None, Class::Reentrant).await else {
            return self.hold(outer, &resources).await;
        };
        if inner_last {
            self.release(outer, &resources, false).await;
            self.hold(inner, &resources).await;
        } else {
            self.hold(inner, &resources).await;
            self.release(outer, &resources, false).await;
        }
    }

    /// A multi-resource critical section: 2–3 distinct resources of the
    /// pool, named in a random order, and one time in four with one of
    /// them twice; the lock names them sorted, once each.
    async fn multi(&self) {
        let pool = self.spec.resources;
        let k = rand::random_range(2..=3).min(pool);
        let mut names: Vec<String> = crate::pick(pool, k)
            .into_iter()
            .map(|i| format!("r{i}"))
            .collect();
        let mut set = names.clone();
        set.sort_unstable();
        if Self::one_in(4) {
            names.push(names[rand::random_range(0..k)].clone());
        }
        let request = self.redlock.lock_all(&names, self.spec.ttl);
        if let Some(holding) = self.take(request, &set, Class::Exclusive).await {
            assert_eq!(holding.lock.resource(), set.join(","), "named {names:?}");
            self.hold(holding, &set).await;
        }
    }

    /// The critical section on `resources`, then the release.
    async fn hold(&self, mut holding: Holding, resources: &[String]) {
        let paused = self.critical(&mut holding, resources).await;
        self.release(holding, resources, paused).await;
    }

    /// The critical section: read-modify-write the registers of each of
    /// `resources`, or pause; true when it paused.
    async fn critical(&self, holding: &mut Holding, resources: &[String]) -> bool {
        let ttl = self.spec.ttl;
        let pause = Self::one_in(self.spec.pause_one_in);
        if pause && holding.lock.fence().is_none() {
            tokio::time::sleep(ttl + ttl / 4).await;
            return true;
        }
        if matches!(holding.class, Class::Permit | Class::Reader) {
            // Held, extended now and then; no register (see `Kind`).
            let hold = rand::random_range(self.spec.hold_min_ms..=self.spec.hold_ms);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            if Self::one_in(self.spec.extend_one_in) {
                holding.extend(ttl).await;
            }
            return false;
        }
        let mut reads = Vec::new();
        for resource in resources {
            reads.push(self.read(resource, holding.lock.fence()).await);
        }
        if pause {
            // Stalled inside the section: the writes come after the
            // validity, and the fenced register is to refuse them.
            tokio::time::sleep(ttl + ttl / 4).await;
            for read in reads {
                self.write(holding, read).await;
            }
            return true;
        }
        let hold = rand::random_range(self.spec.hold_min_ms..=self.spec.hold_ms);
        tokio::time::sleep(Duration::from_millis(hold)).await;
        let mut valid = true;
        if Self::one_in(self.spec.extend_one_in) {
            valid = holding.extend(ttl).await;
        }
        for read in reads {
            if !valid || holding.lock.remaining() <= ttl / 4 {
                break;
            }
            self.write(holding, read).await;
        }
        false
    }

    /// Reads the register of `resource`, and with a fenced lock's `token`
    /// its fenced register (logging a refusal).
    async fn read(&self, resource: &str, token: Option<u64>) -> Read {
        let mut register = self.register.clone();
        let key = register_key(&self.spec.prefix, resource);
        let value: Option<u64> = register.get(&key).await.expect("register GET");
        let mut fenced = None;
        if let Some(token) = token {
            let read: i64 = FENCED_READ
                .key(fenced_key(&self.spec.prefix, resource))
                .arg(token)
                .invoke_async(&mut register)
                .await
                .expect("fenced register read");
            match u64::try_from(read) {
                Ok(value) => fenced = Some((token, value)),
                Err(_) => self.log(Event::Fenced {
                    resource: resource.to_owned(),
                    token,
                    access: Access::ReadRefused,
                }),
            }
        }
        Read {
            resource: resource.to_owned(),
            value: value.unwrap_or(0),
            fenced,
        }
    }

    /// Writes what `read` read plus one to the registers it read, and logs
    /// the writes.
    async fn write(&self, holding: &Holding, read: Read) {
        let mut register = self.register.clone();
        let key = register_key(&self.spec.prefix, &read.resource);
        let () = register
            .set(&key, read.value + 1)
            .await
            .expect("register SET");
        self.log(Event::Wrote {
            resource: read.resource.clone(),
            at: now_ns(),
            deadline: holding.deadline,
        });
        let Some((token, value)) = read.fenced else {
            return;
        };
        let accepted: bool = FENCED_WRITE
            .key(fenced_key(&self.spec.prefix, &read.resource))
            .arg(token)
            .arg(value + 1)
            .invoke_async(&mut register)
            .await
            .expect("fenced register write");
        self.log(Event::Fenced {
            resource: read.resource,
            token,
            access: if accepted {
                Access::Wrote
            } else {
                Access::Refused
            },
        });
    }

    /// Releases the hold and logs its interval on each of `resources`.
    async fn release(&self, holding: Holding, resources: &[String], paused: bool) {
        let Holding {
            lock,
            begin,
            deadline,
            class,
        } = holding;
        let owner = format!("{}{}", self.name, class.suffix());
        let fence = lock.fence();
        let released = now_ns();
        let outcome = match lock.release().await {
            Ok(()) => "ok".to_owned(),
            Err(e) => cause(&e),
        };
        for resource in resources {
            self.log(Event::Held {
                resource: resource.clone(),
                interval: Interval {
                    owner: owner.clone(),
                    start: begin,
                    end: released.min(deadline),
                    paused,
                    fence,
                },
            });
        }
        self.log(Event::Released { outcome });
    }
}

/// What a critical section read of one resource: the register's value, and
/// with a fenced lock the token it read the fenced register with and that
/// register's value (`None` if it refused the token).
struct Read {
    resource: String,
    value: u64,
    fenced: Option<(u64, u64)>,
}

/// The key of the register of `resource`, under the run's `prefix`.
pub fn register_key(prefix: &str, resource: &str) -> String {
    format!("register:{prefix}{resource}")
}

/// The key of the fenced register of `resource`: a hash of the `value` and
/// the highest token seen (`fence`).
pub fn fenced_key(prefix: &str, resource: &str) -> String {
    format!("fenced:{prefix}{resource}")
}

/// The fenced register's read: -1 for a token lower than the highest seen;
/// else the token becomes the highest seen and the value is returned.
static FENCED_READ: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if tonumber(ARGV[1]) < seen then
  return -1
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1])
return tonumber(redis.call('HGET', KEYS[1], 'value') or '0')",
    )
});

/// The fenced register's write: 0 for a token lower than the highest seen;
/// else the token and the value are stored, 1.
static FENCED_WRITE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
if tonumber(ARGV[1]) < tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') then
  return 0
end
redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2])
return 1",
    )
});

/// When the lock's validity runs out, on the history's clock. Read after
/// `remaining`, so never before the lock's own deadline.
fn deadline(lock: &Lock) -> u64 {
    let remaining = lock.remaining();
    now_ns() + remaining.as_nanos() as u64
}

/// A short name for why a call failed: the error's kind, and for errors
/// with a report, the most common node failure among the nodes that
/// answered.
fn cause(e: &Error) -> String {
    let kind = match e {
        Error::NotAcquired { .. } => "not_acquired",
        Error::Expired { .. } => "expired",
        Error::Taken { .. } => "taken",
        Error::NoQuorum { .. } => "no_quorum",
        Error::Config(_) => "config",
        _ => "other",
    };
    let Some(report) = e.report() else {
        return kind.to_owned();
    };
    let mut counts: Vec<(String, usize)> = Vec::new();
    // Nodes not waited for say nothing about why the attempt failed.
    let said = report
        .failures()
        .iter()
        .filter(|(_, f)| *f != NodeFailure::NotWaited);
    for (_, failure) in said {
        let name = format!("{failure:?}");
        let name = name
            .split(['(', ' ', '{'])
            .next()
            .unwrap_or_default()
            .to_owned();
        match counts.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => counts.push((name, 1)),
        }
    }
    match counts.iter().max_by_key(|(_, c)| *c) {
        Some((name, _)) => format!("{kind}/{name}"),
        None => kind.to_owned(),
    }
}
