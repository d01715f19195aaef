//! Read-write locks against real nodes: readers share, a writer excludes
//! readers and writers — and the three traps: per-node reader counts that
//! diverge, one TTL for every reader, and a writer starved by readers that
//! keep overlapping.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::proxy::{Proxy, in_front_of, steered};
use common::*;
use redquorum::local_servers::{LocalServers, Reply, command};
use redquorum::{ConfigError, Error, Holding, Lock, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn read(redlock: &Redlock, name: &str) -> Result<Lock, Error> {
    redlock.lock(name, TTL).shared().await
}

/// The readers the nodes agree on. A read is returned at a majority and
/// its last grants follow (on a loaded machine, after the next call
/// began), so the nodes are read until they agree, within 5 s.
async fn readers(redlock: &Redlock, name: &str) -> Vec<String> {
    let started = Instant::now();
    loop {
        let status = redlock.status(name).await;
        let Some(Holding::Readers { .. }) = status.holder() else {
            return Vec::new();
        };
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
        if all.len() == 1 {
            return all.remove(0);
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the nodes disagree on the readers: {all:?}"
        );
        tokio::time::sleep(ms(20)).await;
    }
}

/// Readers share; a writer is kept out while any reads, and keeps readers
/// and writers out while it writes.
#[tokio::test]
async fn readers_share_and_a_writer_excludes_everyone() {
    let c = servers(5);
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
    let c = servers(5);
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

/// A task that reads a name and reads it again while another process's
/// writer waits (its intent turning new readers away) is let in at once:
/// it is already in, and turned away it would wait for its own first read,
/// which the writer waits for (a deadlock until its wait deadline). Other
/// processes' readers are still turned away, and the writer gets in once
/// both of the task's reads are released.
#[tokio::test]
async fn a_nested_read_behind_a_waiting_writer_goes_in() {
    let c = servers(5);
    let redlock = redlock(&c);
    let first = read(&redlock, "shelf").await.unwrap();
    let writer = builder(&c).retry_count(u32::MAX).build().unwrap();
    let waiting = tokio::spawn(async move {
        let lock = writer
            .lock("shelf", TTL)
            .wait(Duration::from_secs(30))
            .await?;
        lock.release().await
    });
    let intent = format!("{}:intent", key("shelf"));
    let start = Instant::now();
    while holders(&c, &ALL, &intent) < 3 {
        assert!(start.elapsed() < Duration::from_secs(5), "no intent left");
        tokio::time::sleep(ms(20)).await;
    }
    // Another process's reader is turned away by the intent.
    let other = common::redlock(&c);
    let err = read(&other, "shelf").await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    // This task's second read goes in at once (it would otherwise wait
    // for its own first until its wait deadline, 5 s here).
    let asked = Instant::now();
    let second = redlock
        .lock("shelf", TTL)
        .shared()
        .retries(u32::MAX)
        .wait(Duration::from_secs(5))
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the nested read waited for itself ({:?}): {e}",
                asked.elapsed()
            )
        });
    let mut seen = readers(&redlock, "shelf").await;
    seen.sort();
    let mut both = vec![first.token().to_owned(), second.token().to_owned()];
    both.sort();
    assert_eq!(seen, both);
    assert!(!waiting.is_finished(), "the writer got in under readers");
    first.release().await.unwrap();
    second.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the writer was not let in once the reads ended")
        .unwrap()
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
    let c = servers(5);
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
    let c = servers(5);
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
    let c = servers(5);
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
    // Another process's reader (this task's would go in: it reads the
    // name already).
    let other = common::redlock(&c);
    let err = read(&other, "page").await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    // The writer stops waiting (its call dropped): it leaves the queues,
    // in the background, and its intent with them.
    waiting.abort();
    let start = Instant::now();
    loop {
        match read(&other, "page").await {
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
    let c = servers(5);
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
    let c = servers(5);
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

/// A writer's name in the queues, of nobody: an intent that turns readers
/// away on one node.
const GHOST_WAITER: &str = "0000000000000001:ab:1";

fn exists(c: &LocalServers, i: usize, key: &str) -> bool {
    holders(c, &[i], key) == 1
}

/// How many scripts node `i` has run.
fn script_calls(c: &LocalServers, i: usize) -> u64 {
    command_stat(c, i, "evalsha", "calls") + command_stat(c, i, "eval", "calls")
}

/// Polls (bounded) until `key` exists on node `i`.
async fn until_exists(c: &LocalServers, i: usize, key: &str) {
    let start = Instant::now();
    while !exists(c, i, key) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{key} never on node {i}"
        );
        tokio::time::sleep(ms(2)).await;
    }
}

/// Liveness: failed reads whose rollbacks free the key wake the writer.
/// Two reads that fail (each refused, by answers, on a majority:
/// a writer's intent on one node, another writer's key on node 2), whose
/// shares are on nodes 0 and 1 at the same moment: a writer then sees
/// `readers` on a majority, queues there and sleeps until the readers'
/// keys would expire (10 s). The failed reads' rollbacks free nodes 0 and
/// 1; unless they announce it, the writer sleeps on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_reads_that_free_the_key_wake_the_writer_they_turned_away() {
    // One-way delay of the readers' traffic: each share lives on its node
    // from the attempt's arrival until the rollback's, 2 D later.
    const D: Duration = Duration::from_millis(600);
    let c = servers(3);
    let name = "ledger";
    let k = key(name);
    let intent = format!("{k}:intent");
    let (p1, p2) = (in_front_of(&c), in_front_of(&c));
    let reader = |p: &[Proxy]| {
        Redlock::builder()
            .nodes(p.iter().map(Proxy::url))
            .node_timeout(Duration::from_secs(3))
            .retry_count(0)
            .build()
            .unwrap()
    };
    let (r1, r2) = (reader(&p1), reader(&p2));
    // Connected, scripts loaded, before the delay.
    for r in [&r1, &r2] {
        r.lock("warm-read", Duration::from_secs(10))
            .shared()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    for p in p1.iter().chain(&p2) {
        p.set_delay(D);
    }
    let writer = builder(&c)
        .retry_count(100)
        .retry_delay(Duration::from_secs(5))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(25))
        .build()
        .unwrap();
    // Node 2: another writer's key; every reader is refused there.
    run(&c, 2, &["SET", &k, "ghost", "PX", "60000"]);
    // R1: refused on node 1 (an intent), shares on node 0.
    run(&c, 1, &["SET", &intent, GHOST_WAITER, "PX", "60000"]);
    let scripts_on_1 = script_calls(&c, 1);
    let t1 = tokio::spawn(async move {
        let got = r1.lock("ledger", Duration::from_secs(10)).shared().await;
        (got.is_ok(), r1)
    });
    until_exists(&c, 0, &k).await;
    // Not before R1's attempt has run on node 1 too (its requests arrive
    // at about the same time, but not at once on a loaded machine): moved
    // earlier, the intent would let R1 in there, on a majority.
    let start = Instant::now();
    while script_calls(&c, 1) == scripts_on_1 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "R1 never reached node 1"
        );
        tokio::time::sleep(ms(2)).await;
    }
    // R2: the intent moves to node 0; refused there, shares on node 1.
    run(&c, 1, &["DEL", &intent]);
    run(&c, 0, &["SET", &intent, GHOST_WAITER, "PX", "60000"]);
    let t2 = tokio::spawn(async move {
        let got = r2.lock("ledger", Duration::from_secs(10)).shared().await;
        (got.is_ok(), r2)
    });
    until_exists(&c, 1, &k).await;
    let publishes: u64 = (0..3)
        .map(|i| command_stat(&c, i, "publish", "calls"))
        .sum();
    // The writer: refused by `readers` on nodes 0 and 1, and sleeps.
    let start = Instant::now();
    let lock = writer
        .lock(name, Duration::from_secs(10))
        .await
        .expect("the writer");
    let took = start.elapsed();
    let (ok1, _r1) = t1.await.unwrap();
    let (ok2, _r2) = t2.await.unwrap();
    assert!(!ok1 && !ok2, "a read succeeded: the set-up is wrong");
    let published: u64 = (0..3)
        .map(|i| command_stat(&c, i, "publish", "calls"))
        .sum::<u64>()
        - publishes;
    println!("writer got the lock after {took:?}; {published} PUBLISH on the nodes meanwhile");
    // The rollbacks reach nodes 0 and 1 within 2 D of the writer's start.
    assert!(
        took < Duration::from_secs(4),
        "the writer slept {took:?} on a key freed by failed reads' rollbacks"
    );
    lock.release().await.unwrap();
    run(&c, 2, &["DEL", &k]);
}

/// Liveness: a writer's intent does not outlive a partition. A writer that waited for a reader (its intent on every node)
/// gets the lock while node 2 is cut off: its leaving of the queues, its
/// intent with them, is lost there. Once the cut heals, the intent must go
/// within a few seconds, not live out its 11 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_got_the_lock_during_a_partition_leaves_no_intent_after_the_heal() {
    let c = servers(3);
    let proxies = in_front_of(&c);
    let name = "doc";
    let intent = format!("{}:intent", key(name));
    let readers = redlock(&c);
    let reader = readers
        .lock(name, Duration::from_secs(10))
        .shared()
        .await
        .unwrap();
    let writer = Redlock::builder()
        .nodes(proxies.iter().map(Proxy::url))
        .node_timeout(ms(300))
        .retry_count(1_000)
        .wait_timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let waiting =
        tokio::spawn(async move { (writer.lock(name, Duration::from_secs(30)).await, writer) });
    let start = Instant::now();
    while holders(&c, &[0, 1, 2], &intent) < 3 {
        assert!(start.elapsed() < Duration::from_secs(5), "no intent left");
        tokio::time::sleep(ms(10)).await;
    }
    proxies[2].cut();
    reader.release().await.unwrap();
    let (lock, writer) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the writer was not woken")
        .unwrap();
    let lock = lock.expect("the writer");
    assert!(
        exists(&c, 2, &intent),
        "the intent is gone from the cut node already"
    );
    // Cut for long enough that the writer's connections to node 2 are
    // given up (silent for over a second).
    tokio::time::sleep(ms(1_500)).await;
    let left = pttl(&c, 2, &intent);
    assert!(
        left > 5_000,
        "the intent would lapse soon anyway ({left} ms): no test"
    );
    proxies[2].heal();
    let healed = Instant::now();
    while exists(&c, 2, &intent) {
        assert!(
            healed.elapsed() < Duration::from_secs(4),
            "the writer's intent still on node 2 {:?} after the heal ({} ms left of it)",
            healed.elapsed(),
            pttl(&c, 2, &intent)
        );
        tokio::time::sleep(ms(20)).await;
    }
    println!(
        "intent gone from node 2 {:?} after the heal (it had {left} ms left at the heal)",
        healed.elapsed()
    );
    // And a reader gets in on every node once the writer lets go.
    lock.release().await.unwrap();
    let r = readers
        .lock(name, Duration::from_secs(10))
        .shared()
        .await
        .unwrap();
    r.release().await.unwrap();
    assert!(writer.drain(Duration::from_secs(12)).await);
}
