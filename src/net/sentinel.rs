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
//!   connection (see [`net`](super)); the next connection resolves again.
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
//! [`guard`](super::guard), which counts the whole longest TTL from the
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
//! master's name and the sentinels' addresses only.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, Value};

use crate::error::NodeFailure;
use crate::net::endpoint::SENTINEL_SCHEMES as SCHEMES;
use crate::net::{classify, is_connection_error};

/// The default port of a sentinel.
const SENTINEL_PORT: u16 = 26379;

/// How often a Sentinel node's live command connection is checked against
/// the sentinels: a connection to a server that a majority of them no
/// longer names is retired (see [`RECHECK`]'s use in `net`, and the
/// quarantine it sets the length of in [`guard`](super::guard)).
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

/// What is wrong with a sentinel URL, for [`ConfigError::InvalidSentinelUrl`](crate::ConfigError::InvalidSentinelUrl).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum UrlError {
    /// `rediss+sentinel://`.
    Tls,
    /// Anything else, with what to fix.
    Invalid(String),
}

impl Sentinel {
    /// Parses `redis+sentinel://[user:password@]host1:port1[,host2:port2…]/<master>[/<db>]`
    /// `[?sentinel_username=…&sentinel_password=…]`. Does no I/O.
    /// `connect` (the node's connect timeout) bounds each query to a
    /// sentinel and connecting to the primary named, with its `ROLE`.
    pub(crate) fn parse(url: &str, connect: Duration) -> Result<Sentinel, UrlError> {
        let invalid = |reason: &str| Err(UrlError::Invalid(reason.to_owned()));
        let trimmed = url.trim();
        let Some((scheme, rest)) = trimmed.split_once("://") else {
            return invalid("no scheme");
        };
        if scheme.eq_ignore_ascii_case(SCHEMES[1]) {
            return Err(UrlError::Tls);
        }
        if !scheme.eq_ignore_ascii_case(SCHEMES[0]) {
            return invalid("not a redis+sentinel:// URL");
        }
        // The user information ends at the last '@', as `secret_span`
        // (config.rs) finds it for redaction: a password may hold '/', '?'
        // or '#' unencoded, and cutting at them first would leave part of
        // it in what is taken for the host list, and quoted in an error.
        let has_userinfo = rest.contains('@');
        let (userinfo, rest) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        if rest.contains('#') {
            return invalid("a fragment (#…) means nothing here: remove it");
        }
        let (hosts, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i + 1..]),
            None => (rest, ""),
        };
        let mut addresses = Vec::new();
        for host in hosts.split(',') {
            let host = host.trim();
            if host.is_empty() {
                if hosts.trim().is_empty() {
                    return invalid(
                        "no sentinel address: give at least one host:port (three or more \
                         sentinels, comma-separated, are the usual)",
                    );
                }
                return invalid("an empty sentinel address between commas");
            }
            // A URL with an '@' may have a password where a host is
            // expected (a sentinel password with an '@' in the query, a
            // data password cut wrong): its host text is never quoted.
            // Nor is one whose port is not a number (the rule
            // `secret_span` redacts by): `:hunter2,h:1` is a password whose
            // `@` went missing.
            let shown = (!has_userinfo && port_is_number(host)).then_some(host);
            let (host, port) = parse_host(host, shown).map_err(UrlError::Invalid)?;
            // A sentinel listed twice (host names compared without case)
            // is one sentinel, with one vote: the majority is counted over
            // the distinct addresses.
            if !addresses
                .iter()
                .any(|(h, p): &(String, u16)| *p == port && h.eq_ignore_ascii_case(&host))
            {
                addresses.push((host, port));
            }
        }
        let mut parts = path.split('/');
        let master = parts.next().unwrap_or_default();
        if master.is_empty() {
            return invalid(
                "no master name: add the name the sentinels monitor it by, after the \
                 addresses (…:26379/mymaster)",
            );
        }
        if master.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return invalid("a master name with spaces or control characters");
        }
        let db = match parts.next() {
            None | Some("") => 0,
            Some(db) => match db.parse::<i64>() {
                Ok(db) if db >= 0 => db,
                _ => return invalid("the database after the master name is not a number"),
            },
        };
        if parts.next().is_some_and(|p| !p.is_empty()) {
            return invalid("too many path segments: the path is /<master-name>[/<db>]");
        }
        let (mut sentinel_user, mut sentinel_password) = (None, None);
        let decoded = |name: &str, v: &str| {
            percent_decode(v).ok_or_else(|| {
                UrlError::Invalid(format!(
                    "{name}= cannot be read: percent-encode special characters in it (`&` as \
                     %26, `%` as %25)"
                ))
            })
        };
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some((name @ "sentinel_username", v)) if !v.is_empty() => {
                    sentinel_user = Some(decoded(name, v)?);
                }
                Some((name @ "sentinel_password", v)) if !v.is_empty() => {
                    sentinel_password = Some(decoded(name, v)?);
                }
                Some((name @ ("sentinel_username" | "sentinel_password"), _)) => {
                    return Err(UrlError::Invalid(format!(
                        "{name}= is empty: give its value after '=', or leave it out"
                    )));
                }
                _ if pair.is_empty() => {}
                _ => {
                    return invalid(
                        "an unknown query parameter: the only ones are sentinel_username and \
                         sentinel_password",
                    );
                }
            }
        }
        // The data nodes' credentials and database, parsed (and
        // percent-decoded) by redis-rs on a placeholder address.
        let placeholder = match userinfo {
            Some(info) => format!("redis://{info}@127.0.0.1:1/{db}"),
            None => format!("redis://127.0.0.1:1/{db}"),
        };
        let data = redis::Client::open(placeholder.as_str())
            .map_err(|_| {
                UrlError::Invalid(
                    "the credentials before '@' cannot be read: percent-encode special \
                     characters in them (`/` as %2F, `?` as %3F, `#` as %23, `@` as %40)"
                        .to_owned(),
                )
            })?
            .get_connection_info()
            .clone();
        let sentinels = addresses
            .iter()
            .map(|(host, port)| {
                let mut settings = redis::RedisConnectionInfo::default();
                if let Some(user) = &sentinel_user {
                    settings = settings.set_username(user);
                }
                if let Some(password) = &sentinel_password {
                    settings = settings.set_password(password);
                }
                let info = data
                    .clone()
                    .set_addr(ConnectionAddr::Tcp(host.clone(), *port))
                    .set_redis_settings(settings);
                match redis::Client::open(info) {
                    Ok(client) => Ok(Arc::new(Asker {
                        client,
                        conn: Mutex::new(None),
                    })),
                    Err(_) => Err(UrlError::Invalid(format!(
                        "sentinel address {} cannot be used",
                        addr(host, *port)
                    ))),
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Sentinel {
            master: master.to_owned(),
            addresses,
            sentinels,
            limit: connect,
            data,
        })
    }

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
                        let answer = Err(format!("no answer within {:?}", self.limit));
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
                Err(e) => {
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
    async fn ask(&self, sentinel: &Asker) -> Result<Option<(String, u16)>, String> {
        let failed = |e: redis::RedisError| {
            if is_connection_error(&e) || e.is_timeout() {
                sentinel.forget();
            }
            classify(&e).to_string()
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
                    _ => Err("an address that is not host and port".to_owned()),
                }
            }
            _ => Err("not a sentinel (its answer to SENTINEL get-master-addr-by-name)".to_owned()),
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

/// `text` with its `%XX` escapes decoded; `None` if an escape is not two
/// hex digits or the result is not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Whether a host list's piece has a number, or nothing, after its host's
/// `:` (an IPv6 address's colons, in brackets, are not the port's).
fn port_is_number(piece: &str) -> bool {
    let host = match piece.strip_prefix('[') {
        Some(rest) => rest.find(']').map_or(piece.len(), |i| i + 2),
        None => 0,
    };
    match piece[host..].find(':') {
        Some(colon) => piece[host + colon + 1..]
            .bytes()
            .all(|b| b.is_ascii_digit()),
        None => true,
    }
}

/// `host:port`, with an IPv6 host in brackets.
fn addr(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `host[:port]` or `[ipv6][:port]`; the port defaults to 26379. Errors
/// quote `text` only if `shown` is it (never in a URL with user
/// information, whose password could be taken for a host).
fn parse_host(text: &str, shown: Option<&str>) -> Result<(String, u16), String> {
    let quoted = match shown {
        Some(shown) => format!("sentinel address {shown:?}"),
        None => "a sentinel address (not shown: it may hold a password; percent-encode \
                 `/ ? # @` in credentials)"
            .to_owned(),
    };
    let bad_port = || {
        format!(
            "{quoted} has no valid port: give host:port, the port a number from 1 to \
             65535 (26379 when left out)"
        )
    };
    if !text.starts_with('[') && text.matches(':').count() > 1 {
        return Err(format!(
            "{quoted} looks like an IPv6 address without brackets: write [::1]:26379"
        ));
    }
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let Some((host, after)) = rest.split_once(']') else {
            return Err(format!("{quoted}: an IPv6 address without its ']'"));
        };
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(bad_port()),
            },
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(format!("{quoted} has no host"));
    }
    let port = match port {
        None => SENTINEL_PORT,
        Some(port) => match port.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(bad_port()),
        },
    };
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The connect timeout the parsed nodes get (the builder's default).
    const CONNECT: Duration = Duration::from_secs(2);

    fn reason(url: &str) -> String {
        match Sentinel::parse(url, CONNECT) {
            Err(UrlError::Invalid(reason)) => reason,
            Err(UrlError::Tls) => "tls".to_owned(),
            Ok(s) => panic!("{url} parsed: {s:?}"),
        }
    }

    #[test]
    fn parses_sentinel_urls() {
        let s = Sentinel::parse(
            "redis+sentinel://u:p%40ss@10.0.0.1:26379,10.0.0.2,[::1]:26380/mymaster/3",
            CONNECT,
        )
        .unwrap();
        assert_eq!(s.master, "mymaster");
        assert_eq!(
            s.addresses,
            [
                ("10.0.0.1".to_owned(), 26379),
                ("10.0.0.2".to_owned(), 26379),
                ("::1".to_owned(), 26380)
            ]
        );
        assert_eq!(s.data.redis_settings().db(), 3);
        assert_eq!(s.data.redis_settings().username(), Some("u"));
        assert_eq!(s.data.redis_settings().password(), Some("p@ss"));
        // The data nodes' password is not the sentinels'.
        assert_eq!(
            s.sentinels[0]
                .client
                .get_connection_info()
                .redis_settings()
                .password(),
            None
        );
        assert_eq!(
            s.name(),
            "mymaster@10.0.0.1:26379,10.0.0.2:26379,[::1]:26380"
        );
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("p@ss") && !shown.contains("p%40ss"),
            "{shown}"
        );

        let s = Sentinel::parse(
            "REDIS+SENTINEL://h:1/m?sentinel_username=admin&sentinel_password=s3cret",
            CONNECT,
        )
        .unwrap();
        let sentinel = s.sentinels[0].client.get_connection_info().redis_settings();
        assert_eq!(
            (sentinel.username(), sentinel.password()),
            (Some("admin"), Some("s3cret"))
        );
        assert_eq!(s.data.redis_settings().password(), None);
        assert!(!format!("{s:?}").contains("s3cret"));

        // Percent-decoded: `%26` is how an '&' is written.
        let s = Sentinel::parse(
            "redis+sentinel://h:1/m?sentinel_username=a%40b&sentinel_password=ab%26cd%25",
            CONNECT,
        )
        .unwrap();
        let sentinel = s.sentinels[0].client.get_connection_info().redis_settings();
        assert_eq!(
            (sentinel.username(), sentinel.password()),
            (Some("a@b"), Some("ab&cd%"))
        );
        let r = reason("redis+sentinel://h:1/m?sentinel_password=ab%zzcd");
        assert!(r.contains("percent-encode"), "{r}");
        assert!(!r.contains("zzcd"), "{r}");
    }

    #[test]
    fn says_what_to_fix_in_a_bad_url() {
        assert!(reason("redis+sentinel:///m").contains("no sentinel address"));
        assert!(reason("redis+sentinel://@/m").contains("no sentinel address"));
        assert!(reason("redis+sentinel://h:1,,h:2/m").contains("empty sentinel address"));
        assert!(reason("redis+sentinel://h:1").contains("no master name"));
        assert!(reason("redis+sentinel://h:1/").contains("no master name"));
        for port in ["0", "65536", "x", ""] {
            let r = reason(&format!("redis+sentinel://h:{port}/m"));
            assert!(r.contains("no valid port"), "{r}");
        }
        assert!(reason("redis+sentinel://[::1/m").contains("IPv6"));
        assert!(reason("redis+sentinel://h:1/m/x").contains("database"));
        assert!(reason("redis+sentinel://h:1/m/0/x").contains("path"));
        assert!(reason("redis+sentinel://h:1/m?password=x").contains("query parameter"));
        assert!(reason("redis+sentinel://h:1/m#insecure").contains("fragment"));
        assert_eq!(reason("rediss+sentinel://h:1/m"), "tls");
    }

    #[test]
    fn no_fragment_of_a_password_is_quoted_in_an_error() {
        // Unencoded `/ ? # @` in the data password (and `@ &` in the
        // sentinels' one, or a password taken for a host): whatever the parse
        // makes of them, no piece of the password is quoted.
        for (url, password) in [
            (
                "redis+sentinel://user:hunter/2@10.0.0.1:26379/m",
                "hunter/2",
            ),
            (
                "redis+sentinel://user:hunter?2@10.0.0.1:26379/m",
                "hunter?2",
            ),
            (
                "redis+sentinel://user:hun#ter2@10.0.0.1:26379/m",
                "hun#ter2",
            ),
            ("redis+sentinel://user:abc/def@10.0.0.1/m", "abc/def"),
            ("redis+sentinel://user:pqq@sss@h:1/m", "pqq@sss"),
            ("redis+sentinel://user:x/y?z#w@v@h:1/m", "x/y?z#w@v"),
            ("redis+sentinel://user:qqz/xyw:yyk@h:1/m", "qqz/xyw:yyk"),
            (
                "redis+sentinel://h:1/m?sentinel_password=zqv@xwk:jjq/x",
                "zqv@xwk:jjq/x",
            ),
            (
                "redis+sentinel://h:1/m?sentinel_password=zqv@xwk:jjq",
                "zqv@xwk:jjq",
            ),
            // An unencoded '&' in the sentinels' password.
            (
                "redis+sentinel://h:1/m?sentinel_password=ab&cdsecret",
                "ab&cdsecret",
            ),
            // A password whose '@' went missing, taken for a host.
            ("redis+sentinel://:hunter2,h:1/m", "hunter2"),
        ] {
            let shown = match Sentinel::parse(url, CONNECT) {
                Ok(s) => format!("{s:?} {}", s.name()),
                Err(e) => format!("{e:?}"),
            };
            let err = crate::Redlock::builder().node(url).build();
            let shown = match err {
                Ok(r) => format!("{shown} {r:?}"),
                Err(e) => format!("{shown} {e} {e:?}"),
            };
            // Every piece of the password three characters or longer.
            let pieces: Vec<&str> = password
                .split(['/', '?', '#', '@', ':', '&'])
                .filter(|p| p.len() >= 3)
                .collect();
            for piece in pieces {
                assert!(!shown.contains(piece), "{url}: {piece:?} in {shown}");
            }
        }
        let r = reason("redis+sentinel://user:hunter/2@10.0.0.1:26379/m");
        assert!(r.contains("percent-encode"), "{r}");
    }

    #[test]
    fn empty_parameters_and_bare_ipv6_hosts_say_what_to_fix() {
        let r = reason("redis+sentinel://h:1/m?sentinel_password=");
        assert!(r.contains("sentinel_password= is empty"), "{r}");
        let r = reason("redis+sentinel://::1/m");
        assert!(r.contains("brackets"), "{r}");
    }

    #[test]
    fn a_sentinel_listed_twice_has_one_vote() {
        let s = Sentinel::parse("redis+sentinel://s1:1,S1:1,s2:2,s1:3/m", CONNECT).unwrap();
        assert_eq!(
            s.addresses,
            [
                ("s1".to_owned(), 1),
                ("s2".to_owned(), 2),
                ("s1".to_owned(), 3)
            ]
        );
        assert_eq!(s.sentinels.len(), 3);
    }

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
