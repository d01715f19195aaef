//! The `docker-compose.yml` servers, driven from tests: a project brought up
//! with a locally built image and taken down on drop. The same for the
//! `sentinel` and `servers` profiles ([`Compose::up_profile`]).
//!
//! The image is `$REDQUORUM_REDIS_IMAGE` if set; otherwise it is built from
//! this machine's `redis-server` by `scripts/build-local-image.sh`, since no
//! registry may be reachable. Where no Docker engine answers, a test says
//! SKIPPED on stderr and passes, unless `REDQUORUM_REQUIRE_DOCKER=1` (set by
//! `.ci/run` on machines that have an engine), which makes it fail instead.

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use redquorum::local_servers::{Reply, command_with_timeout, declare_born_empty};

/// The host ports of the five services, `redis1`..`redis5`.
pub const PORTS: [u16; 5] = [7001, 7002, 7003, 7004, 7005];

/// A running compose project, taken down on drop.
pub struct Compose {
    pub project: String,
    image: String,
    /// `--profile <name>`, or nothing for the default services.
    profile: Vec<String>,
}

impl Compose {
    /// Brings the project `project` up and waits until every node answers.
    pub fn up(project: &str) -> Compose {
        let compose = Compose {
            project: project.to_owned(),
            image: image(),
            profile: Vec::new(),
        };
        ports_free(&PORTS);
        compose.run(&["up", "-d"]);
        await_ping(&PORTS);
        // Brought up empty: nothing for the restart guard to hold against
        // their young uptime. A container restarted later is not declared.
        for port in PORTS {
            declare_born_empty(port, &[port]).expect("declare the node born empty");
        }
        compose
    }

    /// Brings up only `services` of profile `profile` (not the default five)
    /// as the project `project`, and waits until every one is healthy: its
    /// entry script says the node is ready (`/tmp/ready`, see
    /// `scripts/compose/`). Taken down on drop, also when this panics.
    pub fn up_profile(project: &str, profile: &str, services: &[&str]) -> Compose {
        let compose = Compose {
            project: project.to_owned(),
            image: image(),
            profile: vec!["--profile".to_owned(), profile.to_owned()],
        };
        let mut args = vec!["up", "-d"];
        args.extend(services);
        compose.run(&args);
        compose.await_healthy(services, Duration::from_secs(60));
        compose
    }

    /// Waits (up to `limit`) until every one of `services` is healthy;
    /// panics with its log if one exits or the wait runs out.
    pub fn await_healthy(&self, services: &[&str], limit: Duration) {
        let start = Instant::now();
        for service in services {
            let container = self.container(service);
            loop {
                let out = Command::new("docker")
                    .args([
                        "inspect",
                        "-f",
                        "{{.State.Status}} {{.State.Health.Status}}",
                    ])
                    .arg(&container)
                    .output()
                    .expect("cannot run docker");
                let state = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                if state == "running healthy" {
                    break;
                }
                if !state.starts_with("running") || start.elapsed() > limit {
                    let logs = Command::new("docker")
                        .args(["logs", "--tail", "30", &container])
                        .output()
                        .map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                        .unwrap_or_default();
                    panic!(
                        "{container} is not healthy after {:?} ({state}); its log ends:\n{logs}",
                        start.elapsed()
                    );
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }

    /// Runs `docker-compose -p <project> <args>` and expects it to succeed.
    pub fn run(&self, args: &[&str]) {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let status = Command::new("docker-compose")
            .current_dir(root)
            .args(["-p", &self.project])
            .args(&self.profile)
            .args(args)
            .env("REDQUORUM_REDIS_IMAGE", &self.image)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("cannot run docker-compose");
        assert!(status.success(), "docker-compose {args:?} failed: {status}");
    }

    /// The container of service `service` (`redis1`..), as docker-compose v1
    /// names it.
    pub fn container(&self, service: &str) -> String {
        format!("{}_{service}_1", self.project)
    }

    /// The project's default network.
    pub fn network(&self) -> String {
        format!("{}_default", self.project)
    }

    /// Runs `redis-cli <args>` inside the container of `service`, as a user
    /// would with `docker exec`, and returns its output.
    pub fn redis_cli(&self, service: &str, args: &[&str]) -> String {
        let out = Command::new("docker")
            .args(["exec", &self.container(service), "redis-cli"])
            .args(args)
            .output()
            .expect("cannot run docker");
        assert!(
            out.status.success(),
            "docker exec {service} redis-cli {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

impl Drop for Compose {
    fn drop(&mut self) {
        let _ = Command::new("docker-compose")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["-p", &self.project])
            .args(&self.profile)
            .args(["down", "-v", "-t", "1"])
            .env("REDQUORUM_REDIS_IMAGE", &self.image)
            .status();
    }
}

/// Whether the tests can use Docker: `Ok` when an engine answers; `Err`
/// with the reason when none does and none is required (the caller then
/// says SKIPPED). Panics when `REDQUORUM_REQUIRE_DOCKER=1` and none answers.
pub fn docker_or_skip() -> Result<(), String> {
    let answers = Command::new("docker")
        .arg("info")
        .output()
        .is_ok_and(|o| o.status.success());
    if answers {
        return Ok(());
    }
    assert!(
        std::env::var("REDQUORUM_REQUIRE_DOCKER").as_deref() != Ok("1"),
        "REDQUORUM_REQUIRE_DOCKER=1 but no Docker engine answers `docker info`"
    );
    Err("no Docker engine answers `docker info`".to_owned())
}

/// The image, built once per test binary (its tests bring projects up in
/// parallel).
fn image() -> String {
    static IMAGE: OnceLock<String> = OnceLock::new();
    IMAGE.get_or_init(build_image).clone()
}

fn build_image() -> String {
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

/// Panics at once, saying why and what to do, if something already listens
/// on one of `ports` of 127.0.0.1: the project could not publish it, and
/// the test would otherwise fail later, or talk to the wrong servers. The
/// usual cause is a `redquorum servers up` set (its default ports are the
/// compose set's, 7001-7005), or a compose project a killed test left up.
pub fn ports_free(ports: &[u16]) {
    let taken: Vec<u16> = ports
        .iter()
        .copied()
        .filter(|&port| {
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        })
        .collect();
    assert!(
        taken.is_empty(),
        "the compose test needs host ports {ports:?} free, and something listens on {taken:?}: \
         stop a local set started with `redquorum servers up` (`redquorum servers down`), or a \
         compose project left running (`docker ps`, then `docker-compose -p <project> down`)"
    );
}

fn ping(port: u16) -> bool {
    command_with_timeout(port, &["PING"], Duration::from_millis(500))
        .is_ok_and(|r| r == Reply::Status("PONG".into()))
}

/// Waits (up to a minute) until every port answers `PING`.
pub fn await_ping(ports: &[u16]) {
    let start = Instant::now();
    while !ports.iter().all(|&p| ping(p)) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "compose nodes never answered PING"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
