//! A monotonic clock that keeps counting while the machine is suspended.
//!
//! The validity of a lock is measured against the TTL that the Redis nodes
//! count down on their own clocks. If our clock stopped while the machine was
//! suspended, a lock would look valid for longer than the nodes keep it.
//! `std::time::Instant` is `CLOCK_MONOTONIC` on Linux, which stops during
//! suspend; `CLOCK_BOOTTIME` does not, so that is what we read there. Other
//! platforms fall back to `Instant`.

use std::time::Duration;

/// A point in time: the time since boot on Linux, since the first reading
/// elsewhere. Only differences between moments mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Moment(Duration);

impl Moment {
    /// The current moment.
    pub(crate) fn now() -> Moment {
        // Unit tests drive time with tokio's paused clock; they read that
        // one inside a runtime.
        #[cfg(test)]
        if tokio::runtime::Handle::try_current().is_ok() {
            return Moment(test_clock());
        }
        Moment(read_clock())
    }

    /// The time from `self` to now, zero if now is earlier.
    pub(crate) fn elapsed(self) -> Duration {
        Moment::now().0.saturating_sub(self.0)
    }

    /// The time from now until `self`, zero if it has passed.
    pub(crate) fn remaining(self) -> Duration {
        self.0.saturating_sub(Moment::now().0)
    }

    /// `self + d`.
    pub(crate) fn after(self, d: Duration) -> Moment {
        Moment(self.0.saturating_add(d))
    }

    /// As nanoseconds, to keep in an atomic. A moment more than 584 years
    /// after boot (a deadline of a TTL that long) saturates at
    /// `u64::MAX - 1`: order is kept, it never wraps to an earlier moment,
    /// and `u64::MAX` stays free for a sentinel.
    pub(crate) fn as_nanos(self) -> u64 {
        u64::try_from(self.0.as_nanos()).map_or(u64::MAX - 1, |n| n.min(u64::MAX - 1))
    }

    /// Back from [`as_nanos`](Self::as_nanos).
    pub(crate) fn from_nanos(nanos: u64) -> Moment {
        Moment(Duration::from_nanos(nanos))
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn read_clock() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_BOOTTIME exists on
    // every Linux since 2.6.39 and clock_gettime cannot fail for it then.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn read_clock() -> Duration {
    use std::sync::LazyLock;
    use std::time::Instant;
    static BASE: LazyLock<Instant> = LazyLock::new(Instant::now);
    BASE.elapsed()
}

/// Tokio's clock, which a test can pause and advance, as a duration since
/// the first reading.
#[cfg(test)]
fn test_clock() -> Duration {
    use std::sync::LazyLock;
    // An hour back, so that a paused runtime's clock, frozen when the
    // runtime was built (perhaps before this first reading), is never
    // before it: readings would be clamped to zero and lose time.
    static BASE: LazyLock<std::time::Instant> = LazyLock::new(|| {
        let now = std::time::Instant::now();
        now.checked_sub(Duration::from_secs(3600)).unwrap_or(now)
    });
    let base = *BASE;
    tokio::time::Instant::now()
        .into_std()
        .saturating_duration_since(base)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_goes_back_and_counts_real_time() {
        let a = Moment::now();
        std::thread::sleep(Duration::from_millis(20));
        let b = Moment::now();
        assert!(b > a);
        assert!(a.elapsed() >= Duration::from_millis(20));
    }

    #[test]
    fn nanos_keep_order_and_saturate_below_the_sentinel() {
        let now = Moment::now();
        let thousand_years = Duration::from_secs(1_000 * 365 * 24 * 3600);
        let far = now.after(thousand_years);
        let farther = far.after(thousand_years);
        assert!(far.as_nanos() > now.as_nanos(), "a far deadline wrapped");
        assert_eq!(far.as_nanos(), u64::MAX - 1);
        assert_eq!(farther.as_nanos(), far.as_nanos());
        assert_eq!(Moment::from_nanos(now.as_nanos()), now);
    }

    #[test]
    fn remaining_saturates_at_zero() {
        let past = Moment::now();
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(past.remaining(), Duration::ZERO);
        let future = Moment::now().after(Duration::from_secs(60));
        assert!(future.remaining() > Duration::from_secs(59));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_boot_time_not_process_time() {
        // CLOCK_BOOTTIME counts from boot, so it is at least the uptime the
        // kernel reports (read after it, to stay on the safe side).
        let now = Moment::now().0.as_secs_f64();
        let uptime: f64 = std::fs::read_to_string("/proc/uptime")
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (now - uptime).abs() < 1.0,
            "boot clock {now} vs uptime {uptime}"
        );
    }
}
