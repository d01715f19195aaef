//! Shared helpers for the integration tests: real local servers and ways to
//! look at the keys on its nodes.
#![allow(dead_code)]

pub mod compose;
pub mod logs;
pub mod proxy;

use std::time::Duration;

use redquorum::Redlock;
use redquorum::local_servers::{LocalServers, Reply, command};

/// A per-node timeout large enough that a loaded CI machine never misses it
/// on a healthy node; tests that need a node to time out freeze it.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1_000);

/// Starts `n` local nodes, with a message that says how to install Redis if
/// it is missing.
pub fn servers(n: usize) -> LocalServers {
    LocalServers::start(n)
        .unwrap_or_else(|e| panic!("cannot start local redis-server processes: {e}"))
}

/// A lock manager over the servers with test-friendly options: no retries
/// unless asked, and a generous node timeout.
pub fn redlock(servers: &LocalServers) -> Redlock {
    builder(servers).build().unwrap()
}

pub fn builder(servers: &LocalServers) -> redquorum::Builder {
    Redlock::builder()
        .nodes(servers.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry_count(0)
        .retry_delay(Duration::from_millis(20))
        .retry_jitter(Duration::from_millis(10))
}

/// For tests of short TTLs (a few hundred ms): a node timeout below them,
/// and retries so that one slow answer on a loaded machine costs a retry,
/// not the test.
pub fn short_ttl(servers: &LocalServers) -> Redlock {
    builder(servers)
        .node_timeout(Duration::from_millis(100))
        .retry_count(10)
        .build()
        .unwrap()
}

/// Takes and releases a lock on `"warm"`: every node connected, and the
/// release script loaded, before a test's faults begin.
pub async fn warm(redlock: &Redlock) {
    redlock
        .try_lock("warm", Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// How many nodes of a report failed in a way that matches `pred`.
pub fn count(report: &redquorum::Report, pred: impl Fn(&redquorum::NodeFailure) -> bool) -> usize {
    report.failures().iter().filter(|(_, f)| pred(f)).count()
}

/// The value of `key` on node `i`, `None` if it is missing.
pub fn get(servers: &LocalServers, i: usize, key: &str) -> Option<String> {
    match command(servers.port(i), &["GET", key]).expect("GET") {
        Reply::Bulk(v) => v.map(|b| String::from_utf8(b).unwrap()),
        other => panic!("GET {key} on node {i}: {other:?}"),
    }
}

/// The remaining TTL of `key` on node `i` in milliseconds (-2 if missing).
pub fn pttl(servers: &LocalServers, i: usize, key: &str) -> i64 {
    match command(servers.port(i), &["PTTL", key]).expect("PTTL") {
        Reply::Int(n) => n,
        other => panic!("PTTL on node {i}: {other:?}"),
    }
}

/// Node `i`'s clock (`TIME`), in whole seconds as milliseconds.
pub fn node_time_ms(servers: &LocalServers, i: usize) -> u64 {
    match run(servers, i, &["TIME"]) {
        Reply::Array(Some(t)) => match t.as_slice() {
            [Reply::Bulk(Some(s)), _] => {
                String::from_utf8(s.clone())
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
                    * 1000
            }
            other => panic!("TIME on node {i}: {other:?}"),
        },
        other => panic!("TIME on node {i}: {other:?}"),
    }
}

/// Sends a command to node `i` and expects it not to be an error.
pub fn run(servers: &LocalServers, i: usize, args: &[&str]) -> Reply {
    let reply = command(servers.port(i), args).expect("command");
    assert!(
        !matches!(reply, Reply::Error(_)),
        "{args:?} on node {i}: {reply:?}"
    );
    reply
}

/// A figure of `INFO commandstats` on node `i`: `field` (`calls`,
/// `rejected_calls`, …) of `command`, summed over its subcommands (Redis 7
/// counts `config|get` apart), 0 if it never ran.
pub fn command_stat(servers: &LocalServers, i: usize, command: &str, field: &str) -> u64 {
    let Reply::Bulk(Some(text)) = run(servers, i, &["INFO", "commandstats"]) else {
        panic!("INFO commandstats on node {i}")
    };
    let whole = format!("cmdstat_{command}:");
    let sub = format!("cmdstat_{command}|");
    let prefix = format!("{field}=");
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with(&whole) || l.starts_with(&sub))
        .filter_map(|l| l.split([':', ',']).find_map(|f| f.strip_prefix(&prefix)))
        .map(|n| n.trim().parse::<u64>().unwrap())
        .sum()
}

/// How many of the given nodes hold `key`, of any kind (a mutex's string,
/// a reentrant lock's hash).
pub fn holders(servers: &LocalServers, nodes: &[usize], key: &str) -> usize {
    nodes
        .iter()
        .filter(|&&i| run(servers, i, &["EXISTS", key]) == Reply::Int(1))
        .count()
}

/// Waits (bounded) until exactly `n` of `nodes` hold `key`: requests to the
/// nodes beyond the majority finish in the background after a call returns.
/// Panics after `limit`.
pub async fn await_holders(
    servers: &LocalServers,
    nodes: &[usize],
    key: &str,
    n: usize,
    limit: Duration,
) {
    let start = std::time::Instant::now();
    loop {
        let held = holders(servers, nodes, key);
        if held == n {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{key} held on {held} nodes, not {n}, after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (bounded) until no node among `nodes` holds `key`.
pub async fn await_gone(servers: &LocalServers, nodes: &[usize], key: &str, limit: Duration) {
    await_holders(servers, nodes, key, 0, limit).await;
}

/// The Redis key of a resource under the default prefix.
pub fn key(resource: &str) -> String {
    format!("redquorum:{resource}")
}
