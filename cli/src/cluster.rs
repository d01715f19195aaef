//! `redquorum cluster up|down|ls`: a local cluster of `redis-server`
//! processes to try things out with, started by the launcher the tests use
//! and left running until `cluster down`.
//!
//! What was started is remembered in `$TMPDIR/redquorum-cluster-<uid>/`
//! (this user's, closed to others), one file per node named by its port,
//! holding its pid and directory. A node is stopped only if that pid is
//! still the server on its port (it answers there, or its command line
//! names the port), and only directories the launcher made are removed.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redquorum::local_cluster::{DetachedNode, LocalCluster, answering_pid};

use crate::args::{Cluster, ClusterUp};
use crate::{exit, fail};

pub fn cluster(command: Cluster) -> u8 {
    let result = match command {
        Cluster::Up(up) => self::up(&up),
        Cluster::Down => down(),
        Cluster::Ls => ls(),
    };
    result.unwrap_or_else(|e| fail(exit::FAILURE, e))
}

/// Where the started nodes are remembered: a directory of this user's own
/// in the temp dir.
fn state_dir() -> PathBuf {
    // SAFETY: a plain query.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("redquorum-cluster-{uid}"))
}

/// The state directory, made if missing; refused unless it is ours and
/// closed to others (anyone could otherwise plant records in it).
fn checked_state_dir() -> Result<PathBuf, String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let dir = state_dir();
    let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("cannot use {dir:?}: {e}"))?;
    // SAFETY: a plain query.
    let uid = unsafe { libc::getuid() };
    if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{dir:?} is not a directory of this user's closed to others: remove it"
        ));
    }
    Ok(dir)
}

fn up(up: &ClusterUp) -> Result<u8, String> {
    let last = u32::from(up.base_port) + u32::from(up.nodes) - 1;
    if up.base_port == 0 || last > u32::from(u16::MAX) {
        return Ok(fail(
            exit::USAGE,
            format!("ports {}..={last} are not all valid ports", up.base_port),
        ));
    }
    let ports: Vec<u16> = (up.base_port..=last as u16).collect();
    let state = checked_state_dir()?;
    let nodes = LocalCluster::start_detached(&ports).map_err(|e| format!("cannot start: {e}"))?;
    for node in &nodes {
        let file = state.join(node.port.to_string());
        let record = format!("{}\n{}\n", node.pid, node.dir.display());
        std::fs::write(&file, record).map_err(|e| format!("cannot write {file:?}: {e}"))?;
    }
    println!(
        "started {} redis-server processes on 127.0.0.1 (no persistence):",
        nodes.len()
    );
    let urls: Vec<String> = nodes.iter().map(url).collect();
    for (node, url) in nodes.iter().zip(&urls) {
        println!("  {url}  (pid {})", node.pid);
    }
    println!("\nexport REDQUORUM_NODES={}", urls.join(","));
    println!("stop them with: redquorum cluster down");
    Ok(0)
}

fn url(node: &DetachedNode) -> String {
    format!("redis://127.0.0.1:{}", node.port)
}

/// The nodes remembered, in port order.
fn remembered() -> Result<Vec<DetachedNode>, String> {
    if !state_dir().exists() {
        return Ok(Vec::new());
    }
    let state = checked_state_dir()?;
    let entries = std::fs::read_dir(&state).map_err(|e| format!("cannot read {state:?}: {e}"))?;
    let mut nodes = Vec::new();
    for entry in entries.flatten() {
        let Some(port) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        let mut lines = text.lines();
        let (Some(pid), Some(dir)) = (lines.next().and_then(|p| p.parse().ok()), lines.next())
        else {
            continue;
        };
        nodes.push(DetachedNode {
            port,
            pid,
            dir: dir.into(),
        });
    }
    nodes.sort_by_key(|n| n.port);
    Ok(nodes)
}

fn ls() -> Result<u8, String> {
    let nodes = remembered()?;
    if nodes.is_empty() {
        println!("no local cluster is up (start one with: redquorum cluster up)");
        return Ok(0);
    }
    for node in &nodes {
        let up = answering_pid(node.port) == Some(node.pid);
        let state = if up { "up" } else { "down" };
        println!("  {}  pid {:<8} {state}", url(node), node.pid);
    }
    let urls: Vec<String> = nodes.iter().map(url).collect();
    println!("\nexport REDQUORUM_NODES={}", urls.join(","));
    Ok(0)
}

fn down() -> Result<u8, String> {
    let nodes = remembered()?;
    if nodes.is_empty() {
        println!("no local cluster is up");
        return Ok(0);
    }
    let mut code = 0;
    for node in &nodes {
        if !ours(node) {
            println!("  {} was not running", url(node));
        } else if stop(node.pid) {
            println!("  stopped {}", url(node));
        } else {
            code = fail(
                exit::FAILURE,
                format!(
                    "{} (pid {}) did not stop, even after SIGKILL",
                    url(node),
                    node.pid
                ),
            );
            continue;
        }
        // Only a directory the launcher made: redquorum-… in the temp dir.
        let made_by_launcher = node.dir.parent() == Some(std::env::temp_dir().as_path())
            && node
                .dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("redquorum-"));
        if made_by_launcher {
            let _ = std::fs::remove_dir_all(&node.dir);
        }
        let _ = std::fs::remove_file(state_dir().join(node.port.to_string()));
    }
    Ok(code)
}

/// Whether the node's pid is still the server we started: it answers on
/// the port, or (frozen, or too busy to answer) its command line names it.
fn ours(node: &DetachedNode) -> bool {
    if answering_pid(node.port) == Some(node.pid) {
        return true;
    }
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", node.pid)).unwrap_or_default();
    let port = format!("--port\0{}\0", node.port);
    cmdline.windows(port.len()).any(|w| w == port.as_bytes())
}

/// Stops a server: SIGTERM (and SIGCONT, should it be frozen), SIGKILL
/// after five seconds. Whether it is gone.
fn stop(pid: u32) -> bool {
    let pid = pid as libc::pid_t;
    let gone = || {
        // Gone, or a zombie its reaper has not collected.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
    };
    // SAFETY: signals to the server we started, checked by `ours`.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
        libc::kill(pid, libc::SIGCONT);
    }
    let start = Instant::now();
    let mut killed = false;
    while !gone() {
        if start.elapsed() > Duration::from_secs(5) && !killed {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            killed = true;
        }
        if start.elapsed() > Duration::from_secs(10) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
