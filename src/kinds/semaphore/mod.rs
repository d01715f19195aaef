//! The semaphore: at most `k` holders at a time of one resource's `k`
//! permits.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | acquire | [`acquire.lua`](ACQUIRE): take the hinted slot if it is free there, else the lowest free one; say which | 1 (more only when nodes granted different slots) |
//! | release | [`release.lua`](RELEASE): let every slot of our token go, announce | 1 |
//! | extend | [`extend.lua`](EXTEND): prolong our slot (never shorten), drop our other slots | 1 |
//!
//! On a node the key is a hash (the `semaphore` layout of the key space's
//! owner, [`keyspace`](super::keyspace)): `k`, the number of permits, and
//! for each held slot `i` of `0..k` its holder's token (`t<i>`) and expiry
//! on the node's clock (`x<i>`). Each slot ends at its own expiry, so a
//! crashed holder's permit comes back after its TTL whatever the others do;
//! the key lives as long as its latest slot.
//!
//! **Guarantee.** While a majority of nodes run and keep their keys and
//! clocks drift within the allowance, at most `k` holders at a time believe
//! they hold a permit within the validity their lock reports.
//!
//! **Why: a permit is a slot, and each slot is a mutex.** A holder holds a
//! permit only when a majority `Q` of the `N` nodes granted it **the same
//! slot** `i`, and only until `start + ttl − drift`, before any of those
//! grants can expire. On one node a slot holds one token at a time (the
//! script gives a slot only where it is free or already ours), so two
//! holders of slot `i` would need two majorities of grants of `i` at one
//! moment, and two majorities share a node: at most one holder per slot,
//! hence at most `k`. Grants of different slots never add up (the quorum
//! counts yes votes per grant: `proto::quorum`'s `Tally`), and nothing
//! here depends on the nodes agreeing on anything but each slot's holder.
//!
//! **The tempting design that is wrong.** "Each node admits at most `k`
//! holders; a holder needs a majority of admissions" over-admits: each
//! holder occupies some majority, and with `N = 5`, `k = 2` holders on
//! nodes {1,2,3}, {3,4,5} and {1,2,4} put at most two on any node, so all
//! three hold. Up to `⌊N·k/Q⌋` can hold at once. `tests/semaphore.rs`
//! steers three holders onto exactly those majorities (each client reaches
//! the nodes through proxies, and the others are cut) and shows that two
//! hold; its negative control runs the same steering against a per-node
//! admission script and shows that three do.
//!
//! **Choosing the slot.** The nodes choose, so that one round usually
//! suffices: each takes the slot the caller hints if it is free there, and
//! otherwise its lowest free one. Nodes that agree on which slots are held
//! grant the same slot. Where they do not (a grant lost on a node, two
//! callers racing), the yes votes split among slots; unless one slot has a
//! majority the attempt is rolled back, and the next one hints the slot
//! free on the most of the nodes that granted one (each grant says which
//! slots its node saw free): a retry of contention, not a poll. When one
//! slot has a majority but a straggler node granted another, the holder's
//! token keeps that other slot there until its first extension there
//! (which lets it go) or its release; that only delays others, never
//! admits one more. Such a holder's permit rests on the nodes that granted
//! its slot only, so it survives the loss of fewer nodes than a lock
//! granted everywhere. The first hint is random, so that callers starting
//! together spread over the free slots.
//!
//! **`k` belongs to the semaphore.** The first holder on a node sets it;
//! a caller that asks for another number of permits gets
//! [`NodeFailure::PermitsMismatch`]
//! from that node, never a silent over-admission. Once every permit has
//! been let go (or has expired) the key is gone, and the next holder may
//! set a new `k`.
//!
//! **Waiting.** A full node tells a waiter the name of the semaphore's
//! holders, `permits:<k>:<digest>`, the digest (SHA-1) of which token holds
//! which slot there, with its soonest slot's PTTL (the key space's
//! `semaphore_name`; a waiter of another kind refused by the semaphore is
//! told the same name). Nodes that agree on who holds each slot name the
//! key alike, however their expiries are ordered: a waiter sees one holder
//! on a majority and sleeps until the soonest expiry at most; the release
//! of *any* permit wakes the first waiter of the key's queue (see
//! [`wait`](crate::wait)), which tries again. The key stays while any
//! slot is held, so a wake-up that reached a wait that had ended, or a
//! waiter that leaves, wakes the next one wherever a slot is free (let go
//! or expired), not only where the key is gone: the layout's `room`
//! (`layout.lua`, asked through `keyspace.lua`) counts the slots.
//!
//! **Contenders are not a holder.** Contenders that come at once each take
//! a slot on the nodes they reach first (across zones: its own zone's), and
//! find the others full, the other contenders' grants there. Such nodes
//! hold different tokens in a slot, so they name the key differently, and
//! each contender sees a split vote: it backs off at random
//! (`wait::pause`) and one of them wins the next round, as a
//! mutex's contenders do. Named as one (`permits:<k>` on every full node),
//! they looked like one holder on a majority to each of them: each slept
//! the capped pause, all woke together, split again, and all gave up at
//! their deadline (`tests/semaphore.rs`, three contenders each 40 ms from
//! two of three nodes; a plain mutex got in in under a second).
//!
//! **One name on a majority is a real set of holders, or an announced
//! rollback.** A waiter sees a holder only where a majority of the nodes
//! that answered name the key alike, that is give each slot `i` the same
//! token `t_i` (up to a SHA-1 collision). Then `t_i`'s attempt was granted
//! slot `i` on a majority: it holds, or holds no longer (its release wakes
//! a waiter), or its own count missed some of those grants (answers lost
//! or not waited for, or the majority came too late for the validity), and
//! then [`Tally::might_hold_majority`] holds for it and its rollback is
//! announced. So a refused attempt's partial grants never keep a waiter
//! asleep on a free permit, and the semaphore needs no announced rollbacks
//! of its own ([`Kind::announce_rollback`]; announcing every failed
//! attempt's rollback would wake the contenders queued behind it out of
//! their random back-off, all at once). Where the nodes' slot maps differ
//! for real holders (a straggler's grant of another slot, left until the
//! holder's next extension there), a waiter sees contention too: its
//! pauses double up to the retry pause and count as retries from then on,
//! so it polls, no more. None of this touches the count of votes: a name
//! is read from refusals only, and chooses a pause, never a vote.
//!
//! Holders and waiters of other kinds on the same name are excluded as for
//! every kind: a semaphore's key is another holder's to a mutex, and a
//! mutex's key another holder's to the semaphore.

use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, LazyLock};

use redis::Value;

use crate::error::NodeFailure;
use crate::kinds::keyspace::script;
use crate::kinds::{Agreed, Kind, acquire_outcome, own_error, unexpected};
use crate::proto::quorum::{Plan, Tally};
use crate::proto::{Answer, Call, Command, Effect, LockId, Script};

/// The most permits a semaphore may have.
pub(crate) const MAX_PERMITS: u32 = 1024;

/// Take a free slot, the hinted one if it is free.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("acquire.lua")));

/// Let every slot of our token go, announced.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("release.lua")));

/// Prolong our slot, never shortening; drop our other slots.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "extend.lua")));

/// The semaphore kind, for one call: the slot to hint next, and, once
/// held, the slot held.
#[derive(Debug)]
pub(crate) struct Semaphore {
    permits: u32,
    /// The slot the next attempt hints.
    hint: AtomicU32,
    /// The slot held (a majority granted it), once held.
    slot: AtomicU32,
    /// Per slot, how many nodes that granted the last attempt a slot saw
    /// it free.
    scores: std::sync::Mutex<Vec<u16>>,
}

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Shows the permits held on one node, each slot with its holder's token
/// (`{:#}`: how many), for [`Holding`](crate::Holding)'s `Display`.
pub(crate) fn show(
    f: &mut fmt::Formatter<'_>,
    permits: u32,
    holders: &[(u32, String)],
) -> fmt::Result {
    if f.alternate() {
        return write!(f, "{} of {permits} permits", holders.len());
    }
    let held: Vec<String> = holders
        .iter()
        .map(|(slot, token)| format!("{slot}: {token}"))
        .collect();
    write!(
        f,
        "semaphore of {permits} permits ({} held: {})",
        holders.len(),
        held.join(", ")
    )
}

/// A semaphore of `permits` permits, for one call.
pub(crate) fn kind(permits: u32) -> Arc<dyn Kind> {
    Arc::new(Semaphore {
        permits,
        hint: AtomicU32::new(rand::random_range(0..permits)),
        slot: AtomicU32::new(0),
        scores: std::sync::Mutex::new(vec![0; permits as usize]),
    })
}

impl Semaphore {
    fn script(&self, script: &'static Script, id: &LockId, args: Vec<Vec<u8>>) -> Call {
        Call::Script {
            script,
            keys: id.keys.clone(),
            args,
        }
    }
}

impl Kind for Semaphore {
    fn name(&self, _: &LockId) -> &'static str {
        "semaphore"
    }

    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command {
        let hint = self.hint.load(Ordering::Relaxed);
        // A new attempt: its nodes' views of the free slots, from scratch.
        lock(&self.scores).iter_mut().for_each(|s| *s = 0);
        Command {
            call: self.script(
                &ACQUIRE,
                id,
                vec![
                    id.token().into(),
                    plan.ttl_ms.to_string().into_bytes(),
                    self.permits.to_string().into_bytes(),
                    hint.to_string().into_bytes(),
                    waiter.unwrap_or_default().into(),
                ],
            ),
            effect: Effect::Grant { life: plan.life() },
        }
    }

    fn read_acquire(&self, reply: Value) -> Answer {
        if let Value::Array(items) = &reply
            && let [
                Value::BulkString(tag),
                Value::Int(slot),
                Value::BulkString(free),
            ] = items.as_slice()
            && tag.as_slice() == b"slot"
        {
            return match u32::try_from(*slot) {
                Ok(slot) if slot < self.permits && free.len() == self.permits as usize => {
                    let mut scores = lock(&self.scores);
                    for (score, &c) in scores.iter_mut().zip(free.iter()) {
                        *score += u16::from(c == b'1');
                    }
                    Answer {
                        grant: Some(slot),
                        ..Ok(()).into()
                    }
                }
                _ => Err(unexpected(&reply)).into(),
            };
        }
        match acquire_outcome(&reply) {
            // A yes must name its slot: one that did not would count with
            // the yes votes of any slot.
            answer if answer.vote.is_ok() => Err(unexpected(&reply)).into(),
            answer => answer,
        }
    }

    /// `PERMITS <n>`: the key is a semaphore of `n` permits, not ours.
    fn read_error(&self, failure: NodeFailure) -> NodeFailure {
        match own_error(&failure, "PERMITS").and_then(|d| d.trim().parse().ok()) {
            Some(permits) => NodeFailure::PermitsMismatch { permits },
            None => failure,
        }
    }

    fn refused(&self, tally: &Tally) {
        // The slot free on the most nodes that granted one (each says
        // which it saw free), one of the best at random, lest two callers
        // meet again: the next attempt goes where a majority can agree.
        let scores = lock(&self.scores);
        let best = scores.iter().copied().max().unwrap_or(0);
        let hint = if best == 0 {
            tally.leading_grant()
        } else {
            let slots: Vec<u32> = (0..self.permits)
                .filter(|&i| scores[i as usize] == best)
                .collect();
            Some(slots[rand::random_range(0..slots.len())])
        };
        if let Some(hint) = hint {
            self.hint.store(hint, Ordering::Relaxed);
        }
    }

    fn agreed(&self, _: &LockId, tally: &Tally) -> Agreed {
        if let Some(slot) = tally.leading_grant() {
            self.slot.store(slot, Ordering::Relaxed);
        }
        Agreed::default()
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Command {
            call: self.script(
                &RELEASE,
                id,
                vec![
                    id.token().into(),
                    if announce { b"1" } else { b"0" }.to_vec(),
                ],
            ),
            effect: Effect::Remove,
        }
    }

    fn extend(&self, id: &LockId, plan: &Plan) -> Command {
        Command {
            call: self.script(
                &EXTEND,
                id,
                vec![
                    id.token().into(),
                    plan.ttl_ms.to_string().into_bytes(),
                    self.slot.load(Ordering::Relaxed).to_string().into_bytes(),
                ],
            ),
            effect: Effect::Refresh { life: plan.life() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::quorum::Tally;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_grant_names_its_slot_and_votes_count_per_slot() {
        let kind = Semaphore {
            permits: 4,
            hint: AtomicU32::new(0),
            slot: AtomicU32::new(0),
            scores: std::sync::Mutex::new(vec![0; 4]),
        };
        let granted = |i: i64, free: &str| {
            kind.read_acquire(Value::Array(vec![bulk("slot"), Value::Int(i), bulk(free)]))
        };
        let slot = |i: i64| granted(i, "1111");
        assert_eq!(slot(2).grant, Some(2));
        assert!(slot(2).vote.is_ok());
        // A slot beyond k, or a negative one, or a map of another length,
        // is no reply of our script.
        assert!(slot(4).vote.is_err());
        assert!(slot(-1).vote.is_err());
        assert!(granted(1, "111").vote.is_err());
        // A yes that names no slot would count with any slot's.
        assert!(kind.read_acquire(Value::Int(1)).vote.is_err());
        assert!(kind.read_acquire(Value::Okay).vote.is_err());
        // Every slot held: who, for how long.
        let held = kind.read_acquire(Value::Array(vec![bulk("t1"), Value::Int(900)]));
        assert!(held.vote.is_err());
        assert_eq!(held.holder.unwrap().token.as_ref(), "t1");
        // Five nodes: slot 1 on two, slot 3 on two, slot 0 on one: no
        // majority, though every node said yes. Slot 2 is the one the most
        // of them saw free: the next hint.
        let id = LockId::new(crate::proto::keys(&["r"]));
        let plan = Plan::new(std::time::Duration::from_secs(10), 0.01).unwrap();
        let _ = kind.acquire(&id, &plan, None);
        let mut tally = Tally::new(5);
        let free = ["1110", "0111", "1110", "0111", "1010"];
        for (node, (s, free)) in [1, 3, 1, 3, 0].into_iter().zip(free).enumerate() {
            tally.record(node, granted(s, free));
        }
        assert!(!tally.has_majority());
        kind.refused(&tally);
        assert_eq!(kind.hint.load(Ordering::Relaxed), 2);
        // A new attempt starts the count afresh.
        let _ = kind.acquire(&id, &plan, None);
        assert!(lock(&kind.scores).iter().all(|&s| s == 0));
        // Three of slot 3: held, and extensions name slot 3.
        let mut tally = Tally::new(5);
        for (node, s) in [3, 0, 3, 3].into_iter().enumerate() {
            tally.record(node, slot(s));
        }
        assert!(tally.has_majority());
        kind.agreed(&id, &tally);
        assert_eq!(kind.slot.load(Ordering::Relaxed), 3);
    }
}
