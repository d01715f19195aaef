//! The `docker-compose.yml` servers, for real: five containers on host ports
//! 7001–7005, locked through, with one container killed and one paused. And
//! its profiles: three Sentinel-managed nodes (`sentinel`) and three Redis
//! Clusters (`cluster`), locked through a failover on one of them.
//!
//! See `common::compose` for the image and for what happens where no Docker
//! engine answers.

mod common;

use std::time::{Duration, Instant};

use common::compose::{Compose, PORTS, await_ping, docker_or_skip, ports_free};
use common::*;
use redquorum::Redlock;
use redquorum::local_servers::{Reply, command_with_timeout, declare_born_empty};

/// How many of `ports` hold `key`.
fn holders_at(ports: &[u16], key: &str) -> usize {
    ports
        .iter()
        .filter(|&&p| {
            matches!(
                command_with_timeout(p, &["GET", key], Duration::from_secs(2)),
                Ok(Reply::Bulk(Some(_)))
            )
        })
        .count()
}

/// A port the compose set needs, taken by something else (a `redquorum
/// servers up` set on its default ports, say), stops the test at once with
/// the reason and the fix, before Docker is asked anything. (Without an
/// engine too: the check is the harness's own.)
#[test]
fn the_compose_test_says_at_once_when_its_ports_are_taken() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    let port = listener.local_addr().expect("its address").port();
    let panic = std::panic::catch_unwind(|| ports_free(&[port])).expect_err("a taken port passed");
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        message.contains(&port.to_string()) && message.contains("redquorum servers down"),
        "{message}"
    );
    drop(listener);
    ports_free(&[port]);
}

#[test]
fn the_compose_servers_grant_locks_through_a_kill_and_a_pause() {
    if let Err(reason) = docker_or_skip() {
        eprintln!("SKIPPED the compose servers test: {reason}");
        return;
    }
    let compose = Compose::up(&format!("redquorumtest{}", std::process::id()));

    let urls: Vec<String> = PORTS
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let node_timeout = Duration::from_secs(2);
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(node_timeout)
        .retry_count(0)
        .build()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut lock = redlock
            .lock("compose", Duration::from_secs(10))
            .await
            .unwrap();
        lock.extend(Duration::from_secs(10)).await.unwrap();
        assert!(holders_at(&PORTS, &key("compose")) >= 3);
        lock.release().await.unwrap();

        // One container killed, one paused: three of five still grant locks,
        // and the paused one is not waited for.
        compose.run(&["kill", "redis3"]);
        compose.run(&["pause", "redis4"]);
        let started = Instant::now();
        let lock = redlock
            .lock("compose", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            started.elapsed() < node_timeout / 2,
            "{:?}",
            started.elapsed()
        );
        assert_eq!(holders_at(&[7001, 7002, 7005], &key("compose")), 3);
        lock.release().await.unwrap();

        // A third node down: a clear error, nothing held on the live ones.
        compose.run(&["kill", "redis5"]);
        let err = redlock
            .lock("compose", Duration::from_secs(10))
            .await
            .unwrap_err();
        assert_eq!(err.report().unwrap().needed(), 3, "{err}");
        assert_eq!(holders_at(&[7001, 7002], &key("compose")), 0, "{err}");

        // Everyone back: the client reconnects by itself.
        compose.run(&["unpause", "redis4"]);
        compose.run(&["start", "redis3", "redis5"]);
        await_ping(&PORTS);
        let lock = redlock
            .lock("compose", Duration::from_secs(10))
            .await
            .unwrap();
        lock.release().await.unwrap();
    });
}

/// The `sentinel` profile's nodes: service, master name, sentinel ports,
/// primary port, replica port (see `docker-compose.yml`).
const SENTINEL_NODES: [(&str, &str, [u16; 3], u16, u16); 3] = [
    ("sentinel1", "node1", [26111, 26112, 26113], 7111, 7112),
    ("sentinel2", "node2", [26121, 26122, 26123], 7121, 7122),
    ("sentinel3", "node3", [26131, 26132, 26133], 7131, 7132),
];

/// The `cluster` profile's nodes: service and the ports of its six servers.
const CLUSTER_NODES: [(&str, [u16; 6]); 3] = [
    ("cluster1", [7211, 7212, 7213, 7214, 7215, 7216]),
    ("cluster2", [7221, 7222, 7223, 7224, 7225, 7226]),
    ("cluster3", [7231, 7232, 7233, 7234, 7235, 7236]),
];

fn text(reply: &Reply) -> Option<String> {
    match reply {
        Reply::Bulk(Some(b)) => Some(String::from_utf8_lossy(b).into_owned()),
        Reply::Status(s) => Some(s.clone()),
        Reply::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// `ROLE`'s first word on `port` ("master", "slave"), if it answers.
fn role(port: u16) -> Option<String> {
    match command_with_timeout(port, &["ROLE"], Duration::from_secs(1)) {
        Ok(Reply::Array(Some(items))) => items.first().and_then(text),
        _ => None,
    }
}

/// The primary's port as the sentinel on `port` reports it for `name`.
fn sentinel_primary(port: u16, name: &str) -> Option<u16> {
    let args = ["SENTINEL", "GET-MASTER-ADDR-BY-NAME", name];
    match command_with_timeout(port, &args, Duration::from_secs(1)) {
        Ok(Reply::Array(Some(items))) if items.len() == 2 => {
            assert_eq!(text(&items[0]).as_deref(), Some("127.0.0.1"));
            text(&items[1])?.parse().ok()
        }
        _ => None,
    }
}

/// Waits (up to `limit`) until `done` says yes; panics saying `what`.
fn await_until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not after {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many Sentinel-managed nodes hold `key` on the primary their sentinels
/// name now (a replica's copy does not count).
fn sentinel_holders(key: &str) -> usize {
    SENTINEL_NODES
        .iter()
        .filter(|(_, name, sentinels, _, _)| {
            sentinel_primary(sentinels[0], name).is_some_and(|p| holders_at(&[p], key) == 1)
        })
        .count()
}

/// How many clusters hold the lock of plain key `key` (tagged there): on the
/// primary that serves its slot, the
/// only server that answers `GET` (the others answer `MOVED`).
fn cluster_holders(key: &str) -> usize {
    let key = tagged(key);
    CLUSTER_NODES
        .iter()
        .filter(|(_, ports)| holders_at(ports, &key) > 0)
        .count()
}

/// The key of `key` on a Redlock with a cluster node: in a hash tag, so
/// that the lock's side keys share its slot (see the README's "Redis
/// Cluster nodes").
fn tagged(key: &str) -> String {
    format!("{{{key}}}")
}

/// Locks `resource` (with a short TTL, so that a node the restart guard
/// keeps out after a failover is back soon) until `holders` counts it on
/// all three nodes, for up to `limit`; each lock is released.
async fn await_held_everywhere(
    redlock: &Redlock,
    resource: &str,
    holders: fn(&str) -> usize,
    limit: Duration,
) {
    let start = Instant::now();
    loop {
        let lock = redlock
            .lock(resource, Duration::from_secs(3))
            .await
            .unwrap();
        let n = holders(&key(resource));
        lock.release().await.unwrap();
        if n == 3 {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "the lock was never on all three nodes after {limit:?} (last: {n})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A `Redlock` on the profile's three URLs, with what to enable if the form
/// is not supported.
fn profile_redlock(urls: &[String], feature: &str) -> Redlock {
    Redlock::builder()
        .nodes(urls)
        .node_timeout(Duration::from_secs(2))
        .retry_count(0)
        .build()
        .unwrap_or_else(|e| panic!("{urls:?} (needs the `{feature}` feature): {e}"))
}

#[test]
fn the_compose_sentinel_profile_grants_locks_through_a_failover() {
    if let Err(reason) = docker_or_skip() {
        eprintln!("SKIPPED the compose sentinel test: {reason}");
        return;
    }
    let services: Vec<&str> = SENTINEL_NODES.iter().map(|n| n.0).collect();
    let project = format!("redquorumsentinel{}", std::process::id());
    let compose = Compose::up_profile(&project, "sentinel", &services);
    // Their primaries were brought up empty (see `Compose::up`).
    for (_, _, _, primary, _) in SENTINEL_NODES {
        declare_born_empty(primary, &[primary]).unwrap();
    }

    let urls: Vec<String> = SENTINEL_NODES
        .iter()
        .map(|(_, name, [a, b, c], _, _)| {
            format!("redis+sentinel://127.0.0.1:{a},127.0.0.1:{b},127.0.0.1:{c}/{name}")
        })
        .collect();
    let redlock = profile_redlock(&urls, "sentinel");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let lock = redlock
            .lock("sentinel", Duration::from_secs(3))
            .await
            .unwrap();
        assert!(sentinel_holders(&key("sentinel")) >= 2);
        lock.release().await.unwrap();

        // node2's sentinels promote its replica, as a user would ask them.
        let (service, name, sentinels, primary, replica) = SENTINEL_NODES[1];
        let port = sentinels[0].to_string();
        let reply = compose.redis_cli(service, &["-p", &port, "SENTINEL", "FAILOVER", name]);
        assert_eq!(reply, "OK");
        await_until(Duration::from_secs(20), "node2's failover", || {
            sentinels
                .iter()
                .all(|&s| sentinel_primary(s, name) == Some(replica))
                && role(replica).as_deref() == Some("master")
        });
        assert_ne!(sentinel_primary(sentinels[0], name), Some(primary));

        // A majority is untouched: locking works at once; and the new
        // primary gets the keys once the client has followed the failover
        // (its restart guard keeps it out until our keys could have expired).
        let lock = redlock
            .lock("sentinel", Duration::from_secs(3))
            .await
            .unwrap();
        lock.release().await.unwrap();
        await_held_everywhere(
            &redlock,
            "sentinel",
            sentinel_holders,
            Duration::from_secs(30),
        )
        .await;
    });
}

#[test]
fn the_compose_cluster_profile_grants_locks_through_a_failover() {
    if let Err(reason) = docker_or_skip() {
        eprintln!("SKIPPED the compose cluster profile test: {reason}");
        return;
    }
    let services: Vec<&str> = CLUSTER_NODES.iter().map(|n| n.0).collect();
    let project = format!("redquorumcluster{}", std::process::id());
    let compose = Compose::up_profile(&project, "cluster", &services);
    // Their primaries were brought up empty (see `Compose::up`); the set
    // goes to the primary of its key's slot, which alone takes it.
    for (_, ports) in CLUSTER_NODES {
        let primaries: Vec<u16> = ports
            .into_iter()
            .filter(|&p| role(p).as_deref() == Some("master"))
            .collect();
        assert!(
            primaries
                .iter()
                .any(|&on| declare_born_empty(on, &primaries).is_ok()),
            "no primary of {ports:?} took the born-empty set"
        );
    }

    let urls: Vec<String> = CLUSTER_NODES
        .iter()
        .map(|(_, [a, b, c, ..])| {
            format!("redis+cluster://127.0.0.1:{a},127.0.0.1:{b},127.0.0.1:{c}")
        })
        .collect();
    let redlock = profile_redlock(&urls, "cluster");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let lock = redlock
            .lock("cluster", Duration::from_secs(3))
            .await
            .unwrap();
        assert!(cluster_holders(&key("cluster")) >= 2);
        lock.release().await.unwrap();

        // In cluster2, the replica of the primary that serves the lock's key
        // takes over (CLUSTER FAILOVER, the coordinated manual failover).
        let (service, ports) = CLUSTER_NODES[1];
        let (primary, replica) = slot_primary_and_replica(ports[0], &tagged(&key("cluster")));
        let reply = compose.redis_cli(
            service,
            &["-p", &replica.to_string(), "CLUSTER", "FAILOVER"],
        );
        assert_eq!(reply, "OK");
        await_until(Duration::from_secs(20), "cluster2's failover", || {
            role(replica).as_deref() == Some("master") && role(primary).as_deref() == Some("slave")
        });

        let lock = redlock
            .lock("cluster", Duration::from_secs(3))
            .await
            .unwrap();
        lock.release().await.unwrap();
        await_held_everywhere(
            &redlock,
            "cluster",
            cluster_holders,
            Duration::from_secs(30),
        )
        .await;
    });
}

/// The ports of the primary that serves `key`'s slot in the cluster that
/// `port` belongs to, and of its replica (from `CLUSTER NODES`).
fn slot_primary_and_replica(port: u16, key: &str) -> (u16, u16) {
    let timeout = Duration::from_secs(2);
    let slot: u16 = match command_with_timeout(port, &["CLUSTER", "KEYSLOT", key], timeout) {
        Ok(Reply::Int(slot)) => slot.try_into().unwrap(),
        other => panic!("CLUSTER KEYSLOT: {other:?}"),
    };
    let nodes = command_with_timeout(port, &["CLUSTER", "NODES"], timeout)
        .ok()
        .as_ref()
        .and_then(text)
        .expect("CLUSTER NODES");
    // <id> <ip:port@bus> <flags> <primary id or -> <ping> <pong> <epoch> <link> <slots>...
    let lines: Vec<Vec<&str>> = nodes.lines().map(|l| l.split(' ').collect()).collect();
    let port_of = |f: &[&str]| -> u16 {
        let addr = f[1].split('@').next().unwrap();
        addr.rsplit(':').next().unwrap().parse().unwrap()
    };
    let serves = |range: &str| match range.split_once('-') {
        Some((a, b)) => (a.parse().unwrap()..=b.parse().unwrap()).contains(&slot),
        None => range.parse() == Ok(slot),
    };
    let primary = lines
        .iter()
        .find(|f| f[2].contains("master") && f[8..].iter().any(|r| serves(r)))
        .unwrap_or_else(|| panic!("no primary serves slot {slot}:\n{nodes}"));
    let replica = lines
        .iter()
        .find(|f| f[3] == primary[0])
        .unwrap_or_else(|| panic!("no replica of {}:\n{nodes}", primary[1]));
    (port_of(primary), port_of(replica))
}
