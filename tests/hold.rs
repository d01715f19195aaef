//! Holding a lock for longer than its TTL: the watchdog of `keep_alive` and
//! `with_lock`, the lost signal (from the clock too, whether or not the
//! watchdog runs), and `extend` racing the watchdog, against a real
//! five local servers.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use redquorum::local_servers::LocalServers;
use redquorum::{Held, Lock, Redlock};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Short TTLs, so that five of them pass quickly; a node timeout well below.
fn keeper(c: &redquorum::local_servers::LocalServers) -> Redlock {
    builder(c)
        .node_timeout(ms(150))
        .retry_count(20)
        .build()
        .unwrap()
}

#[tokio::test]
async fn with_lock_keeps_the_lock_for_five_ttls_and_releases_at_the_end() {
    let c = servers(5);
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
    let c = servers(5);
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
    let c = servers(5);
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
    let c = servers(5);
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
    let mut c = servers(5);
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
/// healthy servers: it must not be lost, and a majority still holds it.
async fn kept_for_three_ttls(c: &LocalServers, mut lock: Lock, ttl: Duration) {
    let held = lock.keep_alive();
    assert!(
        !lost_within(&held, ttl * 3).await,
        "a lock of {ttl:?} was lost on a healthy servers"
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
    let c = servers(5);
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
    let c = servers(5);
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
/// all. Every TTL that is accepted is renewed on a healthy servers.
#[tokio::test]
async fn the_shortest_ttl_a_node_timeout_accepts_is_renewed() {
    let c = servers(5);
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
    let c = servers(5);
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

/// Found in review: a `Held` must not outlive its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_held_clone_says_lost_once_the_lock_is_released_or_dropped() {
    let c = servers(5);
    let redlock = keeper(&c);
    for release in [true, false] {
        let how = if release { "released" } else { "dropped" };
        let mut lock = redlock.lock("r", ms(2_000)).await.unwrap();
        let held = lock.keep_alive();
        let clones = [held.clone(), held.clone(), held.clone(), lock.keep_alive()];
        // A task that was already waiting for the signal.
        let waiting = {
            let held = held.clone();
            tokio::spawn(async move { held.lost().await })
        };
        tokio::time::sleep(ms(50)).await;
        for h in &clones {
            assert!(!h.is_lost(), "lost while held");
            assert!(h.remaining() > Duration::ZERO);
        }
        assert!(!waiting.is_finished(), "lost() resolved while held");
        if release {
            lock.release().await.unwrap();
        } else {
            drop(lock);
        }
        for (n, h) in clones.iter().enumerate() {
            assert!(h.is_lost(), "clone {n}: not lost after the lock was {how}");
            assert_eq!(
                h.remaining(),
                Duration::ZERO,
                "clone {n}: validity left after the lock was {how}"
            );
            tokio::time::timeout(ms(1_000), h.lost())
                .await
                .unwrap_or_else(|_| panic!("clone {n}: lost() pending after the lock was {how}"));
        }
        tokio::time::timeout(ms(1_000), waiting)
            .await
            .unwrap_or_else(|_| panic!("a waiting lost() did not resolve once {how}"))
            .unwrap();
        drop(held);
        await_gone(&c, &ALL, &key("r"), ms(5_000)).await;
    }
}

/// Found in review: a `Held` must not trust the watchdog alone: the clock
/// says when the validity is over, whether or not the watchdog got to run.
#[tokio::test(flavor = "current_thread")]
async fn held_reports_lost_at_the_deadline_even_if_the_watchdog_never_runs() {
    let mut c = servers(5);
    let redlock = builder(&c)
        .node_timeout(ms(80))
        .retry_count(10)
        .build()
        .unwrap();

    // The runtime's only thread is blocked past the TTL: the watchdog
    // cannot run, but the time is up all the same.
    let mut lock = redlock.lock("a", ms(300)).await.unwrap();
    let held = lock.keep_alive();
    assert!(!held.is_lost());
    std::thread::sleep(ms(400));
    assert!(lock.is_expired());
    assert_eq!(held.remaining(), Duration::ZERO);
    assert!(
        held.is_lost(),
        "validity ran out, yet the handle is not lost"
    );
    assert!(lock.is_lost(), "validity ran out, yet the lock is not lost");
    drop(lock);

    // A `lost()` awaited elsewhere resolves at the deadline while the
    // watchdog's runtime is blocked (and a frozen majority would refuse its
    // extensions anyway).
    let mut lock = redlock.lock("b", ms(600)).await.unwrap();
    let held = lock.keep_alive();
    let deadline = Instant::now() + held.remaining();
    assert!(!held.is_lost());
    for i in [0, 1, 2] {
        c.freeze(i);
    }
    let watcher = {
        let held = held.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                tokio::time::timeout(ms(3_000), held.lost())
                    .await
                    .ok()
                    .map(|()| Instant::now())
            })
        })
    };
    // Joining blocks this runtime (and its watchdog) until the watcher ends.
    let lost_at = watcher.join().unwrap();
    for i in [0, 1, 2] {
        c.thaw(i);
    }
    let lost_at = lost_at.expect("lost() still pending 3 s after a 600 ms lock's deadline");
    println!(
        "lost() resolved {:?} after the deadline",
        lost_at.saturating_duration_since(deadline)
    );
    assert!(
        lost_at <= deadline + ms(150),
        "lost() resolved {:?} after the deadline",
        lost_at - deadline
    );
    assert!(held.is_lost());
    assert!(lock.is_lost());
    drop(lock);
}

/// Checks that `lock.remaining()` ends no later than the key's expiry on a
/// majority of nodes (the third-largest PTTL of five), allowing for the time
/// the check itself takes.
fn assert_not_beyond_majority(c: &LocalServers, lock: &Lock, key: &str, what: &str) {
    let started = Instant::now();
    let remaining = lock.remaining();
    let mut pttls: Vec<i64> = ALL.iter().map(|&i| pttl(c, i, key)).collect();
    let spent = started.elapsed();
    pttls.sort_unstable_by(|a, b| b.cmp(a));
    let majority = pttls[2];
    let bound = majority + (spent + ms(30)).as_millis() as i64;
    assert!(
        (remaining.as_millis() as i64) <= bound,
        "{what}: the lock says {remaining:?} left, a majority holds the key for {majority} ms \
         (PTTLs {pttls:?}, check took {spent:?})"
    );
}

/// Found in review: `extend` racing the watchdog must never leave the lock
/// believing in more validity than a majority of nodes holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_racing_the_watchdog_never_overstates_the_validity() {
    let c = servers(5);
    // The watchdog extends by the lock's TTL nearly all the time.
    let redlock = builder(&c)
        .node_timeout(ms(300))
        .keep_alive_fraction(0.002)
        .build()
        .unwrap();
    let k = key("r");
    let mut lock = redlock.lock("r", ms(2_000)).await.unwrap();
    let held = lock.keep_alive();
    // Shorter than the watchdog's TTL (an extension of the watchdog that
    // completes after ours would claim its longer validity), the same, and
    // longer (a watchdog that renewed with a stale, shorter TTL would have
    // shortened the keys; now no extension shortens a key).
    let ttls = [ms(600), ms(2_000), ms(600), ms(3_000)];
    let started = Instant::now();
    let mut rounds = 0;
    while rounds < 4_000 && started.elapsed() < Duration::from_secs(8) {
        let ttl = ttls[rounds % ttls.len()];
        tokio::time::timeout(Duration::from_secs(5), lock.extend(ttl))
            .await
            .expect("extend hung")
            .unwrap_or_else(|e| panic!("round {rounds}: extend({ttl:?}): {e}"));
        assert_not_beyond_majority(&c, &lock, &k, &format!("round {rounds}, extend({ttl:?})"));
        rounds += 1;
    }
    println!("{rounds} extensions raced the watchdog");
    assert!(!held.is_lost());
    lock.release().await.unwrap();
}
