//! What a node is: where its connections go.
//!
//! A node of the quorum is one failure domain that holds a copy of each
//! lock key. Most often it is one server ([`Endpoint::Server`]); with the
//! `sentinel` feature it can be a Sentinel-managed primary
//! (`Endpoint::Sentinel`, see `net::sentinel`), whose
//! connections go to whichever server the sentinels name as the primary
//! when the connection is made. The rest of the node layer (bounded
//! requests, the gate, retired connections, the restart guard) does not
//! care how a connection was reached, only that every connection it gets is
//! to the server that holds the keys now. This file is the one place that
//! knows how to get such a connection, for commands and for pub/sub.
//!
//! A node may also be a whole Redis Cluster ([`Endpoint::Cluster`], crate
//! feature `cluster`): its command connection is then redis-rs's
//! `ClusterConnection`, which sends each command to the primary serving
//! its key's slot. What that changes for the node rules (replays, the
//! restart guard per shard) is argued in [`cluster`](super::cluster).

use redis::AsyncConnectionConfig;
use redis::aio::{ConnectionLike, MultiplexedConnection, PubSub};
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::error::NodeFailure;
use crate::net::classify;
#[cfg(feature = "sentinel")]
use crate::net::sentinel::Sentinel;

/// The URL schemes of a Sentinel-managed node (the second asks for TLS).
pub(crate) const SENTINEL_SCHEMES: [&str; 2] = ["redis+sentinel", "rediss+sentinel"];

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
    Cluster(super::cluster::ClusterEndpoint),
}

impl Endpoint {
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
    /// [`guard`](super::guard)).
    /// A cluster's does too, but its guard sees each grant's primary
    /// ([`Guard::granted_by`](super::guard::Guard::granted_by)), with no
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
    /// Unbounded here: the caller bounds it (see [`slot`](super::slot)).
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
                .connect()
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
    /// A cluster's connection, which routes each command by its key's slot
    /// (and is configured to retry nothing: see [`cluster`](super::cluster)).
    #[cfg(feature = "cluster")]
    Cluster(redis::cluster_async::ClusterConnection),
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
