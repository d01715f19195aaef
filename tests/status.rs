//! An operator's tools against five real local servers: `Redlock::status`
//! (what each node holds, and whether a majority agrees) and
//! `Redlock::release_token` (compare-and-delete by token, never blind).

mod common;

use std::time::Duration;

use common::*;
use redquorum::{ConfigError, Error, Holding, NodeFailure};

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[tokio::test]
async fn status_shows_free_held_split_fenced_and_reentrant_locks() {
    let mut c = servers(5);
    let redlock = redlock(&c);
    let free = redlock.status("r").await;
    assert!(free.is_free());
    assert_eq!(free.holder(), None);
    assert_eq!(free.nodes().len(), 5);
    assert!(
        free.nodes()
            .iter()
            .all(|(_, s)| s.as_ref().unwrap().lock.is_none())
    );

    // Held by a fenced lock: its token on every node, a TTL, the counter.
    let lock = redlock.lock("r", secs(10)).fenced().await.unwrap();
    await_holders(&c, &ALL, &key("r"), 5, secs(5)).await;
    let held = redlock.status("r").await;
    assert_eq!(
        held.holder(),
        Some(&Holding::Token(lock.token().to_owned()))
    );
    assert!(!held.is_free());
    for (node, state) in held.nodes() {
        let state = state.as_ref().unwrap();
        let ttl = state.ttl.unwrap();
        assert!(ttl > secs(5) && ttl <= secs(10), "{node}: {ttl:?}");
        assert_eq!(state.fence, lock.fence(), "{node}");
    }
    lock.release().await.unwrap();
    await_gone(&c, &ALL, &key("r"), secs(5)).await;
    // Free again; the counters stay.
    let after = redlock.status("r").await;
    assert!(after.is_free());
    assert!(
        after
            .nodes()
            .iter()
            .all(|(_, s)| s.as_ref().unwrap().fence.is_some())
    );

    // Split: two tokens on two nodes each and one free node; one node frozen.
    for (i, token) in [(0, "a"), (1, "a"), (2, "b"), (3, "b")] {
        run(&c, i, &["SET", &key("s"), token, "PX", "10000"]);
    }
    let split = redlock.status("s").await;
    assert_eq!(split.holder(), None);
    assert!(!split.is_free());
    c.freeze(4);
    let frozen = redlock.status("s").await;
    c.thaw(4);
    assert_eq!(frozen.nodes()[4].1, Err(NodeFailure::Timeout));

    // Reentrant holds: one owner on every node, each hold listed.
    let outer = redlock
        .lock("h", secs(10))
        .reentrant("job-1")
        .await
        .unwrap();
    let inner = redlock
        .lock("h", secs(10))
        .reentrant("job-1")
        .await
        .unwrap();
    await_holders(&c, &ALL, &key("h"), 5, secs(5)).await;
    let start = std::time::Instant::now();
    let reentrant = loop {
        let status = redlock.status("h").await;
        let both = status.nodes().iter().all(|(_, s)| {
            matches!(&s.as_ref().unwrap().lock, Some(Holding::Reentrant { holds, .. }) if holds.len() == 2)
        });
        if both || start.elapsed() > secs(5) {
            break status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let Some(Holding::Reentrant { owner, holds }) = reentrant.holder() else {
        panic!("{reentrant:?}")
    };
    assert_eq!(owner, "job-1");
    let mut expected = vec![outer.token().to_owned(), inner.token().to_owned()];
    let mut holds = holds.clone();
    expected.sort();
    holds.sort();
    assert_eq!(holds, expected);
    inner.release().await.unwrap();
    outer.release().await.unwrap();

    // A key that is not a lock is shown as what it is.
    run(&c, 0, &["LPUSH", &key("l"), "x"]);
    let other = redlock.status("l").await;
    assert_eq!(
        other.nodes()[0].1.as_ref().unwrap().lock,
        Some(Holding::Other("list".into()))
    );
}

#[tokio::test]
async fn release_token_deletes_only_the_key_holding_that_token() {
    let c = servers(5);
    let redlock = redlock(&c);
    let lock = redlock.lock("r", secs(30)).await.unwrap();
    let token = lock.token().to_owned();
    await_holders(&c, &ALL, &key("r"), 5, secs(5)).await;
    // Another token: nothing changes anywhere.
    let wrong = "0".repeat(40);
    let report = redlock.release_token("r", &wrong).await.unwrap();
    assert_eq!(report.agreed(), 0, "{report}");
    assert_eq!(report.held_by_others(), 5, "{report}");
    for i in ALL {
        assert_eq!(get(&c, i, &key("r")).as_deref(), Some(token.as_str()));
    }
    // Not a token at all (tokens are lower-case hex): refused before any I/O.
    for bad in ["stale", &token.to_uppercase()] {
        let err = redlock.release_token("r", bad).await.unwrap_err();
        assert!(
            matches!(err, Error::Config(ConfigError::InvalidToken)),
            "{err}"
        );
    }
    // A waiter for the resource is woken by the operator's release.
    let waiter = {
        let redlock = redlock.clone();
        tokio::spawn(async move {
            let asked = std::time::Instant::now();
            let lock = redlock
                .lock("r", secs(10))
                .wait(secs(20))
                .retries(100)
                .await;
            (lock, asked.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = redlock.release_token("r", &token).await.unwrap();
    assert_eq!(report.agreed(), 5, "{report}");
    let (next, waited) = waiter.await.unwrap();
    let next = next.unwrap();
    assert!(
        waited < secs(5),
        "woken by the release, not the 30 s TTL: {waited:?}"
    );
    // The stale lock's owner finds it gone.
    assert!(matches!(
        lock.release().await,
        Err(Error::Taken { .. } | Error::Expired { .. })
    ));
    // Once more with the old token: the new holder's keys are left alone.
    let report = redlock.release_token("r", &token).await.unwrap();
    assert_eq!(report.agreed(), 0, "{report}");
    assert_eq!(
        redlock.status("r").await.holder(),
        Some(&Holding::Token(next.token().to_owned()))
    );
    next.release().await.unwrap();
    let report = redlock.release_token("r", &token).await.unwrap();
    assert_eq!(
        count(&report, |f| *f == NodeFailure::Missing),
        5,
        "{report}"
    );
}

#[tokio::test]
async fn release_token_removes_one_reentrant_hold_and_the_key_with_the_last() {
    let c = servers(5);
    let redlock = redlock(&c);
    let outer = redlock.lock("h", secs(30)).reentrant("job").await.unwrap();
    let inner = redlock.lock("h", secs(30)).reentrant("job").await.unwrap();
    // Both takes on every node (those beyond a majority land after the
    // call returns): a take landing after the clear would keep the key.
    let start = std::time::Instant::now();
    while !redlock.status("h").await.nodes().iter().all(|(_, s)| {
        matches!(&s.as_ref().unwrap().lock, Some(Holding::Reentrant { holds, .. }) if holds.len() == 2)
    }) {
        assert!(start.elapsed() < secs(5), "both holds never reached every node");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let report = redlock.release_token("h", inner.token()).await.unwrap();
    assert_eq!(report.agreed(), 5, "{report}");
    // The outer hold keeps the key, and another owner out.
    assert_eq!(holders(&c, &ALL, &key("h")), 5);
    let err = redlock
        .lock("h", secs(5))
        .reentrant("other")
        .retries(0)
        .await
        .unwrap_err();
    assert!(err.report().unwrap().held_by_others() >= 3, "{err}");
    let report = redlock.release_token("h", outer.token()).await.unwrap();
    assert_eq!(report.agreed(), 5, "{report}");
    assert_eq!(holders(&c, &ALL, &key("h")), 0);
    drop((outer, inner));
}
