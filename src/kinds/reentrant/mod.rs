//! The reentrant lock: one *owner* at a time, who may take the resource
//! again while holding it.
//!
//! The owner is an id the caller chooses (a job id, a request id), so one
//! owner can span tasks and processes. Each take is a **hold** of its own:
//! its own random token, its own majority, validity, watchdog and release.
//! The resource is free for another owner, or for a plain lock, only when
//! every hold has been released or the key's TTL has passed.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | take | [`acquire.lua`](ACQUIRE): create the hash, or add a hold to our owner's; refresh the TTL (never shorten) | 1 |
//! | release | [`release.lua`](RELEASE): remove this hold; delete and announce the key when no hold is left | 1 |
//! | extend | [`extend.lua`](EXTEND): while this hold is there, prolong the key (never shorten) | 1 |
//!
//! On a node the key is a hash: `o` (the owner id), `i` (the smallest hold
//! token in it: what another owner's waiters see and wait for, as
//! `holds:<token>`; nodes with
//! the same holds name the key alike, and once a token's release has been
//! announced no live key is named by it), and one field per hold, named by
//! the hold's token: the `reentrant` layout of the key space's owner
//! ([`keyspace`](super::keyspace)), which reads it for every kind and
//! removes a hold from it (this kind's release, and an operator's clear by
//! token, both let a hold go that way).
//!
//! **Guarantee.** While a majority of nodes run and keep their keys and
//! clocks drift within the allowance: for as long as any hold of owner `A`
//! believes it is held (within the validity it reports), no other owner and
//! no plain lock holds the resource.
//!
//! **Why not a count.** Single-node reentrant locks keep one counter per
//! owner (`HINCRBY`) and delete the key when it reaches zero. Over a quorum
//! that is wrong: takes reach different majorities (a node timed out, or
//! was frozen), so the counts on the nodes diverge, and a release that
//! decrements wherever it finds the owner's key can bring a count to zero on
//! nodes that were part of *another* hold's majority. Say the outer hold got
//! nodes {0, 1, 2} and the inner one {2, 3, 4}: counts 1, 1, 2, 1, 1. The
//! inner release decrements everywhere: the key goes from 0, 1, 3 and 4,
//! and the outer hold, which still believes it holds, is backed by node 2
//! alone; another owner takes {0, 1, 3}. `tests/reentrant.rs` builds exactly
//! this and shows the other owner kept out.
//!
//! **Why holds as fields are right.** A hold `h` believes it holds only
//! after a majority `M(h)` of nodes added its field, and only until
//! `start + ttl − drift`. On a node of `M(h)`, `h`'s field goes only by
//! `h`'s own release (scripts remove only the field named by the caller's
//! token; each attempt draws a fresh one, so a rollback removes only its own
//! attempt's field) or with the whole key; the key is deleted only when no
//! hold field is left in it (not while `h`'s is there), or when its TTL runs
//! out — and every take and extension only ever lengthens the TTL, so the
//! key outlives `h`'s deadline. So while `h` believes, every node of `M(h)`
//! has a key owned by `A`. Another owner, and a plain lock, can take the
//! key on a node only where it is absent; they would need a majority
//! disjoint from `M(h)`, and no two majorities of `N` are disjoint. The
//! holds of one owner never need to agree on a count, so nodes that missed
//! some takes are harmless: a node where a hold is missing simply does not
//! back that hold.
//!
//! A take sent twice (the node resends on a new connection when the old one
//! went stale) finds its field and changes nothing. One that is still in
//! flight when its hold is released can land after the release and leave a
//! field nobody will remove: the key then lives until its TTL after the
//! owner's last take or extension (as a late `SET` of the mutex leaves a key
//! nobody holds); it delays other owners, it never lets one in early.
//!
//! The watchdog, waiting for a release, release on drop and cancel safety
//! come from the engine, per hold. An inner take refreshes the key's TTL on
//! the nodes it reaches; the outer hold's reported validity stays its own
//! (it does not borrow the inner hold's majority).
//!
//! Needs Redis 4.0 or later (`HSET` with several fields).

use std::fmt;
use std::sync::{Arc, LazyLock};

use crate::kinds::Kind;
use crate::kinds::keyspace::script;
use crate::proto::quorum::Plan;
use crate::proto::{Call, Command, Effect, LockId, Script};

/// Create the hash or add a hold to our owner's, refreshing the TTL.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("acquire.lua")));

/// Remove one hold; delete and announce the key when none is left.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("release.lua")));

/// Prolong the key while this hold is there, never shortening.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "extend.lua")));

/// The reentrant kind, for one owner.
#[derive(Debug, Clone)]
pub(crate) struct Reentrant {
    owner: Box<str>,
}

/// Shows an owner's holds on one node (`{:#}`: the owner alone), for
/// [`Holding`](crate::Holding)'s `Display`.
pub(crate) fn show(f: &mut fmt::Formatter<'_>, owner: &str, holds: &[String]) -> fmt::Result {
    if f.alternate() {
        write!(f, "owner {owner:?}")
    } else {
        write!(
            f,
            "reentrant owner {owner:?} ({} holds: {})",
            holds.len(),
            holds.join(", ")
        )
    }
}

/// The reentrant lock of `owner`.
pub(crate) fn kind(owner: &str) -> Arc<dyn Kind> {
    Arc::new(Reentrant {
        owner: owner.into(),
    })
}

impl Reentrant {
    fn call(&self, script: &'static Script, id: &LockId, last: Vec<u8>) -> Call {
        Call::Script {
            script,
            keys: id.keys.clone(),
            args: vec![self.owner.as_bytes().to_vec(), id.token().into(), last],
        }
    }
}

impl Kind for Reentrant {
    fn name(&self, _: &LockId) -> &'static str {
        "reentrant"
    }

    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command {
        let mut call = self.call(&ACQUIRE, id, plan.ttl_ms.to_string().into_bytes());
        if let Call::Script { args, .. } = &mut call {
            args.push(waiter.unwrap_or_default().into());
        }
        Command {
            call,
            effect: Effect::Grant { life: plan.life() },
        }
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Command {
            call: self.call(&RELEASE, id, if announce { b"1" } else { b"0" }.to_vec()),
            effect: Effect::Remove,
        }
    }

    fn extend(&self, id: &LockId, plan: &Plan) -> Command {
        Command {
            call: self.call(&EXTEND, id, plan.ttl_ms.to_string().into_bytes()),
            effect: Effect::Refresh { life: plan.life() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::keys;
    use std::time::Duration;

    #[test]
    fn every_command_names_the_owner_and_the_hold() {
        let id = LockId::new(keys(&["k"]));
        let plan = Plan::new(Duration::from_secs(1), 0.01).unwrap();
        let kind = Reentrant {
            owner: "job-7".into(),
        };
        for (command, script, last) in [
            (kind.acquire(&id, &plan, Some("c:1")), &*ACQUIRE, "c:1"),
            (kind.release(&id, false), &*RELEASE, "0"),
            (kind.extend(&id, &plan), &*EXTEND, "1000"),
        ] {
            let Call::Script {
                script: sent,
                keys,
                args,
            } = command.call
            else {
                panic!("the reentrant kind only runs scripts")
            };
            assert!(std::ptr::eq(sent, script));
            assert_eq!(&keys[..], &id.keys[..]);
            assert_eq!(args[0], b"job-7");
            assert_eq!(args[1], id.token().as_bytes());
            assert_eq!(args.last().unwrap(), last.as_bytes());
        }
        assert_eq!(
            kind.acquire(&id, &plan, None).effect,
            Effect::Grant { life: plan.life() }
        );
    }
}
