//! `handoff` and `handoff_many`: waiters on one resource, each with a client
//! of its own, holding 2 ms and spending 2 ms elsewhere, waiting with each
//! library's own blocking lock ([`Waiting`]: redquorum woken by releases,
//! redquorum polling, rslock). Measures the wait from asking to holding,
//! the share of the time the lock was held and the gap from a release to
//! the next acquire; counts and kinds interleaved round by round.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redquorum::Redlock;

use crate::Scale;
use crate::clients::Client;
use crate::measure::{Sample, Usage};

/// How a hand-off waiter waits: redquorum woken by releases, redquorum
/// polling, or rslock (which polls).
#[derive(Clone, Copy, PartialEq)]
pub enum Waiting {
    Wake,
    Poll,
    Rslock,
}

impl Waiting {
    pub fn imp(self) -> &'static str {
        match self {
            Waiting::Wake | Waiting::Poll => "redquorum",
            Waiting::Rslock => "rslock",
        }
    }

    pub fn mode(self) -> &'static str {
        match self {
            Waiting::Wake => "wake",
            Waiting::Poll | Waiting::Rslock => "poll",
        }
    }

    /// A client of its own for one waiter, as a separate process would
    /// have: its own connections (and subscriptions). redquorum waits
    /// without a retry limit, as rslock's `acquire` does; everything else
    /// is the libraries' defaults.
    pub fn client(self, urls: &[String]) -> Client {
        let redquorum = |wake| {
            let redlock = Redlock::builder()
                .nodes(urls)
                .retry_count(u32::MAX)
                .wake_on_release(wake)
                .build()
                .unwrap();
            Client::Redquorum(redlock)
        };
        match self {
            Waiting::Wake => redquorum(true),
            Waiting::Poll => redquorum(false),
            Waiting::Rslock => Client::Rslock(rslock::LockManager::new(urls.to_vec())),
        }
    }
}

/// `waiters` want one resource: hold 2 ms, release, 2 ms elsewhere,
/// again, for each waiter count in `counts` (8 and 256: `handoff` and
/// `handoff_many`). Besides the wait from asking to holding (the p50/p99),
/// it measures the share of the time the lock was held (from acquired to
/// released) and the gap from a holder starting its release to the next
/// holder's acquire. The counts are interleaved round by round as the
/// implementations are (8, 256, 8, 256 …, each kind in turn within): the
/// issue's goal compares the 256-waiter CPU per acquisition with the
/// 8-waiter one, and figures taken a minute apart on a shared machine
/// drift by a third. Returns, per count, a sample per kind.
pub async fn handoff(
    kinds: &[Waiting],
    urls: &[String],
    scale: Scale,
    counts: &[usize],
) -> Vec<Vec<Sample>> {
    let mut samples: Vec<Vec<Sample>> = counts
        .iter()
        .map(|_| kinds.iter().map(|_| Sample::default()).collect())
        .collect();
    let mut gaps: Vec<Vec<Vec<Duration>>> = counts
        .iter()
        .map(|_| kinds.iter().map(|_| Vec::new()).collect())
        .collect();
    let rounds = scale.rounds.min(4);
    // In the full run four rounds of two seconds: each count and kind is
    // timed for 8 s in all.
    let round = Duration::from_secs_f64(scale.timed_secs / 2.0);
    for r in 0..rounds {
        for (c, &waiters) in counts.iter().enumerate() {
            for (k, kind) in kinds.iter().enumerate() {
                let resource: Arc<str> =
                    format!("bench:handoff:{waiters}:{}:{k}:{r}", kind.imp()).into();
                handoff_round(
                    kind,
                    urls,
                    &resource,
                    waiters,
                    round,
                    &mut samples[c][k],
                    &mut gaps[c][k],
                )
                .await;
            }
        }
    }
    for (samples, gaps) in samples.iter_mut().zip(gaps) {
        for (s, gaps) in samples.iter_mut().zip(gaps) {
            let held = s.extra.remove("held_us").unwrap_or_default() / 1e6;
            s.extra.insert("held_share", held / s.busy.as_secs_f64());
            let mut gaps = Sample {
                latencies: gaps,
                ..Sample::default()
            };
            s.extra.insert("gap_p50_us", gaps.percentile_us(0.5));
            s.extra.insert("gap_p99_us", gaps.percentile_us(0.99));
        }
    }
    samples
}

/// One timed round of [`handoff`]: `waiters` clients of `kind` on
/// `resource` for `round`, added to `sample` and `gaps`.
async fn handoff_round(
    kind: &Waiting,
    urls: &[String],
    resource: &Arc<str>,
    waiters: usize,
    round: Duration,
    sample: &mut Sample,
    gaps: &mut Vec<Duration>,
) {
    const HOLD: Duration = Duration::from_millis(2);
    const ELSEWHERE: Duration = Duration::from_millis(2);
    let clients: Vec<Client> = (0..waiters).map(|_| kind.client(urls)).collect();
    // Connect, then subscribe, before timing: what is timed is the steady
    // state. (The waking kind subscribes when a call first has to wait, so
    // every client waits once, all at once; taken in turn, as it used to
    // be, no call waited, and the first timed call of every waiter paid for
    // its subscriptions.)
    for c in &clients {
        c.hold(resource, Duration::ZERO).await.unwrap();
    }
    futures::future::join_all(clients.iter().map(|c| c.hold(resource, HOLD))).await;
    let stop = Arc::new(AtomicBool::new(false));
    let usage = Usage::now();
    let started = Instant::now();
    let handles: Vec<_> = clients
        .into_iter()
        .map(|client| {
            let (resource, stop) = (resource.clone(), stop.clone());
            tokio::spawn(async move {
                // (asked, acquired, release started, released)
                let mut turns = Vec::new();
                let mut errors = 0;
                while !stop.load(Ordering::Relaxed) {
                    let asked = Instant::now();
                    match client.hold(&resource, HOLD).await {
                        Ok((got, letting_go)) => {
                            turns.push((asked, got, letting_go, Instant::now()))
                        }
                        Err(e) => {
                            // The first of each waiter's, so that an error
                            // figure says what it was.
                            if errors == 0 {
                                eprintln!("  handoff ({waiters} waiters) error: {e}");
                            }
                            errors += 1
                        }
                    }
                    tokio::time::sleep(ELSEWHERE).await;
                }
                (turns, errors)
            })
        })
        .collect();
    tokio::time::sleep(round).await;
    stop.store(true, Ordering::Relaxed);
    let mut turns = Vec::new();
    for h in handles {
        let (t, errors) = h.await.unwrap();
        turns.extend(t);
        sample.errors += errors;
    }
    sample.busy += started.elapsed();
    usage.charge(sample);
    turns.sort_by_key(|t| t.1);
    for (asked, got, _, released) in &turns {
        sample.latencies.push(*got - *asked);
        *sample.extra.entry("held_us").or_default() += (*released - *got).as_secs_f64() * 1e6;
    }
    sample.ops += turns.len() as u64;
    for pair in turns.windows(2) {
        gaps.push(pair[1].1.saturating_duration_since(pair[0].2));
    }
}
