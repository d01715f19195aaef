//! A lock's gate: what may create or prolong its keys goes on the wire only
//! until its removal begins.
//!
//! An acquisition, its fenced confirmation, or an extension asks every node
//! at once and is decided by the first majority (or by the first minority
//! that makes a majority impossible). A request the decision did not wait
//! for may still be on its way: waiting for a connection to be made,
//! retrying on a new connection after the old one broke, or sending a
//! script by `EVAL` after `EVALSHA` met `NOSCRIPT`. Sent after the lock's
//! rollback or release, it may land after it — on a node that counted as a
//! no, or that was cut off and has just healed — and leave a key nobody
//! holds until its TTL, shutting that node to every other client.
//!
//! The rule: **nothing of a lock's rounds is handed to a connection once
//! its removal has begun.** Every lock (every attempt's token, a
//! [`LockId`](super::LockId)) has a gate. Every hand-over of its
//! acquisition, confirmation and extension requests happens under the
//! gate's lock; a rollback (right after a failed attempt is decided) or a
//! release (of a held lock, dropped or released) shuts the gate under the
//! same lock before it sends anything. So a request is either handed over
//! before the removal, and queued on its connection ahead of it (the
//! connection writes in order; a connection replaced meanwhile gets the
//! removal too, see `net::retired`), or never sent.
//!
//! The gate is shut at the removal, not at the decision: a held lock's
//! slow nodes, whose connections are still being made when a majority has
//! agreed, still get the key (a fresh lock on five nodes survives the loss
//! of two), and the straggler's own node timeout bounds how long that
//! lasts.
//!
//! A hand-over is the first poll of the connection's send: redis-rs's
//! multiplexed connection queues the command in its ordered channel on that
//! poll when the channel has room (ours is sized so that it does: see
//! `net::PIPELINE_BUFFER`) and tokio's cooperative budget does not make it
//! yield first (the send runs unconstrained).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use tokio::task::coop::{Unconstrained, unconstrained};

/// The gate of one lock; shared by its requests and its removal.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    shut: Mutex<bool>,
}

impl Gate {
    /// Shuts the gate: no request of the lock is handed to a connection
    /// from now on. A hand-over under way when this is called is complete
    /// when it returns.
    pub(crate) fn shut(&self) {
        *self.lock() = true;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.shut.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs `send`, whose first poll hands a request to its connection,
/// through a gate if there is one: if the gate is still open then; `None`,
/// with nothing sent, if it is shut. A hand-written future rather than an
/// `async fn`, so that it keeps `send` once, in place: a burst keeps
/// thousands of requests at once, five a lock.
#[must_use = "a request is sent only when its future is polled"]
pub(crate) struct Pass<'g, F> {
    /// `None` once the first poll has handed `send` over (or where there
    /// is no gate).
    gate: Option<&'g Gate>,
    send: Unconstrained<F>,
}

impl<'g, F: Future> Pass<'g, F> {
    /// `send` through `gate`, if there is one (without, it only runs it).
    pub(crate) fn new(gate: Option<&'g Gate>, send: F) -> Pass<'g, F> {
        Pass {
            gate,
            send: unconstrained(send),
        }
    }
}

impl<F: Future> Future for Pass<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `send` is pinned where it lies: it is never moved out of
        // `self`, nor is `self` moved (no `Unpin` unless `F` is, no `Drop`
        // that moves it); `gate` is a plain reference.
        let this = unsafe { self.get_unchecked_mut() };
        let send = unsafe { Pin::new_unchecked(&mut this.send) };
        let Some(gate) = this.gate.take() else {
            return send.poll(cx).map(Some);
        };
        // The first poll, under the gate's lock: handed over before a
        // removal shuts it, or never.
        let shut = gate.lock();
        if *shut {
            // Shut, and stays so: polled again, it still sends nothing.
            this.gate = Some(gate);
            return Poll::Ready(None);
        }
        send.poll(cx).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[tokio::test]
    async fn a_shut_gate_sends_nothing_and_an_open_one_runs_to_the_end() {
        let gate = Gate::default();
        let polled = Arc::new(AtomicBool::new(false));
        let send = |polled: Arc<AtomicBool>| async move {
            polled.store(true, Ordering::SeqCst);
            tokio::task::yield_now().await;
            7
        };
        assert_eq!(Pass::new(Some(&gate), send(polled.clone())).await, Some(7));
        assert!(polled.swap(false, Ordering::SeqCst));
        gate.shut();
        assert_eq!(Pass::new(Some(&gate), send(polled.clone())).await, None);
        assert!(!polled.load(Ordering::SeqCst), "polled behind a shut gate");
    }

    #[tokio::test]
    async fn a_request_handed_over_before_the_gate_shut_is_not_cut_off() {
        let gate = Gate::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<u8>();
        let mut passing = std::pin::pin!(Pass::new(Some(&gate), async { rx.await.unwrap() }));
        // Handed over (its first poll done), then the gate shuts.
        assert!(futures::poll!(passing.as_mut()).is_pending());
        gate.shut();
        tx.send(3).unwrap();
        assert_eq!(passing.await, Some(3));
    }
}
