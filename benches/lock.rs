//! redquorum against rslock and against the physical floor, side by side in
//! one run, interleaved (A B A B …) so that drift hits all alike.
//!
//! ```text
//! cargo bench --bench lock     # the full run (six to seven minutes), prints the table
//! cargo test  --bench lock     # the smoke run (seconds): same code, tiny counts
//! ```
//!
//! It starts its own five-node cluster, or uses `REDQUORUM_NODES` (then the
//! frozen and dead node scenarios, which need to signal the nodes, are
//! skipped). The table also goes to `target/bench-report.json`.
//!
//! For profiling, `REDQUORUM_BENCH_ONLY=throughput64,uncontended` runs only
//! the named scenarios (`memory` is one: the held-lock figures below), and
//! `REDQUORUM_BENCH_IMPLS=redquorum` only the named implementations (or,
//! in the hand-off, `redquorum/wake` one way of waiting; the
//! floor always runs where it belongs, unless `REDQUORUM_BENCH_FLOOR=0`:
//! then the process's own counts, as `perf stat` gives them, are the named
//! implementation's alone).
//!
//! Scenarios: `uncontended` (one task, lock + unlock of fresh resources),
//! `throughput64` (64 tasks, distinct resources), `frozen_node` and
//! `dead_node` (uncontended with one of five nodes SIGSTOPped / killed),
//! `handoff` (8 waiters on one resource, each with a client of its own as
//! separate processes would have, 2 ms hold, 2 ms elsewhere, waiting with
//! each library's own blocking lock: redquorum woken by releases, redquorum
//! polling, rslock; it also reports the share of time the lock was held and
//! the gap from a release to the next acquire), `handoff_many` (the same
//! with 256 waiters: the herd), `burst` (10 000 `lock()` calls at once on
//! distinct resources, then every release at once, each library with its
//! defaults: `acquired`, the `keys_left` on the nodes afterwards, and the
//! seconds each phase took), `keep_alive_many` (100 000 locks of 30 s held
//! with `keep_alive` for two minutes on a healthy cluster: how many were
//! `lost`, and the client's and nodes' CPU per renewal), `floor` / `floor64` (the same redis
//! client doing the bare minimum, `SET NX PX` then the release script, on one
//! node) and `ceiling` (redis-benchmark driving all five nodes at once,
//! pipelined: no lock can beat N nodes × 2 commands). Then memory: the RSS
//! growth of a process holding 100 000 locks at once, and the heap it
//! keeps for them (live bytes, counted by the allocator).
//!
//! Every row also has the client's own cost per operation: this process's
//! CPU time, user and system (the nodes are other processes), and its
//! allocations, counted by a global allocator (`cpu_us_per_op`,
//! `allocs_per_op`); the plain lock's and the floor's also per command
//! (`cpu_us_per_cmd`). `floor_lean` rows run the floor's two commands
//! through a minimal client of our own (`support/lean.rs`), to measure what
//! redis-rs itself costs per command. Where the nodes run on this machine,
//! every row also has what the nodes spent per operation, from their own
//! `INFO`: `server_cpu_us_per_op` (the five `redis-server` processes' CPU)
//! and `server_reads_per_op` (socket reads: fewer than the commands sent
//! when a client's commands arrive batched), and `cpu_bound_ops_per_s`, the
//! most operations a second the machine's cores could run at the client's
//! and the nodes' CPU per operation together.
//!
//! redquorum's other lock kinds run in the `uncontended` pass, interleaved
//! with the plain lock (rslock has neither kind): `reentrant` (a reentrant
//! take + release, always by one owner id; each take finds its fresh
//! resource free), `reentrant_nested` (outer take, inner take by the same
//! owner, inner release, outer release), `lock_all3` (`lock_all` of 3
//! fresh resources + release), `fenced` (a fenced lock + release: the
//! issue's goal is at most one extra round trip at p50, none where the
//! token folds into the acquisition, as it does on a healthy cluster) and
//! `semaphore` (one permit of 8 + release, each on a fresh resource),
//! `read` (a reader's share + release), `write` (the writer: the plain
//! lock, from a client of its own that holds a read lock on another name
//! meanwhile, so that it pays the upgrade check) and `campaign` (a
//! campaign for a free election, its watchdog started, + resignation). The
//! table gives each its p50 over redquorum's `uncontended` p50. `failover`
//! stalls a leader's process (its runtime's thread blocks: no renewal) while
//! a candidate waits, ten times with a TTL of 1 s: the time from the stall
//! to the candidate leading.
//!
//! `scaleout1`, `scaleout16`, `scaleout64` (only where the bench starts its
//! own nodes) compare, at 1, 16 and 64 tasks on distinct resources, three
//! local Redis Clusters of three shards each (a primary and a replica per
//! shard) as the three nodes (`cluster3x3`) with three single servers
//! (`servers3`), and the clusters without the restart guard
//! (`cluster3x3_noguard`: no `INFO server` pipelined with each grant):
//! locks a second, and the CPU each primary of the first
//! cluster (or the first server) spent per lock
//! (`shard<i>_cpu_us_per_op`); then `scaleout_keys`: the keys on each
//! primary of the first cluster while 3 000 locks are held at once. All the
//! servers share this machine's cores, so the locks a second say what the
//! client and the protocol cost, not what separate shard machines would
//! give.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::IntoFuture;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redquorum::Redlock;
use redquorum::local_cluster::LocalCluster;
use redquorum::local_redis_cluster::LocalRedisCluster;

const TTL: Duration = Duration::from_secs(10);
/// [`TTL`] in milliseconds, as the lean client sends it.
const TTL_MS: &[u8] = b"10000";

#[path = "support/lean.rs"]
mod lean;

/// The system allocator, counting allocations (`alloc`, `alloc_zeroed` and
/// `realloc` calls) for the `allocs_per_op` figures.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed: the heap a process holds, without the
/// allocator's own overhead and fragmentation that RSS also counts.
static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

// SAFETY: every call is passed on to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        LIVE_BYTES.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// What the nodes have done so far, summed over all of them, from their own
/// `INFO`: CPU time (user + system, of the `redis-server` processes) and
/// reads from client sockets: a client that batches (pipelines) what its
/// tasks send costs the nodes fewer reads than it sends commands.
#[derive(Clone, Copy, Default)]
struct Servers {
    cpu: Duration,
    reads: u64,
}

impl Servers {
    /// `self - earlier - bias`, each figure at least zero.
    fn since(self, earlier: Servers, bias: Servers) -> Servers {
        Servers {
            cpu: self
                .cpu
                .saturating_sub(earlier.cpu)
                .saturating_sub(bias.cpu),
            reads: self
                .reads
                .saturating_sub(earlier.reads)
                .saturating_sub(bias.reads),
        }
    }
}

/// Reads the nodes' figures: one connection to each, kept open, so that a
/// reading costs each node one command and one read (a new connection
/// would cost it an accept and a close as well); and what one reading
/// itself costs them, measured at the start and taken off every window.
struct Probe {
    nodes: std::sync::Mutex<Vec<std::io::BufReader<std::net::TcpStream>>>,
    bias: Servers,
    /// Off while a node is frozen or dead: it would not answer.
    on: AtomicBool,
}

static PROBE: std::sync::OnceLock<Probe> = std::sync::OnceLock::new();

impl Probe {
    /// Connects to the nodes on `ports` (on this machine) and measures the
    /// cost of a reading; `None` where that fails.
    fn start(ports: &[u16]) -> Option<Probe> {
        let nodes = ports
            .iter()
            .map(|&port| {
                let stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
                stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
                Some(std::io::BufReader::new(stream))
            })
            .collect::<Option<Vec<_>>>()?;
        let mut probe = Probe {
            nodes: std::sync::Mutex::new(nodes),
            bias: Servers::default(),
            on: AtomicBool::new(true),
        };
        const READINGS: u32 = 10;
        let first = probe.read()?;
        let mut last = first;
        for _ in 0..READINGS {
            last = probe.read()?;
        }
        let all = last.since(first, Servers::default());
        probe.bias = Servers {
            cpu: all.cpu / READINGS,
            reads: all.reads / READINGS as u64,
        };
        Some(probe)
    }

    /// The nodes' figures now, or `None` when off or a node does not answer.
    fn read(&self) -> Option<Servers> {
        use std::io::{BufRead, Read, Write};
        if !self.on.load(Ordering::Relaxed) {
            return None;
        }
        let mut nodes = self.nodes.lock().unwrap();
        let mut sum = Servers::default();
        for node in nodes.iter_mut() {
            node.get_mut().write_all(b"*1\r\n$4\r\nINFO\r\n").ok()?;
            let mut header = String::new();
            node.read_line(&mut header).ok()?;
            let len: usize = header.strip_prefix('$')?.trim().parse().ok()?;
            let mut body = vec![0; len + 2];
            node.read_exact(&mut body).ok()?;
            let info = String::from_utf8(body).ok()?;
            let field = |name: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                    .map(str::trim)
            };
            let secs = |name| field(name)?.parse::<f64>().ok();
            let count = |name| field(name)?.parse::<u64>().ok();
            sum.cpu += Duration::from_secs_f64(secs("used_cpu_user")? + secs("used_cpu_sys")?);
            sum.reads += count("total_reads_processed")?;
        }
        Some(sum)
    }
}

/// The nodes' figures now (see [`Probe`]).
fn servers_now() -> Option<Servers> {
    PROBE.get()?.read()
}

/// What this process (the client: the nodes are other processes) has spent
/// so far: CPU time, user and system, of all its threads, and allocations;
/// and what the nodes have done (see [`Servers`]). A window's readings are
/// taken so that neither side's is charged for reading the other: the
/// nodes first at the start, last at the end.
#[derive(Clone, Copy)]
struct Usage {
    cpu: Duration,
    allocations: u64,
    servers: Option<Servers>,
}

fn client_usage() -> (Duration, u64) {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    (
        time(ru.ru_utime) + time(ru.ru_stime),
        ALLOCATIONS.load(Ordering::Relaxed),
    )
}

impl Usage {
    fn now() -> Usage {
        let servers = servers_now();
        let (cpu, allocations) = client_usage();
        Usage {
            cpu,
            allocations,
            servers,
        }
    }

    /// Adds what was spent since `self` to `sample`.
    fn charge(self, sample: &mut Sample) {
        let (cpu, allocations) = client_usage();
        sample.cpu += cpu.saturating_sub(self.cpu);
        sample.allocations += allocations - self.allocations;
        let bias = PROBE.get().map_or(Servers::default(), |p| p.bias);
        match (self.servers, servers_now(), sample.servers.as_mut()) {
            (Some(a), Some(b), Some(s)) => {
                let d = b.since(a, bias);
                s.cpu += d.cpu;
                s.reads += d.reads;
            }
            _ => sample.servers = None,
        }
    }
}

/// How much to measure.
#[derive(Clone, Copy)]
struct Scale {
    /// Uncontended iterations per implementation, in `rounds` interleaved rounds.
    iterations: usize,
    rounds: usize,
    /// Seconds per implementation for the timed scenarios, split into rounds.
    timed_secs: f64,
    /// The most a peer may spend on the frozen-node scenario.
    peer_budget: Duration,
    /// Locks held at once for the memory figure.
    held_locks: usize,
    /// Requests per node for redis-benchmark.
    ceiling_requests: usize,
    /// `lock()` calls at once in the burst.
    burst: usize,
    /// Waiters on one resource in `handoff_many`.
    many_waiters: usize,
    /// Locks held with `keep_alive` in `keep_alive_many`, their TTL, and
    /// for how long.
    kept: usize,
    kept_ttl: Duration,
    kept_for: Duration,
}

const FULL: Scale = Scale {
    iterations: 3_000,
    rounds: 10,
    timed_secs: 4.0,
    peer_budget: Duration::from_secs(12),
    held_locks: 100_000,
    ceiling_requests: 400_000,
    burst: 10_000,
    many_waiters: 256,
    kept: 100_000,
    kept_ttl: Duration::from_secs(30),
    kept_for: Duration::from_secs(120),
};

const SMOKE: Scale = Scale {
    iterations: 40,
    rounds: 2,
    timed_secs: 0.2,
    peer_budget: Duration::from_secs(2),
    held_locks: 500,
    ceiling_requests: 2_000,
    burst: 200,
    many_waiters: 16,
    kept: 300,
    kept_ttl: Duration::from_millis(1_500),
    kept_for: Duration::from_secs(2),
};

/// What one uncontended iteration does, on resources no one holds.
#[derive(Clone, Copy)]
enum Cycle {
    /// Lock + unlock: every implementation.
    Plain,
    /// A reentrant take + release (redquorum only), always as [`OWNER`].
    Reentrant,
    /// Outer take, inner take, inner release, outer release, as [`OWNER`]
    /// (redquorum only).
    Nested,
    /// `lock_all` of 3 distinct resources + release (redquorum only).
    LockAll3,
    /// A fenced lock + unlock (redquorum only).
    Fenced,
    /// One permit of a semaphore of [`PERMITS`] + release (redquorum only).
    Semaphore,
    /// A reader's share of a read-write lock + release (redquorum only).
    Read,
    /// A writer of a read-write lock + release: the plain lock, asked of a
    /// client that holds a read lock on another name meanwhile, so that
    /// every write pays the upgrade check's lookup (redquorum only).
    Write,
    /// A campaign for a free election + resignation (redquorum only): the
    /// latency from asking to leading, its watchdog started.
    Campaign,
}

/// The permits of the semaphore row.
const PERMITS: u32 = 8;

/// The owner of the reentrant holds. One fixed id, as one job would use:
/// each iteration takes a fresh resource, so every take finds it free.
const OWNER: &str = "bench-owner";

impl Cycle {
    /// redquorum's kinds other than the plain lock.
    const KINDS: [Cycle; 8] = [
        Cycle::Reentrant,
        Cycle::Nested,
        Cycle::LockAll3,
        Cycle::Fenced,
        Cycle::Semaphore,
        Cycle::Read,
        Cycle::Write,
        Cycle::Campaign,
    ];

    /// Its rows' scenario (in the uncontended pass; the floor's is "floor").
    fn scenario(self) -> &'static str {
        match self {
            Cycle::Plain => "uncontended",
            Cycle::Reentrant => "reentrant",
            Cycle::Nested => "reentrant_nested",
            Cycle::LockAll3 => "lock_all3",
            Cycle::Fenced => "fenced",
            Cycle::Semaphore => "semaphore",
            Cycle::Read => "read",
            Cycle::Write => "write",
            Cycle::Campaign => "campaign",
        }
    }

    /// The kind of lock it takes.
    fn lock_kind(self) -> &'static str {
        match self {
            Cycle::Plain => "plain",
            Cycle::Reentrant | Cycle::Nested => "reentrant",
            Cycle::LockAll3 => "multi-resource",
            Cycle::Fenced => "fenced",
            Cycle::Semaphore => "semaphore",
            Cycle::Read | Cycle::Write => "read-write",
            Cycle::Campaign => "leader election",
        }
    }
}

/// One implementation under test.
#[derive(Clone)]
enum Client {
    Redquorum(Redlock),
    Rslock(rslock::LockManager),
    /// The same redis client on one node: `SET NX PX`, then the release script.
    Floor(MultiplexedConnection, Arc<str>),
    /// The floor's two commands through a minimal client of our own
    /// (`support/lean.rs`): what redis-rs costs, measured.
    Lean(lean::Lean, Arc<str>),
}

impl Client {
    fn name(&self) -> &'static str {
        match self {
            Client::Redquorum(_) => "redquorum",
            Client::Rslock(_) => "rslock",
            Client::Floor(..) => "floor",
            Client::Lean(..) => "floor_lean",
        }
    }

    /// One lock + unlock of `resource`.
    async fn cycle(&self, resource: &str) -> Result<(), String> {
        match self {
            Client::Redquorum(r) => {
                let lock = r.lock(resource, TTL).await.map_err(|e| e.to_string())?;
                lock.release().await.map_err(|e| e.to_string())
            }
            Client::Rslock(m) => {
                let lock = m.lock(resource, TTL).await.map_err(|e| e.to_string())?;
                m.unlock(&lock).await;
                Ok(())
            }
            Client::Floor(conn, sha) => {
                let mut conn = conn.clone();
                let mut token = [0u8; 20];
                rand::fill(&mut token);
                let token = hex::encode(token);
                let set: redis::Value = redis::cmd("SET")
                    .arg(resource)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(TTL.as_millis() as u64)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                if set == redis::Value::Nil {
                    return Err("held".into());
                }
                let _: i64 = redis::cmd("EVALSHA")
                    .arg(&**sha)
                    .arg(1)
                    .arg(resource)
                    .arg(&token)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(())
            }
            Client::Lean(conn, sha) => {
                let mut token = [0u8; 20];
                rand::fill(&mut token);
                let token = hex::encode(token);
                let (key, token) = (resource.as_bytes(), token.as_bytes());
                let set = lean::encode(&[b"SET", key, token, b"NX", b"PX", TTL_MS]);
                match conn.send(set).await {
                    Some(lean::Reply::Ok) => {}
                    other => return Err(format!("SET: {other:?}")),
                }
                let release = lean::encode(&[b"EVALSHA", sha.as_bytes(), b"1", key, token]);
                match conn.send(release).await {
                    Some(lean::Reply::Int(_)) => Ok(()),
                    other => Err(format!("EVALSHA: {other:?}")),
                }
            }
        }
    }

    /// One iteration of `cycle` on `resource` (and, for a set, names made
    /// from it).
    async fn run(&self, cycle: Cycle, resource: &str) -> Result<(), String> {
        let r = match (self, cycle) {
            (_, Cycle::Plain) => return self.cycle(resource).await,
            (Client::Redquorum(r), _) => r,
            (other, _) => {
                return Err(format!(
                    "{} has no {} lock",
                    other.name(),
                    cycle.lock_kind()
                ));
            }
        };
        let e = |e: redquorum::Error| e.to_string();
        match cycle {
            Cycle::Plain => unreachable!(),
            Cycle::Reentrant => {
                let lock = r.lock(resource, TTL).reentrant(OWNER).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Nested => {
                let outer = r.lock(resource, TTL).reentrant(OWNER).await.map_err(e)?;
                let inner = r.lock(resource, TTL).reentrant(OWNER).await.map_err(e)?;
                inner.release().await.map_err(e)?;
                outer.release().await.map_err(e)
            }
            Cycle::LockAll3 => {
                let names = ["a", "b", "c"].map(|k| format!("{resource}:{k}"));
                let lock = r.lock_all(names, TTL).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Fenced => {
                let lock = r.lock(resource, TTL).fenced().await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Semaphore => {
                let lock = r.lock(resource, TTL).permits(PERMITS).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Read => {
                let lock = r.lock(resource, TTL).shared().await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Write => {
                let lock = r.lock(resource, TTL).await.map_err(e)?;
                lock.release().await.map_err(e)
            }
            Cycle::Campaign => {
                let leadership = r.campaign(resource, OWNER, TTL).await.map_err(e)?;
                leadership.resign().await.map_err(e)
            }
        }
    }

    /// Waits until `resource` is held (each library's own blocking call),
    /// holds it for `hold`, and releases it. Returns when it was acquired
    /// and when the release started.
    async fn hold(&self, resource: &str, hold: Duration) -> Result<(Instant, Instant), String> {
        match self {
            Client::Redquorum(r) => {
                let lock = r.lock(resource, TTL).await.map_err(|e| e.to_string())?;
                let got = Instant::now();
                tokio::time::sleep(hold).await;
                let letting_go = Instant::now();
                lock.release().await.map_err(|e| e.to_string())?;
                Ok((got, letting_go))
            }
            Client::Rslock(m) => {
                let lock = m.acquire(resource, TTL).await.map_err(|e| e.to_string())?;
                let got = Instant::now();
                tokio::time::sleep(hold).await;
                let letting_go = Instant::now();
                lock.release().await;
                Ok((got, letting_go))
            }
            Client::Floor(..) | Client::Lean(..) => Err("the floor has no blocking lock".into()),
        }
    }
}

/// What one implementation did in one scenario.
struct Sample {
    latencies: Vec<Duration>,
    ops: u64,
    busy: Duration,
    errors: u64,
    /// The client process's CPU time and allocations while it ran.
    cpu: Duration,
    allocations: u64,
    /// What the nodes did meanwhile; `None` where that is not measured.
    servers: Option<Servers>,
    extra: BTreeMap<&'static str, f64>,
}

impl Default for Sample {
    fn default() -> Sample {
        Sample {
            latencies: Vec::new(),
            ops: 0,
            busy: Duration::ZERO,
            errors: 0,
            cpu: Duration::ZERO,
            allocations: 0,
            servers: Some(Servers::default()),
            extra: BTreeMap::new(),
        }
    }
}

impl Sample {
    fn percentile_us(&mut self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        self.latencies.sort_unstable();
        let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        self.latencies[i].as_secs_f64() * 1e6
    }

    fn ops_per_s(&self) -> f64 {
        self.ops as f64 / self.busy.as_secs_f64()
    }

    fn cpu_us_per_op(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.ops as f64
    }

    fn allocs_per_op(&self) -> f64 {
        self.allocations as f64 / self.ops as f64
    }
}

/// One line of the report.
struct Row {
    scenario: &'static str,
    imp: &'static str,
    /// How waiters wait, where it matters (hand-off): "wake" or "poll".
    mode: Option<&'static str>,
    p50_us: f64,
    p99_us: f64,
    ops_per_s: f64,
    errors: u64,
    /// The client process's CPU time per operation, user and system.
    cpu_us_per_op: f64,
    /// Allocations per operation in the client process.
    allocs_per_op: f64,
    extra: BTreeMap<&'static str, f64>,
}

fn row(scenario: &'static str, imp: &'static str, mut s: Sample) -> Row {
    if let Some(servers) = s.servers.filter(|_| s.ops > 0) {
        let server_us = servers.cpu.as_secs_f64() * 1e6 / s.ops as f64;
        s.extra.insert("server_cpu_us_per_op", server_us);
        // Fewer reads than commands sent: commands arrived batched
        // (pipelined) in one read.
        s.extra
            .insert("server_reads_per_op", servers.reads as f64 / s.ops as f64);
        // The most operations a second this machine's cores could run at
        // this client's and the nodes' CPU per operation, where both share
        // the cores (a local cluster). Not for the hand-off, whose rate is
        // set by its holds and pauses.
        if !scenario.starts_with("handoff")
            && !matches!(scenario, "burst" | "keep_alive_many" | "failover")
        {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            s.extra.insert(
                "cpu_bound_ops_per_s",
                cores * 1e6 / (server_us + s.cpu_us_per_op()),
            );
        }
    }
    Row {
        scenario,
        imp,
        mode: None,
        p50_us: s.percentile_us(0.50),
        p99_us: s.percentile_us(0.99),
        ops_per_s: s.ops_per_s(),
        errors: s.errors,
        cpu_us_per_op: s.cpu_us_per_op(),
        allocs_per_op: s.allocs_per_op(),
        extra: std::mem::take(&mut s.extra),
    }
}

/// Uncontended cycles on fresh resources, each entrant (a client and what
/// it does) in turn, interleaved in rounds; an entrant stops once it has
/// spent `budget`.
async fn uncontended(
    entrants: &[(Client, Cycle)],
    scale: Scale,
    tag: &str,
    budget: Duration,
) -> Vec<Sample> {
    let mut samples: Vec<Sample> = entrants.iter().map(|_| Sample::default()).collect();
    let per_round = scale.iterations.div_ceil(scale.rounds);
    let mut n = 0u64;
    for _ in 0..scale.rounds {
        for ((client, cycle), sample) in entrants.iter().zip(&mut samples) {
            let usage = Usage::now();
            for _ in 0..per_round {
                if sample.busy >= budget {
                    break;
                }
                n += 1;
                let resource = format!("bench:{tag}:{}:{n}", client.name());
                let started = Instant::now();
                let ok = client.run(*cycle, &resource).await.is_ok();
                let took = started.elapsed();
                sample.busy += took;
                if ok {
                    sample.latencies.push(took);
                    sample.ops += 1;
                } else {
                    sample.errors += 1;
                }
            }
            usage.charge(sample);
        }
    }
    samples
}

/// `tasks` concurrent tasks on distinct resources, for `secs` per client,
/// interleaved in rounds.
async fn throughput(clients: &[Client], tasks: usize, scale: Scale) -> Vec<Sample> {
    let mut samples: Vec<Sample> = clients.iter().map(|_| Sample::default()).collect();
    let round = Duration::from_secs_f64(scale.timed_secs / scale.rounds.min(4) as f64);
    for r in 0..scale.rounds.min(4) {
        for (client, sample) in clients.iter().zip(&mut samples) {
            let usage = Usage::now();
            let started = Instant::now();
            let handles: Vec<_> = (0..tasks)
                .map(|t| {
                    let client = client.clone();
                    tokio::spawn(async move {
                        let mut lat = Vec::new();
                        let mut errors = 0;
                        let mut i = 0u64;
                        while started.elapsed() < round {
                            i += 1;
                            let resource = format!("bench:tp:{}:{r}:{t}:{i}", client.name());
                            let s = Instant::now();
                            match client.cycle(&resource).await {
                                Ok(()) => lat.push(s.elapsed()),
                                Err(_) => errors += 1,
                            }
                        }
                        (lat, errors)
                    })
                })
                .collect();
            for h in handles {
                let (lat, errors) = h.await.unwrap();
                sample.ops += lat.len() as u64;
                sample.latencies.extend(lat);
                sample.errors += errors;
            }
            sample.busy += started.elapsed();
            usage.charge(sample);
        }
    }
    samples
}

/// The CPU seconds (user + system) the server on `port` has used.
fn server_cpu(port: u16) -> f64 {
    redquorum::local_redis_cluster::cpu_seconds(port).unwrap_or(f64::NAN)
}

/// Three local Redis Clusters (three shards each) as the three nodes,
/// against three single servers: throughput at each task count of `names`
/// wanted, with the CPU per lock of each primary of the first cluster (and
/// of the first single server); then the keys per primary of the first
/// cluster while 3 000 locks are held.
async fn scaleout(
    scale: Scale,
    names: &[&'static str; 3],
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<Row> {
    let started: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(LocalRedisCluster::start))
        .collect();
    let clusters: Vec<LocalRedisCluster> = started
        .into_iter()
        .map(|h| h.join().unwrap().expect("a local Redis Cluster"))
        .collect();
    let servers = LocalCluster::start(3).expect("three local servers");
    let cluster =
        Client::Redquorum(Redlock::new(clusters.iter().map(LocalRedisCluster::url)).unwrap());
    // The restart guard's `INFO server` with every grant, priced.
    let unguarded = Client::Redquorum(
        Redlock::builder()
            .nodes(clusters.iter().map(LocalRedisCluster::url))
            .restart_guard(false)
            .build()
            .unwrap(),
    );
    let single = Client::Redquorum(Redlock::new(servers.urls()).unwrap());
    for c in [&cluster, &unguarded, &single] {
        c.cycle("bench:warm").await.unwrap();
    }
    let primaries = clusters[0].primaries().unwrap();
    let mut rows = Vec::new();
    for (&name, tasks) in names.iter().zip([1, 16, 64]) {
        if !wanted(name) {
            continue;
        }
        let before: Vec<f64> = primaries.iter().map(|&p| server_cpu(p)).collect();
        let single_before = server_cpu(servers.port(0));
        let samples = throughput(&[cluster.clone(), single.clone()], tasks, scale).await;
        let spent: Vec<f64> = primaries
            .iter()
            .zip(&before)
            .map(|(&p, b)| server_cpu(p) - b)
            .collect();
        let single_spent = server_cpu(servers.port(0)) - single_before;
        // Apart, so that the shards' CPU is this client's own.
        let before: Vec<f64> = primaries.iter().map(|&p| server_cpu(p)).collect();
        let unguarded_samples = throughput(std::slice::from_ref(&unguarded), tasks, scale).await;
        let unguarded_spent: Vec<f64> = primaries
            .iter()
            .zip(&before)
            .map(|(&p, b)| server_cpu(p) - b)
            .collect();
        for ((imp, s), shards) in ["cluster3x3", "servers3", "cluster3x3_noguard"]
            .into_iter()
            .zip(samples.into_iter().chain(unguarded_samples))
            .zip([spent, vec![single_spent], unguarded_spent])
        {
            let ops = s.ops.max(1) as f64;
            let mut r = row(name, imp, s);
            // The probe watches the bench's own five nodes, not these.
            for key in [
                "server_cpu_us_per_op",
                "server_reads_per_op",
                "cpu_bound_ops_per_s",
            ] {
                r.extra.remove(key);
            }
            for (i, cpu) in shards.iter().enumerate() {
                r.extra.insert(
                    [
                        "shard0_cpu_us_per_op",
                        "shard1_cpu_us_per_op",
                        "shard2_cpu_us_per_op",
                    ][i],
                    cpu * 1e6 / ops,
                );
            }
            rows.push(r);
        }
    }
    // Keys per shard: distinct names spread over the primaries.
    let Client::Redquorum(redlock) = &cluster else {
        unreachable!()
    };
    let held = if scale.iterations > 100 { 3_000 } else { 300 };
    // Once the load's keys are gone (a release a loaded node did not
    // answer in time is sent again; a key left behind expires at its TTL).
    // Not in the smoke run, which only checks that this runs.
    if scale.iterations > 100 {
        tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    }
    let before = clusters[0].keys_per_shard().unwrap();
    let mut locks = Vec::with_capacity(held);
    for i in 0..held {
        locks.push(redlock.lock(&format!("bench:keys:{i}"), TTL).await.unwrap());
    }
    // The last SETs follow the majority's answers.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let keys = clusters[0].keys_per_shard().unwrap();
    let mut r = row("scaleout_keys", "cluster3x3", Sample::default());
    for (i, ((_, n), (_, b))) in keys.iter().zip(&before).enumerate().take(3) {
        r.extra.insert(
            ["shard0_keys", "shard1_keys", "shard2_keys"][i],
            (n - b) as f64,
        );
    }
    rows.push(r);
    for lock in locks {
        let _ = lock.release().await;
    }
    rows
}

/// How a hand-off waiter waits: redquorum woken by releases, redquorum
/// polling, or rslock (which polls).
#[derive(Clone, Copy, PartialEq)]
enum Waiting {
    Wake,
    Poll,
    Rslock,
}

impl Waiting {
    fn imp(self) -> &'static str {
        match self {
            Waiting::Wake | Waiting::Poll => "redquorum",
            Waiting::Rslock => "rslock",
        }
    }

    fn mode(self) -> &'static str {
        match self {
            Waiting::Wake => "wake",
            Waiting::Poll | Waiting::Rslock => "poll",
        }
    }

    /// A client of its own for one waiter, as a separate process would
    /// have: its own connections (and subscriptions). redquorum waits
    /// without a retry limit, as rslock's `acquire` does; everything else
    /// is the libraries' defaults.
    fn client(self, urls: &[String]) -> Client {
        let redquorum = |wake| {
            let redlock = Redlock::builder()
                .nodes(urls)
                .retry_count(u32::MAX)
                .wake_on_release(wake)
                .build()
                .unwrap();
            Client::Redquorum(redlock)
        };
        match self {
            Waiting::Wake => redquorum(true),
            Waiting::Poll => redquorum(false),
            Waiting::Rslock => Client::Rslock(rslock::LockManager::new(urls.to_vec())),
        }
    }
}

/// `waiters` want one resource: hold 2 ms, release, 2 ms elsewhere,
/// again, for each waiter count in `counts` (8 and 256: `handoff` and
/// `handoff_many`). Besides the wait from asking to holding (the p50/p99),
/// it measures the share of the time the lock was held (from acquired to
/// released) and the gap from a holder starting its release to the next
/// holder's acquire. The counts are interleaved round by round as the
/// implementations are (8, 256, 8, 256 …, each kind in turn within): the
/// issue's goal compares the 256-waiter CPU per acquisition with the
/// 8-waiter one, and figures taken a minute apart on a shared machine
/// drift by a third. Returns, per count, a sample per kind.
async fn handoff(
    kinds: &[Waiting],
    urls: &[String],
    scale: Scale,
    counts: &[usize],
) -> Vec<Vec<Sample>> {
    let mut samples: Vec<Vec<Sample>> = counts
        .iter()
        .map(|_| kinds.iter().map(|_| Sample::default()).collect())
        .collect();
    let mut gaps: Vec<Vec<Vec<Duration>>> = counts
        .iter()
        .map(|_| kinds.iter().map(|_| Vec::new()).collect())
        .collect();
    let rounds = scale.rounds.min(4);
    // In the full run four rounds of two seconds: each count and kind is
    // timed for 8 s in all.
    let round = Duration::from_secs_f64(scale.timed_secs / 2.0);
    for r in 0..rounds {
        for (c, &waiters) in counts.iter().enumerate() {
            for (k, kind) in kinds.iter().enumerate() {
                let resource: Arc<str> =
                    format!("bench:handoff:{waiters}:{}:{k}:{r}", kind.imp()).into();
                handoff_round(
                    kind,
                    urls,
                    &resource,
                    waiters,
                    round,
                    &mut samples[c][k],
                    &mut gaps[c][k],
                )
                .await;
            }
        }
    }
    for (samples, gaps) in samples.iter_mut().zip(gaps) {
        for (s, gaps) in samples.iter_mut().zip(gaps) {
            let held = s.extra.remove("held_us").unwrap_or_default() / 1e6;
            s.extra.insert("held_share", held / s.busy.as_secs_f64());
            let mut gaps = Sample {
                latencies: gaps,
                ..Sample::default()
            };
            s.extra.insert("gap_p50_us", gaps.percentile_us(0.5));
            s.extra.insert("gap_p99_us", gaps.percentile_us(0.99));
        }
    }
    samples
}

/// One timed round of [`handoff`]: `waiters` clients of `kind` on
/// `resource` for `round`, added to `sample` and `gaps`.
async fn handoff_round(
    kind: &Waiting,
    urls: &[String],
    resource: &Arc<str>,
    waiters: usize,
    round: Duration,
    sample: &mut Sample,
    gaps: &mut Vec<Duration>,
) {
    const HOLD: Duration = Duration::from_millis(2);
    const ELSEWHERE: Duration = Duration::from_millis(2);
    let clients: Vec<Client> = (0..waiters).map(|_| kind.client(urls)).collect();
    // Connect, then subscribe, before timing: what is timed is the steady
    // state. (The waking kind subscribes when a call first has to wait, so
    // every client waits once, all at once; taken in turn, as it used to
    // be, no call waited, and the first timed call of every waiter paid for
    // its subscriptions.)
    for c in &clients {
        c.hold(resource, Duration::ZERO).await.unwrap();
    }
    futures::future::join_all(clients.iter().map(|c| c.hold(resource, HOLD))).await;
    let stop = Arc::new(AtomicBool::new(false));
    let usage = Usage::now();
    let started = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let (resource, stop) = (resource.clone(), stop.clone());
            tokio::spawn(async move {
                // (asked, acquired, release started, released)
                let mut turns = Vec::new();
                let mut errors = 0;
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    match client.hold(&resource, HOLD).await {
                        Ok((got, letting_go)) => {
                            turns.push((asked, got, letting_go, Instant::now()))
                        }
                        Err(e) => {
                            // The first of each waiter's, so that an error
                            // figure says what it was.
                            if errors == 0 {
                                eprintln!("  handoff ({waiters} waiters) error: {e}");
                            }
                            errors += 1
                        }
                    }
                    tokio::time::sleep(ELSEWHERE).await;
                }
                (turns, errors)
            })
        })
        .collect();
    tokio::time::sleep(round).await;
    stop.store(true, Ordering::Relaxed);
    let mut turns = Vec::new();
    for h in handles {
        let (t, errors) = h.await.unwrap();
        turns.extend(t);
        sample.errors += errors;
    }
    sample.busy += started.elapsed();
    usage.charge(sample);
    turns.sort_by_key(|t| t.1);
    for (asked, got, _, released) in &turns {
        sample.latencies.push(*got - *asked);
        *sample.extra.entry("held_us").or_default() += (*released - *got).as_secs_f64() * 1e6;
    }
    sample.ops += turns.len() as u64;
    for pair in turns.windows(2) {
        gaps.push(pair[1].1.saturating_duration_since(pair[0].2));
    }
}

/// A lock taken in the burst, to be released.
enum Taken {
    Redquorum(redquorum::Lock),
    Rslock(rslock::LockManager, rslock::Lock),
}

/// `scale.burst` `lock()` calls at once on distinct resources (a scheduler
/// starting its jobs, a batch taking a lock per item), then the release
/// of every lock taken, at once; each library with its default options.
/// Counts what was acquired, and the keys left on the nodes afterwards
/// (redquorum's once its background work is done, within 30 s). The
/// p50/p99 are of the time from the burst's start to each acquisition.
async fn burst(clients: &[Client], ports: &[u16], scale: Scale) -> Vec<Sample> {
    let mut samples = Vec::new();
    for client in clients {
        let mut s = Sample::default();
        let prefix = format!("bench:burst:{}:", client.name());
        let names: Vec<String> = (0..scale.burst).map(|i| format!("{prefix}{i}")).collect();
        let usage = Usage::now();
        let started = Instant::now();
        let taken = futures::future::join_all(names.iter().map(|name| async move {
            let taken = match client {
                Client::Redquorum(r) => r.lock(name, TTL).await.map(Taken::Redquorum).ok(),
                Client::Rslock(m) => m
                    .lock(name.as_str(), TTL)
                    .await
                    .ok()
                    .map(|lock| Taken::Rslock(m.clone(), lock)),
                Client::Floor(..) | Client::Lean(..) => None,
            };
            (taken, started.elapsed())
        }))
        .await;
        let locked = started.elapsed();
        let mut held = Vec::new();
        for (taken, at) in taken {
            match taken {
                Some(t) => {
                    s.latencies.push(at);
                    held.push(t);
                }
                None => s.errors += 1,
            }
        }
        let acquired = held.len();
        let released = Instant::now();
        let refused = futures::future::join_all(held.into_iter().map(|t| async move {
            match t {
                Taken::Redquorum(lock) => lock.release().await.is_err(),
                Taken::Rslock(m, lock) => {
                    m.unlock(&lock).await;
                    false
                }
            }
        }))
        .await;
        let releasing = released.elapsed();
        s.errors += refused.into_iter().filter(|&r| r).count() as u64;
        s.busy = started.elapsed();
        s.ops = scale.burst as u64;
        usage.charge(&mut s);
        if let Client::Redquorum(r) = client {
            r.drain(Duration::from_secs(30)).await;
        }
        let pattern = format!("*{prefix}*");
        let left: i64 = ports
            .iter()
            .map(|&port| {
                let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
                let mut conn = client.get_connection().unwrap();
                redis::cmd("EVAL")
                    .arg("return #redis.call('KEYS', ARGV[1])")
                    .arg(0)
                    .arg(&pattern)
                    .query::<i64>(&mut conn)
                    .unwrap()
            })
            .sum();
        s.extra.insert("acquired", acquired as f64);
        s.extra.insert("keys_left", left as f64);
        s.extra.insert("lock_s", locked.as_secs_f64());
        s.extra.insert("release_s", releasing.as_secs_f64());
        samples.push(s);
    }
    samples
}

/// The `EVALSHA` calls the nodes have served, summed.
fn script_calls(ports: &[u16]) -> u64 {
    ports
        .iter()
        .map(|&port| {
            let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
            let mut conn = client.get_connection().unwrap();
            let stats: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut conn)
                .unwrap();
            stats
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next()?.parse().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// `scale.kept` locks (TTL `scale.kept_ttl`, 30 s in the full run) held
/// with `keep_alive()` for `scale.kept_for`, on redquorum's defaults
/// (rslock has no watchdog): how
/// many were lost on a healthy cluster, and the client's and the nodes'
/// CPU per renewal (an extension on one node, counted as the nodes' script
/// calls while held).
/// Failover: a leader whose process stalls (its own runtime, on a thread
/// that then blocks: no renewal runs) while a candidate waits; the time
/// from the stall to the candidate leading, `times` times, with a TTL of
/// `ttl`. Each sample is one failover.
async fn failover(urls: &[String], ttl: Duration, times: usize) -> Sample {
    let mut s = Sample::default();
    let started = Instant::now();
    let candidate = Redlock::new(urls).unwrap();
    for i in 0..times {
        let name = format!("bench:failover:{i}");
        let (elected, stalled) = std::sync::mpsc::channel();
        let (urls, leader_name) = (urls.to_vec(), name.clone());
        let leader = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let redlock = Redlock::new(urls).unwrap();
            let leadership = rt
                .block_on(redlock.campaign(&leader_name, "stalls", ttl).into_future())
                .unwrap();
            elected.send(()).unwrap();
            // Until well past the failover, then a clean exit.
            std::thread::sleep(ttl * 2);
            rt.block_on(async {
                drop(leadership);
                redlock.drain(Duration::from_secs(2)).await;
            });
        });
        stalled.recv().unwrap();
        let stall = Instant::now();
        let took = match candidate.campaign(&name, "waits", ttl).wait(ttl * 5).await {
            Ok(leadership) => {
                let took = stall.elapsed();
                leadership.resign().await.unwrap();
                Some(took)
            }
            Err(_) => None,
        };
        match took {
            Some(took) => s.latencies.push(took),
            None => s.errors += 1,
        }
        s.ops += 1;
        tokio::task::spawn_blocking(move || leader.join().unwrap())
            .await
            .unwrap();
    }
    s.busy = started.elapsed();
    s.extra.insert("ttl_ms", ttl.as_millis() as f64);
    s
}

async fn keep_alive_many(urls: &[String], ports: &[u16], scale: Scale) -> Sample {
    let redlock = Redlock::new(urls).unwrap();
    let mut locks = Vec::with_capacity(scale.kept);
    let names: Vec<String> = (0..scale.kept).map(|i| format!("bench:kept:{i}")).collect();
    for chunk in names.chunks(5_000) {
        let taken = futures::future::join_all(
            chunk
                .iter()
                .map(|name| redlock.lock(name, scale.kept_ttl).into_future()),
        )
        .await;
        locks.extend(taken.into_iter().map(|r| r.expect("a lock to keep alive")));
    }
    let held: Vec<redquorum::Held> = locks.iter_mut().map(|lock| lock.keep_alive()).collect();
    let mut s = Sample::default();
    let calls = script_calls(ports);
    let usage = Usage::now();
    let started = Instant::now();
    tokio::time::sleep(scale.kept_for).await;
    s.busy = started.elapsed();
    let renewals = (script_calls(ports) - calls) as f64 / ports.len() as f64;
    s.ops = renewals as u64;
    usage.charge(&mut s);
    let lost = held.iter().filter(|h| h.is_lost()).count();
    s.errors = lost as u64;
    s.extra.insert("held", scale.kept as f64);
    s.extra.insert("lost", lost as f64);
    s.extra.insert("renewals", renewals);
    drop(held);
    let mut locks = locks.into_iter();
    loop {
        let chunk: Vec<redquorum::Lock> = locks.by_ref().take(5_000).collect();
        if chunk.is_empty() {
            break;
        }
        futures::future::join_all(chunk.into_iter().map(|l| l.release())).await;
    }
    redlock.drain(Duration::from_secs(30)).await;
    s
}

/// redis-benchmark on all nodes at once, pipelined: the most commands per
/// second the machine serves, and the lock+unlock pairs that allows (each
/// pair costs two commands on every node).
fn ceiling(ports: &[u16], scale: Scale) -> Option<Row> {
    let handles: Vec<_> = ports
        .iter()
        .map(|&p| std::thread::spawn(move || commands_per_s(p, scale)))
        .collect();
    let mut commands = 0.0;
    for h in handles {
        commands += h.join().ok()??;
    }
    let mut extra = BTreeMap::new();
    extra.insert("commands_per_s", commands);
    Some(Row {
        scenario: "ceiling",
        imp: "ceiling",
        mode: None,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        ops_per_s: commands / (2.0 * ports.len() as f64),
        errors: 0,
        cpu_us_per_op: f64::NAN,
        allocs_per_op: f64::NAN,
        extra,
    })
}

/// `SET`s per second that redis-benchmark gets from one node, pipelined.
fn commands_per_s(port: u16, scale: Scale) -> Option<f64> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "set",
            "-P",
            "16",
            "-c",
            "8",
        ])
        .args(["-n", &scale.ceiling_requests.to_string(), "-q", "--csv"])
        .output()
        .ok()?;
    // "SET","123456.79",…
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("\"SET\""))?
        .split(',')
        .nth(1)?
        .trim_matches('"')
        .parse()
        .ok()
}

/// The memory figure: this program again, in a child process that takes
/// `n` locks with one implementation and holds them all at once.
fn memory(imp: &str, urls: &[String], n: usize) -> Option<(f64, f64, f64)> {
    let out = Command::new(std::env::current_exe().ok()?)
        .args(["--memory-child", imp, &n.to_string()])
        .args(urls)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("memory "))?;
    let mut words = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse::<f64>().ok());
    let (before, peak, heap) = (words.next()??, words.next()??, words.next()??);
    Some((peak, (peak - before) / n as f64, heap / n as f64))
}

fn rss_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// The child side of [`memory`].
fn memory_child(args: &[String]) {
    let (imp, n, urls) = (&args[0], args[1].parse::<usize>().unwrap(), &args[2..]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = match imp.as_str() {
            "redquorum" => Client::Redquorum(Redlock::new(urls).unwrap()),
            _ => Client::Rslock(rslock::LockManager::new(urls.to_vec())),
        };
        client.cycle("bench:mem:warm").await.unwrap();
        let before = rss_kib("VmRSS:");
        let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
        // Room for the measured library's locks only: each is charged its
        // own handles, not the other's.
        let room = |of: &str| if imp == of { n } else { 0 };
        let mut redquorum_locks = Vec::with_capacity(room("redquorum"));
        let mut rslock_locks = Vec::with_capacity(room("rslock"));
        for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
            let futs = chunk.iter().map(|i| {
                let client = client.clone();
                async move {
                    let resource = format!("bench:mem:{imp}:{i}");
                    match &client {
                        Client::Redquorum(r) => (
                            Some(r.lock(&resource, Duration::from_secs(120)).await.unwrap()),
                            None,
                        ),
                        Client::Rslock(m) => (
                            None,
                            Some(m.lock(&*resource, Duration::from_secs(120)).await.unwrap()),
                        ),
                        Client::Floor(..) | Client::Lean(..) => unreachable!(),
                    }
                }
            });
            for (a, b) in futures::future::join_all(futs).await {
                redquorum_locks.extend(a);
                rslock_locks.extend(b);
            }
        }
        let peak = rss_kib("VmHWM:");
        // What the held locks keep on the heap, once the requests beyond
        // each majority are done.
        if let Client::Redquorum(r) = &client {
            r.drain(Duration::from_secs(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let heap = LIVE_BYTES.load(Ordering::Relaxed) - heap_before;
        println!("memory {} {} {heap}", before * 1024.0, peak * 1024.0);
        // Release everything, 64 at a time.
        while !redquorum_locks.is_empty() {
            let batch: Vec<_> = redquorum_locks
                .drain(..redquorum_locks.len().min(64))
                .collect();
            futures::future::join_all(batch.into_iter().map(|l| l.release())).await;
        }
        if let Client::Rslock(m) = &client {
            for batch in rslock_locks.chunks(64) {
                futures::future::join_all(batch.iter().map(|l| m.unlock(l))).await;
            }
        }
    });
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores, {cpu}, Linux {}", kernel.trim())
}

fn fmt_num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

fn print_table(rows: &[Row]) {
    let find =
        |scenario: &str, imp: &str| rows.iter().find(|r| r.scenario == scenario && r.imp == imp);
    println!(
        "\n{:<16} {:<14} {:>9} {:>9} {:>10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  extra",
        "scenario",
        "impl",
        "p50 µs",
        "p99 µs",
        "ops/s",
        "errors",
        "p50/rslock",
        "ops/rslock",
        "p50/floor",
        "ops/floor",
        "cpu µs/op",
        "cpu/rslock",
        "allocs/op"
    );
    for r in rows {
        let peer = find(r.scenario, "rslock");
        let floor = match r.scenario {
            "throughput64" => find("floor64", "floor"),
            "handoff" | "handoff_many" | "burst" | "keep_alive_many" | "ceiling" | "failover" => {
                None
            }
            _ => find("floor", "floor"),
        };
        let ratio = |a: f64, b: Option<f64>| b.map_or(f64::NAN, |b| a / b);
        let mut extra: String = r
            .extra
            .iter()
            .map(|(k, v)| format!("{k}={v:.3} "))
            .collect();
        // redquorum's other kinds: against its own plain lock, in the
        // printed table only; rslock has nothing to compare with.
        if let Some(kind) = Cycle::KINDS.iter().find(|c| c.scenario() == r.scenario) {
            let plain = find("uncontended", "redquorum").map(|p| p.p50_us);
            let _ = write!(
                extra,
                "p50/uncontended={} rslock: no {} lock",
                fmt_num(ratio(r.p50_us, plain), 2),
                kind.lock_kind()
            );
        }
        let imp = match r.mode {
            Some(mode) if r.imp == "redquorum" => format!("{}/{mode}", r.imp),
            _ => r.imp.to_owned(),
        };
        println!(
            "{:<16} {:<14} {:>9} {:>9} {:>10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
            r.scenario,
            imp,
            fmt_num(r.p50_us, 0),
            fmt_num(r.p99_us, 0),
            fmt_num(r.ops_per_s, 0),
            r.errors,
            fmt_num(ratio(r.p50_us, peer.map(|p| p.p50_us)), 2),
            fmt_num(ratio(r.ops_per_s, peer.map(|p| p.ops_per_s)), 2),
            fmt_num(ratio(r.p50_us, floor.map(|p| p.p50_us)), 2),
            fmt_num(ratio(r.ops_per_s, floor.map(|p| p.ops_per_s)), 2),
            fmt_num(r.cpu_us_per_op, 1),
            fmt_num(ratio(r.cpu_us_per_op, peer.map(|p| p.cpu_us_per_op)), 2),
            fmt_num(r.allocs_per_op, 1),
            extra.trim_end()
        );
    }
}

fn json(machine: &str, rows: &[Row], memory: &[(String, f64, f64, f64)]) -> String {
    let num = |x: f64| {
        if x.is_finite() {
            format!("{x:.3}")
        } else {
            "null".into()
        }
    };
    let mut s = format!("{{\"machine\": {machine:?}, \"scenarios\": [");
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "{}\n  {{\"name\": {:?}, \"impl\": {:?}, \"p50_us\": {}, \"p99_us\": {}, \"ops_per_s\": {}, \"errors\": {}, \"cpu_us_per_op\": {}, \"allocs_per_op\": {}",
            if i == 0 { "" } else { "," },
            r.scenario,
            r.imp,
            num(r.p50_us),
            num(r.p99_us),
            num(r.ops_per_s),
            r.errors,
            num(r.cpu_us_per_op),
            num(r.allocs_per_op)
        );
        if let Some(mode) = r.mode {
            let _ = write!(s, ", \"mode\": {mode:?}");
        }
        for (k, v) in &r.extra {
            let _ = write!(s, ", {k:?}: {}", num(*v));
        }
        s.push('}');
    }
    s.push_str("\n], \"memory\": [");
    for (i, (imp, peak, per_lock, heap_per_lock)) in memory.iter().enumerate() {
        let _ = write!(
            s,
            "{}\n  {{\"impl\": {imp:?}, \"peak_rss_bytes\": {}, \"bytes_per_lock\": {}, \"heap_bytes_per_lock\": {}}}",
            if i == 0 { "" } else { "," },
            num(*peak),
            num(*per_lock),
            num(*heap_per_lock)
        );
    }
    s.push_str("\n]}\n");
    s
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--memory-child") {
        return memory_child(&args[1..]);
    }
    // `cargo bench` passes --bench; `cargo test --bench lock` does not.
    let full = args.iter().any(|a| a == "--bench");
    let scale = if full { FULL } else { SMOKE };
    let started = Instant::now();

    let mut local = None;
    let urls: Vec<String> = match std::env::var("REDQUORUM_NODES") {
        Ok(nodes) => nodes.split(',').map(str::to_owned).collect(),
        Err(_) => {
            let cluster = LocalCluster::start(5).expect("cannot start a local cluster");
            let urls = cluster.urls();
            local = Some(cluster);
            urls
        }
    };
    let ports: Vec<u16> = urls
        .iter()
        .filter_map(|u| u.rsplit(':').next()?.trim_end_matches('/').parse().ok())
        .collect();
    // The nodes' own figures where they run on this machine.
    let loopback = urls
        .iter()
        .all(|u| u.contains("//127.0.0.1:") || u.contains("//localhost:"));
    if loopback
        && ports.len() == urls.len()
        && let Some(probe) = Probe::start(&ports)
    {
        let _ = PROBE.set(probe);
    }
    println!(
        "redquorum benchmark ({} run) on {}; nodes: {}",
        if full { "full" } else { "smoke" },
        machine(),
        urls.join(", ")
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut rows = Vec::new();
    rt.block_on(async {
        let redquorum = Client::Redquorum(Redlock::new(&urls).unwrap());
        let rslock = Client::Rslock(rslock::LockManager::new(urls.clone()));
        let floor = {
            let client = redis::Client::open(urls[0].as_str()).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let sha: String = redis::cmd("SCRIPT")
                .arg("LOAD")
                .arg("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0")
                .query_async(&mut conn)
                .await
                .unwrap();
            let addr = urls[0].trim_start_matches("redis://").trim_end_matches('/');
            let lean = lean::Lean::connect(addr).await.unwrap();
            (Client::Floor(conn, sha.as_str().into()), Client::Lean(lean, sha.into()))
        };
        let (floor, floor_lean) = floor;
        let picked_name = |name: &str| {
            if name.starts_with("floor") {
                return std::env::var("REDQUORUM_BENCH_FLOOR").map_or(true, |v| v != "0");
            }
            std::env::var("REDQUORUM_BENCH_IMPLS").map_or(true, |v| v.split(',').any(|i| i == name))
        };
        let picked = |c: &Client| picked_name(c.name());
        let wanted = |scenario: &str| {
            std::env::var("REDQUORUM_BENCH_ONLY").map_or(true, |v| v.split(',').any(|s| s == scenario))
        };
        let all: Vec<Client> = [redquorum, rslock, floor, floor_lean].into_iter().filter(picked).collect();
        let locks: Vec<Client> = all.iter().filter(|c| !c.name().starts_with("floor")).cloned().collect();
        // Warm up every connection.
        for c in &all {
            c.cycle("bench:warm").await.unwrap();
        }

        let scenario = |name: &'static str, samples: Vec<Sample>, clients: &[Client], rows: &mut Vec<Row>| {
            for (c, s) in clients.iter().zip(samples) {
                let floor = c.name().starts_with("floor");
                let name = if floor && name == "throughput64" {
                    "floor64"
                } else if floor {
                    "floor"
                } else {
                    name
                };
                let mut r = row(name, c.name(), s);
                // A plain lock + unlock is two commands on each node it
                // asks: the client's cost per command, against the floor's.
                if matches!(name, "uncontended" | "throughput64" | "floor" | "floor64") {
                    let nodes = if floor { 1 } else { urls.len() };
                    r.extra.insert("cpu_us_per_cmd", r.cpu_us_per_op / (2 * nodes) as f64);
                }
                rows.push(r);
            }
        };
        let plain = |clients: &[Client]| -> Vec<(Client, Cycle)> {
            clients.iter().map(|c| (c.clone(), Cycle::Plain)).collect()
        };
        // The plain lock and redquorum's other kinds in one interleaved
        // pass, so that the kinds compare with the plain lock under the
        // same drift.
        let mut entrants = if wanted("uncontended") { plain(&all) } else { Vec::new() };
        // The `write` row's client, one of its own, holds a read lock on
        // another name for the whole pass (kept alive): its writes pay the
        // upgrade check's lookup, the other rows' its atomic load only.
        let mut reading = None;
        if let Some(r) = all.iter().find(|c| c.name() == "redquorum") {
            for cycle in Cycle::KINDS {
                if wanted(cycle.scenario()) {
                    let r = &match cycle {
                        Cycle::Write => {
                            let redlock = Redlock::new(&urls).unwrap();
                            let mut read = redlock.lock("bench:write:reader", TTL).shared().await.unwrap();
                            read.keep_alive();
                            reading = Some(read);
                            Client::Redquorum(redlock)
                        }
                        _ => r.clone(),
                    };
                    // Warm up its scripts; a kind that fails here fails the smoke run.
                    r.run(cycle, &format!("bench:warm:{}", cycle.scenario())).await.unwrap();
                    entrants.push((r.clone(), cycle));
                }
            }
        }
        if !entrants.is_empty() {
            let mut names: Vec<&str> = entrants.iter().map(|(_, c)| c.scenario()).collect();
            names.dedup();
            println!("{} …", names.join(", "));
            let s = uncontended(&entrants, scale, "u", Duration::MAX).await;
            for ((client, cycle), s) in entrants.iter().zip(s) {
                scenario(cycle.scenario(), vec![s], std::slice::from_ref(client), &mut rows);
            }
        }
        if let Some(read) = reading {
            read.release().await.unwrap();
        }
        if wanted("throughput64") {
            println!("throughput64 …");
            let s = throughput(&all, 64, scale).await;
            scenario("throughput64", s, &all, &mut rows);
        }
        let handoffs: Vec<(&str, usize)> = [("handoff", 8), ("handoff_many", scale.many_waiters)]
            .into_iter()
            .filter(|(name, _)| wanted(name))
            .collect();
        if !handoffs.is_empty() {
            let names: Vec<String> = handoffs
                .iter()
                .map(|(name, waiters)| format!("{name} ({waiters} waiters)"))
                .collect();
            println!("{}, interleaved …", names.join(" and "));
            let kinds: Vec<Waiting> = [Waiting::Wake, Waiting::Poll, Waiting::Rslock]
                .into_iter()
                .filter(|k| picked_name(k.imp()) || picked_name(&format!("{}/{}", k.imp(), k.mode())))
                .collect();
            let counts: Vec<usize> = handoffs.iter().map(|&(_, waiters)| waiters).collect();
            let samples = handoff(&kinds, &urls, scale, &counts).await;
            for ((name, _), samples) in handoffs.iter().zip(samples) {
                for (kind, s) in kinds.iter().zip(samples) {
                    let mut r = row(name, kind.imp(), s);
                    r.mode = Some(kind.mode());
                    rows.push(r);
                }
            }
        }
        if wanted("failover") {
            let times = if scale.iterations > 100 { 10 } else { 2 };
            println!("failover ({times} leaders stalled, TTL 1 s) …");
            let s = failover(&urls, Duration::from_secs(1), times).await;
            rows.push(row("failover", "redquorum", s));
        }
        if wanted("keep_alive_many") && loopback {
            println!("keep_alive_many ({} locks for {:?}) …", scale.kept, scale.kept_for);
            let s = keep_alive_many(&urls, &ports, scale).await;
            rows.push(row("keep_alive_many", "redquorum", s));
        }
        if wanted("burst") && loopback {
            println!("burst ({} at once) …", scale.burst);
            let s = burst(&locks, &ports, scale).await;
            scenario("burst", s, &locks, &mut rows);
        }
        let scaleouts = ["scaleout1", "scaleout16", "scaleout64"];
        if scaleouts.iter().any(|name| wanted(name)) && local.is_some() {
            println!("scaleout (3 clusters of 3 shards against 3 servers) …");
            rows.extend(scaleout(scale, &scaleouts, &wanted).await);
        }
        if !wanted("frozen_node") && !wanted("dead_node") {
            // Skipped for profiling.
        } else if let Some(cluster) = local.as_mut() {
            println!("frozen_node …");
            // The frozen and then dead node would not answer `INFO`.
            if let Some(probe) = PROBE.get() {
                probe.on.store(false, Ordering::Relaxed);
            }
            cluster.freeze(4);
            let s = uncontended(&plain(&locks), scale, "f", scale.peer_budget).await;
            scenario("frozen_node", s, &locks, &mut rows);
            cluster.thaw(4);
            println!("dead_node …");
            cluster.kill(4);
            let s = uncontended(&plain(&locks), scale, "d", scale.peer_budget).await;
            scenario("dead_node", s, &locks, &mut rows);
            cluster.restart(4).unwrap();
        } else {
            println!("frozen_node, dead_node: skipped (REDQUORUM_NODES given; they need a local cluster)");
        }
    });
    drop(rt);
    let mut mem = Vec::new();
    if std::env::var("REDQUORUM_BENCH_ONLY").is_err() {
        println!("ceiling …");
        rows.extend(ceiling(&ports, scale));
    }
    // Memory runs in a full run, or alone as `REDQUORUM_BENCH_ONLY=memory`.
    let memory_wanted =
        std::env::var("REDQUORUM_BENCH_ONLY").map_or(true, |v| v.split(',').any(|s| s == "memory"));
    if memory_wanted {
        println!("memory …");
    }
    for imp in ["redquorum", "rslock"]
        .into_iter()
        .filter(|_| memory_wanted)
    {
        if let Some((peak, per_lock, heap_per_lock)) = memory(imp, &urls, scale.held_locks) {
            mem.push((imp.to_owned(), peak, per_lock, heap_per_lock));
        }
    }

    print_table(&rows);
    println!("\nmemory, {} locks held at once:", scale.held_locks);
    for (imp, peak, per_lock, heap_per_lock) in &mem {
        println!(
            "  {imp:<10} peak RSS {:>7.1} MiB, {:>6.0} bytes per held lock; heap {:>6.0} bytes per held lock",
            peak / 1048576.0,
            per_lock,
            heap_per_lock
        );
    }
    let machine = machine();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench-report.json");
    match std::fs::write(path, json(&machine, &rows, &mem)) {
        Ok(()) => println!("\nwrote {path}"),
        Err(e) => println!("\ncould not write {path}: {e}"),
    }
    println!("took {:.1} s", started.elapsed().as_secs_f64());
    assert!(!rows.is_empty() || !mem.is_empty());
}
