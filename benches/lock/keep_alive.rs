//! `keep_alive_many`: many locks held with `keep_alive()` on a healthy
//! servers for a while: how many were lost, and the client's and nodes'
//! CPU per renewal, the renewals counted as the nodes' `EVALSHA` calls
//! (`INFO commandstats`) meanwhile.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use redquorum::Redlock;

use crate::Scale;
use crate::measure::{Sample, Usage};

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
/// many were lost on a healthy servers, and the client's and the nodes'
/// CPU per renewal (an extension on one node, counted as the nodes' script
/// calls while held).
pub async fn keep_alive_many(urls: &[String], ports: &[u16], scale: Scale) -> Sample {
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
