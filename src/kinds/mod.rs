//! Lock kinds: what a lock *is* on one node.
//!
//! A kind is its commands (Lua scripts in `.lua` files beside it) and how
//! one node's reply becomes a vote. Everything else — fan-out, counting,
//! validity, rollback on every node and on cancel, the restart guard,
//! waiting for a release, the watchdog — is the engine's, and every kind
//! gets it without a line of its own. A kind never talks to a connection,
//! and a node never knows which kind it runs.
//!
//! * [`mutex`]: one holder at a time (`SET NX PX`, compare-and-delete,
//!   compare-and-pexpire).

pub(crate) mod mutex;

use redis::Value;

use crate::error::NodeFailure;
use crate::proto::quorum::Plan;
use crate::proto::{Answer, Command, LockId};

/// One kind of lock, as the engine drives it.
///
/// Every command must be safe to run twice on one node: a node sends a
/// command once more, within the same request, when it finds its connection
/// went stale (see `net`). Comparing the token makes the mutex's scripts so;
/// a kind that counts must make a repeated command count once.
pub(crate) trait Kind: Send + Sync + 'static {
    /// Takes the lock on one node, for `plan.ttl`. With `observe`, the reply
    /// also says who holds the key there and for how long, for a waiter.
    fn acquire(&self, id: &LockId, plan: &Plan, observe: bool) -> Command;
    /// Reads one node's reply to [`acquire`](Self::acquire).
    fn read_acquire(&self, id: &LockId, reply: Value) -> Answer;
    /// Lets go on one node, if it still holds our token; with `announce`,
    /// wakes the waiters (see the engine's `waiters`).
    fn release(&self, id: &LockId, announce: bool) -> Command;
    /// Prolongs the key to `plan.ttl` on one node, if it still holds our
    /// token. Never creates a key: an extension cannot resurrect a lock.
    fn extend(&self, id: &LockId, plan: &Plan) -> Command;
    /// Reads one node's reply to [`release`](Self::release) or
    /// [`extend`](Self::extend).
    fn read_outcome(&self, reply: Value) -> Answer {
        script_outcome(&reply)
    }
}

/// What the release and extension scripts answer.
pub(crate) mod code {
    /// Deleted, or given the new TTL.
    pub(crate) const DONE: i64 = 1;
    /// Deleted, but the announcement was refused.
    pub(crate) const RELEASED_UNANNOUNCED: i64 = 2;
    /// The key was missing.
    pub(crate) const MISSING: i64 = 0;
    /// The key held another owner's token.
    pub(crate) const HELD: i64 = -1;
}

/// The answer of a script that replies with a [`code`].
pub(crate) fn script_outcome(reply: &Value) -> Answer {
    let vote = match reply {
        Value::Int(code::DONE) => Ok(()),
        Value::Int(code::RELEASED_UNANNOUNCED) => {
            return Answer {
                unannounced: true,
                ..Ok(()).into()
            };
        }
        Value::Int(code::MISSING) => Err(NodeFailure::Missing),
        Value::Int(code::HELD) => Err(NodeFailure::Held),
        other => Err(unexpected(other)),
    };
    vote.into()
}

/// A reply no script of ours gives: the node is not running our script (or
/// is not Redis).
pub(crate) fn unexpected(reply: &Value) -> NodeFailure {
    NodeFailure::Server {
        code: "REPLY".to_owned(),
        message: format!(
            "unexpected reply {reply:?}: is this a Redis-compatible server running redquorum's scripts?"
        ),
    }
}
