//! What a node's error means: [`classify`] sorts a Redis error into the
//! [`NodeFailure`] a user can act on, and says whether the connection that
//! answered it is gone ([`is_connection_error`]) or to be replaced
//! ([`needs_new_connection`]).
//!
//! A node knows nothing of lock kinds, and neither does this file: a
//! script's refusal in a kind's own words (the semaphore's `PERMITS`, the
//! fenced kind's `BADFENCE`) comes out as [`NodeFailure::Server`] with its
//! code, and the kind reads it ([`Kind::read_error`](crate::kinds::Kind::read_error)).
//!
//! Two refusals an operator fixes outside the code are told apart first
//! ([`refine`]):
//!
//! * **ACL.** Redis refuses a denied command with `NOPERM … the 'evalsha'
//!   command`; inside a script, Redis 7.0 answers `ERR The user executing
//!   the script can't run this command or subcommand script: …` (naming no
//!   command), 7.2 and later `ERR ACL failure in script: … the 'publish'
//!   command …`. Each is a [`NodeFailure::Denied`], naming the command where
//!   the node did, and the ACL the user needs. (A connection whose user may
//!   not run the scripts is refused before any lock: see
//!   [`denial`](super::denial).)
//! * **A cluster member given as `redis://`.** It answers `MOVED` (or
//!   `ASK`) for every key of a slot it does not serve: a
//!   [`NodeFailure::ClusterMember`], which says to give the cluster as one
//!   `redis+cluster://` node. (A real cluster node's connection follows
//!   these redirects itself and never hands them back; `CLUSTERDOWN` is
//!   left alone, as a real cluster answers it too.)

#[cfg(feature = "tls")]
use std::sync::Arc;

use redis::{ErrorKind, RedisError, ServerErrorKind};

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
    if let Some(failure) = refine(e) {
        return failure;
    }
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

/// The failure `e` is if it is an ACL refusal or a cluster member's
/// redirect; `None` otherwise. Asked first by [`classify`].
pub(crate) fn refine(e: &RedisError) -> Option<NodeFailure> {
    if matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    ) {
        return Some(NodeFailure::ClusterMember(e.to_string()));
    }
    let message = e.to_string();
    // The text is read only where Redis puts an ACL refusal: a `NOPERM`
    // answer, or an error raised inside a script (`ERR`, or no code); a
    // kind's own refusal (`BADFENCE <key>`) may quote a resource's name.
    if !matches!(e.code(), None | Some("ERR" | "NOPERM")) {
        return None;
    }
    let denied = e.code() == Some("NOPERM")
        || [
            "NOPERM",
            "can't run this command",
            "can't access at least one of the keys",
            "can't publish to the channel",
            "ACL failure in script",
            "no permissions to",
        ]
        .iter()
        .any(|says| message.contains(says));
    denied.then(|| NodeFailure::Denied {
        command: named_command(&message),
        message,
    })
}

/// The command an ACL refusal names: `… the 'evalsha' command`.
fn named_command(message: &str) -> Option<String> {
    let end = message.find("' command")?;
    let start = message[..end].rfind('\'')? + 1;
    let name = &message[start..end];
    (!name.is_empty() && !name.contains(char::is_whitespace)).then(|| name.to_owned())
}

/// The error a node answers with `reply` (RESP text: `-CODE detail\r\n`),
/// as the Redis client hands it over: for tests of what an error means.
#[cfg(test)]
pub(crate) fn error(reply: &str) -> RedisError {
    redis::parse_redis_value(reply.as_bytes())
        .unwrap()
        .extract_error()
        .unwrap_err()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acl_refusals_are_denials_naming_the_command_where_the_node_does() {
        for (reply, command) in [
            (
                "-NOPERM this user has no permissions to run the 'evalsha' command\r\n",
                Some("evalsha"),
            ),
            // Redis 7.0, inside a script.
            (
                "-ERR The user executing the script can't run this command or subcommand \
                 script: de85327b3ebd1554fb6b61797a339807ad56f83d, on @user_script:1.\r\n",
                None,
            ),
            (
                "-ERR The user executing the script can't access at least one of the keys \
                 mentioned in the command arguments script: 4e57, on @user_script:1.\r\n",
                None,
            ),
            (
                "-ERR The user executing the script can't publish to the channel mentioned \
                 in the command script: de85, on @user_script:1.\r\n",
                None,
            ),
            // Redis 7.2 and later, inside a script.
            (
                "-ERR ACL failure in script: User locker has no permissions to run the \
                 'pexpire' command script: 1a8c, on @user_script:12.\r\n",
                Some("pexpire"),
            ),
            (
                "-NOPERM this user has no permissions to access one of the keys used as \
                 arguments\r\n",
                None,
            ),
        ] {
            let failure = refine(&error(reply)).unwrap();
            let NodeFailure::Denied { command: named, .. } = &failure else {
                panic!("{reply}: {failure:?}");
            };
            assert_eq!(named.as_deref(), command, "{reply}");
            let shown = failure.to_string();
            assert!(shown.contains("ACL SETUSER"), "{shown}");
            assert!(shown.contains("+evalsha"), "{shown}");
            if let Some(command) = command {
                assert!(shown.contains(&format!("+{command}")), "{shown}");
            }
            assert!(!shown.contains("  "), "{shown}");
            // And so `classify` sorts it, not as an authentication failure.
            assert!(
                matches!(classify(&error(reply)), NodeFailure::Denied { .. }),
                "{reply}"
            );
        }
        for other in [
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n",
            "-ERR Number of keys can't be negative\r\n",
            "-NOSCRIPT No matching script. Please use EVAL.\r\n",
            "-CLUSTERDOWN The cluster is down\r\n",
        ] {
            assert_eq!(refine(&error(other)), None, "{other}");
        }
    }

    /// A kind's own refusal quotes a resource's name, which may hold any
    /// word: it stays the kind's (a `Server` failure with its code, which
    /// the kind reads), never an ACL denial or a node's own condition.
    #[test]
    fn a_kinds_refusal_naming_a_key_is_not_read_for_other_codes() {
        for reply in [
            "-BADFENCE redquorum:no permissions to NOPERM:fence\r\n",
            "-FENCEMAX the fencing counter redquorum:BACKROOM-READONLY:fence cannot grow past 2^53\r\n",
        ] {
            let failure = classify(&error(reply));
            assert!(
                matches!(&failure, NodeFailure::Server { code, .. } if code == "BADFENCE" || code == "FENCEMAX"),
                "{reply}: {failure:?}"
            );
        }
    }

    #[test]
    fn a_redirect_on_a_plain_node_says_to_give_the_cluster_as_one_node() {
        for reply in [
            "-MOVED 3999 127.0.0.1:7001\r\n",
            "-ASK 3999 127.0.0.1:7002\r\n",
        ] {
            let failure = classify(&error(reply));
            assert!(
                matches!(failure, NodeFailure::ClusterMember(_)),
                "{failure:?}"
            );
            let shown = failure.to_string();
            assert!(shown.contains("redis+cluster://"), "{shown}");
            assert!(shown.contains("`cluster`"), "{shown}");
            assert!(shown.contains("127.0.0.1:700"), "{shown}");
        }
    }

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
