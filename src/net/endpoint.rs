//! What a node is: where its connections go.
//!
//! A node of the quorum is one failure domain that holds a copy of each
//! lock key. Most often it is one server ([`Endpoint::Server`]); the rest of
//! the node layer (bounded requests, the gate, retired connections, the
//! restart guard) does not care how a connection was reached, only that
//! every connection it gets is to the server that holds the keys now. This
//! file is the one place that knows how to get such a connection, for
//! commands and for pub/sub.

use redis::aio::{MultiplexedConnection, PubSub};
use redis::{AsyncConnectionConfig, RedisError};

/// How a node's connections are made.
#[derive(Clone)]
pub(crate) enum Endpoint {
    /// One server, at the client's address.
    Server(redis::Client),
}

impl Endpoint {
    /// How the node is named in reports and logs: `host:port` (or the
    /// socket path), never the password.
    pub(crate) fn name(&self) -> String {
        match self {
            Endpoint::Server(client) => client.get_connection_info().addr().to_string(),
        }
    }

    /// The node's identity for duplicate detection: its name in lower case.
    /// The database number is left out on purpose: two databases of one
    /// server are one failure domain.
    pub(crate) fn identity(&self) -> String {
        self.name().to_ascii_lowercase()
    }

    /// A new command connection to the server that holds the keys now.
    /// Unbounded here: the caller bounds it (see [`slot`](super::slot)).
    pub(crate) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<MultiplexedConnection, RedisError> {
        match self {
            Endpoint::Server(client) => {
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await
            }
        }
    }

    /// A new subscriber connection, on which the node's `PUBLISH`es are
    /// heard. Unbounded here: the caller bounds it.
    pub(crate) async fn pubsub(&self) -> Result<PubSub, RedisError> {
        match self {
            Endpoint::Server(client) => client.get_async_pubsub().await,
        }
    }
}
