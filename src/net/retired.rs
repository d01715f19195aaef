//! Retired connections: replaced for their silence, kept open until they
//! can deliver nothing more.
//!
//! A connection that leaves requests unanswered for long enough is replaced
//! (see the module doc of [`net`](super)). What was written on it may still
//! reach the node later: after a partition without RST heals, TCP
//! retransmits it, up to minutes later (Linux gives up after about 15
//! minutes by default); a frozen node reads its socket buffer when thawed.
//! An acquisition written there and delivered late would set a key after
//! its release went out on the new connection, and the key would live for
//! its whole TTL, held by nobody.
//!
//! So a replaced connection is not closed. It is *retired*: kept open, and
//! every removal (a release, a rollback) the node is sent afterwards is
//! also written on it, behind whatever it already carries, once the
//! removal itself has been answered or has timed out (a copy that got
//! there first would leave the removal finding no key, and not counting as
//! done). Delivered late,
//! an acquisition is then followed on the same connection by its release,
//! and the node applies them in that order. A retired connection goes once
//! it can deliver nothing new: a `PING` written on it after the last
//! removal has been answered (the node has read everything before it), or
//! the connection failed (TCP gave up: nothing more is delivered).
//!
//! Mirrored removals are sent without waiting for their replies (redis-rs
//! still reads and discards them, and writes them even though nobody waits),
//! each at most once per retired connection. At most [`KEPT`] connections
//! are mirrored to per node; past that the oldest is no longer written on
//! (with a warning; it stays open until its drain ends), should a node's
//! connections be replaced more often than they drain.
//!
//! A cluster node's retired connection is one socket per primary: a
//! mirrored removal goes to the primary of its key's slot on it (behind
//! what that socket carries), but the draining `PING` goes to the first
//! primary, so the connection may be closed before the socket that
//! carried a late acquisition has delivered everything; such a key
//! lingers until its TTL (a delay, never two holders).

use std::future::poll_fn;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Poll;

use super::topology::CommandConn;
use futures::FutureExt;
use redis::{RedisError, Value};

use crate::proto::Prepared;

/// The most retired connections kept per node.
pub(crate) const KEPT: usize = 8;

/// The retired connections of one node.
#[derive(Default)]
pub(crate) struct Retired {
    list: Mutex<Vec<Entry>>,
}

struct Entry {
    generation: u64,
    conn: CommandConn,
    /// How many removals have been written on it.
    mirrored: u64,
}

impl Retired {
    /// Keeps `conn` (connection `generation` of node `name`) until it has
    /// delivered everything written on it, removals mirrored from now on
    /// included. Outside a tokio runtime the connection simply closes.
    /// `keep` is the least time it is kept (and written on), whatever its
    /// drain says: a cluster connection can hold a request handed to it
    /// before a socket of its is written on (see [`replace_connection`]).
    ///
    /// [`replace_connection`]: super::Inner::replace_connection
    pub(crate) fn retire(
        self: &Arc<Self>,
        name: &str,
        generation: u64,
        conn: CommandConn,
        keep: std::time::Duration,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut list = self.lock();
            // Several requests may fail on one connection at once: it is
            // retired once.
            if list.iter().any(|e| e.generation == generation) {
                return;
            }
            if list.len() >= KEPT {
                let oldest = list.remove(0);
                tracing::warn!(
                    node = name,
                    generation = oldest.generation,
                    "too many silent connections to this node: no longer writing releases \
                     on the oldest, whose late deliveries may then leave keys until their TTL"
                );
            }
            list.push(Entry {
                generation,
                conn: conn.clone(),
                mirrored: 0,
            });
        }
        tracing::debug!(node = name, generation, "connection retired");
        runtime.spawn(drain(self.clone(), name.to_owned(), generation, conn, keep));
    }

    /// Writes `command` (a removal) on every retired connection not in
    /// `done`, without waiting for the replies, and adds those to `done`.
    pub(crate) fn mirror(&self, command: &Prepared, done: &mut Vec<u64>) {
        let mut list = self.lock();
        if list.iter().all(|e| done.contains(&e.generation)) {
            return;
        }
        // By EVAL, not EVALSHA: nobody reads the reply to fall back on.
        let mut cmd = match &command.script {
            Some(call) => call.call_of("EVAL", call.script),
            None => command.first.clone(),
        };
        cmd.set_no_response(true);
        for entry in list.iter_mut() {
            if done.contains(&entry.generation) {
                continue;
            }
            done.push(entry.generation);
            entry.mirrored += 1;
            let mut conn = entry.conn.clone();
            // Without a reply to wait for, a send is done once its command
            // is queued on the connection, which has room (see
            // `PIPELINE_BUFFER`): done on its first poll.
            let queued = tokio::task::coop::unconstrained(cmd.query_async::<Value>(&mut conn))
                .now_or_never();
            if queued.is_none() {
                tracing::debug!(
                    generation = entry.generation,
                    "a retired connection's queue is full: a removal was not written on it"
                );
            }
        }
    }

    /// The generations of the connections kept.
    #[cfg(test)]
    pub(crate) fn generations(&self) -> Vec<u64> {
        self.lock().iter().map(|e| e.generation).collect()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Entry>> {
        self.list.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps connection `generation` until a `PING` written on it after its
/// last mirrored removal is answered, or it fails.
async fn drain(
    retired: Arc<Retired>,
    name: String,
    generation: u64,
    conn: CommandConn,
    keep: std::time::Duration,
) {
    tokio::time::sleep(keep).await;
    loop {
        // The PING is handed over under the list's lock, so that every
        // removal counted before `seen` is written ahead of it.
        let mut ping = Box::pin(tokio::task::coop::unconstrained(ping(conn.clone())));
        let first = poll_fn(|cx| {
            let list = retired.lock();
            let seen = list
                .iter()
                .find(|e| e.generation == generation)
                .map(|e| e.mirrored);
            Poll::Ready(seen.map(|seen| (seen, ping.as_mut().poll(cx))))
        })
        .await;
        // Closed meanwhile as the oldest of too many.
        let Some((seen, first)) = first else {
            return;
        };
        let answered = match first {
            Poll::Ready(answered) => answered,
            Poll::Pending => ping.await,
        };
        // An error answer was read all the same; a broken connection
        // delivers nothing more.
        let failed = answered
            .as_ref()
            .is_err_and(super::classify::is_connection_error);
        let mut list = retired.lock();
        let Some(at) = list.iter().position(|e| e.generation == generation) else {
            return;
        };
        if failed || list[at].mirrored == seen {
            list.remove(at);
            drop(list);
            tracing::debug!(
                node = name,
                generation,
                failed,
                "retired connection drained: closed"
            );
            return;
        }
    }
}

async fn ping(mut conn: CommandConn) -> Result<Value, RedisError> {
    redis::cmd("PING").query_async(&mut conn).await
}
