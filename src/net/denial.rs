//! Whether a new connection's user may run what every lock needs: a node's
//! ACL that lets a user `SET` but not `EVALSHA` (or `EVAL`) would grant a
//! mutex (its acquisition is a plain `SET NX PX`) that the user cannot
//! extend or release (scripts): the lock would be reported held and then
//! stay on the node until its TTL. So every new command connection to a
//! server (a plain one, a Sentinel-managed node's primary) first asks
//! whether the user may run both ([`check`]): `EVALSHA` of a script no one
//! has and `EVAL` with a negative key count, which the ACL check refuses
//! before anything runs and which otherwise fail without running or caching
//! anything. A refusal fails the connection with
//! [`NodeFailure::Denied`]: the node never votes. (A cluster's connection
//! is not asked: its commands go to many servers; a denial there is still
//! told, command by command, by [`classify()`](super::classify::classify).)

use super::classify::{classify, is_connection_error, refine};
use super::topology::CommandConn;
use crate::error::NodeFailure;

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
            Err(e) if is_connection_error(&e) => return Err(classify(&e)),
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
