//! Upgrades refused: the read locks each task holds, so that a task that
//! holds a read lock and asks for a write lock on the same name gets an
//! error at once instead of waiting for itself.
//!
//! A writer waits until every reader has gone. A reader that asks to write
//! waits for itself: its share keeps the writer out, and its intent turns
//! every new reader away, until the writer's wait deadline. Over a quorum
//! as anywhere, an upgrade cannot be made atomic for two readers at once
//! (each would wait for the other), so it is refused.
//!
//! **Who asks.** The nodes cannot tell one caller from another: a share is
//! a token. What deadlocks is a flow of code waiting for a share it holds
//! itself, so the client keeps, per tokio task ([`tokio::task::try_id`]),
//! or per thread for code outside any task (the body of `#[tokio::main]`,
//! `#[tokio::test]` or any `block_on`: a future given to `block_on` stays
//! on its thread), the names it holds read locks on, from the moment a
//! read lock is handed out until its [`Lock`](crate::Lock) is released or
//! dropped. A write request (any acquisition that is not a read: plain,
//! fenced, reentrant, a semaphore, a set naming the resource, or a
//! campaign for the election of that name) from a task with an entry for
//! its name is refused with [`Error::Upgrade`](crate::Error::Upgrade)
//! before anything is sent. The check sits where every acquisition passes
//! (the client's `acquire`, which maps each key back to its name), so that
//! no way of asking to write skips it. Another task's write is not
//! refused: it waits for the readers, as another process's writer does.
//!
//! **Nested reads go in.** A task that reads a name and asks to read it
//! again is already in: turned away by a waiting writer's intent, its
//! second read would wait for its first, which the writer waits for. So a
//! read from a task with an entry for its name is sent as *nested*, and
//! the nodes let it in past an intent (never past a writer that holds the
//! key): one more share of a task the writer waits for already. A read
//! lock that was lost but not yet released or dropped still counts, so
//! its task's next read is let in as nested: one share ahead of the
//! writer, which only costs the writer that share's time.
//!
//! **What it does not see, and what it refuses too much.** A task is the
//! unit, not the branch: two futures of one task run at the same time
//! (`join!`, `select!`, a `FuturesUnordered`) count as one, so a write in
//! one branch while another holds a read lock on the name is refused even
//! if that branch would have let go — spawn the writer instead. A read
//! lock moved to another task still counts for the task that took it, and
//! not for the one that has it: a write there waits for its deadline as
//! before this check (and so does a task that awaits another task's write
//! while it reads). A read lock that is forgotten (`std::mem::forget`)
//! counts for good. A read lock taken through another
//! [`Redlock`](crate::Redlock) built on its own (clones share one registry)
//! is not seen. The check costs every write one atomic load while no read
//! lock is held through the client (or a clone); while some are, one
//! lookup per name under a mutex the client's read locks share.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use std::thread::ThreadId;

use tokio::task::Id;

use crate::kinds::OnEnd;

/// Who reads: a tokio task, or a thread for code outside any task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Task(Id),
    Thread(ThreadId),
}

impl Who {
    /// The code running now.
    fn now() -> Who {
        match tokio::task::try_id() {
            Some(id) => Who::Task(id),
            None => Who::Thread(std::thread::current().id()),
        }
    }
}

/// For each name read, who reads it, and how many read locks each holds
/// on it.
type Readers = HashMap<Box<str>, Vec<(Who, usize)>>;

/// The read locks held through one client, by name and task.
#[derive(Debug, Default)]
pub(crate) struct Shares {
    /// How many read locks are held in all: writers look no further while
    /// it is zero.
    live: AtomicUsize,
    /// For each name, the tasks holding read locks on it, and how many.
    held: Mutex<Readers>,
}

impl Shares {
    fn held(&self) -> MutexGuard<'_, Readers> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a read lock on `resource` just handed out to the current
    /// task; it counts until the [`ReadEntry`] ends.
    pub(crate) fn mark(self: &Arc<Self>, resource: &str) -> ReadEntry {
        let who = Who::now();
        let mut held = self.held();
        // Looked up first: no copy of the name for a name already read.
        let readers = match held.get_mut(resource) {
            Some(readers) => readers,
            None => held.entry(resource.into()).or_default(),
        };
        match readers.iter_mut().find(|(w, _)| *w == who) {
            Some((_, n)) => *n += 1,
            None => readers.push((who, 1)),
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        ReadEntry {
            shares: self.clone(),
            resource: resource.into(),
            who,
            ended: AtomicBool::new(false),
        }
    }

    /// Whether any read lock is held through the client: writers look no
    /// further when none is (one atomic load).
    pub(crate) fn any(&self) -> bool {
        self.live.load(Ordering::Acquire) > 0
    }

    /// Whether the current task holds a read lock on `resource`.
    pub(crate) fn held_here(&self, resource: &str) -> bool {
        if self.live.load(Ordering::Acquire) == 0 {
            return false;
        }
        let who = Who::now();
        self.held()
            .get(resource)
            .is_some_and(|readers| readers.iter().any(|(w, _)| *w == who))
    }

    fn end(&self, resource: &str, who: Who) {
        let mut held = self.held();
        let Some(readers) = held.get_mut(resource) else {
            return;
        };
        if let Some(i) = readers.iter().position(|(w, _)| *w == who) {
            readers[i].1 -= 1;
            if readers[i].1 == 0 {
                readers.swap_remove(i);
            }
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
        if readers.is_empty() {
            held.remove(resource);
        }
    }
}

/// One read lock's entry in its client's [`Shares`]: it counts until
/// [`end`](ReadEntry::end) (called when the [`Lock`](crate::Lock) is released
/// or dropped) or its own drop, whichever comes first.
#[derive(Debug)]
pub(crate) struct ReadEntry {
    shares: Arc<Shares>,
    resource: Box<str>,
    who: Who,
    ended: AtomicBool,
}

impl OnEnd for ReadEntry {
    /// Stops counting the read lock (once; later calls do nothing).
    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.shares.end(&self.resource, self.who);
        }
    }
}

impl Drop for ReadEntry {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_holding_a_read_lock_is_seen_until_its_mark_ends() {
        let shares = Arc::new(Shares::default());
        assert!(!shares.held_here("config") && !shares.any());
        let first = shares.mark("config");
        assert!(shares.any());
        let second = shares.mark("config");
        assert!(shares.held_here("config"));
        assert!(!shares.held_here("other"), "only the name read");
        first.end();
        first.end();
        assert!(shares.held_here("config"), "the second read still counts");
        drop(first);
        assert!(shares.held_here("config"), "ending twice counts once");
        drop(second);
        assert!(!shares.held_here("config"));
        assert_eq!(shares.live.load(Ordering::Acquire), 0);
        assert!(shares.held().is_empty(), "no entry left behind");
    }

    #[test]
    fn code_outside_any_task_is_told_apart_by_its_thread() {
        let shares = Arc::new(Shares::default());
        let mark = shares.mark("config");
        assert!(shares.held_here("config"));
        let elsewhere = std::thread::spawn({
            let shares = shares.clone();
            move || shares.held_here("config")
        });
        assert!(!elsewhere.join().unwrap(), "another thread's read");
        drop(mark);
        assert!(!shares.held_here("config"));
    }

    #[tokio::test]
    async fn another_task_is_not_refused() {
        let shares = Arc::new(Shares::default());
        let mark = tokio::spawn({
            let shares = shares.clone();
            async move { shares.mark("config") }
        })
        .await
        .unwrap();
        assert!(!shares.held_here("config"), "the read is another task's");
        let seen = tokio::spawn({
            let shares = shares.clone();
            async move { shares.held_here("config") }
        })
        .await
        .unwrap();
        assert!(!seen, "a third task does not hold it either");
        drop(mark);
        assert_eq!(shares.live.load(Ordering::Acquire), 0);
    }
}
