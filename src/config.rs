//! Configuration: the [`Builder`], its defaults, and the checks it makes.
//!
//! Everything is checked before any I/O. The node list and the options are
//! checked by [`Builder::build`]; the TTL, which each call chooses, is checked
//! at the start of [`Redlock::lock`](crate::Redlock::lock) against the same
//! options. Building connects to nothing: nodes connect on first use, and
//! reconnect by themselves after a node restarts.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | [`key_prefix`](Builder::key_prefix) | `"redquorum:"` | prepended to every resource name to form the Redis key |
//! | [`drift_factor`](Builder::drift_factor) | `0.01` | clock drift allowance: `ttl × factor + 2 ms` is taken off the validity |
//! | [`node_timeout`](Builder::node_timeout) | 50 ms | bound on each request to one node, connection set-up included |
//! | [`retry_count`](Builder::retry_count) | 10 | retries after the first attempt in [`lock`](crate::Redlock::lock) |
//! | [`retry_delay`](Builder::retry_delay) | 200 ms | mean pause between attempts |
//! | [`retry_jitter`](Builder::retry_jitter) | 100 ms | the pause is drawn uniformly from `delay ± jitter` |
//! | [`wait_timeout`](Builder::wait_timeout) | none | overall deadline for [`lock`](crate::Redlock::lock) |
//! | [`min_validity`](Builder::min_validity) | 0 | an acquisition with less validity left counts as failed |
//! | [`keep_alive_fraction`](Builder::keep_alive_fraction) | 1/3 | the watchdog extends every `ttl × fraction` |
//! | [`wake_on_release`](Builder::wake_on_release) | on | waiters sleep until a release is announced instead of polling |
//! | [`restart_guard`](Builder::restart_guard) | on | a node that restarted gets no vote on acquisitions until the locks it may have forgotten have expired |

use std::collections::HashSet;
use std::time::Duration;

use crate::error::{ConfigError, Error};
use crate::redlock::Redlock;

/// The largest TTL accepted. Redis rejects an expiry whose absolute time in
/// milliseconds overflows a signed 64-bit integer; half of that leaves room
/// for any server clock.
pub const MAX_TTL: Duration = Duration::from_millis(i64::MAX as u64 / 2);

/// The constant part of the clock drift allowance: Redis expires keys with
/// up to 1 ms of imprecision on each side.
const DRIFT_CONSTANT: Duration = Duration::from_millis(2);

/// Builds a [`Redlock`]. Start from [`Redlock::builder`].
///
/// ```
/// use std::time::Duration;
/// let redlock = redquorum::Redlock::builder()
///     .nodes(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"])
///     .node_timeout(Duration::from_millis(20))
///     .retry_count(3)
///     .build()?;
/// assert_eq!(redlock.quorum(), 2);
/// # Ok::<(), redquorum::Error>(())
/// ```
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct Builder {
    urls: Vec<String>,
    options: Options,
}

/// The validated options, shared by every lock of a [`Redlock`].
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) key_prefix: String,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) retry_count: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) wait_timeout: Option<Duration>,
    pub(crate) min_validity: Duration,
    pub(crate) keep_alive_fraction: f64,
    pub(crate) wake_on_release: bool,
    pub(crate) restart_guard: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            key_prefix: "redquorum:".to_owned(),
            drift_factor: 0.01,
            node_timeout: Duration::from_millis(50),
            retry_count: 10,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            wait_timeout: None,
            min_validity: Duration::ZERO,
            keep_alive_fraction: 1.0 / 3.0,
            wake_on_release: true,
            restart_guard: true,
        }
    }
}

impl Builder {
    /// Adds one node, as a URL: `redis://[user:password@]host:port[/db]`.
    pub fn node(mut self, url: impl AsRef<str>) -> Self {
        self.urls.push(url.as_ref().to_owned());
        self
    }

    /// Adds several nodes. Use an odd number of independent masters (not
    /// replicas of each other): five tolerate two failures.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.urls
            .extend(urls.into_iter().map(|u| u.as_ref().to_owned()));
        self
    }

    /// The prefix of every Redis key: the key of resource `r` is
    /// `prefix + r`. Default `"redquorum:"`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.key_prefix = prefix.into();
        self
    }

    /// The clock drift factor, in `0.0..1.0`. The validity of a lock is cut by
    /// `ttl × factor + 2 ms`, for the difference in clock rates between this
    /// process and the nodes. Default `0.01`, as in the reference clients.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.options.drift_factor = factor;
        self
    }

    /// The bound on each request to one node, connection set-up included.
    /// Keep it small against the TTL: the Redis docs suggest 5–50 ms for a
    /// 10 s TTL. A dead or frozen node costs at most this much, and nothing
    /// when a majority has already answered. Default 50 ms.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.options.node_timeout = timeout;
        self
    }

    /// How many times [`lock`](crate::Redlock::lock) tries again after a
    /// failed attempt. Default 10; `0` makes it behave like
    /// [`try_lock`](crate::Redlock::try_lock). With
    /// [`wake_on_release`](Self::wake_on_release), attempts prompted by the
    /// announced release of the holder a waiter waited for are not counted
    /// (another waiter won: progress),
    /// nor are the quick retries that settle a vote split among waiters;
    /// [`wait_timeout`](Self::wait_timeout) bounds those.
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.options.retry_count = retries;
        self
    }

    /// The mean pause between attempts. Default 200 ms.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.options.retry_delay = delay;
        self
    }

    /// The random spread of the pause: it is drawn uniformly from
    /// `delay − jitter ..= delay + jitter`, so that contending clients fall
    /// out of step. Default 100 ms.
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.options.retry_jitter = jitter;
        self
    }

    /// An overall deadline for [`lock`](crate::Redlock::lock): it gives up
    /// rather than start an attempt that could end after it (one that
    /// starts less than a node timeout before the deadline). The first
    /// attempt is always made; the rollback of a failed attempt may add up
    /// to one node timeout. Default: none (only the retry count bounds the
    /// wait).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.options.wait_timeout = Some(timeout);
        self
    }

    /// The least validity an acquisition must leave to count: time for the
    /// critical section to do anything at all. Default zero (any positive
    /// validity counts).
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.options.min_validity = min;
        self
    }

    /// How often the watchdog of [`Lock::keep_alive`](crate::Lock::keep_alive)
    /// and [`Redlock::with_lock`] extends a lock: every `ttl × fraction`, in
    /// `(0.0, 1.0)`. Default a third, as Redisson's watchdog: two extensions
    /// can fail before the lock runs out.
    pub fn keep_alive_fraction(mut self, fraction: f64) -> Self {
        self.options.keep_alive_fraction = fraction;
        self
    }

    /// Whether [`lock`](crate::Redlock::lock) waits for releases to be
    /// announced rather than polling. Default on.
    ///
    /// On: a waiter subscribes (Redis pub/sub, one connection per node per
    /// `Redlock`, shared by all its waiters) to the resource's release
    /// channel, which the release script publishes to; it tries again as
    /// soon as a release is announced, or when the holder's keys expire,
    /// and makes no requests in between. Where too few subscriptions work,
    /// it falls back to the retry pause. Releases are announced whatever
    /// this says, so waiters in other processes are woken either way.
    ///
    /// Off: it polls, trying again every
    /// [`retry_delay`](Self::retry_delay) ± [`retry_jitter`](Self::retry_jitter),
    /// as most Redlock clients do.
    pub fn wake_on_release(mut self, on: bool) -> Self {
        self.options.wake_on_release = on;
        self
    }

    /// Whether a node that restarted is kept out of acquisitions until the
    /// locks it may have forgotten have expired. Default on.
    ///
    /// A node restarted without persistence comes back empty: it has
    /// forgotten the keys it granted, and its vote could hand a lock to a
    /// second client while the first still holds it on the other nodes. The
    /// Redis docs ask operators to keep a crashed node down for longer than
    /// the longest TTL; the guard enforces that from the client. On every
    /// new connection to a node it reads the node's `run_id` and uptime
    /// (`INFO server`). When the run id has changed since the last
    /// connection and the node has been up for less than the longest TTL
    /// this `Redlock` has asked for (in acquisitions and extensions), the
    /// node's vote on acquisitions is refused, with
    /// [`NodeFailure::Restarted`](crate::NodeFailure::Restarted), until that
    /// TTL has passed since the restart (with a second to spare: Redis
    /// reports its uptime in whole wall-clock seconds). Releases and
    /// extensions are still sent: they compare the token, and cannot create
    /// a key.
    ///
    /// What it does not cover:
    /// * Keys granted with a longer TTL than this `Redlock` has asked for:
    ///   other clients of the same resources that use longer TTLs are not
    ///   covered (give them all the same TTLs, or their own guard).
    /// * A restart that happened before this `Redlock` first connected to
    ///   the node: with no run id to compare, it cannot tell.
    /// * A node whose ACL forbids `INFO`, or that renamed it: it cannot be
    ///   watched; a warning is logged once per node and it votes as usual.
    ///
    /// A node run with `appendonly yes` and `appendfsync always` keeps its
    /// keys across restarts and does not need the guard: turn it off there.
    /// The cost is one `INFO server` round trip per new connection (on first
    /// use and after each reconnect), within the node timeout.
    pub fn restart_guard(mut self, on: bool) -> Self {
        self.options.restart_guard = on;
        self
    }

    /// Checks the configuration and builds the [`Redlock`]. Does no I/O.
    pub fn build(self) -> Result<Redlock, Error> {
        let o = &self.options;
        if self.urls.is_empty() {
            return Err(ConfigError::NoNodes.into());
        }
        if !(o.drift_factor.is_finite() && (0.0..1.0).contains(&o.drift_factor)) {
            return Err(ConfigError::InvalidDriftFactor(o.drift_factor).into());
        }
        if !(o.keep_alive_fraction > 0.0 && o.keep_alive_fraction < 1.0) {
            return Err(ConfigError::InvalidKeepAliveFraction(o.keep_alive_fraction).into());
        }
        if o.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout.into());
        }
        let mut clients = Vec::with_capacity(self.urls.len());
        let mut seen = HashSet::new();
        for url in &self.urls {
            let client =
                redis::Client::open(url.as_str()).map_err(|e| ConfigError::InvalidUrl {
                    url: redact(url),
                    reason: e.to_string(),
                })?;
            let node = node_identity(&client);
            if !seen.insert(node.clone()) {
                return Err(ConfigError::DuplicateNode { node }.into());
            }
            clients.push(client);
        }
        Ok(Redlock::from_parts(clients, self.options))
    }
}

/// The identity of a node for duplicate detection: host (lower case) and
/// port, or socket path. The database number is left out on purpose: two
/// databases of one server are one failure domain.
fn node_identity(client: &redis::Client) -> String {
    client
        .get_connection_info()
        .addr()
        .to_string()
        .to_ascii_lowercase()
}

/// A URL with its password replaced, for error messages and logs.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}***{}", &url[..scheme_end + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// The numbers one acquisition works with, derived from its TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TtlPlan {
    /// The TTL in whole milliseconds, as sent with `PX`.
    pub(crate) ttl_ms: u64,
    /// The TTL as a duration (`ttl_ms` exactly).
    pub(crate) ttl: Duration,
    /// The clock drift allowance.
    pub(crate) drift: Duration,
}

impl Options {
    /// Checks a TTL against the options and derives the drift allowance.
    pub(crate) fn plan(&self, ttl: Duration) -> Result<TtlPlan, ConfigError> {
        if ttl > MAX_TTL {
            return Err(ConfigError::TtlTooLarge { ttl, max: MAX_TTL });
        }
        let ttl_ms = ttl.as_millis() as u64;
        if ttl_ms == 0 {
            return Err(ConfigError::ZeroTtl);
        }
        let ttl = Duration::from_millis(ttl_ms);
        let drift = drift_allowance(ttl_ms, self.drift_factor);
        if drift >= ttl {
            return Err(ConfigError::DriftExceedsTtl { ttl, drift });
        }
        if self.node_timeout >= ttl {
            return Err(ConfigError::TimeoutNotBelowTtl {
                node_timeout: self.node_timeout,
                ttl,
            });
        }
        Ok(TtlPlan { ttl_ms, ttl, drift })
    }
}

/// `floor(ttl_ms × factor) + 2 ms`, as in the reference clients.
fn drift_allowance(ttl_ms: u64, factor: f64) -> Duration {
    Duration::from_millis((ttl_ms as f64 * factor) as u64) + DRIFT_CONSTANT
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_err(b: Builder) -> ConfigError {
        match b.build() {
            Err(Error::Config(e)) => e,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn rejects_bad_node_lists() {
        assert_eq!(config_err(Builder::default()), ConfigError::NoNodes);
        assert!(matches!(
            config_err(Builder::default().node("http://nope")),
            ConfigError::InvalidUrl { .. }
        ));
        assert!(matches!(
            config_err(Builder::default().node("not a url")),
            ConfigError::InvalidUrl { .. }
        ));
        let dup = config_err(Builder::default().nodes([
            "redis://127.0.0.1:7001",
            "redis://127.0.0.1:7002",
            "redis://127.0.0.1:7001/3",
        ]));
        assert_eq!(
            dup,
            ConfigError::DuplicateNode {
                node: "127.0.0.1:7001".into()
            }
        );
        let dup =
            config_err(Builder::default().nodes(["redis://LocalHost:1", "redis://localhost:1"]));
        assert!(matches!(dup, ConfigError::DuplicateNode { .. }));
    }

    #[test]
    fn rejects_bad_options() {
        let one = || Builder::default().node("redis://127.0.0.1:7001");
        for f in [-0.1, 1.0, f64::NAN, f64::INFINITY] {
            assert!(matches!(
                config_err(one().drift_factor(f)),
                ConfigError::InvalidDriftFactor(_)
            ));
        }
        assert_eq!(
            config_err(one().node_timeout(Duration::ZERO)),
            ConfigError::ZeroNodeTimeout
        );
        assert!(one().drift_factor(0.0).build().is_ok());
    }

    #[test]
    fn url_errors_do_not_leak_passwords() {
        let e = config_err(Builder::default().node("redis://:s3cret@host:notaport"));
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert_eq!(redact("redis://u:p@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn ttl_plans() {
        let o = Options::default();
        assert_eq!(o.plan(Duration::ZERO), Err(ConfigError::ZeroTtl));
        assert_eq!(
            o.plan(Duration::from_micros(900)),
            Err(ConfigError::ZeroTtl)
        );
        assert!(matches!(
            o.plan(MAX_TTL + ms(1)),
            Err(ConfigError::TtlTooLarge { .. })
        ));
        assert!(matches!(
            o.plan(Duration::MAX),
            Err(ConfigError::TtlTooLarge { .. })
        ));
        // 10 s: drift 100 + 2 ms.
        let p = o.plan(Duration::from_secs(10)).unwrap();
        assert_eq!((p.ttl_ms, p.drift), (10_000, ms(102)));
        // Sub-millisecond parts are cut, as PX would.
        assert_eq!(
            o.plan(Duration::from_micros(10_000_900)).unwrap().ttl_ms,
            10_000
        );
        // The node timeout must stay below the TTL.
        assert_eq!(
            o.plan(ms(50)),
            Err(ConfigError::TimeoutNotBelowTtl {
                node_timeout: ms(50),
                ttl: ms(50)
            })
        );
        // Drift that eats the TTL: 2 ms of constant alone.
        let fast = Options {
            node_timeout: ms(1),
            ..Options::default()
        };
        assert_eq!(
            fast.plan(ms(2)),
            Err(ConfigError::DriftExceedsTtl {
                ttl: ms(2),
                drift: ms(2)
            })
        );
        assert!(fast.plan(ms(3)).is_ok());
        let greedy = Options {
            drift_factor: 0.998,
            ..Options::default()
        };
        assert!(matches!(
            greedy.plan(Duration::from_secs(1)),
            Err(ConfigError::DriftExceedsTtl { .. })
        ));
        assert!(o.plan(MAX_TTL).is_ok());
    }
}
