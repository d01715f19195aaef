//! Sentinel-managed nodes against real processes (`local_sentinel`: per
//! node a primary and a replica, three sentinels): lock, extend and
//! release; a failover while a lock is held, which the restart guard
//! quarantines (and an unguarded client shows what it guards against);
//! waiters whose subscriptions follow the primaries; the typed failures of
//! an unknown master name, unreachable sentinels and a named server that is
//! not a master; bad URLs; no password in any output.
#![cfg(feature = "sentinel")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::time::{Duration, Instant};

use common::warm;
use redquorum::local_sentinel::LocalSentinels;
use redquorum::local_servers::{Reply, answering_pid, command, declare_born_empty};
use redquorum::{ConfigError, Error, NodeFailure, Redlock};

/// Generous, as in the other suites: a loaded machine never misses it.
const NODE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// The bound on each wait of these tests.
const BOUND: Duration = Duration::from_secs(20);

fn sentinels(n: usize) -> LocalSentinels {
    LocalSentinels::start(n).unwrap_or_else(|e| panic!("cannot start Sentinel-managed nodes: {e}"))
}

fn builder(s: &LocalSentinels) -> redquorum::Builder {
    Redlock::builder()
        .nodes(s.urls())
        .node_timeout(NODE_TIMEOUT)
        .retry_count(0)
}

fn key(resource: &str) -> String {
    format!("redquorum:{resource}")
}

/// The value of `key` on the server on `port`.
fn get(port: u16, key: &str) -> Option<Vec<u8>> {
    match command(port, &["GET", key]).expect("GET") {
        Reply::Bulk(v) => v,
        other => panic!("GET {key} on {port}: {other:?}"),
    }
}

/// Waits until `done` holds, for at most [`BOUND`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < BOUND, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The failures of `err`'s report that match `pred`, by node name.
fn failed(err: &Error, pred: impl Fn(&NodeFailure) -> bool) -> Vec<String> {
    let report = err.report().expect("a report");
    report
        .failures()
        .iter()
        .filter(|(_, f)| pred(f))
        .map(|(node, _)| node.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_extend_release_over_three_sentinel_nodes() {
    let s = sentinels(3);
    let redlock = builder(&s).build().unwrap();
    assert_eq!(redlock.quorum(), 2);
    let mut lock = redlock.lock("a", Duration::from_secs(10)).await.unwrap();
    let token = lock.token().as_bytes().to_vec();
    // On every node's primary (the third may be written after the first
    // two decided), and replicated to its replica.
    for i in 0..3 {
        let primary = s.primary(i).unwrap();
        eventually("the key on the primary", || {
            get(primary, &key("a")).is_some()
        })
        .await;
        assert_eq!(get(primary, &key("a")).as_deref(), Some(&token[..]));
        let replica = s
            .server_ports(i)
            .into_iter()
            .find(|&p| p != primary)
            .unwrap();
        eventually("the key replicated", || get(replica, &key("a")).is_some()).await;
    }
    // Held: another acquisition is refused by every node.
    let err = redlock
        .try_lock("a", Duration::from_secs(10))
        .await
        .unwrap_err();
    // Two say so (the third is not waited for once two have).
    assert!(
        failed(&err, |f| *f == NodeFailure::Contended).len() >= 2,
        "{err}"
    );
    lock.extend(Duration::from_secs(20)).await.unwrap();
    assert!(lock.remaining() > Duration::from_secs(10));
    lock.release().await.unwrap();
    // A release returns once a majority answered: the third may follow.
    for i in 0..3 {
        let primary = s.primary(i).unwrap();
        eventually("the key released", || get(primary, &key("a")).is_none()).await;
    }
    redlock
        .try_lock("a", Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Node 0 fails over to a replica that lacks the lock's key (deleted there
/// before the failover: a write replication had not copied), and node 1's
/// primary restarts empty. While the first holder is valid, a guarded
/// client is refused by both (`Restarted`) and gets no lock; an unguarded
/// one takes the lock a second time — what the guard is for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_while_held_is_quarantined_and_grants_no_second_holder() {
    let mut s = sentinels(3);
    let holder = builder(&s).build().unwrap();
    let guarded = builder(&s).build().unwrap();
    let unguarded = builder(&s).restart_guard(false).build().unwrap();
    for r in [&holder, &guarded, &unguarded] {
        warm(r).await;
    }
    let ttl = Duration::from_secs(30);
    let mut lock = holder.lock("a", ttl).await.unwrap();
    // The guarded client holds a lock of the same TTL too, released after
    // the failover: that release, not an acquisition, makes its new
    // connections, so that the quarantine they start is the guard's term
    // for the others' keys (the longest TTL, from the moment it sees the
    // new server, and the re-check margin), not its own key's.
    let earlier = guarded.lock("g", ttl).await.unwrap();

    // Node 0: its replica forgets the key, then is promoted.
    let old0 = s.primary(0).unwrap();
    let replica0 = s.server_ports(0).into_iter().find(|&p| p != old0).unwrap();
    eventually("the key replicated", || get(replica0, &key("a")).is_some()).await;
    command(replica0, &["CONFIG", "SET", "replica-read-only", "no"]).unwrap();
    assert_eq!(
        command(replica0, &["DEL", &key("a")]).unwrap(),
        Reply::Int(1)
    );
    let new0 = s.failover(0).unwrap();
    assert_eq!(new0, replica0);
    assert_eq!(get(new0, &key("a")), None);
    // Node 1: its primary restarts empty, before the sentinels see it down.
    let p1 = s.primary(1).unwrap();
    s.restart_server(p1).unwrap();
    assert_eq!(get(p1, &key("a")), None);
    // The sentinels demote node 0's old primary, closing its clients'
    // connections: the next ones resolve the new primary.
    s.wait_for_replica(old0).unwrap();

    let _ = earlier.release().await;
    let names = [s.name(0), s.name(1)];
    let start = Instant::now();
    let err = loop {
        // A short TTL: were the guard to count only this client's own keys,
        // its one from `earlier` (taken seconds before the failover) would
        // be all that keeps the node out.
        let err = guarded
            .try_lock("a", Duration::from_secs(2))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
        let restarted = failed(&err, |f| matches!(f, NodeFailure::Restarted { .. }));
        if restarted == names {
            break err;
        }
        assert!(start.elapsed() < BOUND, "no quarantine seen: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Counted from when the guard saw the new server (at the release or
    // after): the whole TTL and the margin (a re-check, two sentinel
    // queries, a request: some 6 s here), less the time since.
    // Not the promoted replica's uptime (seconds), nor the client's own
    // key (taken before the failover).
    for (_, failure) in err.report().unwrap().failures() {
        if let NodeFailure::Restarted { remaining } = failure {
            assert!(*remaining > ttl, "{err}");
            assert!(*remaining <= ttl + Duration::from_secs(10), "{err}");
        }
    }
    assert!(lock.remaining() > Duration::ZERO);

    // The unguarded client takes it a second time from the two nodes that
    // forgot it: the danger is real.
    let start = Instant::now();
    let second = loop {
        match unguarded.try_lock("a", ttl).await {
            Ok(second) => break second,
            Err(err) => assert!(start.elapsed() < BOUND, "{err}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        lock.remaining() > Duration::ZERO,
        "the first holder ran out"
    );
    second.release().await.unwrap();

    // The first holder's keys are gone from a majority now (the second
    // holder's release deleted those it wrote): its extension says so
    // rather than report it held.
    let err = lock.extend(ttl).await.unwrap_err();
    assert!(matches!(err, Error::Expired { .. }), "{err}");
}

/// Every node's primary is killed: the sentinels promote the replicas, the
/// waiter's subscriptions, broken, are made again on the new primaries
/// (seen on two of them with `PUBSUB CHANNELS`), and the holder's release there
/// wakes it: it gets the lock sooner than the timer it sleeps on while
/// listening (the holder's remaining TTL, some 50 s, capped at ten retry
/// pauses, 50 s), which only a wake-up can do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_a_release_after_failovers() {
    let mut s = sentinels(3);
    let holder = builder(&s).build().unwrap();
    // The guard would keep the promoted replicas out of its acquisition for
    // the TTL; this test is about the subscriptions.
    let waiter = builder(&s)
        .restart_guard(false)
        .retry_count(100)
        .retry_delay(Duration::from_secs(5))
        .retry_jitter(Duration::ZERO)
        .build()
        .unwrap();
    warm(&holder).await;
    warm(&waiter).await;
    let lock = holder.lock("w", Duration::from_secs(60)).await.unwrap();
    let waiting = tokio::spawn(async move {
        let started = Instant::now();
        let lock = waiter
            .lock("w", Duration::from_secs(10))
            .wait(Duration::from_secs(50))
            .await;
        (lock.map(|l| l.token().to_owned()), started.elapsed())
    });
    let olds: Vec<u16> = (0..3).map(|i| s.primary(i).unwrap()).collect();
    // Subscribed on every primary, and the key on every replica.
    eventually("subscribed on two primaries", || {
        olds.iter().filter(|&&old| subscribed(old)).count() >= 2
    })
    .await;
    for (i, &old) in olds.iter().enumerate() {
        let replica = s.server_ports(i).into_iter().find(|&p| p != old).unwrap();
        eventually("the key replicated", || get(replica, &key("w")).is_some()).await;
    }
    for &old in &olds {
        s.kill_server(old).unwrap();
    }
    let news: Vec<u16> = (0..3)
        .map(|i| s.wait_for_new_primary(i, olds[i]).unwrap())
        .collect();
    // A waiter listens once it is subscribed on N − Q + 1 nodes (two of
    // three): the old primaries are dead, so these are subscriptions made
    // anew on the promoted replicas.
    eventually("subscribed again on two new primaries", || {
        news.iter().filter(|&&new| subscribed(new)).count() >= 2
    })
    .await;
    lock.release().await.unwrap();
    let (got, _) = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap();
    got.unwrap_or_else(|e| panic!("{e}"));
}

/// The error of an acquisition on the one node `url`, once its connection
/// was waited for (the first attempt may not wait for it), as text and
/// the node's failure.
async fn failure_of(url: &str) -> (String, NodeFailure) {
    let redlock = Redlock::builder()
        .node(url)
        .node_timeout(NODE_TIMEOUT)
        .retry_count(0)
        .build()
        .unwrap();
    let start = Instant::now();
    loop {
        let err = redlock
            .try_lock("t", Duration::from_secs(10))
            .await
            .unwrap_err();
        let failure = err.report().unwrap().failures()[0].1.clone();
        if !matches!(failure, NodeFailure::Timeout | NodeFailure::NotWaited) {
            return (err.to_string(), failure);
        }
        assert!(start.elapsed() < BOUND, "{err}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the server on `port` has a subscriber on a lock's wake-up
/// channel.
fn subscribed(port: u16) -> bool {
    matches!(
        command(port, &["PUBSUB", "CHANNELS", "redquorum:*"]),
        Ok(Reply::Array(Some(channels))) if !channels.is_empty()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_masters_unreachable_sentinels_and_replicas_are_told_apart() {
    let s = sentinels(1);
    let sentinels = s.sentinel_addresses().join(",");
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead = nobody.local_addr().unwrap().port();
    drop(nobody);
    // One sentinel told to monitor node 0's replica as a master, alone
    // (quorum 2: it cannot fail it over).
    let primary = s.primary(0).unwrap();
    let replica = s
        .server_ports(0)
        .into_iter()
        .find(|&p| p != primary)
        .unwrap();
    let lone = s.sentinel_ports()[0];
    let monitored = command(
        lone,
        &[
            "SENTINEL",
            "MONITOR",
            "stale",
            "127.0.0.1",
            &replica.to_string(),
            "2",
        ],
    )
    .unwrap();
    assert_eq!(monitored, Reply::Status("OK".into()));
    let unknown = failure_of(&format!("redis+sentinel://{sentinels}/no-such-master")).await;
    assert!(
        matches!(&unknown.1, NodeFailure::UnknownMaster { master } if master == "no-such-master"),
        "{}",
        unknown.0
    );
    assert!(
        unknown.0.contains("no master named \"no-such-master\""),
        "{}",
        unknown.0
    );
    let unreachable = failure_of(&format!("redis+sentinel://127.0.0.1:{dead}/redquorum-0")).await;
    assert!(
        matches!(&unreachable.1, NodeFailure::SentinelsUnreachable(_)),
        "{}",
        unreachable.0
    );
    assert!(
        unreachable
            .0
            .contains("no sentinel of the node could be asked"),
        "{}",
        unreachable.0
    );
    let stale = failure_of(&format!("redis+sentinel://127.0.0.1:{lone}/stale")).await;
    assert!(
        matches!(&stale.1, NodeFailure::NotPrimary { role, .. } if role == "slave"),
        "{}",
        stale.0
    );
    assert!(stale.0.contains("it says it is a slave"), "{}", stale.0);
    // Nothing was written on the replica.
    assert_eq!(get(replica, &key("t")), None);
    // The right name still works beside them.
    let ok = Redlock::builder()
        .node(s.url(0))
        .node_timeout(NODE_TIMEOUT)
        .build()
        .unwrap();
    ok.lock("t", Duration::from_secs(10))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _ = command(lone, &["SENTINEL", "REMOVE", "stale"]);
}

#[test]
fn dropping_the_set_stops_every_process() {
    let s = sentinels(2);
    let ports: Vec<u16> = s
        .sentinel_ports()
        .into_iter()
        .chain((0..2).flat_map(|i| s.server_ports(i)))
        .collect();
    assert_eq!(ports.len(), 7);
    for &port in &ports {
        assert!(answering_pid(port).is_some(), "{port}");
    }
    drop(s);
    for &port in &ports {
        assert_eq!(answering_pid(port), None, "{port} still answers");
    }
}

#[test]
fn bad_urls_are_config_errors_that_say_what_to_fix() {
    for (url, says) in [
        ("redis+sentinel:///mymaster", "no sentinel address"),
        ("redis+sentinel://:s3cret@10.0.0.1:26379", "no master name"),
        (
            "redis+sentinel://10.0.0.1:26379,10.0.0.2:notaport/m",
            "no valid port",
        ),
        ("redis+sentinel://10.0.0.1:70000/m", "no valid port"),
    ] {
        let err = Redlock::builder().node(url).build().unwrap_err();
        let Error::Config(ConfigError::InvalidSentinelUrl { .. }) = &err else {
            panic!("{url}: {err:?}");
        };
        assert!(err.to_string().contains(says), "{err}");
        assert!(!err.to_string().contains("s3cret"), "{err}");
        assert!(!format!("{err:?}").contains("s3cret"), "{err:?}");
    }
    let err = Redlock::builder()
        .node("rediss+sentinel://:s3cret@10.0.0.1/m")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Config(ConfigError::SentinelTlsNotSupported { .. })
        ),
        "{err:?}"
    );
    assert!(!format!("{err} {err:?}").contains("s3cret"));
    let err = Redlock::builder()
        .sentinel_node("m", ["10.0.0.1:1", "10.0.0.2:2"])
        .node("redis+sentinel://10.0.0.2:2,10.0.0.3:3/m")
        .build()
        .unwrap_err();
    assert!(
        matches!(err, Error::Config(ConfigError::DuplicateNode { .. })),
        "{err:?}"
    );
}

/// Wrong credentials for the data nodes and the sentinels: the failures
/// say so, and neither password is shown anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_appear_in_no_error_or_debug_output() {
    let s = sentinels(1);
    let sentinels = s.sentinel_addresses().join(",");
    let builder = Redlock::builder()
        .nodes([
            format!("redis+sentinel://user:s3cret-data@{sentinels}/redquorum-0"),
            format!("redis+sentinel://{sentinels}/redquorum-0?sentinel_password=s3cret-sentinel"),
        ])
        .node_timeout(NODE_TIMEOUT)
        .retry_count(0);
    let shown = format!("{builder:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    // Two nodes naming one master through the same sentinels.
    let err = builder.clone().build().unwrap_err();
    assert!(!format!("{err} {err:?}").contains("s3cret"), "{err:?}");
    // One at a time, each its own Redlock.
    for (url, expect_auth_in_sentinels) in [
        (
            format!("redis+sentinel://user:s3cret-data@{sentinels}/redquorum-0"),
            false,
        ),
        (
            format!("redis+sentinel://{sentinels}/redquorum-0?sentinel_password=s3cret-sentinel"),
            true,
        ),
    ] {
        let redlock = Redlock::builder()
            .node(&url)
            .node_timeout(NODE_TIMEOUT)
            .retry_count(0)
            .build()
            .unwrap();
        assert!(!format!("{redlock:?}").contains("s3cret"));
        let start = Instant::now();
        let err = loop {
            let err = redlock
                .try_lock("p", Duration::from_secs(10))
                .await
                .unwrap_err();
            let failure = &err.report().unwrap().failures()[0].1;
            if !matches!(failure, NodeFailure::Timeout | NodeFailure::NotWaited) {
                break err;
            }
            assert!(start.elapsed() < BOUND, "{err}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let failure = &err.report().unwrap().failures()[0].1;
        // Each says whose credentials to fix: the sentinels' (the query's
        // sentinel_password), or the data nodes' (before the '@').
        if expect_auth_in_sentinels {
            assert!(matches!(failure, NodeFailure::SentinelAuth { .. }), "{err}");
            let shown = err.to_string();
            assert!(shown.contains("sentinels of"), "{shown}");
            assert!(shown.contains("sentinel_password="), "{shown}");
            assert!(!shown.contains("put the right credentials"), "{shown}");
        } else {
            assert!(matches!(failure, NodeFailure::Auth(_)), "{err}");
            assert!(err.to_string().contains("redis://user:password@"), "{err}");
        }
        let shown = format!("{err} {err:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

/// Sends `kill <sig> <pid>`.
fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// The port sentinel `port` names as `master`'s primary.
fn named_by(port: u16, master: &str) -> Option<u16> {
    match command(port, &["SENTINEL", "get-master-addr-by-name", master]) {
        Ok(Reply::Array(Some(parts))) if parts.len() == 2 => match &parts[1] {
            Reply::Bulk(Some(b)) => String::from_utf8_lossy(b).parse().ok(),
            _ => None,
        },
        _ => None,
    }
}

/// A sentinel that missed a manual failover (frozen, as if cut off) still
/// names the old primary, which stays a writable master for seconds after
/// the others promoted the replica. A client that lists every sentinel
/// takes the majority's answer, never the stale one; a client already
/// connected to the old primary leaves it within a re-check (long before
/// the sentinels demote it) and its guard quarantines the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_sentinel_is_outvoted_and_a_connection_to_the_old_primary_is_left() {
    let s = sentinels(1);
    let ports = s.sentinel_ports();
    let name = s.master_name(0);
    let old = s.primary(0).unwrap();
    let connected = builder(&s).build().unwrap();
    warm(&connected).await;
    let stale = answering_pid(ports[0]).expect("the first sentinel's pid");
    signal(stale, "-STOP");
    let start = Instant::now();
    loop {
        match command(ports[1], &["SENTINEL", "FAILOVER", &name]).unwrap() {
            Reply::Status(_) => break,
            refused => assert!(start.elapsed() < BOUND * 2, "{refused:?}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let new = loop {
        let named = (named_by(ports[1], &name), named_by(ports[2], &name));
        if let (Some(a), Some(b)) = named
            && a != old
            && a == b
            && s.is_master(a)
        {
            break a;
        }
        assert!(start.elapsed() < BOUND * 2, "no failover: {named:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let switched = Instant::now();
    // The node's margin (a re-check, twice the connect timeout, a request:
    // 2 s is the default connect timeout) and 2 s for a loaded machine.
    let on_old_at_most =
        Duration::from_secs(1) + Duration::from_secs(2) * 2 + NODE_TIMEOUT + Duration::from_secs(2);
    signal(stale, "-CONT");
    // The connected client's next acquisitions go to the new primary
    // within a re-check (1 s, and its queries), and are refused there for
    // the quarantine: the whole TTL and the margin.
    let ttl = Duration::from_secs(5);
    let err = loop {
        // Taken on the old primary, until the re-check sees the switch.
        let err = match connected.try_lock("s", ttl).await {
            Ok(lock) => {
                // Its release may find the connection retired meanwhile,
                // and the new primary without the key (`Missing`); the
                // retired connection still carries it to the old one.
                let _ = lock.release().await;
                assert!(
                    switched.elapsed() < on_old_at_most,
                    "still on the old primary"
                );
                continue;
            }
            Err(err) => err,
        };
        if !failed(&err, |f| matches!(f, NodeFailure::Restarted { .. })).is_empty() {
            break err;
        }
        assert!(
            switched.elapsed() < on_old_at_most,
            "still on the old primary: {err}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "left the old primary {:?} after the switch (old still a master: {})",
        switched.elapsed(),
        s.is_master(old)
    );
    eventually("the release on the old primary", || {
        get(old, &key("s")).is_none()
    })
    .await;
    let NodeFailure::Restarted { remaining } = &err.report().unwrap().failures()[0].1 else {
        panic!("{err}");
    };
    assert!(*remaining > Duration::from_secs(10), "{err}");
    // A new client that lists every sentinel, the stale one among them:
    // the majority's primary, never the old one.
    // It first meets a primary promoted a moment ago: the sentinels time
    // that failover, and it waits the quarantine out.
    let fresh = builder(&s).build().unwrap();
    let lock = fresh
        .lock("f", ttl)
        .retries(3)
        .wait(Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(get(old, &key("f")), None, "written on the old primary");
    assert!(get(new, &key("f")).is_some());
    lock.release().await.unwrap();
}

/// A fake sentinel on a port of its own that names `named` as the primary
/// of every master, and answers `+OK` to anything else.
async fn fake_sentinel(named: u16) -> u16 {
    let (named, hung) = (Arc::new(AtomicU16::new(named)), Arc::default());
    controlled_sentinel(named, hung).await
}

/// A fake sentinel that names the port in `named` (read at each query),
/// and reads but never answers while `hung` is set.
async fn controlled_sentinel(named: Arc<AtomicU16>, hung: Arc<AtomicBool>) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            let (named, hung) = (named.clone(), hung.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                loop {
                    let n = match sock.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => n,
                    };
                    if hung.load(Ordering::SeqCst) {
                        continue;
                    }
                    let text = String::from_utf8_lossy(&buf[..n]).to_string();
                    let mut out = String::new();
                    for command in text.split('*').filter(|c| !c.is_empty()) {
                        if command.contains("get-master-addr-by-name") {
                            let port = named.load(Ordering::SeqCst).to_string();
                            out +=
                                &format!("*2\r\n$9\r\n127.0.0.1\r\n${}\r\n{port}\r\n", port.len());
                        } else {
                            out += "+OK\r\n";
                        }
                    }
                    if sock.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

/// A standalone `redis-server` on a free port, stopped when dropped.
struct Server {
    port: u16,
    child: std::process::Child,
}

impl Server {
    fn start() -> Server {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        let start = Instant::now();
        while command(port, &["PING"]).is_err() {
            assert!(start.elapsed() < BOUND, "redis-server on {port} not up");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Started empty: nothing for the restart guard to hold against it.
        declare_born_empty(port, &[port]).unwrap();
        Server { port, child }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A client on the old primary X whose re-checks get no majority (one
/// sentinel hung, one stale on X, one naming the new primary Y, which a
/// majority named first) leaves X: only a majority naming X keeps the
/// connection, so nothing is written there past the margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recheck_without_a_majority_leaves_the_old_primary() {
    let (x, y) = (Server::start(), Server::start());
    let named: Vec<_> = (0..3).map(|_| Arc::new(AtomicU16::new(x.port))).collect();
    let hung: Vec<Arc<AtomicBool>> = (0..3).map(|_| Arc::default()).collect();
    let mut ports = Vec::new();
    for (named, hung) in named.iter().zip(&hung) {
        ports.push(controlled_sentinel(named.clone(), hung.clone()).await);
    }
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/m",
        ports[0], ports[1], ports[2]
    );
    let (connect, node) = (Duration::from_secs(1), Duration::from_millis(500));
    let client = || {
        Redlock::builder()
            .node(&url)
            .node_timeout(node)
            .connect_timeout(connect)
            .retry_count(0)
            .build()
            .unwrap()
    };
    let a = client();
    a.try_lock("a", Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A majority (the first two) names Y; a second client moves there.
    named[0].store(y.port, Ordering::SeqCst);
    named[1].store(y.port, Ordering::SeqCst);
    let b = client();
    b.try_lock("b", Duration::from_secs(5))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // The first stops answering: A's re-checks hear Y once and X once.
    hung[0].store(true, Ordering::SeqCst);
    let switched = Instant::now();
    // The margin (re-check 1 s, twice the connect timeout, a request) and
    // 2 s for a loaded machine.
    let margin = Duration::from_secs(1) + connect * 2 + node;
    tokio::time::sleep(margin + Duration::from_secs(2)).await;
    let late = a.try_lock("late", Duration::from_secs(30)).await;
    assert_eq!(
        get(x.port, &key("late")),
        None,
        "written on the old primary {:?} after the switch ({:?})",
        switched.elapsed(),
        late.as_ref().map(|_| ()).map_err(|e| e.to_string())
    );
    // No majority names a primary (or the hung sentinel outlasts the
    // request's timeout): refused, on no server.
    assert!(late.is_err(), "acquired with no majority naming a primary");
}

/// A sentinel that accepts connections and never answers delays nothing:
/// the two that answer are a majority, and the lock is taken at once
/// (waiting for all three spent the whole connect timeout, which also
/// bounds connecting to the primary, and no connection was ever made).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_sentinel_delays_nothing() {
    let s = sentinels(1);
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let real = s.sentinel_ports();
    let url = format!(
        "redis+sentinel://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/{}",
        hole.local_addr().unwrap().port(),
        real[1],
        real[2],
        s.master_name(0)
    );
    let connect = Duration::from_secs(2);
    let redlock = Redlock::builder()
        .node(&url)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(connect)
        .retry_count(0)
        .build()
        .unwrap();
    let start = Instant::now();
    loop {
        match redlock.try_lock("h", Duration::from_secs(10)).await {
            Ok(lock) => {
                let _ = lock.release().await;
                break;
            }
            Err(err) => assert!(start.elapsed() < connect * 3, "{err}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("acquired {:?} after the start", start.elapsed());
    drop(hole);
}

/// A sentinel that names a server which accepts connections and never
/// answers: outvoted by the two real ones, it delays nothing (the lock is
/// taken within the connect timeout); beside one real sentinel, there is no
/// majority, and the failure says so at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sentinel_naming_a_hung_server_is_outvoted_or_reported() {
    let s = sentinels(1);
    let hole = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let fake = fake_sentinel(hole.local_addr().unwrap().port()).await;
    let real = s.sentinel_ports();
    let url = format!(
        "redis+sentinel://127.0.0.1:{fake},127.0.0.1:{},127.0.0.1:{}/{}",
        real[1],
        real[2],
        s.master_name(0)
    );
    let redlock = Redlock::builder()
        .node(&url)
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(3))
        .retry_count(0)
        .build()
        .unwrap();
    let start = Instant::now();
    loop {
        match redlock.try_lock("h", Duration::from_secs(10)).await {
            Ok(lock) => {
                // Its release may find the connection retired meanwhile,
                // and the new primary without the key (`Missing`); the
                // retired connection still carries it to the old one.
                let _ = lock.release().await;
                break;
            }
            Err(err) => assert!(start.elapsed() < Duration::from_secs(4), "{err}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let url = format!(
        "redis+sentinel://127.0.0.1:{fake},127.0.0.1:{}/{}",
        real[1],
        s.master_name(0)
    );
    let (text, failure) = failure_of(&url).await;
    assert!(
        matches!(&failure, NodeFailure::SentinelsDisagree { .. }),
        "{text}"
    );
    assert!(text.contains("no majority"), "{text}");
    drop(hole);
}

/// The text of `INFO <section>` on the server on `port`.
fn info(port: u16, section: &str) -> String {
    match command(port, &["INFO", section]).expect("INFO") {
        Reply::Bulk(Some(text)) => String::from_utf8_lossy(&text).into_owned(),
        other => panic!("INFO {section} on {port}: {other:?}"),
    }
}

/// The field `name` of an `INFO` text (matched whole, not by prefix).
fn info_field(text: &str, name: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let (field, value) = line.trim_end().split_once(':')?;
        (field == name).then(|| value.to_owned())
    })
}

/// The server on `port`'s process (`run_id`) and replication history
/// (`master_replid`, drawn afresh at every promotion).
fn process_and_replid(port: u16) -> (String, String) {
    let run_id = info_field(&info(port, "server"), "run_id").expect("run_id");
    let replid = info_field(&info(port, "replication"), "master_replid").expect("master_replid");
    (run_id, replid)
}

/// How long the server on `port` has run (`uptime_in_seconds`).
fn uptime(port: u16) -> Duration {
    let text = info(port, "server");
    let secs = info_field(&text, "uptime_in_seconds").expect("uptime_in_seconds");
    Duration::from_secs(secs.parse().expect("a number of seconds"))
}

/// Waits (within [`BOUND`]) until every server of `s` has run for longer
/// than `age`.
async fn every_server_older_than(s: &LocalSentinels, age: Duration) {
    let servers: Vec<u16> = (0..s.len()).flat_map(|i| s.server_ports(i)).collect();
    eventually("every server up longer than the TTL", || {
        servers.iter().all(|&p| uptime(p) > age)
    })
    .await;
}

/// Breaks each `(replica, primary)` replication link: the replica still
/// names its primary but cannot sync (refused at AUTH when it reconnects),
/// as a partition between the data servers would; waits until each says
/// its link is down.
async fn cut_replication(links: &[(u16, u16)]) {
    for &(replica, primary) in links {
        let set = command(
            replica,
            &["CONFIG", "SET", "masterauth", "no-such-password"],
        )
        .unwrap();
        assert_eq!(set, Reply::Status("OK".into()));
        assert_eq!(
            command(primary, &["CLIENT", "KILL", "TYPE", "replica"]).unwrap(),
            Reply::Int(1)
        );
    }
    for &(replica, _) in links {
        eventually("the replication link down", || {
            info_field(&info(replica, "replication"), "master_link_status").as_deref()
                == Some("down")
        })
        .await;
    }
}

/// `client`'s lock on `name`, tried until it is granted (within [`BOUND`]).
async fn lock_within_bound(client: &Redlock, name: &str, ttl: Duration) -> redquorum::Lock {
    let start = Instant::now();
    loop {
        match client.try_lock(name, ttl).await {
            Ok(held) => return held,
            Err(err) => assert!(start.elapsed() < BOUND, "no lock on {name}: {err}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asks the first sentinel for a failover of each of `nodes`, again until
/// it agrees (within [`BOUND`]; it refuses one while a failover of that
/// master is under way).
async fn ask_for_failovers(s: &LocalSentinels, nodes: &[usize]) {
    let sentinel = s.sentinel_ports()[0];
    for &i in nodes {
        let name = s.master_name(i);
        let start = Instant::now();
        loop {
            match command(sentinel, &["SENTINEL", "FAILOVER", &name]).unwrap() {
                Reply::Status(_) => break,
                refused => assert!(start.elapsed() < BOUND, "failover refused: {refused:?}"),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A failback the client slept through. Client A connects to every
/// node's primary P and idles; nodes 0 and 1 fail over to their replicas
/// R, and the sentinels make each P a replica of its R. P's replication
/// link to R then breaks (a partition between the two data servers that
/// the sentinels see across: P is made to fail `AUTH` to R, so it keeps R
/// as its primary and copies nothing more); client B locks `fb` (on R, R
/// and node 2's primary); both nodes fail back to P, promoted again
/// before it could copy B's key. P is the very process A knew (its
/// `run_id`), with a new `master_replid`, and lacks B's key: A's guard
/// must give it no vote (`Restarted`), or A takes `fb` from P, P and
/// nobody while B holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failback_slept_through_gives_no_second_holder() {
    let started = Instant::now();
    let s = sentinels(3);
    // B's TTL: long enough that B holds throughout, short enough that
    // every server has run longer than it when B locks (below).
    let ttl = Duration::from_secs(20);
    let fb = key("fb");
    // A meets every node's primary (a status read: no acquisition).
    let a = builder(&s).build().unwrap();
    let start = Instant::now();
    loop {
        let status = a.status("fb").await;
        if status.nodes().iter().all(|(_, state)| state.is_ok()) {
            break;
        }
        assert!(
            start.elapsed() < BOUND,
            "A did not meet every node: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let nodes = [0, 1];
    let olds: Vec<u16> = nodes.iter().map(|&i| s.primary(i).unwrap()).collect();
    let known: Vec<(String, String)> = olds.iter().map(|&p| process_and_replid(p)).collect();

    // Both fail over to their replicas (A makes no connection to them: it
    // idles, and its re-checks only retire its connections to P), and the
    // sentinels make each old primary a replica of the new one.
    let news: Vec<u16> = nodes.iter().map(|&i| s.failover(i).unwrap()).collect();
    for (&old, &new) in olds.iter().zip(&news) {
        assert_ne!(old, new);
        s.wait_for_replica(old).unwrap();
        assert_eq!(
            info_field(&info(old, "replication"), "master_port"),
            Some(new.to_string())
        );
    }
    eprintln!(
        "failed over, old primaries in sync: {:?}",
        started.elapsed()
    );

    // Every server has run longer than a TTL (and a margin): no rule about
    // a node younger than a TTL can explain a refusal below, only the
    // failback can. (They have run some 20 s by now: a short wait at most.)
    every_server_older_than(&s, ttl + Duration::from_secs(2)).await;

    // P's replication link to R breaks: P still names R as its primary
    // but cannot sync (refused at AUTH). Sentinel still promotes such a
    // replica if its link has been down less than ten times
    // `down-after-milliseconds` (10 s here).
    let links: Vec<(u16, u16)> = olds.iter().copied().zip(news.iter().copied()).collect();
    cut_replication(&links).await;

    // B locks `fb` on R, R and node 2's primary; P does not get it.
    let third = s.primary(2).unwrap();
    // B's own guard is off: B stands for any client whose key is on R, R
    // and node 2 (a fresh process's guard would keep the promoted replicas
    // out for a TTL from the switch, and the failback needs B's key there).
    let b = builder(&s).restart_guard(false).build().unwrap();
    let held = lock_within_bound(&b, "fb", ttl).await;
    for &port in news.iter().chain([&third]) {
        eventually("B's key written", || get(port, &fb).is_some()).await;
    }
    for &old in &olds {
        assert_eq!(get(old, &fb), None, "B's key copied to the old primary");
    }

    // Failback, both nodes at once (within the 10 s P's link may be down).
    ask_for_failovers(&s, &nodes).await;
    for ((&i, &old), &new) in nodes.iter().zip(&olds).zip(&news) {
        assert_eq!(s.wait_for_new_primary(i, new).unwrap(), old);
    }
    eprintln!("failed back: {:?}", started.elapsed());
    // The precondition, on the servers: P is the process A knew, promoted
    // again (a new replication ID), and has not B's key.
    for (&old, (run_id, replid)) in olds.iter().zip(&known) {
        let (now_run_id, now_replid) = process_and_replid(old);
        assert_eq!(&now_run_id, run_id, "P restarted: not a failback");
        assert_ne!(&now_replid, replid, "P not promoted again");
        assert!(s.is_master(old));
        assert_eq!(get(old, &fb), None, "B's key on the failed-back primary");
        // Its link no longer matters (it is the primary): as it was.
        let _ = command(old, &["CONFIG", "SET", "masterauth", ""]);
    }
    assert!(get(third, &fb).is_some());

    // A wakes up: the failed-back nodes get no vote, and A no lock.
    let names = [s.name(0), s.name(1)];
    let start = Instant::now();
    let err = loop {
        let err = match a.try_lock("fb", ttl).await {
            Ok(second) => panic!(
                "A acquired fb ({:?} left) while B holds it ({:?} left): the failed-back \
                 primaries {olds:?} (run_ids A knew, new replication IDs, without B's key) \
                 voted for A",
                second.remaining(),
                held.remaining()
            ),
            Err(err) => err,
        };
        assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
        if failed(&err, |f| matches!(f, NodeFailure::Restarted { .. })) == names {
            break err;
        }
        assert!(start.elapsed() < BOUND, "no quarantine seen: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("A refused: {err}");
    assert!(held.remaining() > ttl / 2, "B's lock ran out");
    held.release().await.unwrap();
    eprintln!("took {:?}", started.elapsed());
}

/// A failover before a process first connects. B holds `fo` on all three
/// nodes; nodes 0 and 1 fail over to replicas that never got B's key (their
/// link was cut first, as a partition between the data servers would). A
/// process C started now meets the promoted replicas for the first time:
/// it has no earlier identity to compare, and their uptime is their
/// process's (longer than the TTL), so only the sentinels can time the
/// failover. C must get no vote from them while B holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_before_a_process_first_connects_gives_no_second_holder() {
    let s = sentinels(3);
    let ttl = Duration::from_secs(10);
    let fo = key("fo");
    let nodes = [0, 1];
    let olds: Vec<u16> = nodes.iter().map(|&i| s.primary(i).unwrap()).collect();
    let replicas: Vec<u16> = nodes
        .iter()
        .zip(&olds)
        .map(|(&i, &old)| s.server_ports(i).into_iter().find(|&p| p != old).unwrap())
        .collect();
    // No rule about a node younger than the TTL can explain a refusal.
    every_server_older_than(&s, ttl + Duration::from_secs(2)).await;
    // Each replica's link breaks (refused at AUTH when it reconnects).
    let links: Vec<(u16, u16)> = replicas.iter().copied().zip(olds.iter().copied()).collect();
    cut_replication(&links).await;
    let b = builder(&s).build().unwrap();
    let held = lock_within_bound(&b, "fo", ttl).await;
    // Both fail over to the replicas that lack B's key.
    ask_for_failovers(&s, &nodes).await;
    for ((&i, &old), &replica) in nodes.iter().zip(&olds).zip(&replicas) {
        assert_eq!(s.wait_for_new_primary(i, old).unwrap(), replica);
        assert_eq!(get(replica, &fo), None, "B's key on the promoted replica");
        assert!(uptime(replica) > ttl, "{replica} is younger than the TTL");
        let _ = command(replica, &["CONFIG", "SET", "masterauth", ""]);
    }
    // C, a process started now, meets the promoted replicas first.
    let c = builder(&s).build().unwrap();
    let names = [s.name(0), s.name(1)];
    let start = Instant::now();
    let err = loop {
        let err = match c.try_lock("fo", ttl).await {
            Ok(second) => panic!(
                "C acquired fo ({:?} left) while B holds it ({:?} left): the promoted \
                 replicas {replicas:?}, without B's key, voted for a process that first met them",
                second.remaining(),
                held.remaining()
            ),
            Err(err) => err,
        };
        assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
        if failed(&err, |f| matches!(f, NodeFailure::Restarted { .. })) == names {
            break err;
        }
        assert!(start.elapsed() < BOUND, "no quarantine seen: {err}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    eprintln!("C refused: {err}");
    assert!(!held.is_lost(), "B's lock ran out");
    held.release().await.ok();
}
