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
//! * **Nothing replayed behind our back, and no layer in between.** We
//!   route ourselves ([`Shards`]): a new connection asks the seeds for the
//!   slot map (`CLUSTER SLOTS`) and opens one plain multiplexed
//!   connection to each primary it names, each command goes to the
//!   primary of its key's slot, and nothing is retried but an answer that
//!   the slot is moving and nothing ran (`TRYAGAIN`, from Redis or from
//!   our scripts: [`moving`]), sent again after a pause within the
//!   request's bound.
//!   (redis-rs's
//!   cluster connection, used before, retries a request on one counter for
//!   every reason it has, an I/O error included, after which the command
//!   may have run: its resending after our rollback could leave a key
//!   nobody holds; and each request crossed its task and channel on top of
//!   the plain connection's, which made a lock on cluster nodes cost
//!   about 1.9 times the client CPU of one on plain servers.) We follow
//!   the redirects ([`send`]): a `MOVED` or `ASK` answer means the command
//!   did not run, so sending it to the primary named (with `ASKING` first
//!   for `ASK`) is no replay; each hop passes the lock's [`Gate`] again,
//!   so a hop after the lock's removal began is dropped unsent. A `MOVED`
//!   updates the slot map; a redirect to a server the map did not name (a
//!   shard being added: its slots `ASK` there while they move) is followed
//!   too, connecting to it first, within the request's bound; its grants'
//!   `INFO` then tells the guard it is new. A slot no primary served when
//!   the map was read is a connection error: the next connection reads
//!   the map afresh. At most [`MAX_REDIRECTS`] hops. A connection error is a
//!   failed vote, handled by the one retry of `Inner::run` like on a plain
//!   node (before the vote is counted, through the gate). The gate needs
//!   the hand-over to be immediate: each primary's connection is a plain
//!   node's, with a plain node's buffer and `max_in_flight` bound.
//!
//! * **The restart guard per shard.** A shard's primary can change under
//!   a connection that stays open (a failback, below), so "read `INFO
//!   server` on every new connection" is not enough. Instead: at connect, the identity of
//!   every primary is learned (`INFO server` and `INFO replication` to all
//!   primaries); and every acquisition
//!   ([`Effect::Grant`](crate::proto::Effect)) runs its script's twin
//!   ([`watched`]), which reads `INFO replication` where it runs, after the
//!   script's own work, so the reply names the primary that ran it. A
//!   primary is its `master_replid`
//!   ([`primary_identity`](crate::net::guard::primary_identity)), which
//!   Redis draws afresh at every promotion and every start: a failback
//!   (P1 fails over to R1, then R1 back to P1: P1, a replica meanwhile,
//!   may lack R1's grants, and its `run_id` is known) is a new identity.
//!   Why with every grant, and not only when the primary can have changed
//!   (a new connection, a redirect): a failback while this client sent
//!   nothing to the shard leaves its connection to P1 open and brings no
//!   redirect, so only a word that comes back with the grant sees it. The
//!   word is small: the role and the replication ID, about 50 bytes, which
//!   the script cuts from its server's own `INFO replication` (no `INFO
//!   server`, since the replication ID alone names a primary); and as one
//!   script runs alone, the word names the server at the moment it
//!   granted, with nothing between the two (a separate `INFO` pipelined
//!   behind the grant, as before, cost the client a 450-byte answer and
//!   redis-rs's pipeline path with every grant). An `INFO` refused (an
//!   ACL without it) leaves the grant done and the primary untold (see
//!   `Guard::granted_by`). A grant from a primary this client has not seen is no
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
//! * **Every request bounded.** Making a connection is bounded in two
//!   steps of a quarter of the connect timeout each (every seed asked at
//!   once for the map, the first usable answer taken; then every primary
//!   at once), so that one frozen server does not hold every new cluster
//!   connection; replicas are never contacted. Each request is bounded by ours, as on a plain
//!   node.
//!
//! What it costs in availability: a connection error on any one primary
//! (killed, say) replaces the whole cluster connection, as on a plain
//! node (the old one is retired, not dropped: requests handed to it may
//! still be written, and the removals sent meanwhile are written on it
//! too, see `Inner::replace_connection`), and the new one must reach every
//! primary for the guard's `INFO`: until the cluster has promoted a
//! replica (its `cluster-node-timeout`), the node votes `Connection` for
//! every key, not only for the keys of the dead shard. The new connection
//! is sure to find the promoted replica, since it reads the slot map
//! afresh. Keeping the connections to the other primaries, and learning a
//! new one alone, would narrow the cost to the shard; not done yet.

use std::sync::atomic::{AtomicU16, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ErrorKind, Pipeline, RedisError, RedisFuture,
    ServerErrorKind, Value,
};

use crate::net::guard::ServerInfo;
use crate::proto::{Gate, Pass, Prepared, Script};

/// The most redirects one request follows (a slot migrating while the
/// slot map is refreshed takes two).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// How long one request is sent again, at most, while its slot answers
/// that it is moving ([`moving`]), each time after a pause twice the last,
/// from [`FIRST_PAUSE`] up to [`LONGEST_PAUSE`]. A lock's request has its
/// own bound (`Inner::run`'s timeout), which ends it first: a removal that
/// runs out of it counts as unanswered, and is sent again until its key
/// would have expired. This bounds the connection's own uses, which have
/// none (the checks at connect, `SCRIPT LOAD`).
const MAX_MOVING: Duration = Duration::from_secs(10);

/// The pause before a request whose slot was moving is sent again.
const FIRST_PAUSE: Duration = Duration::from_millis(1);

/// The longest pause between two sends of a request whose slot is moving.
const LONGEST_PAUSE: Duration = Duration::from_millis(40);

/// The slots of a Redis Cluster.
const SLOTS: usize = 16_384;

/// No primary known for a slot.
const NONE: u16 = u16::MAX;

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
    /// A plain client per seed: the slot map is asked of them, subscribers
    /// listen on them, and each primary is reached with a seed's
    /// credentials and TLS settings.
    seeds: Arc<[redis::Client]>,
    /// The seed the next subscriber tries.
    next: Arc<AtomicUsize>,
    /// The bound on each step of making a connection (a seed's, a
    /// primary's; the slot map).
    step: Duration,
}

impl ClusterEndpoint {
    /// A cluster reached through `seeds` (`redis://[user:password@]host:port`
    /// each); `connect` bounds making a connection to it.
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
        Ok(ClusterEndpoint {
            name: format!("cluster({})", names.join(",")),
            addresses: names.iter().map(|n| n.to_ascii_lowercase()).collect(),
            seeds: clients.into(),
            next: Arc::default(),
            // A seed that does not answer, then the primaries: a quarter
            // of the budget each keeps two seeds and the primaries in it.
            step: (connect / 4).max(Duration::from_millis(1)),
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

    /// A new connection: the slot map (`CLUSTER SLOTS`) from the first
    /// seed that gives one (all are asked at once, each within a step: a
    /// seed that hangs, or that answers with no usable map, a node that
    /// lost its `nodes.conf` say, does not hold up the others), then one
    /// connection to each primary it names, at once. Any primary
    /// unreachable fails it (the guard must hear every primary: see the
    /// module's doc).
    pub(crate) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<ShardsConn, RedisError> {
        let asks = self.seeds.iter().map(|seed| {
            Box::pin(async move {
                let ask = async {
                    let mut conn = seed
                        .get_multiplexed_async_connection_with_config(config)
                        .await?;
                    let slots: Value = redis::cmd("CLUSTER")
                        .arg("SLOTS")
                        .query_async(&mut conn)
                        .await?;
                    let host = match seed.get_connection_info().addr() {
                        ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => {
                            host.clone()
                        }
                        _ => String::new(),
                    };
                    // Not lasting: another seed, or a later try, may do.
                    let ranges = slot_map(&slots, &host).map_err(|reason| {
                        RedisError::from((
                            ErrorKind::Server(ServerErrorKind::ClusterDown),
                            "CLUSTER SLOTS",
                            reason,
                        ))
                    })?;
                    Ok::<_, RedisError>((seed, ranges))
                };
                tokio::time::timeout(self.step, ask)
                    .await
                    .map_err(timed_out)?
            })
        });
        if self.seeds.is_empty() {
            return Err(RedisError::from((
                ErrorKind::Client,
                "a cluster node with no seed",
            )));
        }
        let ((seed, ranges), _) = futures::future::select_ok(asks).await?;
        let mut addresses: Vec<(String, u16)> = Vec::new();
        let slots: Box<[AtomicU16]> = (0..SLOTS).map(|_| AtomicU16::new(NONE)).collect();
        for (first, last, host, port) in ranges {
            let at = match addresses.iter().position(|a| a.0 == host && a.1 == port) {
                Some(at) => at,
                None => {
                    addresses.push((host, port));
                    addresses.len() - 1
                }
            };
            for slot in first..=last {
                slots[usize::from(slot)].store(at as u16, Ordering::Relaxed);
            }
        }
        let template = seed.get_connection_info().clone();
        let conns = futures::future::try_join_all(
            addresses
                .iter()
                .map(|(host, port)| reach(&template, config, host, *port, self.step)),
        )
        .await?;
        let primaries = addresses
            .into_iter()
            .zip(conns)
            .map(|((host, port), conn)| Arc::new(Primary { host, port, conn }))
            .collect();
        Ok(ShardsConn(Arc::new(Shards {
            primaries,
            met: std::sync::Mutex::default(),
            slots,
            template,
            config: config.clone(),
            step: self.step,
        })))
    }

    /// A subscriber on one seed, the next one at each call.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, RedisError> {
        let at = self.next.fetch_add(1, Ordering::Relaxed) % self.seeds.len();
        self.seeds[at].get_async_pubsub().await
    }
}

/// The slot ranges of a `CLUSTER SLOTS` answer, each with its primary's
/// host and port (`seed`, the host asked, where the answer leaves it
/// empty or nil, as Redis does for an endpoint it does not know: the one
/// the client used).
fn slot_map(answer: &Value, seed: &str) -> Result<Vec<(u16, u16, String, u16)>, String> {
    let int = |v: &Value| match v {
        Value::Int(n) => u16::try_from(*n).ok(),
        _ => None,
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        // `cluster-preferred-endpoint-type unknown-endpoint`: the one asked.
        Value::Nil => Some(String::new()),
        _ => None,
    };
    let Value::Array(ranges) = answer else {
        return Err(format!("not a list of slot ranges: {answer:?}"));
    };
    let mut map = Vec::with_capacity(ranges.len());
    for range in ranges {
        let parsed = (|| {
            let Value::Array(fields) = range else {
                return None;
            };
            let (first, last) = (int(fields.first()?)?, int(fields.get(1)?)?);
            let Value::Array(primary) = fields.get(2)? else {
                return None;
            };
            let host = text(primary.first()?)?;
            let port = int(primary.get(1)?)?;
            let host = match host.as_str() {
                "" => seed.to_owned(),
                "?" => return None,
                _ => host,
            };
            (first <= last && usize::from(last) < SLOTS).then_some((first, last, host, port))
        })();
        map.push(parsed.ok_or_else(|| format!("a slot range not understood: {range:?}"))?);
    }
    if map.is_empty() {
        return Err("no slot is served (a cluster not yet set up?)".to_owned());
    }
    Ok(map)
}

/// A connection to the server at `host:port`, with the seeds' settings
/// (credentials, TLS), within `step`.
async fn reach(
    template: &redis::ConnectionInfo,
    config: &AsyncConnectionConfig,
    host: &str,
    port: u16,
    step: Duration,
) -> Result<MultiplexedConnection, RedisError> {
    let addr = match template.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    let client = redis::Client::open(template.clone().set_addr(addr))?;
    let conn = client.get_multiplexed_async_connection_with_config(config);
    tokio::time::timeout(step, conn).await.map_err(timed_out)?
}

/// A step of making a connection that took too long: a connection error.
fn timed_out(e: tokio::time::error::Elapsed) -> RedisError {
    RedisError::from(std::io::Error::new(std::io::ErrorKind::TimedOut, e))
}

/// The most servers a connection meets by redirects beyond the primaries
/// its slot map named.
const MAX_MET: usize = 64;

/// A cluster's command connection, routed by us: one multiplexed
/// connection to each primary, and which of them serves each slot.
pub(crate) struct Shards {
    /// The primaries the slot map named when the connection was made.
    primaries: Box<[Arc<Primary>]>,
    /// Servers met since, by a redirect (a shard being added: its slots
    /// `ASK` there while they move), each connected at its first redirect;
    /// numbered after `primaries`, at most [`MAX_MET`].
    met: std::sync::Mutex<Vec<Arc<Primary>>>,
    /// For each slot, the number of the server serving it ([`NONE`]: none
    /// named), updated by `MOVED`.
    slots: Box<[AtomicU16]>,
    /// How a server met is reached: the seed's settings, its address
    /// replaced.
    template: redis::ConnectionInfo,
    config: AsyncConnectionConfig,
    step: Duration,
}

/// One server of a cluster (a primary, as far as we know).
struct Primary {
    host: String,
    port: u16,
    conn: MultiplexedConnection,
}

impl Shards {
    /// The number of the server serving `key`'s slot (the first primary
    /// for no key). A slot no primary served when the map was read is a
    /// connection error: the next connection reads the map afresh.
    fn route(&self, key: Option<&[u8]>) -> Result<usize, RedisError> {
        let Some(key) = key else {
            return Ok(0);
        };
        let slot = crate::keys::key_slot(key);
        match self.slots[usize::from(slot)].load(Ordering::Relaxed) {
            NONE => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("no primary served slot {slot} when the slot map was read"),
            ))),
            at => Ok(usize::from(at)),
        }
    }

    /// The server numbered `at`.
    fn server(&self, at: usize) -> Arc<Primary> {
        match self.primaries.get(at) {
            Some(primary) => primary.clone(),
            None => {
                let met = self.met.lock().unwrap_or_else(|p| p.into_inner());
                met[at - self.primaries.len()].clone()
            }
        }
    }

    /// Every server: the primaries, and those met since.
    fn servers(&self) -> Vec<Arc<Primary>> {
        let met = self.met.lock().unwrap_or_else(|p| p.into_inner());
        self.primaries.iter().chain(met.iter()).cloned().collect()
    }

    /// The number of the server at `host:port`, connecting to it if it is
    /// new (within a step).
    async fn find(&self, host: &str, port: u16) -> Result<usize, RedisError> {
        let known = |met: &[Arc<Primary>]| {
            self.primaries
                .iter()
                .chain(met)
                .position(|p| p.port == port && p.host.eq_ignore_ascii_case(host))
        };
        if let Some(at) = known(&self.met.lock().unwrap_or_else(|p| p.into_inner())) {
            return Ok(at);
        }
        let conn = reach(&self.template, &self.config, host, port, self.step).await?;
        let mut met = self.met.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(at) = known(&met) {
            return Ok(at);
        }
        if met.len() >= MAX_MET {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                format!("redirected to {host}:{port}, past {MAX_MET} servers met"),
            )));
        }
        met.push(Arc::new(Primary {
            host: host.to_owned(),
            port,
            conn,
        }));
        Ok(self.primaries.len() + met.len() - 1)
    }
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(
                self.primaries
                    .iter()
                    .map(|p| format!("{}:{}", p.host, p.port)),
            )
            .finish()
    }
}

/// The cluster's primaries as the guard sees them ([`ServerInfo`]: each
/// one's identity, [`primary_identity`], and uptime), from `INFO server`
/// and `INFO replication` sent to each; with `born`, which of them the
/// [`BORN_EMPTY_KEY`] set names (one set for the cluster, in its key's
/// slot; a refusal reads as empty).
///
/// [`primary_identity`]: crate::net::guard::primary_identity
/// [`BORN_EMPTY_KEY`]: crate::net::guard::BORN_EMPTY_KEY
pub(crate) async fn primaries(shards: &Shards, born: bool) -> Result<Vec<ServerInfo>, RedisError> {
    let born_empty: Vec<String> = match born {
        true => {
            let key = crate::net::guard::BORN_EMPTY_KEY;
            let mut members = redis::cmd("SMEMBERS");
            members.arg(key);
            match send(shards, &members, Some(key.as_bytes()), None, false, &|| {}).await {
                Some(Ok(Ran {
                    reply: Ok(value), ..
                })) => redis::from_redis_value(value).unwrap_or_default(),
                Some(Err(e)) if crate::net::classify::is_connection_error(&e) => return Err(e),
                _ => Vec::new(),
            }
        }
        false => Vec::new(),
    };
    let answers = futures::future::try_join_all(shards.primaries.iter().map(|primary| {
        let mut pipe = redis::pipe();
        pipe.cmd("INFO").arg("server");
        pipe.cmd("INFO").arg("replication");
        let mut conn = primary.conn.clone();
        async move { pipe.query_async::<(String, String)>(&mut conn).await }
    }))
    .await?;
    answers
        .iter()
        .map(|(server, replication)| {
            crate::net::guard::server_info(server, Some(replication), true, &born_empty)
                .map_err(|reason| RedisError::from((ErrorKind::Client, "INFO", reason)))
        })
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

/// Sends `cmd` to the primary serving `key`'s slot (the first primary
/// without a key), following `MOVED` and `ASK` ourselves (see the module's
/// doc), each hop through `gate`. With `watched`, `cmd` runs a script's
/// [`watched`] twin, whose reply also names the primary that ran it.
/// `None` if the gate was shut before a hop could be handed over (that hop
/// did not run; an earlier hop was redirected, so it did not run either). A
/// redirect to a server not met yet connects to it first. `answered` is
/// called each time the server answers that the slot is moving, before
/// the command is sent again.
pub(crate) async fn send(
    shards: &Shards,
    cmd: &Cmd,
    key: Option<&[u8]>,
    gate: Option<&Gate>,
    watched: bool,
    answered: &(dyn Fn() + Sync),
) -> Option<Result<Ran, RedisError>> {
    let mut at = match shards.route(key) {
        Ok(at) => at,
        Err(e) => return Some(Err(e)),
    };
    let mut asking = false;
    let mut hops = 0;
    let mut pause = FIRST_PAUSE;
    let since = tokio::time::Instant::now();
    loop {
        let server = shards.server(at);
        let mut conn = server.conn.clone();
        let reply = if asking {
            let mut pipe = redis::pipe();
            pipe.cmd("ASKING");
            pipe.add_command(cmd.clone());
            // Boxed: rare (a slot moving), it would otherwise add its
            // pipeline's state to every request's.
            let answer = Box::pin(Pass::new(gate, async move {
                conn.req_packed_commands(&pipe, 0, 2).await
            }))
            .await?;
            match answer {
                // `ASKING`'s `OK`, then the command's reply.
                Ok(values) => values.into_iter().nth(1).ok_or_else(|| {
                    RedisError::from((
                        ErrorKind::UnexpectedReturnType,
                        "a cluster pipeline came back without the command's reply",
                    ))
                }),
                Err(e) => return Some(Err(e)),
            }
        } else {
            Pass::new(gate, async move { conn.req_packed_command(cmd).await }).await?
        };
        let ran = match reply {
            Ok(value) => read(value, watched),
            Err(e) => Ran {
                reply: Err(e),
                primary: None,
            },
        };
        if let Err(e) = &ran.reply
            && moving(e)
            && since.elapsed() < MAX_MOVING
        {
            // Nothing ran (see `moving`): sent again, from the slot map,
            // once the move may have ended, with the redirects' count
            // afresh (each send meets the move's `ASK` anew). The node
            // answered: a move longer than the connection's silence limit
            // does not make it look dead (`answered`).
            answered();
            hops = 0;
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_PAUSE);
            at = match shards.route(key) {
                Ok(at) => at,
                Err(e) => return Some(Err(e)),
            };
            asking = false;
            continue;
        }
        let to = match &ran.reply {
            Err(e) => redirect(e),
            Ok(_) => None,
        };
        let Some((host, port, ask)) = to else {
            return Some(Ok(ran));
        };
        if hops == MAX_REDIRECTS {
            // A slot moving under many requests at once (a reshard): the
            // node's failure for this request, which waiting mends, never
            // the client's own configuration (`NodeFailure::Client` is
            // lasting).
            return Some(Err(RedisError::from((
                ErrorKind::Server(ServerErrorKind::TryAgain),
                "too many cluster redirects",
                format!("more than {MAX_REDIRECTS} MOVED/ASK answers for one request"),
            ))));
        }
        hops += 1;
        if let Some(key) = key {
            count_redirect(crate::keys::key_slot(key));
        }
        // No host: the one asked (Redis's `unknown-endpoint`).
        let host = if host.is_empty() { &server.host } else { &host };
        // A server not met yet is connected to here, before the hop (so
        // within the request's bound); its grant's `INFO` then says whether
        // the guard knows it.
        // Boxed: rare (a shard added), connecting would otherwise add its
        // state to every request's, on plain nodes too (a node's request
        // was 3.5 KB in all, 0.9 without it; each is built, then moved
        // into its round).
        let next = match Box::pin(shards.find(host, port)).await {
            Ok(next) => next,
            Err(e) => return Some(Err(e)),
        };
        // A `MOVED` changes the map (an `ASK` is for this request only).
        if let (false, Some(key)) = (ask, key) {
            shards.slots[usize::from(crate::keys::key_slot(key))]
                .store(next as u16, Ordering::Relaxed);
        }
        at = next;
        asking = ask;
    }
}

/// Whether `e` says that the key's slot is halfway through a move between
/// two primaries (`MIGRATING` on one, `IMPORTING` on the other) and that
/// nothing ran: `TRYAGAIN`. Redis answers it, before running anything, for
/// a command whose declared keys are split between the two (or, on the
/// primary they move to, not all there yet); and our scripts answer it,
/// having written nothing, when a key built from theirs (`<key>:waiters`,
/// …) has already left (kinds/moving.lua: Redis would stop the script at
/// that key with an error, after what it had written). So it is sent
/// again, through the lock's gate like any hop, once the move may have
/// ended. Answered at once instead, as on our first routing, a release
/// failed and its key stayed for its whole TTL; two clusters caught so
/// within one TTL kept every waiter out (`tests/cluster.rs`
/// `a_release_and_a_lock_during_a_slot_move_wait_for_it_to_end`).
fn moving(e: &RedisError) -> bool {
    e.kind() == ErrorKind::Server(ServerErrorKind::TryAgain)
}

/// Where a `MOVED` or `ASK` error sends the request (host, port), and
/// whether it is an `ASK` (`ASKING` first, and the slot map is not
/// changed).
fn redirect(e: &RedisError) -> Option<(String, u16, bool)> {
    let ask = match e.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => false,
        ErrorKind::Server(ServerErrorKind::Ask) => true,
        _ => return None,
    };
    let (address, _slot) = e.redirect_node()?;
    let (host, port) = address.rsplit_once(':')?;
    Some((host.to_owned(), port.parse().ok()?, ask))
}

/// A command's reply, and with `watched` the identity of the primary that
/// ran it: a [`watched`] script's reply is `[reply, replication ID]` (or,
/// instead of the ID, `role:<role>` from a server that is not a primary,
/// `refused:<error>` where `INFO` was refused), or an error as it came
/// (Redis's own, `MOVED` or `NOSCRIPT` say, before the script ran; or the
/// script's, which grants nothing).
fn read(value: Value, watched: bool) -> Ran {
    let mut parts = match value {
        Value::Array(parts) if watched && parts.len() == 2 => parts,
        // Unwatched, or an error reply (which names no primary): as it came.
        value if !watched || matches!(value, Value::ServerError(_)) => {
            return Ran {
                reply: value.extract_error(),
                primary: None,
            };
        }
        // The server's answer, not the client's configuration: a failed
        // vote, not a lasting refusal (`NodeFailure::Client` is lasting).
        other => {
            return Ran {
                reply: Err(RedisError::from((
                    ErrorKind::Server(ServerErrorKind::ResponseError),
                    "a grant's script did not answer [reply, replication ID]",
                    format!("{other:?}"),
                ))),
                primary: None,
            };
        }
    };
    let said = match parts.pop() {
        Some(Value::BulkString(bytes)) => String::from_utf8(bytes).unwrap_or_default(),
        _ => String::new(),
    };
    let primary = if let Some(role) = said.strip_prefix("role:") {
        crate::net::guard::named_primary(Some(role).filter(|r| !r.is_empty()), None)
    } else if let Some(error) = said.strip_prefix("refused:") {
        Err(format!("INFO replication refused to the script: {error}"))
    } else if said.is_empty() {
        crate::net::guard::named_primary(Some("master"), None)
    } else {
        Ok(said)
    };
    let reply = parts.pop().map_or(Ok(Value::Nil), Value::extract_error);
    Ran {
        reply,
        primary: Some(primary),
    }
}

/// A plain command as a script: `redis.call` of its arguments (`ARGV`:
/// its name, then its own), its key declared (`KEYS[1]`, for the cluster's
/// routing checks). A grant that is a plain command (the mutex's `SET NX
/// PX`) runs as one on a cluster node with the guard on, so that it has a
/// [`watched`] twin too ([`watched_call`]).
static COMMAND: LazyLock<Script> =
    LazyLock::new(|| Script::new("return redis.call(unpack(ARGV))\n"));

/// `VERB` (`EVALSHA`, or `EVAL` for a node that lacks it) of the
/// [`watched`] twin of `command`'s script, and that twin; a plain command
/// is called as [`COMMAND`] with its key declared.
pub(crate) fn watched_call(verb: &str, command: &Prepared) -> (Cmd, &'static Script) {
    if let Some(call) = &command.script {
        let twin = call.script.twin(watched);
        return (call.call_of(verb, twin), twin);
    }
    let twin = COMMAND.twin(watched);
    let cmd = &command.first;
    let args = cmd.args_iter().filter_map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let call = crate::proto::encode_call(verb, twin.body(verb), cmd_key(cmd).into_iter(), args);
    (call, twin)
}

/// The end of every grant's script on a cluster node with the guard on
/// (`watched.lua`), after the script itself as a function.
const WATCHED_END: &str = include_str!("watched.lua");

/// The twin of a grant's script that also names the primary that ran it:
/// the script as a function, whose reply comes back with the role and the
/// replication ID of the server that ran it, read from `INFO replication`
/// inside the same script (`watched.lua`). One command, a reply 50 bytes
/// longer: a separate `INFO replication` pipelined with the grant, as
/// before, made the client read a 450-byte answer and take redis-rs's
/// pipeline path with every grant. An error the script answers (as
/// `moving.lua`'s `TRYAGAIN`) comes back as it is, naming no primary; it
/// grants nothing.
pub(crate) fn watched(source: &str) -> String {
    format!("local function granted()\n{source}\n{WATCHED_END}")
}

/// The key a command is routed by: a script's first key, a plain command's
/// first argument after its name (`SET key …`); none for `PING`.
pub(crate) fn route_key(command: &crate::proto::Prepared) -> Option<Vec<u8>> {
    if let Some(script) = &command.script {
        return script.keys.first().map(|k| k.as_bytes().to_vec());
    }
    cmd_key(&command.first).map(<[u8]>::to_vec)
}

/// The key a command names: `EVAL`/`EVALSHA`'s first key, if any; none for
/// the commands that take none (`PING`, `INFO`, `CONFIG`, `SCRIPT`, …);
/// otherwise the first argument after the name (`SET key …`).
fn cmd_key(cmd: &Cmd) -> Option<&[u8]> {
    let mut args = cmd.args_iter().map(|arg| match arg {
        redis::Arg::Simple(bytes) => Some(bytes),
        _ => None,
    });
    let name = args.next()??;
    const KEYLESS: [&[u8]; 8] = [
        b"PING", b"INFO", b"CONFIG", b"SCRIPT", b"CLUSTER", b"ACL", b"CLIENT", b"PUBLISH",
    ];
    if KEYLESS.iter().any(|k| name.eq_ignore_ascii_case(k)) {
        return None;
    }
    if name.eq_ignore_ascii_case(b"EVAL") || name.eq_ignore_ascii_case(b"EVALSHA") {
        let _script = args.next()??;
        let keys = std::str::from_utf8(args.next()??)
            .ok()?
            .parse::<usize>()
            .ok()?;
        return if keys > 0 { args.next()? } else { None };
    }
    args.next()?
}

/// The connection used as a plain one (the connect-time checks, the who
/// records, script loading): each command routed by [`cmd_key`], redirects
/// followed, `SCRIPT` and `PING` to every server; a pipeline by its first
/// command's key.
impl ConnectionLike for ShardsConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            // `SCRIPT LOAD` (a script a primary lacked) to every server:
            // which one lacked it is not known here. `PING` (a retired
            // connection's drain) too: each socket must have answered
            // what it carried.
            if let Some(redis::Arg::Simple(name)) = cmd.args_iter().next()
                && (name.eq_ignore_ascii_case(b"SCRIPT") || name.eq_ignore_ascii_case(b"PING"))
            {
                let all = self.0.servers().into_iter().map(|primary| {
                    let mut conn = primary.conn.clone();
                    async move { conn.req_packed_command(cmd).await }
                });
                let replies = futures::future::join_all(all).await;
                let failed = replies.iter().position(Result::is_err).unwrap_or(0);
                return replies.into_iter().nth(failed).unwrap_or(Ok(Value::Nil));
            }
            match send(&self.0, cmd, cmd_key(cmd), None, false, &|| {}).await {
                Some(Ok(ran)) => ran.reply,
                Some(Err(e)) => Err(e),
                None => unreachable!("no gate, never cut off"),
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let key = cmd.cmd_iter().next().and_then(cmd_key);
        let at = self.0.route(key);
        Box::pin(async move {
            let mut conn = self.0.server(at?).conn.clone();
            conn.req_packed_commands(cmd, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// A cluster's command connection as a node holds it.
#[derive(Clone, Debug)]
pub(crate) struct ShardsConn(pub(crate) Arc<Shards>);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::classify::error;

    #[test]
    fn redirects_are_followed_to_the_address_named_and_nothing_else() {
        assert_eq!(
            redirect(&error("-MOVED 3999 127.0.0.1:6381\r\n")),
            Some(("127.0.0.1".to_owned(), 6381, false))
        );
        assert_eq!(
            redirect(&error("-ASK 3999 10.0.0.2:7000\r\n")),
            Some(("10.0.0.2".to_owned(), 7000, true))
        );
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

    /// A slot halfway through a move, nothing run (Redis's `TRYAGAIN`, or
    /// our scripts'), is sent again; nothing else is: not a script stopped
    /// at a key that left (it may have written), not a connection error
    /// (the command may have run).
    #[test]
    fn only_a_slot_moving_is_waited_out() {
        for reply in [
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
            "-TRYAGAIN the slot of {redquorum:a} is moving\r\n",
        ] {
            assert!(moving(&error(reply)), "{reply}");
        }
        for reply in [
            "-ERR Script attempted to access a non local key in a cluster node script: \
             70fd8f831fecfff160e4ff109f41b4d630e068d5, on @user_script:22.\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
            "-ERR something\r\n",
            "-MOVED 3999 127.0.0.1:6381\r\n",
            "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            "-BADFENCE Script attempted to access a non local key\r\n",
        ] {
            assert!(!moving(&error(reply)), "{reply}");
        }
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!moving(&io));
    }

    #[test]
    fn the_slot_map_names_each_range_s_primary() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |first: i64, last: i64, primary: Value| {
            Value::Array(vec![
                Value::Int(first),
                Value::Int(last),
                primary,
                node("10.0.0.9", 1),
            ])
        };
        let unknown = Value::Array(vec![Value::Nil, Value::Int(7002)]);
        let answer = Value::Array(vec![
            range(0, 5460, node("10.0.0.1", 7000)),
            range(5461, 9000, node("", 7001)),
            range(9001, 16383, unknown),
        ]);
        assert_eq!(
            slot_map(&answer, "seed").unwrap(),
            vec![
                (0, 5460, "10.0.0.1".to_owned(), 7000),
                (5461, 9000, "seed".to_owned(), 7001),
                (9001, 16383, "seed".to_owned(), 7002)
            ]
        );
        for broken in [
            Value::Array(Vec::new()),
            Value::Okay,
            Value::Array(vec![range(5, 4, node("a", 1))]),
            Value::Array(vec![range(0, 16384, node("a", 1))]),
            Value::Array(vec![range(0, 1, node("?", 1))]),
            Value::Array(vec![range(0, 1, node("a", 70000))]),
            Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(1)])]),
        ] {
            assert!(slot_map(&broken, "seed").is_err(), "{broken:?}");
        }
    }

    #[test]
    fn a_command_is_routed_by_its_key() {
        let mut set = redis::cmd("SET");
        set.arg("k1").arg("v");
        assert_eq!(cmd_key(&set), Some(&b"k1"[..]));
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("sha").arg(2).arg("k2").arg("k3").arg("argv");
        assert_eq!(cmd_key(&eval), Some(&b"k2"[..]));
        let mut keyless = redis::cmd("EVAL");
        keyless.arg("return 1").arg(0).arg("argv");
        assert_eq!(cmd_key(&keyless), None);
        for name in ["PING", "INFO", "CONFIG", "SCRIPT"] {
            let mut cmd = redis::cmd(name);
            cmd.arg("server");
            assert_eq!(cmd_key(&cmd), None, "{name}");
        }
        let mut smembers = redis::cmd("smembers");
        smembers.arg("set");
        assert_eq!(cmd_key(&smembers), Some(&b"set"[..]));
    }

    #[test]
    fn the_reply_and_the_primary_are_read_from_a_watched_script() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let watched = |reply, said: &str| Value::Array(vec![reply, bulk(said)]);
        let ran = read(watched(Value::Int(1), "r1"), true);
        assert_eq!(ran.reply.unwrap(), Value::Int(1));
        assert_eq!(ran.primary, Some(Ok("r1".to_owned())));
        // A nil reply (the script's false) is a reply.
        let ran = read(watched(Value::Nil, "r1"), true);
        assert_eq!(ran.reply.unwrap(), Value::Nil);
        assert_eq!(ran.primary, Some(Ok("r1".to_owned())));
        // Without the replication ID, from a replica, or with INFO
        // refused, the primary is not told, and the reply still is.
        for said in ["", "role:slave", "role:", "refused:NOPERM no"] {
            let ran = read(watched(Value::Okay, said), true);
            assert_eq!(ran.reply.unwrap(), Value::Okay, "{said}");
            assert!(matches!(ran.primary, Some(Err(_))), "{said}");
        }
        // An error inside the reply is the command's error.
        let tryagain = redis::parse_redis_value(b"-TRYAGAIN moving\r\n").unwrap();
        let ran = read(watched(tryagain, "r1"), true);
        assert!(moving(&ran.reply.unwrap_err()));
        // An error reply names no primary; Redis's redirects stay readable.
        let moved = redis::parse_redis_value(b"-MOVED 3 10.0.0.1:7000\r\n").unwrap();
        let ran = read(moved, true);
        assert!(ran.primary.is_none());
        assert_eq!(
            redirect(&ran.reply.unwrap_err()),
            Some(("10.0.0.1".to_owned(), 7000, false))
        );
        let noscript = redis::parse_redis_value(b"-NOSCRIPT No matching script\r\n").unwrap();
        assert_eq!(
            read(noscript, true).reply.unwrap_err().kind(),
            ErrorKind::Server(ServerErrorKind::NoScript)
        );
        // Any other shape is an error, never a grant without its primary.
        for other in [
            Value::Int(1),
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![Value::Int(1), bulk("r1"), bulk("r2")]),
        ] {
            let ran = read(other, true);
            assert!(ran.reply.is_err() && ran.primary.is_none());
        }
        // Unwatched, a reply is as it came.
        let pair = Value::Array(vec![Value::Int(1), bulk("r1")]);
        let ran = read(pair.clone(), false);
        assert_eq!(ran.reply.unwrap(), pair);
        assert!(ran.primary.is_none());
    }

    #[test]
    fn a_plain_grant_is_called_as_a_script_of_its_arguments_with_its_key_declared() {
        let mut set = redis::cmd("SET");
        set.arg("{k}").arg("token").arg("NX").arg("PX").arg(3000);
        let command = crate::proto::Prepared::new(crate::proto::Command {
            call: crate::proto::Call::Command(set),
            effect: crate::proto::Effect::Grant {
                life: Duration::from_secs(3),
            },
        });
        let (call, twin) = watched_call("EVALSHA", &command);
        assert_eq!(twin.source, watched(&COMMAND.source));
        let args = |cmd: &Cmd| -> Vec<Vec<u8>> {
            cmd.args_iter()
                .map(|arg| match arg {
                    redis::Arg::Simple(bytes) => bytes.to_vec(),
                    _ => Vec::new(),
                })
                .collect()
        };
        let mut want = vec![b"EVALSHA".to_vec(), twin.sha1.clone().into_bytes()];
        for arg in ["1", "{k}", "SET", "{k}", "token", "NX", "PX", "3000"] {
            want.push(arg.as_bytes().to_vec());
        }
        assert_eq!(args(&call), want);
        let (eval, _) = watched_call("EVAL", &command);
        want[0] = b"EVAL".to_vec();
        want[1] = twin.source.as_bytes().to_vec();
        assert_eq!(args(&eval), want);
    }

    #[test]
    fn a_watched_script_is_the_script_as_a_function_then_the_watch() {
        let twin = watched("return 1");
        assert!(twin.starts_with("local function granted()\nreturn 1\nend\n"));
        assert!(twin.ends_with(WATCHED_END));
        assert!(twin.contains("redis.pcall('INFO', 'replication')"));
    }
}
