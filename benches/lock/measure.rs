//! What every row measures besides its latencies, and how a row is made.
//!
//! The client's own cost: this process's CPU time (`getrusage`, user and
//! system, all threads) and its allocations, counted by a global allocator
//! wrapping the system's ([`Counting`], which also keeps the live heap
//! bytes for the memory figure). The nodes' cost, where they run on this
//! machine: CPU and socket reads from each node's own `INFO`, over one
//! kept-open connection per node, less what a reading itself costs them
//! ([`Probe`]). A [`Usage`] taken before a window and charged after it adds
//! both to the scenario's [`Sample`]; [`row`] turns a sample into a line of
//! the report ([`Row`]).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// The system allocator, counting allocations (`alloc`, `alloc_zeroed` and
/// `realloc` calls) for the `allocs_per_op` figures.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Bytes allocated and not yet freed: the heap a process holds, without the
/// allocator's own overhead and fragmentation that RSS also counts.
pub static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);

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
pub struct Servers {
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
pub struct Probe {
    nodes: std::sync::Mutex<Vec<std::io::BufReader<std::net::TcpStream>>>,
    bias: Servers,
    /// Off while a node is frozen or dead: it would not answer.
    pub on: AtomicBool,
}

pub static PROBE: std::sync::OnceLock<Probe> = std::sync::OnceLock::new();

impl Probe {
    /// Connects to the nodes on `ports` (on this machine) and measures the
    /// cost of a reading; `None` where that fails.
    pub fn start(ports: &[u16]) -> Option<Probe> {
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
pub struct Usage {
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
    pub fn now() -> Usage {
        let servers = servers_now();
        let (cpu, allocations) = client_usage();
        Usage {
            cpu,
            allocations,
            servers,
        }
    }

    /// Adds what was spent since `self` to `sample`.
    pub fn charge(self, sample: &mut Sample) {
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

/// What one implementation did in one scenario.
pub struct Sample {
    pub latencies: Vec<Duration>,
    pub ops: u64,
    pub busy: Duration,
    pub errors: u64,
    /// The client process's CPU time and allocations while it ran.
    pub cpu: Duration,
    pub allocations: u64,
    /// What the nodes did meanwhile; `None` where that is not measured.
    pub servers: Option<Servers>,
    pub extra: BTreeMap<&'static str, f64>,
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
    pub fn percentile_us(&mut self, p: f64) -> f64 {
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
pub struct Row {
    pub scenario: &'static str,
    pub imp: &'static str,
    /// How waiters wait, where it matters (hand-off): "wake" or "poll".
    pub mode: Option<&'static str>,
    pub p50_us: f64,
    pub p99_us: f64,
    pub ops_per_s: f64,
    pub errors: u64,
    /// The client process's CPU time per operation, user and system.
    pub cpu_us_per_op: f64,
    /// Allocations per operation in the client process.
    pub allocs_per_op: f64,
    pub extra: BTreeMap<&'static str, f64>,
}

pub fn row(scenario: &'static str, imp: &'static str, mut s: Sample) -> Row {
    if let Some(servers) = s.servers.filter(|_| s.ops > 0) {
        let server_us = servers.cpu.as_secs_f64() * 1e6 / s.ops as f64;
        s.extra.insert("server_cpu_us_per_op", server_us);
        // Fewer reads than commands sent: commands arrived batched
        // (pipelined) in one read.
        s.extra
            .insert("server_reads_per_op", servers.reads as f64 / s.ops as f64);
        // The most operations a second this machine's cores could run at
        // this client's and the nodes' CPU per operation, where both share
        // the cores (local servers). Not for the hand-off, whose rate is
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
