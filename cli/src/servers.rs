//! `redquorum servers up|down|ls`: local sets of `redis-server`
//! processes to try things out with, started by the launcher the tests use
//! and left running until `servers down`.
//!
//! What was started is remembered in `$TMPDIR/redquorum-servers-<uid>/`
//! (this user's, closed to others): one directory per set, named by its
//! `--base-port`, holding one file per node named by its port, with its
//! pid and directory. A node is stopped only if that pid is still the
//! server on its port (it answers there, or its command line names the
//! port), and only directories the launcher made are removed. `up` on a
//! set that exists restarts its dead nodes (not declared born empty: see
//! `LocalServers::restart_detached`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redquorum::local_servers::{DetachedNode, LocalServers, answering_pid};

use crate::args::{Servers, ServersUp};
use crate::{exit, fail};

pub fn servers(command: Servers) -> u8 {
    let result = match command {
        Servers::Up(up) => self::up(&up),
        Servers::Down(set) => down(set.base_port),
        Servers::Ls(set) => ls(set.base_port),
    };
    result.unwrap_or_else(|e| fail(exit::FAILURE, e))
}

/// Where the started nodes are remembered: a directory of this user's own
/// in the temp dir.
fn state_dir() -> PathBuf {
    // SAFETY: a plain query.
    let uid = unsafe { libc::getuid() };
    std::env::temp_dir().join(format!("redquorum-servers-{uid}"))
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

/// The nodes of one `servers up`, named by its base port.
struct Set {
    base: u16,
    nodes: Vec<DetachedNode>,
}

impl Set {
    fn dir(&self) -> PathBuf {
        state_dir().join(self.base.to_string())
    }

    fn export_line(&self) -> String {
        let urls: Vec<String> = self.nodes.iter().map(url).collect();
        format!("export REDQUORUM_NODES={}", urls.join(","))
    }
}

fn up(up: &ServersUp) -> Result<u8, String> {
    let last = u32::from(up.base_port) + u32::from(up.nodes) - 1;
    if up.base_port == 0 || last > u32::from(u16::MAX) {
        return Ok(fail(
            exit::USAGE,
            format!("ports {}..={last} are not all valid ports", up.base_port),
        ));
    }
    let ports: Vec<u16> = (up.base_port..=last as u16).collect();
    let state = checked_state_dir()?;
    let sets = sets(None)?;
    for set in sets.iter().filter(|set| set.base != up.base_port) {
        if set.nodes.iter().any(|n| ports.contains(&n.port)) {
            return Ok(fail(
                exit::USAGE,
                format!(
                    "ports {}..={last} overlap the set started with --base-port {}: give \
                     another --base-port, or stop that set first (redquorum servers down \
                     --base-port {})",
                    up.base_port, set.base, set.base
                ),
            ));
        }
    }
    if let Some(set) = sets.into_iter().find(|set| set.base == up.base_port) {
        return restart_dead(set, &ports);
    }
    let dir = state.join(up.base_port.to_string());
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot make {dir:?}: {e}"))?;
    let nodes = LocalServers::start_detached(&ports).map_err(|e| {
        let _ = std::fs::remove_dir(&dir);
        format!("cannot start: {e}")
    })?;
    record(&dir, &nodes)?;
    println!(
        "started {} redis-server processes on 127.0.0.1 (no persistence):",
        nodes.len()
    );
    let set = Set {
        base: up.base_port,
        nodes,
    };
    for node in &set.nodes {
        println!("  {}  (pid {})", url(node), node.pid);
    }
    println!("\n{}", set.export_line());
    println!(
        "stop them with: redquorum servers down --base-port {}",
        set.base
    );
    Ok(0)
}

/// `up` on a set that exists: its nodes that are down are started again on
/// their ports, empty, and not declared born empty.
fn restart_dead(mut set: Set, ports: &[u16]) -> Result<u8, String> {
    let recorded: Vec<u16> = set.nodes.iter().map(|n| n.port).collect();
    if recorded != ports {
        return Ok(fail(
            exit::USAGE,
            format!(
                "the set started with --base-port {} has {} nodes: give --nodes {}, or stop it \
                 first (redquorum servers down --base-port {})",
                set.base,
                recorded.len(),
                recorded.len(),
                set.base
            ),
        ));
    }
    let mut dead = Vec::new();
    for node in &set.nodes {
        if answering_pid(node.port) == Some(node.pid) {
            continue;
        }
        if ours(node) {
            return Ok(fail(
                exit::FAILURE,
                format!(
                    "{} (pid {}) runs but does not answer (frozen, or too busy): \
                     `kill -CONT {}`, or stop the set (redquorum servers down --base-port {})",
                    url(node),
                    node.pid,
                    node.pid,
                    set.base
                ),
            ));
        }
        dead.push(node.port);
    }
    if dead.is_empty() {
        println!(
            "the set on --base-port {} is up already ({} nodes):",
            set.base,
            set.nodes.len()
        );
    } else {
        let restarted =
            LocalServers::restart_detached(&dead).map_err(|e| format!("cannot restart: {e}"))?;
        for node in set.nodes.iter_mut() {
            if let Some(new) = restarted.iter().find(|n| n.port == node.port) {
                remove_node_dir(&node.dir);
                *node = new.clone();
            }
        }
        record(&set.dir(), &restarted)?;
        println!(
            "restarted {} of the {} nodes on --base-port {}, empty (clients give each no vote \
             on acquisitions for a TTL: it may have forgotten locks):",
            restarted.len(),
            set.nodes.len(),
            set.base
        );
    }
    for node in &set.nodes {
        println!("  {}  (pid {})", url(node), node.pid);
    }
    println!("\n{}", set.export_line());
    Ok(0)
}

/// Writes a record per node into the set's directory `dir`.
fn record(dir: &Path, nodes: &[DetachedNode]) -> Result<(), String> {
    for node in nodes {
        let file = dir.join(node.port.to_string());
        let record = format!("{}\n{}\n", node.pid, node.dir.display());
        std::fs::write(&file, record).map_err(|e| format!("cannot write {file:?}: {e}"))?;
    }
    Ok(())
}

fn url(node: &DetachedNode) -> String {
    format!("redis://127.0.0.1:{}", node.port)
}

/// The sets remembered, by base port (only the set on `only` if given),
/// each node in port order.
fn sets(only: Option<u16>) -> Result<Vec<Set>, String> {
    if !state_dir().exists() {
        return Ok(Vec::new());
    }
    let state = checked_state_dir()?;
    let entries = std::fs::read_dir(&state).map_err(|e| format!("cannot read {state:?}: {e}"))?;
    let mut sets = Vec::new();
    for entry in entries.flatten() {
        let Some(base) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !entry.path().is_dir() || only.is_some_and(|only| only != base) {
            continue;
        }
        sets.push(Set {
            base,
            nodes: remembered(&entry.path())?,
        });
    }
    sets.sort_by_key(|set| set.base);
    Ok(sets)
}

/// The nodes remembered in a set's directory, in port order.
fn remembered(dir: &Path) -> Result<Vec<DetachedNode>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {dir:?}: {e}"))?;
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

/// What is listed or stopped when none is: one set's words, or every set's.
fn none_up(only: Option<u16>) -> String {
    match only {
        Some(base) => format!("no local set of servers is up on --base-port {base}"),
        None => "no local set of servers is up".to_owned(),
    }
}

fn ls(only: Option<u16>) -> Result<u8, String> {
    let sets = sets(only)?;
    if sets.is_empty() {
        println!("{} (start one with: redquorum servers up)", none_up(only));
        return Ok(0);
    }
    for (i, set) in sets.iter().enumerate() {
        if i > 0 {
            println!();
        }
        println!("--base-port {}:", set.base);
        for node in &set.nodes {
            let up = answering_pid(node.port) == Some(node.pid);
            let state = if up { "up" } else { "down" };
            println!("  {}  pid {:<8} {state}", url(node), node.pid);
        }
        println!("\n{}", set.export_line());
    }
    Ok(0)
}

fn down(only: Option<u16>) -> Result<u8, String> {
    let sets = sets(only)?;
    if sets.is_empty() {
        println!("{}", none_up(only));
        return Ok(0);
    }
    let mut code = 0;
    for set in &sets {
        let mut left = false;
        for node in &set.nodes {
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
                left = true;
                continue;
            }
            remove_node_dir(&node.dir);
            let _ = std::fs::remove_file(set.dir().join(node.port.to_string()));
        }
        if !left {
            let _ = std::fs::remove_dir(set.dir());
        }
    }
    Ok(code)
}

/// Removes a node's directory, if the launcher made it: redquorum-… in the
/// temp dir.
fn remove_node_dir(dir: &Path) {
    let made_by_launcher = dir.parent() == Some(std::env::temp_dir().as_path())
        && dir
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("redquorum-"));
    if made_by_launcher {
        let _ = std::fs::remove_dir_all(dir);
    }
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
