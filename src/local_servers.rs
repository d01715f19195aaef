//! Real `redis-server` processes on this machine, for tests, the quickstart
//! and the benchmarks (feature `local-servers`).
//!
//! [`LocalServers::start`] launches N nodes on free loopback ports, each with
//! no persistence (`--save "" --appendonly no`) in a temp dir of its own, and
//! waits until each answers `PING`. A node can be killed (SIGKILL), frozen
//! (SIGSTOP), thawed (SIGCONT) and restarted on the same port, empty. Dropping
//! the set stops every node and removes the temp dirs, also while a test
//! panics.
//!
//! The binary is `$REDQUORUM_REDIS_SERVER` if set, else `redis-server` from
//! the `PATH`.
//!
//! [`command`] is a tiny blocking RESP client, to look at a node's keys or
//! reconfigure it from a test without going through the lock.

use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::info::info_field;
use crate::net::guard::BORN_EMPTY_KEY;

/// How long a node may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How many fresh ports to try when a port is lost to a race.
const PORT_TRIES: usize = 20;

/// A set of local `redis-server` processes; stopped on drop.
#[derive(Debug)]
pub struct LocalServers {
    binary: PathBuf,
    extra_args: Vec<String>,
    nodes: Vec<LocalNode>,
}

#[derive(Debug)]
struct LocalNode {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// Extra environment for this node's process, kept across restarts.
    env: Vec<(String, String)>,
}

impl LocalServers {
    /// Starts `n` nodes and waits until each answers `PING`.
    ///
    /// # Errors
    /// When `redis-server` cannot be found (the message says how to install
    /// it) or a node does not come up (the message has its log's tail).
    pub fn start(n: usize) -> io::Result<LocalServers> {
        Self::start_with_args(n, &[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments for
    /// every node (for example `["--maxmemory", "1mb"]`).
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_with_args(n: usize, extra_args: &[&str]) -> io::Result<LocalServers> {
        let binary = find_redis_server(std::env::var_os("REDQUORUM_REDIS_SERVER"))?;
        let mut servers = LocalServers {
            binary,
            extra_args: extra_args.iter().map(|s| (*s).to_owned()).collect(),
            nodes: Vec::with_capacity(n),
        };
        // A server in cluster mode serves no key before the cluster forms:
        // `LocalRedisCluster` declares its primaries itself.
        let cluster_mode = extra_args.contains(&"--cluster-enabled");
        for _ in 0..n {
            let node = servers.launch_on_free_port()?;
            if !cluster_mode {
                declare_born_empty(node.port, &[node.port])?;
            }
            servers.nodes.push(node);
        }
        Ok(servers)
    }

    /// Starts a node on each of `ports`, each in a process group of its
    /// own, waits until each answers `PING`, and leaves them running after
    /// this process exits: servers to try things out with (`redquorum
    /// servers up`). Stop each with SIGTERM (check first that
    /// [`answering_pid`] of its port is still its pid), then remove its
    /// directory. If one node cannot start, those already started are
    /// stopped.
    ///
    /// # Errors
    /// As [`start`](Self::start); also when a port is taken.
    pub fn start_detached(ports: &[u16]) -> io::Result<Vec<DetachedNode>> {
        Self::launch_detached(ports, true)
    }

    /// Like [`start_detached`](Self::start_detached), for nodes that ran
    /// on `ports` before and died: started empty, and not declared born
    /// empty ([`declare_born_empty`]), as they may have granted locks
    /// before and forgotten them. Clients' restart guard gives each no vote
    /// on acquisitions until those would have expired, as it would a
    /// production node that restarted.
    ///
    /// # Errors
    /// As [`start_detached`](Self::start_detached).
    pub fn restart_detached(ports: &[u16]) -> io::Result<Vec<DetachedNode>> {
        Self::launch_detached(ports, false)
    }

    fn launch_detached(ports: &[u16], born_empty: bool) -> io::Result<Vec<DetachedNode>> {
        let mut servers = LocalServers {
            binary: find_redis_server(std::env::var_os("REDQUORUM_REDIS_SERVER"))?,
            extra_args: Vec::new(),
            nodes: Vec::with_capacity(ports.len()),
        };
        for &port in ports {
            if answering_pid(port).is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("a Redis server already answers on port {port}"),
                ));
            }
            let dir = node_dir(port)?;
            // Dropping the set on an error stops the nodes started.
            let child = servers.launch_in_own_group(port, &dir).inspect_err(|_| {
                let _ = std::fs::remove_dir_all(&dir);
            })?;
            servers.nodes.push(LocalNode {
                port,
                dir,
                child: Some(child),
                env: Vec::new(),
            });
            if born_empty {
                declare_born_empty(port, &[port])?;
            }
        }
        Ok(std::mem::take(&mut servers.nodes)
            .into_iter()
            .map(|mut node| DetachedNode {
                port: node.port,
                // Dropping a Child leaves its process running.
                pid: node.child.take().map_or(0, |c| c.id()),
                dir: node.dir.clone(),
            })
            .collect())
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The URLs of all nodes, in order: `redis://127.0.0.1:PORT`.
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }

    /// The URL of node `i`.
    pub fn url(&self, i: usize) -> String {
        format!("redis://127.0.0.1:{}", self.port(i))
    }

    /// The port of node `i`; it keeps it across restarts.
    pub fn port(&self, i: usize) -> u16 {
        self.nodes[i].port
    }

    /// The process id of node `i`, `None` while it is killed.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().map(Child::id)
    }

    /// Kills node `i` with SIGKILL and reaps it. Does nothing if it is
    /// already down.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Freezes node `i` with SIGSTOP: its port still accepts connections,
    /// but nothing is answered.
    pub fn freeze(&mut self, i: usize) {
        self.nodes[i].signal(libc::SIGSTOP);
    }

    /// Thaws node `i` with SIGCONT; it answers what queued up meanwhile.
    pub fn thaw(&mut self, i: usize) {
        self.nodes[i].signal(libc::SIGCONT);
    }

    /// Restarts node `i` on the same port (killing it first if it runs). With
    /// no persistence it comes back empty.
    ///
    /// # Errors
    /// When it does not answer `PING` again.
    pub fn restart(&mut self, i: usize) -> io::Result<()> {
        self.nodes[i].kill();
        let node = &self.nodes[i];
        let (port, dir, env) = (node.port, node.dir.clone(), node.env.clone());
        // The port is ours, but the old socket may linger for a moment.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.launch(port, &dir, &env) {
                Ok(child) => {
                    self.nodes[i].child = Some(child);
                    return Ok(());
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Restarts node `i` (empty, as [`restart`](Self::restart)) with extra
    /// environment variables for its process, which later restarts keep;
    /// for example `LD_PRELOAD` of a library that fakes its clock.
    ///
    /// # Errors
    /// As [`restart`](Self::restart).
    pub fn restart_with_env(&mut self, i: usize, env: &[(&str, &str)]) -> io::Result<()> {
        self.nodes[i].env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self.restart(i)
    }

    /// Stops every node and removes their temp dirs; also done on drop.
    pub fn stop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
            let _ = std::fs::remove_dir_all(&node.dir);
        }
    }

    fn launch_on_free_port(&self) -> io::Result<LocalNode> {
        let mut last_error = None;
        for _ in 0..PORT_TRIES {
            let port = free_port()?;
            let dir = node_dir(port)?;
            match self.launch(port, &dir, &[]) {
                Ok(child) => {
                    return Ok(LocalNode {
                        port,
                        dir,
                        child: Some(child),
                        env: Vec::new(),
                    });
                }
                Err(e) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    last_error = Some(e);
                }
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no free port")))
    }

    /// Starts `redis-server` on `port` and waits until that very process
    /// answers (a port lost to a race would answer with another pid).
    fn launch(&self, port: u16, dir: &Path, env: &[(String, String)]) -> io::Result<Child> {
        self.launch_with(port, dir, env, false)
    }

    /// [`launch`](Self::launch) in a process group of its own, out of reach
    /// of the signals a terminal sends to ours.
    fn launch_in_own_group(&self, port: u16, dir: &Path) -> io::Result<Child> {
        self.launch_with(port, dir, &[], true)
    }

    fn launch_with(
        &self,
        port: u16,
        dir: &Path,
        env: &[(String, String)],
        own_group: bool,
    ) -> io::Result<Child> {
        let log = dir.join("redis.log");
        let mut command = Command::new(&self.binary);
        if own_group {
            std::os::unix::process::CommandExt::process_group(&mut command, 0);
        }
        let mut child = command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--protected-mode", "yes", "--loglevel", "warning"])
            .arg("--dir")
            .arg(dir)
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra_args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {:?}: {e}", self.binary)))?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                return Err(io::Error::other(format!(
                    "redis-server on port {port} exited ({status}); its log:\n{}",
                    log_tail(&log)
                )));
            }
            if answering_pid(port) == Some(child.id()) {
                return Ok(child);
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "redis-server on port {port} did not answer within {START_TIMEOUT:?}; its log:\n{}",
                        log_tail(&log)
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl LocalNode {
    fn signal(&self, signal: libc::c_int) {
        if let Some(child) = &self.child {
            // SAFETY: sends a signal to our own child, which we have not
            // reaped yet, so the pid cannot have been reused.
            unsafe {
                libc::kill(child.id() as libc::pid_t, signal);
            }
        }
    }

    /// SIGKILL (which also ends a stopped process) and reap.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for LocalServers {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The path of `redis-server`: the override if given, else the first on the
/// `PATH`.
pub(crate) fn find_redis_server(override_path: Option<OsString>) -> io::Result<PathBuf> {
    let not_found = || {
        io::Error::new(
            io::ErrorKind::NotFound,
            "redis-server not found (looked for $REDQUORUM_REDIS_SERVER, then PATH): install it, \
             e.g. `apt-get install -y redis-server` (Debian/Ubuntu) or `brew install redis` (macOS)",
        )
    };
    if let Some(path) = override_path {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(not_found())
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("redis-server"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(not_found)
}

/// A port the kernel just handed out; free unless someone races us to it.
pub(crate) fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A fresh, empty temp dir for the node on `port`.
pub(crate) fn node_dir(port: u16) -> io::Result<PathBuf> {
    static COUNTER: AtomicUsize = AtomicUsize::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("redquorum-{}-{n}-{port}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// A node left running by [`LocalServers::start_detached`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetachedNode {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its process id.
    pub pid: u32,
    /// Its directory (log, no data), to remove once it is stopped.
    pub dir: PathBuf,
}

/// The process id of the Redis server answering on `127.0.0.1:port`, if
/// one answers within half a second.
pub fn answering_pid(port: u16) -> Option<u32> {
    let reply = command_with_timeout(port, &["INFO", "server"], Duration::from_millis(500)).ok()?;
    let Reply::Bulk(Some(info)) = reply else {
        return None;
    };
    info_field(&String::from_utf8_lossy(&info), "process_id")?
        .parse()
        .ok()
}

/// The `run_id` of the Redis server answering on `127.0.0.1:port`.
///
/// # Errors
/// When it does not answer `INFO server` with one.
pub fn run_id(port: u16) -> io::Result<String> {
    match command(port, &["INFO", "server"])? {
        Reply::Bulk(Some(info)) => info_field(&String::from_utf8_lossy(&info), "run_id")
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| io::Error::other(format!("no run_id in INFO server on port {port}"))),
        other => Err(io::Error::other(format!(
            "INFO server on port {port}: {other:?}"
        ))),
    }
}

/// Declares the servers on `ports` born empty: each was just started, with
/// no data, as a new node that never granted a lock before, so the
/// restart guard does not hold its young uptime against it when a client
/// first meets it (see docs/SAFETY.md's restart guard table). Adds their `run_id`s to
/// the set `redquorum-born-empty` on the server on `on` (for a plain
/// server, itself; for a Redis Cluster, the primary of that key's slot).
/// A restart draws a new `run_id`, which the set does not name: declare
/// only servers started empty for the first time, never restarted ones.
///
/// # Errors
/// When a server does not answer, or `SADD` is refused.
pub fn declare_born_empty(on: u16, ports: &[u16]) -> io::Result<()> {
    let ids = ports
        .iter()
        .map(|&port| run_id(port))
        .collect::<io::Result<Vec<String>>>()?;
    let mut args = vec!["SADD", BORN_EMPTY_KEY];
    args.extend(ids.iter().map(String::as_str));
    match command(on, &args)? {
        Reply::Int(_) => Ok(()),
        other => Err(io::Error::other(format!(
            "SADD {BORN_EMPTY_KEY}: {other:?}"
        ))),
    }
}

/// `Ok` for a status reply (`+OK`); otherwise an error naming `what` (the
/// command) and the reply.
pub(crate) fn expect_ok(reply: Reply, what: &str) -> io::Result<()> {
    match reply {
        Reply::Status(_) => Ok(()),
        other => Err(io::Error::other(format!("{what}: {other:?}"))),
    }
}

pub(crate) fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

/// A Redis reply, as read by [`command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and the like.
    Status(String),
    /// `-ERR …`, with the code.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…`; `None` for nil.
    Bulk(Option<Vec<u8>>),
    /// `*…`; `None` for nil.
    Array(Option<Vec<Reply>>),
}

/// Sends one command to the node on `127.0.0.1:port` and reads its reply,
/// with a 2 s bound on connecting and on each read.
///
/// # Errors
/// I/O errors, timeouts, and replies that are not RESP.
pub fn command(port: u16, args: &[&str]) -> io::Result<Reply> {
    command_with_timeout(port, args, Duration::from_secs(2))
}

/// Like [`command`], with the given bound on connecting and on each read.
///
/// # Errors
/// As [`command`].
pub fn command_with_timeout(port: u16, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    let mut request = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        request.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        request.extend_from_slice(arg.as_bytes());
        request.extend_from_slice(b"\r\n");
    }
    stream.write_all(&request)?;
    let reply = read_reply(&mut BufReader::new(&stream))?;
    let _ = stream.shutdown(Shutdown::Both);
    Ok(reply)
}

fn read_reply(r: &mut impl BufRead) -> io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "connection closed",
        ));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("bad RESP line {line:?}"),
        )
    };
    let (kind, rest) = line.split_at_checked(1).ok_or_else(bad)?;
    let number = || rest.parse::<i64>().map_err(|_| bad());
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(number()?),
        "$" => match number()? {
            n if n < 0 => Reply::Bulk(None),
            n => {
                let mut body = vec![0; n as usize + 2];
                r.read_exact(&mut body)?;
                body.truncate(n as usize);
                Reply::Bulk(Some(body))
            }
        },
        "*" => match number()? {
            n if n < 0 => Reply::Array(None),
            n => Reply::Array(Some(
                (0..n).map(|_| read_reply(r)).collect::<io::Result<_>>()?,
            )),
        },
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_says_how_to_install_it() {
        let err = find_redis_server(Some("/nonexistent/redis-server".into())).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound);
        assert!(
            err.to_string().contains("apt-get install -y redis-server"),
            "{err}"
        );
    }

    #[test]
    fn parses_resp_replies() {
        let parse = |s: &str| read_reply(&mut s.as_bytes()).unwrap();
        assert_eq!(parse("+OK\r\n"), Reply::Status("OK".into()));
        assert_eq!(parse("-ERR no\r\n"), Reply::Error("ERR no".into()));
        assert_eq!(parse(":-2\r\n"), Reply::Int(-2));
        assert_eq!(parse("$-1\r\n"), Reply::Bulk(None));
        assert_eq!(
            parse("$3\r\na\r\n\r\n"),
            Reply::Bulk(Some(b"a\r\n".to_vec()))
        );
        assert_eq!(
            parse("*2\r\n$1\r\nx\r\n:1\r\n"),
            Reply::Array(Some(vec![Reply::Bulk(Some(b"x".to_vec())), Reply::Int(1)]))
        );
        assert_eq!(parse("*-1\r\n"), Reply::Array(None));
        assert!(read_reply(&mut "?\r\n".as_bytes()).is_err());
        assert!(read_reply(&mut "".as_bytes()).is_err());
    }
}
