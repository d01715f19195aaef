//! Durations at their extremes, against a real servers: every duration the
//! builder or a call accepts works (deadlines saturate) or is refused with
//! a `ConfigError` that names the bound; none panics, in the caller or in a
//! background task.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redquorum::{ConfigError, Error, GaveUp};

const ALL: [usize; 3] = [0, 1, 2];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Far beyond any clock: `now + this` overflows every `Instant`.
const HUGE: Duration = Duration::from_secs(1 << 60);

/// `node_timeout(Duration::MAX)` was built, and the first request
/// panicked (`start + timeout` on tokio's clock). A day is the most.
#[tokio::test]
async fn a_node_timeout_beyond_a_day_is_refused_and_a_day_works() {
    let c = servers(3);
    for timeout in [Duration::MAX, HUGE, DAY + Duration::from_nanos(1)] {
        match builder(&c).node_timeout(timeout).build() {
            Err(Error::Config(
                e @ ConfigError::TimeoutTooLong {
                    option: "node_timeout",
                    max: DAY,
                    ..
                },
            )) => {
                assert!(e.to_string().contains("86400s"), "{e}");
            }
            Err(e) => panic!("{e}"),
            Ok(redlock) => {
                let status = redlock.status("r").await;
                panic!("node_timeout({timeout:?}) was accepted; status: {status:?}");
            }
        }
    }
    let redlock = builder(&c).node_timeout(DAY).build().unwrap();
    assert!(redlock.status("r").await.is_free());
    let lock = redlock.lock("r", 2 * DAY).await.unwrap();
    // The node beyond the majority gets it in the background.
    await_holders(&c, &ALL, &key("r"), 3, secs(5)).await;
    lock.release().await.unwrap();
}

/// `connect_timeout(Duration::MAX)` was built, and the background release
/// of a dropped lock panicked in its task: the keys stayed on every node
/// for the whole TTL. A day is the most, and works.
#[tokio::test]
async fn a_connect_timeout_beyond_a_day_is_refused_and_a_day_works() {
    let c = servers(3);
    for timeout in [Duration::MAX, DAY + Duration::from_nanos(1)] {
        match builder(&c).connect_timeout(timeout).build() {
            Err(Error::Config(
                e @ ConfigError::TimeoutTooLong {
                    option: "connect_timeout",
                    max: DAY,
                    ..
                },
            )) => {
                assert!(e.to_string().contains("86400s"), "{e}");
            }
            Err(e) => panic!("{e}"),
            Ok(redlock) => {
                let lock = redlock.lock("r", secs(60)).await.unwrap();
                drop(lock);
                await_gone(&c, &ALL, &key("r"), secs(10)).await;
                panic!("connect_timeout({timeout:?}) was accepted");
            }
        }
    }
    let redlock = builder(&c).connect_timeout(DAY).build().unwrap();
    let lock = redlock.lock("r", secs(60)).await.unwrap();
    // The node beyond the majority gets it in the background.
    await_holders(&c, &ALL, &key("r"), 3, secs(5)).await;
    drop(lock);
    await_gone(&c, &ALL, &key("r"), secs(10)).await;
}

/// A retry delay too long to wait out is waited for, not cut to nothing:
/// the call gives up at its deadline after one attempt rather than polling
/// through its retries (`uniform` turned the delay into microseconds and
/// truncated them to 64 bits: 2^60 s became 0).
#[tokio::test]
async fn a_huge_retry_delay_is_not_cut_short() {
    let c = servers(3);
    let holder = redlock(&c).lock("r", secs(30)).await.unwrap();
    for jitter in [Duration::ZERO, HUGE, Duration::MAX] {
        let waiter = builder(&c)
            .wake_on_release(false)
            .retry_delay(HUGE)
            .retry_jitter(jitter)
            .build()
            .unwrap();
        let err = waiter
            .lock("r", secs(5))
            .retries(5)
            .wait(Duration::from_millis(1_500))
            .await
            .unwrap_err();
        match err {
            Error::NotAcquired {
                attempts, gave_up, ..
            } if jitter.is_zero() => {
                assert_eq!(
                    (attempts, gave_up),
                    (1, GaveUp::Deadline),
                    "jitter {jitter:?}"
                );
            }
            Error::NotAcquired { .. } => {}
            other => panic!("{other}"),
        }
    }
    holder.release().await.unwrap();
}

/// The longest waits and pauses there are: a waiter told to wait for ever,
/// with retry pauses of 2^60 s or `Duration::MAX`, still gets the lock as
/// soon as its holder lets go (the release is announced).
#[tokio::test]
async fn the_longest_waits_and_pauses_work() {
    let c = servers(3);
    let holder = redlock(&c).lock("r", secs(30)).await.unwrap();
    let waiter = builder(&c)
        .wait_timeout(Duration::MAX)
        .retry_delay(Duration::MAX)
        .retry_jitter(HUGE)
        .retry_count(u32::MAX)
        .build()
        .unwrap();
    let started = Instant::now();
    let waiting = tokio::spawn(async move {
        let lock = waiter.lock("r", secs(5)).wait(Duration::MAX).await;
        (waiter, lock)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    let (_waiter, lock) = tokio::time::timeout(secs(20), waiting)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap();
    lock.unwrap().release().await.unwrap();
    assert!(started.elapsed() < secs(20));
}

/// The per-call wait, as long as a `Duration` goes, on a free resource.
#[tokio::test]
async fn a_call_may_wait_for_ever() {
    let c = servers(3);
    let redlock = redlock(&c);
    let lock = redlock
        .lock("r", secs(5))
        .wait(Duration::MAX)
        .retries(u32::MAX)
        .await
        .unwrap();
    lock.release().await.unwrap();
}
