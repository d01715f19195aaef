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
//! a token. What deadlocks is a task waiting for a share it holds itself,
//! so the client keeps, per tokio task ([`tokio::task::try_id`]; one entry
//! for code outside any task), the names it holds read locks on, from the
//! moment a read lock is handed out until its [`Lock`](crate::Lock) is
//! released or dropped. A write request (any kind that is not a read:
//! plain, fenced, reentrant, a semaphore, or a set naming the resource)
//! from a task with an entry for its name is refused with
//! [`Error::Upgrade`](crate::Error::Upgrade) before anything is sent.
//! Another task of the same process that asks to write is not refused: it
//! waits for the readers, which is no deadlock, as another process's
//! writer does.
//!
//! **What it does not see.** A read lock moved to another task still counts
//! for the task that took it (refusing a write there that would not have
//! deadlocked); a read lock taken through another [`Redlock`](crate::Redlock)
//! built on its own (clones share one registry) is not seen, and the write
//! waits as described. The check costs writers one atomic load while no
//! read lock is held through the client, and a map lookup while some are.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::Id;

/// For each name read, the tasks reading it, and how many read locks each
/// holds on it (`None`: code outside any task).
type Readers = HashMap<Box<str>, Vec<(Option<Id>, usize)>>;

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
    /// task; it counts until the [`Mark`] ends.
    pub(crate) fn mark(self: &Arc<Self>, resource: &str) -> Mark {
        let task = tokio::task::try_id();
        let mut held = self.held();
        let tasks = held.entry(resource.into()).or_default();
        match tasks.iter_mut().find(|(t, _)| *t == task) {
            Some((_, n)) => *n += 1,
            None => tasks.push((task, 1)),
        }
        self.live.fetch_add(1, Ordering::AcqRel);
        Mark {
            shares: self.clone(),
            resource: resource.into(),
            task,
            ended: AtomicBool::new(false),
        }
    }

    /// Whether the current task holds a read lock on `resource`.
    pub(crate) fn held_here(&self, resource: &str) -> bool {
        if self.live.load(Ordering::Acquire) == 0 {
            return false;
        }
        let task = tokio::task::try_id();
        self.held()
            .get(resource)
            .is_some_and(|tasks| tasks.iter().any(|(t, _)| *t == task))
    }

    fn end(&self, resource: &str, task: Option<Id>) {
        let mut held = self.held();
        let Some(tasks) = held.get_mut(resource) else {
            return;
        };
        if let Some(i) = tasks.iter().position(|(t, _)| *t == task) {
            tasks[i].1 -= 1;
            if tasks[i].1 == 0 {
                tasks.swap_remove(i);
            }
            self.live.fetch_sub(1, Ordering::AcqRel);
        }
        if tasks.is_empty() {
            held.remove(resource);
        }
    }
}

/// One read lock's entry in its client's [`Shares`]: it counts until
/// [`end`](Mark::end) (called when the [`Lock`](crate::Lock) is released
/// or dropped) or its own drop, whichever comes first.
#[derive(Debug)]
pub(crate) struct Mark {
    shares: Arc<Shares>,
    resource: Box<str>,
    task: Option<Id>,
    ended: AtomicBool,
}

impl Mark {
    /// Stops counting the read lock (once; later calls do nothing).
    pub(crate) fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.shares.end(&self.resource, self.task);
        }
    }
}

impl Drop for Mark {
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
        assert!(!shares.held_here("config"));
        let first = shares.mark("config");
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
