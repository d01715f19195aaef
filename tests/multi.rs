//! Multi-resource locks (`lock_all`) against five real local servers:
//! every key or none, a partially taken set rolled back on every node,
//! exclusion with single-resource locks in both directions, overlapping
//! sets never held together, progress under contention, and a waiter woken
//! by the release of any resource of its set.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use redquorum::{ConfigError, Error, NodeFailure, Redlock};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test]
async fn a_set_is_taken_whole_sorted_and_deduplicated_and_released_whole() {
    let c = servers(5);
    let redlock = redlock(&c);
    let lock = redlock
        .lock_all(["c", "a", "b", "a"], secs(10))
        .await
        .unwrap();
    assert_eq!(lock.resource(), "a,b,c");
    for r in ["a", "b", "c"] {
        await_holders(&c, &ALL, &key(r), 5, secs(5)).await;
        for i in ALL {
            assert_eq!(get(&c, i, &key(r)).as_deref(), Some(lock.token()));
            let ttl = pttl(&c, i, &key(r));
            assert!((5_000..=10_000).contains(&ttl), "node {i}: PTTL {ttl}");
        }
    }
    // Each resource is excluded from single locks while the set is held.
    for r in ["a", "b", "c"] {
        let err = redlock.try_lock(r, secs(10)).await.unwrap_err();
        assert!(err.report().unwrap().held_by_others() >= 3, "{err}");
    }
    lock.release().await.unwrap();
    for r in ["a", "b", "c"] {
        await_gone(&c, &ALL, &key(r), secs(5)).await;
    }
    // A set of one is the plain lock.
    let one = redlock.lock_all(["a"], secs(10)).await.unwrap();
    assert_eq!(one.resource(), "a");
    one.release().await.unwrap();
}

#[tokio::test]
async fn a_held_member_refuses_the_whole_set_and_nothing_is_kept() {
    let c = servers(5);
    let redlock = redlock(&c);
    let b = redlock.lock("b", secs(10)).await.unwrap();
    await_holders(&c, &ALL, &key("b"), 5, secs(5)).await;
    let err = redlock
        .lock_all(["a", "b", "c"], secs(10))
        .retries(0)
        .await
        .unwrap_err();
    let report = err.report().unwrap();
    assert!(report.held_by_others() >= 3, "{err}");
    assert_eq!(
        count(report, |f| matches!(f, NodeFailure::WrongType(_))),
        0,
        "{err}"
    );
    // No node took a or c: each node takes all or none.
    for r in ["a", "c"] {
        assert_eq!(holders(&c, &ALL, &key(r)), 0, "{r} was taken in part");
    }
    for i in ALL {
        assert_eq!(get(&c, i, &key("b")).as_deref(), Some(b.token()));
    }
    b.release().await.unwrap();
    // And a reentrant owner's hash is held too, never a type error.
    let hold = redlock
        .lock("c", secs(10))
        .reentrant("owner")
        .await
        .unwrap();
    let err = redlock
        .lock_all(["a", "c"], secs(10))
        .retries(0)
        .await
        .unwrap_err();
    assert!(err.report().unwrap().held_by_others() >= 3, "{err}");
    assert_eq!(holders(&c, &ALL, &key("a")), 0);
    hold.release().await.unwrap();
}

/// Nodes 0-2 hold `b` for another owner; nodes 3 and 4 grant the whole set,
/// which is not a majority: the attempt fails and is rolled back there.
#[tokio::test]
async fn a_set_taken_on_a_minority_is_rolled_back_on_every_node() {
    let c = servers(5);
    let redlock = redlock(&c);
    for i in [0, 1, 2] {
        run(&c, i, &["SET", &key("b"), "someone-else", "PX", "10000"]);
    }
    let err = redlock
        .lock_all(["a", "b", "c"], secs(10))
        .retries(0)
        .await
        .unwrap_err();
    let report = err.report().unwrap();
    assert_eq!(report.held_by_others(), 3, "{err}");
    // Nodes 3 and 4 may have answered yes before the decision: whatever
    // they took is gone once the rollback is done.
    for r in ["a", "b", "c"] {
        await_gone(&c, &[3, 4], &key(r), secs(5)).await;
    }
    for i in [0, 1, 2] {
        assert_eq!(get(&c, i, &key("b")).as_deref(), Some("someone-else"));
        assert_eq!(get(&c, i, &key("a")), None);
        assert_eq!(get(&c, i, &key("c")), None);
    }
}

#[tokio::test]
async fn a_set_waiter_is_woken_by_the_release_of_any_member() {
    let c = servers(5);
    let redlock = redlock(&c);
    let b = redlock.lock("b", secs(10)).await.unwrap();
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let lock = redlock
                .lock_all(["a", "b", "c"], secs(10))
                .wait(secs(8))
                .retries(50)
                .await;
            (lock, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    b.release().await.unwrap();
    let (lock, got) = waiter.await.unwrap();
    let lock = lock.unwrap();
    // The announcement, not the 10 s TTL.
    assert!(got - released < secs(2), "{:?}", got - released);
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_set_extends_only_while_every_member_is_ours() {
    let c = servers(5);
    let redlock = redlock(&c);
    let mut lock = redlock.lock_all(["a", "b"], secs(5)).await.unwrap();
    // The acquisition returned at a majority; its requests to the other
    // nodes may still be on their way (waiting for a first connection), and
    // an extension sent now could reach such a node before its key does,
    // find nothing there, and leave the late key at its first TTL (seen
    // once in CI). Every node holds the set before it is extended.
    for r in ["a", "b"] {
        await_holders(&c, &ALL, &key(r), 5, secs(5)).await;
    }
    lock.extend(secs(20)).await.unwrap();
    assert!(lock.remaining() > secs(15));
    // Decided at a majority; the other nodes' extensions follow.
    let start = Instant::now();
    while ["a", "b"]
        .iter()
        .any(|r| ALL.iter().any(|&i| pttl(&c, i, &key(r)) <= 15_000))
    {
        assert!(start.elapsed() < secs(5), "not extended on every node");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // One member vanishes everywhere: the set cannot be extended, and the
    // other member's keys are left as they were.
    for i in ALL {
        run(&c, i, &["DEL", &key("b")]);
    }
    let err = lock.extend(secs(60)).await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    for i in ALL {
        assert!(pttl(&c, i, &key("a")) <= 20_000);
    }
    lock.release().await.unwrap_err();
    await_gone(&c, &ALL, &key("a"), secs(5)).await;
}

/// Many tasks, each locking random sets of two out of four resources many
/// times: every call gets its set (no deadlock, bounded waiting), and no
/// resource is ever inside two critical sections at once.
#[tokio::test]
async fn overlapping_sets_never_overlap_and_all_make_progress() {
    let c = servers(5);
    let redlock = builder(&c)
        .retry_count(1_000)
        .wait_timeout(secs(20))
        .build()
        .unwrap();
    const TASKS: usize = 8;
    const ROUNDS: usize = 15;
    let inside: Arc<[AtomicUsize; 4]> = Arc::new(Default::default());
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (redlock, inside) = (redlock.clone(), inside.clone());
            tokio::spawn(async move {
                let mut waits = Vec::new();
                for round in 0..ROUNDS {
                    // Two distinct resources, named in either order.
                    let first = (t + round) % 4;
                    let second = (first + 1 + (t * 7 + round) % 3) % 4;
                    let names = [format!("m{first}"), format!("m{second}")];
                    let asked = Instant::now();
                    let lock = redlock.lock_all(&names, secs(5)).await.unwrap();
                    waits.push(asked.elapsed());
                    for r in [first, second] {
                        let before = inside[r].fetch_add(1, Ordering::SeqCst);
                        assert_eq!(before, 0, "m{r} is inside two critical sections");
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    for r in [first, second] {
                        inside[r].fetch_sub(1, Ordering::SeqCst);
                    }
                    lock.release().await.unwrap();
                }
                waits
            })
        })
        .collect();
    let mut waits = Vec::new();
    for task in tasks {
        waits.extend(task.await.unwrap());
    }
    assert_eq!(waits.len(), TASKS * ROUNDS);
    waits.sort();
    let longest = *waits.last().unwrap();
    // Bounded waiting: no call waited anywhere near its 20 s deadline.
    assert!(longest < secs(10), "longest wait {longest:?}");
    eprintln!(
        "{} sets in {:?}; wait p50 {:?}, max {longest:?}",
        waits.len(),
        start.elapsed(),
        waits[waits.len() / 2]
    );
}

#[tokio::test]
async fn an_empty_set_fails_before_any_io() {
    // Nothing listens on port 1: any I/O would fail differently.
    let redlock = Redlock::new(["redis://127.0.0.1:1"]).unwrap();
    let err = redlock
        .lock_all(Vec::<String>::new(), secs(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::NoResources)),
        "{err}"
    );
}

/// A key Redis could not take (over 512 MB) is refused before any I/O with
/// a typed error, for one resource or in a set; nothing panics (the lock's
/// record keeps the key's length in 32 bits).
#[tokio::test]
async fn a_key_too_long_for_redis_fails_before_any_io() {
    let redlock = Redlock::new(["redis://127.0.0.1:1"]).unwrap();
    let huge = "x".repeat(512 << 20);
    let one = redlock.lock(&huge, secs(1)).await.unwrap_err();
    let set = redlock.lock_all(["a", &huge], secs(1)).await.unwrap_err();
    for err in [one, set] {
        assert!(
            matches!(err, Error::Config(ConfigError::KeyTooLong { bytes }) if bytes == (512 << 20) + "redquorum:".len()),
            "{err}"
        );
        assert!(err.to_string().contains("shorter resource name"), "{err}");
    }
}

/// A set of thousands of resources: every script that takes, refuses or
/// releases it runs on all of its keys at once. Each script that reaches
/// the keys' side keys first touches them all (`kinds/moving.lua`), 400 to
/// a call: handed to one `EXISTS` with Lua's `unpack`, 2 000 keys and more
/// failed every script on every node ("too many results to unpack").
#[tokio::test]
async fn a_set_of_thousands_of_resources_is_taken_refused_and_released() {
    let c = servers(5);
    let redlock = redlock(&c);
    let names: Vec<String> = (0..3_000).map(|i| format!("many:{i}")).collect();
    let lock = redlock.lock_all(&names, secs(30)).await.unwrap();
    // A second set sharing one resource is refused (the whole script,
    // which queues the waiter), and keeps nothing.
    let err = redlock
        .lock_all(["many:2999", "other"], secs(10))
        .retries(0)
        .await
        .unwrap_err();
    assert!(err.report().unwrap().held_by_others() >= 3, "{err}");
    lock.release().await.unwrap();
    for r in ["many:0", "many:2999", "other"] {
        await_gone(&c, &ALL, &key(r), secs(5)).await;
    }
}
