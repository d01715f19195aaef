//! The mutex: one holder at a time, on one resource or on a set of them.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | acquire, one resource | `SET key token NX PX ttl` | 1 |
//! | acquire, a set (`lock_all`), or a waiter's attempt | [`acquire.lua`](ACQUIRE): every key or none | 1 |
//! | release | [`release.lua`](RELEASE): compare-and-delete each key, announce; one key without waiters: `release_fast.lua` | 1 |
//! | extend | [`extend.lua`](EXTEND): compare-and-pexpire, never shortening; one key: `extend_fast.lua` | 1 |
//!
//! **Cost.** The release and the extension are what a held lock costs its
//! nodes, and the common case is one key, ours, nobody waiting. Their
//! scripts begin with a fast path for it (`script!(fast …)`, see
//! [`keyspace`](super::keyspace)): the release `GET`s the key, and where it
//! holds our token and neither `<key>:waiters` nor `<key>:intent` exists
//! (one `EXISTS`), `DEL`s it and answers 1; the extension `GET`s it and,
//! where it is ours, does what `prolong` does (`PTTL`, `PEXPIRE` only if
//! that is longer). Another token (-1) and no key (0) are answered there
//! too. Anything else — a set's keys, waiters or an intent to wake, a key
//! that is no string — runs the whole script, unchanged, with the prelude's
//! functions made (`tests/scripts.rs` checks that both answer every case
//! alike). Measured with `scripts/lua-cost.sh` (Redis 7.0.15, `INFO
//! commandstats` µs per call, median of 5-7 rounds of 100 000 on a loaded
//! 2-core machine, three runs): the release 6.4-8.4 µs before, 2.3-3.0
//! with the fast path, rslock's compare-and-delete 2.1-2.5; a lock and its
//! release (`SET` + release) 1.09-1.18 times rslock's (2.2-3.0 times
//! before); the extension 3.8-4.5 before, 2.5-3.0 now, rslock's 2.0-2.7
//! (1.01-1.25 times). What is left over rslock's is the release's `EXISTS`
//! (the waiters' queue and a writer's intent must be looked at) and the
//! `pcall` that lets a hash go to the whole script without an error.
//!
//! The key is in the `exclusive` layout of the key space's owner
//! ([`keyspace`](super::keyspace)): a string holding the holder's token, as
//! every Redlock client's `SET NX PX` makes it. The fenced kind keeps its
//! key so too.
//!
//! **Guarantee.** While a majority of nodes run and keep their keys and
//! clocks drift within the allowance, at most one holder at a time believes
//! it holds a resource within the validity its lock reports — whether it
//! took that resource alone or in a set.
//!
//! **Why.** A holder believes it holds only when a majority `Q` of the `N`
//! nodes said yes, and only until `start + ttl − drift`, before any of
//! those keys can expire. On one node a key belongs to one token at a time:
//! `SET NX` and the acquisition script create a key only where it is
//! absent, and the scripts touch a key only when it holds the caller's token
//! (a key of any other layout — a reentrant lock's hash — is another
//! owner's: see [`keyspace`](super::keyspace)).
//! So a node's key belongs to one holder until it expires or that holder
//! lets go. Two believing holders of one resource would need two majorities
//! of such keys at one moment; any two majorities of `N` share a node, which
//! cannot hold both. A set changes nothing here: its holder holds each of
//! its keys on the majority that said yes, exactly as a one-resource holder
//! would, so it excludes and is excluded per resource.
//!
//! An extension only prolongs keys that still hold our token on a majority
//! and never recreates a lost one, so it cannot stretch a belief that the
//! nodes no longer back. Nor does it ever shorten a key: two extensions of
//! one lock can reach a node out of order (one waited for a connection that
//! the other overtook, or sat on a connection that was replaced), and a late
//! shorter one would otherwise cut a key below the deadline a newer
//! extension set. So after any extension that reached a majority, each of
//! those keys lives at least as long as the deadline it produced. Each
//! attempt draws a fresh token, so the late rollback of one attempt never
//! deletes the key of the next.
//!
//! **Sets cannot deadlock.** On each node the script takes all the keys or
//! none, atomically, so no node ever holds part of a set; an attempt that
//! wins fewer than a majority of nodes rolls back on every node before it
//! waits. Nobody therefore holds anything while waiting for something else,
//! and there is no cycle to wait in. Two sets that overlap compete like two
//! holders of one resource: a split vote, settled by random back-off. The
//! keys are sorted and de-duplicated once per call, so every node sees the
//! same set in the same order.
//!
//! Tested by `tests/lock.rs` (mutual exclusion, every subset of failed
//! nodes in `tests/faults.rs`), `tests/multi.rs` (sets: all or none, rolled
//! back on every node, overlapping sets never both held, progress under
//! contention), and the chaos suite's checker (`tests/chaos`), whose
//! negative controls show that it catches two holders.

use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::kinds::Kind;
use crate::kinds::keyspace::script;
use crate::proto::quorum::Plan;
use crate::proto::{Call, Command, Effect, LockId, Script};

/// Every key or none, saying who holds a key it could not take.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("acquire.lua")));

/// Compare-and-delete, announcing the release to waiters.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(fast "release_fast.lua"; "release.lua")));

/// Compare-and-pexpire, never shortening.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(fast "extend_fast.lua"; keys "extend.lua")));

/// The mutex kind.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Mutex;

/// Shows the holder of an exclusive key, its token (`{:#}`: the first 8
/// characters), for [`Holding`](crate::Holding)'s `Display`.
pub(crate) fn show(f: &mut fmt::Formatter<'_>, token: &str) -> fmt::Result {
    if f.alternate() {
        write!(f, "token {}…", token.chars().take(8).collect::<String>())
    } else {
        write!(f, "token {token}")
    }
}

/// The mutex, shared by every lock of the kind.
pub(crate) fn kind() -> Arc<dyn Kind> {
    static KIND: LazyLock<Arc<dyn Kind>> = LazyLock::new(|| Arc::new(Mutex));
    KIND.clone()
}

fn flag(on: bool) -> Vec<u8> {
    if on { b"1" } else { b"0" }.to_vec()
}

impl Kind for Mutex {
    fn name(&self, id: &LockId) -> &'static str {
        if id.keys.len() > 1 { "set" } else { "mutex" }
    }

    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command {
        let call = match &id.keys[..] {
            // The hot path: no script.
            [key] if waiter.is_none() => {
                let mut set = redis::cmd("SET");
                set.arg(&**key)
                    .arg(id.token())
                    .arg("NX")
                    .arg("PX")
                    .arg(plan.ttl_ms);
                Call::Command(set)
            }
            _ => Call::Script {
                script: &ACQUIRE,
                keys: id.keys.clone(),
                args: vec![
                    id.token().into(),
                    plan.ttl_ms.to_string().into_bytes(),
                    waiter.unwrap_or_default().into(),
                ],
            },
        };
        Command {
            call,
            effect: Effect::Grant { life: plan.life() },
        }
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Command {
            call: Call::Script {
                script: &RELEASE,
                keys: id.keys.clone(),
                args: vec![id.token().into(), flag(announce)],
            },
            effect: Effect::Remove,
        }
    }

    fn extend(&self, id: &LockId, plan: &Plan) -> Command {
        Command {
            call: Call::Script {
                script: &EXTEND,
                keys: id.keys.clone(),
                args: vec![id.token().into(), plan.ttl_ms.to_string().into_bytes()],
            },
            effect: Effect::Refresh { life: plan.life() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeFailure;
    use crate::proto::{Holder, keys};
    use redis::Value;
    use std::time::Duration;

    fn plan() -> Plan {
        Plan::new(Duration::from_secs(1), 0.01).unwrap()
    }

    #[test]
    fn reads_acquire_replies() {
        let read = |r: Value| Mutex.read_acquire(r);
        assert!(read(Value::Okay).vote.is_ok());
        assert!(read(Value::Int(1)).vote.is_ok());
        assert_eq!(read(Value::Nil).vote, Err(NodeFailure::Contended));
        assert_eq!(read(Value::Int(0)).vote, Err(NodeFailure::Contended));
        let seen = read(Value::Array(vec![
            Value::BulkString(b"other".to_vec()),
            Value::Int(700),
        ]));
        assert_eq!(seen.vote, Err(NodeFailure::Contended));
        assert_eq!(
            seen.holder,
            Some(Holder {
                token: "other".into(),
                ttl: Some(Duration::from_millis(700))
            })
        );
        let forever = read(Value::Array(vec![
            Value::BulkString(b"o".to_vec()),
            Value::Int(-1),
        ]));
        assert_eq!(forever.holder.unwrap().ttl, None);
        // Held, by an owner the script could not name (Lua false is nil).
        let unknown = read(Value::Array(vec![Value::Nil, Value::Int(5)]));
        assert_eq!(
            (unknown.vote, unknown.holder),
            (Err(NodeFailure::Contended), None)
        );
        // Garbage is a typed failure, not a panic or a yes.
        for bad in [
            Value::Int(3),
            Value::Array(vec![]),
            Value::Array(vec![Value::Int(3)]),
            Value::Array(vec![Value::Okay, Value::Okay]),
        ] {
            let answer = read(bad);
            assert!(
                matches!(answer.vote, Err(NodeFailure::Server { .. })),
                "{answer:?}"
            );
        }
    }

    #[test]
    fn one_key_takes_it_with_set_and_a_set_or_a_waiter_with_the_script() {
        let p = plan();
        let one = LockId::new(keys(&["k"]));
        assert!(matches!(
            Mutex.acquire(&one, &p, None).call,
            Call::Command(_)
        ));
        assert!(matches!(
            Mutex.acquire(&one, &p, Some("c:1")).call,
            Call::Script { script, .. } if std::ptr::eq(script, &*ACQUIRE)
        ));
        let set = LockId::new(keys(&["a", "b"]));
        let Call::Script { keys: sent, .. } = Mutex.acquire(&set, &p, None).call else {
            panic!("a set is taken by the script")
        };
        assert_eq!(&sent[..], &set.keys[..]);
    }

    #[test]
    fn commands_say_what_they_do_to_keys() {
        let id = LockId::new(keys(&["k"]));
        let p = plan();
        assert_eq!(
            Mutex.acquire(&id, &p, None).effect,
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
    fn the_release_and_the_extension_are_their_fast_paths_then_the_whole_scripts() {
        let slow = |fast: &str, whole: &str| {
            format!("{fast}local function slow()\n{whole}\nend\nreturn slow()\n")
        };
        assert_eq!(
            RELEASE.source,
            slow(include_str!("release_fast.lua"), script!("release.lua"))
        );
        assert_eq!(
            EXTEND.source,
            slow(include_str!("extend_fast.lua"), script!(keys "extend.lua"))
        );
    }

    #[test]
    fn reads_script_codes() {
        let read = |c| Mutex.read_outcome(Value::Int(c));
        assert!(read(1).vote.is_ok() && !read(1).unannounced);
        assert!(read(2).vote.is_ok() && read(2).unannounced);
        assert_eq!(read(0).vote, Err(NodeFailure::Missing));
        assert_eq!(read(-1).vote, Err(NodeFailure::Contended));
        assert!(matches!(read(7).vote, Err(NodeFailure::Server { .. })));
    }
}
