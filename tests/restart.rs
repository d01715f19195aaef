//! The restart guard against real nodes: a node restarted empty gets no vote
//! on acquisitions until the locks it forgot would have expired, the lock
//! that an unguarded client would hand out twice, the end of the quarantine,
//! and a node whose ACL forbids `INFO`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redquorum::local_cluster::LocalCluster;
use redquorum::{Error, NodeFailure, Redlock};

const ALL: [usize; 3] = [0, 1, 2];

/// Node `i` as reports name it.
fn name(c: &LocalCluster, i: usize) -> String {
    format!("127.0.0.1:{}", c.port(i))
}

/// The nodes of a failed acquisition that refused because they restarted,
/// by name.
fn restarted(err: &Error) -> Vec<String> {
    let report = err.report().expect("a report");
    report
        .failures()
        .iter()
        .filter(|(_, f)| matches!(f, NodeFailure::Restarted { .. }))
        .map(|(node, _)| node.clone())
        .collect()
}

/// How many `SET`s node `i` has run since it started.
fn sets(c: &LocalCluster, i: usize) -> u64 {
    command_stat(c, i, "set", "calls")
}

/// Locks "a" for 30 s on all three nodes, then restarts nodes 0 and 1, which
/// come back without the key. Returns the lock, still held on node 2.
async fn hold_then_restart_two(c: &mut LocalCluster, redlock: &Redlock) -> redquorum::Lock {
    let lock = redlock.lock("a", Duration::from_secs(30)).await.unwrap();
    await_holders(c, &ALL, &key("a"), 3, Duration::from_secs(5)).await;
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    assert_eq!(holders(c, &ALL, &key("a")), 1);
    lock
}

#[tokio::test]
async fn restarted_nodes_get_no_vote_while_the_lock_they_forgot_may_be_held() {
    let mut c = cluster(3);
    let redlock = redlock(&c);
    let first = hold_then_restart_two(&mut c, &redlock).await;
    // Two of three nodes are empty, but the first holder is still valid:
    // every attempt fails. The first finds the restarts as it reconnects;
    // a node it did not wait for is reconnected by the rollback, in the
    // background. From then on both refuse at once.
    let started = Instant::now();
    let err = loop {
        let err = redlock
            .try_lock("a", Duration::from_secs(30))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
        assert_eq!(err.report().unwrap().agreed(), 0, "{err}");
        // No SET reached them, not even on the reconnect that found the
        // restart.
        assert_eq!((sets(&c, 0), sets(&c, 1)), (0, 0), "{err}");
        if restarted(&err) == [name(&c, 0), name(&c, 1)] {
            break err;
        }
        assert!(started.elapsed() < Duration::from_secs(5), "{err}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for (_, failure) in err.report().unwrap().failures() {
        if let NodeFailure::Restarted { remaining } = failure {
            // 30 s and its drift allowance (302 ms) since the lock was
            // sent, less the little time gone by.
            assert!(*remaining > Duration::from_secs(20), "{err}");
            assert!(*remaining <= Duration::from_millis(30_302), "{err}");
        }
    }
    assert!(err.to_string().contains("restart_guard"), "{err}");
    assert_eq!(get(&c, 2, &key("a")).as_deref(), Some(first.token()));
    // The release still reaches every node; the key is found on node 2
    // alone, the others having forgotten it.
    let err = first.release().await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    await_gone(&c, &ALL, &key("a"), Duration::from_secs(5)).await;
}

#[tokio::test]
async fn without_the_guard_the_forgotten_lock_is_handed_out_twice() {
    let mut c = cluster(3);
    let redlock = builder(&c).restart_guard(false).build().unwrap();
    let first = hold_then_restart_two(&mut c, &redlock).await;
    // The unsafety the guard prevents: a second holder while the first is
    // still valid.
    let second = redlock
        .try_lock("a", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!first.is_expired());
    assert_ne!(first.token(), second.token());
    await_holders(&c, &[0, 1], &key("a"), 2, Duration::from_secs(5)).await;
    for i in [0, 1] {
        assert_eq!(get(&c, i, &key("a")).as_deref(), Some(second.token()));
        assert_eq!(sets(&c, i), 1);
    }
    drop((first, second));
}

#[tokio::test]
async fn the_quarantine_ends_when_the_ttl_has_passed_since_the_restart() {
    let mut c = cluster(3);
    let ttl = Duration::from_millis(1_500);
    // A node timeout well below the TTL, yet generous for a loaded machine.
    let redlock = builder(&c)
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    // Connects to every node (learning its run id) and asks for the TTL.
    let warm = redlock.try_lock("warm", ttl).await.unwrap();
    // The call returns at a majority; node 0 may still be connecting. Its
    // run id is known once its key is there.
    await_holders(&c, &[0, 1, 2], &key("warm"), 3, Duration::from_secs(5)).await;
    warm.release().await.unwrap();
    let before_restart = Instant::now();
    c.restart(0).unwrap();
    // Without node 2, every acquisition needs node 0's vote.
    c.kill(2);
    let err = redlock.try_lock("r0", ttl).await.unwrap_err();
    assert_eq!(restarted(&err), [name(&c, 0)], "{err}");
    let mut attempt = 0;
    let lock = loop {
        attempt += 1;
        match redlock.try_lock(&format!("r{attempt}"), ttl).await {
            Ok(lock) => break lock,
            Err(err) => assert_eq!(restarted(&err), [name(&c, 0)], "{err}"),
        }
        assert!(
            before_restart.elapsed() < Duration::from_secs(10),
            "still no vote from the restarted node"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Not before the TTL had passed since the restart: the node came up
    // after `before_restart`.
    let waited = before_restart.elapsed();
    assert!(waited >= ttl, "voted again after {waited:?}");
    assert_eq!(
        get(&c, 0, &key(&format!("r{attempt}"))).as_deref(),
        Some(lock.token())
    );
    lock.release().await.unwrap();
}

/// One long TTL, once, used to make every later restart cost that long (the
/// guard took the longest TTL ever asked for). Now it counts only while a
/// key sent with it could still be alive.
#[tokio::test]
async fn one_long_ttl_once_does_not_make_every_later_restart_cost_that_long() {
    let mut c = cluster(3);
    let redlock = builder(&c)
        .node_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let long = redlock
        .try_lock("long", Duration::from_secs(3))
        .await
        .unwrap();
    await_holders(&c, &ALL, &key("long"), 3, Duration::from_secs(5)).await;
    long.release().await.unwrap();
    // Past any moment the long key could have lived to.
    tokio::time::sleep(Duration::from_millis(3_200)).await;
    let short = Duration::from_millis(600);
    let warm = redlock.try_lock("warm", short).await.unwrap();
    await_holders(&c, &ALL, &key("warm"), 3, Duration::from_secs(5)).await;
    warm.release().await.unwrap();
    let restarted_at = Instant::now();
    c.restart(0).unwrap();
    // Without node 2, every acquisition needs node 0's vote.
    c.kill(2);
    let mut refused = 0;
    let mut attempt = 0;
    let lock = loop {
        attempt += 1;
        match redlock.try_lock(&format!("r{attempt}"), short).await {
            Ok(lock) => break lock,
            Err(err) => {
                assert_eq!(restarted(&err), [name(&c, 0)], "{err}");
                refused += 1;
            }
        }
        assert!(
            restarted_at.elapsed() < Duration::from_secs(10),
            "still no vote from the restarted node"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let waited = restarted_at.elapsed();
    assert!(refused > 0, "the restart went unseen");
    // The short TTL and its drift from the restart (about 0.6 s), not the
    // 3 s of the long lock.
    assert!(
        waited < Duration::from_millis(2_000),
        "no vote for {waited:?}"
    );
    lock.release().await.unwrap();
}

#[tokio::test]
async fn a_node_that_forbids_info_still_locks_but_its_restarts_go_unseen() {
    let mut c = cluster(3);
    let forbid_info = |c: &LocalCluster| {
        for i in [0, 1] {
            run(c, i, &["ACL", "SETUSER", "default", "-info"]);
        }
    };
    forbid_info(&c);
    let redlock = redlock(&c);
    // Nodes 0 and 1 take part as the others do (checked inside).
    let first = hold_then_restart_two(&mut c, &redlock).await;
    // The ACL lives in memory and went with the restart: forbid again
    // before the client reconnects.
    forbid_info(&c);
    // The guard is blind to these two: as without it, a second holder.
    let second = redlock
        .try_lock("a", Duration::from_secs(30))
        .await
        .unwrap();
    assert!(!first.is_expired());
    drop((first, second));
}
