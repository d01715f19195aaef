//! `uncontended` (with redquorum's other kinds: `reentrant`, `lock_all3`,
//! `fenced`, `semaphore`, `read`, `write`, `campaign`, …) and `throughput64`.
//!
//! [`uncontended`]: one task, each entrant (a client and the [`Cycle`] it
//! runs) in turn, interleaved in rounds, each iteration on a fresh
//! resource; the latency of each iteration. It also runs `frozen_node` and
//! `dead_node`, with a node frozen or killed around it by `main`.
//! [`throughput`]: `tasks` concurrent tasks on distinct resources for timed
//! rounds, each client in turn; also the load of `scaleout`.

use std::time::{Duration, Instant};

use crate::Scale;
use crate::clients::Client;
use crate::measure::{Sample, Usage};

/// What one uncontended iteration does, on resources no one holds.
#[derive(Clone, Copy)]
pub enum Cycle {
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
pub const PERMITS: u32 = 8;

/// The owner of the reentrant holds. One fixed id, as one job would use:
/// each iteration takes a fresh resource, so every take finds it free.
pub const OWNER: &str = "bench-owner";

impl Cycle {
    /// redquorum's kinds other than the plain lock.
    pub const KINDS: [Cycle; 8] = [
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
    pub fn scenario(self) -> &'static str {
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
    pub fn lock_kind(self) -> &'static str {
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

/// Uncontended cycles on fresh resources, each entrant (a client and what
/// it does) in turn, interleaved in rounds; an entrant stops once it has
/// spent `budget`.
pub async fn uncontended(
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
pub async fn throughput(clients: &[Client], tasks: usize, scale: Scale) -> Vec<Sample> {
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
