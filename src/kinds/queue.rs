//! The waiters' queue on each node, shared by every kind: whom a release
//! wakes.
//!
//! A release used to be announced to every waiter, and every waiter in
//! every process then tried at once: with 256 waiters, 256 rounds to every
//! node per release, all but one lost. Now waiters queue on the nodes and a
//! release wakes one of them.
//!
//! * **Queueing.** A waiter's attempt that finds the key held by another
//!   owner puts the waiter (`<since>:<client id>:<wait id>`, see
//!   [`member`]) in the key's queue, the sorted set `<key>:waiters`, unless
//!   it is in it already. Every score is 0, so the queue is in the order of
//!   the names, that is of `<since>`, when the wait began by the waiter's
//!   clock: **every node orders its queue alike**, whatever order the
//!   attempts reached it in, so every node wakes the same waiter. (Ordered
//!   by arrival, the nodes' queues differed, and a release woke up to one
//!   waiter per node: 64 waiters cost 2.5 attempts per acquisition where
//!   one would do.) The attempt that gets the lock takes it out. The queue lives while its waiters come back (a waiter
//!   sleeps no longer than the holder's PTTL before its next attempt) and
//!   expires a few seconds after they stop.
//! * **Waking.** A release (or a rollback that may have reached a majority,
//!   or any failed read's rollback: see
//!   [`Kind::announce_rollback`](crate::kinds::Kind::announce_rollback),
//!   or an operator's clear) that frees what a waiter could take (deletes
//!   the key, or lets a semaphore's slot go) takes the first waiter out of
//!   its queue and publishes `<member> <token>` on that waiter's client's
//!   channel `<key>:wake:<client id>` ([`channel`]). A waiter whose
//!   channel has no subscriber of its own (the process is gone, or its
//!   subscription is) is skipped and the next one tried, in the same
//!   script: the node asks `PUBSUB NUMSUB` before it publishes, since
//!   `PUBLISH`'s count of those who heard includes pattern subscribers (a
//!   monitoring tool's `PSUBSCRIBE *`), which wake nobody. (Where an ACL
//!   forbids `PUBSUB`, `PUBLISH`'s count decides alone.)
//! * **Leaving.** A waiter that stops waiting without the lock takes itself
//!   out of the queues ([`leave`]), and its intent with them, in the
//!   background, and wakes the next waiter where the lock has room (it
//!   may have been woken for that room itself); a node that does not
//!   answer is sent it again until the intent would have lapsed
//!   ([`LEAVE_LIFE`]). (The first send is not copied onto a retired
//!   connection as removals are: a writer's attempt still held on one,
//!   delivered after the leave, sets its intent again for up to its life.)
//! * **Passing on.** A wake-up can name a wait that has ended: one that got
//!   the lock while a node still had it queued (its attempt there came
//!   late, or found the old holder's key still there), or one whose leaving
//!   a node missed. Such a wake-up would wake nobody, and the lock could
//!   stay free with every other waiter asleep until its timer. So the
//!   client that hears it, unless the same release woke one of its live
//!   waits, asks that node to wake the next waiter if the lock has room
//!   there ([`pass_on`]).
//! * **Room.** A pass-on and a leave wake whenever the lock has room for a
//!   waiter, whatever the kind: `vacant` in `queue.lua`, on top of the
//!   layouts' own `room` in `keyspace.lua` — a free key, a semaphore with
//!   a slot free (let go or expired: its key stays while other slots are
//!   held), readers whom no writer's intent keeps others from. (Only a
//!   free key counted: behind a dropped waiter, a semaphore's free permit
//!   stayed idle while the next waiter slept out its timer, 15 s in a
//!   review's run.) A new layout says its room in `room`; no script of
//!   the queue changes.
//!
//! Each node keeps its own queue and wakes its own first waiter: the same
//! one, unless a node missed a waiter's attempt (it timed out there, or
//! the node restarted), and never more than one per node.
//!
//! **Wake-ups are hints, never needed for safety or for progress.**
//! Safety stays with the quorum: a woken waiter still needs a majority. A
//! waiter whose wake-up is lost (a message dropped with its connection, a
//! woken waiter that does not try: its process frozen) still tries when the
//! holder it saw would have expired, and every waiter's sleep is capped
//! (see `proto::quorum::pause`). A woken waiter that loses (to a caller who
//! was not waiting: there is no turning newcomers away, which over
//! independent nodes could split every vote) queues again, in its place.
//!
//! **Order.** Waiters are woken in the order their waits began, by their
//! own clocks: first come, first served, as far as the clients' clocks
//! agree and no newcomer takes the lock in between. A client whose clock
//! is behind gets ahead of the queue, no more: order is fairness, never
//! safety.
//!
//! A resource named `x:waiters` would collide with the queue of `x`, as
//! `x:fence` does with its fencing counter and `x:intent` with a writer's
//! intent (an intent is only a string in a waiter's form: a lock named
//! `x:intent` is not taken for one, but it is best avoided); pick resource
//! names without
//! those suffixes.

use std::sync::LazyLock;

use crate::kinds::keyspace::script;
use crate::proto::{Call, Command, Effect, Keys, Script};

/// Takes a waiter out of the queues of its keys, and its intent (a writer
/// waiting for readers) with it; wakes the next waiter where the lock has
/// room (see the module doc's Room).
static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("queue/leave.lua")));

/// Wakes the next waiter of a key if the lock has room: a wake-up reached a
/// client whose named wait had ended.
static PASS_ON: LazyLock<Script> = LazyLock::new(|| Script::new(script!("queue/pass_on.lua")));

/// The name a waiter queues under: when its wait began (microseconds of
/// the Unix epoch, 16 digits, so that names sort by it), its client's id
/// and its wait's number.
pub(crate) fn member(since: u64, client: &str, wait: u64) -> String {
    format!("{since:016}:{client}:{wait}")
}

/// The channel on which the waiters of `client` hear that `key` was
/// released for one of them.
pub(crate) fn channel(key: &str, client: &str) -> String {
    format!("{key}:wake:{client}")
}

/// Reads a wake-up, `<client>:<wait> <token>`: the number of the wait it
/// is for, and the token of the holder that let go. `None` for anything
/// else (not a message of ours).
pub(crate) fn read_wake(payload: &[u8]) -> Option<(u64, &[u8])> {
    let space = payload.iter().position(|&b| b == b' ')?;
    let (member, token) = (&payload[..space], &payload[space + 1..]);
    let colon = member.iter().rposition(|&b| b == b':')?;
    let wait = std::str::from_utf8(&member[colon + 1..])
        .ok()?
        .parse()
        .ok()?;
    Some((wait, token))
}

/// The longest a writer's intent lives on a node (`refuse` in `queue.lua`:
/// the readers' PTTL, ten seconds at most, plus a second): how long a
/// leaving that a node did not answer is sent again.
pub(crate) const LEAVE_LIFE: std::time::Duration = std::time::Duration::from_secs(11);

/// Takes `member` out of the queues of `keys`: it stopped waiting (and its
/// intent, if it left one).
pub(crate) fn leave(keys: &Keys, member: &str) -> Command {
    Command {
        call: Call::Script {
            script: &LEAVE,
            keys: keys.clone(),
            args: vec![member.as_bytes().to_vec()],
        },
        // A queue is no lock key: nothing to keep from a node that may
        // have forgotten keys.
        effect: Effect::Count,
    }
}

/// Wakes the next waiter of `key` on a node, if the lock has room there: the
/// wake-up of the holder `token`'s release named a wait that had ended
/// without hearing it (see the module doc).
pub(crate) fn pass_on(key: &str, token: &[u8]) -> Command {
    Command {
        call: Call::Script {
            script: &PASS_ON,
            keys: std::sync::Arc::new([Box::from(key)]),
            args: vec![token.to_vec()],
        },
        // It deletes nothing and creates no lock key.
        effect: Effect::Count,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wake_ups_are_read_back_and_garbage_is_not() {
        let m = member(1_764_000_000_000_000, "ab12", 7);
        assert_eq!(m, "1764000000000000:ab12:7");
        // Names sort by when the wait began, as the queue orders them.
        assert!(member(999, "ff", 9) < member(1_000, "00", 1));
        let payload = format!("{m} {}", "f".repeat(40));
        let (wait, token) = read_wake(payload.as_bytes()).unwrap();
        assert_eq!((wait, token), (7, "f".repeat(40).as_bytes()));
        // A reentrant key's release may name no token.
        assert_eq!(read_wake(b"ab12:9 "), Some((9, &b""[..])));
        for bad in [
            &b""[..],
            b"ab12:7",
            b"ab12 tok",
            b"ab12:x tok",
            b"ab12:-1 tok",
        ] {
            assert_eq!(read_wake(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(channel("k", "ab12"), "k:wake:ab12");
    }
}
