//! The mutex: one holder at a time.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | acquire | `SET key token NX PX ttl` (a waiter adds `GET key`, `PTTL key`) | 1 |
//! | release | [`release.lua`](RELEASE): compare-and-delete, announce | 1 |
//! | extend | [`extend.lua`](EXTEND): compare-and-pexpire, never shortening | 1 |
//!
//! **Guarantee.** While a majority of nodes run and keep their keys and
//! clocks drift within the allowance, at most one holder at a time believes
//! it holds the resource within the validity its lock reports.
//!
//! **Why.** A holder believes it holds only when a majority `Q` of the `N`
//! nodes said yes, and only until `start + ttl − drift`, before any of
//! those keys can expire. `SET NX` grants a key to one token at a time, and
//! the scripts touch a key only when it holds the caller's token, so a
//! node's key belongs to one holder until it expires or that holder lets
//! go. Two believing holders would need two majorities of such keys at one
//! moment; any two majorities of `N` share a node, which cannot hold both.
//! An extension only prolongs keys that still hold our token on a majority
//! and never recreates a lost one, so it cannot stretch a belief that the
//! nodes no longer back. Nor does it ever shorten a key: two extensions of
//! one lock can reach a node out of order (one waited for a connection that
//! the other overtook, or sat on a connection that was replaced), and a
//! late shorter one would otherwise cut a key below the deadline a newer
//! extension set. So after any extension that reached a majority, each of
//! those keys lives at least as long as the deadline it produced. Each attempt draws a fresh token, so the late
//! rollback of one attempt never deletes the key of the next.
//!
//! Tested by `tests/lock.rs` (mutual exclusion, every subset of failed
//! nodes in `tests/faults.rs`) and by the chaos suite's checker
//! (`tests/chaos`), whose negative controls show that it catches two
//! holders.

use std::sync::{Arc, LazyLock};

use redis::Value;

use crate::error::NodeFailure;
use crate::kinds::{Kind, unexpected};
use crate::proto::quorum::Plan;
use crate::proto::{Answer, Call, Command, Effect, Holder, LockId, Script};

/// Compare-and-delete, announcing the release to waiters.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("release.lua")));

/// Compare-and-pexpire, never shortening.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("extend.lua")));

/// The mutex kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mutex;

/// The mutex, shared by every lock of the kind.
pub(crate) fn kind() -> Arc<dyn Kind> {
    static KIND: LazyLock<Arc<dyn Kind>> = LazyLock::new(|| Arc::new(Mutex));
    KIND.clone()
}

impl Kind for Mutex {
    fn acquire(&self, id: &LockId, plan: &Plan, observe: bool) -> Command {
        let mut set = redis::cmd("SET");
        set.arg(&*id.key)
            .arg(id.token())
            .arg("NX")
            .arg("PX")
            .arg(plan.ttl_ms);
        let call = if observe {
            // In the same round trip: who holds the key, and for how long.
            let mut pipe = redis::pipe();
            pipe.add_command(set)
                .cmd("GET")
                .arg(&*id.key)
                .cmd("PTTL")
                .arg(&*id.key);
            Call::Pipeline(pipe)
        } else {
            Call::Command(set)
        };
        Command {
            call,
            effect: Effect::Grant { life: plan.life() },
        }
    }

    fn read_acquire(&self, id: &LockId, reply: Value) -> Answer {
        let replies = match &reply {
            // The plain `SET`.
            Value::Okay | Value::SimpleString(_) => return Ok(()).into(),
            Value::Nil => return Err(NodeFailure::Held).into(),
            // `SET`, `GET`, `PTTL`.
            Value::Array(replies) => replies,
            _ => return Err(unexpected(&reply)).into(),
        };
        match replies.as_slice() {
            [Value::Okay | Value::SimpleString(_), _, _] => Ok(()).into(),
            [Value::Nil, token, pttl] => {
                let token = match token {
                    Value::BulkString(b) => Some(String::from_utf8_lossy(b)),
                    _ => None,
                };
                if token.as_deref() == Some(id.token()) {
                    // Our own SET, landed on a connection that broke before
                    // it answered and was sent again: a yes.
                    return Ok(()).into();
                }
                let holder = token.map(|token| Holder {
                    token: token.into(),
                    // -1: no expiry; -2: gone since the GET.
                    ttl: match pttl {
                        Value::Int(-1) => None,
                        Value::Int(ms) => {
                            Some(std::time::Duration::from_millis((*ms).max(0) as u64))
                        }
                        _ => None,
                    },
                });
                Answer {
                    holder,
                    ..Err(NodeFailure::Held).into()
                }
            }
            _ => Err(unexpected(&reply)).into(),
        }
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Command {
            call: Call::Script {
                script: &RELEASE,
                keys: vec![id.key.clone()],
                args: vec![id.token().into(), if announce { "1" } else { "0" }.into()],
            },
            effect: Effect::Remove,
        }
    }

    fn extend(&self, id: &LockId, plan: &Plan) -> Command {
        Command {
            call: Call::Script {
                script: &EXTEND,
                keys: vec![id.key.clone()],
                args: vec![id.token().into(), plan.ttl_ms.to_string().into_bytes()],
            },
            effect: Effect::Refresh { life: plan.life() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn plan() -> Plan {
        Plan::new(Duration::from_secs(1), 0.01).unwrap()
    }

    #[test]
    fn reads_acquire_replies() {
        let id = LockId::new("k".into());
        let read = |r: Vec<Value>| Mutex.read_acquire(&id, Value::Array(r));
        assert!(Mutex.read_acquire(&id, Value::Okay).vote.is_ok());
        assert_eq!(
            Mutex.read_acquire(&id, Value::Nil).vote,
            Err(NodeFailure::Held)
        );
        assert!(
            read(vec![Value::Okay, Value::Nil, Value::Int(1000)])
                .vote
                .is_ok()
        );
        let seen = read(vec![
            Value::Nil,
            Value::BulkString(b"other".to_vec()),
            Value::Int(700),
        ]);
        assert_eq!(seen.vote, Err(NodeFailure::Held));
        assert_eq!(
            seen.holder,
            Some(Holder {
                token: "other".into(),
                ttl: Some(Duration::from_millis(700))
            })
        );
        let forever = read(vec![
            Value::Nil,
            Value::BulkString(b"o".to_vec()),
            Value::Int(-1),
        ]);
        assert_eq!(forever.holder.unwrap().ttl, None);
        // Our own token: a SET that landed before a reconnect.
        let own = Value::BulkString(id.token().as_bytes().to_vec());
        assert!(read(vec![Value::Nil, own, Value::Int(900)]).vote.is_ok());
        // Garbage is a typed failure, not a panic or a yes.
        for bad in [
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(3)]),
            Value::Array(vec![Value::Okay]),
        ] {
            let answer = Mutex.read_acquire(&id, bad);
            assert!(
                matches!(answer.vote, Err(NodeFailure::Server { .. })),
                "{answer:?}"
            );
        }
    }

    #[test]
    fn commands_say_what_they_do_to_keys() {
        let id = LockId::new("k".into());
        let p = plan();
        assert_eq!(
            Mutex.acquire(&id, &p, false).effect,
            Effect::Grant { life: p.life() }
        );
        assert_eq!(
            Mutex.extend(&id, &p).effect,
            Effect::Refresh { life: p.life() }
        );
        assert_eq!(Mutex.release(&id, true).effect, Effect::Remove);
        assert_ne!(RELEASE.sha1, EXTEND.sha1);
    }

    #[test]
    fn reads_script_codes() {
        let read = |c| Mutex.read_outcome(Value::Int(c));
        assert!(read(1).vote.is_ok() && !read(1).unannounced);
        assert!(read(2).vote.is_ok() && read(2).unannounced);
        assert_eq!(read(0).vote, Err(NodeFailure::Missing));
        assert_eq!(read(-1).vote, Err(NodeFailure::Held));
        assert!(matches!(read(7).vote, Err(NodeFailure::Server { .. })));
    }
}
