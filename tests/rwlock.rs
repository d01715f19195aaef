//! Read-write locks against real nodes: readers share, a writer excludes
//! readers and writers — and the three traps: per-node reader counts that
//! diverge, one TTL for every reader, and a writer starved by readers that
//! keep overlapping.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::proxy::{in_front_of, steered};
use common::*;
use redquorum::local_cluster::{Reply, command};
use redquorum::{ConfigError, Error, Holding, Lock, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn read(redlock: &Redlock, name: &str) -> Result<Lock, Error> {
    redlock.lock(name, TTL).shared().await
}

/// The readers the nodes agree on (a majority shows the same set).
async fn readers(redlock: &Redlock, name: &str) -> Vec<String> {
    let status = redlock.status(name).await;
    match status.holder() {
        Some(Holding::Readers { .. }) => {
            let mut all: Vec<Vec<String>> = status
                .nodes()
                .iter()
                .filter_map(|(_, s)| match &s.as_ref().ok()?.lock {
                    Some(Holding::Readers { readers }) => Some(readers.clone()),
                    _ => None,
                })
                .collect();
            all.sort();
            all.dedup();
            assert_eq!(all.len(), 1, "the nodes disagree on the readers: {all:?}");
            all.remove(0)
        }
        _ => Vec::new(),
    }
}

/// Readers share; a writer is kept out while any reads, and keeps readers
/// and writers out while it writes.
#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let c = cluster(5);
    let redlock = redlock(&c);
    let r1 = read(&redlock, "config").await.unwrap();
    let r2 = read(&redlock, "config").await.unwrap();
    let r3 = read(&redlock, "config").await.unwrap();
    let mut seen = readers(&redlock, "config").await;
    seen.sort();
    let mut tokens = vec![
        r1.token().to_owned(),
        r2.token().to_owned(),
        r3.token().to_owned(),
    ];
    tokens.sort();
    assert_eq!(seen, tokens);
    // A writer of another client (this task reads: its own write would
    // be an upgrade, refused; see below).
    // (A client built on its own: clones of one share its read locks.)
    let other = common::redlock(&c);
    let err = other.try_lock("config", TTL).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    for r in [r1, r2, r3] {
        r.release().await.unwrap();
    }
    await_gone(&c, &ALL, &key("config"), Duration::from_secs(5)).await;
    let w = redlock.try_lock("config", TTL).await.unwrap();
    let err = read(&redlock, "config").await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    let err = redlock.try_lock("config", TTL).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    w.release().await.unwrap();
    // Combinations that make no sense fail before any I/O.
    let err = redlock
        .lock("config", TTL)
        .shared()
        .permits(2)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::Combination(_))),
        "{err}"
    );
}

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

/// A task that reads a name and asks to write on it (an upgrade) is
/// refused at once, with nothing sent — in every form a write takes —,
/// until its read lock is released or dropped; another task of the same
/// client is not refused: it waits for the reader, and gets in when the
/// reader goes.
#[tokio::test]
async fn an_upgrade_is_refused_and_another_tasks_write_waits() {
    let c = cluster(5);
    let redlock = redlock(&c);
    let reader = read(&redlock, "doc").await.unwrap();
    let refused = |e: Error| match e {
        Error::Upgrade { resource } => assert_eq!(resource, "doc"),
        e => panic!("not refused as an upgrade: {e}"),
    };
    // What the nodes were asked to run, in all.
    let sent = || -> u64 {
        ALL.iter()
            .flat_map(|&i| ["evalsha", "eval", "set"].map(|cmd| command_stat(&c, i, cmd, "calls")))
            .sum()
    };
    let before = sent();
    refused(redlock.lock("doc", TTL).await.unwrap_err());
    refused(redlock.try_lock("doc", TTL).await.unwrap_err());
    refused(redlock.clone().lock("doc", TTL).fenced().await.unwrap_err());
    refused(redlock.lock("doc", TTL).reentrant("me").await.unwrap_err());
    refused(redlock.lock("doc", TTL).permits(2).await.unwrap_err());
    refused(redlock.lock_all(["a", "doc"], TTL).await.unwrap_err());
    let msg = redlock.lock("doc", TTL).await.unwrap_err().to_string();
    assert!(msg.contains("release the read lock first"), "{msg}");
    // Nothing was sent.
    assert_eq!(sent(), before, "a refused write reached the nodes");
    // In a spawned task too, against a read lock of its own; a read lock
    // whose state outlives it (a view of it kept, its watchdog) counts
    // until its release, and no longer after.
    let spawned = redlock.clone();
    tokio::spawn(async move {
        let mut own = read(&spawned, "mine").await.unwrap();
        let view = own.keep_alive();
        let err = spawned.try_lock("mine", TTL).await.unwrap_err();
        assert!(matches!(err, Error::Upgrade { .. }), "{err}");
        own.release().await.unwrap();
        spawned
            .try_lock("mine", TTL)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        assert!(view.is_lost());
    })
    .await
    .unwrap();
    // Other names, and more readers, are not refused.
    redlock
        .lock("else", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let second = read(&redlock, "doc").await.unwrap();
    // Another task asks to write: it waits, and gets in once both go.
    let writer = tokio::spawn({
        let redlock = redlock.clone();
        async move {
            let lock = redlock
                .lock("doc", TTL)
                .retries(u32::MAX)
                .wait(Duration::from_secs(20))
                .await?;
            lock.release().await
        }
    });
    tokio::time::sleep(ms(300)).await;
    if writer.is_finished() {
        panic!("the writer is done under readers: {:?}", writer.await);
    }
    reader.release().await.unwrap();
    refused(redlock.try_lock("doc", TTL).await.unwrap_err());
    drop(second);
    writer.await.unwrap().unwrap();
    // Released and dropped: this task may write again.
    redlock
        .lock("doc", TTL)
        .retries(u32::MAX)
        .wait(Duration::from_secs(20))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Trap 2: each reader's share ends at its own TTL. A reader that vanished
/// without a release is gone from the nodes once its TTL has passed, while
/// another reader keeps renewing its own; when that one lets go, a writer
/// gets in at once. (With one TTL on the readers' key, renewed by every
/// reader, the vanished share would live as long as the other renews, and
/// the writer would wait for the key's TTL after the last release.)
#[tokio::test]
async fn a_vanished_readers_share_ends_at_its_own_ttl() {
    let c = cluster(5);
    let redlock = builder(&c).node_timeout(ms(150)).build().unwrap();
    let short = ms(800);
    let mut renewing = redlock.lock("feed", short).shared().await.unwrap();
    let held = renewing.keep_alive();
    // Another process's reader, which crashes: forgotten, never released.
    let crashed = builder(&c).node_timeout(ms(150)).build().unwrap();
    let vanished = crashed.lock("feed", short).shared().await.unwrap();
    let gone = vanished.token().to_owned();
    std::mem::forget(vanished);
    tokio::time::sleep(ms(1_500)).await;
    assert!(!held.is_lost());
    let left = readers(&redlock, "feed").await;
    assert_eq!(
        left,
        [renewing.token()],
        "the vanished reader {gone} is still there"
    );
    renewing.release().await.unwrap();
    let writer = redlock.try_lock("feed", short).await.unwrap();
    writer.release().await.unwrap();
}

/// Trap 3: readers that keep overlapping do not starve a writer. Four
/// readers take and release shares back to back, always overlapping; a
/// writer that asks meanwhile gets in while they are still at it (its
/// intent turns new readers away until the current ones end), and no
/// reader holds while it does. (Without the intent it waited until the
/// readers stopped: see the CHANGELOG.)
#[tokio::test]
async fn a_writer_under_continuous_readers_gets_in() {
    let c = cluster(5);
    let inside = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let overlapped = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..4)
        .map(|i| {
            let redlock = builder(&c).retry_count(u32::MAX).build().unwrap();
            let (inside, writing, overlapped, stop, most) = (
                inside.clone(),
                writing.clone(),
                overlapped.clone(),
                stop.clone(),
                most_readers.clone(),
            );
            tokio::spawn(async move {
                tokio::time::sleep(ms(30 * i)).await;
                while !stop.load(Ordering::SeqCst) {
                    let lock = redlock
                        .lock("doc", TTL)
                        .shared()
                        .wait(Duration::from_secs(20))
                        .await
                        .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    if writing.load(Ordering::SeqCst) {
                        overlapped.store(true, Ordering::SeqCst);
                    }
                    tokio::time::sleep(ms(120)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            })
        })
        .collect();
    tokio::time::sleep(ms(500)).await;
    let writer = builder(&c).retry_count(u32::MAX).build().unwrap();
    let asked = Instant::now();
    let lock = writer
        .lock("doc", TTL)
        .wait(Duration::from_secs(15))
        .await
        .unwrap();
    let waited = asked.elapsed();
    writing.store(true, Ordering::SeqCst);
    assert_eq!(
        inside.load(Ordering::SeqCst),
        0,
        "a reader inside with the writer"
    );
    tokio::time::sleep(ms(100)).await;
    writing.store(false, Ordering::SeqCst);
    lock.release().await.unwrap();
    // The readers were still at it when the writer got in.
    let still_reading = !stop.load(Ordering::SeqCst);
    tokio::time::sleep(ms(500)).await;
    stop.store(true, Ordering::SeqCst);
    for r in readers {
        r.await.unwrap();
    }
    println!("the writer waited {waited:?} under continuous readers");
    assert!(still_reading);
    assert!(
        waited < Duration::from_secs(5),
        "the writer waited {waited:?}"
    );
    assert!(
        !overlapped.load(Ordering::SeqCst),
        "a reader held with the writer"
    );
    assert!(
        most_readers.load(Ordering::SeqCst) >= 2,
        "the readers never overlapped"
    );
}

/// A writer kept out by a reader leaves an intent that turns new readers
/// away; a writer that stops waiting takes its intent with it, and readers
/// get in at once, not when the intent would have lapsed.
#[tokio::test]
async fn a_writer_that_gives_up_lets_readers_in_at_once() {
    let c = cluster(5);
    let redlock = redlock(&c);
    let reader = read(&redlock, "page").await.unwrap();
    let writer = builder(&c)
        .node_timeout(ms(100))
        .retry_count(u32::MAX)
        .build()
        .unwrap();
    let waiting = tokio::spawn(async move {
        let _ = writer.lock("page", TTL).wait(Duration::from_secs(20)).await;
    });
    let intent = format!("{}:intent", key("page"));
    let start = Instant::now();
    while holders(&c, &ALL, &intent) < 3 {
        assert!(start.elapsed() < Duration::from_secs(5), "no intent left");
        tokio::time::sleep(ms(20)).await;
    }
    let err = read(&redlock, "page").await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    // The writer stops waiting (its call dropped): it leaves the queues,
    // in the background, and its intent with them.
    waiting.abort();
    let start = Instant::now();
    loop {
        match read(&redlock, "page").await {
            Ok(other) => {
                other.release().await.unwrap();
                break;
            }
            Err(e) => assert!(
                start.elapsed() < Duration::from_secs(1),
                "a reader still turned away: {e}"
            ),
        }
        tokio::time::sleep(ms(20)).await;
    }
    reader.release().await.unwrap();
}

/// Trap 1: reader A's share reaches nodes {0,1,2} only, reader B's {2,3,4};
/// A's release then reaches every node. B still holds on a majority, and
/// a writer is kept out. (Per-node counts, decremented by every node the
/// release reaches, would free nodes 0, 1, 3 and 4: see the negative
/// control below.)
#[tokio::test]
async fn a_release_that_reaches_more_nodes_than_its_take_frees_nothing_of_another_reader() {
    let c = cluster(5);
    let (pa, pb) = (in_front_of(&c), in_front_of(&c));
    let a = steered(&pa, &[0, 1, 2]).retry_count(0).build().unwrap();
    let b = steered(&pb, &[2, 3, 4]).retry_count(0).build().unwrap();
    let ra = a.lock("shelf", TTL).shared().await.unwrap();
    let rb = b.lock("shelf", TTL).shared().await.unwrap();
    // A's release goes everywhere.
    for p in &pa {
        p.heal();
    }
    ra.release().await.unwrap();
    let writer = redlock(&c);
    let err = writer.try_lock("shelf", TTL).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    for p in &pb {
        p.heal();
    }
    rb.release().await.unwrap();
    writer
        .try_lock("shelf", TTL)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// The negative control of trap 1: per-node reader counts (INCR on take,
/// DECR on release where the count is positive), with the same steering,
/// free a majority under reader B: a writer would get in.
#[test]
fn negative_control_per_node_reader_counts_free_a_majority_under_a_reader() {
    const DECR: &str = "if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then \
         return redis.call('DECR', KEYS[1]) end return 0";
    let c = cluster(5);
    let count = |i: usize, args: &[&str]| command(c.port(i), args).unwrap();
    for i in [0, 1, 2] {
        count(i, &["INCR", "readers"]); // A
    }
    for i in [2, 3, 4] {
        count(i, &["INCR", "readers"]); // B
    }
    for i in ALL {
        count(i, &["EVAL", DECR, "1", "readers"]); // A's release, everywhere
    }
    let free = ALL
        .iter()
        .filter(|&&i| {
            matches!(count(i, &["GET", "readers"]), Reply::Bulk(Some(v)) if v == b"0")
                || count(i, &["GET", "readers"]) == Reply::Bulk(None)
        })
        .count();
    assert!(
        free >= 3,
        "only {free} nodes free: the counts did not diverge"
    );
}
