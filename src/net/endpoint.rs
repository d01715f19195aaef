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

use redis::AsyncConnectionConfig;
use redis::aio::{MultiplexedConnection, PubSub};

use crate::error::NodeFailure;
use crate::net::classify;
#[cfg(feature = "sentinel")]
use crate::net::sentinel::Sentinel;

/// How a node's connections are made.
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// One server, at the client's address.
    Server(redis::Client),
    /// The primary of a Sentinel-managed set, resolved anew for every
    /// connection (and re-checked while one is live, see `net`).
    #[cfg(feature = "sentinel")]
    Sentinel(Sentinel),
}

impl Endpoint {
    /// How the node is named in reports and logs: `host:port` (or the
    /// socket path), `master@sentinel:port,…` for a Sentinel-managed node;
    /// never the password.
    pub(crate) fn name(&self) -> String {
        match self {
            Endpoint::Server(client) => client.get_connection_info().addr().to_string(),
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => sentinel.name(),
        }
    }

    /// The node's identities for duplicate detection: two nodes that share
    /// one are the same node. A server's is its name in lower case (the
    /// database number is left out on purpose: two databases of one server
    /// are one failure domain); a Sentinel-managed node's are its master's
    /// name with each of its sentinels' addresses.
    pub(crate) fn identities(&self) -> Vec<String> {
        match self {
            Endpoint::Server(_) => vec![self.name().to_ascii_lowercase()],
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => sentinel.identities(),
        }
    }

    /// Whether the server behind the node can change to another that was
    /// running all along (a promoted replica), so that its uptime says
    /// nothing of when it began to hold the keys (see
    /// [`guard`](super::guard)).
    pub(crate) fn fails_over(&self) -> bool {
        match self {
            Endpoint::Server(_) => false,
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(_) => true,
        }
    }

    /// Sets the node's connect timeout as the bound on what a
    /// Sentinel-managed node's resolution waits for (each sentinel's
    /// answer, then connecting to the primary and its `ROLE`).
    pub(crate) fn bound(&mut self, connect: std::time::Duration) {
        match self {
            Endpoint::Server(_) => {}
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => sentinel.bound(connect),
        }
        let _ = connect;
    }

    /// A new command connection to the server that holds the keys now,
    /// and, for a Sentinel-managed node, the primary's address the
    /// sentinels named. Unbounded here: the caller bounds it (see
    /// [`slot`](super::slot)).
    pub(crate) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<(MultiplexedConnection, Option<(String, u16)>), NodeFailure> {
        match self {
            Endpoint::Server(client) => client
                .get_multiplexed_async_connection_with_config(config)
                .await
                .map(|conn| (conn, None))
                .map_err(|e| classify(&e)),
            #[cfg(feature = "sentinel")]
            Endpoint::Sentinel(sentinel) => {
                let resolved = sentinel.resolve(config).await?;
                Ok((resolved.conn, Some(resolved.primary)))
            }
        }
    }

    /// A new subscriber connection, on which the node's `PUBLISH`es are
    /// heard. Unbounded here: the caller bounds it.
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
        };
        client.get_async_pubsub().await.map_err(|e| classify(&e))
    }
}
