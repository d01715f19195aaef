//! A node that is a Sentinel-managed primary (feature `sentinel`).
//!
//! Such a node is one failure domain: a primary, its replicas, and the
//! sentinels that watch them and promote a replica when the primary fails.
//! Its connections go to whichever server is the primary *now*:
//!
//! * Every new connection (commands or subscriber) asks all the sentinels
//!   listed in the URL at once, `SENTINEL get-master-addr-by-name
//!   <master>`, each within the connect timeout, and takes the address only
//!   if a **majority of the listed sentinels** name it (as soon as one
//!   address has it: a sentinel that never answers delays nothing). A sentinel
//!   listed twice (the host's case aside) counts once. A sentinel cut off
//!   from the others during a failover still names the old primary, which
//!   stays a writable master for seconds after a manual failover, until the
//!   others demote it; the client's restart guard, seeing the `run_id` it
//!   knew, would not quarantine it, and the node would vote for two holders.
//!   No majority is a [`SentinelsDisagree`](NodeFailure::SentinelsDisagree)
//!   (nothing sent, counted as unanswered). The address is then checked with
//!   `ROLE` (a demoted old primary must not be used); connecting and `ROLE`
//!   are bounded by the connect timeout too.
//! * While a command connection is live, a task re-checks every
//!   [`RECHECK`] that a majority still names its server; once they do not
//!   (they name another, disagree, or too few answer), the connection is
//!   retired (it still carries removals) and the
//!   next request resolves the node again, where the restart guard sees the
//!   new `run_id`. The task holds the node by a `Weak` only and ends with
//!   the node or the connection. A client on the old primary so stops
//!   writing there within the re-check period and the bounds of its queries
//!   and requests after the sentinels switched, and the guard's quarantine
//!   of a failed-over node is the longest TTL plus that much (the argument
//!   is at `net::failover_margin`).
//! * A connection to a primary that dies breaks; one to a primary that is
//!   demoted is closed by the sentinels (`CLIENT KILL TYPE normal` when
//!   they reconfigure it) or answers `READONLY`, which replaces the
//!   connection (see [`net`](crate::net)); the next connection resolves again.
//! * A subscriber connection is resolved the same way, and is not
//!   re-checked: the sentinels also close subscriber connections of a
//!   server they reconfigure (`CLIENT KILL TYPE pubsub`), so one on a
//!   demoted primary breaks and is made again on the new one; until then
//!   it hears nothing of releases on the new primary (a waiter falls back
//!   on its timer).
//!
//! **What is not covered.** A client that never re-checks (another Redlock
//! library on the same servers) may write to the old primary for as long as
//! it stays a master. A partition that isolates the old primary with some
//! of its clients from the sentinels leaves those clients without the node
//! (no majority confirms their primary, so the re-check retires their
//! connection and no new one is made): the earlier hole, clients going on
//! writing there because they cannot learn of the failover, is closed for
//! this client. The old primary itself still takes writes from any client
//! that does not re-check so, until the partition heals: for a partition
//! that also cuts the sentinels off, only the data nodes'
//! `min-replicas-to-write 1` with a small `min-replicas-max-lag` bounds
//! that (the old primary refuses writes, `NOREPLICAS`, once its replicas
//! stop acknowledging).
//!
//! What can go wrong is told apart, each a [`NodeFailure`] in the lock
//! attempt's report: no sentinel answered
//! ([`SentinelsUnreachable`](NodeFailure::SentinelsUnreachable)), no
//! majority named one primary
//! ([`SentinelsDisagree`](NodeFailure::SentinelsDisagree)), the
//! sentinels know no master of that name
//! ([`UnknownMaster`](NodeFailure::UnknownMaster)), the server they named
//! is not a master ([`NotPrimary`](NodeFailure::NotPrimary)).
//!
//! A failover loses what asynchronous replication had not copied, as a
//! restart without persistence does: the restart guard sees the promoted
//! replica's other `run_id` and quarantines the node (see
//! [`guard`](crate::net::guard), which counts the whole longest TTL from the
//! moment it sees it, plus the re-check margin: a replica's uptime says
//! nothing of when it was promoted).
//!
//! **Credentials.** Those of the URL's user information
//! (`user:password@`) and its database go to the data nodes (the primary
//! the sentinels name), which hold the lock keys. The sentinels get their
//! own, from the query parameters `sentinel_username` and
//! `sentinel_password` (percent-decoded: write `&` as `%26`, `%` as
//! `%25`), or none.
//! The data user needs `ROLE` and `INFO` besides the lock commands; the
//! sentinel user needs `SENTINEL get-master-addr-by-name` and `SENTINEL
//! MASTER` (in the sentinels' ACL: `+sentinel|get-master-addr-by-name
//! +sentinel|master`; the second times a failover that happened before
//! the client first met the primary, see [`Sentinel::switched_ago`]).
//! Neither is ever shown: names, errors and `Debug` output carry the
//! master's name and the sentinels' addresses only. The URL is read in
//! [`url`], with no I/O; this file is what the node does with it.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, Value};

use crate::error::NodeFailure;
use crate::net::classify::{classify, is_connection_error};

pub(crate) mod url;

/// How often a Sentinel node's live command connection is checked against
/// the sentinels: a connection to a server that a majority of them no
/// longer names is retired (see [`RECHECK`]'s use in `net`, and the
/// quarantine it sets the length of in [`guard`](crate::net::guard)).
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// A Sentinel-managed node: its master's name, its sentinels, and how to
/// reach the primary they name.
#[derive(Clone)]
pub(crate) struct Sentinel {
    master: String,
    /// `host:port` of each sentinel, as given.
    addresses: Vec<(String, u16)>,
    /// A client per sentinel, with the sentinels' credentials, and its
    /// connection once made (shared by the node's clones).
    sentinels: Vec<Arc<Asker>>,
    /// The bound on each query to a sentinel, and on connecting to the
    /// primary named: the node's connect timeout.
    limit: Duration,
    /// The data nodes' credentials and database, on a placeholder address
    /// replaced by the primary's at each resolution.
    data: redis::ConnectionInfo,
}

impl fmt::Debug for Sentinel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sentinel")
            .field("master", &self.master)
            .field("sentinels", &self.addresses)
            .finish_non_exhaustive()
    }
}

/// One sentinel: how to reach it, and the connection to it, kept between
/// queries (a Sentinel node re-checks its primary every [`RECHECK`]).
struct Asker {
    client: redis::Client,
    conn: Mutex<Option<MultiplexedConnection>>,
}

impl Asker {
    fn cached(&self) -> Option<MultiplexedConnection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn keep(&self, conn: MultiplexedConnection) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(conn);
    }

    /// Drops the connection after a failure or a timeout on it: the next
    /// query makes a new one.
    fn forget(&self) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// A resolved primary: a client for it, a command connection to it, and
/// its address as the sentinels named it.
pub(crate) struct Resolved {
    pub(crate) client: redis::Client,
    pub(crate) conn: MultiplexedConnection,
    pub(crate) primary: (String, u16),
}

impl Sentinel {
    /// How the node is named in reports and logs: `master@host:port,…`.
    pub(crate) fn name(&self) -> String {
        let hosts: Vec<String> = self.addresses.iter().map(|(h, p)| addr(h, *p)).collect();
        format!("{}@{}", self.master, hosts.join(","))
    }

    /// The node's identities for duplicate detection: one per sentinel,
    /// `master@host:port`. Two nodes that share one are the same master
    /// (the sentinels of one set all know it by one name).
    pub(crate) fn identities(&self) -> Vec<String> {
        self.addresses
            .iter()
            .map(|(h, p)| format!("{}@{}", self.master, addr(h, *p).to_ascii_lowercase()))
            .collect()
    }

    /// The primary now: a client for it, a command connection made with
    /// `config` on which `ROLE` said `master`, and its address. The address
    /// is the one a majority of the listed sentinels name
    /// ([`majority`](Self::majority)); connecting and `ROLE` are bounded by
    /// the connect timeout.
    pub(crate) async fn resolve(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<Resolved, NodeFailure> {
        let primary = self.majority().await?;
        match tokio::time::timeout(self.limit, self.check(&primary, config)).await {
            Ok(Ok((client, conn))) => Ok(Resolved {
                client,
                conn,
                primary,
            }),
            Ok(Err(failure)) => Err(failure),
            Err(_) => Err(NodeFailure::Timeout),
        }
    }

    /// The address a majority of the sentinels listed in the URL name as
    /// the primary now. All are asked at once, each within the connect
    /// timeout, and the answer is taken as soon as one address has a
    /// majority (or refused as soon as none can). A stale sentinel (one cut off from the others during a
    /// failover) still names the old primary, which accepts writes until
    /// the others demote it, seconds later: a minority's word is not taken.
    pub(crate) async fn majority(&self) -> Result<(String, u16), NodeFailure> {
        use futures::StreamExt;
        let mut answers: futures::stream::FuturesUnordered<_> = self
            .sentinels
            .iter()
            .map(|sentinel| async {
                let at = sentinel.client.get_connection_info().addr().to_string();
                match tokio::time::timeout(self.limit, self.ask(sentinel)).await {
                    Ok(answer) => (at, answer),
                    Err(_) => {
                        sentinel.forget();
                        let answer =
                            Err(Refused::Other(format!("no answer within {:?}", self.limit)));
                        (at, answer)
                    }
                }
            })
            .collect();
        let total = self.sentinels.len();
        let needed = total / 2 + 1;
        let mut named: Vec<((String, u16), usize)> = Vec::new();
        let mut unknown = 0;
        let mut unreachable = 0;
        // Of the unreachable, those that refused our credentials.
        let mut refused = 0;
        let mut told = Vec::new();
        // Returns as soon as an address has a majority, or as soon as none
        // can have one any more: a sentinel that never answers costs the
        // others nothing (it would otherwise hold the whole connect
        // timeout, which also bounds connecting to the primary).
        while let Some((at, answer)) = answers.next().await {
            match answer {
                Ok(Some(primary)) => {
                    told.push(format!("{at} names {}", addr(&primary.0, primary.1)));
                    match named.iter_mut().find(|(p, _)| *p == primary) {
                        Some((_, n)) => *n += 1,
                        None => named.push((primary, 1)),
                    }
                }
                Ok(None) => {
                    told.push(format!("{at} knows no such master"));
                    unknown += 1;
                }
                Err(Refused::Credentials(e)) => {
                    told.push(format!("{at} refused the credentials: {e}"));
                    unreachable += 1;
                    refused += 1;
                }
                Err(Refused::Other(e)) => {
                    told.push(format!("{at}: {e}"));
                    unreachable += 1;
                }
            }
            let best = named.iter().map(|(_, n)| *n).max().unwrap_or(0);
            if best >= needed || best + answers.len() < needed {
                break;
            }
        }
        // Those not waited for count as not answering.
        let pending = answers.len();
        if pending > 0 {
            told.push(format!("{pending} not waited for (no majority possible)"));
            unreachable += pending;
        }
        if let Some((primary, _)) = named.into_iter().find(|(_, n)| *n >= needed) {
            return Ok(primary);
        }
        if unknown >= needed || (unknown > 0 && unknown + unreachable == total) {
            return Err(NodeFailure::UnknownMaster {
                master: self.master.clone(),
            });
        }
        // The sentinels' credentials, not the data nodes', are what to fix
        // when every sentinel that could be reached refused them.
        if refused > 0 && unreachable == total {
            return Err(NodeFailure::SentinelAuth {
                master: self.master.clone(),
                answers: told.join("; "),
            });
        }
        if unreachable == total {
            return Err(NodeFailure::SentinelsUnreachable(told.join("; ")));
        }
        Err(NodeFailure::SentinelsDisagree {
            master: self.master.clone(),
            answers: told.join("; "),
        })
    }

    /// One sentinel's answer: the primary's address, `None` if it knows no
    /// master of that name, or why it could not be asked. Unbounded here:
    /// the caller bounds it (the connection's own limits are the connect
    /// timeout too). The kept connection is forgotten only when it failed
    /// (a connection error or a timeout), not on an error reply such as
    /// `NOPERM`: that would reconnect (and authenticate) to every sentinel
    /// at every re-check.
    async fn ask(&self, sentinel: &Asker) -> Result<Option<(String, u16)>, Refused> {
        let failed = |e: redis::RedisError| {
            if is_connection_error(&e) || e.is_timeout() {
                sentinel.forget();
            }
            // Not `NodeFailure::Auth`'s text: its advice is the data nodes'.
            match classify(&e) {
                NodeFailure::Auth(_) | NodeFailure::Denied { .. } => {
                    Refused::Credentials(e.to_string())
                }
                failure => Refused::Other(failure.to_string()),
            }
        };
        let mut conn = match sentinel.cached() {
            Some(conn) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.limit))
                    .set_response_timeout(Some(self.limit));
                let conn = sentinel
                    .client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map_err(failed)?;
                sentinel.keep(conn.clone());
                conn
            }
        };
        let reply: Value = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master)
            .query_async(&mut conn)
            .await
            .map_err(failed)?;
        match reply {
            Value::Nil => Ok(None),
            Value::Array(parts) if parts.len() == 2 => {
                let text = |v: &Value| match v {
                    Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
                    Value::SimpleString(s) => Some(s.clone()),
                    _ => None,
                };
                let host = text(&parts[0]);
                // Port 0 is no address to connect to: a bad answer.
                let port = text(&parts[1]).and_then(|p| p.parse::<u16>().ok());
                match (host, port) {
                    (Some(host), Some(port)) if port != 0 && !host.is_empty() => {
                        Ok(Some((host, port)))
                    }
                    _ => Err(Refused::Other(
                        "an address that is not host and port".to_owned(),
                    )),
                }
            }
            _ => Err(Refused::Other(
                "not a sentinel (its answer to SENTINEL get-master-addr-by-name)".to_owned(),
            )),
        }
    }

    /// How long ago the sentinels switched to the primary they name now, at
    /// least: the least `role-reported-time` (the time since a sentinel
    /// last saw the master's role change, which it resets when it moves to
    /// a new primary) among the answers of a majority of the listed
    /// sentinels to `SENTINEL MASTER`; `None` if no majority answers. A
    /// sentinel moves to a new primary after its promotion, so each answer
    /// is at most the time since the promotion; and the latest switch among
    /// a majority came no earlier than the moment a majority named the new
    /// primary, from which `net::failover_margin` counts. Asked when a
    /// client first meets a primary that was promoted in its life (the
    /// restart guard cannot time that failover from the primary's uptime,
    /// its process's). Each sentinel is bounded by the connect timeout.
    pub(crate) async fn switched_ago(&self) -> Option<Duration> {
        let answers = futures::future::join_all(
            self.sentinels
                .iter()
                .map(|sentinel| tokio::time::timeout(self.limit, self.role_reported(sentinel))),
        )
        .await;
        let mut times: Vec<Duration> = answers.into_iter().flatten().flatten().collect();
        if times.len() < self.sentinels.len() / 2 + 1 {
            return None;
        }
        times.sort_unstable();
        times.first().copied()
    }

    /// One sentinel's `role-reported-time` for the master, from `SENTINEL
    /// MASTER`; `None` if it cannot tell (refused by an ACL, say).
    async fn role_reported(&self, sentinel: &Asker) -> Option<Duration> {
        let mut conn = sentinel.cached()?;
        let reply: Value = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(&self.master)
            .query_async(&mut conn)
            .await
            .ok()?;
        let text = |v: &Value| match v {
            Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let pairs: Vec<(Value, Value)> = match reply {
            Value::Map(pairs) => pairs,
            Value::Array(items) => {
                let mut items = items.into_iter();
                std::iter::from_fn(|| Some((items.next()?, items.next()?))).collect()
            }
            _ => return None,
        };
        pairs
            .iter()
            .find(|(k, _)| text(k).as_deref() == Some("role-reported-time"))
            .and_then(|(_, v)| text(v)?.parse::<u64>().ok())
            .map(Duration::from_millis)
    }

    /// Connects to `primary` with the data nodes' credentials and checks
    /// with `ROLE` that it is a master.
    async fn check(
        &self,
        primary: &(String, u16),
        config: &AsyncConnectionConfig,
    ) -> Result<(redis::Client, MultiplexedConnection), NodeFailure> {
        let (host, port) = primary;
        let info = self
            .data
            .clone()
            .set_addr(ConnectionAddr::Tcp(host.clone(), *port));
        let client = redis::Client::open(info).map_err(|e| classify(&e))?;
        let mut conn = client
            .get_multiplexed_async_connection_with_config(config)
            .await
            .map_err(|e| classify(&e))?;
        let role: Value = redis::cmd("ROLE")
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(&e))?;
        let role = match role {
            Value::Array(parts) => match parts.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => "unknown".to_owned(),
            },
            _ => "unknown".to_owned(),
        };
        if role != "master" {
            return Err(NodeFailure::NotPrimary {
                master: self.master.clone(),
                addr: addr(host, *port),
                role,
            });
        }
        Ok((client, conn))
    }
}

/// Why a sentinel gave no address: it refused our credentials (the
/// sentinels' own: `sentinel_username`, `sentinel_password`), or anything
/// else (no connection, no answer, an answer that is no address).
enum Refused {
    Credentials(String),
    Other(String),
}

/// `host:port`, with an IPv6 host in brackets.
fn addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connect timeout the parsed nodes get (the builder's default).
    const CONNECT: Duration = Duration::from_secs(2);

    #[test]
    fn nodes_that_share_a_sentinel_and_a_master_name_are_one() {
        let a = Sentinel::parse("redis+sentinel://H1:1,h2:2/m", CONNECT).unwrap();
        let b = Sentinel::parse("redis+sentinel://h3:3,h1:1/m", CONNECT).unwrap();
        let c = Sentinel::parse("redis+sentinel://h1:1/other", CONNECT).unwrap();
        let shared =
            |x: &Sentinel, y: &Sentinel| x.identities().iter().any(|i| y.identities().contains(i));
        assert!(shared(&a, &b));
        assert!(!shared(&a, &c));
    }
}
