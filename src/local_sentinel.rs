//! Sentinel-managed nodes on this machine, for tests (feature
//! `local-servers`; the library reaches them with feature `sentinel`).
//!
//! [`LocalSentinels::start`] launches N nodes, each a primary and one
//! replica (`REPLICAOF`), all `redis-server` processes without persistence
//! (a [`LocalServers`] of 2N servers), and three sentinels (`redis-server
//! --sentinel`) that monitor every node's primary under the name
//! `redquorum-<i>`, with a quorum of 2, `down-after-milliseconds` 1000 and
//! `failover-timeout` 3000, so that a failover takes a few seconds. Every
//! process listens on a free loopback port; dropping the set stops them
//! all and removes their temp dirs, also while a test panics.
//!
//! A node's primary can be asked for ([`primary`](LocalSentinels::primary)),
//! failed over by hand ([`failover`](LocalSentinels::failover):
//! `SENTINEL FAILOVER`, then waits until every sentinel names the promoted
//! replica and it says it is a master), killed and restarted empty
//! ([`kill_server`](LocalSentinels::kill_server),
//! [`restart_server`](LocalSentinels::restart_server)).
//!
//! The sentinels reconfigure an old primary that comes back (or that was
//! failed over while running) as a replica of the new one only some
//! seconds later (eight, Sentinel's own constant): until then it is an
//! empty or stale master that no sentinel names.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::info::info_field;
use crate::local_servers::{
    LocalServers, Reply, answering_pid, command, expect_ok, find_redis_server, free_port, log_tail,
    node_dir,
};

/// How many sentinels watch the nodes.
pub const SENTINELS: usize = 3;
/// How long a sentinel may take to answer its first `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long [`LocalSentinels::failover`] and friends wait.
const FAILOVER_TIMEOUT: Duration = Duration::from_secs(40);

/// N Sentinel-managed nodes (a primary and a replica each) and the three
/// sentinels that watch them; stopped on drop.
#[derive(Debug)]
pub struct LocalSentinels {
    /// Server `2i` started as node `i`'s primary, `2i + 1` as its replica.
    servers: LocalServers,
    sentinels: Vec<SentinelProcess>,
    nodes: usize,
}

#[derive(Debug)]
struct SentinelProcess {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl LocalSentinels {
    /// Starts `n` nodes of a primary and a replica each, waits until every
    /// replica is in sync, then starts the sentinels and waits until each
    /// knows every node's primary and replica.
    ///
    /// # Errors
    /// When `redis-server` cannot be found, or a process does not come up
    /// (the message has its log's tail), or replication does not start.
    pub fn start(n: usize) -> io::Result<LocalSentinels> {
        let servers = LocalServers::start(2 * n)?;
        for i in 0..n {
            let primary = servers.port(2 * i).to_string();
            expect_ok(
                command(
                    servers.port(2 * i + 1),
                    &["REPLICAOF", "127.0.0.1", &primary],
                )?,
                "REPLICAOF",
            )?;
        }
        let mut set = LocalSentinels {
            servers,
            sentinels: Vec::with_capacity(SENTINELS),
            nodes: n,
        };
        for i in 0..n {
            set.wait_in_sync(2 * i + 1)?;
        }
        let binary = find_redis_server(std::env::var_os("REDQUORUM_REDIS_SERVER"))?;
        for _ in 0..SENTINELS {
            let sentinel = set.launch_sentinel(&binary)?;
            set.sentinels.push(sentinel);
        }
        // Each sentinel knows the replicas once it has read the primaries'
        // INFO (at once on connecting, then every ten seconds).
        for i in 0..n {
            let replica = set.servers.port(2 * i + 1);
            for s in 0..SENTINELS {
                set.wait_until(|set| set.sentinel_knows_replica(s, i, replica))?;
            }
        }
        Ok(set)
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    /// The name the sentinels know node `i`'s primary by: `redquorum-<i>`.
    pub fn master_name(&self, i: usize) -> String {
        format!("redquorum-{i}")
    }

    /// The sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(|s| s.port).collect()
    }

    /// The sentinels' addresses, `127.0.0.1:PORT` each.
    pub fn sentinel_addresses(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// The URL of node `i`:
    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/redquorum-<i>`.
    pub fn url(&self, i: usize) -> String {
        format!(
            "redis+sentinel://{}/{}",
            self.sentinel_addresses().join(","),
            self.master_name(i)
        )
    }

    /// The URLs of every node, in order.
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes).map(|i| self.url(i)).collect()
    }

    /// How reports name node `i`: `redquorum-<i>@127.0.0.1:S1,…`.
    pub fn name(&self, i: usize) -> String {
        format!(
            "{}@{}",
            self.master_name(i),
            self.sentinel_addresses().join(",")
        )
    }

    /// The ports of node `i`'s two servers (the first started as its
    /// primary).
    pub fn server_ports(&self, i: usize) -> [u16; 2] {
        [self.servers.port(2 * i), self.servers.port(2 * i + 1)]
    }

    /// The port of node `i`'s primary, as the first sentinel that answers
    /// names it.
    ///
    /// # Errors
    /// When no sentinel answers with an address.
    pub fn primary(&self, i: usize) -> io::Result<u16> {
        let mut last = io::Error::other("no sentinel");
        for s in 0..SENTINELS {
            match self.primary_by(s, i) {
                Ok(port) => return Ok(port),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The port sentinel `s` names as node `i`'s primary.
    fn primary_by(&self, s: usize, i: usize) -> io::Result<u16> {
        let reply = command(
            self.sentinels[s].port,
            &["SENTINEL", "get-master-addr-by-name", &self.master_name(i)],
        )?;
        match reply {
            Reply::Array(Some(parts)) if parts.len() == 2 => match &parts[1] {
                Reply::Bulk(Some(port)) => String::from_utf8_lossy(port)
                    .parse()
                    .map_err(|_| io::Error::other("a port that is not a number")),
                other => Err(io::Error::other(format!("unexpected port {other:?}"))),
            },
            other => Err(io::Error::other(format!(
                "sentinel {s} names no primary of node {i}: {other:?}"
            ))),
        }
    }

    /// Whether the server on `port` says (`ROLE`) it is a master.
    pub fn is_master(&self, port: u16) -> bool {
        matches!(
            command(port, &["ROLE"]),
            Ok(Reply::Array(Some(parts)))
                if parts.first() == Some(&Reply::Bulk(Some(b"master".to_vec())))
        )
    }

    /// Fails node `i` over by hand (`SENTINEL FAILOVER`, sent again while
    /// the sentinel says it cannot yet: a failover in progress, or no
    /// replica in sync after the last one) and waits until every sentinel
    /// names another primary and that server says it is a master. Returns
    /// the new primary's port. The old primary stays a master that no
    /// sentinel names until the sentinels demote it, seconds later.
    ///
    /// # Errors
    /// When no failover happens within 40 s.
    pub fn failover(&self, i: usize) -> io::Result<u16> {
        let old = self.primary(i)?;
        let name = self.master_name(i);
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        loop {
            match command(self.sentinels[0].port, &["SENTINEL", "FAILOVER", &name])? {
                Reply::Status(_) => break,
                refused if Instant::now() >= deadline => {
                    return Err(io::Error::other(format!(
                        "SENTINEL FAILOVER {name} refused: {refused:?}"
                    )));
                }
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
        self.wait_for_new_primary(i, old)
    }

    /// Waits until every sentinel names a primary of node `i` other than
    /// `old` and that server says it is a master; returns its port.
    ///
    /// # Errors
    /// When that does not happen within 40 s.
    pub fn wait_for_new_primary(&self, i: usize, old: u16) -> io::Result<u16> {
        let mut found = 0;
        self.wait_until(|set| {
            let named: Vec<_> = (0..SENTINELS).map(|s| set.primary_by(s, i).ok()).collect();
            match named[0] {
                Some(port)
                    if port != old
                        && named.iter().all(|n| *n == Some(port))
                        && set.is_master(port) =>
                {
                    found = port;
                    true
                }
                _ => false,
            }
        })?;
        Ok(found)
    }

    /// Waits until the server on `port` of node `i` is a replica in sync
    /// with the node's primary (as the sentinels reconfigure an old
    /// primary), so that another failover can promote it.
    ///
    /// # Errors
    /// When that does not happen within 40 s.
    pub fn wait_for_replica(&self, port: u16) -> io::Result<()> {
        let index = self.index_of(port)?;
        self.wait_in_sync(index)
    }

    /// Node `i`'s server that is not its primary, if it is a replica whose
    /// link to the primary is up (one a failover can promote).
    pub fn replica_in_sync(&self, i: usize) -> Option<u16> {
        let primary = self.primary(i).ok()?;
        let replica = self.server_ports(i).into_iter().find(|&p| p != primary)?;
        let Ok(Reply::Bulk(Some(info))) = command(replica, &["INFO", "replication"]) else {
            return None;
        };
        let info = String::from_utf8_lossy(&info);
        // The port compared whole: `master_port:63790` is not port 6379.
        let in_sync = info_field(&info, "master_link_status") == Some("up")
            && info_field(&info, "master_port") == Some(primary.to_string().as_str());
        in_sync.then_some(replica)
    }

    /// Kills the server on `port` with SIGKILL (one of [`server_ports`](Self::server_ports)).
    ///
    /// # Errors
    /// When no server of the set has that port.
    pub fn kill_server(&mut self, port: u16) -> io::Result<()> {
        let index = self.index_of(port)?;
        self.servers.kill(index);
        Ok(())
    }

    /// Restarts the server on `port`, empty, as a master on the same port:
    /// the sentinels make it a replica of the node's primary when they see
    /// it (seconds later), unless it is the primary they still name.
    ///
    /// # Errors
    /// When no server of the set has that port, or it does not come up.
    pub fn restart_server(&mut self, port: u16) -> io::Result<()> {
        let index = self.index_of(port)?;
        self.servers.restart(index)
    }

    /// Stops every process and removes the temp dirs; also done on drop.
    pub fn stop(&mut self) {
        for sentinel in &mut self.sentinels {
            if let Some(mut child) = sentinel.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            let _ = std::fs::remove_dir_all(&sentinel.dir);
        }
        self.servers.stop();
    }

    fn index_of(&self, port: u16) -> io::Result<usize> {
        (0..self.servers.len())
            .find(|&k| self.servers.port(k) == port)
            .ok_or_else(|| io::Error::other(format!("no server of the set on port {port}")))
    }

    /// Waits until server `index` is a replica whose link to its primary
    /// is up.
    fn wait_in_sync(&self, index: usize) -> io::Result<()> {
        let port = self.servers.port(index);
        self.wait_until(|_| {
            matches!(
                command(port, &["INFO", "replication"]),
                Ok(Reply::Bulk(Some(info)))
                    if String::from_utf8_lossy(&info).contains("master_link_status:up")
            )
        })
    }

    /// Whether sentinel `s` lists `replica` among node `i`'s replicas.
    fn sentinel_knows_replica(&self, s: usize, i: usize, replica: u16) -> bool {
        let Ok(Reply::Array(Some(replicas))) = command(
            self.sentinels[s].port,
            &["SENTINEL", "REPLICAS", &self.master_name(i)],
        ) else {
            return false;
        };
        let port = replica.to_string();
        replicas.iter().any(|fields| match fields {
            Reply::Array(Some(fields)) => fields
                .windows(2)
                .any(|kv| kv[0] == bulk("port") && kv[1] == bulk(&port)),
            _ => false,
        })
    }

    fn wait_until(&self, mut done: impl FnMut(&Self) -> bool) -> io::Result<()> {
        let deadline = Instant::now() + FAILOVER_TIMEOUT;
        while !done(self) {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the sentinels did not settle within {FAILOVER_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Starts a sentinel on a free port, monitoring every node, and waits
    /// until that very process answers.
    fn launch_sentinel(&self, binary: &std::path::Path) -> io::Result<SentinelProcess> {
        let port = free_port()?;
        let dir = node_dir(port)?;
        let log = dir.join("sentinel.log");
        let conf = dir.join("sentinel.conf");
        let mut text = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\nprotected-mode no\nloglevel notice\n\
             dir {}\nlogfile {}\n",
            dir.display(),
            log.display()
        );
        for i in 0..self.nodes {
            let name = self.master_name(i);
            let primary = self.servers.port(2 * i);
            text += &format!(
                "sentinel monitor {name} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 3000\n\
                 sentinel parallel-syncs {name} 1\n"
            );
        }
        std::fs::File::create(&conf)?.write_all(text.as_bytes())?;
        let mut child = Command::new(binary)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {binary:?}: {e}")))?;
        let started = Instant::now();
        loop {
            if let Some(status) = child.try_wait()? {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(io::Error::other(format!(
                    "sentinel on port {port} exited ({status}); its log:\n{}",
                    log_tail(&log)
                )));
            }
            if answering_pid(port) == Some(child.id()) {
                return Ok(SentinelProcess {
                    port,
                    dir,
                    child: Some(child),
                });
            }
            if started.elapsed() > START_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                let tail = log_tail(&log);
                let _ = std::fs::remove_dir_all(&dir);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("sentinel on port {port} did not answer; its log:\n{tail}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for LocalSentinels {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bulk(s: &str) -> Reply {
    Reply::Bulk(Some(s.as_bytes().to_vec()))
}
