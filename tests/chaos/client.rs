//! One client process of a chaos run: a few tasks that lock, use and
//! release a handful of resources until the run ends, logging what they
//! believed to their history file (see `history`).
//!
//! A critical section is one of:
//! * a read-modify-write of the resource's register (read, wait up to
//!   `hold_ms`, sometimes extend the lock, write plus one only while the
//!   lock has a quarter of its TTL left), then release;
//! * a pause (one in `pause_one_in`): sleep past the lock's validity, then
//!   release, which finds the lock gone.
//!
//! One `lock()` call in `cancel_one_in` is dropped after a random 0–2 ms
//! instead of awaited.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redquorum::{Error, Lock, NodeFailure, Redlock};

use crate::history::{Event, Interval, now_ns};

/// What one client process does; handed over in one environment variable.
#[derive(Debug, Clone)]
pub struct Spec {
    pub nodes: Vec<String>,
    /// The port of the register's own Redis node.
    pub register: u16,
    pub tasks: usize,
    pub resources: usize,
    pub run: Duration,
    pub ttl: Duration,
    pub node_timeout: Duration,
    pub hold_ms: u64,
    /// 0: never.
    pub pause_one_in: u32,
    pub cancel_one_in: u32,
    pub extend_one_in: u32,
    pub restart_guard: bool,
    /// Off: waiters poll every 20 ± 15 ms, as most Redlock clients do.
    pub wake_on_release: bool,
    pub prefix: String,
    /// Names this process in the history.
    pub name: String,
    pub history: String,
}

impl Spec {
    pub fn encode(&self) -> String {
        [
            format!("nodes={}", self.nodes.join(",")),
            format!("register={}", self.register),
            format!("tasks={}", self.tasks),
            format!("resources={}", self.resources),
            format!("run_ms={}", self.run.as_millis()),
            format!("ttl_ms={}", self.ttl.as_millis()),
            format!("node_timeout_ms={}", self.node_timeout.as_millis()),
            format!("hold_ms={}", self.hold_ms),
            format!("pause_one_in={}", self.pause_one_in),
            format!("cancel_one_in={}", self.cancel_one_in),
            format!("extend_one_in={}", self.extend_one_in),
            format!("restart_guard={}", self.restart_guard),
            format!("wake_on_release={}", self.wake_on_release),
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
            nodes: get("nodes").split(',').map(str::to_owned).collect(),
            register: n("register") as u16,
            tasks: n("tasks") as usize,
            resources: n("resources") as usize,
            run: Duration::from_millis(n("run_ms")),
            ttl: Duration::from_millis(n("ttl_ms")),
            node_timeout: Duration::from_millis(n("node_timeout_ms")),
            hold_ms: n("hold_ms"),
            pause_one_in: n("pause_one_in") as u32,
            cancel_one_in: n("cancel_one_in") as u32,
            extend_one_in: n("extend_one_in") as u32,
            restart_guard: get("restart_guard") == "true",
            wake_on_release: get("wake_on_release") == "true",
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
            .retry_count(3)
            .retry_delay(Duration::from_millis(20))
            .retry_jitter(Duration::from_millis(15))
            .wait_timeout(spec.ttl)
            .restart_guard(spec.restart_guard)
            .wake_on_release(spec.wake_on_release)
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
        // background; they need the runtime a little longer.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut file = std::fs::File::create(&spec.history).expect("history file");
        for e in events.lock().unwrap().iter() {
            writeln!(file, "{e}").unwrap();
        }
    });
}

struct Task {
    redlock: Redlock,
    register: redis::aio::MultiplexedConnection,
    spec: Arc<Spec>,
    events: Arc<Mutex<Vec<Event>>>,
    name: String,
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
            let resource = format!("r{}", rand::random_range(0..self.spec.resources));
            let start = now_ns();
            let call = self.redlock.lock(&resource, self.spec.ttl);
            let result = if Self::one_in(self.spec.cancel_one_in) {
                let after = Duration::from_micros(rand::random_range(0..2_000));
                match tokio::time::timeout(after, call).await {
                    Ok(result) => result,
                    Err(_) => {
                        self.log(Event::Cancelled);
                        continue;
                    }
                }
            } else {
                call.await
            };
            let latency_us = (now_ns() - start) / 1_000;
            match result {
                Ok(lock) => {
                    self.log(Event::Acquired { latency_us });
                    self.hold(resource, lock).await;
                }
                Err(e) => {
                    self.log(Event::Failed {
                        cause: cause(&e),
                        latency_us,
                    });
                    // Not a busy loop while the cluster is down.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    /// The critical section, then the release.
    async fn hold(&self, resource: String, mut lock: Lock) {
        let begin = now_ns();
        let mut deadline = deadline(&lock);
        let paused = Self::one_in(self.spec.pause_one_in);
        if paused {
            tokio::time::sleep(self.spec.ttl + self.spec.ttl / 4).await;
        } else {
            let key = format!("register:{}{resource}", self.spec.prefix);
            let mut register = self.register.clone();
            let value: Option<u64> = register.get(&key).await.expect("register GET");
            let hold = rand::random_range(0..=self.spec.hold_ms);
            tokio::time::sleep(Duration::from_millis(hold)).await;
            let mut valid = true;
            if Self::one_in(self.spec.extend_one_in) {
                valid = lock.extend(self.spec.ttl).await.is_ok();
                if valid {
                    deadline = self::deadline(&lock);
                }
            }
            if valid && lock.remaining() > self.spec.ttl / 4 {
                let () = register
                    .set(&key, value.unwrap_or(0) + 1)
                    .await
                    .expect("register SET");
                self.log(Event::Wrote {
                    resource: resource.clone(),
                    at: now_ns(),
                    deadline,
                });
            }
        }
        let released = now_ns();
        let outcome = match lock.release().await {
            Ok(()) => "ok".to_owned(),
            Err(e) => cause(&e),
        };
        self.log(Event::Held {
            resource,
            interval: Interval {
                client: self.name.clone(),
                start: begin,
                end: released.min(deadline),
                paused,
            },
        });
        self.log(Event::Released { outcome });
    }
}

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
