//! Refusals an operator fixes outside the code, told apart from other
//! errors: a node's ACL that denies this client's user a command, key or
//! channel a lock needs, and a member of a Redis Cluster given as a plain
//! server.
//!
//! * **ACL.** Redis refuses a denied command with `NOPERM … the 'evalsha'
//!   command`; inside a script, Redis 7.0 answers `ERR The user executing
//!   the script can't run this command or subcommand script: …` (naming no
//!   command), 7.2 and later `ERR ACL failure in script: … the 'publish'
//!   command …`. Each is a [`NodeFailure::Denied`], naming the command where
//!   the node did, and the ACL the user needs ([`ACL_NEEDED`]).
//!
//!   A user allowed `SET` but not `EVALSHA` (or `EVAL`) would be granted a
//!   mutex (its acquisition is a plain `SET NX PX`) that it cannot extend or
//!   release (scripts): the lock would be reported held and then stay on
//!   the node until its TTL. So every new command connection to a server
//!   (a plain one, a Sentinel-managed node's primary) first asks whether
//!   the user may run both ([`check`]): `EVALSHA` of a script no one has and
//!   `EVAL` with a negative key count, which the ACL check refuses before
//!   anything runs and which otherwise fail without running or caching
//!   anything. A refusal fails the connection with `Denied`: the node never
//!   votes. (A cluster's connection is not asked: its commands go to many
//!   servers; a denial there is still told, command by command.)
//! * **A cluster member given as `redis://`.** It answers `MOVED` (or
//!   `ASK`) for every key of a slot it does not serve: a
//!   [`NodeFailure::ClusterMember`], which says to give the cluster as one
//!   `redis+cluster://` node. (A real cluster node's connection follows
//!   these redirects itself and never hands them back; `CLUSTERDOWN` is
//!   left alone, as a real cluster answers it too.)

use redis::{ErrorKind, RedisError, ServerErrorKind};

use super::CommandConn;
use crate::error::NodeFailure;

/// What an ACL user needs on every node: the commands the locks send and
/// their scripts run, the keys and channels under the key prefix, and the
/// restart guard's `INFO`/`ROLE`/`SMEMBERS`. The one list, shown by
/// [`NodeFailure::Denied`] and [`NodeFailure::Auth`], and tested against a
/// real server (`tests/lock.rs`).
pub(crate) const ACL_NEEDED: &str = "~<key prefix>* &<key prefix>* ~redquorum-born-empty \
     +evalsha +eval +script|load +set +get +del +exists +type +pttl +pexpire +time \
     +hset +hget +hmget +hgetall +hkeys +hlen +hdel +hexists +zadd +zrange +zrem +zscore \
     +publish +pubsub|numsub +subscribe +unsubscribe +ping +info +role +smembers \
     (with a Redis Cluster node, keys are ~{<key prefix>*, and +cluster|slots +asking)";

/// The failure `e` is if it is an ACL refusal or a cluster member's
/// redirect; `None` otherwise. Asked first by [`classify`](super::classify).
pub(crate) fn refine(e: &RedisError) -> Option<NodeFailure> {
    if matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::Moved | ServerErrorKind::Ask)
    ) {
        return Some(NodeFailure::ClusterMember(e.to_string()));
    }
    let message = e.to_string();
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

/// Whether the user of a new command connection may run the scripts every
/// lock's release and extension are (`EVALSHA`, and `EVAL` after a
/// `NOSCRIPT`); see the module's doc. Anything but a refusal (a renamed
/// command, an old server) passes: only a denial is known to strand a lock.
pub(crate) async fn check(conn: &CommandConn) -> Result<(), NodeFailure> {
    if conn.is_cluster() {
        return Ok(());
    }
    let mut evalsha = redis::cmd("EVALSHA");
    evalsha
        .arg("0000000000000000000000000000000000000000")
        .arg(0);
    let mut eval = redis::cmd("EVAL");
    eval.arg("").arg(-1);
    let ask = |cmd: redis::Cmd| {
        let mut conn = conn.clone();
        async move { cmd.query_async::<redis::Value>(&mut conn).await }
    };
    let (evalsha, eval) = futures::join!(ask(evalsha), ask(eval));
    for reply in [evalsha, eval] {
        match reply {
            Err(e) if super::is_connection_error(&e) => return Err(super::classify(&e)),
            Err(e) => {
                if let Some(denied @ NodeFailure::Denied { .. }) = refine(&e) {
                    return Err(denied);
                }
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(reply: &str) -> RedisError {
        redis::parse_redis_value(reply.as_bytes())
            .unwrap()
            .extract_error()
            .unwrap_err()
    }

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
                matches!(
                    super::super::classify(&error(reply)),
                    NodeFailure::Denied { .. }
                ),
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

    #[test]
    fn a_redirect_on_a_plain_node_says_to_give_the_cluster_as_one_node() {
        for reply in [
            "-MOVED 3999 127.0.0.1:7001\r\n",
            "-ASK 3999 127.0.0.1:7002\r\n",
        ] {
            let failure = super::super::classify(&error(reply));
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
}
