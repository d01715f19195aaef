//! redquorum against rslock and against the physical floor, side by side in
//! one run, interleaved (A B A B …) so that drift hits all alike.
//!
//! ```text
//! cargo bench --bench lock     # the full run (six to seven minutes), prints the table
//! cargo test  --bench lock     # the smoke run (seconds): same code, tiny counts
//! ```
//!
//! It starts its own five local servers, or uses `REDQUORUM_NODES` (then the
//! frozen and dead node scenarios, which need to signal the nodes, are
//! skipped). The table also goes to `target/bench-report.json`, each row
//! with its ratios to its peer in the same run (`cpu_vs_rslock`,
//! `server_cpu_vs_rslock`, `lock_s_vs_rslock`, …; a cluster row's
//! `ops_vs_servers3` and `cpu_vs_servers3`).
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
//! (`cluster3x3_noguard`: no `INFO replication` read by each grant's script):
//! locks a second, and the CPU each primary of the first
//! cluster (or the first server) spent per lock
//! (`shard<i>_cpu_us_per_op`); then `scaleout_keys`: the keys on each
//! primary of the first cluster while 3 000 locks are held at once. All the
//! servers share this machine's cores, so the locks a second say what the
//! client and the protocol cost, not what separate shard machines would
//! give.
//!
//! The code, by family: this file (the scale, the order of the run, the
//! filters) and its modules: [`measure`] (the client's and the nodes' cost,
//! the samples and rows), [`clients`] (the implementations), [`uncontended`]
//! (with the other kinds, `throughput64`, `frozen_node` and `dead_node`),
//! [`handoff`], [`failover`], [`keep_alive`], [`burst`], [`scaleout`],
//! [`ceiling`], [`memory`] and [`report`] (the table and the JSON).

mod burst;
mod ceiling;
mod clients;
mod failover;
mod handoff;
mod keep_alive;
mod measure;
mod memory;
mod report;
mod scaleout;
mod uncontended;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redquorum::Redlock;
use redquorum::local_servers::LocalServers;

use burst::burst;
use ceiling::ceiling;
use clients::Client;
use failover::failover;
use handoff::{Waiting, handoff};
use keep_alive::keep_alive_many;
use measure::{PROBE, Probe, Row, Sample, row};
use memory::{memory, memory_child};
use report::{json, machine, print_table};
use scaleout::scaleout;
use uncontended::{Cycle, throughput, uncontended};

pub const TTL: Duration = Duration::from_secs(10);
/// [`TTL`] in milliseconds, as the lean client sends it.
pub const TTL_MS: &[u8] = b"10000";

#[path = "../support/lean.rs"]
mod lean;

/// How much to measure.
#[derive(Clone, Copy)]
pub struct Scale {
    /// Uncontended iterations per implementation, in `rounds` interleaved rounds.
    pub iterations: usize,
    pub rounds: usize,
    /// Seconds per implementation for the timed scenarios, split into rounds.
    pub timed_secs: f64,
    /// The most a peer may spend on the frozen-node scenario.
    pub peer_budget: Duration,
    /// Locks held at once for the memory figure.
    pub held_locks: usize,
    /// Requests per node for redis-benchmark.
    pub ceiling_requests: usize,
    /// `lock()` calls at once in the burst.
    pub burst: usize,
    /// Waiters on one resource in `handoff_many`.
    pub many_waiters: usize,
    /// Locks held with `keep_alive` in `keep_alive_many`, their TTL, and
    /// for how long.
    pub kept: usize,
    pub kept_ttl: Duration,
    pub kept_for: Duration,
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
            let servers = LocalServers::start(5).expect("cannot start local servers");
            let urls = servers.urls();
            local = Some(servers);
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
        } else if let Some(servers) = local.as_mut() {
            println!("frozen_node …");
            // The frozen and then dead node would not answer `INFO`.
            if let Some(probe) = PROBE.get() {
                probe.on.store(false, Ordering::Relaxed);
            }
            servers.freeze(4);
            let s = uncontended(&plain(&locks), scale, "f", scale.peer_budget).await;
            scenario("frozen_node", s, &locks, &mut rows);
            servers.thaw(4);
            println!("dead_node …");
            servers.kill(4);
            let s = uncontended(&plain(&locks), scale, "d", scale.peer_budget).await;
            scenario("dead_node", s, &locks, &mut rows);
            servers.restart(4).unwrap();
        } else {
            println!("frozen_node, dead_node: skipped (REDQUORUM_NODES given; they need local servers)");
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
