//! Lock kinds: what a lock *is* on one node.
//!
//! A kind is its commands (Lua scripts in `.lua` files beside it) and how
//! one node's reply becomes a vote. Everything else — fan-out, counting,
//! validity, rollback on every node and on cancel, the restart guard,
//! waiting for a release, the watchdog — is the engine's, and every kind
//! gets it without a line of its own. A kind never talks to a connection,
//! and a node never knows which kind it runs.
//!
//! * [`mutex`]: one holder at a time, on one resource (`SET NX PX`,
//!   compare-and-delete, compare-and-pexpire) or on a set of resources
//!   taken all or none on each node (`lock_all`).
//! * [`fenced`]: the mutex on one resource, plus a fencing token that
//!   grows with every new holder, for the protected storage to check.
//! * [`reentrant`]: one *owner* at a time, who may take the resource again
//!   while holding it; each take is a hold of its own, and the resource is
//!   free when every hold has gone.
//! * [`semaphore`]: at most `k` holders at a time, each holding one of `k`
//!   permit slots, every slot a mutex of its own.
//! * [`rwlock`]: readers share, a writer (the mutex on the same name)
//!   excludes readers and writers; a waiting writer turns new readers away.
//! * [`election`]: a leader is the fenced lock on the election's name, its
//!   term the fencing token, with a record of who leads beside the key.
//!
//! The kinds share the key space and exclude each other: a key of another
//! kind is "held by another owner" to every script, never an error. What a
//! key is, is said once, by the key space's owner ([`keyspace`]): a Lua
//! prelude before every script classifies a key for any kind, so that a
//! kind's scripts speak only of their own layout. [`admin`] reads and
//! clears any kind's key through it, for operators.
//!
//! **A kind owns everything about it in its folder**: its scripts; its
//! layout's Lua (`layout.lua`: how its key looks, holds, is removed, has
//! room, and what its waiters are told); its [`Kind`] (commands, how a
//! node's reply becomes a vote, how its own error codes become failures:
//! [`Kind::read_error`], and its end hook: [`OnEnd`]); its guarantee and
//! why it holds (the module doc); and how an operator sees its holder (its
//! `show`, for [`Holding`](admin::Holding)'s `Display`). A new kind the
//! size of the semaphore touches, besides its folder and its tests:
//!
//! | file | what it adds |
//! |---|---|
//! | `kinds/mod.rs` | `pub(crate) mod <kind>;`, and its line in the list above |
//! | `kinds/spec.rs` | its rule: which request options make it, and which it refuses ([`spec`]) |
//! | `client.rs` | its option on `LockRequest` (the field, the setter, its `Debug` line) |
//! | `kinds/keyspace.rs`, `tests/scripts.rs` | one line each in `prelude!` for its `layout.lua` (a kind that has a layout of its own) |
//! | `kinds/keyspace.lua` | its fields in `look`, and its branch in `ask` (the same) |
//! | `kinds/admin/mod.rs` | its [`Holding`](admin::Holding) variant: its arm in `read_inspect`, `same_holder` and `Display` |
//! | `error.rs` | a [`NodeFailure`] variant, if it refuses with a failure of its own (the semaphore's `PermitsMismatch`; `proto/quorum.rs` counts that one as a mismatch no retry mends) |
//! | `cli/src/inspect.rs` | its holder in `status --json` (the human form is its `show`) |
//! | `kinds/admin/takers.rs` | which of its holders' tokens name a taker (`taken_by`, `taker_ids`), if it has a `Holding` of its own |
//! | `metrics.rs` | its `kind` label (its `Kind::name`) in the module doc and the test that reads it |

pub(crate) mod admin;
pub(crate) mod election;
pub(crate) mod fenced;
pub(crate) mod keyspace;
pub(crate) mod mutex;
pub(crate) mod reentrant;
pub(crate) mod rwlock;
pub(crate) mod semaphore;
pub(crate) mod spec;

use std::time::Duration;

use redis::Value;

use crate::error::NodeFailure;
use crate::proto::quorum::{Plan, Tally};
use crate::proto::{Answer, Command, Holder, LockId};

/// One kind of lock, as the engine drives it.
///
/// Every command must be safe to run twice on one node: a node sends a
/// command once more, within the same request, when it finds its connection
/// went stale (see `net`). Comparing the token makes the mutex's scripts so;
/// a kind that counts must make a repeated command count once (the
/// reentrant kind names each hold by its token, so a repeat finds it).
pub(crate) trait Kind: Send + Sync + 'static {
    /// The kind's name in metrics and logs: `mutex`, `set`, `reentrant`,
    /// `fenced`, `semaphore`, `read`, `election`.
    fn name(&self, id: &LockId) -> &'static str;
    /// Takes the lock on one node, for `plan.ttl`. For a `waiter` (its
    /// [`queue::member`](crate::wait::queue::member)), the reply also says
    /// who holds the key there and for how long, and the waiter queues for
    /// the key (see [`wait`](crate::wait)).
    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command;
    /// Reads one node's reply to [`acquire`](Self::acquire).
    fn read_acquire(&self, reply: Value) -> Answer {
        acquire_outcome(&reply)
    }
    /// Lets go on one node, if it still holds our token; with `announce`,
    /// wakes the key's first waiter (see [`wait`](crate::wait)).
    fn release(&self, id: &LockId, announce: bool) -> Command;
    /// Prolongs the key to `plan.ttl` on one node, if it still holds our
    /// token. Never creates a key: an extension cannot resurrect a lock.
    fn extend(&self, id: &LockId, plan: &Plan) -> Command;
    /// Reads an error one node answered to any of the kind's commands. A
    /// script refuses with a code of its kind's own (`redis.error_reply`),
    /// which `net`, knowing no kind, leaves as [`NodeFailure::Server`]; the
    /// kind makes its failure of it here (see [`own_error`]). Any other
    /// failure stays as it is, which is all most kinds do.
    fn read_error(&self, failure: NodeFailure) -> NodeFailure {
        failure
    }
    /// Reads one node's reply to [`release`](Self::release) or
    /// [`extend`](Self::extend) (and to [`Agreed::confirm`]).
    fn read_outcome(&self, reply: Value) -> Answer {
        script_outcome(&reply)
    }
    /// Once a majority agreed to an acquisition: the number the lock
    /// carries, and a second round to run on every node before it is
    /// handed out, if the kind needs one (the fenced kind, when too few
    /// nodes already hold its token). Most kinds need neither.
    fn agreed(&self, _id: &LockId, _tally: &Tally) -> Agreed {
        Agreed::default()
    }
    /// After an attempt that failed (and was rolled back): what the kind
    /// learns from its votes for the next one (the semaphore: which slot to
    /// hint). Most kinds learn nothing.
    fn refused(&self, _tally: &Tally) {}
    /// Whether the rollback of a failed attempt wakes the key's first
    /// waiter where it frees the key, even when the attempt was refused by
    /// a majority. Most kinds' waiters tell a failed attempt's partial
    /// holds apart (each has its token, and a semaphore's full node names
    /// who holds which slot: a split vote, and a short random pause);
    /// a reader's share is named `readers` like every other's, so a writer
    /// refused by failing readers takes them for one holder and waits for
    /// its release: their rollbacks must announce it (`kinds::rwlock`).
    fn announce_rollback(&self) -> bool {
        false
    }
}

/// What a kind does when one of its locks ends, beyond the engine's
/// release: the engine calls [`end`](OnEnd::end) when the
/// [`Lock`](crate::Lock) is released or dropped (a read lock's entry among
/// its client's read locks: the `ReadEntry` of [`rwlock`]'s upgrade check).
pub(crate) trait OnEnd: Send + Sync + 'static {
    /// The lock has ended. Called at least once; only the first call acts
    /// (the hook's drop may call it too).
    fn end(&self);
}

/// What a kind makes of an acquisition a majority agreed to.
#[derive(Debug, Default)]
pub(crate) struct Agreed {
    /// The fencing token the lock carries.
    pub(crate) fence: Option<u64>,
    /// A command every node runs before the lock is handed out; a majority
    /// must answer yes (read by [`Kind::read_outcome`]) within the validity,
    /// or the acquisition fails and is rolled back.
    pub(crate) confirm: Option<Command>,
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

/// Reads a reply to an acquisition: `OK` or `1` (taken), nil or `0` (held
/// by another owner), or `[holder, pttl]` (held by another owner, and who:
/// the token waiters wait for, and how long its key has left).
pub(crate) fn acquire_outcome(reply: &Value) -> Answer {
    match reply {
        Value::Okay | Value::SimpleString(_) | Value::Int(1) => Ok(()).into(),
        Value::Nil | Value::Int(0) => Err(NodeFailure::Contended).into(),
        Value::Array(seen) => match seen.as_slice() {
            [token, Value::Int(pttl)] => {
                let holder = match token {
                    Value::BulkString(b) => Some(Holder {
                        token: String::from_utf8_lossy(b).into(),
                        // -1: no expiry; -2: gone since it was read.
                        ttl: (*pttl != -1).then(|| Duration::from_millis((*pttl).max(0) as u64)),
                    }),
                    _ => None,
                };
                Answer {
                    holder,
                    ..Err(NodeFailure::Contended).into()
                }
            }
            _ => Err(unexpected(reply)).into(),
        },
        _ => Err(unexpected(reply)).into(),
    }
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
        Value::Int(code::HELD) => Err(NodeFailure::Contended),
        other => Err(unexpected(other)),
    };
    vote.into()
}

/// The detail of `failure` if it is a node's error answer with the code
/// `own` (a kind's, from its script's `redis.error_reply('<own> <detail>')`):
/// what [`Kind::read_error`] reads. `net` leaves such an error a
/// [`NodeFailure::Server`] whose message is redis-rs's text of an error of
/// a code it does not know: `"<own>": <detail>`.
pub(crate) fn own_error<'a>(failure: &'a NodeFailure, own: &str) -> Option<&'a str> {
    let NodeFailure::Server { code, message } = failure else {
        return None;
    };
    if code != own {
        return None;
    }
    let quoted = format!("{own:?}");
    let rest = message
        .strip_prefix(quoted.as_str())
        .or_else(|| message.strip_prefix(own))?;
    Some(
        rest.strip_prefix(": ")
            .or_else(|| rest.strip_prefix(' '))
            .unwrap_or(rest),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A node's error answer as `net` leaves it.
    fn answered(text: &[u8]) -> NodeFailure {
        use crate::net::classify::{classify, error};
        classify(&error(std::str::from_utf8(text).unwrap()))
    }

    #[test]
    fn a_kind_reads_its_own_error_codes_and_no_other() {
        // A counter's key that names a code of Redis's stays the kind's.
        let bad = answered(b"-BADFENCE lock:BOOM:fence\r\n");
        assert!(matches!(bad, NodeFailure::Server { .. }), "{bad:?}");
        assert_eq!(
            fenced::read_fence_error(bad.clone()),
            NodeFailure::BadFenceCounter {
                key: "lock:BOOM:fence".into()
            }
        );
        let permits = answered(b"-PERMITS 3\r\n");
        assert_eq!(
            semaphore::kind(2).read_error(permits.clone()),
            NodeFailure::PermitsMismatch { permits: 3 }
        );
        // Another kind's code is no failure of this one's.
        assert_eq!(mutex::kind().read_error(bad.clone()), bad);
        assert_eq!(fenced::read_fence_error(permits.clone()), permits);
        // Redis's own codes, in a script error's text, are still told.
        let wrapped = answered(b"-ERR Error running script: WRONGTYPE Operation\r\n");
        assert!(matches!(wrapped, NodeFailure::WrongType(_)), "{wrapped:?}");
    }
}
