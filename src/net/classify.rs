//! What a node's error means: [`classify`] sorts a Redis error into the
//! [`NodeFailure`] a user can act on, and says whether the connection that
//! answered it is gone ([`is_connection_error`]) or to be replaced
//! ([`needs_new_connection`]).
//!
//! A node knows nothing of lock kinds, and neither does this file: a
//! script's refusal in a kind's own words (the semaphore's `PERMITS`, the
//! fenced kind's `BADFENCE`) comes out as [`NodeFailure::Server`] with its
//! code, and the kind reads it ([`Kind::read_error`](crate::kinds::Kind::read_error)).

#[cfg(feature = "tls")]
use std::sync::Arc;

use redis::{ErrorKind, RedisError};

use crate::error::NodeFailure;

/// Whether `e` is rustls's verdict on the handshake — a certificate it
/// does not trust or that names another host, an alert from the node (a
/// client certificate required) — or a TLS configuration redis-rs could not
/// build from our certificates. Told by the error's structure, not its
/// text: a node that dies mid-request over TLS ("peer closed connection
/// without sending TLS close_notify") is a connection failure.
#[cfg(feature = "tls")]
fn is_tls_failure(e: &RedisError) -> bool {
    if e.kind() == ErrorKind::InvalidClientConfig && e.to_string().contains("TLS parameters") {
        return true;
    }
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    let mut source = std::error::Error::source(e);
    while let Some(err) = source {
        // redis-rs keeps the I/O error behind an `Arc`; the I/O error keeps
        // rustls's behind `get_ref` (its `source` skips it).
        let err: &(dyn std::error::Error + 'static) = match err.downcast_ref::<Shared>() {
            Some(shared) => &**shared,
            None => err,
        };
        let inner = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .map(|inner| inner as &(dyn std::error::Error + 'static));
        if err.is::<rustls::Error>() || inner.is_some_and(|i| i.is::<rustls::Error>()) {
            return true;
        }
        source = err.source();
    }
    false
}

/// Without the `tls` feature no node speaks TLS.
#[cfg(not(feature = "tls"))]
fn is_tls_failure(_: &RedisError) -> bool {
    false
}

/// Whether `e` means the connection is gone (as opposed to an error answer).
pub(crate) fn is_connection_error(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error()
}

/// Whether the connection that answered `e` is to be replaced: it is gone,
/// or its server answers `READONLY`, so it is no longer the primary (a
/// demoted primary of a Sentinel-managed node, or a server behind an
/// address that moved to a replica). The next connection is made afresh
/// (and, for a Sentinel-managed node, resolves the primary again); on a
/// replica configured as a node by mistake, each refusal costs a reconnect.
pub(crate) fn needs_new_connection(e: &RedisError) -> bool {
    is_connection_error(e) || matches!(classify(e), NodeFailure::ReadOnly(_))
}

/// Sorts a Redis error into the failure a user can act on.
pub(crate) fn classify(e: &RedisError) -> NodeFailure {
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
    if is_tls_failure(e) {
        return NodeFailure::Tls(message);
    }
    // Raised by redis-rs before anything is sent (a URL it cannot use,
    // say): never the node's answer.
    if matches!(
        e.kind(),
        ErrorKind::InvalidClientConfig | ErrorKind::Client | ErrorKind::UnexpectedReturnType
    ) {
        return NodeFailure::Client(message);
    }
    if is_connection_error(e) {
        return NodeFailure::Connection(message);
    }
    // Errors raised inside a script, or answered within a pipeline, carry
    // the code of the command that failed only in their text. An error
    // with a code of its own (a script's refusal: a kind's code, which the
    // kind reads, see `Kind::read_error`) is that code's, whatever its
    // detail says (a key that names one).
    if matches!(e.code(), None | Some("ERR"))
        && let Some(failure) = known(KNOWN.into_iter().find(|code| message.contains(code)))
    {
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

    #[test]
    fn client_side_errors_are_not_the_nodes_answer() {
        for e in [
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "Cannot create insecure client without tls-rustls-insecure feature",
            )),
            RedisError::from((ErrorKind::Client, "a client-side error")),
        ] {
            let failure = classify(&e);
            assert!(matches!(failure, NodeFailure::Client(_)), "{failure:?}");
            assert!(failure.to_string().contains("not asked"), "{failure}");
        }
    }
}
