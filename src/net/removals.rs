//! Removals sent until they are answered: one queue, and at most one task,
//! per node.
//!
//! A release or a rollback that a node did not answer (a timeout, a broken
//! connection, no connection at all) may have left the key there: a
//! partition swallowed it, or the node is paused, or down and coming back
//! with its keys. Nothing else would remove that key before its TTL, and
//! until then the node refuses the resource to everyone. So the removal
//! waits in the node's queue, and one task sends everything queued again,
//! patiently (waiting for a connection up to the connect timeout), with
//! pauses doubling from [`REMOVAL_PAUSE`](super::REMOVAL_PAUSE) to
//! [`REMOVAL_PAUSE_MAX`](super::REMOVAL_PAUSE_MAX) while nothing is
//! answered, until each is answered or the keys it was for have expired.
//!
//! One task per node, not one per removal: a node down for hours while a
//! service releases a thousand locks a second costs one connection attempt
//! per pause and the queued commands, not a task per release. Each round
//! also writes a queued removal on every retired connection it has not
//! been written on yet (see [`retired`](super::retired)), once.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::clock::Moment;
use crate::proto::Prepared;

/// The removals a node has not answered yet.
#[derive(Default)]
pub(crate) struct Removals {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    queued: Vec<Removal>,
    /// Whether a task is sending the queue.
    sending: bool,
}

/// One removal: the command, when its keys will have expired, and the
/// retired connections it has been written on.
pub(crate) struct Removal {
    pub(crate) command: Arc<Prepared>,
    pub(crate) until: Moment,
    pub(crate) mirrored: Vec<u64>,
}

impl Removals {
    /// Queues `command` until `until`; `true` if no task sends the queue
    /// yet, and the caller is to start one (which [`take`](Self::take)s).
    pub(crate) fn queue(&self, command: Arc<Prepared>, until: Moment) -> bool {
        let mut state = self.lock();
        state.queued.push(Removal {
            command,
            until,
            mirrored: Vec::new(),
        });
        !std::mem::replace(&mut state.sending, true)
    }

    /// What is queued and not yet expired, for the sending task's next
    /// round; `None`, and the task is to end, once nothing is.
    pub(crate) fn take(&self) -> Option<Vec<Removal>> {
        let mut state = self.lock();
        let now = Moment::now();
        state.queued.retain(|q| q.until > now);
        if state.queued.is_empty() {
            state.sending = false;
            return None;
        }
        Some(std::mem::take(&mut state.queued))
    }

    /// Puts back what a round did not get answered.
    pub(crate) fn put_back(&self, unanswered: impl IntoIterator<Item = Removal>) {
        self.lock().queued.extend(unanswered);
    }

    /// How many removals are queued (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().queued.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{Call, Command, Effect};
    use std::time::Duration;

    fn removal() -> Arc<Prepared> {
        Prepared::new(Command {
            call: Call::Command(redis::cmd("PING")),
            effect: Effect::Remove,
        })
    }

    #[test]
    fn one_task_sends_the_queue_until_nothing_unexpired_is_left() {
        let removals = Removals::default();
        let later = Moment::now().after(Duration::from_secs(60));
        assert!(removals.queue(removal(), later), "the first starts a task");
        assert!(!removals.queue(removal(), later), "the second joins it");
        let round = removals.take().unwrap();
        assert_eq!(round.len(), 2);
        assert!(!removals.queue(removal(), later), "still sending");
        removals.put_back(round.into_iter().take(1));
        assert_eq!(removals.len(), 2);
        assert_eq!(removals.take().unwrap().len(), 2);
        assert!(removals.take().is_none(), "nothing left: the task ends");
        assert!(removals.queue(removal(), later), "and a new one starts");
        // Expired removals are dropped unsent.
        let round = removals.take().unwrap();
        removals.put_back(round.into_iter().map(|mut q| {
            q.until = Moment::now();
            q
        }));
        assert!(removals.take().is_none());
    }
}
