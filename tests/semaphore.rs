//! Semaphores against real nodes: at most k holders, the next woken by any
//! release, callers that disagree on k refused, each permit ending at its
//! own TTL, other kinds kept out — and the trap: holders steered onto the
//! majorities that fool a per-node count of holders.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::proxy::{Proxy, in_front_of, steered};
use common::*;
use redquorum::local_servers::{Reply, command};
use redquorum::{ConfigError, Error, GaveUp, Lock, NodeFailure, Redlock};

const TTL: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn permit(redlock: &Redlock, name: &str, k: u32) -> Result<Lock, Error> {
    redlock.lock(name, TTL).permits(k).await
}

/// k holders at once, the next refused; it waits, and the release of any
/// permit lets it in at once (woken, not at a retry pause). Then every key
/// is gone.
#[tokio::test]
async fn at_most_k_hold_and_a_release_lets_the_next_in() {
    let c = servers(5);
    let redlock = redlock(&c);
    let a = permit(&redlock, "pool", 2).await.unwrap();
    let b = permit(&redlock, "pool", 2).await.unwrap();
    assert_ne!(a.token(), b.token());
    let err = permit(&redlock, "pool", 2).await.unwrap_err();
    assert!(
        matches!(err, Error::NotAcquired { .. }),
        "a third permit of two: {err}"
    );
    let status = redlock.status("pool").await;
    let held = status.permits();
    assert_eq!(held.len(), 2, "{held:?}");
    assert_ne!(held[0].0, held[1].0, "two holders of one slot: {held:?}");
    // A waiter with a retry pause far longer than the test: only a wake-up
    // gets it in quickly.
    let patient = builder(&c)
        .retry_count(u32::MAX)
        .retry_delay(Duration::from_secs(30))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move {
        let asked = Instant::now();
        let lock = patient
            .lock("pool", TTL)
            .permits(2)
            .wait(Duration::from_secs(20))
            .await
            .unwrap();
        (asked.elapsed(), lock, patient)
    });
    tokio::time::sleep(ms(300)).await;
    b.release().await.unwrap();
    let (waited, c_lock, patient) = waiter.await.unwrap();
    assert!(waited < Duration::from_secs(5), "waited {waited:?}");
    assert_eq!(redlock.status("pool").await.permits().len(), 2);
    a.release().await.unwrap();
    c_lock.release().await.unwrap();
    drop(patient);
    await_gone(&c, &ALL, &key("pool"), Duration::from_secs(5)).await;
}

const ALL: [usize; 5] = [0, 1, 2, 3, 4];

/// The number of permits belongs to the semaphore: a caller that asks for
/// another is refused at once, by every node, with what they hold.
#[tokio::test]
async fn callers_that_disagree_on_k_are_refused_at_once() {
    let c = servers(5);
    let redlock = builder(&c).retry_count(100).build().unwrap();
    let held = permit(&redlock, "jobs", 2).await.unwrap();
    let asked = Instant::now();
    let err = permit(&redlock, "jobs", 3).await.unwrap_err();
    assert!(
        asked.elapsed() < Duration::from_secs(2),
        "{:?}",
        asked.elapsed()
    );
    match &err {
        Error::NotAcquired {
            gave_up, report, ..
        } => {
            assert_eq!(*gave_up, GaveUp::Mismatch, "{err}");
            let mismatched = count(report, |f| {
                matches!(f, NodeFailure::PermitsMismatch { permits: 2 })
            });
            assert!(mismatched >= 3, "{err}");
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("semaphore of 2 permits"), "{err}");
    // Nothing changed: the holder still holds, one slot of two taken.
    assert_eq!(redlock.status("jobs").await.permits().len(), 1);
    held.release().await.unwrap();
    // Once every permit is gone, a new number may be set.
    let three = permit(&redlock, "jobs", 3).await.unwrap();
    three.release().await.unwrap();
    // Bad numbers fail before any I/O.
    for k in [0, 1025] {
        let err = permit(&redlock, "jobs", k).await.unwrap_err();
        assert!(
            matches!(err, Error::Config(ConfigError::Permits { .. })),
            "{err}"
        );
    }
    let err = redlock
        .lock("jobs", TTL)
        .permits(2)
        .fenced()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::Combination(_))),
        "{err}"
    );
}

/// An operator sees a semaphore's holders in `status` and clears one
/// permit by its token: the others stay, and the next caller gets the freed
/// one.
#[tokio::test]
async fn status_shows_the_permits_and_release_token_clears_one() {
    let c = servers(5);
    let redlock = redlock(&c);
    let a = permit(&redlock, "ops", 2).await.unwrap();
    let b = permit(&redlock, "ops", 2).await.unwrap();
    let status = redlock.status("ops").await;
    let tokens: Vec<&str> = status.permits().iter().map(|(_, t)| *t).collect();
    assert!(
        tokens.contains(&a.token()) && tokens.contains(&b.token()),
        "{tokens:?}"
    );
    let report = redlock.release_token("ops", b.token()).await.unwrap();
    assert!(report.agreed() >= 3, "{report}");
    let left = redlock.status("ops").await;
    let left: Vec<&str> = left.permits().iter().map(|(_, t)| *t).collect();
    assert_eq!(left, [a.token()]);
    let next = permit(&redlock, "ops", 2).await.unwrap();
    // The cleared holder finds out when it lets go: nothing of it is left.
    assert!(b.release().await.is_err());
    next.release().await.unwrap();
    a.release().await.unwrap();
}

/// A semaphore and a plain lock on one name keep each other out, both ways.
#[tokio::test]
async fn a_semaphore_and_a_mutex_on_one_name_exclude_each_other() {
    let c = servers(5);
    let redlock = redlock(&c);
    let p = permit(&redlock, "shared-name", 3).await.unwrap();
    let err = redlock.try_lock("shared-name", TTL).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    let err = redlock
        .lock("shared-name", TTL)
        .reentrant("job")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    p.release().await.unwrap();
    let m = redlock.try_lock("shared-name", TTL).await.unwrap();
    let err = permit(&redlock, "shared-name", 3).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    m.release().await.unwrap();
}

/// Each permit ends at its own TTL: a holder that vanished without a
/// release frees its slot when its TTL passes, although another holder
/// keeps renewing its own all along (one TTL for the whole set, refreshed
/// by every holder, would keep the vanished one's permit for as long).
#[tokio::test]
async fn a_vanished_holders_permit_ends_at_its_own_ttl() {
    let c = servers(5);
    let redlock = builder(&c)
        .node_timeout(ms(150))
        .retry_count(u32::MAX)
        .build()
        .unwrap();
    let short = ms(800);
    let mut renewing = redlock.lock("quota", short).permits(2).await.unwrap();
    let held = renewing.keep_alive();
    let vanished = redlock.lock("quota", short).permits(2).await.unwrap();
    std::mem::forget(vanished);
    let asked = Instant::now();
    let third = redlock
        .lock("quota", short)
        .permits(2)
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    let waited = asked.elapsed();
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    assert!(!held.is_lost(), "the renewing holder kept its permit");
    third.release().await.unwrap();
    renewing.release().await.unwrap();
}

/// Many callers on a semaphore of three: never more than three inside at
/// once, and all three in use at some point.
#[tokio::test]
async fn many_callers_never_exceed_k() {
    const K: usize = 3;
    let c = servers(5);
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let redlock = builder(&c).retry_count(u32::MAX).build().unwrap();
            let (inside, most) = (inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..6 {
                    let lock = redlock
                        .lock("workers", TTL)
                        .permits(K as u32)
                        .wait(Duration::from_secs(30))
                        .await
                        .unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(ms(20)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    lock.release().await.unwrap();
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= K, "{most} inside a semaphore of {K}");
    assert_eq!(most, K, "never all {K} permits in use");
    await_gone(&c, &ALL, &key("workers"), Duration::from_secs(5)).await;
}

/// The majorities that fool a per-node count with N = 5 and k = 2: no node
/// is in more than two of them.
const MAJORITIES: [[usize; 3]; 3] = [[0, 1, 2], [2, 3, 4], [0, 1, 3]];

/// The trap, steered: three holders, each reaching exactly one of
/// [`MAJORITIES`]. A semaphore of two admits two of them, whatever slots
/// they are given; the negative control below shows that the same steering
/// admits all three under "each node admits at most k".
#[tokio::test]
async fn holders_steered_onto_majorities_that_fool_a_per_node_count_are_still_at_most_k() {
    let c = servers(5);
    let mut held = Vec::new();
    let mut refused = 0;
    let mut all_proxies = Vec::new();
    for majority in MAJORITIES {
        let proxies = in_front_of(&c);
        let client = steered(&proxies, &majority)
            .retry_count(5)
            .retry_delay(ms(20))
            .wait_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        match client.lock("api", TTL).permits(2).await {
            Ok(lock) => {
                // Its grants are where it was steered, and nowhere else.
                held.push((majority, lock, client));
            }
            Err(Error::NotAcquired { .. }) => refused += 1,
            Err(e) => panic!("{e}"),
        }
        all_proxies.push(proxies);
    }
    let admitted: Vec<_> = held.iter().map(|(m, _, _)| *m).collect();
    assert_eq!(held.len(), 2, "admitted on {admitted:?}");
    assert_eq!(refused, 1);
    // The nodes' own view agrees: two holders, in two slots.
    let view = redlock(&c).status("api").await;
    let permits = view.permits();
    assert_eq!(permits.len(), 2, "{permits:?}");
    for (_, lock, _) in held {
        lock.release().await.unwrap();
    }
}

/// The negative control of the trap test: "each node admits at most k
/// holders (a set per node), a holder needs a majority of admissions",
/// steered exactly as above, admits all three holders of a semaphore of
/// two. (Run on the nodes directly: it is the design the crate must not
/// have. A scratch build whose acquisition script counted holders per node
/// failed the test above the same way: see the CHANGELOG.)
#[tokio::test]
async fn negative_control_a_per_node_count_admits_three_of_two() {
    const PER_NODE: &str = "if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 1 end \
         if redis.call('SCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end \
         redis.call('SADD', KEYS[1], ARGV[1]) return 1";
    let c = servers(5);
    let mut admitted = 0;
    for (holder, majority) in MAJORITIES.iter().enumerate() {
        let token = format!("holder-{holder}");
        let yes = majority
            .iter()
            .filter(|&&i| {
                command(c.port(i), &["EVAL", PER_NODE, "1", "counted", &token, "2"]).unwrap()
                    == Reply::Int(1)
            })
            .count();
        if yes >= 3 {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 3,
        "the per-node count admitted {admitted} of a semaphore of 2"
    );
}

/// A full semaphore's waiter sees one holder however the nodes order the
/// permits' expiries (each names the semaphore by who holds which slot,
/// not by the soonest holder): it waits for a release, and its retries are
/// not used up by polling. (Named by their soonest holder, nodes that
/// disagreed made a split vote of it, and a waiter with a few retries gave
/// up within a second.)
#[tokio::test]
async fn a_waiter_on_a_full_semaphore_waits_without_using_up_its_retries() {
    let c = servers(5);
    let redlock = redlock(&c);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(permit(&redlock, "full", 3).await.unwrap());
    }
    await_holders(&c, &ALL, &key("full"), 5, Duration::from_secs(5)).await;
    // Make the nodes disagree on whose permit ends first: slot 0's on
    // nodes 0 and 1, slot 1's on 2 and 3, slot 2's on 4.
    for (node, soonest) in [0, 0, 1, 1, 2].into_iter().enumerate() {
        let now_ms = node_time_ms(&c, node);
        for slot in 0..3 {
            let ends = now_ms + if slot == soonest { 9_000 } else { 9_600 };
            let field = format!("x{slot}");
            run(&c, node, &["HSET", &key("full"), &field, &ends.to_string()]);
        }
    }
    let waiting = builder(&c)
        .retry_count(3)
        .retry_delay(ms(20))
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move {
        let asked = Instant::now();
        let lock = waiting
            .lock("full", TTL)
            .permits(3)
            .wait(Duration::from_secs(10))
            .await;
        (asked.elapsed(), lock, waiting)
    });
    tokio::time::sleep(ms(1_500)).await;
    held.pop().unwrap().release().await.unwrap();
    let (waited, lock, _waiting) = waiter.await.unwrap();
    let lock = lock.unwrap();
    assert!(
        waited >= ms(1_400),
        "got a permit of a full semaphore after {waited:?}"
    );
    lock.release().await.unwrap();
    for lock in held {
        lock.release().await.unwrap();
    }
}

/// The one-way delay between a contender and a node of another zone (a
/// round trip costs twice that).
const FAR: Duration = Duration::from_millis(40);

/// How long each contender across zones may wait: the default wait is 10 s,
/// and the contenders in lockstep gave up after all of it.
const ACROSS_ZONES_WAIT: Duration = Duration::from_secs(8);

/// Races run in a row: a load that happens to set the contenders apart can
/// spare one race the lockstep, hardly all of them.
const RACES: usize = 3;

/// Three contenders across zones: contender `i` reaches node `i` directly
/// (through a proxy without delay) and the two other nodes [`FAR`] away,
/// each through a proxy of its own. Default options, but for a node timeout
/// that a far node's round trip fits in on a loaded machine.
fn across_zones(c: &redquorum::local_servers::LocalServers) -> (Vec<Redlock>, Vec<Proxy>) {
    let mut all = Vec::new();
    let clients = (0..c.len())
        .map(|home| {
            let proxies = in_front_of(c);
            for (i, proxy) in proxies.iter().enumerate() {
                if i != home {
                    proxy.set_delay(FAR);
                }
            }
            let client = Redlock::builder()
                .nodes(proxies.iter().map(Proxy::url))
                .node_timeout(ms(500))
                .build()
                .unwrap();
            all.extend(proxies);
            client
        })
        .collect();
    (clients, all)
}

/// Connects every client, and loads the scripts, before the races.
async fn warm_all(clients: &[Redlock]) {
    for client in clients {
        let lock = client.lock("warm-permits", TTL).permits(1).await.unwrap();
        lock.release().await.unwrap();
        warm(client).await;
    }
}

/// Every contender asks for `name` at the same instant (a semaphore of
/// `permits`, or the plain lock), holds it for a moment and lets go: how
/// long each took to get it, or its error.
async fn contend(
    clients: &[Redlock],
    name: &str,
    permits: Option<u32>,
) -> Vec<Result<Duration, Error>> {
    let start = Arc::new(tokio::sync::Barrier::new(clients.len()));
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|client| {
            let (start, name) = (start.clone(), name.to_owned());
            tokio::spawn(async move {
                start.wait().await;
                let asked = Instant::now();
                let call = client.lock(&name, TTL).wait(ACROSS_ZONES_WAIT);
                let lock = match permits {
                    Some(k) => call.permits(k).await,
                    None => call.await,
                }?;
                let took = asked.elapsed();
                tokio::time::sleep(ms(50)).await;
                lock.release().await?;
                Ok(took)
            })
        })
        .collect();
    let mut took = Vec::new();
    for task in tasks {
        took.push(task.await.unwrap());
    }
    took
}

/// Asserts that every contender of `RACES` races got in, showing the times.
async fn all_get_in(clients: &[Redlock], what: &str, name: &str, permits: Option<u32>) {
    for race in 1..=RACES {
        let took = contend(clients, name, permits).await;
        all_got_in(&format!("{what}, race {race}"), &took);
    }
}

fn all_got_in(what: &str, took: &[Result<Duration, Error>]) {
    let shown: Vec<String> = took
        .iter()
        .map(|t| match t {
            Ok(d) => format!("{d:?}"),
            Err(e) => format!("{e}"),
        })
        .collect();
    println!("across zones, {what}: {shown:?}");
    for t in took {
        assert!(t.is_ok(), "{what}: {shown:#?}");
    }
}

/// Semaphore contenders across zones are contenders, not a holder: each
/// takes its own node's slot first and finds the far nodes full, the
/// others' slots there. Named as one holder (`permits:1` on every node)
/// they looked like a holder on a majority to each of them, slept exactly
/// the capped 2 s, woke together and split again, until all three gave up
/// after their whole wait. Now they back off at random, as a plain mutex's
/// contenders do, and each gets in (the mutex's times are printed beside).
#[tokio::test]
async fn semaphore_contenders_across_zones_each_get_in() {
    let c = servers(3);
    let (clients, _proxies) = across_zones(&c);
    warm_all(&clients).await;
    all_get_in(&clients, "mutex", "zones-mutex", None).await;
    all_get_in(&clients, "semaphore of 1", "zones-one", Some(1)).await;
}

/// The same contenders for the free permit of a semaphore of two whose
/// other permit is held all along: each gets the free one in turn (before,
/// none did in 9.5 s: each saw the held permit and the others' contending
/// grants as `permits:2` on a majority).
#[tokio::test]
async fn the_free_permit_is_taken_across_zones_while_the_other_is_held() {
    let c = servers(3);
    let (clients, _proxies) = across_zones(&c);
    let mut kept = redlock(&c).lock("zones-two", TTL).permits(2).await.unwrap();
    let held = kept.keep_alive();
    warm_all(&clients).await;
    all_get_in(&clients, "semaphore of 2, one held", "zones-two", Some(2)).await;
    assert!(!held.is_lost());
    kept.release().await.unwrap();
}

/// A release that reaches one node before the others: its wake-up from
/// that node brings the first waiter in at once, while the other nodes
/// still count the releasing holder, so the waiter's attempt is refused
/// there and it sleeps on the holder it saw (a semaphore's holders are
/// named by a digest, `permits:<k>:…`, never by the token whose release
/// was announced). The release then reaches the other nodes, which take
/// the waiter out of their queues and wake it again: that later copy of
/// the same wake-up must wake it again. Taken for a copy of the first one
/// and ignored, it left the waiter out of every queue, asleep on the
/// released holder's PTTL while the permit stayed free (`long_retry` in
/// the chaos suite: 1.4 to 5.8 s of idle capacity in every run; here the
/// whole TTL).
#[tokio::test]
async fn a_release_that_reaches_the_nodes_one_by_one_still_lets_the_waiter_in() {
    let c = servers(3);
    // The other permit of two, held throughout: the waiter waits for the
    // second one.
    let mut kept = redlock(&c).lock("staggered", TTL).permits(2).await.unwrap();
    let held = kept.keep_alive();
    // The holder reaches node 0 directly and nodes 1 and 2 through proxies.
    let proxies = in_front_of(&c);
    let urls: Vec<String> = (0..3)
        .map(|i| {
            if i == 0 {
                c.urls()[0].clone()
            } else {
                proxies[i].url()
            }
        })
        .collect();
    let holder = Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(3))
        .build()
        .unwrap();
    let lock = permit(&holder, "staggered", 2).await.unwrap();
    // A waiter that retries far less often than the test lasts: only
    // wake-ups bring it in.
    let patient = builder(&c)
        .retry_count(u32::MAX)
        .retry_delay(Duration::from_secs(2))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    let waiter = tokio::spawn(async move {
        let lock = patient
            .lock("staggered", TTL)
            .permits(2)
            .wait(Duration::from_secs(20))
            .await;
        (Instant::now(), lock, patient)
    });
    // Queued on every node, asleep on the holders it saw.
    tokio::time::sleep(ms(500)).await;
    assert!(!waiter.is_finished(), "got a permit of a full semaphore");
    // The release reaches node 0 at once and the others 400 ms later.
    proxies[1].set_delay(ms(400));
    proxies[2].set_delay(ms(400));
    let released = Instant::now();
    lock.release().await.unwrap();
    let (got, lock, _patient) = waiter.await.unwrap();
    let lock = lock.unwrap();
    let waited = got.duration_since(released);
    assert!(
        waited < Duration::from_secs(3),
        "the waiter got the free permit {waited:?} after the release"
    );
    lock.release().await.unwrap();
    assert!(!held.is_lost());
    kept.release().await.unwrap();
}
