//! The `docker-compose.yml` cluster, for real: five containers on host ports
//! 7001–7005, locked through, with one container killed and one paused.
//!
//! The image is `$REDQUORUM_REDIS_IMAGE` if set; otherwise it is built from
//! this machine's `redis-server` by `scripts/build-local-image.sh`, since no
//! registry may be reachable. Where no Docker engine answers, the test says
//! SKIPPED on stderr and passes, unless `REDQUORUM_REQUIRE_DOCKER=1` (set by
//! `.ci/run` on machines that have an engine), which makes it fail instead.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use redquorum::Redlock;
use redquorum::local_cluster::{Reply, command_with_timeout};

const PORTS: [u16; 5] = [7001, 7002, 7003, 7004, 7005];

/// A running compose project, taken down on drop.
struct Compose {
    project: String,
    image: String,
}

impl Compose {
    fn run(&self, args: &[&str]) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new("docker-compose")
            .current_dir(root)
            .args(["-p", &self.project])
            .args(args)
            .env("REDQUORUM_REDIS_IMAGE", &self.image)
            .status()
            .expect("cannot run docker-compose");
        assert!(status.success(), "docker-compose {args:?} failed: {status}");
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = Command::new("docker-compose")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["-p", &self.project, "down", "-v", "-t", "1"])
            .env("REDQUORUM_REDIS_IMAGE", &self.image)
            .status();
    }
}

fn docker_answers() -> bool {
    Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn image() -> String {
    if let Ok(image) = std::env::var("REDQUORUM_REDIS_IMAGE") {
        return image;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-local-image.sh");
    let out = Command::new("bash")
        .arg(script)
        .output()
        .expect("cannot run bash");
    assert!(
        out.status.success(),
        "building the local image failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

fn ping(port: u16) -> bool {
    command_with_timeout(port, &["PING"], Duration::from_millis(500))
        .is_ok_and(|r| r == Reply::Status("PONG".into()))
}

fn await_ping(ports: &[u16]) {
    let start = Instant::now();
    while !ports.iter().all(|&p| ping(p)) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "compose nodes never answered PING"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

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
    if !docker_answers() {
        assert!(
            std::env::var("REDQUORUM_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "REDQUORUM_REQUIRE_DOCKER=1 but no Docker engine answers `docker info`"
        );
        eprintln!("SKIPPED the compose cluster test: no Docker engine answers `docker info`");
        return;
    }
    let compose = Compose {
        project: format!("redquorumtest{}", std::process::id()),
        image: image(),
    };
    compose.run(&["up", "-d"]);
    await_ping(&PORTS);

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
