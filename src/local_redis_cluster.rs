//! A real Redis Cluster on this machine, for tests and benchmarks (feature
//! `local-servers`).
//!
//! [`LocalRedisCluster::start`] launches six `redis-server --cluster-enabled
//! yes` processes through [`LocalServers`] (free loopback ports, no
//! persistence, a temp dir each, stopped on drop), joins them with
//! `redis-cli --cluster create … --cluster-replicas 1` into three shards of
//! a primary and a replica, with a short `cluster-node-timeout` (1 s), and
//! waits until every node says `cluster_state:ok` and agrees on who serves
//! every slot. A test can then ask which primary serves a key, move a slot
//! to another primary (the `MIGRATING`/`IMPORTING` dance with `MIGRATE`),
//! fail a shard over (`CLUSTER FAILOVER` on its replica, or kill its
//! primary), and read keys and CPU per shard.
//!
//! `redis-cli` is `$REDQUORUM_REDIS_CLI` if set, else `redis-cli` from the
//! `PATH`.

use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::info::info_field;
use crate::local_servers::{LocalServers, Reply, command, declare_born_empty, expect_ok};
use crate::net::guard::BORN_EMPTY_KEY;

/// How long the cluster may take to form, or to settle after a change.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a `CLUSTER FAILOVER` is waited for before it is asked again:
/// past Redis's own limit for a manual failover (5 s), after which it is
/// abandoned.
const MANUAL_FAILOVER_LIMIT: Duration = Duration::from_secs(8);

/// Six local `redis-server`s as one Redis Cluster of three shards.
pub struct LocalRedisCluster {
    servers: LocalServers,
}

/// One node of the cluster, as `CLUSTER NODES` tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNode {
    /// The node's id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a primary (else a replica).
    pub primary: bool,
    /// The primary it replicates, for a replica.
    pub replica_of: Option<String>,
    /// The slot ranges it serves (inclusive), for a primary.
    pub slots: Vec<(u16, u16)>,
    /// Whether it is marked failed (`fail` or `fail?`).
    pub failed: bool,
}

/// A slot's move begun by [`LocalRedisCluster::begin_migration`], to be
/// finished by [`LocalRedisCluster::finish_migration`].
#[derive(Debug)]
pub struct Migration {
    slot: u16,
    from: u16,
    to: u16,
    to_id: String,
}

impl LocalRedisCluster {
    /// Starts six servers in cluster mode and makes them one cluster of
    /// three primaries with a replica each.
    ///
    /// # Errors
    /// When `redis-server` or `redis-cli` cannot be run, or the cluster does
    /// not form within 30 s.
    pub fn start() -> io::Result<LocalRedisCluster> {
        let servers = LocalServers::start_with_args(
            6,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "1000",
                "--cluster-require-full-coverage",
                "no",
            ],
        )?;
        let addresses: Vec<String> = (0..6)
            .map(|i| format!("127.0.0.1:{}", servers.port(i)))
            .collect();
        let cli = std::env::var_os("REDQUORUM_REDIS_CLI").unwrap_or_else(|| "redis-cli".into());
        let out = Command::new(&cli)
            .arg("--cluster")
            .arg("create")
            .args(&addresses)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot run {cli:?}: {e}")))?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            )));
        }
        let cluster = LocalRedisCluster { servers };
        cluster.wait_settled()?;
        // Its primaries were started empty: nothing for the restart guard
        // to hold against their young uptime.
        let on = cluster.primary_of(BORN_EMPTY_KEY)?;
        declare_born_empty(on, &cluster.primaries()?)?;
        Ok(cluster)
    }

    /// The node URL of the cluster for a Redlock: `redis+cluster://` with
    /// every server as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The ports of the six servers.
    pub fn ports(&self) -> Vec<u16> {
        (0..self.servers.len())
            .map(|i| self.servers.port(i))
            .collect()
    }

    /// The nodes as a live node sees them.
    ///
    /// # Errors
    /// When no node answers `CLUSTER NODES`.
    pub fn nodes(&self) -> io::Result<Vec<ClusterNode>> {
        let mut last = io::Error::other("no node answered");
        for port in self.ports() {
            match command(port, &["CLUSTER", "NODES"]) {
                Ok(Reply::Bulk(Some(text))) => return Ok(parse_nodes(&text)),
                Ok(other) => last = io::Error::other(format!("CLUSTER NODES: {other:?}")),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`).
    ///
    /// # Errors
    /// When no node answers.
    pub fn slot(&self, key: &str) -> io::Result<u16> {
        for port in self.ports() {
            if let Ok(Reply::Int(slot)) = command(port, &["CLUSTER", "KEYSLOT", key]) {
                return Ok(slot as u16);
            }
        }
        Err(io::Error::other("no node answered CLUSTER KEYSLOT"))
    }

    /// The port of the primary serving `slot`.
    ///
    /// # Errors
    /// When no node answers, or none serves the slot.
    pub fn primary_of_slot(&self, slot: u16) -> io::Result<u16> {
        self.nodes()?
            .into_iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|&(a, b)| (a..=b).contains(&slot))
            })
            .map(|n| n.port)
            .ok_or_else(|| io::Error::other(format!("no primary serves slot {slot}")))
    }

    /// The port of the primary serving `key`'s slot.
    ///
    /// # Errors
    /// As [`primary_of_slot`](Self::primary_of_slot).
    pub fn primary_of(&self, key: &str) -> io::Result<u16> {
        self.primary_of_slot(self.slot(key)?)
    }

    /// The ports of the live primaries.
    ///
    /// # Errors
    /// When no node answers.
    pub fn primaries(&self) -> io::Result<Vec<u16>> {
        Ok(self
            .nodes()?
            .into_iter()
            .filter(|n| n.primary && !n.failed && !n.slots.is_empty())
            .map(|n| n.port)
            .collect())
    }

    /// A live primary other than the one on port `port` (the first the
    /// cluster names), if there is one: where a test moves a slot.
    ///
    /// # Errors
    /// When no node answers.
    pub fn other_primary(&self, port: u16) -> io::Result<Option<u16>> {
        Ok(self.primaries()?.into_iter().find(|&p| p != port))
    }

    /// Moves `slot`, with its keys, to the primary on port `to`.
    ///
    /// # Errors
    /// When a step is refused.
    pub fn migrate_slot(&self, slot: u16, to: u16) -> io::Result<()> {
        let Some(moving) = self.begin_migration(slot, to)? else {
            return Ok(());
        };
        self.finish_migration(moving)
    }

    /// The first half of [`migrate_slot`](Self::migrate_slot): marks `slot`
    /// `IMPORTING` on the primary on port `to` and `MIGRATING` on the one
    /// serving it, and moves nothing yet. Until
    /// [`finish_migration`](Self::finish_migration), a command on the slot
    /// is answered `ASK` where its keys are missing, and `TRYAGAIN` where
    /// it names several keys and only some are there. `None` if `to`
    /// already serves it.
    ///
    /// # Errors
    /// When a node does not answer, or no node listens on `to`.
    pub fn begin_migration(&self, slot: u16, to: u16) -> io::Result<Option<Migration>> {
        let nodes = self.nodes()?;
        let from = self.primary_of_slot(slot)?;
        if from == to {
            return Ok(None);
        }
        let id = |port: u16| {
            nodes
                .iter()
                .find(|n| n.port == port)
                .map(|n| n.id.clone())
                .ok_or_else(|| io::Error::other(format!("no node on port {port}")))
        };
        let (from_id, to_id) = (id(from)?, id(to)?);
        let s = slot.to_string();
        expect_ok(
            command(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id])?,
            "CLUSTER SETSLOT",
        )?;
        expect_ok(
            command(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id])?,
            "CLUSTER SETSLOT",
        )?;
        Ok(Some(Migration {
            slot,
            from,
            to,
            to_id,
        }))
    }

    /// The second half of [`migrate_slot`](Self::migrate_slot): moves the
    /// slot's keys with `MIGRATE`, then tells every primary that `to`
    /// serves it, and waits until the cluster agrees.
    ///
    /// # Errors
    /// When a node does not answer or refuses, or the cluster does not
    /// settle within 30 s.
    pub fn finish_migration(&self, moving: Migration) -> io::Result<()> {
        let Migration {
            slot,
            from,
            to,
            to_id,
        } = moving;
        let s = slot.to_string();
        loop {
            let keys = match command(from, &["CLUSTER", "GETKEYSINSLOT", &s, "100"])? {
                Reply::Array(Some(keys)) => keys,
                other => return Err(io::Error::other(format!("GETKEYSINSLOT: {other:?}"))),
            };
            let keys: Vec<String> = keys
                .into_iter()
                .filter_map(|k| match k {
                    Reply::Bulk(Some(k)) => Some(String::from_utf8_lossy(&k).into_owned()),
                    _ => None,
                })
                .collect();
            if keys.is_empty() {
                break;
            }
            let port = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            expect_ok(command(from, &args)?, "MIGRATE")?;
        }
        for node in self.nodes()?.iter().filter(|n| n.primary && !n.failed) {
            match command(node.port, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id])? {
                // A primary the view asked still counted, since failed over
                // (a loaded machine's missed pings): a replica follows its
                // primary, and needs no word of its own.
                Reply::Error(e) if e.contains("only with masters") => {}
                reply => expect_ok(reply, "CLUSTER SETSLOT")?,
            }
        }
        self.wait_settled()
    }

    /// Fails the shard of the primary on `port` over to its replica with
    /// `CLUSTER FAILOVER` (the replica catches up first: nothing acknowledged
    /// is lost, but its `run_id` is new to clients); returns the new
    /// primary's port.
    ///
    /// # Errors
    /// When the primary has no replica, or the failover does not finish.
    pub fn failover(&self, port: u16) -> io::Result<u16> {
        let replica = self.replica_of(port)?;
        // Redis abandons a manual failover, silently, when the replica has
        // not caught up and won the vote within 5 s (`CLUSTER_MF_TIMEOUT`):
        // on a loaded machine it is asked again, rather than waited for in
        // vain (seen: "not promoted within 30s", the suite's clusters
        // sharing two cores).
        let start = Instant::now();
        loop {
            let asked = expect_ok(
                command(replica, &["CLUSTER", "FAILOVER"])?,
                "CLUSTER FAILOVER",
            );
            // Refused by a replica promoted meanwhile: done all the same.
            if let Err(e) = asked
                && !self.is_primary(replica)
            {
                return Err(e);
            }
            match self.wait_primary_within(replica, MANUAL_FAILOVER_LIMIT) {
                Ok(()) => return Ok(replica),
                // Not promoted: abandoned; asked again while time is left.
                Err(_) if start.elapsed() < SETTLE_TIMEOUT && !self.is_primary(replica) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether the node on `port` is a primary serving slots.
    fn is_primary(&self, port: u16) -> bool {
        self.nodes().is_ok_and(|nodes| {
            nodes
                .iter()
                .any(|n| n.port == port && n.primary && !n.slots.is_empty())
        })
    }

    /// Kills the primary on `port` (SIGKILL): its replica is promoted after
    /// the node timeout, without what replication had not copied; returns
    /// the new primary's port.
    ///
    /// # Errors
    /// When the primary has no replica, or no promotion follows.
    pub fn kill_primary(&mut self, port: u16) -> io::Result<u16> {
        let replica = self.replica_of(port)?;
        let i = self
            .ports()
            .iter()
            .position(|&p| p == port)
            .ok_or_else(|| io::Error::other(format!("no server on port {port}")))?;
        self.servers.kill(i);
        self.wait_primary(replica)?;
        Ok(replica)
    }

    /// Freezes the server on `port` (SIGSTOP): its port still accepts
    /// connections, but nothing is answered until [`thaw`](Self::thaw).
    ///
    /// # Errors
    /// When no server of the cluster is on `port`.
    pub fn freeze(&mut self, port: u16) -> io::Result<()> {
        let i = self.index(port)?;
        self.servers.freeze(i);
        Ok(())
    }

    /// Thaws the server on `port` (SIGCONT).
    ///
    /// # Errors
    /// When no server of the cluster is on `port`.
    pub fn thaw(&mut self, port: u16) -> io::Result<()> {
        let i = self.index(port)?;
        self.servers.thaw(i);
        Ok(())
    }

    fn index(&self, port: u16) -> io::Result<usize> {
        self.ports()
            .iter()
            .position(|&p| p == port)
            .ok_or_else(|| io::Error::other(format!("no server on port {port}")))
    }

    /// The keys on each live primary (`DBSIZE`, less the born-empty set
    /// [`start`](Self::start) declared and the clients' records of who
    /// they are, `*who:*`), by port.
    ///
    /// # Errors
    /// When a primary does not answer.
    pub fn keys_per_shard(&self) -> io::Result<Vec<(u16, i64)>> {
        let int = |port: u16, args: &[&str]| match command(port, args)? {
            Reply::Int(n) => Ok(n),
            other => Err(io::Error::other(format!("{}: {other:?}", args[0]))),
        };
        self.primaries()?
            .into_iter()
            .map(|port| {
                let exists = int(port, &["EXISTS", BORN_EMPTY_KEY]).unwrap_or(0);
                // The clients' records of who they are (`{<prefix>who:<id>}`,
                // a day's life): no lock's.
                let records = int(
                    port,
                    &["EVAL", "return #redis.call('KEYS', ARGV[1])", "0", "*who:*"],
                )
                .unwrap_or(0);
                Ok((port, int(port, &["DBSIZE"])? - exists - records))
            })
            .collect()
    }

    /// The CPU seconds (user + system) each live primary has used, by port.
    ///
    /// # Errors
    /// When a primary does not answer.
    pub fn cpu_per_shard(&self) -> io::Result<Vec<(u16, f64)>> {
        self.primaries()?
            .into_iter()
            .map(|port| Ok((port, cpu_seconds(port)?)))
            .collect()
    }

    /// The replica of the primary on `port`.
    ///
    /// Asked until one shows, within [`SETTLE_TIMEOUT`]: the node asked may
    /// not have heard yet of a replica attached a moment ago, or may
    /// suspect one for a while (`fail?`) that was slow to answer its pings
    /// on a loaded machine (seen once in a dozen runs of the cluster
    /// suite, each of its tests with six servers on two cores).
    fn replica_of(&self, port: u16) -> io::Result<u16> {
        let start = Instant::now();
        loop {
            let nodes = self.nodes()?;
            let primary = nodes
                .iter()
                .find(|n| n.port == port && n.primary)
                .ok_or_else(|| io::Error::other(format!("no primary on port {port}")))?;
            if let Some(replica) = nodes
                .iter()
                .find(|n| !n.failed && n.replica_of.as_deref() == Some(&primary.id))
            {
                return Ok(replica.port);
            }
            if start.elapsed() > SETTLE_TIMEOUT {
                return Err(io::Error::other(format!(
                    "the primary on port {port} has no replica: {nodes:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until the node on `port` is a primary serving slots and the
    /// cluster has settled.
    fn wait_primary(&self, port: u16) -> io::Result<()> {
        self.wait_primary_within(port, SETTLE_TIMEOUT)
    }

    /// [`wait_primary`](Self::wait_primary), giving up on the promotion
    /// after `limit`.
    fn wait_primary_within(&self, port: u16, limit: Duration) -> io::Result<()> {
        let start = Instant::now();
        loop {
            if self.is_primary(port) {
                return self.wait_settled();
            }
            if start.elapsed() > limit {
                return Err(io::Error::other(format!(
                    "the node on port {port} was not promoted within {limit:?}"
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until every live node says `cluster_state:ok` and they agree on
    /// the owners of all 16384 slots.
    fn wait_settled(&self) -> io::Result<()> {
        let start = Instant::now();
        loop {
            if self.settled() {
                return Ok(());
            }
            if start.elapsed() > SETTLE_TIMEOUT {
                return Err(io::Error::other(format!(
                    "the cluster did not settle within {SETTLE_TIMEOUT:?}: {:?}",
                    self.nodes()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn settled(&self) -> bool {
        let mut views = Vec::new();
        for port in self.ports() {
            let Ok(Reply::Bulk(Some(info))) = command(port, &["CLUSTER", "INFO"]) else {
                // A killed server: the others decide.
                continue;
            };
            if !String::from_utf8_lossy(&info).contains("cluster_state:ok") {
                return false;
            }
            let Ok(Reply::Bulk(Some(text))) = command(port, &["CLUSTER", "NODES"]) else {
                return false;
            };
            let mut owners: Vec<(u16, u16, u16)> = parse_nodes(&text)
                .into_iter()
                .filter(|n| n.primary && !n.failed)
                .flat_map(|n| {
                    n.slots
                        .iter()
                        .map(move |&(a, b)| (a, b, n.port))
                        .collect::<Vec<_>>()
                })
                .collect();
            owners.sort_unstable();
            let covered: u32 = owners.iter().map(|&(a, b, _)| u32::from(b - a) + 1).sum();
            if covered != 16384 {
                return false;
            }
            views.push(owners);
        }
        !views.is_empty() && views.windows(2).all(|w| w[0] == w[1])
    }
}

/// Reads `CLUSTER NODES`: `id addr flags primary ping pong epoch link
/// slots…` a line.
fn parse_nodes(text: &[u8]) -> Vec<ClusterNode> {
    String::from_utf8_lossy(text)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let port = fields[1]
                .split('@')
                .next()?
                .rsplit_once(':')?
                .1
                .parse()
                .ok()?;
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|a| (a, a)),
                })
                .collect();
            Some(ClusterNode {
                id: fields[0].to_owned(),
                port,
                primary: flags.contains(&"master"),
                replica_of: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
                failed: flags.iter().any(|f| f.starts_with("fail")),
            })
        })
        .collect()
}

/// The CPU seconds (user + system) the server on `port` has used, from its
/// `INFO cpu`.
///
/// # Errors
/// When the server does not answer, or not with the section's text.
pub fn cpu_seconds(port: u16) -> io::Result<f64> {
    let Reply::Bulk(Some(text)) = command(port, &["INFO", "cpu"])? else {
        return Err(io::Error::other("INFO cpu: not a bulk string"));
    };
    let text = String::from_utf8_lossy(&text);
    let field = |name: &str| {
        info_field(&text, name)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    Ok(field("used_cpu_user") + field("used_cpu_sys"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cluster_nodes() {
        let text = b"07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected\n\
e7d1 127.0.0.1:30001@40001 myself,master - 0 0 1 connected 0-5460 7000 [93->-292f]\n\
292f 127.0.0.1:30002@40002 master,fail - 0 0 2 disconnected\n";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].replica_of.as_deref(), Some("e7d1"));
        assert!(!nodes[0].primary);
        assert_eq!(nodes[1].port, 30001);
        assert_eq!(nodes[1].slots, vec![(0, 5460), (7000, 7000)]);
        assert!(nodes[2].failed && nodes[2].primary);
    }
}
