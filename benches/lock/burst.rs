//! `burst`: `scale.burst` `lock()` calls at once on distinct resources, then
//! every release at once, each library with its defaults: what was
//! acquired, the keys left on the nodes afterwards (counted with `KEYS` on
//! each node) and the seconds each phase took.

use std::time::{Duration, Instant};

use crate::clients::Client;
use crate::measure::{Sample, Usage};
use crate::{Scale, TTL};

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
pub async fn burst(clients: &[Client], ports: &[u16], scale: Scale) -> Vec<Sample> {
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
