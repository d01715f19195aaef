//! Topologies: what a node is, and where its connections go.
//!
//! A node of the quorum is one failure domain that holds a copy of each
//! lock key. It can be one of three things, each an [`Endpoint`]:
//!
//! * **One server** ([`Endpoint::Server`], [`plain`]): `redis://host:port`.
//!   Every connection goes to it.
//! * **A Sentinel-managed primary** (`Endpoint::Sentinel`, feature
//!   `sentinel`, see `sentinel`): a primary, its replicas and the sentinels
//!   that promote a replica when the primary fails. Every connection goes
//!   to whichever server a majority of the listed sentinels name as the
//!   primary when the connection is made, and a live one is re-checked
//!   (`net::recheck`); a failover is seen by the restart guard as a
//!   restart.
//! * **A whole Redis Cluster** (`Endpoint::Cluster`, feature `cluster`,
//!   see `cluster`): its command connection is one plain connection per
//!   primary, each command sent to the primary serving its key's slot by
//!   our own slot map; what that changes for the node rules (every key of a
//!   lock in one slot, redirects followed by us and never replayed, the
//!   restart guard per shard) is argued there.
//!
//! The rest of the node layer ([`net`](crate::net): bounded requests, the
//! gate, retired connections, removals, the restart guard) does not care
//! how a connection was reached, only that every connection it gets is to
//! the server that holds the keys now. [`Endpoint::connect`] and
//! [`Endpoint::pubsub`] are the one place that knows how to get one, for
//! commands and for pub/sub; [`Endpoint::name`] and
//! [`Endpoint::identities`] say how the node is shown and when two nodes
//! are one failure domain (which must not vote twice).
//!
//! **URLs.** Every node is given to the builder as one URL, and its scheme
//! picks the topology ([`url`]), told apart without the features: a URL of
//! a topology left out of the build is refused with the feature to add,
//! not read as another. [`Endpoint::parse`] turns a URL into its endpoint,
//! with no I/O: redis-rs parses a server's ([`plain`]), `sentinel::url` a
//! Sentinel-managed node's, [`url::cluster_seeds`] a cluster's.
//!
//! **Redaction.** A URL carries passwords (its user information, some query
//! parameters), and an error about a URL that does not parse must not show
//! them either: every URL and parser message the crate shows goes through
//! [`redact`](mod@redact) first, which finds them even in a malformed URL.

#[cfg(feature = "cluster")]
pub(crate) mod cluster;
pub(crate) mod plain;
pub(crate) mod redact;
#[cfg(feature = "sentinel")]
pub(crate) mod sentinel;
pub(crate) mod url;

use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::{ConfigError, NodeFailure};
use crate::net::classify::classify;
use redact::redact;
#[cfg(feature = "sentinel")]
use sentinel::Sentinel;

/// How a node's connections are made.
// One per node, made once: the sizes of the variants do not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// One server, at the client's address.
    Server(redis::Client),
    /// The primary of a Sentinel-managed set, resolved anew for every
    /// connection (and re-checked while one is live, see `net`).
    #[cfg(feature = "sentinel")]
    Sentinel(Sentinel),
    /// A Redis Cluster, reached through its seed nodes.
    #[cfg(feature = "cluster")]
    Cluster(cluster::ClusterEndpoint),
}

impl Endpoint {
    /// How node `url` is reached: a cluster node for a `redis+cluster://`
    /// URL, a Sentinel-managed node for a `redis+sentinel://` one, else one
    /// server (with the certificates `tls` for a TLS URL). `connect` is the
    /// node's connect timeout, which bounds a Sentinel-managed node's
    /// queries and a cluster's own steps. Does no I/O; errors show the URL
    /// redacted. Whitespace around the URL is dropped first, whatever the
    /// topology (redis-rs would refuse it on a server's URL, where the
    /// other parsers took it).
    pub(crate) fn parse(
        url: &str,
        connect: Duration,
        tls: &plain::Tls,
    ) -> Result<Endpoint, ConfigError> {
        let url = url.trim();
        if let Some(seeds) = url::cluster_seeds(url)? {
            return Endpoint::cluster(url, &seeds, connect);
        }
        if !url::is_sentinel(url) {
            return Ok(Endpoint::Server(plain::client(url, tls)?));
        }
        #[cfg(feature = "sentinel")]
        {
            use sentinel::url::UrlError;
            match Sentinel::parse(url, connect) {
                Ok(sentinel) => Ok(Endpoint::Sentinel(sentinel)),
                Err(UrlError::Tls) => {
                    Err(ConfigError::SentinelTlsNotSupported { url: redact(url) })
                }
                Err(UrlError::Invalid(reason)) => Err(ConfigError::InvalidSentinelUrl {
                    url: redact(url),
                    reason: redact::redact_all(&reason, url),
                }),
            }
        }
        #[cfg(not(feature = "sentinel"))]
        Err(ConfigError::SentinelNotEnabled { url: redact(url) })
    }

    /// The endpoint of a cluster node given as `url`, whose seeds are
    /// `seeds`.
    #[cfg(feature = "cluster")]
    fn cluster(url: &str, seeds: &[String], connect: Duration) -> Result<Endpoint, ConfigError> {
        cluster::ClusterEndpoint::new(seeds, connect)
            .map(Endpoint::Cluster)
            .map_err(|e| ConfigError::InvalidUrl {
                url: redact(url),
                reason: redact::redact_all(&e.to_string(), url),
            })
    }

    /// Without the `cluster` feature, no node is a cluster.
    #[cfg(not(feature = "cluster"))]
    fn cluster(url: &str, _: &[String], _: Duration) -> Result<Endpoint, ConfigError> {
        Err(ConfigError::ClusterNotEnabled { url: redact(url) })
    }

    /// How the node is named in reports and logs: `host:port` (or the
    /// socket path), `master@sentinel:port,…` for a Sentinel-managed node,
    /// `cluster(host:port,…)` for a cluster (its seeds); never the password.
    pub(crate) fn name(&self) -> String {
        match self {
            Endpoint::Server(client) => client.get_connection_info().addr().to_string(),
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => sentinel.name(),
            #[cfg(feature = "cluster")]
            Endpoint::Cluster(cluster) => cluster.name(),
        }
    }

    /// The node's identities for duplicate detection: two nodes that share
    /// one are the same node. A server's is its name in lower case (the
    /// database number is left out on purpose: two databases of one server
    /// are one failure domain); a cluster's, each of its seeds' (a seed
    /// shared with another node, or given as a plain node, is one cluster);
    /// a Sentinel-managed node's are its master's name with each of its
    /// sentinels' addresses.
    pub(crate) fn identities(&self) -> Vec<String> {
        match self {
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => sentinel.identities(),
            #[cfg(feature = "cluster")]
            Endpoint::Cluster(cluster) => cluster.identities(),
            _ => vec![self.name().to_ascii_lowercase()],
        }
    }

    /// Whether the server behind the node can change to another that was
    /// running all along (a promoted replica), so that its uptime says
    /// nothing of when it began to hold the keys (see
    /// [`guard`](crate::net::guard)).
    /// A cluster's does too, but its guard sees each grant's primary
    /// ([`Guard::granted_by`](crate::net::guard::Guard::granted_by)), with no
    /// re-check window to add: it is not counted here.
    pub(crate) fn fails_over(&self) -> bool {
        match self {
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(_) => true,
            _ => false,
        }
    }

    /// Whether the node is a Redis Cluster (its keys must then keep one
    /// lock's keys in one slot).
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            #[cfg(feature = "cluster")]
            Endpoint::Cluster(_) => true,
            _ => false,
        }
    }

    /// A new command connection to the server that holds the keys now (on
    /// a cluster, to every primary, routed by slot), and, for a
    /// Sentinel-managed node, the primary's address the sentinels named.
    /// Unbounded here: the caller bounds it (see [`slot`](crate::net::slot)).
    pub(crate) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<(CommandConn, Option<(String, u16)>), NodeFailure> {
        match self {
            Endpoint::Server(client) => client
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(|conn| (CommandConn::Plain(conn), None))
                .map_err(|e| classify(&e)),
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => {
                let resolved = sentinel.resolve(config).await?;
                Ok((CommandConn::Plain(resolved.conn), Some(resolved.primary)))
            }
            #[cfg(feature = "cluster")]
            Endpoint::Cluster(cluster) => cluster
                .connect(config)
                .await
                .map(|conn| (CommandConn::Cluster(conn), None))
                .map_err(|e| classify(&e)),
        }
    }

    /// A new subscriber connection, on which the node's `PUBLISH`es are
    /// heard. Unbounded here: the caller bounds it. On a cluster, a plain
    /// connection to one of its nodes (a classic `PUBLISH` reaches every
    /// node of a cluster), the next seed each time, so that a dead seed is
    /// not tried again and again.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, NodeFailure> {
        let client = match self {
            Endpoint::Server(client) => client.clone(),
            // Resolved and checked as for commands; the checking connection
            // is not kept.
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => {
                sentinel
                    .resolve(&AsyncConnectionConfig::new())
                    .await?
                    .client
            }
            #[cfg(feature = "cluster")]
            Endpoint::Cluster(cluster) => return cluster.pubsub().await.map_err(|e| classify(&e)),
        };
        client.get_async_pubsub().await.map_err(|e| classify(&e))
    }
}

/// A node's command connection: to one server, or to a cluster.
#[derive(Clone)]
pub(crate) enum CommandConn {
    /// One server's multiplexed connection.
    Plain(MultiplexedConnection),
    /// A cluster's connection: one to each primary, each command routed by
    /// its key's slot, nothing retried (see [`cluster`]).
    #[cfg(feature = "cluster")]
    Cluster(cluster::ShardsConn),
}

impl CommandConn {
    /// Whether this is a cluster's connection (never without the `cluster`
    /// feature).
    pub(crate) fn is_cluster(&self) -> bool {
        match self {
            CommandConn::Plain(_) => false,
            #[cfg(feature = "cluster")]
            CommandConn::Cluster(_) => true,
        }
    }
}

impl ConnectionLike for CommandConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            CommandConn::Plain(conn) => conn.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            CommandConn::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            CommandConn::Plain(conn) => conn.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "cluster")]
            CommandConn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            CommandConn::Plain(conn) => conn.get_db(),
            #[cfg(feature = "cluster")]
            CommandConn::Cluster(conn) => conn.get_db(),
        }
    }
}
