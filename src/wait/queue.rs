//! The waiters' queue on each node, shared by every kind: whom a release
//! wakes. The protocol and its argument are in the
//! [module doc of `wait`](super); here are the queue's names, the
//! wake-up's format, and the commands a client sends to the queue
//! (`leave.lua`, `pass_on.lua`; `queue.lua` itself runs within every
//! kind's acquisition and release, after the key space's prelude:
//! [`keyspace`](crate::kinds::keyspace)).
//!
//! A resource named `x:waiters` would collide with the queue of `x`, as
//! `x:fence` does with its fencing counter and `x:intent` with a writer's
//! intent (an intent is only a string in a waiter's form: a lock named
//! `x:intent` is not taken for one, but it is best avoided); pick resource
//! names without
//! those suffixes.

use std::future::Future;
use std::sync::LazyLock;

use crate::clock::Moment;
use crate::net::{Node, Patience};

use crate::kinds::keyspace::script;
use crate::proto::{Call, Command, Effect, Keys, Prepared, Script};

/// Takes a waiter out of the queues of its keys, and its intent (a writer
/// waiting for readers) with it; wakes the next waiter where the lock has
/// room (see Room in the [`wait`](super) module doc).
static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("leave.lua")));

/// Wakes the next waiter of a key if the lock has room: a wake-up reached a
/// client whose named wait had ended.
static PASS_ON: LazyLock<Script> = LazyLock::new(|| Script::new(script!("pass_on.lua")));

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
/// without hearing it (see Passing on in the [`wait`](super) module
/// doc).
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

/// Where a leaving's later sends run (a node that did not answer is sent
/// it again): the engine's background, whose tasks it counts.
pub(crate) trait Detach: Clone + Send + 'static {
    /// Runs `fut` to its end in the background.
    fn detach<F>(&self, fut: F)
    where
        F: Future<Output = ()> + Send + 'static;
}

/// Runs a waiter's leaving ([`leave`]) on the nodes not marked
/// in `skip` (one flag per node), each within the node timeout.
pub(crate) async fn leave_queues<B: Detach>(
    nodes: Vec<Node>,
    leave: Command,
    skip: Vec<bool>,
    background: B,
) {
    let leave = Prepared::new(leave);
    // A node that does not answer (cut off, frozen) is sent it again, as a
    // removal is, until the intent it may hold there has lapsed: a writer
    // that got the lock while a node was cut off would otherwise leave its
    // intent there, turning readers away for its whole life.
    let until = Moment::now().after(LEAVE_LIFE);
    let sent = nodes
        .iter()
        .zip(skip)
        .filter(|(_, skip)| !skip)
        .map(|(node, _)| {
            let reply = node.run(&leave, Patience::Cleanup, None, node.limits().request);
            let (leave, node, background) = (leave.clone(), node.clone(), background.clone());
            async move {
                if let Err(failure) = reply.await
                    && failure.unanswered()
                    && let Some(send) = node.remove_later(leave, until)
                {
                    background.detach(send);
                }
            }
        });
    futures::future::join_all(sent).await;
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
        // A release may name no token (one of a foreign key's).
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
