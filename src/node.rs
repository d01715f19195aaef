//! One Redis node: its connection, its commands and their time bound.
//!
//! Each node keeps one multiplexed connection, shared by every task of the
//! process, so that concurrent locks pipeline on it instead of opening
//! connections. The connection is made on first use, under the same
//! per-node timeout as the command that needed it, and made again after it
//! breaks (a node restart, say).
//!
//! Three rules keep the protocol honest:
//!
//! * **Every request is bounded** by the per-node timeout, connection set-up
//!   included. A frozen node costs a caller at most that much.
//! * **Nothing is replayed behind our back.** We use a plain multiplexed
//!   connection, not a connection manager that resends commands after a
//!   reconnect, where they could land after a rollback. The one retry we make
//!   ourselves, on a connection that went stale, happens before the vote is
//!   counted (see `Inner::run`). A timed-out command is *not* a reason to
//!   drop the connection: a later rollback on the same connection is ordered
//!   after it by Redis itself.
//! * **Errors are sorted** into [`NodeFailure`]s a user can act on.
//!
//! The restart guard ([`Builder::restart_guard`](crate::Builder::restart_guard))
//! lives here too. A node restarted without persistence has forgotten the
//! keys it granted, so its vote on an acquisition could hand out a lock that
//! is still held elsewhere. Every new connection therefore starts with
//! `INFO server`: a `run_id` other than the one seen before means a restart,
//! and the node is *quarantined* (acquisitions get
//! [`NodeFailure::Restarted`] without a request) until the longest TTL that
//! the nodes of this `Redlock` were ever asked for has passed since the
//! restart. A new connection is only made when a request finds the old one
//! broken, so the check runs inside that request, before it is sent.
//!
//! Scripts go by `EVALSHA`; on `NOSCRIPT` (the node restarted, or someone ran
//! `SCRIPT FLUSH`) the same call is made once more with `EVAL`, which also
//! puts the script back into the node's cache.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, ServerErrorKind, Value};

use crate::clock::Moment;
use crate::error::NodeFailure;
use crate::quorum::{Answer, Holder, Request, Vote, Voter};
use crate::scripts::{self, Script};

/// A handle on one node; clones share the connection.
#[derive(Clone)]
pub(crate) struct Node {
    inner: Arc<Inner>,
}

struct Inner {
    /// `host:port`, for reports and logs (never the password).
    name: String,
    client: redis::Client,
    timeout: Duration,
    /// The live connection, with the generation that made it.
    live: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Held while connecting, so that concurrent callers share one attempt.
    connecting: tokio::sync::Mutex<Connecting>,
    /// Whether the eviction policy has been looked at.
    policy_checked: AtomicBool,
    /// Whether the node has refused a release's announcement (`PUBLISH`).
    publish_refused: AtomicBool,
    /// The longest TTL, in ms, asked of any node of this `Redlock`; `None`
    /// when the restart guard is off.
    longest_ttl: Option<Arc<AtomicU64>>,
    /// Until when acquisitions get no vote from this node after a restart,
    /// as [`Moment::as_nanos`]; 0 when there is none.
    quarantine: AtomicU64,
    /// Whether the node has refused `INFO`, so that its restarts cannot be
    /// seen.
    info_refused: AtomicBool,
}

/// What connecting keeps, under the lock that makes callers share one
/// attempt.
#[derive(Default)]
struct Connecting {
    /// How many connections were made: the generation of the newest.
    made: u64,
    /// The node's `run_id` as of the last connection, once known.
    run_id: Option<String>,
}

/// What `INFO server` tells of a node's process.
#[derive(Debug, PartialEq, Eq)]
struct ServerInfo {
    /// Drawn afresh at every start: a new one means the node restarted.
    run_id: String,
    /// `uptime_in_seconds`.
    uptime: Duration,
}

/// How much more than the time since its start a node's reported uptime may
/// be. Redis subtracts two wall-clock readings truncated to whole seconds.
const UPTIME_SLACK: Duration = Duration::from_secs(1);

impl Node {
    /// A node reached through `client`. `longest_ttl` is shared by the nodes
    /// of one `Redlock` when the restart guard is on.
    pub(crate) fn new(
        client: redis::Client,
        timeout: Duration,
        longest_ttl: Option<Arc<AtomicU64>>,
    ) -> Node {
        let name = client.get_connection_info().addr().to_string();
        Node {
            inner: Arc::new(Inner {
                name,
                client,
                timeout,
                live: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(Connecting::default()),
                policy_checked: AtomicBool::new(false),
                publish_refused: AtomicBool::new(false),
                longest_ttl,
                quarantine: AtomicU64::new(0),
                info_refused: AtomicBool::new(false),
            }),
        }
    }
}

impl Voter for Node {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn ask(&self, request: &Request) -> BoxFuture<'static, Answer> {
        self.inner.note_ttl(request);
        if let Err(failure) = self.inner.admit(request) {
            return Box::pin(std::future::ready(Err(failure).into()));
        }
        let inner = self.inner.clone();
        let request = request.clone();
        Box::pin(async move {
            match tokio::time::timeout(inner.timeout, inner.run(&request)).await {
                Ok(Ok(answer)) => answer,
                Ok(Err(failure)) => Err(failure).into(),
                Err(_) => Err(NodeFailure::Timeout).into(),
            }
        })
    }
}

impl Inner {
    /// Sends `request`, on a new connection if the live one turns out to be
    /// dead. That one retry is safe for all three requests, because it is
    /// made before the vote is counted and so before any rollback: a `SET`
    /// that did land on the old connection makes the retry answer "held"
    /// (a vote against, rolled back with the rest; an attempt that observes
    /// the key recognises its own token and counts a yes), and the scripts
    /// compare the token, so running them twice changes nothing.
    async fn run(self: &Arc<Self>, request: &Request) -> Result<Answer, NodeFailure> {
        let (generation, conn, fresh) = self.connection_for(request).await?;
        match self.send(conn, request).await {
            Err(e) if is_connection_error(&e) => {
                self.forget(generation);
                if fresh {
                    return Err(classify(&e));
                }
                // A connection made earlier went stale (the node restarted,
                // say): make a new one and try once more.
                let (generation, conn, _) = self.connection_for(request).await?;
                self.send(conn, request).await.map_err(|e| {
                    if is_connection_error(&e) {
                        self.forget(generation);
                    }
                    classify(&e)
                })
            }
            Err(e) => Err(classify(&e)),
            Ok(answer) => Ok(answer),
        }
    }

    /// Records the TTL of an acquisition or extension before it is sent: a
    /// node that restarts later may have forgotten a key granted with it.
    fn note_ttl(&self, request: &Request) {
        let (Request::Acquire { ttl_ms, .. } | Request::Extend { ttl_ms, .. }) = request else {
            return;
        };
        if let Some(longest) = &self.longest_ttl {
            longest.fetch_max(*ttl_ms, Ordering::Relaxed);
        }
    }

    /// Refuses an acquisition while the node is quarantined after a
    /// restart. Releases and extensions pass: they compare the token, so on
    /// a node that forgot its keys they cannot create one.
    fn admit(&self, request: &Request) -> Result<(), NodeFailure> {
        if !matches!(request, Request::Acquire { .. }) {
            return Ok(());
        }
        // 0 (no quarantine) spares the clock read on the hot path.
        let until = self.quarantine.load(Ordering::Acquire);
        if until == 0 {
            return Ok(());
        }
        match Moment::from_nanos(until).remaining() {
            remaining if remaining.is_zero() => {
                // Over: back to 0, unless a newer restart moved it meanwhile.
                let _ =
                    self.quarantine
                        .compare_exchange(until, 0, Ordering::AcqRel, Ordering::Relaxed);
                Ok(())
            }
            remaining => Err(NodeFailure::Restarted { remaining }),
        }
    }

    /// The connection to send `request` on. Connecting is what finds a
    /// restart, so the request is admitted again after it.
    async fn connection_for(
        self: &Arc<Self>,
        request: &Request,
    ) -> Result<(u64, MultiplexedConnection, bool), NodeFailure> {
        let connection = self.connection().await?;
        self.admit(request)?;
        Ok(connection)
    }

    /// The live connection, made if there is none.
    /// Also says whether it was made by this call.
    async fn connection(
        self: &Arc<Self>,
    ) -> Result<(u64, MultiplexedConnection, bool), NodeFailure> {
        if let Some((generation, conn)) = self.live_connection() {
            return Ok((generation, conn, false));
        }
        let mut connecting = self.connecting.lock().await;
        if let Some((generation, conn)) = self.live_connection() {
            return Ok((generation, conn, false));
        }
        // Our own timeout bounds the whole request; the library's would only
        // add a second, different one.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(None)
            .set_response_timeout(None);
        let conn = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| classify(&e))?;
        // Before the connection is shared: whoever uses it sees the
        // quarantine it found.
        self.watch_restarts(&mut connecting.run_id, conn.clone())
            .await?;
        connecting.made += 1;
        let generation = connecting.made;
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some((generation, conn.clone()));
        tracing::debug!(node = %self.name, generation, "connected");
        if !self.policy_checked.load(Ordering::Relaxed) {
            tokio::spawn(self.clone().check_eviction_policy(conn.clone()));
        }
        Ok((generation, conn, true))
    }

    /// The restart guard, on a new connection: reads the node's run id and
    /// uptime, quarantines it if it restarted since `run_id` was seen less
    /// than the longest TTL ago, and remembers the new run id. A node that
    /// refuses `INFO` cannot be watched: that is said once, and the
    /// connection used all the same. A connection that fails fails the
    /// request.
    async fn watch_restarts(
        &self,
        run_id: &mut Option<String>,
        mut conn: MultiplexedConnection,
    ) -> Result<(), NodeFailure> {
        let Some(longest_ttl) = &self.longest_ttl else {
            return Ok(());
        };
        let reply: Result<String, RedisError> = redis::cmd("INFO")
            .arg("server")
            .query_async(&mut conn)
            .await;
        let info = match reply {
            Ok(text) => parse_info(&text),
            Err(e) if is_connection_error(&e) => return Err(classify(&e)),
            Err(e) => {
                self.warn_unwatched(&e.to_string());
                return Ok(());
            }
        };
        let Some(info) = info else {
            self.warn_unwatched("no run_id or uptime_in_seconds in its answer");
            return Ok(());
        };
        // Every TTL sent to the node before it went down was recorded
        // before it was sent, long before this answer came back.
        let longest = Duration::from_millis(longest_ttl.load(Ordering::Relaxed));
        let no_vote = quarantine(run_id.as_deref(), &info, longest);
        if !no_vote.is_zero() {
            let until = Moment::now().after(no_vote);
            self.quarantine
                .fetch_max(until.as_nanos(), Ordering::AcqRel);
            tracing::warn!(
                node = %self.name,
                uptime_s = info.uptime.as_secs(),
                no_vote_ms = no_vote.as_millis() as u64,
                "this node restarted and may have forgotten locks it granted: it gets no vote \
                 on acquisitions until they would have expired"
            );
        }
        *run_id = Some(info.run_id);
        Ok(())
    }

    /// Warns, once, that the restart guard cannot watch this node.
    fn warn_unwatched(&self, reason: &str) {
        if !self.info_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                node = %self.name,
                reason,
                "INFO server failed on this node, so its restarts cannot be seen: after one, \
                 it may grant locks it forgot; allow INFO in the ACL, or run the node with \
                 appendfsync always and turn Builder::restart_guard off"
            );
        }
    }

    fn live_connection(&self) -> Option<(u64, MultiplexedConnection)> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Drops the connection of `generation`, if it is still the live one.
    fn forget(&self, generation: u64) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        if live.as_ref().is_some_and(|(g, _)| *g == generation) {
            *live = None;
            tracing::debug!(node = %self.name, generation, "connection dropped");
        }
    }

    /// Warns once if the node may evict lock keys under memory pressure: with
    /// a `maxmemory` set, every policy but `noeviction` can evict keys that
    /// have a TTL, and a lock whose key is evicted is silently lost.
    async fn check_eviction_policy(self: Arc<Self>, mut conn: MultiplexedConnection) {
        let query = async {
            let (_, max): (String, u64) = redis::cmd("CONFIG")
                .arg("GET")
                .arg("maxmemory")
                .query_async(&mut conn)
                .await?;
            let (_, policy): (String, String) = redis::cmd("CONFIG")
                .arg("GET")
                .arg("maxmemory-policy")
                .query_async(&mut conn)
                .await?;
            Ok::<_, RedisError>((max, policy))
        };
        // CONFIG may be renamed or forbidden (managed Redis): then we cannot
        // tell, and say nothing.
        if let Ok(Ok((max, policy))) = tokio::time::timeout(Duration::from_secs(5), query).await {
            if !self.policy_checked.swap(true, Ordering::Relaxed)
                && max > 0
                && policy != "noeviction"
            {
                tracing::warn!(
                    node = %self.name,
                    maxmemory = max,
                    policy = %policy,
                    "this node may evict lock keys under memory pressure, silently losing locks: \
                     set maxmemory-policy noeviction"
                );
            }
        }
    }

    /// Sends one request and reads its answer.
    async fn send(
        &self,
        mut conn: MultiplexedConnection,
        request: &Request,
    ) -> Result<Answer, RedisError> {
        match request {
            Request::Acquire {
                id,
                ttl_ms,
                observe,
            } => {
                let mut set = redis::cmd("SET");
                set.arg(&*id.key)
                    .arg(id.token())
                    .arg("NX")
                    .arg("PX")
                    .arg(*ttl_ms);
                let (reply, holder) = if *observe {
                    // One round trip: the SET, then who holds the key and for
                    // how long (us, if the SET went through).
                    let mut pipe = redis::pipe();
                    pipe.add_command(set)
                        .cmd("GET")
                        .arg(&*id.key)
                        .cmd("PTTL")
                        .arg(&*id.key);
                    let (reply, token, pttl): (Value, Option<String>, i64) =
                        pipe.query_async(&mut conn).await?;
                    if token.as_deref() == Some(id.token()) {
                        // Our own SET, landed on a connection that broke
                        // before it answered (see `run`): a yes.
                        return Ok(Ok(()).into());
                    }
                    let holder = token.map(|token| Holder {
                        token: token.into(),
                        // -1: no expiry; -2: gone since the GET.
                        ttl: (pttl != -1).then(|| Duration::from_millis(pttl.max(0) as u64)),
                    });
                    (reply, holder)
                } else {
                    (set.query_async(&mut conn).await?, None)
                };
                Ok(match reply {
                    Value::Nil => Answer {
                        vote: Err(NodeFailure::Held),
                        holder,
                    },
                    _ => Ok(()).into(),
                })
            }
            Request::Release { id, announce } => {
                let announce = if *announce { "1" } else { "0" };
                let code = eval(
                    &mut conn,
                    &scripts::RELEASE,
                    &id.key,
                    &[id.token(), announce],
                )
                .await?;
                if code == scripts::RELEASED_UNANNOUNCED
                    && !self.publish_refused.swap(true, Ordering::Relaxed)
                {
                    tracing::warn!(
                        node = %self.name,
                        "this node refuses PUBLISH to lock channels: waiters elsewhere are not \
                         woken by releases and wait for the keys to expire; allow PUBLISH on \
                         <key prefix>*:released in the ACL"
                    );
                }
                Ok(vote(code).into())
            }
            Request::Extend { id, ttl_ms } => {
                let ttl = ttl_ms.to_string();
                let code = eval(&mut conn, &scripts::EXTEND, &id.key, &[id.token(), &ttl]).await?;
                Ok(vote(code).into())
            }
        }
    }
}

/// Runs a script by `EVALSHA`, falling back to `EVAL` on `NOSCRIPT`; its
/// answer code (see [`crate::scripts`]).
async fn eval(
    conn: &mut MultiplexedConnection,
    script: &Script,
    key: &str,
    args: &[&str],
) -> Result<i64, RedisError> {
    let call = |command: &str, body: &str| {
        let mut cmd = redis::cmd(command);
        cmd.arg(body).arg(1).arg(key).arg(args);
        cmd
    };
    match call("EVALSHA", &script.sha1).query_async(conn).await {
        Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            call("EVAL", script.source).query_async(conn).await
        }
        other => other,
    }
}

/// The vote of a script's answer code.
fn vote(code: i64) -> Vote {
    match code {
        scripts::DONE | scripts::RELEASED_UNANNOUNCED => Ok(()),
        scripts::MISSING => Err(NodeFailure::Missing),
        _ => Err(NodeFailure::Held),
    }
}

/// Reads `run_id` and `uptime_in_seconds` from the text of `INFO server`;
/// `None` if either is missing or malformed.
fn parse_info(text: &str) -> Option<ServerInfo> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    let run_id = field("run_id").filter(|id| !id.is_empty())?.to_owned();
    let uptime = Duration::from_secs(field("uptime_in_seconds")?.parse().ok()?);
    Some(ServerInfo { run_id, uptime })
}

/// How long a node just connected to gets no vote on acquisitions: none
/// unless it restarted since the `known` run id was seen; then until keys
/// granted before the restart with up to `longest_ttl` would have expired.
/// The uptime is taken as [`UPTIME_SLACK`] less than reported, so that the
/// quarantine errs long.
fn quarantine(known: Option<&str>, info: &ServerInfo, longest_ttl: Duration) -> Duration {
    match known {
        Some(id) if id != info.run_id => {
            longest_ttl.saturating_sub(info.uptime.saturating_sub(UPTIME_SLACK))
        }
        _ => Duration::ZERO,
    }
}

/// Whether `e` means the connection is gone (as opposed to an error answer).
pub(crate) fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// Sorts a Redis error into the failure a user can act on.
fn classify(e: &RedisError) -> NodeFailure {
    const KNOWN: [&str; 6] = [
        "WRONGTYPE",
        "OOM",
        "NOAUTH",
        "WRONGPASS",
        "NOPERM",
        "READONLY",
    ];
    let message = e.to_string();
    let known = |code: Option<&str>| match code {
        Some("WRONGTYPE") => Some(NodeFailure::WrongType(message.clone())),
        Some("OOM") => Some(NodeFailure::OutOfMemory(message.clone())),
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => Some(NodeFailure::Auth(message.clone())),
        Some("READONLY") => Some(NodeFailure::ReadOnly(message.clone())),
        _ => None,
    };
    if let Some(failure) = known(e.code()) {
        return failure;
    }
    if e.kind() == ErrorKind::AuthenticationFailed {
        return NodeFailure::Auth(message);
    }
    if is_connection_error(e) {
        return NodeFailure::Connection(message);
    }
    // Errors raised inside a script, or answered within a pipeline, carry
    // the code of the command that failed only in their text.
    if let Some(failure) = known(KNOWN.into_iter().find(|code| message.contains(code))) {
        return failure;
    }
    NodeFailure::Server {
        code: e.code().unwrap_or("ERR").to_owned(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: &str, uptime_s: u64) -> ServerInfo {
        ServerInfo {
            run_id: run_id.to_owned(),
            uptime: Duration::from_secs(uptime_s),
        }
    }

    #[test]
    fn reads_run_id_and_uptime_from_info_server() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c9b0e\r\n\
                    tcp_port:7001\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        assert_eq!(parse_info(text), Some(info("4f1c9b0e", 42)));
        // A field is matched whole, not by prefix.
        let text = "run_idx:nope\nrun_id:a\nuptime_in_seconds_total:9\nuptime_in_seconds:3\n";
        assert_eq!(parse_info(text), Some(info("a", 3)));
        for broken in [
            "",
            "uptime_in_seconds:3\r\n",
            "run_id:a\r\n",
            "run_id:\r\nuptime_in_seconds:3\r\n",
            "run_id:a\r\nuptime_in_seconds:-1\r\n",
            "run_id:a\r\nuptime_in_seconds:soon\r\n",
        ] {
            assert_eq!(parse_info(broken), None, "{broken:?}");
        }
    }

    #[tokio::test]
    async fn a_quarantined_node_refuses_acquisitions_at_once_and_lets_the_rest_through() {
        use crate::quorum::LockId;
        // Nothing listens on port 1: what is sent fails as a connection.
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let longest = Arc::new(AtomicU64::new(0));
        let node = Node::new(client, Duration::from_secs(5), Some(longest.clone()));
        let id = LockId::new("k".into());
        let acquire = Request::Acquire {
            id: id.clone(),
            ttl_ms: 1_500,
            observe: false,
        };
        let extend = Request::Extend {
            id: id.clone(),
            ttl_ms: 900,
        };
        let release = Request::Release { id, announce: true };
        let vote = |request: &Request| {
            let answer = node.ask(request);
            async move { answer.await.vote }
        };
        let sent = |vote: Vote| matches!(vote, Err(NodeFailure::Connection(_)));

        assert!(sent(vote(&acquire).await));
        node.inner.quarantine.store(
            Moment::now().after(Duration::from_secs(5)).as_nanos(),
            Ordering::Release,
        );
        match vote(&acquire).await {
            Err(NodeFailure::Restarted { remaining }) => {
                assert!(remaining > Duration::from_secs(4), "{remaining:?}");
                assert!(remaining <= Duration::from_secs(5), "{remaining:?}");
            }
            other => panic!("{other:?}"),
        }
        assert!(sent(vote(&extend).await));
        assert!(sent(vote(&release).await));
        // The longest TTL asked for, refused or not; releases have none.
        assert_eq!(longest.load(Ordering::Relaxed), 1_500);
        node.inner.quarantine.store(0, Ordering::Release);
        assert!(sent(vote(&acquire).await));
    }

    #[test]
    fn only_a_recent_restart_is_quarantined_for_what_is_left_of_the_ttl() {
        let ttl = Duration::from_secs(30);
        let s = Duration::from_secs;
        // First meeting, or the same process: nothing to hold against it.
        assert_eq!(quarantine(None, &info("a", 0), ttl), Duration::ZERO);
        assert_eq!(quarantine(Some("a"), &info("a", 0), ttl), Duration::ZERO);
        // Restarted: the TTL less the uptime, which may be a second high.
        assert_eq!(quarantine(Some("a"), &info("b", 0), ttl), ttl);
        assert_eq!(quarantine(Some("a"), &info("b", 1), ttl), ttl);
        assert_eq!(quarantine(Some("a"), &info("b", 10), ttl), s(21));
        assert_eq!(quarantine(Some("a"), &info("b", 30), ttl), s(1));
        // Up for longer than any key it granted could live, or no TTL
        // asked for yet: it votes.
        assert_eq!(quarantine(Some("a"), &info("b", 31), ttl), Duration::ZERO);
        assert_eq!(quarantine(Some("a"), &info("b", 3600), ttl), Duration::ZERO);
        assert_eq!(
            quarantine(Some("a"), &info("b", 0), Duration::ZERO),
            Duration::ZERO
        );
    }
}
