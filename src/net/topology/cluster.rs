//! A node that is a whole Redis Cluster (crate feature `cluster`).
//!
//! Redlock wants N independent failure domains. A Redis Cluster can be one
//! of them: it holds each lock key on the primary serving the key's slot,
//! and a shard's failover (a replica promoted) is, for the keys of that
//! shard, what a restart without persistence is for a single server — the
//! writes replication had not copied yet are gone. So a Redlock of three
//! clusters is a Redlock whose nodes scale out by shards; ONE cluster as
//! the only node is a single failure domain whose failover can hand a lock
//! to two holders (the README says so plainly).
//!
//! Three things make a cluster fit the node rules of [`net`](crate::net):
//!
//! * **Every key of one lock in one slot** ([`keys`](crate::keys)): a Lua script
//!   runs on one primary and must find all its keys there. The side keys
//!   (`:waiters`, `:intent`, `:leader`, `:terms`, `:fence`) are built from the lock
//!   key, so they share its hash tag.
//!
//! * **Nothing replayed behind our back.** redis-rs's cluster connection
//!   retries a request on one counter, `retries` (16 by default), for
//!   every reason it has: `MOVED` and `ASK` (the command did not run:
//!   safe), `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING` (did not
//!   run: safe), `READONLY` (did not run), but also an I/O error or a
//!   dropped connection (`RetryMethod::Reconnect` and `RetryImmediately`
//!   in `errors/redis_error.rs`): there the command may have run, and its
//!   resending after our rollback could land after it and leave a key
//!   nobody holds. One counter cannot tell them apart, so we set
//!   `retries(0)`: redis-rs retries nothing and hands every error back.
//!   We follow the redirects ourselves ([`send`]): a `MOVED` or `ASK`
//!   answer means the command did not run, so sending it to the address
//!   named (with `ASKING` first for `ASK`) is no replay; each hop passes
//!   the lock's [`Gate`] again, so a hop after the lock's removal began
//!   is dropped unsent. At most [`MAX_REDIRECTS`] hops; the slot map is
//!   refreshed by redis-rs on the `MOVED` it saw. A connection error is a
//!   failed vote, handled by the one retry of `Inner::run` like on a plain
//!   node (before the vote is counted, through the gate).
//!
//!   The gate needs the hand-over to be immediate (a request handed over
//!   later than its first poll could be written after the lock's
//!   rollback). redis-rs hands a command to the cluster connection's task
//!   through a channel of 100 messages, so a cluster node has at most
//!   [`IN_FLIGHT`] requests on the wire (each sends one message at a
//!   time), below `Builder::max_in_flight` if that is higher: the channel
//!   always has room. (A script's background `SCRIPT LOAD` after a
//!   `NOSCRIPT` the gate cut off takes no permit; it would take 36 of them
//!   at once to fill the rest. Even then the late command runs on the
//!   same node and leaves a key nobody holds until its TTL: a delay,
//!   never two holders.)
//!
//! * **The restart guard per shard.** The cluster connection reconnects to
//!   a promoted replica by itself, so "read `INFO server` on every new
//!   connection" would never run. Instead: at connect, the identity of
//!   every primary is learned (`INFO server` and `INFO replication` to all
//!   primaries); and every acquisition
//!   ([`Effect::Grant`](crate::proto::Effect)) is pipelined with `INFO
//!   server` and `INFO replication` on the same route, so the reply names
//!   the primary that ran it. A primary is its `run_id` and its
//!   `master_replid` ([`primary_identity`](crate::net::guard::primary_identity)):
//!   the `run_id` alone would miss a failback (P1 fails over to R1, then
//!   R1 back to P1: P1, a replica meanwhile, may lack R1's grants, and its
//!   `run_id` is known), while Redis draws a new replication ID at every
//!   promotion. A grant from a primary this client has not seen is no
//!   vote: the node is quarantined as after a restart with an uptime of 0
//!   (the longest TTL in use, from now) and the vote is
//!   [`NodeFailure::Restarted`](crate::NodeFailure) — the engine's
//!   rollback then removes the key. Adding a shard (or a resharding that
//!   makes a primary we have not seen serve a slot) trips it once too:
//!   conservative, it costs that node's vote for one TTL. What it cannot
//!   see: a failover before this client first connected to the cluster (it
//!   learns the promoted replica as a primary like any other; the limit a
//!   plain server's restart before the first connection has too), so with
//!   several clusters a client started after a failover counts that
//!   cluster's vote.
//!
//! * **Every request bounded, redis-rs's own too.** Its `PING` on each new
//!   connection and its slot map's refresh have no bound but the builder's
//!   `connection_timeout` and `response_timeout`: both are a quarter of
//!   the connect timeout ([`ClusterEndpoint::new`]), so that one frozen
//!   server (a replica even) does not hold every new cluster connection
//!   forever. Neither retries anything (`retries(0)`), and redis-rs's
//!   `overall_response_timeout` is off: ours bound each request. A reply
//!   slower than a quarter of the connect timeout is thus a connection
//!   error on a cluster node.
//!
//! What it costs in availability: a connection error on any one server of
//! the cluster (its primary killed, say) replaces the whole cluster
//! connection, as on a plain node (the old one is retired, not dropped:
//! requests handed to it may still be written, and the removals sent
//! meanwhile are written on it too, see `Inner::replace_connection`), and
//! the new one must reach every primary for the guard's `INFO`: until the cluster has promoted a
//! replica (its `cluster-node-timeout`), the node votes `Connection` for
//! every key, not only for the keys of the dead shard. Dropping it is sure
//! to find the promoted replica, though: a new connection reads the slot
//! map afresh, while redis-rs refreshes a kept one's on a redirect (which
//! a dead primary never sends) or when it has no connection for a slot,
//! and whether that comes promptly after a primary's death was not
//! checked. Keeping the connection, with a slot refresh of our own after
//! connection errors, and learning the primaries one by one, would narrow
//! the cost to the shard; not done yet.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::PubSub;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{
    MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr,
};
use redis::{Cmd, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::net::guard::ServerInfo;
use crate::proto::{Gate, Pass};

/// The most requests on the wire to one cluster node: below the 100
/// messages of redis-rs's command channel, so that handing a command over
/// never waits (the lock's gate relies on it).
pub(crate) const IN_FLIGHT: usize = 64;

/// The most redirects one request follows (a slot migrating while the
/// slot map is refreshed takes two).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// How many `MOVED` and `ASK` answers [`send`] has followed in this
/// process, per slot: for tests, to know that a redirect was taken. Touched
/// only on a redirect.
static REDIRECTS: std::sync::Mutex<Option<std::collections::HashMap<u16, u64>>> =
    std::sync::Mutex::new(None);

/// How many `MOVED` and `ASK` answers for keys of `slot` this process has
/// followed to another server of a cluster node (tests only: not part of
/// the API).
#[doc(hidden)]
pub fn redirects_followed(slot: u16) -> u64 {
    let redirects = REDIRECTS.lock().unwrap_or_else(|p| p.into_inner());
    redirects
        .as_ref()
        .and_then(|r| r.get(&slot).copied())
        .unwrap_or(0)
}

fn count_redirect(slot: u16) {
    let mut redirects = REDIRECTS.lock().unwrap_or_else(|p| p.into_inner());
    *redirects
        .get_or_insert_with(Default::default)
        .entry(slot)
        .or_default() += 1;
}

/// How a cluster node's connections are made.
#[derive(Clone)]
pub(crate) struct ClusterEndpoint {
    /// `cluster(host:port,…)`, the sorted seeds (no password).
    name: String,
    /// The seeds' `host:port`, sorted, in lower case: one identity each
    /// (see [`Endpoint::identities`](super::Endpoint::identities)).
    addresses: Vec<String>,
    client: redis::cluster::ClusterClient,
    /// A plain client per seed, for subscribers.
    seeds: Arc<[redis::Client]>,
    /// The seed the next subscriber tries.
    next: Arc<AtomicUsize>,
}

impl ClusterEndpoint {
    /// A cluster reached through `seeds` (`redis://[user:password@]host:port`
    /// each); `connect` bounds each of redis-rs's connection attempts.
    pub(crate) fn new(seeds: &[String], connect: Duration) -> Result<Self, RedisError> {
        let mut clients = Vec::with_capacity(seeds.len());
        let mut names = Vec::with_capacity(seeds.len());
        for seed in seeds {
            let client = redis::Client::open(seed.as_str())?;
            names.push(client.get_connection_info().addr().to_string());
            clients.push(client);
        }
        names.sort();
        names.dedup();
        // redis-rs's own requests (the PING on each new connection, the
        // `CLUSTER SLOTS` of a refresh) have no bound but these: without a
        // response timeout, one frozen server (a replica even) would hold
        // every new cluster connection forever. A connection is made in
        // phases (every seed at once, then the slot map, then every node it
        // names at once), each up to `connection_timeout` plus
        // `response_timeout` for an unanswering server: a quarter of the
        // connect budget each keeps two phases within it.
        let part = (connect / 4).max(Duration::from_millis(1));
        let client = ClusterClientBuilder::new(seeds.iter().map(String::as_str))
            // Nothing retried behind our back: see the module's doc.
            .retries(0)
            .connection_timeout(part)
            .response_timeout(part)
            // Our own timeouts bound each request as a whole.
            .overall_response_timeout(None)
            .build()?;
        Ok(ClusterEndpoint {
            name: format!("cluster({})", names.join(",")),
            addresses: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            client,
            seeds: clients.into(),
            next: Arc::default(),
        })
    }

    /// The cluster's identities for duplicate detection: each seed's
    /// `host:port`. Two nodes that share a seed, or a seed given as a plain
    /// node too, are one cluster: one failure domain must not vote twice.
    pub(crate) fn identities(&self) -> Vec<String> {
        self.addresses.clone()
    }

    pub(crate) fn name(&self) -> String {
        self.name.clone()
    }

    pub(crate) async fn connect(&self) -> Result<ClusterConnection, RedisError> {
        self.client.get_async_connection().await
    }

    /// A subscriber on one seed, the next one at each call.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, RedisError> {
        let at = self.next.fetch_add(1, Ordering::Relaxed) % self.seeds.len();
        self.seeds[at].get_async_pubsub().await
    }
}

/// The cluster's primaries as the guard sees them ([`ServerInfo`]: each
/// one's identity, [`primary_identity`], and uptime), from `INFO server`
/// and `INFO replication` sent to all of them (`Err` with the reason if
/// that failed, or if the two answers do not come from the same
/// primaries: one failed over in between); with `born`, which of them the
/// [`BORN_EMPTY_KEY`] set names (one set for the cluster, in its key's
/// slot; a refusal reads as empty).
///
/// [`primary_identity`]: crate::net::guard::primary_identity
/// [`BORN_EMPTY_KEY`]: crate::net::guard::BORN_EMPTY_KEY
pub(crate) async fn primaries(
    conn: &mut ClusterConnection,
    born: bool,
) -> Result<Vec<ServerInfo>, RedisError> {
    let server = all_primaries(conn, "server").await?;
    let replication = all_primaries(conn, "replication").await?;
    let changed = || {
        RedisError::from((
            ErrorKind::Client,
            "INFO to all primaries",
            "the primaries changed between INFO server and INFO replication".to_owned(),
        ))
    };
    if server.len() != replication.len() {
        return Err(changed());
    }
    let born_empty: Vec<String> = match born {
        true => match redis::cmd("SMEMBERS")
            .arg(crate::net::guard::BORN_EMPTY_KEY)
            .query_async(conn)
            .await
        {
            Ok(members) => members,
            Err(e) if crate::net::classify::is_connection_error(&e) => return Err(e),
            Err(_) => Vec::new(),
        },
        false => Vec::new(),
    };
    let mut primaries = Vec::with_capacity(server.len());
    for (address, server) in &server {
        let Some((_, replication)) = replication.iter().find(|(a, _)| a == address) else {
            return Err(changed());
        };
        let primary = crate::net::guard::server_info(server, Some(replication), true, &born_empty)
            .map_err(|reason| RedisError::from((ErrorKind::Client, "INFO", reason)))?;
        primaries.push(primary);
    }
    Ok(primaries)
}

/// `INFO section` to every primary: (address, answer) each.
async fn all_primaries(
    conn: &mut ClusterConnection,
    section: &str,
) -> Result<Vec<(Value, String)>, RedisError> {
    let mut info = redis::cmd("INFO");
    info.arg(section);
    let reply = conn
        .route_command(
            info,
            RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None)),
        )
        .await?;
    let Value::Map(answers) = reply else {
        return Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "INFO to all primaries: not one answer per primary",
        )));
    };
    answers
        .into_iter()
        .map(|(address, answer)| Ok((address, redis::from_redis_value(answer)?)))
        .collect()
}

/// What a command sent to a cluster came back with.
pub(crate) struct Ran {
    /// Its reply (an error reply as `Err`).
    pub(crate) reply: Result<Value, RedisError>,
    /// The identity of the primary that ran it
    /// ([`primary_identity`](crate::net::guard::primary_identity)), when asked
    /// for and told.
    pub(crate) primary: Option<Result<String, String>>,
}

/// Sends `cmd` to the primary serving `key`'s slot (anywhere without a
/// key), following `MOVED` and `ASK` ourselves (see the module's doc), each
/// hop through `gate`; with `watch`, pipelined with `INFO server` and
/// `INFO replication` (two commands: `INFO` of several sections needs Redis
/// 7) on the same route, so that the primary that ran it is known. `None` if the gate was shut before a
/// hop could be handed over (that hop did not run; an earlier hop was
/// redirected, so it did not run either).
pub(crate) async fn send(
    conn: &ClusterConnection,
    cmd: &Cmd,
    key: Option<&[u8]>,
    gate: Option<&Gate>,
    watch: bool,
) -> Option<Result<Ran, RedisError>> {
    let mut route = match key {
        Some(key) => SingleNodeRoutingInfo::SpecificNode(Route::new(
            crate::keys::key_slot(key),
            SlotAddr::Master,
        )),
        None => SingleNodeRoutingInfo::Random,
    };
    let mut asking = false;
    for _ in 0..=MAX_REDIRECTS {
        let mut pipe = redis::pipe();
        if asking {
            pipe.cmd("ASKING");
        }
        pipe.add_command(cmd.clone());
        if watch {
            pipe.cmd("INFO").arg("server");
            pipe.cmd("INFO").arg("replication");
        }
        let count = 1 + usize::from(asking) + 2 * usize::from(watch);
        let mut conn = conn.clone();
        let hop = route.clone();
        let answer = Pass::new(gate, async move {
            conn.route_pipeline(pipe, 0, count, hop).await
        })
        .await?;
        match answer {
            Ok(values) => return Some(Ok(read(values, asking, watch))),
            Err(e) => match redirect(&e) {
                Some((to, ask)) => {
                    if let Some(key) = key {
                        count_redirect(crate::keys::key_slot(key));
                    }
                    route = to;
                    asking = ask;
                }
                None => return Some(Err(e)),
            },
        }
    }
    // A slot moving under many requests at once (a reshard): the node's
    // failure for this request, which waiting mends, never the client's
    // own configuration (`NodeFailure::Client` is lasting).
    Some(Err(RedisError::from((
        ErrorKind::Server(ServerErrorKind::TryAgain),
        "too many cluster redirects",
        format!("more than {MAX_REDIRECTS} MOVED/ASK answers for one request"),
    ))))
}

/// Where a `MOVED` or `ASK` error sends the request, and whether it is an
/// `ASK` (`ASKING` first, and the slot map is not changed).
fn redirect(e: &RedisError) -> Option<(SingleNodeRoutingInfo, bool)> {
    let ask = match e.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => false,
        ErrorKind::Server(ServerErrorKind::Ask) => true,
        _ => return None,
    };
    let (address, _slot) = e.redirect_node()?;
    let (host, port) = address.rsplit_once(':')?;
    let port = port.parse().ok()?;
    Some((
        SingleNodeRoutingInfo::ByAddress {
            host: host.to_owned(),
            port,
        },
        ask,
    ))
}

/// The command's reply and, if asked for, the primary's identity, from the
/// pipeline's replies.
fn read(values: Vec<Value>, asking: bool, watch: bool) -> Ran {
    let mut values = values.into_iter().skip(usize::from(asking));
    let reply = match values.next() {
        Some(value) => value.extract_error(),
        None => Err(RedisError::from((
            ErrorKind::UnexpectedReturnType,
            "a cluster pipeline came back without the command's reply",
        ))),
    };
    let mut text = |section: &str| match values.next() {
        Some(value) => {
            redis::from_redis_value::<String>(value).map_err(|e| format!("INFO {section}: {e}"))
        }
        None => Err(format!("no INFO {section} reply")),
    };
    let primary = watch.then(|| {
        let server = text("server");
        let replication = text("replication");
        crate::net::guard::primary_identity(&server?, &replication?)
    });
    Ran { reply, primary }
}

/// The key a command is routed by: a script's first key, a plain command's
/// first argument after its name (`SET key …`); none for `PING`.
pub(crate) fn route_key(command: &crate::proto::Prepared) -> Option<Vec<u8>> {
    if let Some(script) = &command.script {
        return script.keys.first().map(|k| k.as_bytes().to_vec());
    }
    let mut args = command.first.args_iter();
    let redis::Arg::Simple(name) = args.next()? else {
        return None;
    };
    if name.eq_ignore_ascii_case(b"PING") {
        return None;
    }
    match args.next()? {
        redis::Arg::Simple(key) => Some(key.to_vec()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::classify::error;

    #[test]
    fn redirects_are_followed_to_the_address_named_and_nothing_else() {
        match redirect(&error("-MOVED 3999 127.0.0.1:6381\r\n")) {
            Some((SingleNodeRoutingInfo::ByAddress { host, port }, false)) => {
                assert_eq!((host.as_str(), port), ("127.0.0.1", 6381));
            }
            other => panic!("{other:?}"),
        }
        match redirect(&error("-ASK 3999 10.0.0.2:7000\r\n")) {
            Some((SingleNodeRoutingInfo::ByAddress { host, port }, true)) => {
                assert_eq!((host.as_str(), port), ("10.0.0.2", 7000));
            }
            other => panic!("{other:?}"),
        }
        // Errors after which the command may have run, or that name no
        // address, are not followed.
        for reply in [
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
            "-ERR something\r\n",
            "-MOVED 3999\r\n",
        ] {
            assert!(redirect(&error(reply)).is_none(), "{reply}");
        }
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(redirect(&io).is_none());
    }

    #[test]
    fn the_reply_and_the_primary_are_read_from_the_pipeline() {
        let info = Value::BulkString(b"# Server\r\nrun_id:abc\r\nuptime_in_seconds:5\r\n".to_vec());
        let replication =
            Value::BulkString(b"# Replication\r\nrole:master\r\nmaster_replid:r1\r\n".to_vec());
        let ran = read(
            vec![
                Value::Okay,
                Value::Int(1),
                info.clone(),
                replication.clone(),
            ],
            true,
            true,
        );
        assert_eq!(ran.reply.unwrap(), Value::Int(1));
        assert_eq!(ran.primary, Some(Ok("abc/r1".to_owned())));
        // Without the replication ID the primary is not told.
        let ran = read(vec![Value::Int(1), info.clone()], false, true);
        assert!(matches!(ran.primary, Some(Err(_))));
        let ran = read(vec![Value::Int(1)], false, false);
        assert!(ran.primary.is_none());
        // A script error is the command's reply; INFO refused is a reason.
        let refused = redis::parse_redis_value(b"-NOPERM no\r\n").unwrap();
        let noscript = redis::parse_redis_value(b"-NOSCRIPT No matching script\r\n").unwrap();
        let ran = read(vec![noscript, refused, replication], false, true);
        assert_eq!(
            ran.reply.unwrap_err().kind(),
            ErrorKind::Server(ServerErrorKind::NoScript)
        );
        assert!(matches!(ran.primary, Some(Err(_))));
        assert!(read(Vec::new(), false, true).reply.is_err());
    }
}
