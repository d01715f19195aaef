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
//! Scripts go by `EVALSHA`; on `NOSCRIPT` (the node restarted, or someone ran
//! `SCRIPT FLUSH`) the same call is made once more with `EVAL`, which also
//! puts the script back into the node's cache.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError, ServerErrorKind, Value};

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
    /// Held while connecting, so that concurrent callers share one attempt;
    /// counts the connections made.
    connecting: tokio::sync::Mutex<u64>,
    /// Whether the eviction policy has been looked at.
    policy_checked: AtomicBool,
    /// Whether the node has refused a release's announcement (`PUBLISH`).
    publish_refused: AtomicBool,
}

impl Node {
    pub(crate) fn new(client: redis::Client, timeout: Duration) -> Node {
        let name = client.get_connection_info().addr().to_string();
        Node {
            inner: Arc::new(Inner {
                name,
                client,
                timeout,
                live: Mutex::new(None),
                connecting: tokio::sync::Mutex::new(0),
                policy_checked: AtomicBool::new(false),
                publish_refused: AtomicBool::new(false),
            }),
        }
    }
}

impl Voter for Node {
    fn name(&self) -> &str {
        &self.inner.name
    }

    fn ask(&self, request: &Request) -> BoxFuture<'static, Answer> {
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
        let (generation, conn, fresh) = self.connection().await?;
        match self.send(conn, request).await {
            Err(e) if is_connection_error(&e) => {
                self.forget(generation);
                if fresh {
                    return Err(classify(&e));
                }
                // A connection made earlier went stale (the node restarted,
                // say): make a new one and try once more.
                let (generation, conn, _) = self.connection().await?;
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

    /// The live connection, made if there is none.
    /// Also says whether it was made by this call.
    async fn connection(
        self: &Arc<Self>,
    ) -> Result<(u64, MultiplexedConnection, bool), NodeFailure> {
        if let Some((generation, conn)) = self.live_connection() {
            return Ok((generation, conn, false));
        }
        let mut made = self.connecting.lock().await;
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
        *made += 1;
        *self.live.lock().unwrap_or_else(|p| p.into_inner()) = Some((*made, conn.clone()));
        tracing::debug!(node = %self.name, generation = *made, "connected");
        if !self.policy_checked.load(Ordering::Relaxed) {
            tokio::spawn(self.clone().check_eviction_policy(conn.clone()));
        }
        Ok((*made, conn, true))
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
