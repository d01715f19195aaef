//! The `docker-compose.yml` cluster, for real: five containers on host ports
//! 7001–7005, locked through, with one container killed and one paused.
//!
//! See `common::compose` for the image and for what happens where no Docker
//! engine answers.

mod common;

use std::time::{Duration, Instant};

use common::compose::{Compose, PORTS, await_ping, docker_or_skip};
use common::*;
use redquorum::Redlock;
use redquorum::local_cluster::{Reply, command_with_timeout};

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

#[test]
fn the_compose_cluster_grants_locks_through_a_kill_and_a_pause() {
    if let Err(reason) = docker_or_skip() {
        eprintln!("SKIPPED the compose cluster test: {reason}");
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
