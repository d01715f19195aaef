//! Holes found in review, each pinned by a test against a real cluster: a
//! `Held` that outlives its lock or ignores the clock, `extend` racing the
//! watchdog, waits that never end or sleep through an unannounced release,
//! a `min_validity` no acquisition can meet, an eviction check repeated on
//! every reconnect, and a release that cannot tell "late" from "gone".

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::*;
use redquorum::local_cluster::{LocalCluster, Reply, command};
use redquorum::{ConfigError, Error, GaveUp, Lock, Redlock};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Short TTLs, a node timeout well below them, and retries so that one slow
/// answer on a loaded machine costs a retry, not the test.
fn keeper(c: &LocalCluster) -> Redlock {
    builder(c)
        .node_timeout(ms(150))
        .retry_count(20)
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------
// 1. A `Held` must not outlive its lock.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_held_clone_says_lost_once_the_lock_is_released_or_dropped() {
    let c = cluster(5);
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

// ---------------------------------------------------------------------------
// 2. A `Held` must not trust the watchdog alone: the clock says when the
// validity is over, whether or not the watchdog got to run.

#[tokio::test(flavor = "current_thread")]
async fn held_reports_lost_at_the_deadline_even_if_the_watchdog_never_runs() {
    let mut c = cluster(5);
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

// ---------------------------------------------------------------------------
// 3. `extend` racing the watchdog must never leave the lock believing in
// more validity than a majority of nodes holds.

/// Checks that `lock.remaining()` ends no later than the key's expiry on a
/// majority of nodes (the third-largest PTTL of five), allowing for the time
/// the check itself takes.
fn assert_not_beyond_majority(c: &LocalCluster, lock: &Lock, key: &str, what: &str) {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_racing_the_watchdog_never_overstates_the_validity() {
    let c = cluster(5);
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

// ---------------------------------------------------------------------------
// 4. `lock()` is bounded by default: releases that keep being announced do
// not buy free retries for ever.

/// Keeps resource `r` always held on every node, while announcing a release
/// of the previous holder every ~20 ms to the first waiter queued, as a
/// release does (see `kinds::queue`); stops on drop (and after 40 s).
struct Hog {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

const HOG: &str = r#"local old = redis.call('GET', KEYS[1])
redis.call('DEL', KEYS[1])
local queue = KEYS[1] .. ':waiters'
local first = redis.call('ZRANGE', queue, 0, 0)[1]
if old and first then
  redis.call('ZREM', queue, first)
  local client = string.match(first, '^[^:]*:([^:]*):')
  redis.call('PUBLISH', KEYS[1] .. ':wake:' .. client, first .. ' ' .. old)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1"#;

impl Hog {
    fn start(c: &LocalCluster) -> Hog {
        let ports: Vec<u16> = (0..c.len()).map(|i| c.port(i)).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let k = key("r");
            let started = Instant::now();
            let mut ticks = 0u64;
            while !stopped.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(40) {
                // 40 hex digits, like a real token, and a new one per turn.
                let token = format!("{ticks:040x}");
                for &port in &ports {
                    let _ = command(port, &["EVAL", HOG, "1", &k, &token, "5000"]);
                }
                ticks += 1;
                std::thread::sleep(ms(20));
            }
            ticks
        });
        // Held from the start.
        let deadline = Instant::now() + Duration::from_secs(5);
        while (0..c.len()).any(|i| get(c, i, &key("r")).is_none()) {
            assert!(Instant::now() < deadline, "the hog never took the key");
            std::thread::sleep(ms(5));
        }
        Hog {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let ticks = thread.join().unwrap_or(0);
            println!("the hog changed hands {ticks} times");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_gives_up_at_the_default_deadline_under_endless_announced_releases() {
    let c = cluster(5);
    let hog = Hog::start(&c);
    let waiter = Redlock::builder()
        .nodes(c.urls())
        .node_timeout(ms(300))
        .build()
        .unwrap();

    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(20), waiter.lock("r", ms(2_000)))
        .await
        .expect("lock() still waiting after 20 s (default wait_timeout is 10 s)");
    let took = started.elapsed();
    println!("default wait: gave up after {took:?}");
    match &result {
        Err(Error::NotAcquired {
            gave_up: GaveUp::Deadline,
            ..
        }) => {}
        Err(e) => panic!("after {took:?}: {e}"),
        Ok(lock) => panic!("after {took:?}: acquired a hogged lock: {lock:?}"),
    }
    assert!(
        (Duration::from_secs(8)..Duration::from_secs(15)).contains(&took),
        "gave up after {took:?}, not about 10 s"
    );

    // A deadline of the call's own.
    let started = Instant::now();
    let result = tokio::time::timeout(
        Duration::from_secs(10),
        waiter.lock("r", ms(2_000)).wait(Duration::from_secs(1)),
    )
    .await
    .expect("lock().wait(1 s) still waiting after 10 s");
    let took = started.elapsed();
    println!("wait(1 s): gave up after {took:?}");
    assert!(
        matches!(
            result,
            Err(Error::NotAcquired {
                gave_up: GaveUp::Deadline,
                ..
            })
        ),
        "after {took:?}: {result:?}"
    );
    assert!(
        (ms(400)..ms(2_500)).contains(&took),
        "wait(1 s) gave up after {took:?}"
    );
    drop(hog);
}

// ---------------------------------------------------------------------------
// 5. A waiter that hears no release still looks again soon: it does not
// sleep through the holder's whole TTL.

#[tokio::test]
async fn an_unannounced_release_does_not_leave_the_waiter_asleep_for_the_holders_ttl() {
    let c = cluster(5);
    let holder = redlock(&c);
    let lock = holder.lock("r", Duration::from_secs(30)).await.unwrap();
    await_holders(&c, &ALL, &key("r"), 5, ms(5_000)).await;
    let waiter = Redlock::builder()
        .nodes(c.urls())
        .node_timeout(ms(300))
        .build()
        .unwrap();
    let task = tokio::spawn(async move {
        let result = waiter.lock("r", ms(5_000)).await;
        (result, Instant::now())
    });
    // Failed, subscribed, and settled into its wait.
    tokio::time::sleep(ms(600)).await;
    assert!(!task.is_finished(), "the waiter did not wait");
    // The holder's keys vanish without an announcement (a release through
    // some other client, an operator's DEL): nobody publishes anything.
    let released = Instant::now();
    for i in ALL {
        run(&c, i, &["DEL", &key("r")]);
    }
    std::mem::forget(lock);
    let (result, got_at) = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter still sleeps 10 s after the keys were deleted (holder TTL 30 s)")
        .unwrap();
    let lock = result.unwrap();
    let gap = got_at - released;
    println!("unannounced release to next holder: {gap:?}");
    assert!(gap < Duration::from_secs(5), "took {gap:?}");
    lock.release().await.unwrap();
}

// ---------------------------------------------------------------------------
// 6. A `min_validity` that no acquisition with this TTL can meet is a
// configuration error, found before any I/O.

#[tokio::test]
async fn a_min_validity_no_acquisition_can_meet_fails_before_any_io() {
    // Nothing listens on port 1: any I/O would fail differently.
    let redlock = Redlock::builder()
        .node("redis://127.0.0.1:1")
        .min_validity(ms(995))
        .build()
        .unwrap();
    let started = Instant::now();
    let err = tokio::time::timeout(ms(5_000), redlock.lock("r", ms(1_000)))
        .await
        .expect("lock() hung")
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::MinValidityTooLong { .. })),
        "lock(): {err}"
    );
    let err = tokio::time::timeout(ms(5_000), redlock.try_lock("r", ms(1_000)))
        .await
        .expect("try_lock() hung")
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::MinValidityTooLong { .. })),
        "try_lock(): {err}"
    );
    assert!(started.elapsed() < ms(500), "took {:?}", started.elapsed());

    // Comfortably below the validity: it works.
    let c = cluster(3);
    let redlock = builder(&c)
        .node_timeout(ms(200))
        .min_validity(ms(500))
        .build()
        .unwrap();
    let lock = redlock.lock("r", ms(1_000)).await.unwrap();
    assert!(lock.remaining() > ms(500), "{:?}", lock.remaining());
    lock.release().await.unwrap();
}

// ---------------------------------------------------------------------------
// 7. A node that forbids CONFIG is asked once, not on every reconnect.

/// The CONFIG calls node `i` rejected (ACL), all subcommands together.
fn rejected_config_calls(c: &LocalCluster, i: usize) -> u64 {
    command_stat(c, i, "config", "rejected_calls")
}

#[tokio::test]
async fn a_node_forbidding_config_is_checked_once_however_often_it_reconnects() {
    const ROUNDS: usize = 6;
    let c = cluster(3);
    for i in 0..3 {
        run(
            &c,
            i,
            &[
                "ACL", "SETUSER", "lockuser", "on", ">pw", "~*", "&*", "+@all", "-config",
            ],
        );
    }
    let urls: Vec<String> = (0..3)
        .map(|i| format!("redis://lockuser:pw@127.0.0.1:{}", c.port(i)))
        .collect();
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(ms(500))
        .retry_count(10)
        .retry_delay(ms(30))
        .retry_jitter(ms(10))
        .build()
        .unwrap();
    for round in 0..ROUNDS {
        let lock = tokio::time::timeout(
            Duration::from_secs(5),
            redlock.lock("r", Duration::from_secs(10)),
        )
        .await
        .expect("lock() hung")
        .unwrap_or_else(|e| panic!("round {round}: {e}"));
        lock.release().await.unwrap();
        // Room for a background check to ask and be refused.
        tokio::time::sleep(ms(200)).await;
        for i in 0..3 {
            match run(&c, i, &["CLIENT", "KILL", "USER", "lockuser"]) {
                Reply::Int(n) => assert!(n >= 1, "round {round}: no connection on node {i}"),
                other => panic!("CLIENT KILL: {other:?}"),
            }
        }
    }
    for i in 0..3 {
        let rejected = rejected_config_calls(&c, i);
        println!("node {i}: {rejected} CONFIG calls rejected over {ROUNDS} connections");
        assert!(
            (1..=2).contains(&rejected),
            "node {i}: {rejected} CONFIG calls rejected over {ROUNDS} connections"
        );
    }
}

// ---------------------------------------------------------------------------
// 8. A release after the validity ran out, keys still there, is not the same
// as a release that found the keys gone.

#[tokio::test]
async fn release_tells_a_late_release_from_keys_that_were_gone() {
    let c = cluster(5);
    let redlock = builder(&c)
        .node_timeout(ms(100))
        .retry_count(10)
        .build()
        .unwrap();

    // Late: the validity runs out here while the nodes keep the keys.
    let lock = redlock.lock("late", ms(500)).await.unwrap();
    await_holders(&c, &ALL, &key("late"), 5, ms(5_000)).await;
    for i in ALL {
        run(&c, i, &["PEXPIRE", &key("late"), "10000"]);
    }
    tokio::time::sleep(lock.remaining() + ms(20)).await;
    assert!(lock.is_expired());
    assert_eq!(holders(&c, &ALL, &key("late")), 5);
    let late = lock.release().await.unwrap_err();
    assert!(matches!(late, Error::ReleasedLate { .. }), "late: {late}");
    // It did release.
    await_gone(&c, &ALL, &key("late"), ms(5_000)).await;

    // Gone: the keys were deleted beneath a valid lock.
    let lock = redlock.lock("gone", ms(2_000)).await.unwrap();
    await_holders(&c, &ALL, &key("gone"), 5, ms(5_000)).await;
    for i in ALL {
        run(&c, i, &["DEL", &key("gone")]);
    }
    assert!(!lock.is_expired());
    let gone = lock.release().await.unwrap_err();
    assert!(matches!(gone, Error::Expired { .. }), "gone: {gone}");
}

/// Found in review: two extensions of one lock can reach a node out of
/// order (one waits for a connection that the other overtakes), and a late
/// shorter one cut the key below the deadline the newer one set — a second
/// holder, reproduced. An extension therefore never shortens a key, and the
/// lock's deadline never moves back: after `extend(3 s)` on a 30 s lock, a
/// majority still holds the key for about 30 s and the lock says so.
#[tokio::test]
async fn an_extension_never_shortens_a_key_nor_the_validity() {
    let c = cluster(5);
    let redlock = redlock(&c);
    let mut lock = redlock.lock("r", Duration::from_secs(30)).await.unwrap();
    await_holders(&c, &ALL, &key("r"), 5, Duration::from_secs(5)).await;
    lock.extend(Duration::from_secs(3)).await.unwrap();
    // Every node answers before the test reads them.
    tokio::time::sleep(ms(100)).await;
    let mut pttls: Vec<i64> = ALL.iter().map(|&i| pttl(&c, i, &key("r"))).collect();
    pttls.sort_unstable();
    assert!(pttls[0] > 25_000, "a key was shortened: {pttls:?}");
    let remaining = lock.remaining();
    assert!(remaining > Duration::from_secs(25), "{remaining:?}");
    assert!(
        remaining <= Duration::from_millis(pttls[2] as u64 + 30),
        "the lock says {remaining:?}, a majority holds {pttls:?}"
    );
    // A longer one still extends both.
    lock.extend(Duration::from_secs(60)).await.unwrap();
    assert!(lock.remaining() > Duration::from_secs(55));
    lock.release().await.unwrap();
}
