//! Listening for announcements that wake no waiter: an election's
//! `<key>:leader` channel, on which each node publishes every change of its
//! record of who leads (see [`Observer`](crate::Observer)). A second use of
//! pub/sub beside the waiters' ([`subscriber`](super::subscriber)), kept
//! apart on purpose.
//!
//! The waiters' subscriber connections are shared by a `Redlock`'s waits,
//! made when a wait needs them, pinged, and read as wake-ups naming a
//! wait; each observer instead keeps a connection of its own to every node
//! for as long as it runs, is told of every message and of every
//! (re)subscription (which may have missed one: the observer then reads
//! the election again), and makes a connection that failed or broke again
//! after a pause of its own. Announcements here only prompt a read: the
//! observer reads every node's history anyway every
//! [`every`](crate::Observer::every), so a lost message costs latency,
//! never an item.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::Notify;

use crate::net::Endpoint;

/// Listens on `channel` of one node, notifying `heard` of every message,
/// and of every (re)subscription, which may have missed one; a connection
/// that fails or breaks is made again after `every`, a second at least.
pub(crate) async fn listen(
    endpoint: Endpoint,
    connect: Duration,
    channel: String,
    heard: Arc<Notify>,
    every: Duration,
) {
    loop {
        let subscribed = tokio::time::timeout(connect, async {
            let mut pubsub = endpoint.pubsub().await.ok()?;
            pubsub.subscribe(&channel).await.ok()?;
            Some(pubsub)
        })
        .await;
        if let Ok(Some(mut pubsub)) = subscribed {
            heard.notify_one();
            let mut messages = pubsub.on_message();
            while messages.next().await.is_some() {
                heard.notify_one();
            }
        }
        tokio::time::sleep(every.max(Duration::from_secs(1))).await;
    }
}
