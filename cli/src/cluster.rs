//! `redquorum cluster up|down|ls`: a local cluster of `redis-server`
//! processes to try things out with, started by the launcher the tests use
//! and left running until `cluster down`.
//!
//! What was started is remembered in `$TMPDIR/redquorum-cluster/`, one file
//! per node named by its port, holding its pid and directory. A node is
//! stopped only if the process answering on its port is still that pid.

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

/// Where the started nodes are remembered.
fn state_dir() -> PathBuf {
    std::env::temp_dir().join("redquorum-cluster")
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
    let state = state_dir();
    std::fs::create_dir_all(&state).map_err(|e| format!("cannot create {state:?}: {e}"))?;
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
    let state = state_dir();
    let entries = match std::fs::read_dir(&state) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("cannot read {state:?}: {e}")),
    };
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
        if answering_pid(node.port) == Some(node.pid) {
            // SAFETY: a signal to the process that answers on the node's
            // port with the pid we started there.
            unsafe {
                libc::kill(node.pid as libc::pid_t, libc::SIGTERM);
            }
            let start = Instant::now();
            while answering_pid(node.port).is_some() {
                if start.elapsed() > Duration::from_secs(10) {
                    code = fail(
                        exit::FAILURE,
                        format!("{} (pid {}) did not stop within 10 s", url(node), node.pid),
                    );
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let _ = std::fs::remove_dir_all(&node.dir);
        let _ = std::fs::remove_file(state_dir().join(node.port.to_string()));
        println!("  stopped {}", url(node));
    }
    Ok(code)
}
