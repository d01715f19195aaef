//! Reentrant holds against five real local servers: nested takes and
//! releases one by one, other owners and plain locks kept out throughout,
//! the TTL refreshed by each take, expiry clearing every hold, and the trap
//! of counting holds per node (divergent counts) shown not to open a gap.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redquorum::local_servers::{LocalServers, Reply};
use redquorum::{ConfigError, Error, Lock, NodeFailure, Redlock};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The hold fields of `key` on node `i` (the hash's fields but the owner
/// `o` and the creator `i`), sorted; empty if the key is missing.
fn holds(c: &LocalServers, i: usize, key: &str) -> Vec<String> {
    match run(c, i, &["HKEYS", key]) {
        Reply::Array(fields) => {
            let mut holds: Vec<String> = fields
                .unwrap_or_default()
                .into_iter()
                .filter_map(|f| match f {
                    Reply::Bulk(Some(b)) => Some(String::from_utf8(b).unwrap()),
                    _ => None,
                })
                .filter(|f| f != "o" && f != "i")
                .collect();
            holds.sort();
            holds
        }
        other => panic!("HKEYS on node {i}: {other:?}"),
    }
}

fn sorted(tokens: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = tokens.iter().map(|t| t.to_string()).collect();
    v.sort();
    v
}

/// Waits (bounded) until every node in `nodes` shows exactly `expected`
/// holds: requests beyond the majority finish in the background.
async fn await_holds(c: &LocalServers, nodes: &[usize], key: &str, expected: &[&str]) {
    let start = Instant::now();
    let expected = sorted(expected);
    loop {
        if nodes.iter().all(|&i| holds(c, i, key) == expected) {
            return;
        }
        let seen: Vec<_> = nodes.iter().map(|&i| holds(c, i, key)).collect();
        assert!(
            start.elapsed() < secs(5),
            "{key}: holds {seen:?}, expected {expected:?} on {nodes:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn take(redlock: &Redlock, owner: &str, ttl: Duration) -> Result<Lock, Error> {
    redlock.lock("r", ttl).reentrant(owner).retries(0).await
}

/// Another owner and a plain lock are both refused, each with a report in
/// which the majority says "held by another owner" (never a type error).
async fn assert_excluded(redlock: &Redlock) {
    let other = take(redlock, "owner-b", secs(10)).await.unwrap_err();
    let plain = redlock.try_lock("r", secs(10)).await.unwrap_err();
    for err in [other, plain] {
        let report = err.report().unwrap();
        assert!(report.held_by_others() >= 3, "{err}");
        assert_eq!(
            count(report, |f| matches!(f, NodeFailure::WrongType(_))),
            0,
            "{err}"
        );
    }
}

#[tokio::test]
async fn nested_takes_hold_until_the_last_release_and_exclude_others_throughout() {
    let c = servers(5);
    let redlock = redlock(&c);
    let k = key("r");
    let outer = take(&redlock, "owner-a", secs(10)).await.unwrap();
    await_holds(&c, &ALL, &k, &[outer.token()]).await;
    assert_eq!(get_field(&c, 0, &k, "o").as_deref(), Some("owner-a"));
    assert_excluded(&redlock).await;

    // The same owner takes it again at once: a second hold.
    let inner = take(&redlock, "owner-a", secs(10)).await.unwrap();
    assert_ne!(inner.token(), outer.token());
    await_holds(&c, &ALL, &k, &[outer.token(), inner.token()]).await;
    assert_excluded(&redlock).await;

    // Releasing the outer hold first leaves the inner one holding.
    outer.release().await.unwrap();
    await_holds(&c, &ALL, &k, &[inner.token()]).await;
    assert!(!inner.is_lost());
    assert_excluded(&redlock).await;

    // The last release frees it for everyone.
    inner.release().await.unwrap();
    await_gone(&c, &ALL, &k, secs(5)).await;
    take(&redlock, "owner-b", secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    redlock
        .try_lock("r", secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The value of `field` in the hash `key` on node `i`.
fn get_field(c: &LocalServers, i: usize, key: &str, field: &str) -> Option<String> {
    match run(c, i, &["HGET", key, field]) {
        Reply::Bulk(v) => v.map(|b| String::from_utf8(b).unwrap()),
        other => panic!("HGET on node {i}: {other:?}"),
    }
}

#[tokio::test]
async fn a_plain_lock_keeps_a_reentrant_owner_out_and_is_never_a_type_error() {
    let c = servers(5);
    let redlock = redlock(&c);
    let plain = redlock.lock("r", secs(10)).await.unwrap();
    await_holders(&c, &ALL, &key("r"), 5, secs(5)).await;
    let err = take(&redlock, "owner-a", secs(10)).await.unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(
        report.held_by_others(),
        5 - report.agreed() - not_waited(report)
    );
    assert!(report.held_by_others() >= 3, "{err}");
    // The loser's rollback left the plain lock's string alone.
    for i in ALL {
        assert_eq!(get(&c, i, &key("r")).as_deref(), Some(plain.token()));
    }
    // A reentrant waiter sees the plain holder and is woken by its release.
    let waiter = spawn_waiter(&redlock, "owner-a", 50);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    plain.release().await.unwrap();
    let hold = waiter.await.unwrap().0.unwrap();
    // Woken by the announcement, not by the 10 s TTL nor a retry limit.
    assert!(released.elapsed() < secs(2), "{:?}", released.elapsed());
    hold.release().await.unwrap();
}

/// `owner` waiting for "r" (for up to 9 s and `retries` counted retries) in
/// a task of its own: the lock, or why not, and when the call returned.
fn spawn_waiter(
    redlock: &Redlock,
    owner: &'static str,
    retries: u32,
) -> tokio::task::JoinHandle<(Result<Lock, Error>, Instant)> {
    let redlock = redlock.clone();
    tokio::spawn(async move {
        let lock = redlock
            .lock("r", secs(10))
            .reentrant(owner)
            .retries(retries)
            .wait(secs(9))
            .await;
        (lock, Instant::now())
    })
}

/// Another owner waits (`waiter`) while `outer` and `inner` hold: the outer
/// hold is released first, and the waiter must still be waiting `pause`
/// later; once the inner one is released too, it gets the lock within two
/// seconds (woken, not by a TTL).
async fn outer_then_inner(
    outer: Lock,
    inner: Lock,
    waiter: tokio::task::JoinHandle<(Result<Lock, Error>, Instant)>,
    pause: Duration,
) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    outer.release().await.unwrap();
    tokio::time::sleep(pause).await;
    assert!(
        !waiter.is_finished(),
        "the waiter finished while the inner hold held: {:?}",
        waiter.await.unwrap().0
    );
    let last = Instant::now();
    inner.release().await.unwrap();
    let (lock, got) = waiter.await.unwrap();
    let lock = lock.unwrap();
    assert!(got >= last);
    assert!(
        got - last < secs(2),
        "{:?} after the last release",
        got - last
    );
    lock.release().await.unwrap();
}

fn not_waited(report: &redquorum::Report) -> usize {
    count(report, |f| *f == NodeFailure::NotWaited)
}

#[tokio::test]
async fn a_waiting_owner_is_woken_by_the_last_release_not_the_first() {
    let c = servers(5);
    let redlock = redlock(&c);
    let outer = take(&redlock, "owner-a", secs(10)).await.unwrap();
    let inner = take(&redlock, "owner-a", secs(10)).await.unwrap();
    let waiter = spawn_waiter(&redlock, "owner-b", 50);
    outer_then_inner(outer, inner, waiter, Duration::from_millis(500)).await;
}

#[tokio::test]
async fn each_take_refreshes_the_ttl_and_none_shortens_it() {
    let c = servers(5);
    let redlock = redlock(&c);
    let k = key("r");
    let outer = take(&redlock, "owner-a", secs(3)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // 1.5 s left; a new take of 3 s refreshes it to 3 s.
    let inner = take(&redlock, "owner-a", secs(3)).await.unwrap();
    await_holds(&c, &ALL, &k, &[outer.token(), inner.token()]).await;
    for i in ALL {
        let left = pttl(&c, i, &k);
        assert!((2_000..=3_000).contains(&left), "node {i}: PTTL {left}");
    }
    // A take with a shorter TTL leaves the longer life alone.
    let short = take(&redlock, "owner-a", Duration::from_millis(1_200))
        .await
        .unwrap();
    await_holds(&c, &ALL, &k, &[outer.token(), inner.token(), short.token()]).await;
    for i in ALL {
        let left = pttl(&c, i, &k);
        assert!(left > 1_500, "node {i}: PTTL {left} after a shorter take");
    }
    // The hold's own validity is its own TTL's, not the key's.
    assert!(short.remaining() <= Duration::from_millis(1_200));
    for lock in [short, inner, outer] {
        let _ = lock.release().await;
    }
    await_gone(&c, &ALL, &k, secs(5)).await;
}

#[tokio::test]
async fn expiry_clears_every_hold() {
    let c = servers(5);
    let redlock = short_ttl(&c);
    let k = key("r");
    let ttl = Duration::from_millis(400);
    let outer = redlock.lock("r", ttl).reentrant("owner-a").await.unwrap();
    let inner = redlock.lock("r", ttl).reentrant("owner-a").await.unwrap();
    // Neither is released nor kept alive: both expire with the key.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(outer.is_lost() && inner.is_lost());
    await_gone(&c, &ALL, &k, secs(5)).await;
    let other = redlock.lock("r", ttl).reentrant("owner-b").await.unwrap();
    // The old holds' release finds nothing of theirs, and leaves the new
    // owner's key alone.
    assert!(matches!(
        outer.release().await,
        Err(Error::Taken { .. } | Error::Expired { .. })
    ));
    drop(inner);
    assert!(redlock.drain(secs(5)).await);
    assert!(!other.is_lost());
    for i in ALL {
        if let Some(owner) = get_field(&c, i, &k, "o") {
            assert_eq!(owner, "owner-b");
        }
    }
    other.release().await.unwrap();
}

/// The trap of counting holds per node. The outer hold is taken while nodes
/// 3 and 4 are down (it lands on 0, 1, 2); they come back empty, and the
/// inner hold is taken while nodes 0 and 1 refuse writes (it lands on 2,
/// 3, 4). Per-node counts would now be 1, 1, 2, 1, 1, and a release that
/// decrements wherever it finds the owner's key would free 0, 1, 3 and 4 —
/// a majority for another owner while the outer hold still believes it
/// holds. With holds as fields, the inner release removes only its own.
#[tokio::test]
async fn divergent_takes_leave_no_gap_for_another_owner() {
    let mut c = servers(5);
    // The nodes restarted here held nothing of ours: no quarantine needed.
    let redlock = builder(&c).restart_guard(false).build().unwrap();
    let k = key("r");
    c.kill(3);
    c.kill(4);
    let outer = take(&redlock, "owner-a", secs(30)).await.unwrap();
    c.restart(3).unwrap();
    c.restart(4).unwrap();
    for i in [0, 1] {
        run(&c, i, &["CONFIG", "SET", "maxmemory", "1"]);
    }
    let inner = take(&redlock, "owner-a", secs(30)).await.unwrap();
    for i in [0, 1] {
        run(&c, i, &["CONFIG", "SET", "maxmemory", "0"]);
    }
    await_holds(&c, &[0, 1], &k, &[outer.token()]).await;
    await_holds(&c, &[2], &k, &[outer.token(), inner.token()]).await;
    await_holds(&c, &[3, 4], &k, &[inner.token()]).await;

    // The holds per node are the counts a counting design would keep. At
    // 1, 1, 2, 1, 1 a release that decrements wherever the owner's key is
    // would free every node but 2, a majority. Whether ours lets another
    // owner in is what assert_excluded tries below.
    let counts: Vec<usize> = ALL.iter().map(|&i| holds(&c, i, &k).len()).collect();
    assert_eq!(counts, [1, 1, 2, 1, 1]);

    // Ours: the inner release removes the inner hold only.
    inner.release().await.unwrap();
    // Give the release's stragglers time to land everywhere.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_excluded(&redlock).await;
    assert!(!outer.is_lost());
    await_holds(&c, &[0, 1, 2], &k, &[outer.token()]).await;
    await_gone(&c, &[3, 4], &k, secs(5)).await;
    outer.release().await.unwrap();
    take(&redlock, "owner-b", secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_hold_extends_keeps_alive_and_is_released_when_dropped() {
    let c = servers(5);
    let redlock = short_ttl(&c);
    let k = key("r");
    let ttl = Duration::from_millis(600);
    let mut outer = redlock.lock("r", ttl).reentrant("owner-a").await.unwrap();
    let held = outer.keep_alive();
    let mut inner = redlock.lock("r", ttl).reentrant("owner-a").await.unwrap();
    inner.extend(secs(5)).await.unwrap();
    assert!(inner.remaining() > secs(4));
    // The watchdog keeps the outer hold past its TTL several times over.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(!held.is_lost());
    // Dropping the inner hold removes it alone, in the background.
    let inner_token = inner.token().to_owned();
    drop(inner);
    let start = Instant::now();
    while ALL.iter().any(|&i| holds(&c, i, &k).contains(&inner_token)) {
        assert!(start.elapsed() < secs(5), "the dropped hold stayed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!held.is_lost());
    outer.release().await.unwrap();
    assert!(held.is_lost());
    await_gone(&c, &ALL, &k, secs(5)).await;
}

#[tokio::test]
async fn bad_reentrant_requests_fail_before_any_io() {
    // Nothing listens on port 1: any I/O would fail differently.
    let redlock = Redlock::new(["redis://127.0.0.1:1"]).unwrap();
    let err = redlock.lock("r", secs(1)).reentrant("").await.unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::EmptyOwner)),
        "{err}"
    );
    assert!(err.to_string().contains("owner id"), "{err}");
    let err = redlock
        .lock_all(["a", "b"], secs(1))
        .reentrant("owner")
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::Combination(_))),
        "{err}"
    );
}

/// The outer hold is on every node, the inner one only on nodes 2-4 (0 and
/// 1 refuse writes). When the outer hold goes, nodes 0 and 1 free the key
/// and announce it, while 2-4 still hold it for the inner one: a waiting
/// owner must go back to waiting for the inner hold — not take the key for
/// free, nor burn its retries on a release already announced — and get the
/// lock soon after the last release.
#[tokio::test]
async fn a_waiter_outlasts_diverging_holds_and_wakes_at_the_last_release() {
    let c = servers(5);
    let redlock = redlock(&c);
    let outer = take(&redlock, "owner-a", secs(30)).await.unwrap();
    await_holds(&c, &ALL, &key("r"), &[outer.token()]).await;
    for i in [0, 1] {
        run(&c, i, &["CONFIG", "SET", "maxmemory", "1"]);
    }
    let inner = take(&redlock, "owner-a", secs(30)).await.unwrap();
    for i in [0, 1] {
        run(&c, i, &["CONFIG", "SET", "maxmemory", "0"]);
    }
    await_holds(&c, &[2, 3, 4], &key("r"), &[outer.token(), inner.token()]).await;
    let waiter = spawn_waiter(&redlock, "owner-b", 10);
    outer_then_inner(outer, inner, waiter, Duration::from_millis(1_500)).await;
}
