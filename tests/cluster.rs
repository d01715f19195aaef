//! Redis Cluster nodes (feature `cluster`), against real local clusters:
//! three clusters of three shards (a primary and a replica each) as the
//! three nodes of one Redlock.

use std::time::Duration;

use redquorum::local_redis_cluster::LocalRedisCluster;
use redquorum::local_servers::{LocalServers, Reply, command};
use redquorum::{Error, Redlock};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `n` local clusters, started in parallel.
fn clusters(n: usize) -> Vec<LocalRedisCluster> {
    let handles: Vec<_> = (0..n)
        .map(|_| std::thread::spawn(LocalRedisCluster::start))
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().unwrap().expect("a local Redis Cluster"))
        .collect()
}

fn redlock(clusters: &[LocalRedisCluster]) -> Redlock {
    Redlock::builder()
        .nodes(clusters.iter().map(LocalRedisCluster::url))
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// `key` holds `value` (`None`: is gone) in every cluster within 5 s: a
/// lock or a release returns once a majority answered, and the last
/// node's command follows.
async fn assert_everywhere(c: &[LocalRedisCluster], key: &str, value: Option<&str>) {
    let start = std::time::Instant::now();
    while c.iter().any(|c| get(c, key).as_deref() != value) && start.elapsed() < secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for cluster in c {
        assert_eq!(get(cluster, key).as_deref(), value);
    }
}

/// The value of `key` on the primary serving it in `cluster`.
fn get(cluster: &LocalRedisCluster, key: &str) -> Option<String> {
    let port = cluster.primary_of(key).unwrap();
    match command(port, &["GET", key]).unwrap() {
        Reply::Bulk(Some(v)) => Some(String::from_utf8(v).unwrap()),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_lives_on_the_primary_serving_its_slot_in_every_cluster() {
    let c = clusters(3);
    let redlock = redlock(&c);
    let lock = redlock.lock("report", secs(10)).await.unwrap();
    let key = "{redquorum:report}";
    assert_everywhere(&c, key, Some(lock.token())).await;
    lock.release().await.unwrap();
    assert_everywhere(&c, key, None).await;
}

/// Every kind works with three clusters as the three nodes: their scripts
/// touch side keys built from the lock key (`:waiters`, `:intent`,
/// `:leader`, `:fence`) without declaring them, which Redis 7 in cluster
/// mode accepts as they share the key's slot.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_works_over_three_clusters() {
    let c = clusters(3);
    let redlock = redlock(&c);
    let ttl = secs(10);

    // Mutex, and its status.
    let lock = redlock.lock("m", ttl).await.unwrap();
    assert_eq!(
        redlock.status("m").await.holder(),
        Some(&redquorum::Holding::Token(lock.token().to_owned()))
    );
    assert!(redlock.try_lock("m", ttl).await.is_err());
    lock.release().await.unwrap();

    // A set with a shared hash tag: one slot, one primary per cluster.
    let set = redlock
        .lock_all(["{order:42}:a", "{order:42}:b"], ttl)
        .await
        .unwrap();
    let key = "redquorum:{order:42}:a";
    for cluster in &c {
        assert_eq!(
            cluster.primary_of(key).unwrap(),
            cluster.primary_of("redquorum:{order:42}:b").unwrap()
        );
    }
    assert!(redlock.try_lock("{order:42}:b", ttl).await.is_err());
    set.release().await.unwrap();

    // Reentrant: a second hold of the owner, refused to others.
    let first = redlock.lock("r", ttl).reentrant("job-1").await.unwrap();
    let second = redlock.lock("r", ttl).reentrant("job-1").await.unwrap();
    assert!(redlock.try_lock("r", ttl).await.is_err());
    first.release().await.unwrap();
    second.release().await.unwrap();
    redlock
        .try_lock("r", ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Fenced: tokens grow (the counter `<key>:fence` is in the key's slot).
    let a = redlock.lock("f", ttl).fenced().await.unwrap();
    let fa = a.fence().unwrap();
    a.release().await.unwrap();
    let b = redlock.lock("f", ttl).fenced().await.unwrap();
    assert!(b.fence().unwrap() > fa);
    b.release().await.unwrap();

    // Semaphore: two permits, a third refused.
    let p1 = redlock.lock("s", ttl).permits(2).await.unwrap();
    let p2 = redlock.lock("s", ttl).permits(2).await.unwrap();
    assert!(redlock.lock("s", ttl).permits(2).retries(0).await.is_err());
    p1.release().await.unwrap();
    p2.release().await.unwrap();

    // Read-write: two readers, a writer kept out until they leave.
    let r1 = redlock.lock("rw", ttl).shared().await.unwrap();
    let r2 = redlock.lock("rw", ttl).shared().await.unwrap();
    assert!(redlock.try_lock("rw", ttl).await.is_err());
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    redlock
        .try_lock("rw", ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // Election: a leader, named by a majority, and a resignation.
    let leader = redlock.campaign("e", "host-a", ttl).await.unwrap();
    let seen = redlock.leader("e").await.unwrap().expect("a leader");
    assert_eq!(seen.identity, "host-a");
    leader.resign().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_across_slots_is_refused_before_anything_is_sent() {
    let c = clusters(1);
    let redlock = Redlock::builder()
        .node(c[0].url())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let err = redlock
        .lock_all(["stock:berlin", "stock:lyon"], secs(10))
        .await
        .unwrap_err();
    match &err {
        Error::CrossSlot { resources } => {
            let names: Vec<&str> = resources.iter().map(|(r, _)| r.as_str()).collect();
            assert_eq!(names, ["stock:berlin", "stock:lyon"]);
            assert_ne!(resources[0].1, resources[1].1);
        }
        other => panic!("{other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("{order:42}:a"), "{text}");
    assert!(text.contains("stock:lyon"), "{text}");
    for (_, keys) in c[0].keys_per_shard().unwrap() {
        assert_eq!(keys, 0);
    }
}

/// A waiter is woken by the release: its client subscribes on one node of
/// each cluster, and the release's `PUBLISH`, on the primary of the key's
/// slot, reaches every node. (A cluster node counts only its own
/// subscribers, so the release script takes the waiter as listening: see
/// `queue.lua`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_by_the_release() {
    let c = clusters(3);
    // Without a wake-up the waiter would come back when the key expires
    // (its timer: the holder's PTTL, capped at ten retry delays), after
    // its wait of 20 s.
    let redlock = Redlock::builder()
        .nodes(c.iter().map(LocalRedisCluster::url))
        .node_timeout(Duration::from_millis(500))
        .retry_delay(secs(5))
        .build()
        .unwrap();
    let ttl = secs(30);
    let first = redlock.lock("w", ttl).await.unwrap();
    let other = redlock.clone();
    let waiter = tokio::spawn(async move { other.lock("w", ttl).wait(secs(20)).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = std::time::Instant::now();
    first.release().await.unwrap();
    // Got well within the first lock's TTL: after its release, not its
    // expiry.
    let second = tokio::time::timeout(secs(20), waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap()
        .unwrap();
    eprintln!("woken {:?} after the release", released.elapsed());
    second.release().await.unwrap();
}

/// How reports name a cluster node: its sorted seeds.
fn node_name(cluster: &LocalRedisCluster) -> String {
    let mut seeds: Vec<String> = cluster
        .ports()
        .iter()
        .map(|p| format!("127.0.0.1:{p}"))
        .collect();
    seeds.sort();
    format!("cluster({})", seeds.join(","))
}

/// A shard's failover is a restart for the keys of that shard (what
/// replication had not copied is gone): a grant by the promoted replica,
/// a primary this client had not seen, is no vote, and the node gets none
/// on acquisitions until the keys it may have lost would have expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_failover_quarantines_the_node_and_the_holder_stays_alone() {
    let c = clusters(3);
    let redlock = redlock(&c);
    let ttl = secs(30);
    let first = redlock.lock("a", ttl).await.unwrap();
    let key = "{redquorum:a}";
    for cluster in &c[..2] {
        let primary = cluster.primary_of(key).unwrap();
        let replica = cluster.failover(primary).unwrap();
        assert_eq!(cluster.primary_of(key).unwrap(), replica);
    }
    // The same client asks again: the promoted replicas' answers do not
    // count (each says `Restarted`), and nobody else gets the lock. (An
    // attempt decided before a node answered does not wait for it: the
    // next one finds it quarantined.)
    let mut expected = vec![node_name(&c[0]), node_name(&c[1])];
    expected.sort();
    let start = std::time::Instant::now();
    loop {
        let err = redlock.try_lock("a", ttl).await.unwrap_err();
        assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
        let mut restarted: Vec<String> = err
            .report()
            .unwrap()
            .failures()
            .iter()
            .filter(|(_, f)| matches!(f, redquorum::NodeFailure::Restarted { .. }))
            .map(|(node, _)| node.clone())
            .collect();
        restarted.sort();
        assert!(restarted.iter().all(|r| expected.contains(r)), "{err}");
        if restarted == expected {
            break;
        }
        assert!(start.elapsed() < secs(5), "{err}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The whole node is out: another name, on any shard, too.
    let err = redlock.try_lock("b", ttl).await.unwrap_err();
    assert!(matches!(err, Error::NotAcquired { .. }), "{err}");
    let refused = err
        .report()
        .unwrap()
        .failures()
        .iter()
        .filter(|(_, f)| matches!(f, redquorum::NodeFailure::Restarted { .. }))
        .count();
    assert_eq!(refused, 2, "{err}");
    // The holder is alone and still valid; its release reaches every node.
    assert!(!first.is_lost());
    first.release().await.unwrap();
    assert_everywhere(&c, key, None).await;
}

/// A slot moves from one primary to another, on two of the three clusters,
/// while clients lock and release names in it: locks keep being granted
/// (`ASK` and `MOVED` are followed), never to two holders at once, and
/// nothing outlives its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migration_under_load_keeps_one_holder() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let c = Arc::new(clusters(3));
    let redlock = redlock(&c);
    let ttl = secs(3);
    const NAMES: [&str; 3] = ["{mig}:0", "{mig}:1", "{mig}:2"];
    let held: Arc<[AtomicBool; 3]> = Arc::default();
    let granted = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let began = std::time::Instant::now();
    // What each failed attempt said, and when: the figure a failure prints.
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for t in 0..6 {
        let (redlock, held, granted, failed, stop, errors) = (
            redlock.clone(),
            held.clone(),
            granted.clone(),
            failed.clone(),
            stop.clone(),
            errors.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = t;
            while !stop.load(Ordering::Relaxed) && n < t + 10_000 {
                let i = n % NAMES.len();
                n += 1;
                match redlock.lock(NAMES[i], ttl).wait(secs(2)).await {
                    Ok(lock) => {
                        assert!(!held[i].swap(true, Ordering::SeqCst), "two holders of {i}");
                        granted.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        held[i].store(false, Ordering::SeqCst);
                        if let Err(e) = lock.release().await {
                            let at = began.elapsed().as_millis();
                            let e = format!("{at} ms, release of {}: {e:?}", NAMES[i]);
                            errors.lock().unwrap().push(e);
                        }
                    }
                    Err(e) => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        let at = began.elapsed().as_millis();
                        errors
                            .lock()
                            .unwrap()
                            .push(format!("{at} ms, {}: {e:?}", NAMES[i]));
                    }
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = granted.load(Ordering::Relaxed);
    assert!(before > 0, "no lock granted before the migration");
    let slot = c[0].slot("redquorum:{mig}:0").unwrap();
    let redirects = redquorum::cluster_redirects_followed(slot);
    // Move the slot on clusters 0 and 1, and back, while the load runs.
    let moving = c.clone();
    let moved_at = began.elapsed().as_millis();
    tokio::task::spawn_blocking(move || {
        for cluster in &moving[..2] {
            let slot = cluster.slot("redquorum:{mig}:0").unwrap();
            let from = cluster.primary_of_slot(slot).unwrap();
            let to = cluster.other_primary(from).unwrap().unwrap();
            cluster.migrate_slot(slot, to).unwrap();
            assert_eq!(cluster.primary_of_slot(slot).unwrap(), to);
            cluster.migrate_slot(slot, from).unwrap();
        }
    })
    .await
    .unwrap();
    let during = granted.load(Ordering::Relaxed);
    let moved_until = began.elapsed().as_millis();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let after = granted.load(Ordering::Relaxed);
    eprintln!(
        "granted {before} before, {} during, {} after the migrations; {} attempts failed",
        during - before,
        after - during,
        failed.load(Ordering::Relaxed)
    );
    eprintln!("the migrations ran from {moved_at} ms to {moved_until} ms");
    for e in errors.lock().unwrap().iter() {
        eprintln!("  failed at {e}");
    }
    assert!(during > before, "no lock granted during the migrations");
    assert!(after > during, "no lock granted after the migrations");
    // The moves were seen: a MOVED or ASK for the slot moved was followed
    // (no other test uses that slot).
    let followed = redquorum::cluster_redirects_followed(slot) - redirects;
    eprintln!("{followed} MOVED/ASK answers followed");
    assert!(
        followed > 0,
        "no MOVED or ASK followed during the migrations"
    );
    // Whatever an error left behind expires with its TTL.
    tokio::time::sleep(ttl + secs(1)).await;
    for cluster in c.iter() {
        for (port, keys) in cluster.keys_per_shard().unwrap() {
            assert_eq!(keys, 0, "keys left on the primary on port {port}");
        }
    }
}

/// A slot halfway through a move (`MIGRATING` on one primary, `IMPORTING`
/// on the other, its keys not moved yet) answers a script that names
/// several keys `TRYAGAIN` until the move ends: the command did not run,
/// and is sent again after a pause, within the request's bound. Given up
/// at once, as it was on the first version of our routing, a release left
/// its key for a whole TTL, and two clusters caught so within one TTL kept
/// every waiter out (`a_slot_migration_under_load…` once: 0 grants after
/// the moves). One cluster is the only node here, so that any failure of
/// its is the call's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_and_a_lock_during_a_slot_move_wait_for_it_to_end() {
    use std::sync::Arc;
    let c = Arc::new(clusters(1));
    let redlock = Redlock::builder()
        .nodes([c[0].url()])
        .node_timeout(secs(2))
        .build()
        .unwrap();
    let slot = c[0].slot("redquorum:{mv}").unwrap();
    let from = c[0].primary_of_slot(slot).unwrap();
    let to = c[0].other_primary(from).unwrap().unwrap();
    // Ends the move begun, 300 ms later, on a thread of its own.
    let finish_later = |moving| {
        let c = c.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            c[0].finish_migration(moving)
        })
    };
    // Releases while the keys are still on the first primary: the
    // mutex's (its script's fast path), a permit's and a reader's (whole
    // scripts, which reach `:waiters` and `:intent`, missing there).
    let lock = redlock.lock("{mv}", secs(30)).await.unwrap();
    let permit = redlock.lock("{mv}:s", secs(30)).permits(2).await.unwrap();
    let reader = redlock.lock("{mv}:rw", secs(30)).shared().await.unwrap();
    let moving = c[0].begin_migration(slot, to).unwrap().unwrap();
    let finished = finish_later(moving);
    let released = futures::join!(lock.release(), permit.release(), reader.release());
    finished.join().unwrap().unwrap();
    assert!(released.0.is_ok(), "the mutex's release: {:?}", released.0);
    assert!(released.1.is_ok(), "the permit's release: {:?}", released.1);
    assert!(released.2.is_ok(), "the reader's release: {:?}", released.2);
    assert_eq!(c[0].primary_of_slot(slot).unwrap(), to);
    for (port, keys) in c[0].keys_per_shard().unwrap() {
        assert_eq!(keys, 0, "keys left on the primary on port {port}");
    }
    // Locks while the slot moves back (nothing there: the attempts are
    // sent on, `ASK`, to a primary that has none of their keys yet).
    let moving = c[0].begin_migration(slot, from).unwrap().unwrap();
    let finished = finish_later(moving);
    let taken = futures::join!(
        redlock.try_lock("{mv}", secs(30)),
        redlock
            .lock("{mv}:s", secs(30))
            .permits(2)
            .retries(0)
            .into_future(),
        redlock
            .lock("{mv}:rw", secs(30))
            .shared()
            .retries(0)
            .into_future(),
    );
    finished.join().unwrap().unwrap();
    let lock = taken.0.expect("a lock during the move");
    let permit = taken.1.expect("a permit during the move");
    let reader = taken.2.expect("a reader during the move");
    assert_eq!(get(&c[0], "redquorum:{mv}").as_deref(), Some(lock.token()));
    lock.release().await.unwrap();
    permit.release().await.unwrap();
    reader.release().await.unwrap();
    for (port, keys) in c[0].keys_per_shard().unwrap() {
        assert_eq!(keys, 0, "keys left on the primary on port {port}");
    }
}

/// The ids of the clients' connections open on the server at `port`: not
/// the one asking, nor a replication link.
fn client_ids(port: u16) -> Vec<u64> {
    let Reply::Bulk(Some(list)) = command(port, &["CLIENT", "LIST"]).unwrap() else {
        panic!("CLIENT LIST on port {port}");
    };
    let field = |line: &str, name: &str| -> Option<String> {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
    };
    String::from_utf8(list)
        .unwrap()
        .lines()
        .filter(|line| field(line, "cmd").as_deref() != Some("client|list"))
        .filter(|line| !field(line, "flags").is_some_and(|f| f.contains(['S', 'M'])))
        .filter_map(|line| field(line, "id")?.parse().ok())
        .collect()
}

/// A slot moving for longer than a connection's silence limit (three
/// request timeouts, a second at least): every send of the release comes
/// back `TRYAGAIN` until the move ends, and each is an answer. Taken for
/// silence, they made the client replace its connection to the cluster
/// (here once in the 3.5 s, a new connection to each primary: the lone
/// removal's resends back off). No new connection now, and the release
/// lands once the move is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_slot_move_is_no_silence() {
    let c = clusters(1);
    let redlock = Redlock::builder()
        .nodes([c[0].url()])
        .node_timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let slot = c[0].slot("redquorum:{long}").unwrap();
    let from = c[0].primary_of_slot(slot).unwrap();
    let to = c[0].other_primary(from).unwrap().unwrap();
    let lock = redlock.lock("{long}", secs(30)).await.unwrap();
    let ports = c[0].ports();
    let known: Vec<u64> = ports.iter().flat_map(|&p| client_ids(p)).collect();
    let moving = c[0].begin_migration(slot, to).unwrap().unwrap();
    // Times out (its slot still moving), then is sent again in the
    // background until the key would have expired.
    let released = lock.release().await;
    assert!(released.is_err(), "released during the move: {released:?}");
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    let new: Vec<u64> = ports
        .iter()
        .flat_map(|&p| client_ids(p))
        .filter(|id| !known.contains(id))
        .collect();
    c[0].finish_migration(moving).unwrap();
    assert!(
        new.is_empty(),
        "connections made during the move, the old one taken for silent: {new:?}"
    );
    // The release, sent again after the move, lands.
    let started = std::time::Instant::now();
    while c[0].keys_per_shard().unwrap().iter().any(|&(_, n)| n > 0) {
        assert!(
            started.elapsed() < secs(10),
            "the key stayed after the move"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How many nodes said `Restarted` in `err`'s report.
fn restarted(err: &Error) -> usize {
    err.report().map_or(0, |r| {
        r.failures()
            .iter()
            .filter(|(_, f)| matches!(f, redquorum::NodeFailure::Restarted { .. }))
            .count()
    })
}

/// Tries `name` until an attempt is refused by the restart guard (true), or
/// 50 tries pass (false); a lock granted meanwhile is released.
async fn trips(redlock: &Redlock, name: &str, ttl: Duration) -> bool {
    for _ in 0..50 {
        match redlock.try_lock(name, ttl).await {
            Ok(lock) => lock.release().await.unwrap(),
            Err(e) if restarted(&e) > 0 => return true,
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// A failover and then a failback of one shard, the client connected all
/// along: the old primary, promoted again, is a primary whose `run_id` the
/// guard knows, but as a replica meanwhile it may have lost the keys the
/// other one granted. Both promotions trip the guard (a primary is told by
/// its `run_id` and its replication ID, drawn anew at each promotion).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_and_a_failback_both_quarantine_the_node() {
    let c = clusters(1);
    let redlock = Redlock::builder()
        .node(c[0].url())
        .node_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let ttl = secs(1);
    redlock
        .lock("a", ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let primary = c[0].primary_of("{redquorum:a}").unwrap();
    let replica = c[0].failover(primary).unwrap();
    assert!(trips(&redlock, "a", ttl).await, "the failover was not seen");
    // The quarantine (one TTL from the first grant seen) ends.
    tokio::time::sleep(ttl + secs(1)).await;
    redlock
        .lock("a", ttl)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(c[0].failover(replica).unwrap(), primary);
    assert!(
        trips(&redlock, "a", ttl).await,
        "the failback to a primary whose run_id is known was not seen"
    );
}

/// One frozen server (SIGSTOP: the kernel still accepts connections, nothing
/// is answered), a replica, in an otherwise healthy cluster: a new client
/// still connects to the cluster node and gets locks, within a bound (the
/// PING redis-rs sends on each new connection, and its slot refresh, time
/// out instead of waiting forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_does_not_make_the_cluster_node_unreachable() {
    let mut c = clusters(1);
    let replica = c[0]
        .nodes()
        .unwrap()
        .into_iter()
        .find(|n| !n.primary)
        .unwrap()
        .port;
    c[0].freeze(replica).unwrap();
    let redlock = Redlock::builder()
        .node(c[0].url())
        .node_timeout(Duration::from_millis(500))
        .connect_timeout(secs(2))
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    let mut granted = 0;
    let mut first = None;
    let mut last = String::new();
    while start.elapsed() < secs(8) {
        match redlock.try_lock("a", secs(5)).await {
            Ok(lock) => {
                granted += 1;
                first.get_or_insert(start.elapsed());
                lock.release().await.unwrap();
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c[0].thaw(replica).unwrap();
    eprintln!(
        "frozen replica: {granted} locks in 8 s, the first after {first:?}; last error: {last}"
    );
    assert!(
        granted > 0,
        "no lock in 8 s with one replica frozen: {last}"
    );
    // Connecting takes up to two phases of a quarter of the connect
    // timeout each: well within one connect timeout, plus a try.
    assert!(first.unwrap() < secs(4), "{first:?}");
}

/// A member of a cluster given as a plain server (`redis://`) answers
/// `MOVED` for the keys of the slots it does not serve: a failure that says
/// to give the cluster as one `redis+cluster://` node, not a bare `MOVED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_member_given_as_a_plain_server_says_to_give_the_cluster() {
    let c = clusters(1);
    let key = "redquorum:r";
    let serving = c[0].primary_of(key).unwrap();
    let other = c[0].other_primary(serving).unwrap().unwrap();
    // (The restart guard is not what is tested: a cluster member given as
    // a plain server cannot read the born-empty declaration, which lives
    // in another slot, and a young cluster would be kept out for a TTL.)
    let redlock = Redlock::builder()
        .node(format!("redis://127.0.0.1:{other}"))
        .restart_guard(false)
        .node_timeout(Duration::from_millis(500))
        .connect_timeout(secs(5))
        .retry_count(0)
        .build()
        .unwrap();
    let start = std::time::Instant::now();
    let err = loop {
        let err = redlock.try_lock("r", secs(10)).await.unwrap_err();
        let failure = &err.report().unwrap().failures()[0].1;
        if !matches!(failure, redquorum::NodeFailure::Timeout) || start.elapsed() > secs(10) {
            break err;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let failure = &err.report().unwrap().failures()[0].1;
    assert!(
        matches!(failure, redquorum::NodeFailure::ClusterMember(_)),
        "{err}"
    );
    let shown = format!("{err} {err:?}");
    assert!(shown.contains("redis+cluster://"), "{shown}");
    assert!(shown.contains(&format!(":{serving}")), "{shown}");
    assert_eq!(get(&c[0], key), None);
}

/// The seeds are asked at once, and one that hangs (accepts and never
/// answers) or answers with no slot served is passed over: the node
/// connects through the others within its connect timeout. (Asked one
/// after another, as a first version of our own routing did, four hanging
/// seeds spent the budget, a quarter each, and a seed with no map ended
/// the connection at once, as a lasting failure.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeds_that_hang_or_serve_no_slot_do_not_keep_the_node_from_connecting() {
    let c = clusters(1);
    // Listening, never accepting: the handshake completes in the backlog,
    // and nothing ever answers.
    let hanging: Vec<std::net::TcpListener> = (0..4)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    // A cluster-enabled server that has joined nothing: it answers
    // `CLUSTER SLOTS` with no slot (a node that lost its `nodes.conf`, or
    // a cluster still forming).
    let lone = LocalServers::start_with_args(1, &["--cluster-enabled", "yes"]).unwrap();
    let mut seeds: Vec<String> = hanging
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect();
    seeds.push(format!("127.0.0.1:{}", lone.port(0)));
    let url = format!(
        "redis+cluster://{},{}",
        seeds.join(","),
        c[0].url().trim_start_matches("redis+cluster://")
    );
    let redlock = Redlock::builder()
        .node(&url)
        .node_timeout(Duration::from_millis(500))
        .connect_timeout(secs(2))
        .build()
        .unwrap();
    let lock = redlock.lock("seeds", secs(10)).await.unwrap();
    lock.release().await.unwrap();
    drop(hanging);
}
