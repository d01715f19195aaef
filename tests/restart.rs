//! The restart guard against real nodes: a node restarted empty gets no vote
//! on acquisitions until the locks it forgot would have expired, the lock
//! that an unguarded client would hand out twice, the end of the quarantine,
//! and a node whose ACL forbids `INFO`.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redquorum::local_servers::LocalServers;
use redquorum::{Error, NodeFailure, Redlock};

const ALL: [usize; 3] = [0, 1, 2];

/// Node `i` as reports name it.
fn name(c: &LocalServers, i: usize) -> String {
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
fn sets(c: &LocalServers, i: usize) -> u64 {
    command_stat(c, i, "set", "calls")
}

/// Locks "a" for 30 s on all three nodes, then restarts nodes 0 and 1, which
/// come back without the key. Returns the lock, still held on node 2.
async fn hold_then_restart_two(c: &mut LocalServers, redlock: &Redlock) -> redquorum::Lock {
    let lock = redlock.lock("a", Duration::from_secs(30)).await.unwrap();
    await_holders(c, &ALL, &key("a"), 3, Duration::from_secs(5)).await;
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    assert_eq!(holders(c, &ALL, &key("a")), 1);
    lock
}

#[tokio::test]
async fn restarted_nodes_get_no_vote_while_the_lock_they_forgot_may_be_held() {
    let mut c = servers(3);
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
    let mut c = servers(3);
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
    let mut c = servers(3);
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
    let mut c = servers(3);
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
    let mut c = servers(3);
    let forbid_info = |c: &LocalServers| {
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

/// Locks `name` for 60 s on all three nodes with its own client, then
/// restarts nodes 0 and 1 empty: the holder is still valid for about a
/// minute, on node 2 alone.
async fn hold_a_minute_then_restart_two(c: &mut LocalServers, name: &str) -> redquorum::Lock {
    let holder = redlock(c);
    let lock = holder.lock(name, Duration::from_secs(60)).await.unwrap();
    await_holders(c, &ALL, &key(name), 3, Duration::from_secs(5)).await;
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    assert_eq!(holders(c, &ALL, &key(name)), 1);
    lock
}

/// An acquisition that must fail because nodes 0 and 1 restarted: each
/// refused with nothing sent.
fn refused_by_the_restarted(c: &LocalServers, result: Result<redquorum::Lock, Error>) {
    let err = result.expect_err("a second holder while the first is valid");
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    // Refused by the restarted nodes (one may not have been waited for:
    // the outcome was decided without it), never agreed by them.
    let refused = restarted(&err);
    assert!(!refused.is_empty(), "{err}");
    assert!(
        refused.iter().all(|n| *n == name(c, 0) || *n == name(c, 1)),
        "{err}"
    );
    assert_eq!(err.report().unwrap().agreed(), 0, "{err}");
    assert_eq!((sets(c, 0), sets(c, 1)), (0, 0), "{err}");
}

#[tokio::test]
async fn a_restart_seen_first_by_a_read_quarantines_the_next_acquisition() {
    // A client that reads before it locks (a dashboard, `leader()` before
    // `campaign()`): it has taken no lock, so it knows no TTL when its read
    // finds the restarts; the moment is kept, and its own acquisition is
    // held to its TTL from there.
    let mut c = servers(3);
    let reader = redlock(&c);
    assert!(reader.status("pr").await.holder().is_none());
    let first = hold_a_minute_then_restart_two(&mut c, "pr").await;
    // Its read reconnects and sees the new run_ids.
    let _ = reader.status("pr").await;
    refused_by_the_restarted(&c, reader.try_lock("pr", Duration::from_secs(60)).await);
    assert!(!first.is_expired());
    first.release().await.ok();
}

#[tokio::test]
async fn a_process_started_after_the_restart_gives_the_restarted_nodes_no_vote() {
    // A client whose first connection to a node is made after the node
    // restarted empty has no earlier run_id to compare; the node's uptime
    // (0 s) says it may have forgotten keys granted a TTL ago.
    let mut c = servers(3);
    let first = hold_a_minute_then_restart_two(&mut c, "pr").await;
    let restarted_at = Instant::now();
    let fresh = redlock(&c);
    refused_by_the_restarted(&c, fresh.try_lock("pr", Duration::from_secs(60)).await);
    assert!(!first.is_expired());
    // The price: a fresh client's acquisition of a TTL `t` waits until the
    // nodes are up for `t`, then goes in.
    let short = Duration::from_secs(2);
    // (Another fresh client: this one's 60 s attempt made 60 s the TTL
    // it assumes others use.)
    let fresh = redlock(&c);
    let lock = fresh
        .lock("other", short)
        .retries(u32::MAX)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    // The README's figure of that price.
    eprintln!(
        "a fresh client's {short:?} lock went in {:?} after two of three nodes restarted empty",
        restarted_at.elapsed()
    );
    assert!(restarted_at.elapsed() >= short - Duration::from_secs(1));
    // Node 2 alone is no majority of three: a restarted node voted. Not
    // necessarily both: the lock is granted once two agree, and the other
    // restarted node's `SET` may still be on its way, or refused because
    // its uptime reached the TTL a moment after the first one's did (the
    // two restarts are not at the same instant).
    assert!(sets(&c, 0) + sets(&c, 1) >= 1);
    lock.release().await.unwrap();
    first.release().await.ok();
}

#[tokio::test]
async fn a_candidate_that_first_reaches_nodes_after_their_restart_does_not_lead_beside_the_leader()
{
    // Elections with nodes restarted one at a time: a candidate started
    // while two nodes were down first connects to them after they came
    // back empty (no earlier run_id to compare), and a reader's
    // `leader()` finds restarts before its process ever locked. Neither
    // may begin to lead while the leader still believes itself valid.
    let mut c = servers(3);
    let leading = redlock(&c);
    let leader = leading
        .campaign("sched", "a", Duration::from_secs(60))
        .await
        .unwrap();
    await_holders(&c, &ALL, &key("sched"), 3, Duration::from_secs(5)).await;
    let reader = redlock(&c);
    assert_eq!(reader.leader("sched").await.unwrap().unwrap().identity, "a");
    c.kill(0);
    c.kill(1);
    let candidate = redlock(&c);
    assert!(candidate.leader("sched").await.is_err());
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    let campaign = |client: Redlock, who: &'static str| async move {
        let campaign = client
            .campaign("sched", who, Duration::from_secs(60))
            .wait(Duration::from_secs(2))
            .await;
        assert!(
            campaign.is_err(),
            "{who}: a second leader while the first leads"
        );
    };
    campaign(candidate, "b").await;
    // The reader cannot say who leads (two nodes are empty, but up for
    // less than the leader's key has left); it does not say "nobody".
    let read = reader.leader("sched").await;
    assert!(read.is_err(), "{read:?}");
    campaign(reader, "c").await;
    campaign(redlock(&c), "d").await;
    assert!(!leader.is_lost());
    assert_eq!((sets(&c, 0), sets(&c, 1)), (0, 0));
}

#[tokio::test]
async fn a_waiter_waits_out_a_quarantine_within_its_wait() {
    // Default options (ten counted retries): a fresh process that wants a
    // 5 s lock right after two of three nodes restarted empty sleeps until
    // their quarantine ends, within its wait, rather than spending its
    // retries on nodes that cannot vote yet.
    let mut c = servers(3);
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    let restarted_at = Instant::now();
    let fresh = Redlock::builder().nodes(c.urls()).build().unwrap();
    let ttl = Duration::from_secs(5);
    let lock = fresh
        .lock("w", ttl)
        .wait(Duration::from_secs(15))
        .await
        .unwrap();
    assert!(restarted_at.elapsed() >= ttl - Duration::from_secs(1));
    lock.release().await.unwrap();
    // A wait shorter than the quarantine gives up at once, on its deadline.
    c.restart(0).unwrap();
    c.restart(1).unwrap();
    let fresh = Redlock::builder().nodes(c.urls()).build().unwrap();
    let started = Instant::now();
    let err = fresh
        .lock("w", ttl)
        .wait(Duration::from_secs(2))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotAcquired {
                gave_up: redquorum::GaveUp::Deadline,
                ..
            }
        ),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_millis(1_500), "{err}");
}
