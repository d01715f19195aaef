//! The read-write lock: readers share, a writer excludes readers and
//! writers. A reader is `lock(name, ttl).shared()`; a writer is the plain
//! lock (the [`mutex`](super::mutex)) on the same name.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | read | [`read.lua`](READ): add our share to the readers' hash, unless a writer holds the key or waits for it | 1 |
//! | release | [`release.lua`](RELEASE): remove our share; the last one deletes the key and wakes the first waiter (a waiting writer first) | 1 |
//! | extend | [`extend.lua`](EXTEND): prolong our share (never shorten) | 1 |
//! | write | the mutex: `SET NX PX`, which finds the readers' key there | 1 |
//!
//! On a node the readers' key is a hash (the `readers` layout of the key
//! space's owner, [`keyspace`](super::keyspace)): `R`, and one field per
//! reader, named by its token, holding when its share expires on the node's
//! clock. The key lives as long as its latest share.
//!
//! **Guarantee.** While a majority of nodes run and keep their keys and
//! clocks drift within the allowance: while a writer believes it holds the
//! lock (within its validity), no reader and no other writer does; readers
//! hold at the same time as each other.
//!
//! **Why: every conflict is a pair, and each pair is kept apart by a
//! node.** A conflict is a reader and a writer, or two writers, holding at
//! once. Each holds only when a majority of nodes granted it, and two
//! majorities share a node. On that node the lock's key is one thing at a
//! time: a string holding the writer's token (the mutex's layout) or the
//! readers' hash, never both, since every script creates or joins the key
//! only where `look` finds it free or in its own layout. So the shared node
//! granted at most one of the pair: the reader there joined a readers' hash
//! the writer's `SET NX` could not replace, or the writer's key made the
//! reader's script refuse. Two writers are two mutex holders. Readers are
//! not in conflict with each other, and every node lets them share. Each
//! reader's share ends at its own expiry, so no argument needs the readers
//! to agree on anything, and there is nothing to count.
//!
//! **The tempting designs that are wrong.** (1) A per-node count of readers
//! (`INCR`/`DECR`) diverges over a quorum, exactly as reentrant counts did:
//! a release decrements on nodes the take never reached and frees them
//! under another reader. Shares are fields named by their tokens, removed
//! only by their own token. (2) One TTL on the whole readers' key,
//! refreshed by every reader: a crashed reader's share then lives as long
//! as any other reader renews, and a waiting writer waits for all of them.
//! Each share here has its own expiry; `tests/rwlock.rs` shows a vanished
//! reader's share gone at its own TTL while another renews. (3) Readers
//! that keep overlapping starve a writer for ever. A writer kept out by
//! readers leaves an **intent** (`<key>:intent`, its waiter's name) that
//! turns new readers away, so it gets in once the current ones end; the
//! last reader's release wakes the writer first. The intent lives a second
//! past the readers' latest TTL (ten seconds at most) and each attempt of
//! the writer renews it; a writer that stops waiting takes it away (and
//! wakes the readers queued behind it), one that dies lets it lapse. While
//! readers hold the key and no intent is there, the lock has room for a
//! reader: a wake-up passed on by a client whose wait had ended, and any
//! waiter's leaving, wake the next waiter then (see
//! [`wait`](crate::wait)'s Room). A
//! writer kept out by readers is told to come back within its intent's
//! life, whatever its retry delay, so that the intent does not lapse while
//! it sleeps. The intent is liveness only: safety never depends on it. A
//! writer that does not queue (`Builder::wake_on_release(false)`: it
//! polls) leaves no intent, and overlapping readers can keep it out.
//! Shares whose readers vanished are purged when another reader comes or
//! goes, so the hash does not grow with them. Two things keep a writer and
//! readers from sleeping on a free key: a failed read's rollback that
//! frees the key wakes the first waiter (to a writer, failing reads look
//! like the holder `readers:<digest of their tokens>`, whose release it
//! waits for: [`Kind::announce_rollback`]; readers are named as a set,
//! like a semaphore's holders, and the last one's release is announced by
//! that name, so that a writer whose attempt raced it and still found them
//! on some nodes knows that they are going and tries again at once; nodes
//! whose reader sets differ — a share granted on a majority but not on
//! every node — still count as one holder, the readers, in the writer's
//! tally (`proto::quorum`), so it waits for them rather than polling), and a
//! writer's leaving of the queues —
//! its intent with them — that a node did not answer (cut off) is sent
//! again until the intent would have lapsed, so that a writer that got
//! the lock during a partition leaves no intent behind to turn readers
//! away after it. `tests/rwlock.rs` runs a
//! writer under continuous overlapping readers and shows it gets in.
//!
//! **Upgrades are refused; downgrades are not offered.** A reader that asks
//! to write on the same name would wait for every reader, itself included,
//! its intent turning every new reader away meanwhile, until its wait
//! deadline: an upgrade deadlocks over a quorum as over any lock (two
//! readers upgrading wait for each other). The client keeps the names each
//! task reads ([`upgrade`]), and a write request from a task that reads the
//! name fails at once with [`Error::Upgrade`](crate::Error::Upgrade),
//! nothing sent — a campaign for an election of that name too, and a set
//! that names it; another task's write waits for the readers as any writer
//! does. A **nested read** (a task that reads the name asks to read it
//! again) goes in past a waiting writer's intent (`read.lua`'s fourth
//! argument): turned away, it would wait for its own first read, which the
//! writer waits for; let in, it is one more share of a task the writer
//! waits for already (a task that always holds some read of the name
//! keeps writers out, as one read held as long would). The intent only
//! serves liveness: safety is untouched. Go's `RWMutex` forbids recursive
//! read locking for this deadlock; Java's `ReentrantReadWriteLock` lets a
//! thread's nested reads past waiting writers, as here. A downgrade (take
//! the read lock while holding the write lock) waits the same way for the writer, itself; it is not detected, as that
//! would charge every lock a registry entry: release the write lock, then
//! read (another writer may come in between). An atomic downgrade — each
//! node turning our writer's string into a readers' hash with our share —
//! would be sound (each node converts only its own key, and the writer's
//! handle is given up before it starts), and is left for when users ask.

mod upgrade;

use std::fmt;
use std::sync::{Arc, LazyLock};

pub(crate) use upgrade::Shares;

use crate::kinds::Kind;
use crate::kinds::keyspace::script;
use crate::proto::quorum::Plan;
use crate::proto::{Call, Command, Effect, LockId, Script};

/// Add our share, unless a writer holds or waits.
pub(crate) static READ: LazyLock<Script> = LazyLock::new(|| Script::new(script!("read.lua")));

/// Remove our share; the last one wakes a waiting writer.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(script!("release.lua")));

/// Prolong our share, never shortening.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "extend.lua")));

/// The reader's side of the read-write lock (the writer's is the mutex).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Reader {
    /// Asked by a task that reads the name already: a waiting writer's
    /// intent does not turn it away.
    nested: bool,
}

/// Shows the readers on one node (`{:#}`: how many), for
/// [`Holding`](crate::Holding)'s `Display`.
pub(crate) fn show(f: &mut fmt::Formatter<'_>, readers: &[String]) -> fmt::Result {
    if f.alternate() {
        write!(f, "{} readers", readers.len())
    } else {
        write!(f, "{} readers ({})", readers.len(), readers.join(", "))
    }
}

/// The reader's kind, shared by every read lock; `nested` for a task that
/// reads the name already.
pub(crate) fn kind(nested: bool) -> Arc<dyn Kind> {
    static KIND: LazyLock<Arc<dyn Kind>> = LazyLock::new(|| Arc::new(Reader { nested: false }));
    static NESTED: LazyLock<Arc<dyn Kind>> = LazyLock::new(|| Arc::new(Reader { nested: true }));
    if nested { NESTED.clone() } else { KIND.clone() }
}

impl Kind for Reader {
    fn name(&self, _: &LockId) -> &'static str {
        "read"
    }

    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command {
        Command {
            call: Call::Script {
                script: &READ,
                keys: id.keys.clone(),
                args: vec![
                    id.token().into(),
                    plan.ttl_ms.to_string().into_bytes(),
                    waiter.unwrap_or_default().into(),
                    if self.nested { b"1" } else { b"0" }.to_vec(),
                ],
            },
            effect: Effect::Grant { life: plan.life() },
        }
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Command {
            call: Call::Script {
                script: &RELEASE,
                keys: id.keys.clone(),
                args: vec![
                    id.token().into(),
                    if announce { b"1" } else { b"0" }.to_vec(),
                ],
            },
            effect: Effect::Remove,
        }
    }

    /// A failed read's rollback that frees the key wakes the first waiter
    /// (a writer, most often): to it, the shares are one holder (named
    /// `readers:<digest>` by their set), and the failing reads looked like
    /// a holder whose release it waits for.
    fn announce_rollback(&self) -> bool {
        true
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
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_nested_read_asks_the_nodes_to_let_it_past_an_intent() {
        let id = LockId::new(Arc::new(["k".into()]));
        let plan = Plan::new(Duration::from_secs(1), 0.01).unwrap();
        let nested = |kind: Arc<dyn Kind>| {
            let Call::Script { script, args, .. } = kind.acquire(&id, &plan, Some("c:1")).call
            else {
                panic!("a read is a script")
            };
            assert!(std::ptr::eq(script, &*READ));
            args[3].clone()
        };
        assert_eq!(nested(kind(false)), b"0");
        assert_eq!(nested(kind(true)), b"1");
    }
}
