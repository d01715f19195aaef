//! Leader election against real nodes: one leader at a time, named by a
//! majority, with terms that grow; a resignation wakes the next candidate;
//! a paused leader finds it lost before it acts; observers see every
//! change, pushed or polled.

mod common;

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use common::*;
use redquorum::{
    ConfigError, Error, Holding, Leader, MAX_LEADER_VALUE, Observed, Observer, Redlock,
};

const TTL: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The next item of an observer, within `limit`.
async fn next(observer: &mut Observer, limit: Duration) -> Observed {
    tokio::time::timeout(limit, observer.next())
        .await
        .expect("no change observed in time")
        .expect("the stream ended")
}

/// The next item of an observer, within `limit`, which must be a leader.
async fn next_leader(observer: &mut Observer, limit: Duration) -> Leader {
    match next(observer, limit).await {
        Observed::Leader(l) => l,
        other => panic!("not a leader: {other:?}"),
    }
}

#[tokio::test]
async fn a_free_election_is_won_named_by_a_majority_and_handed_on_at_a_resignation() {
    let c = servers(5);
    let redlock = redlock(&c);
    assert_eq!(redlock.leader("sched").await.unwrap(), None);
    let a = redlock
        .campaign("sched", "host-a", TTL)
        .value("10.0.0.1:80")
        .await
        .unwrap();
    assert!(a.term() > 0);
    assert!(!a.is_lost());
    let seen = redlock.leader("sched").await.unwrap().expect("a leader");
    assert_eq!(seen.identity, "host-a");
    assert_eq!(seen.value, "10.0.0.1:80");
    assert_eq!(seen.term, a.term());
    assert!(seen.expires_in > Duration::ZERO && seen.expires_in <= TTL);
    // The record is on a majority when the campaign returns (its second
    // round is counted there; a node slower than the node timeout, on a
    // loaded machine, may get neither key nor record).
    let record = "redquorum:sched:leader";
    assert!(
        holders(&c, &[0, 1, 2, 3, 4], record) >= 3,
        "the record is on no majority"
    );
    // A second candidate waits in the queue; a resignation wakes it, long
    // before the TTL would have.
    let other = common::redlock(&c);
    let b = tokio::spawn(async move {
        let b = other.campaign("sched", "host-b", TTL).await.unwrap();
        (b, other)
    });
    tokio::time::sleep(ms(300)).await;
    assert!(!b.is_finished(), "two leaders at once");
    let a_term = a.term();
    let asked = Instant::now();
    a.resign().await.unwrap();
    let (b, other) = tokio::time::timeout(Duration::from_secs(10), b)
        .await
        .expect("the next candidate was not woken by the resignation")
        .unwrap();
    println!("handed on in {:?}", asked.elapsed());
    assert!(
        b.term() > a_term,
        "terms must grow: {} then {}",
        a_term,
        b.term()
    );
    let seen = other.leader("sched").await.unwrap().expect("a leader");
    assert_eq!(
        (seen.identity.as_str(), seen.value.as_str()),
        ("host-b", "")
    );
    assert_eq!(seen.term, b.term());
    b.resign().await.unwrap();
    await_gone(&c, &[0, 1, 2, 3, 4], record, Duration::from_secs(5)).await;
    assert_eq!(redlock.leader("sched").await.unwrap(), None);
}

#[tokio::test]
async fn a_proclamation_is_seen_while_leading_and_refused_once_lost() {
    let c = servers(5);
    let redlock = redlock(&c);
    // Renewed every second.
    let ttl = Duration::from_secs(3);
    let mut a = redlock.campaign("cfg", "a", ttl).value("v0").await.unwrap();
    a.proclaim("v1").await.unwrap();
    let seen = redlock.leader("cfg").await.unwrap().unwrap();
    assert_eq!((seen.value.as_str(), seen.proclamation), ("v1", 1));
    assert_eq!(a.value(), "v1");
    let err = a
        .proclaim("x".repeat(MAX_LEADER_VALUE + 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::ValueTooLong { .. })),
        "{err}"
    );
    // An operator clears the leader's key: a proclamation is refused, and
    // the next renewal finds the key gone: leadership is lost.
    let Some(Holding::Token(token)) = redlock.status("cfg").await.holder().cloned() else {
        panic!("the leader's key is a token");
    };
    redlock.release_token("cfg", &token).await.unwrap();
    let err = a.proclaim("v2").await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    tokio::time::timeout(ttl, a.lost())
        .await
        .expect("the renewal did not find leadership lost");
    assert!(a.is_lost());
    let err = a.proclaim("v3").await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
    assert_eq!(redlock.leader("cfg").await.unwrap(), None);
    // Bad candidates fail before any I/O.
    let err = redlock.campaign("cfg", "", TTL).await.unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::EmptyCandidate)),
        "{err}"
    );
}

/// A task that holds a read lock on a name and campaigns on it would wait
/// for its own reader for ever (a campaign waits for ever by default),
/// its writer's intent, renewed by every attempt, turning every other
/// process's readers away meanwhile. It is refused at once, nothing sent;
/// another process still reads.
#[tokio::test]
async fn a_campaign_from_a_task_that_reads_the_name_is_refused_at_once() {
    let c = servers(5);
    let redlock = redlock(&c);
    let read = redlock.lock("sched", TTL).shared().await.unwrap();
    let asked = redlock.campaign("sched", "host-a", TTL).into_future();
    let err = match tokio::time::timeout(Duration::from_secs(5), asked).await {
        Ok(Ok(l)) => panic!("led under its own reader: {l:?}"),
        Ok(Err(e)) => e,
        Err(_) => panic!("the campaign waited for its own reader"),
    };
    match &err {
        Error::Upgrade { resource } => assert_eq!(resource, "sched"),
        e => panic!("not refused as an upgrade: {e}"),
    }
    // No intent left behind: another process's reader gets in.
    let intent = "redquorum:sched:intent";
    assert_eq!(holders(&c, &[0, 1, 2, 3, 4], intent), 0, "an intent left");
    let other = common::redlock(&c);
    other
        .lock("sched", TTL)
        .shared()
        .await
        .expect("another process's reader turned away")
        .release()
        .await
        .unwrap();
    // Once the read lock is released, the task may campaign.
    read.release().await.unwrap();
    let a = tokio::time::timeout(
        Duration::from_secs(10),
        redlock.campaign("sched", "host-a", TTL).into_future(),
    )
    .await
    .expect("the campaign after the read waited")
    .unwrap();
    a.resign().await.unwrap();
}

/// The leader's process pauses (a thread of its own that sleeps: its
/// runtime renews nothing, as under SIGSTOP) past its TTL. Another
/// candidate is elected with a greater term once the key expires, an
/// observer that polls sees the old leader go (nothing is published at an
/// expiry) and the new one come, and the paused leader, when it wakes,
/// finds it lost before it acts.
#[tokio::test]
async fn a_paused_leader_is_replaced_and_finds_it_lost_before_it_acts() {
    let c = servers(5);
    let short = ms(1_500);
    let urls = c.urls();
    let (elected, told) = std::sync::mpsc::channel();
    let paused = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let redlock = Redlock::builder()
            .nodes(urls)
            .node_timeout(ms(200))
            .build()
            .unwrap();
        let leadership = rt
            .block_on(redlock.campaign("job", "paused", short).into_future())
            .unwrap();
        elected.send(leadership.term()).unwrap();
        // The pause: nothing of this runtime runs.
        std::thread::sleep(short * 3);
        // Awake: the first thing a leader does before acting.
        let lost = leadership.is_lost();
        rt.block_on(async {
            drop(leadership);
            redlock.drain(Duration::from_secs(5)).await;
        });
        lost
    });
    let paused_term = told.recv().unwrap();
    let redlock = short_ttl(&c);
    let mut observer = redlock.observe("job").every(ms(100));
    let first = next_leader(&mut observer, Duration::from_secs(5)).await;
    assert_eq!(first.identity, "paused");
    let b = redlock
        .campaign("job", "next", short)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    assert!(b.term() > paused_term);
    // The observer saw the key expire (polled: no message) and the next.
    let mut changes = Vec::new();
    while changes.last().and_then(Observed::leader).map(|l| l.term) != Some(b.term()) {
        changes.push(next(&mut observer, Duration::from_secs(5)).await);
    }
    println!("observed after the pause: {changes:?}");
    // (Joined off this runtime's thread: `b` renews on it meanwhile.)
    let lost = tokio::task::spawn_blocking(move || paused.join().unwrap())
        .await
        .unwrap();
    assert!(lost, "the paused leader did not find it had lost");
    b.resign().await.unwrap();
}

#[tokio::test]
async fn an_observer_sees_every_change_pushed() {
    let c = servers(5);
    let redlock = redlock(&c);
    // Polled only every minute: what it sees in time was pushed.
    let mut observer = redlock.observe("push").every(Duration::from_secs(60));
    let five = Duration::from_secs(5);
    assert_eq!(next(&mut observer, five).await, Observed::Vacant);
    let mut a = redlock.campaign("push", "a", TTL).await.unwrap();
    let seen = next_leader(&mut observer, five).await;
    assert_eq!((seen.identity.as_str(), seen.term), ("a", a.term()));
    a.proclaim("new").await.unwrap();
    let seen = next_leader(&mut observer, five).await;
    assert_eq!((seen.value.as_str(), seen.proclamation), ("new", 1));
    let a_term = a.term();
    a.resign().await.unwrap();
    assert_eq!(next(&mut observer, five).await, Observed::Vacant);
    let b = redlock.campaign("push", "b", TTL).await.unwrap();
    let seen = next_leader(&mut observer, five).await;
    assert_eq!(seen.identity, "b");
    assert!(seen.term > a_term);
    b.resign().await.unwrap();
}

/// A read the nodes cannot agree on is an error that says what each
/// showed, never a leader: three nodes of five frozen (the other two hold
/// the leader's key and record, a minority).
#[tokio::test]
async fn a_read_without_a_majority_names_nobody() {
    let mut c = servers(5);
    let redlock = redlock(&c);
    let a = redlock.campaign("split", "a", TTL).await.unwrap();
    c.freeze(0);
    c.freeze(1);
    c.freeze(2);
    let err = redlock.leader("split").await.unwrap_err();
    let Error::NoQuorum { report, .. } = &err else {
        panic!("{err}");
    };
    assert!(report.agreed() < 3, "{err}");
    for i in 0..3 {
        c.thaw(i);
    }
    assert_eq!(
        redlock.leader("split").await.unwrap().map(|l| l.term),
        Some(a.term())
    );
    a.resign().await.unwrap();
}

/// Nodes restarted empty answer "free", and a majority of them would say
/// nobody leads while the leader is still valid: the client that saw them
/// before the restart (the leader's own) discounts them, as its restart
/// guard does for acquisitions, and the read names nobody either way.
#[tokio::test]
async fn nodes_restarted_empty_are_not_taken_for_no_leader() {
    let mut c = servers(5);
    let redlock = redlock(&c);
    let a = redlock.campaign("boot", "a", TTL).await.unwrap();
    for i in 0..3 {
        c.restart(i).unwrap();
    }
    assert!(!a.is_lost());
    match redlock.leader("boot").await {
        Err(Error::NoQuorum { report, .. }) => {
            let restarted = report
                .failures()
                .iter()
                .filter(|(_, f)| matches!(f, redquorum::NodeFailure::Restarted { .. }))
                .count();
            assert_eq!(restarted, 3, "{report:?}");
        }
        other => panic!("the restarted nodes' word was taken: {other:?}"),
    }
    drop(a);
}

/// Twenty leaderships back to back (each campaign resigns at once): an
/// observer yields every one of them, in term order, none skipped. (Before
/// the nodes kept a history, its reads after each notification merged the
/// short leaderships away: it yielded 9 of 20, and then only "no leader".)
#[tokio::test]
async fn an_observer_yields_every_leadership_back_to_back() {
    let c = servers(5);
    let redlock = redlock(&c);
    let mut observer = redlock.observe("relay");
    assert_eq!(
        next(&mut observer, Duration::from_secs(5)).await,
        Observed::Vacant
    );
    let mut terms = Vec::new();
    for i in 0..20 {
        let l = redlock
            .campaign("relay", format!("c{i}"), TTL)
            .await
            .unwrap();
        terms.push((l.term(), format!("c{i}")));
        l.resign().await.unwrap();
    }
    let last = terms.last().unwrap().0;
    let mut seen = Vec::new();
    let start = Instant::now();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), observer.next())
            .await
            .unwrap_or_else(|_| panic!("no item in 10 s; saw {seen:?} of {terms:?}"))
            .unwrap();
        match item {
            Observed::Leader(l) => {
                seen.push((l.term, l.identity));
                if l.term >= last {
                    break;
                }
            }
            Observed::Vacant => {}
            skipped => panic!("{skipped:?} on a healthy servers; saw {seen:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(30), "{seen:?}");
    }
    assert_eq!(seen, terms, "leaderships missed");
    // And then no leader.
    assert_eq!(
        next(&mut observer, Duration::from_secs(5)).await,
        Observed::Vacant
    );
}

/// An observer whose consumer falls behind (it reads nothing while a
/// hundred leaderships come and go: the stream buffers 16 items, and the
/// nodes' histories keep the latest 32) cannot yield them all, and says
/// which it could not: every leadership is yielded, in term order, or lies
/// inside a `Skipped` range, which the leadership it names comes after.
#[tokio::test]
async fn an_observer_that_falls_behind_says_which_leaderships_it_skipped() {
    let c = servers(3);
    let redlock = redlock(&c);
    let mut observer = redlock.observe("lagging");
    assert_eq!(
        next(&mut observer, Duration::from_secs(5)).await,
        Observed::Vacant
    );
    let mut terms = Vec::new();
    for i in 0..100 {
        let l = redlock
            .campaign("lagging", format!("c{i}"), TTL)
            .await
            .unwrap();
        terms.push(l.term());
        l.resign().await.unwrap();
    }
    let last = *terms.last().unwrap();
    let mut items = Vec::new();
    let start = Instant::now();
    while items.last().and_then(Observed::leader).map(|l| l.term) != Some(last) {
        assert!(start.elapsed() < Duration::from_secs(30), "{items:?}");
        items.push(next(&mut observer, Duration::from_secs(10)).await);
    }
    let mut yielded = Vec::new();
    let mut skips = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            Observed::Leader(l) => yielded.push(l.term),
            Observed::Skipped { after, before } => {
                skips.push((*after, *before));
                assert_eq!(
                    items.get(i + 1).and_then(Observed::leader).map(|l| l.term),
                    Some(*before),
                    "a skip is followed by the leadership it names"
                );
            }
            _ => {}
        }
    }
    assert!(yielded.windows(2).all(|w| w[0] < w[1]), "{yielded:?}");
    assert!(yielded.iter().all(|t| terms.contains(t)), "{yielded:?}");
    let unaccounted: Vec<u64> = terms
        .iter()
        .copied()
        .filter(|t| !yielded.contains(t) && !skips.iter().any(|&(a, b)| a < *t && *t < b))
        .collect();
    assert!(
        unaccounted.is_empty(),
        "missed without a word: {unaccounted:?}"
    );
    assert!(!skips.is_empty(), "100 leaderships unread, none skipped?");
    println!(
        "{} of {} leaderships yielded; skipped: {skips:?}",
        yielded.len(),
        terms.len()
    );
}
