//! Under load, the lock queues at the nodes' pace: a burst of locks or of
//! releases, with the default options, ends with every lock taken and no
//! key left on any node, not with node timeouts counted against the
//! client's own backlog. Not timed: what is asserted is what happened.

mod common;

use std::future::IntoFuture;
use std::time::Duration;

use common::*;
use futures::future::join_all;
use redquorum::Redlock;
use redquorum::local_cluster::{LocalCluster, Reply};

const TTL: Duration = Duration::from_secs(30);

/// How many keys under the default prefix node `i` holds.
fn keys_on(c: &LocalCluster, i: usize) -> i64 {
    match run(
        c,
        i,
        &[
            "EVAL",
            "return #redis.call('KEYS', ARGV[1])",
            "0",
            "redquorum:*",
        ],
    ) {
        Reply::Int(n) => n,
        other => panic!("KEYS on node {i}: {other:?}"),
    }
}

/// Prints how many of `results` are `Ok` (`done`: what they did) and
/// panics, with the first error, unless all are.
fn all_ok<T>(results: &[Result<T, redquorum::Error>], done: &str) {
    let failed: Vec<String> = results
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.to_string()))
        .collect();
    println!(
        "{} of {} {done}",
        results.len() - failed.len(),
        results.len()
    );
    assert!(
        failed.is_empty(),
        "{} failed, the first: {}",
        failed.len(),
        failed[0]
    );
}

/// 5 000 `lock()` calls at once on distinct resources (a scheduler
/// starting its jobs, a batch taking a lock per item), then 5 000
/// releases at once: every lock is taken, every release succeeds, and no
/// node keeps a key. (Before: most calls failed after their retries, the
/// node timeout spent waiting behind the client's own requests, and most
/// released keys stayed for their TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_locks_then_of_releases_takes_all_and_leaves_no_key() {
    const N: usize = 5_000;
    let c = cluster(5);
    let redlock = Redlock::new(c.urls()).unwrap();
    let names: Vec<String> = (0..N).map(|i| format!("burst-{i}")).collect();
    let taken = join_all(
        names
            .iter()
            .map(|name| redlock.lock(name, TTL).into_future()),
    )
    .await;
    all_ok(&taken, "taken");
    let locks: Vec<_> = taken.into_iter().map(Result::unwrap).collect();
    let released = join_all(locks.into_iter().map(|lock| lock.release())).await;
    all_ok(&released, "released");
    assert!(
        redlock.drain(Duration::from_secs(30)).await,
        "background work still running"
    );
    let left: Vec<i64> = (0..5).map(|i| keys_on(&c, i)).collect();
    assert_eq!(left, [0; 5], "keys left on the nodes");
}

/// A node frozen (SIGSTOP) while a lock is taken and released: the
/// acquisition waits in the frozen node's socket, the release times out,
/// and the connection, silent for over a second, is replaced before it. On
/// the thaw the node reads the acquisition and sets the key; the release,
/// written behind it on the retired connection and sent again on the new
/// one until answered, removes it. (Before: the key stayed for its TTL.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_timed_out_on_a_frozen_node_leaves_no_key_after_the_thaw() {
    let mut c = cluster(3);
    let redlock = Redlock::builder()
        .nodes(c.urls())
        .node_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_millis(500))
        .retry_count(0)
        .build()
        .unwrap();
    warm(&redlock).await;
    c.freeze(2);
    let lock = redlock.try_lock("r", TTL).await.unwrap();
    // Silent for over a second, then a timeout on it: replaced.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    redlock
        .try_lock("other", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    lock.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.thaw(2);
    await_gone(&c, &[0, 1, 2], &key("r"), Duration::from_secs(10)).await;
    await_gone(&c, &[0, 1, 2], &key("other"), Duration::from_secs(10)).await;
    assert!(redlock.drain(Duration::from_secs(10)).await);
}
