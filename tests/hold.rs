//! Holding a lock for longer than its TTL: the watchdog of `keep_alive` and
//! `with_lock`, and the lost signal, against a real five-node cluster.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use redquorum::local_cluster::LocalCluster;
use redquorum::{Held, Lock, Redlock};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Short TTLs, so that five of them pass quickly; a node timeout well below.
fn keeper(c: &redquorum::local_cluster::LocalCluster) -> Redlock {
    builder(c)
        .node_timeout(ms(150))
        .retry_count(20)
        .build()
        .unwrap()
}

#[tokio::test]
async fn with_lock_keeps_the_lock_for_five_ttls_and_releases_at_the_end() {
    let c = cluster(5);
    let redlock = keeper(&c);
    let other = redlock.clone();
    let ttl = ms(600);
    let stolen = Arc::new(AtomicBool::new(false));
    let stolen_in = stolen.clone();
    let out = redlock
        .with_lock("job", ttl, |held| async move {
            let started = Instant::now();
            while started.elapsed() < ttl * 5 {
                // Another client never gets it meanwhile.
                if other.try_lock("job", ttl).await.is_ok() {
                    stolen_in.store(true, Ordering::SeqCst);
                }
                assert!(!held.is_lost());
                assert!(held.remaining() > Duration::ZERO);
                tokio::time::sleep(ms(100)).await;
            }
            held.is_lost()
        })
        .await
        .unwrap();
    assert!(!out, "lost while kept alive");
    assert!(
        !stolen.load(Ordering::SeqCst),
        "another client took a kept lock"
    );
    // Released at the end: free at once.
    await_gone(&c, &ALL, &key("job"), ms(5_000)).await;
    redlock
        .try_lock("job", ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn a_panic_inside_with_lock_releases_the_lock() {
    let c = cluster(5);
    let redlock = keeper(&c);
    let task = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            redlock
                .with_lock("job", Duration::from_secs(30), |_held| async move {
                    tokio::time::sleep(ms(50)).await;
                    panic!("the work failed");
                })
                .await
        })
    };
    let err = task.await.unwrap_err();
    assert!(err.is_panic());
    await_gone(&c, &ALL, &key("job"), ms(5_000)).await;
    redlock
        .try_lock("job", Duration::from_secs(30))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test]
async fn keep_alive_on_a_guard_outlives_the_ttl_and_stops_on_release() {
    let c = cluster(5);
    let redlock = keeper(&c);
    let mut lock = redlock.lock("r", ms(600)).await.unwrap();
    let held = lock.keep_alive();
    tokio::time::sleep(ms(2_000)).await;
    assert!(!held.is_lost());
    assert!(lock.remaining() > ms(200), "{:?}", lock.remaining());
    assert!(holders(&c, &ALL, &key("r")) >= 3);
    lock.release().await.unwrap();
    await_gone(&c, &ALL, &key("r"), ms(5_000)).await;
    // The watchdog is gone with the lock: nothing comes back.
    tokio::time::sleep(ms(700)).await;
    assert_eq!(holders(&c, &ALL, &key("r")), 0);
}

#[tokio::test]
async fn the_lost_signal_fires_when_another_owner_takes_the_keys() {
    let c = cluster(5);
    let redlock = keeper(&c);
    let mut lock = redlock.lock("r", ms(900)).await.unwrap();
    let held = lock.keep_alive();
    await_holders(&c, &ALL, &key("r"), 5, ms(5_000)).await;
    // An operator (or a bug) hands the key to someone else on every node.
    for i in ALL {
        run(&c, i, &["SET", &key("r"), "someone-else", "PX", "60000"]);
    }
    tokio::time::timeout(ms(900), held.lost())
        .await
        .expect("lost signal did not fire within one TTL");
    assert!(held.is_lost());
    assert_eq!(held.remaining(), Duration::ZERO);
    // Dropping the guard releases nothing of the other owner's.
    drop(lock);
    tokio::time::sleep(ms(100)).await;
    assert_eq!(get(&c, 0, &key("r")).as_deref(), Some("someone-else"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_majority_fires_the_lost_signal_before_validity_ends() {
    let mut c = cluster(5);
    let node_timeout = ms(200);
    let redlock = builder(&c).node_timeout(node_timeout).build().unwrap();
    let ttl = ms(1_500);
    let mut lock = redlock.lock("r", ttl).await.unwrap();
    let held = lock.keep_alive();
    await_holders(&c, &ALL, &key("r"), 5, ms(5_000)).await;
    // Let one extension go through, then freeze a majority.
    tokio::time::sleep(ttl / 2).await;
    for i in [0, 1, 2] {
        c.freeze(i);
    }
    // Watch the validity as the holder sees it until the signal fires.
    let mut deadline = Instant::now() + held.remaining();
    let lost_at = loop {
        if held.is_lost() {
            break Instant::now();
        }
        deadline = deadline.min(Instant::now() + held.remaining());
        assert!(
            Instant::now() < deadline + ms(1),
            "validity ran out with no lost signal"
        );
        tokio::time::sleep(ms(5)).await;
    };
    assert!(
        lost_at < deadline,
        "lost {:?} after the deadline",
        lost_at - deadline
    );
    for i in [0, 1, 2] {
        c.thaw(i);
    }
    // Another client cannot take it before the validity the holder was
    // promised has run out, and can after the TTL (bounded wait).
    let other = builder(&c).node_timeout(node_timeout).build().unwrap();
    let started = Instant::now();
    let taken_at = loop {
        if let Ok(lock) = other.try_lock("r", ttl).await {
            drop(lock);
            break Instant::now();
        }
        assert!(started.elapsed() < ttl * 6, "never became free");
        tokio::time::sleep(ms(20)).await;
    };
    assert!(
        taken_at >= deadline,
        "taken {:?} before the deadline",
        deadline - taken_at
    );
    drop(lock);
}

/// Waits `span`, and says whether the lock was lost meanwhile.
async fn lost_within(held: &Held, span: Duration) -> bool {
    tokio::time::timeout(span, held.lost()).await.is_ok()
}

/// Keeps `lock` (of `ttl`, on resource `r`) alive for three TTLs on a
/// healthy cluster: it must not be lost, and a majority still holds it.
async fn kept_for_three_ttls(c: &LocalCluster, mut lock: Lock, ttl: Duration) {
    let held = lock.keep_alive();
    assert!(
        !lost_within(&held, ttl * 3).await,
        "a lock of {ttl:?} was lost on a healthy cluster"
    );
    assert!(holders(c, &ALL, &key("r")) >= 3);
    lock.release().await.unwrap();
}

/// Found in review: when the next extension was due later than the last
/// moment one could still finish (validity less a node timeout), the
/// watchdog slept until that moment and then gave the lock up without
/// sending anything. Here `keep_alive` is called with about 560 ms of a
/// 1.5 s lock left (less than a third of the TTL, when the first extension
/// is due): the lock is kept for three TTLs.
#[tokio::test]
async fn keep_alive_called_late_keeps_the_lock() {
    let c = cluster(5);
    let redlock = keeper(&c);
    let ttl = ms(1_500);
    let lock = redlock.lock("r", ttl).await.unwrap();
    while lock.remaining() > ms(560) {
        tokio::time::sleep(ms(10)).await;
    }
    kept_for_three_ttls(&c, lock, ttl).await;
}

/// The same flaw with the extension due late by design: at
/// `keep_alive_fraction(0.97)` it is due after the validity (TTL less its
/// drift allowance) has nearly run out, and must be sent earlier.
#[tokio::test]
async fn keep_alive_renews_at_a_fraction_near_one() {
    let c = cluster(5);
    let redlock = builder(&c)
        .node_timeout(ms(150))
        .retry_count(20)
        .keep_alive_fraction(0.97)
        .build()
        .unwrap();
    let ttl = ms(1_200);
    let lock = redlock.lock("r", ttl).await.unwrap();
    kept_for_three_ttls(&c, lock, ttl).await;
}

/// The shortest TTL a 1 s node timeout accepts (as the CLI's default node
/// timeout with a short `--ttl`): the validity is less than a node timeout
/// past the first extension's due time, or less than one node timeout at
/// all. Every TTL that is accepted is renewed on a healthy cluster.
#[tokio::test]
async fn the_shortest_ttl_a_node_timeout_accepts_is_renewed() {
    let c = cluster(5);
    let redlock = builder(&c)
        .node_timeout(ms(1_000))
        .retry_count(20)
        .build()
        .unwrap();
    for ttl in [ms(1_001), ms(1_500)] {
        let lock = redlock.lock("r", ttl).await.unwrap();
        kept_for_three_ttls(&c, lock, ttl).await;
    }
}

#[tokio::test]
async fn keep_alive_fraction_is_checked() {
    for bad in [0.0, 1.0, -1.0, f64::NAN] {
        let err = Redlock::builder()
            .node("redis://127.0.0.1:1")
            .keep_alive_fraction(bad)
            .build()
            .unwrap_err();
        assert!(matches!(
            err,
            redquorum::Error::Config(redquorum::ConfigError::InvalidKeepAliveFraction(_))
        ));
    }
}

/// Found in review: a held lock keeps its deadline in nanoseconds since
/// boot, which a TTL of centuries overflowed, wrapping the deadline to an
/// earlier moment (a fresh lock reported lost, an extension "not moved").
/// A thousand years' lock is held, extends, and says it has centuries left.
#[tokio::test]
async fn a_lock_of_a_thousand_years_is_held_and_extends() {
    let c = cluster(5);
    let redlock = redlock(&c);
    let years = |n: u64| Duration::from_secs(n * 365 * 24 * 3600);
    let mut lock = redlock.lock("r", years(1_000)).await.unwrap();
    assert!(!lock.is_lost());
    assert!(lock.remaining() > years(500), "{:?}", lock.remaining());
    let held = lock.held();
    lock.extend(years(2_000)).await.unwrap();
    assert!(!held.is_lost());
    assert!(lock.remaining() > years(500), "{:?}", lock.remaining());
    lock.release().await.unwrap();
    assert!(held.is_lost());
}
