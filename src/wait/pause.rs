//! How long a waiter sleeps after a failed attempt, and what a call keeps
//! between its attempts ([`Waiting`]).
//!
//! A failed attempt tells the waiter what it saw of the key's other owners
//! ([`Seen`], the quorum's observation: one holder on a majority, a split,
//! a quarantine, too few answers). [`pause`] turns that into a sleep: until
//! the holder's keys expire (capped, and drawn at random so that waiters
//! do not all wake at once), a short random pause to settle a split, or
//! the ordinary retry pause ([`retry_delay`]) whenever a release could go
//! unheard. A release that wakes the waiter ([`Listener::wake`]) ends the
//! sleep sooner; the sleep is what is left when no wake-up comes.

use std::sync::Arc;
use std::time::Duration;

use super::listener::{Listener, Snapshots};
use super::waiters::Waiters;
use crate::config::Options;
use crate::proto::quorum::{Seen, Tally};

/// The pause before the next attempt: uniform in `delay ± jitter`.
pub(crate) fn retry_delay(delay: Duration, jitter: Duration) -> Duration {
    uniform(delay.saturating_sub(jitter), delay.saturating_add(jitter))
}

/// Uniform in `low..=high`, in microseconds; a bound beyond `u64::MAX` µs
/// (584 542 years) is taken as that, not cut to its low 64 bits.
fn uniform(low: Duration, high: Duration) -> Duration {
    let micros = |d: Duration| u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    let (low, high) = (micros(low), micros(high));
    Duration::from_micros(rand::random_range(low..=high.max(low)))
}

/// How long a waiter sleeps before it tries again (an announced release
/// wakes it sooner), and whether that next attempt counts against the
/// retry limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pause {
    pub(crate) sleep: Duration,
    /// False for the quick retries that settle a split vote: contention
    /// among waiters, not polling.
    pub(crate) counted: bool,
}

/// The longest a waiter sleeps on a holder's expiry, in retry delays, but
/// never less than [`HOLDER_SLEEP_FLOOR`]. A holder whose node cannot
/// announce its release (an ACL without `PUBLISH` there) would otherwise
/// keep a waiter asleep for the whole TTL after letting go; this costs one
/// attempt per ten delays (per second, at least) while a long lock is held.
const HOLDER_SLEEP_CAP: u32 = 10;

/// The least of the cap on a waiter's sleep on a holder's expiry, so that a
/// short retry delay does not turn waiting into polling.
const HOLDER_SLEEP_FLOOR: Duration = Duration::from_secs(1);

/// A capped sleep is drawn from the last `1 / HOLDER_SLEEP_SPREAD` of the
/// cap (or the last `jitter` of it, if that is more): waiters that saw the
/// same long-lived holder, or the same split taken for one, must not all
/// wake at the same instant. (Cut to the cap after the jitter was added,
/// every such sleep was exactly the cap: three semaphore contenders across
/// zones woke together every 2 s, split the vote again, and all gave up.)
const HOLDER_SLEEP_SPREAD: u32 = 10;

/// The pause of a waiter after a failed attempt that observed the key.
/// `listening` says whether announcements can be relied on: enough nodes
/// are subscribed that any release that reaches a majority is heard.
///
/// * A holder with a known expiry: sleep until its keys expire (a release
///   wakes the waiter sooner), plus up to `jitter` so that waiters do not
///   all try at the same instant, but no longer than the cap,
///   [`HOLDER_SLEEP_CAP`] retry delays (or [`HOLDER_SLEEP_FLOOR`]); a sleep
///   that the cap cuts is drawn anew below the cap
///   ([`HOLDER_SLEEP_SPREAD`]), so that it is random too.
/// * Contenders split the vote: try again after a random pause of up to
///   two attempts' time, so that one of them wins the next round; the
///   bound doubles with each split in a row (`streak`, this one included),
///   so that a split that does not resolve itself (an owner left with a
///   minority of keys) soon costs what polling does. These retries are
///   not counted until they are as slow as polling.
/// * Nodes kept out by the restart guard would make a majority once their
///   quarantines end: sleep until then, plus up to `jitter`, not counted
///   as a retry (the deadline bounds it; one too far gives up at once).
/// * Otherwise, and whenever announcements could be missed: the ordinary
///   retry pause, `delay ± jitter`, at the most.
pub(crate) fn pause(
    seen: &Seen,
    listening: bool,
    attempt: Duration,
    streak: u32,
    delay: Duration,
    jitter: Duration,
) -> Pause {
    let poll = retry_delay(delay, jitter);
    let (informed, counted) = match seen {
        Seen::Holder { ttl: Some(ttl), .. } => {
            let cap = delay
                .saturating_mul(HOLDER_SLEEP_CAP)
                .max(HOLDER_SLEEP_FLOOR)
                .max(poll);
            let until = ttl.saturating_add(uniform(Duration::ZERO, jitter));
            let sleep = if until <= cap {
                until
            } else {
                let spread = (cap / HOLDER_SLEEP_SPREAD).max(jitter);
                uniform(cap.saturating_sub(spread), cap)
            };
            (sleep, true)
        }
        Seen::Contended => {
            let bound = attempt.saturating_mul(2u32.saturating_pow(streak));
            (uniform(Duration::ZERO, bound.min(poll)), bound >= poll)
        }
        // A known wait, not a poll: not counted (the deadline bounds it).
        Seen::Quarantined { wait } => (wait.saturating_add(uniform(Duration::ZERO, jitter)), false),
        Seen::Holder { ttl: None, .. } | Seen::Unreachable => (poll, true),
    };
    Pause {
        sleep: if listening {
            informed
        } else {
            informed.min(poll)
        },
        counted,
    }
}

/// What one call keeps between its attempts.
pub(crate) struct Waiting<'a> {
    waiters: &'a Waiters,
    options: &'a Options,
    /// The release channels, once an attempt has failed (with
    /// `wake_on_release`).
    pub(crate) channel: Option<Arc<Listener>>,
    /// The token of the holder the last attempt saw on a majority.
    pub(crate) awaited: Option<Box<str>>,
    /// Split votes in a row.
    streak: u32,
}

impl<'a> Waiting<'a> {
    /// Nothing kept yet: a call's first attempt is still to come.
    pub(crate) fn new(waiters: &'a Waiters, options: &'a Options) -> Waiting<'a> {
        Waiting {
            waiters,
            options,
            channel: None,
            awaited: None,
            streak: 0,
        }
    }

    /// How long to wait after a failed attempt, and whether the next one
    /// counts as a retry. `mark` is the channel's state from before the
    /// attempt; `left`, how long a new attempt may still start.
    pub(crate) async fn pause(
        &mut self,
        keys: &[Box<str>],
        tally: &Tally,
        took: Duration,
        mark: Option<&Snapshots>,
        left: Duration,
    ) -> Pause {
        let options = self.options;
        let Some(channel) = &self.channel else {
            if !options.wake_on_release {
                return Pause {
                    sleep: retry_delay(options.retry_delay, options.retry_jitter),
                    counted: true,
                };
            }
            // Listen from now on, and try again at once: a release made
            // before the subscription would not be heard. Not a poll.
            let channel = Arc::new(self.waiters.listen(keys));
            let _ = tokio::time::timeout(left, channel.ensure()).await;
            self.channel = Some(channel);
            return Pause {
                sleep: Duration::ZERO,
                counted: false,
            };
        };
        let mut seen = tally.seen();
        if let Seen::Holder { token, .. } = &seen
            && channel.was_announced(token)
        {
            // Its release is under way (announced by the nodes it has
            // reached; the others follow): like a split, settled in a
            // round trip or two.
            seen = Seen::Contended;
        }
        self.streak = if seen == Seen::Contended {
            self.streak + 1
        } else {
            0
        };
        self.awaited = match &seen {
            Seen::Holder { token, .. } => Some(token.clone()),
            _ => None,
        };
        // Judged on the subscriptions that were there before the attempt:
        // one made since may have missed a release that the attempt did not
        // see either.
        let heard = mark.is_some_and(|mark| channel.heard_since(mark));
        // Mends subscriptions that broke.
        let _ = tokio::time::timeout(left, channel.ensure()).await;
        if !heard && channel.listening() {
            // Listening again: try once more at once, as after the first
            // subscription (counted, so that a flapping node cannot make
            // this loop for ever).
            return Pause {
                sleep: Duration::ZERO,
                counted: true,
            };
        }
        pause(
            &seen,
            heard,
            took,
            self.streak,
            options.retry_delay,
            options.retry_jitter,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn retry_delay_stays_within_jitter_and_varies() {
        let draws: Vec<Duration> = (0..200).map(|_| retry_delay(ms(200), ms(100))).collect();
        assert!(draws.iter().all(|d| (ms(100)..=ms(300)).contains(d)));
        assert!(draws.iter().any(|d| *d != draws[0]), "no randomness");
        assert_eq!(retry_delay(ms(10), ms(50)).max(ms(60)), ms(60));
        assert_eq!(retry_delay(ms(7), Duration::ZERO), ms(7));
        // Delays too long for 64 bits of microseconds are as long as they
        // go, never their low bits (2^60 s was 0 µs).
        let huge = Duration::from_secs(1 << 60);
        let most = Duration::from_micros(u64::MAX);
        assert_eq!(retry_delay(huge, Duration::ZERO), most);
        assert_eq!(retry_delay(Duration::MAX, Duration::ZERO), most);
    }

    #[test]
    fn waiters_sleep_until_expiry_split_briefly_and_poll_when_deaf() {
        let (delay, jitter) = (ms(200), ms(100));
        let attempt = ms(1);
        let pause =
            |seen: &Seen, listening, streak| pause(seen, listening, attempt, streak, delay, jitter);
        let holder = |ttl| Seen::Holder {
            ttl: Some(ms(ttl)),
            token: "a".into(),
        };
        let forever = Seen::Holder {
            ttl: None,
            token: "a".into(),
        };
        for _ in 0..100 {
            // A holder whose keys expire in 1.5 s: no polling meanwhile.
            let p = pause(&holder(1_500), true, 0);
            assert!(
                (ms(1_500)..=ms(1_600)).contains(&p.sleep) && p.counted,
                "{p:?}"
            );
            // One whose keys expire in a minute: at most ten delays, in
            // case its release is not announced (drawn from the last tenth).
            let p = pause(&holder(60_000), true, 0);
            assert!((ms(1_800)..=ms(2_000)).contains(&p.sleep), "{p:?}");
            // With a short delay, a second at the least.
            let short = |seen: &Seen| super::pause(seen, true, attempt, 0, ms(20), ms(5));
            let p = short(&holder(60_000));
            assert!((ms(900)..=ms(1_000)).contains(&p.sleep), "{p:?}");
            // Not listening: never longer than a poll.
            let p = pause(&holder(1_500), false, 0);
            assert!((ms(100)..=ms(300)).contains(&p.sleep), "{p:?}");
            // A split: a few attempts' time, doubling with the streak,
            // never beyond a poll, and not counted until as slow as one.
            let p = pause(&Seen::Contended, true, 1);
            assert!(p.sleep <= ms(2) && !p.counted, "{p:?}");
            let p = pause(&Seen::Contended, true, 3);
            assert!(p.sleep <= ms(8) && !p.counted, "{p:?}");
            let p = pause(&Seen::Contended, true, 40);
            assert!(p.sleep <= ms(300) && p.counted, "{p:?}");
            // Nodes not answering, or a holder without expiry: poll.
            for seen in [&Seen::Unreachable, &forever] {
                let p = pause(seen, true, 0);
                assert!((ms(100)..=ms(300)).contains(&p.sleep) && p.counted, "{p:?}");
            }
        }
    }

    /// A sleep that the cap cuts is as random as any other: waiters that
    /// saw the same long-lived holder (or a split they took for one) do not
    /// all wake at the same instant. Cut to the cap after the jitter was
    /// added, every such sleep was exactly 2 s, and three contenders woke
    /// together every 2 s, split the vote again, and all gave up.
    #[test]
    fn capped_sleeps_are_jittered_too() {
        let holder = |ttl| Seen::Holder {
            ttl: Some(ms(ttl)),
            token: "permits:1:ab".into(),
        };
        let sleeps = |ttl, jitter| -> Vec<Duration> {
            (0..200)
                .map(|_| pause(&holder(ttl), true, ms(80), 0, ms(200), jitter).sleep)
                .collect()
        };
        for (ttl, jitter) in [(30_000, ms(100)), (1_950, ms(100)), (30_000, ms(0))] {
            let draws = sleeps(ttl, jitter);
            // Never beyond the cap, never sooner than its last tenth.
            assert!(
                draws.iter().all(|d| (ms(1_800)..=ms(2_000)).contains(d)),
                "{ttl} ms, jitter {jitter:?}: {draws:?}"
            );
            // Spread over it: no two waiters bound to wake together. (Each
            // bound fails with odds of 2^-200.)
            assert!(draws.iter().any(|d| *d < ms(1_900)), "{draws:?}");
            assert!(draws.iter().any(|d| *d > ms(1_900)), "{draws:?}");
        }
        // A large jitter spreads a capped sleep over the last jitter of it.
        let draws: Vec<Duration> = (0..200)
            .map(|_| pause(&holder(30_000), true, ms(80), 0, ms(200), ms(600)).sleep)
            .collect();
        assert!(draws.iter().all(|d| (ms(1_400)..=ms(2_000)).contains(d)));
        assert!(draws.iter().any(|d| *d < ms(1_700)), "{draws:?}");
        // Below the cap, as before: the holder's expiry plus the jitter.
        let draws = sleeps(1_500, ms(100));
        assert!(draws.iter().all(|d| (ms(1_500)..=ms(1_600)).contains(d)));
    }

    /// Nodes kept out by the restart guard (see
    /// `proto::quorum`'s `nodes_kept_out_by_the_restart_guard_are_waited_for`):
    /// waited for, plus up to the jitter, and not counted as a retry.
    #[test]
    fn a_quarantine_is_waited_for_and_not_counted() {
        let seen = Seen::Quarantined {
            wait: Duration::from_secs(5),
        };
        let p = pause(&seen, true, ms(5), 0, ms(200), ms(50));
        assert!(
            (ms(5_000)..=ms(5_050)).contains(&p.sleep) && !p.counted,
            "{p:?}"
        );
    }

    /// Semaphore contenders that split the vote (see `proto::quorum`'s
    /// `contenders_of_a_semaphore_split_the_vote_and_its_holders_do_not`):
    /// a short random pause, not counted, and one of them wins the next
    /// round.
    #[test]
    fn contenders_of_a_semaphore_pause_briefly() {
        for _ in 0..100 {
            let p = pause(&Seen::Contended, true, ms(80), 1, ms(200), ms(0));
            assert!(p.sleep <= ms(160) && !p.counted, "{p:?}");
        }
    }
}
