//! Fencing tokens against five real local servers: every new holder's
//! token is greater (released or expired, across `Redlock`s), the naive
//! "largest INCR of the granting nodes" goes backwards where ours does not,
//! the second round is sent only when the counters disagree, tokens after
//! every node restarted empty, and a storage that refuses stale tokens.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use redquorum::local_servers::{LocalServers, Reply};
use redquorum::{ConfigError, Error, Lock, NodeFailure, Redlock};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn counter(c: &LocalServers, i: usize, resource: &str) -> Option<u64> {
    get(c, i, &format!("{}:fence", key(resource))).map(|v| v.parse().unwrap())
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

async fn fenced(redlock: &Redlock, resource: &str, ttl: Duration) -> Result<Lock, Error> {
    redlock.lock(resource, ttl).fenced().retries(0).await
}

#[tokio::test]
async fn every_new_holder_gets_a_greater_token_released_or_expired() {
    let c = servers(5);
    let one = short_ttl(&c);
    let other = builder(&c).fenced(true).build().unwrap();
    let mut last = 0;
    for round in 0..12 {
        let lock = if round % 2 == 0 {
            one.lock("r", Duration::from_millis(300))
                .fenced()
                .await
                .unwrap()
        } else {
            other.lock("r", secs(5)).await.unwrap()
        };
        let token = lock.fence().unwrap();
        assert!(token > last, "round {round}: token {token} after {last}");
        // The time floor: tokens follow the wall clock in microseconds.
        assert!(token > now_us() - 60_000_000, "{token}");
        last = token;
        match round % 3 {
            0 => lock.release().await.unwrap(),
            // Expires instead: the next holder waits for it.
            1 if round % 2 == 0 => {
                tokio::time::sleep(Duration::from_millis(350)).await;
                drop(lock);
            }
            _ => {
                let held = lock.held();
                assert_eq!(held.fence(), Some(token));
                let mut lock = lock;
                lock.extend(secs(5)).await.unwrap();
                assert_eq!(lock.fence(), Some(token), "an extension keeps the token");
                lock.release().await.unwrap();
            }
        }
    }
    // Plain locks carry none.
    let plain = one.lock("p", secs(5)).await.unwrap();
    assert_eq!(plain.fence(), None);
    plain.release().await.unwrap();
}

/// Takes `resource` on exactly the nodes of `grant`, by holding its key for
/// someone else on the others; the attempt succeeds if `grant` is a
/// majority.
async fn fenced_on(c: &LocalServers, redlock: &Redlock, grant: &[usize]) -> Result<Lock, Error> {
    let blocked: Vec<usize> = ALL.iter().copied().filter(|i| !grant.contains(i)).collect();
    for &i in &blocked {
        run(c, i, &["SET", &key("r"), "someone-else", "PX", "60000"]);
    }
    let result = fenced(redlock, "r", secs(10)).await;
    // The nodes beyond the decision may still be running the attempt.
    assert!(redlock.drain(secs(5)).await);
    for &i in &blocked {
        run(c, i, &["DEL", &key("r")]);
    }
    result
}

/// What the naive scheme would do: `INCR` a counter on each node that
/// granted, and take the largest; run for real on a shadow key.
fn naive(c: &LocalServers, grant: &[usize]) -> u64 {
    grant
        .iter()
        .map(|&i| match run(c, i, &["INCR", "naive:r"]) {
            Reply::Int(n) => n as u64,
            other => panic!("INCR: {other:?}"),
        })
        .max()
        .unwrap()
}

/// Failed attempts inflate the counters of nodes 0 and 1; holder A's
/// majority includes them, holder B's does not. Naively B's token is below
/// A's; ours writes A's token to a majority before handing A the lock.
#[tokio::test]
async fn the_naive_largest_incr_goes_backwards_and_ours_does_not() {
    let c = servers(5);
    // Without the time floor the counters alone must carry the guarantee.
    let redlock = builder(&c).fence_time_floor(false).build().unwrap();
    let first = fenced_on(&c, &redlock, &ALL).await.unwrap();
    assert_eq!(naive(&c, &ALL), 1);
    assert_eq!(first.fence(), Some(1));
    first.release().await.unwrap();
    await_gone(&c, &ALL, &key("r"), secs(5)).await;

    // Three attempts granted by nodes 0 and 1 only: each fails.
    for _ in 0..3 {
        let err = fenced_on(&c, &redlock, &[0, 1]).await.unwrap_err();
        assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
        naive(&c, &[0, 1]);
    }
    let counters: Vec<_> = ALL.iter().map(|&i| counter(&c, i, "r")).collect();
    assert_eq!(counters, [Some(4), Some(4), Some(1), Some(1), Some(1)]);

    // A gets nodes 0, 1 and 2.
    let evalsha = |c: &LocalServers| -> u64 {
        ALL.iter()
            .map(|&i| command_stat(c, i, "evalsha", "calls"))
            .sum()
    };
    let before = evalsha(&c);
    let a = fenced_on(&c, &redlock, &[0, 1, 2]).await.unwrap();
    let naive_a = naive(&c, &[0, 1, 2]);
    let token_a = a.fence().unwrap();
    assert_eq!((token_a, naive_a), (5, 5));
    // Only two nodes drew 5: a second round wrote it to every node.
    assert_eq!(evalsha(&c) - before, 10, "two rounds on five nodes");
    for i in ALL {
        assert!(counter(&c, i, "r").unwrap() >= 5, "node {i}");
    }
    a.release().await.unwrap();

    // B gets nodes 2, 3 and 4 only.
    let b = fenced_on(&c, &redlock, &[2, 3, 4]).await.unwrap();
    let naive_b = naive(&c, &[2, 3, 4]);
    let token_b = b.fence().unwrap();
    assert!(
        naive_b < naive_a,
        "the naive scheme went backwards: {naive_a} then {naive_b}"
    );
    assert!(token_b > token_a, "ours: {token_a} then {token_b}");
    b.release().await.unwrap();
}

#[tokio::test]
async fn a_healthy_acquisition_is_one_round_trip() {
    let c = servers(5);
    let redlock = redlock(&c);
    // Warm up: connections made, scripts loaded.
    fenced(&redlock, "r", secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert!(redlock.drain(secs(5)).await);
    let calls = |c: &LocalServers| -> u64 {
        ALL.iter()
            .map(|&i| command_stat(c, i, "evalsha", "calls"))
            .sum()
    };
    let before = calls(&c);
    let lock = fenced(&redlock, "r", secs(5)).await.unwrap();
    assert!(redlock.drain(secs(5)).await);
    assert_eq!(
        calls(&c) - before,
        5,
        "one script per node, no second round"
    );
    let token = lock.fence().unwrap();
    for i in ALL {
        assert_eq!(counter(&c, i, "r"), Some(token), "node {i}");
    }
    lock.release().await.unwrap();
}

/// Two lock managers for the tests that restart nodes empty: with the time
/// floor and without it. The restart guard is off: the restarted nodes
/// voted for nothing since, and the tests are about counters, not keys.
fn floor_and_counts(c: &LocalServers) -> (Redlock, Redlock) {
    let with_floor = builder(c).restart_guard(false).build().unwrap();
    let counts = builder(c)
        .restart_guard(false)
        .fence_time_floor(false)
        .build()
        .unwrap();
    (with_floor, counts)
}

/// Every node restarted empty: with the time floor tokens go on growing;
/// without it they start again at 1, as documented.
#[tokio::test]
async fn tokens_after_every_node_lost_its_counters() {
    let mut c = servers(5);
    let (with_floor, counts) = floor_and_counts(&c);
    let before_floor = fenced(&with_floor, "r", secs(5)).await.unwrap();
    let before_count = fenced(&counts, "s", secs(5)).await.unwrap();
    let (floor_token, count_token) = (before_floor.fence().unwrap(), before_count.fence().unwrap());
    drop((before_floor, before_count));
    assert!(with_floor.drain(secs(5)).await && counts.drain(secs(5)).await);
    for i in ALL {
        c.restart(i).unwrap();
    }
    let floor_after = token_after_a_loss(&with_floor, "r").await;
    let count_after = token_after_a_loss(&counts, "s").await;
    assert!(
        floor_after > floor_token,
        "time floor: {floor_token} then {floor_after}"
    );
    assert_eq!((count_token, count_after), (1, 1), "plain counts restart");
}

/// The token of a fenced lock on `resource` taken after nodes restarted:
/// the first attempts may find stale connections, so a few retries.
async fn token_after_a_loss(redlock: &Redlock, resource: &str) -> u64 {
    let lock = redlock
        .lock(resource, secs(5))
        .fenced()
        .retries(10)
        .await
        .unwrap();
    let token = lock.fence().unwrap();
    lock.release().await.unwrap();
    token
}

/// The storage side: a register that keeps the highest token it has seen
/// and refuses a write with a lower one, in one script. A holder paused
/// past its validity comes back and writes: refused.
#[tokio::test]
async fn a_storage_that_checks_the_token_refuses_a_paused_holder() {
    let c = servers(5);
    let storage = servers(1);
    let redlock = short_ttl(&c);
    const WRITE: &str = "if tonumber(ARGV[1]) < tonumber(redis.call('HGET', KEYS[1], 'fence') or '0') \
                         then return 0 end \
                         redis.call('HSET', KEYS[1], 'fence', ARGV[1], 'value', ARGV[2]) return 1";
    let write = |token: u64, value: &str| {
        let token = token.to_string();
        match run(&storage, 0, &["EVAL", WRITE, "1", "account", &token, value]) {
            Reply::Int(n) => n == 1,
            other => panic!("{other:?}"),
        }
    };
    let paused = redlock
        .lock("account", Duration::from_millis(300))
        .fenced()
        .await
        .unwrap();
    let stale = paused.fence().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await; // "GC pause"
    let next = redlock.lock("account", secs(5)).fenced().await.unwrap();
    assert!(write(next.fence().unwrap(), "from the new holder"));
    assert!(
        !write(stale, "from the paused holder"),
        "a stale token got through"
    );
    let Reply::Bulk(Some(value)) = run(&storage, 0, &["HGET", "account", "value"]) else {
        panic!("no value")
    };
    assert_eq!(value, b"from the new holder");
    next.release().await.unwrap();
}

#[tokio::test]
async fn fencing_does_not_combine_with_sets_or_reentrant_holds() {
    // Nothing listens on port 1: any I/O would fail differently.
    let redlock = Redlock::new(["redis://127.0.0.1:1"]).unwrap();
    for err in [
        redlock
            .lock_all(["a", "b"], secs(1))
            .fenced()
            .await
            .unwrap_err(),
        redlock
            .lock("a", secs(1))
            .reentrant("o")
            .fenced()
            .await
            .unwrap_err(),
    ] {
        assert!(
            matches!(err, Error::Config(ConfigError::Combination(_))),
            "{err}"
        );
        assert!(err.to_string().contains("cannot be"), "{err}");
    }
}

/// Holder A's token is on nodes 0 and 1; node 1 restarts empty, node 0 is
/// down, and B gets nodes 1 and 2, neither of which remembers A's token.
/// With the time floor B's token is still greater (the floor follows the
/// clock); without it, it is not — one node losing its counters is enough,
/// which is why plain counts need every node to persist them.
#[tokio::test]
async fn one_node_losing_its_counters_with_and_without_the_floor() {
    let mut c = servers(3);
    let (with_floor, counts) = floor_and_counts(&c);
    for r in ["f", "n"] {
        run(&c, 2, &["SET", &key(r), "someone-else", "PX", "60000"]);
    }
    let a_floor = fenced(&with_floor, "f", secs(5)).await.unwrap();
    let a_count = fenced(&counts, "n", secs(5)).await.unwrap();
    let (t_floor, t_count) = (a_floor.fence().unwrap(), a_count.fence().unwrap());
    a_floor.release().await.unwrap();
    a_count.release().await.unwrap();
    assert!(with_floor.drain(secs(5)).await && counts.drain(secs(5)).await);
    c.restart(1).unwrap();
    c.kill(0);
    for r in ["f", "n"] {
        run(&c, 2, &["DEL", &key(r)]);
    }
    let b_floor = token_after_a_loss(&with_floor, "f").await;
    let b_count = token_after_a_loss(&counts, "n").await;
    assert!(
        b_floor > t_floor,
        "with the floor: {t_floor} then {b_floor}"
    );
    assert!(
        b_count <= t_count,
        "without it the tokens do not grow here ({t_count} then {b_count}): the documented limit"
    );
}

/// A counter that is not a whole number from 0 below 2^53 (set by hand or
/// by another program: Lua reads `nan`, `inf`, `-5` and `1.5` as numbers)
/// on a majority: the lock is refused, each of those nodes says which key
/// holds the bad counter, and the counters are left as they were for an
/// operator to put right. Once they are, fenced locks work again.
#[tokio::test]
async fn a_counter_that_is_not_a_whole_number_refuses_the_lock() {
    let c = servers(5);
    let redlock = redlock(&c);
    let counter = format!("{}:fence", key("r"));
    for bad in ["nan", "inf", "-5", "1.5"] {
        for i in [0, 1, 2] {
            run(&c, i, &["SET", &counter, bad]);
        }
        let err = fenced(&redlock, "r", secs(5)).await.unwrap_err();
        let Error::NotAcquired { report, .. } = &err else {
            panic!("{bad}: {err}")
        };
        let named = report
            .failures()
            .iter()
            .filter(|(_, f)| matches!(f, NodeFailure::BadFenceCounter { key } if *key == counter))
            .count();
        assert_eq!(named, 3, "{bad}: {err}");
        assert!(err.to_string().contains(&format!("{counter:?}")), "{err}");
        assert!(err.to_string().contains("delete it"), "{err}");
        assert!(redlock.drain(secs(5)).await);
        assert_eq!(holders(&c, &ALL, &key("r")), 0, "{bad}");
        for i in [0, 1, 2] {
            assert_eq!(get(&c, i, &counter).as_deref(), Some(bad), "{bad}");
        }
        for i in [0, 1, 2] {
            run(&c, i, &["DEL", &counter]);
        }
    }
    let lock = fenced(&redlock, "r", secs(5)).await.unwrap();
    assert!(lock.fence().unwrap() > now_us() - 60_000_000);
    lock.release().await.unwrap();
}
