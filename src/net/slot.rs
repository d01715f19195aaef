//! A connection slot: the one live connection to a node, made in the
//! background and shared.
//!
//! Both kinds of connection a node has — the multiplexed one for commands
//! and the subscriber one for release announcements — live in a [`Slot`].
//! Connecting is a task of its own, bounded by the connect timeout, not by
//! the request that needed it: a node a few round trips away (connect,
//! handshake, `INFO`) would otherwise never get connected under a per-request
//! timeout sized for one round trip. Callers that arrive while it runs share
//! the attempt; a request gives up waiting for it at its own deadline, and
//! the connection is there for the next one.
//!
//! Each connection gets a generation, unique in the process, so that
//! [`forget`](Slot::forget) drops exactly the connection that was found
//! broken, never a newer one that replaced it meanwhile.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::error::NodeFailure;

/// A connection and its generation.
#[derive(Clone)]
pub(crate) struct Live<T> {
    pub(crate) generation: u64,
    pub(crate) conn: T,
}

type Connecting<T> = Shared<BoxFuture<'static, Result<Live<T>, NodeFailure>>>;

enum State<T> {
    Idle,
    Connecting(u64, Connecting<T>),
    Live(Live<T>),
}

/// The slot of one connection to one node.
pub(crate) struct Slot<T> {
    connect_timeout: Duration,
    state: Mutex<State<T>>,
}

/// Settles connection attempt `.1` as failed when dropped, unless it was
/// settled already.
struct Unfinished<T: Clone + Send + Sync + 'static>(Weak<Slot<T>>, u64);

impl<T: Clone + Send + Sync + 'static> Drop for Unfinished<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.0.upgrade() {
            slot.settle(self.1, &Err(NodeFailure::Timeout));
        }
    }
}

/// Generations, unique in the process; 0 means none.
static GENERATION: AtomicU64 = AtomicU64::new(1);

impl<T: Clone + Send + Sync + 'static> Slot<T> {
    pub(crate) fn new(connect_timeout: Duration) -> Arc<Slot<T>> {
        Arc::new(Slot {
            connect_timeout,
            state: Mutex::new(State::Idle),
        })
    }

    /// The live connection, if there is one.
    pub(crate) fn live(&self) -> Option<Live<T>> {
        match &*self.lock() {
            State::Live(live) => Some(live.clone()),
            _ => None,
        }
    }

    /// The generation of the live connection, 0 if there is none.
    pub(crate) fn generation(&self) -> u64 {
        match &*self.lock() {
            State::Live(live) => live.generation,
            _ => 0,
        }
    }

    /// The live connection, or the one being made: `connect` (given the
    /// new generation) is started in the background if nothing is under
    /// way. Also says whether this call waited for a connection to be made
    /// (`true`) or found one live. Cancel-safe: dropping the future leaves
    /// the connecting task running.
    pub(crate) async fn get<F, Fut>(
        self: &Arc<Self>,
        connect: F,
    ) -> Result<(Live<T>, bool), NodeFailure>
    where
        F: FnOnce(u64) -> Fut,
        Fut: Future<Output = Result<T, NodeFailure>> + Send + 'static,
    {
        let connecting = {
            let mut state = self.lock();
            match &*state {
                State::Live(live) => return Ok((live.clone(), false)),
                State::Connecting(_, connecting) => connecting.clone(),
                State::Idle => {
                    let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
                    let connecting = self.spawn_connect(generation, connect(generation));
                    *state = State::Connecting(generation, connecting.clone());
                    connecting
                }
            }
        };
        connecting.await.map(|live| (live, true))
    }

    /// Runs `connect` as a task of its own under the connect timeout, and
    /// settles the slot when it ends. A panic inside it becomes a
    /// connection failure, never the caller's.
    fn spawn_connect<Fut>(self: &Arc<Self>, generation: u64, connect: Fut) -> Connecting<T>
    where
        Fut: Future<Output = Result<T, NodeFailure>> + Send + 'static,
    {
        let slot: Weak<Slot<T>> = Arc::downgrade(self);
        let limit = self.connect_timeout;
        let task = tokio::spawn(async move {
            // Settles the slot even if the task is dropped unfinished (its
            // runtime shut down): a slot must never stay "connecting" to an
            // attempt that will not end.
            let _unfinished = Unfinished(slot.clone(), generation);
            let connect = AssertUnwindSafe(connect).catch_unwind();
            let made = match tokio::time::timeout(limit, connect).await {
                Ok(Ok(made)) => made,
                Ok(Err(_)) => Err(NodeFailure::Connection(
                    "connecting panicked inside the Redis client".to_owned(),
                )),
                Err(_) => Err(NodeFailure::Connection(format!(
                    "no connection within the connect timeout ({} ms)",
                    limit.as_millis()
                ))),
            };
            let made = made.map(|conn| Live { generation, conn });
            if let Some(slot) = slot.upgrade() {
                slot.settle(generation, &made);
            }
            made
        });
        let slot = Arc::downgrade(self);
        task.map(move |joined| {
            joined.unwrap_or_else(|e| {
                // Cut off before it could settle the slot (its runtime shut
                // down, perhaps before it ever ran): settle it here, outside
                // the slot's lock, so that the next request connects anew.
                let failed = Err(NodeFailure::Connection(format!("connecting failed: {e}")));
                if let Some(slot) = slot.upgrade() {
                    slot.settle(generation, &failed);
                }
                failed
            })
        })
        .boxed()
        .shared()
    }

    /// Makes the outcome of connection attempt `generation` the slot's
    /// state, unless the slot moved on meanwhile.
    fn settle(&self, generation: u64, made: &Result<Live<T>, NodeFailure>) {
        let mut state = self.lock();
        if matches!(&*state, State::Connecting(g, _) if *g == generation) {
            *state = match made {
                Ok(live) => State::Live(live.clone()),
                Err(_) => State::Idle,
            };
        }
    }

    /// Drops the connection of `generation` if it is still the live one;
    /// says whether it was. The next request connects anew.
    pub(crate) fn forget(&self, generation: u64) -> bool {
        let mut state = self.lock();
        let live = matches!(&*state, State::Live(live) if live.generation == generation);
        if live {
            *state = State::Idle;
        }
        live
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_connection_is_made_in_the_background_and_shared() {
        let slot = Slot::<u32>::new(ms(1_000));
        let made = Arc::new(AtomicUsize::new(0));
        let connect = |made: Arc<AtomicUsize>| {
            move |_| async move {
                tokio::time::sleep(ms(300)).await;
                made.fetch_add(1, Ordering::SeqCst);
                Ok(7)
            }
        };
        // Two requests that give up after 100 ms each: the connection is
        // made all the same, once.
        for _ in 0..2 {
            let got = tokio::time::timeout(ms(100), slot.get(connect(made.clone()))).await;
            assert!(got.is_err());
        }
        tokio::time::sleep(ms(200)).await;
        assert_eq!(made.load(Ordering::SeqCst), 1);
        let (live, waited) = slot.get(connect(made.clone())).await.unwrap();
        assert_eq!((live.conn, waited), (7, false));
        assert_eq!(slot.generation(), live.generation);
        // Forgetting a stale generation changes nothing; the live one goes.
        assert!(!slot.forget(live.generation + 1000));
        assert!(slot.forget(live.generation));
        assert!(slot.live().is_none());
    }

    #[test]
    fn an_attempt_cut_off_by_its_runtime_shutting_down_does_not_wedge_the_slot() {
        let slot = Slot::<u32>::new(ms(60_000));
        let first = tokio::runtime::Runtime::new().unwrap();
        first.block_on(async {
            let started = slot.get(|_| std::future::pending::<Result<u32, NodeFailure>>());
            assert!(tokio::time::timeout(ms(20), started).await.is_err());
        });
        // The connecting task dies with its runtime.
        drop(first);
        let second = tokio::runtime::Runtime::new().unwrap();
        let (live, waited) = second.block_on(slot.get(|_| async { Ok(5) })).unwrap();
        assert_eq!((live.conn, waited), (5, true));
    }

    #[test]
    fn an_attempt_never_run_before_its_runtime_shut_down_does_not_wedge_the_slot() {
        let slot = Slot::<u32>::new(ms(60_000));
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        // Starts the connection and is done before the task is ever polled.
        first.block_on(async {
            let started = slot.get(|_| async { Ok::<u32, NodeFailure>(1) });
            assert!(futures::FutureExt::now_or_never(started).is_none());
        });
        drop(first);
        let second = tokio::runtime::Runtime::new().unwrap();
        second.block_on(async {
            // The first request after finds the attempt gone; the next connects.
            let _ = slot.get(|_| async { Ok(5) }).await;
            let (live, _) = slot.get(|_| async { Ok(5) }).await.unwrap();
            assert_eq!(live.conn, 5);
        });
    }

    #[tokio::test(start_paused = true)]
    async fn connecting_is_bounded_and_a_panic_is_a_failure() {
        let slot = Slot::<u32>::new(ms(500));
        let err = slot
            .get(|_| async {
                tokio::time::sleep(ms(10_000)).await;
                Ok(1)
            })
            .await
            .err()
            .unwrap();
        assert!(
            matches!(err, NodeFailure::Connection(ref m) if m.contains("500 ms")),
            "{err:?}"
        );
        let err = slot
            .get(|_| async { panic!("inside the connection") })
            .await
            .err()
            .unwrap();
        assert!(matches!(err, NodeFailure::Connection(_)), "{err:?}");
        // And the slot is usable again.
        let (live, waited) = slot.get(|_| async { Ok(3) }).await.unwrap();
        assert_eq!((live.conn, waited), (3, true));
    }
}
