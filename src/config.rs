//! Configuration: the [`Builder`], its defaults, and the checks it makes.
//!
//! Everything is checked before any I/O. The node list and the options are
//! checked by [`Builder::build`]; the TTL, which each call chooses, is checked
//! at the start of [`Redlock::lock`](crate::Redlock::lock) against the same
//! options. Building connects to nothing: nodes connect on first use, in the
//! background, and reconnect by themselves after a node restarts.
//!
//! | option | default | meaning |
//! |---|---|---|
//! | [`key_prefix`](Builder::key_prefix) | `"redquorum:"` | prepended to every resource name to form the Redis key |
//! | [`drift_factor`](Builder::drift_factor) | `0.01` | clock drift allowance: `ttl × factor + 2 ms` is taken off the validity |
//! | [`node_timeout`](Builder::node_timeout) | 50 ms | bound on each request to one node, but a release's (at most a day) |
//! | [`connect_timeout`](Builder::connect_timeout) | 2 s | bound on making a connection to one node, in the background (at most a day) |
//! | [`max_in_flight`](Builder::max_in_flight) | 256 | requests on the wire to one node at once; more wait their turn, outside the node timeout |
//! | [`retry_count`](Builder::retry_count) | 10 | retries after the first attempt in [`lock`](crate::Redlock::lock) |
//! | [`retry_delay`](Builder::retry_delay) | 200 ms | mean pause between attempts |
//! | [`retry_jitter`](Builder::retry_jitter) | 100 ms | the pause is drawn uniformly from `delay ± jitter` |
//! | [`wait_timeout`](Builder::wait_timeout) | 10 s | overall deadline for [`lock`](crate::Redlock::lock) |
//! | [`min_validity`](Builder::min_validity) | 0 | an acquisition with less validity left counts as failed |
//! | [`keep_alive_fraction`](Builder::keep_alive_fraction) | 1/3 | the watchdog extends every `ttl × fraction` |
//! | [`wake_on_release`](Builder::wake_on_release) | on | waiters sleep until a release is announced instead of polling |
//! | [`restart_guard`](Builder::restart_guard) | on | a node that restarted gets no vote on acquisitions until the locks it may have forgotten have expired |
//! | [`fenced`](Builder::fenced) | off | every lock carries a fencing token (per call: [`LockRequest::fenced`](crate::LockRequest::fenced)) |
//! | [`fence_time_floor`](Builder::fence_time_floor) | on | fencing tokens follow the wall clock (in µs), so they keep growing when counters are lost |

use std::collections::HashSet;
use std::time::Duration;

use crate::error::ConfigError;
use crate::net::Endpoint;
use crate::net::topology::redact::redact;
use crate::net::topology::{plain, url};
use crate::proto::quorum::Plan;

/// Builds a [`Redlock`](crate::Redlock). Start from
/// [`Redlock::builder`](crate::Redlock::builder).
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
#[derive(Clone, Default)]
#[must_use]
pub struct Builder {
    urls: Vec<String>,
    /// What a builder call that cannot fail found wrong, told by `build`.
    refused: Option<ConfigError>,
    options: Options,
    /// Certificates for `rediss://` nodes (none without the `tls` feature).
    tls: plain::Tls,
}

/// The validated options, shared by every lock of a `Redlock`.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(crate) key_prefix: String,
    pub(crate) drift_factor: f64,
    pub(crate) node_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_in_flight: usize,
    pub(crate) retry_count: u32,
    pub(crate) retry_delay: Duration,
    pub(crate) retry_jitter: Duration,
    pub(crate) wait_timeout: Duration,
    pub(crate) min_validity: Duration,
    pub(crate) keep_alive_fraction: f64,
    pub(crate) wake_on_release: bool,
    pub(crate) restart_guard: bool,
    pub(crate) fenced: bool,
    pub(crate) fence_time_floor: bool,
    /// Whether a node is a Redis Cluster: keys are then hash-tagged (see
    /// [`keys`](crate::keys)). Set by `validate`, from the nodes.
    pub(crate) cluster_keys: bool,
}

impl Options {
    /// The Redis key of `resource` (see [`keys`](crate::keys)).
    pub(crate) fn key(&self, resource: &str) -> Box<str> {
        crate::keys::key(&self.key_prefix, self.cluster_keys, resource)
    }

    /// The resource whose key is `key`, if it is one.
    pub(crate) fn resource<'k>(&self, key: &'k str) -> Option<&'k str> {
        crate::keys::resource(&self.key_prefix, self.cluster_keys, key)
    }
}

/// The default of [`Builder::wait_timeout`].
pub(crate) const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// The longest [`node_timeout`](Builder::node_timeout) and
/// [`connect_timeout`](Builder::connect_timeout): a day. Longer ones bound
/// nothing (a node that slow is down), and a request's deadline is `now +
/// timeout` on tokio's clock, which panics past the range of an `Instant`;
/// so they are refused rather than saturated. The other durations are
/// taken whole: deadlines on our own clock saturate (`Moment::after`), and
/// so do tokio's sleeps and timeouts.
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

impl Default for Options {
    fn default() -> Self {
        Options {
            key_prefix: "redquorum:".to_owned(),
            drift_factor: 0.01,
            node_timeout: Duration::from_millis(50),
            connect_timeout: Duration::from_secs(2),
            max_in_flight: 256,
            retry_count: 10,
            retry_delay: Duration::from_millis(200),
            retry_jitter: Duration::from_millis(100),
            wait_timeout: DEFAULT_WAIT,
            min_validity: Duration::ZERO,
            keep_alive_fraction: 1.0 / 3.0,
            wake_on_release: true,
            restart_guard: true,
            fenced: false,
            fence_time_floor: true,
            cluster_keys: false,
        }
    }
}

impl Builder {
    /// Adds one node, as a URL: `redis://[user:password@]host:port[/db]`
    /// (`rediss://` for TLS, feature `tls`), or a Sentinel-managed primary,
    /// `redis+sentinel://[user:password@]host1:port1[,host2:port2…]/<master-name>[/<db>]`
    /// (feature `sentinel`; see [`sentinel_node`](Self::sentinel_node)).
    pub fn node(mut self, url: impl AsRef<str>) -> Self {
        self.urls.push(url.as_ref().to_owned());
        self
    }

    /// Adds one Sentinel-managed node (feature `sentinel`): the primary
    /// that the sentinels at `sentinels` (`host:port` each, 26379 when the
    /// port is left out) know as `master_name`, resolved anew for every
    /// connection. The same as the URL
    /// `redis+sentinel://host1:port1,host2:port2/<master_name>`, the name
    /// percent-encoded (any name Sentinel accepts is taken: `cache@eu`,
    /// `my?master`); give the URL to [`node`](Self::node) instead for
    /// credentials (those before `@` go to the data nodes,
    /// `?sentinel_password=` to the sentinels) or a database, with the
    /// master name percent-encoded there too (`cache%40eu`). Each node must be its own Sentinel-managed set, one
    /// failure domain of its own: see the README's "Sentinel-managed
    /// nodes" for what a failover costs (the restart guard keeps the node
    /// out for a TTL) and why one set alone is not a safe lock.
    ///
    /// ```
    /// let redlock = redquorum::Redlock::builder()
    ///     .sentinel_node("locks-a", ["10.0.1.1:26379", "10.0.1.2:26379", "10.0.1.3:26379"])
    ///     .sentinel_node("locks-b", ["10.0.2.1:26379", "10.0.2.2:26379", "10.0.2.3:26379"])
    ///     .node("redis+sentinel://:secret@10.0.3.1,10.0.3.2,10.0.3.3/locks-c")
    ///     .build();
    /// # #[cfg(feature = "sentinel")]
    /// assert_eq!(redlock?.quorum(), 2);
    /// # Ok::<(), redquorum::Error>(())
    /// ```
    ///
    /// Without the feature, [`build`](Self::build) fails with
    /// [`ConfigError::SentinelNotEnabled`].
    pub fn sentinel_node<I, S>(mut self, master_name: impl AsRef<str>, sentinels: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.urls
            .push(url::sentinel_node_url(master_name.as_ref(), sentinels));
        self
    }

    /// Adds one node that is a whole Redis Cluster (crate feature
    /// `cluster`), reached through `seeds`: `host:port` each, or
    /// `redis://[user:password@]host:port` (`valkey://` too; one user and
    /// password for all, given on one seed or the same on each). The same
    /// as [`node`](Builder::node) with
    /// `redis+cluster://[user:password@]host:port[,host:port…]`. `build`
    /// refuses ([`ConfigError::InvalidClusterUrl`]) a `rediss://` seed (TLS
    /// to a cluster is not supported yet: it is never dropped silently),
    /// any other scheme, and seeds giving different passwords. With a
    /// cluster node, keys are hash-tagged and the
    /// [`key_prefix`](Builder::key_prefix) must be non-empty and hold no
    /// `{` or `}` ([`ConfigError::InvalidKeyPrefix`]). Several
    /// independent clusters make a Redlock whose shard failovers are
    /// handled like restarts; ONE cluster as the only node is one failure
    /// domain, unsafe under failover (see the README's "Redis Cluster
    /// nodes").
    pub fn cluster_node<I, S>(mut self, seeds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let (url, refused) = url::cluster_node_url(seeds);
        if self.refused.is_none() {
            self.refused = refused;
        }
        self.urls.push(url);
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

    /// The bound on each request to one node, from the call to the reply.
    /// Keep it small against the TTL: the Redis docs suggest 5–50 ms for a
    /// 10 s TTL. A dead or frozen node costs at most this much, and nothing
    /// when a majority has already answered. A release is the exception:
    /// its answers count as long as the lock is valid, so it waits for a
    /// slow node up to the lock's remaining validity, at most the
    /// [`connect_timeout`](Self::connect_timeout) (a release on busy nodes
    /// would otherwise report failures for keys it deleted); a majority of
    /// answers still decides it at once. Connecting is bounded
    /// separately ([`connect_timeout`](Self::connect_timeout)). A request
    /// that times out on a connection that has left a request unanswered for
    /// three node timeouts (a second at least) replaces it. Default 50 ms;
    /// at most a day ([`ConfigError::TimeoutTooLong`]).
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.options.node_timeout = timeout;
        self
    }

    /// The bound on making a connection to one node: TCP, handshake (auth)
    /// and the restart guard's `INFO server`. Connecting runs in the
    /// background, shared by the requests that need it; a request waits for
    /// it no longer than its own [`node_timeout`](Self::node_timeout) (a
    /// release: no longer than this) and
    /// votes `Timeout` meanwhile, so a node several round trips away joins
    /// after a few attempts instead of never. Default 2 s; at most a day
    /// ([`ConfigError::TimeoutTooLong`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// How many requests may be on the wire to one node at once, waiting
    /// for their replies. More wait their turn in this process, and the
    /// [`node_timeout`](Self::node_timeout) of each starts when it goes on
    /// the wire: the node timeout measures the node, not the queue behind
    /// this process's own requests, so that a burst of thousands of locks
    /// or releases proceeds at the nodes' pace instead of timing out in its
    /// own queue. A lock's validity still counts from before its first
    /// request was queued, so time spent waiting shortens it, never the
    /// other way round. Default 256; at least 1
    /// ([`ConfigError::ZeroInFlight`]), at most 65 536, what a connection
    /// queues ([`ConfigError::InFlightTooLarge`]).
    pub fn max_in_flight(mut self, requests: usize) -> Self {
        self.options.max_in_flight = requests;
        self
    }

    /// How many times [`lock`](crate::Redlock::lock) tries again after a
    /// failed attempt. Default 10; `0` makes it behave like
    /// [`try_lock`](crate::Redlock::try_lock). With
    /// [`wake_on_release`](Self::wake_on_release), attempts prompted by the
    /// announced release of the holder a waiter waited for are not counted
    /// (another waiter won: progress),
    /// nor are the quick retries that settle a vote split among waiters;
    /// [`wait_timeout`](Self::wait_timeout) bounds those. A call can choose
    /// its own ([`LockRequest::retries`](crate::LockRequest::retries)).
    pub fn retry_count(mut self, retries: u32) -> Self {
        self.options.retry_count = retries;
        self
    }

    /// The mean pause between attempts. Default 200 ms. Any duration is
    /// taken: a pause that would end after the wait deadline ends the call
    /// at once ([`GaveUp::Deadline`](crate::GaveUp::Deadline)), unless it
    /// waits for an announced release.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.options.retry_delay = delay;
        self
    }

    /// The random spread of the pause: it is drawn uniformly from
    /// `delay − jitter ..= delay + jitter`, so that contending clients fall
    /// out of step. Default 100 ms. Any duration is taken, as for
    /// [`retry_delay`](Self::retry_delay).
    pub fn retry_jitter(mut self, jitter: Duration) -> Self {
        self.options.retry_jitter = jitter;
        self
    }

    /// The overall deadline of [`lock`](crate::Redlock::lock): it gives up
    /// rather than start an attempt that could end after it (one that
    /// starts less than a node timeout before the deadline). The first
    /// attempt is always made; the rollback of a failed attempt may add up
    /// to one node timeout. A call can choose its own
    /// ([`LockRequest::wait`](crate::LockRequest::wait)). Default 10 s:
    /// some retries are free (see [`retry_count`](Self::retry_count)), so
    /// without a deadline a waiter could wait for ever on a resource that is
    /// never free; `Duration::MAX` lifts it.
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.options.wait_timeout = timeout;
        self
    }

    /// The least validity an acquisition must leave to count: time for the
    /// critical section to do anything at all. Default zero (any positive
    /// validity counts). A call whose TTL could never leave this much
    /// (`min_validity ≥ ttl − drift`) fails at once with
    /// [`ConfigError::MinValidityTooLong`].
    pub fn min_validity(mut self, min: Duration) -> Self {
        self.options.min_validity = min;
        self
    }

    /// How often the watchdog of [`Lock::keep_alive`](crate::Lock::keep_alive)
    /// and [`Redlock::with_lock`](crate::Redlock::with_lock) extends a lock: every `ttl × fraction`, in
    /// `(0.0, 1.0)`. Default a third, as Redisson's watchdog: two extensions
    /// can fail before the lock runs out. Whatever the fraction, an
    /// extension is sent at the latest while two node timeouts of validity
    /// are left (half the validity, where that is less), so a fraction near
    /// 1 still renews in time.
    pub fn keep_alive_fraction(mut self, fraction: f64) -> Self {
        self.options.keep_alive_fraction = fraction;
        self
    }

    /// Whether [`lock`](crate::Redlock::lock) waits for releases to be
    /// announced rather than polling. Default on.
    ///
    /// On: a waiter subscribes (Redis pub/sub, one connection per node per
    /// `Redlock`, shared by all its waiters) to its wake-up channel for the
    /// resource, and queues on the nodes; a release wakes the first waiter
    /// of the queue only (no herd). It tries again as soon as it is woken,
    /// or when the holder's keys expire, and makes no requests in between.
    /// Where too few subscriptions work, it falls back to the retry pause.
    /// A channel stays subscribed for two seconds after its last waiter
    /// goes (a resource waited on again soon is not subscribed anew).
    /// Releases wake waiters whatever this says, so waiters in other
    /// processes are woken either way.
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
    /// the longest TTL; the guard enforces that from the client, whatever
    /// the client has seen before. On every new connection to a node, the
    /// first one included, it reads the node's `run_id` and uptime (`INFO
    /// server`; for a Sentinel-managed node also its replication ID, `INFO
    /// replication`). The node's vote on an acquisition of TTL `t` is
    /// refused, with
    /// [`NodeFailure::Restarted`](crate::NodeFailure::Restarted):
    /// * until the node is up for the longer of `t` and the longest TTL
    ///   among this `Redlock`'s keys that may still be alive (with a second
    ///   to spare: Redis reports uptime in whole wall-clock seconds) —
    ///   keys other clients took before the restart, assuming they use
    ///   TTLs like ours. This holds for a process that first meets the
    ///   node after its restart, and for a restart first seen by a read
    ///   (`status`, `leader`, `observe`): the moment is kept;
    /// * when the node's identity changed since the last connection (a
    ///   restart, a failover or a failback this client saw), also until
    ///   every key this `Redlock` sent there may have expired (send moment
    ///   + TTL + drift, on our monotonic clock).
    ///
    /// A node restarted less than a TTL ago thus costs a fresh process up
    /// to one TTL of that node's vote: the price of the promise. A node
    /// started empty as a *new* node can be declared born empty (its
    /// `run_id` in the set `redquorum-born-empty`; the `local-servers`
    /// launchers and `redquorum servers up` do it), and then costs nothing.
    ///
    /// Releases and extensions are still sent: they compare the token, and
    /// cannot create a key.
    ///
    /// What it does not cover:
    /// * Keys other clients took with longer TTLs than ours (give them all
    ///   the same TTLs).
    /// * When a cluster shard's failover happened, if it happened before
    ///   this `Redlock` first connected (a promoted replica's uptime is not
    ///   the time since its promotion; a Sentinel-managed node's is timed
    ///   by its sentinels); after one it does see, it counts the whole
    ///   longest TTL from that moment. See docs/SAFETY.md, "Restarts the
    ///   guard cannot see".
    /// * A node whose ACL forbids `INFO`, or that renamed it, from the
    ///   start: it cannot be watched; a warning is logged once per node and
    ///   it votes as usual. (One that answered `INFO` before and stops
    ///   answering is taken as restarted, with the same warning.)
    ///
    /// A node run with `appendonly yes` and `appendfsync always` keeps its
    /// keys across restarts and does not need the guard: turn it off there.
    /// The cost is one `INFO server` round trip per new connection, while
    /// connecting (and `SMEMBERS redquorum-born-empty` on the first).
    pub fn restart_guard(mut self, on: bool) -> Self {
        self.options.restart_guard = on;
        self
    }

    /// On: every lock this `Redlock` takes is fenced, as if each call
    /// chained [`LockRequest::fenced`](crate::LockRequest::fenced). Off by
    /// default; calls that cannot be fenced (reentrant holds, sets) then
    /// fail with [`ConfigError::Combination`]. Semaphore permits and
    /// readers' shares are not fenced by it: they carry no token.
    pub fn fenced(mut self, on: bool) -> Self {
        self.options.fenced = on;
        self
    }

    /// On (the default): a fenced lock's counter becomes at least this
    /// process's wall clock in microseconds, so tokens follow the clock and
    /// keep growing after nodes restart without persistence and lose their
    /// counters — as long as no two clients' clocks differ by more than the
    /// time between the holder before the loss and the next one.
    /// Off: tokens are plain counts (1, 2, 3, …) that rely on the counters
    /// alone, and every node must keep them (`appendonly yes`,
    /// `appendfsync always`): one node restarted empty can make a later
    /// holder's token smaller. The guarantee and its argument are in the
    /// README's "Fencing tokens".
    pub fn fence_time_floor(mut self, on: bool) -> Self {
        self.options.fence_time_floor = on;
        self
    }

    /// For `rediss://` nodes: trust the CA certificate(s) in `pem` instead
    /// of the system's root certificates (a private CA, or a managed
    /// Redis's own). Feature `tls`.
    ///
    /// redis-rs builds its TLS configuration on rustls's process-wide
    /// crypto provider: [`build`](Builder::build) installs `ring` there if
    /// no provider is installed yet. An application that wants another
    /// (aws-lc-rs, a FIPS build) installs it before building.
    ///
    /// ```no_run
    /// # fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let redlock = redquorum::Redlock::builder()
    ///     .nodes(["rediss://:secret@redis-1.example:6380", "rediss://:secret@redis-2.example:6380"])
    ///     .tls_root_certificate(std::fs::read("ca.pem")?)
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root = Some(pem.into());
        self
    }

    /// For `rediss://` nodes that ask for a client certificate (mutual
    /// TLS, `tls-auth-clients yes`): the certificate chain and its private
    /// key, in PEM. Never shown in `Debug` output or errors. Feature `tls`.
    #[cfg(feature = "tls")]
    #[cfg_attr(docsrs, doc(cfg(feature = "tls")))]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// Checks the certificates given: readable PEM, at least one
    /// certificate, and a private key with a client certificate.
    #[cfg(feature = "tls")]
    fn check_certificates(&self) -> Result<(), ConfigError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let certificates = |pem: &[u8], option: &'static str| {
            let invalid = |reason: String| ConfigError::InvalidCertificate { option, reason };
            let mut found = 0;
            for certificate in CertificateDer::pem_slice_iter(pem) {
                certificate.map_err(|e| invalid(e.to_string()))?;
                found += 1;
            }
            match found {
                0 => Err(invalid("no certificate in the PEM".to_owned())),
                _ => Ok(()),
            }
        };
        if let Some(root) = &self.tls.root {
            certificates(root, "tls_root_certificate")?;
        }
        if let Some((chain, key)) = &self.tls.client {
            certificates(chain, "tls_client_certificate")?;
            // The parser's message could quote the key's PEM: not shown.
            PrivateKeyDer::from_pem_slice(key).map_err(|_| ConfigError::InvalidCertificate {
                option: "tls_client_certificate",
                reason: "no private key could be read from the key's PEM".to_owned(),
            })?;
        }
        Ok(())
    }

    /// Checks the node list and the options: the clients to reach the
    /// nodes with, and the options. Does no I/O.
    pub(crate) fn validate(self) -> Result<(Vec<Endpoint>, Options), ConfigError> {
        let o = &self.options;
        if let Some(refused) = &self.refused {
            return Err(refused.clone());
        }
        if self.urls.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        if !(o.drift_factor.is_finite() && (0.0..1.0).contains(&o.drift_factor)) {
            return Err(ConfigError::InvalidDriftFactor(o.drift_factor));
        }
        if !(o.keep_alive_fraction > 0.0 && o.keep_alive_fraction < 1.0) {
            return Err(ConfigError::InvalidKeepAliveFraction(o.keep_alive_fraction));
        }
        if o.node_timeout.is_zero() {
            return Err(ConfigError::ZeroNodeTimeout);
        }
        if o.connect_timeout.is_zero() {
            return Err(ConfigError::ZeroConnectTimeout);
        }
        if o.max_in_flight == 0 {
            return Err(ConfigError::ZeroInFlight);
        }
        if o.max_in_flight > crate::net::PIPELINE_BUFFER {
            return Err(ConfigError::InFlightTooLarge {
                requests: o.max_in_flight,
                max: crate::net::PIPELINE_BUFFER,
            });
        }
        for (option, timeout) in [
            ("node_timeout", o.node_timeout),
            ("connect_timeout", o.connect_timeout),
        ] {
            if timeout > MAX_TIMEOUT {
                return Err(ConfigError::TimeoutTooLong {
                    option,
                    timeout,
                    max: MAX_TIMEOUT,
                });
            }
        }
        #[cfg(feature = "tls")]
        self.check_certificates()?;
        let mut endpoints = Vec::with_capacity(self.urls.len());
        let mut seen = HashSet::new();
        for url in &self.urls {
            let endpoint = Endpoint::parse(url, o.connect_timeout, &self.tls)?;
            // A Sentinel-managed node has an identity per sentinel: one
            // sentinel listed in two nodes under one master name is one
            // master. Its own sentinels listed twice are one node too.
            let mut own = HashSet::new();
            for node in endpoint.identities() {
                if own.insert(node.clone()) && !seen.insert(node.clone()) {
                    return Err(ConfigError::DuplicateNode { node });
                }
            }
            endpoints.push(endpoint);
        }
        let mut options = self.options;
        options.cluster_keys = endpoints.iter().any(Endpoint::is_cluster);
        // With hash-tagged keys, a prefix that is empty or holds a brace
        // could give two names one key (`key("a")` is `{a}`, the key of
        // the name "{a}" too).
        if options.cluster_keys
            && (options.key_prefix.is_empty() || options.key_prefix.contains(['{', '}']))
        {
            return Err(ConfigError::InvalidKeyPrefix {
                prefix: options.key_prefix,
            });
        }
        Ok((endpoints, options))
    }
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut f = f.debug_struct("Builder");
        f.field(
            "urls",
            &self.urls.iter().map(|u| redact(u)).collect::<Vec<_>>(),
        )
        .field("options", &self.options);
        #[cfg(feature = "tls")]
        f.field("tls_root_certificate", &self.tls.root.is_some())
            .field("tls_client_certificate", &self.tls.client.is_some());
        f.finish()
    }
}

impl Options {
    /// Checks a TTL against the options and derives its [`Plan`].
    pub(crate) fn plan(&self, ttl: Duration) -> Result<Plan, ConfigError> {
        let plan = Plan::new(ttl, self.drift_factor)?;
        if self.node_timeout >= plan.ttl {
            return Err(ConfigError::TimeoutNotBelowTtl {
                node_timeout: self.node_timeout,
                ttl: plan.ttl,
            });
        }
        if self.min_validity >= plan.best_validity() {
            return Err(ConfigError::MinValidityTooLong {
                min_validity: self.min_validity,
                ttl: plan.ttl,
                drift: plan.drift,
            });
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_node_seeds_keep_their_scheme_and_one_password() {
        for (seeds, says) in [
            (&["rediss://:hunter2@a:1", "b:2"][..], "TLS"),
            (&["a:1", "valkeys://b:2"][..], "TLS"),
            (&["http://:hunter2@a:1"][..], "host:port"),
            (
                &["redis://:hunter2@a:1", "redis://:other@b:2"][..],
                "different",
            ),
            (
                &["redis://u:hunter2@a:1", "redis://v:hunter2@b:2"][..],
                "different",
            ),
        ] {
            let e = config_err(Builder::default().cluster_node(seeds));
            assert!(
                matches!(e, ConfigError::InvalidClusterUrl { .. }),
                "{seeds:?}: {e:?}"
            );
            let shown = format!("{e} {e:?}");
            assert!(shown.contains(says), "{shown}");
            assert!(
                !shown.contains("hunter2") && !shown.contains("other"),
                "{shown}"
            );
        }
        // One password given once, or the same on each seed: fine.
        let b = Builder::default().cluster_node(["redis://:pw@a:1", "valkey://:pw@b:2", "c:3"]);
        assert!(b.refused.is_none());
        assert_eq!(b.urls, vec!["redis+cluster://:pw@a:1,b:2,c:3".to_owned()]);
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn a_prefix_that_could_give_two_names_one_key_is_refused_with_cluster_keys() {
        for prefix in ["", "{", "a}", "x{y}:"] {
            let e = config_err(
                Builder::default()
                    .node("redis+cluster://a:1")
                    .key_prefix(prefix),
            );
            assert!(
                matches!(&e, ConfigError::InvalidKeyPrefix { prefix: p } if p == prefix),
                "{prefix:?}: {e:?}"
            );
            assert!(e.to_string().contains("\"redquorum:\""), "{e}");
        }
        // Without a cluster node keys are not tagged: any prefix.
        Builder::default()
            .node("redis://a:1")
            .key_prefix("")
            .validate()
            .unwrap();
        Builder::default()
            .node("redis+cluster://a:1")
            .key_prefix("app:")
            .validate()
            .unwrap();
    }

    #[test]
    fn cluster_urls_give_seeds_or_say_what_to_fix() {
        // The builder call makes the same URL; the seed set is the identity.
        let b = Builder::default().cluster_node(["redis://u:pw@b:2", "a:1"]);
        assert_eq!(b.urls, vec!["redis+cluster://u:pw@b:2,a:1".to_owned()]);
        assert!(!format!("{b:?}").contains("pw"));
        #[cfg(feature = "cluster")]
        {
            let dup = Builder::default()
                .node("redis+cluster://a:1,b:2")
                .cluster_node(["b:2", "a:1"]);
            assert!(matches!(config_err(dup), ConfigError::DuplicateNode { .. }));
            // One seed in common, or a seed given as a plain node too: one
            // cluster, which must not vote twice.
            let overlap = Builder::default()
                .node("redis+cluster://a:1,b:2")
                .node("redis+cluster://A:1,c:3");
            assert_eq!(
                config_err(overlap),
                ConfigError::DuplicateNode { node: "a:1".into() }
            );
            let plain = Builder::default()
                .node("redis+cluster://a:1,b:2")
                .node("redis://b:2");
            assert!(matches!(
                config_err(plain),
                ConfigError::DuplicateNode { .. }
            ));
            let (endpoints, options) = Builder::default()
                .node("redis://c:3")
                .node("redis+cluster://a:1,b:2")
                .validate()
                .unwrap();
            assert_eq!(endpoints[1].name(), "cluster(a:1,b:2)");
            assert!(options.cluster_keys);
        }
        #[cfg(not(feature = "cluster"))]
        {
            let e = config_err(Builder::default().node("redis+cluster://u:hunter2@a:1"));
            assert!(matches!(e, ConfigError::ClusterNotEnabled { .. }), "{e:?}");
            assert!(e.to_string().contains("`cluster` feature"), "{e}");
            assert!(!e.to_string().contains("hunter2"), "{e}");
        }
    }

    fn config_err(b: Builder) -> ConfigError {
        match b.validate() {
            Err(e) => e,
            Ok(_) => panic!("expected a config error"),
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
        assert_eq!(
            config_err(one().connect_timeout(Duration::ZERO)),
            ConfigError::ZeroConnectTimeout
        );
        assert_eq!(
            config_err(one().max_in_flight(0)),
            ConfigError::ZeroInFlight
        );
        let beyond = MAX_TIMEOUT + Duration::from_nanos(1);
        for long in [beyond, Duration::MAX] {
            assert_eq!(
                config_err(one().node_timeout(long)),
                ConfigError::TimeoutTooLong {
                    option: "node_timeout",
                    timeout: long,
                    max: MAX_TIMEOUT
                }
            );
            let e = config_err(one().connect_timeout(long));
            assert!(
                matches!(
                    e,
                    ConfigError::TimeoutTooLong {
                        option: "connect_timeout",
                        ..
                    }
                ),
                "{e:?}"
            );
            assert!(e.to_string().contains("86400s"), "{e}");
        }
        for many in [crate::net::PIPELINE_BUFFER + 1, usize::MAX] {
            let e = config_err(one().max_in_flight(many));
            assert_eq!(
                e,
                ConfigError::InFlightTooLarge {
                    requests: many,
                    max: 65_536
                }
            );
            assert!(e.to_string().contains("at most 65536"), "{e}");
        }
        assert!(
            one()
                .max_in_flight(crate::net::PIPELINE_BUFFER)
                .validate()
                .is_ok()
        );
        let longest = one().node_timeout(MAX_TIMEOUT).connect_timeout(MAX_TIMEOUT);
        assert!(longest.validate().is_ok());
        assert!(one().drift_factor(0.0).validate().is_ok());
    }

    /// Every numeric option at its extremes: refused with a `ConfigError`
    /// or taken (durations saturate), and a lock call made with those taken
    /// ends with an error, never a panic.
    #[tokio::test]
    async fn extreme_options_are_refused_or_taken_never_a_panic() {
        // Nothing listens on port 1: every attempt fails at once.
        let one = || Builder::default().node("redis://127.0.0.1:1");
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.0, 1.0] {
            assert!(matches!(
                config_err(one().keep_alive_fraction(f)),
                ConfigError::InvalidKeepAliveFraction(_)
            ));
        }
        for f in [
            f64::NEG_INFINITY,
            -f64::MIN_POSITIVE,
            f64::MAX,
            1.0 + f64::EPSILON,
        ] {
            assert!(matches!(
                config_err(one().drift_factor(f)),
                ConfigError::InvalidDriftFactor(_)
            ));
        }
        let extreme = one()
            .drift_factor(1.0 - f64::EPSILON)
            .keep_alive_fraction(f64::MIN_POSITIVE)
            .max_in_flight(1)
            .retry_count(u32::MAX)
            .retry_delay(Duration::MAX)
            .retry_jitter(Duration::MAX)
            .wait_timeout(ms(300))
            .min_validity(Duration::ZERO)
            .node_timeout(Duration::from_nanos(1))
            .connect_timeout(Duration::from_nanos(1));
        let redlock = extreme.build().unwrap();
        let call = |ttl: Duration| {
            let redlock = redlock.clone();
            async move { redlock.lock("r", ttl).await.map(|_| ()) }
        };
        for ttl in [Duration::ZERO, Duration::from_nanos(1), Duration::MAX] {
            let e = call(ttl).await.unwrap_err();
            assert!(matches!(e, crate::Error::Config(_)), "{ttl:?}: {e}");
        }
        // A TTL the drift allowance (nearly all of it) leaves no validity.
        let e = tokio::time::timeout(Duration::from_secs(10), call(Duration::from_secs(100)))
            .await
            .expect("the call ended");
        assert!(e.is_err());
        // Durations at their extremes, with a TTL that leaves validity.
        let redlock = one()
            .retry_count(u32::MAX)
            .retry_delay(Duration::MAX)
            .retry_jitter(Duration::MAX)
            .wait_timeout(ms(300))
            .min_validity(Duration::MAX)
            .build()
            .unwrap();
        let e = redlock.lock("r", Duration::MAX / 2).await.unwrap_err();
        assert!(matches!(e, crate::Error::Config(_)), "{e}");
        let redlock = one()
            .retry_count(u32::MAX)
            .retry_delay(Duration::MAX)
            .retry_jitter(Duration::MAX)
            .wait_timeout(ms(300))
            .keep_alive_fraction(1.0 - f64::EPSILON)
            .build()
            .unwrap();
        let attempt = redlock.lock("r", Duration::from_secs(10));
        let e = tokio::time::timeout(Duration::from_secs(10), attempt)
            .await
            .expect("a pause beyond the deadline ends the call")
            .unwrap_err();
        assert!(matches!(e, crate::Error::NotAcquired { .. }), "{e}");
    }

    #[test]
    fn a_url_is_taken_without_the_whitespace_around_it() {
        for url in [" redis://h:1", "redis://h:1\n", "\tredis+cluster://h:2 "] {
            if url.contains("cluster") && cfg!(not(feature = "cluster")) {
                continue;
            }
            let (endpoints, _) = Builder::default().node(url).validate().unwrap();
            assert!(endpoints[0].name().contains("h:"), "{url:?}");
        }
        #[cfg(feature = "sentinel")]
        Builder::default()
            .node(" redis+sentinel://h:1/m ")
            .validate()
            .unwrap();
        // Whitespace inside a URL is still refused.
        assert!(matches!(
            config_err(Builder::default().node("redis:// h:1")),
            ConfigError::InvalidUrl { .. }
        ));
    }

    #[test]
    fn url_errors_do_not_leak_passwords() {
        let e = config_err(Builder::default().node("redis://:s3cret@host:notaport"));
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
        let e = config_err(Builder::default().node("redis+unix:///tmp/r.sock?db=x&pass=s3cret"));
        assert!(!e.to_string().contains("s3cret"), "{e}");
        assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
        for url in [
            "redis://:hunter2",
            "redis://admin:s3cr3t",
            "redis://admin:s3:cr3t",
            "redis://:hunter2,secret@h:x",
            "secret@h:x",
        ] {
            let e = config_err(Builder::default().node(url));
            for secret in ["hunter2", "s3cr3t", "cr3t", "secret"] {
                assert!(!e.to_string().contains(secret), "{e}");
                assert!(!format!("{e:?}").contains(secret), "{e:?}");
            }
        }
    }

    #[cfg(feature = "tls")]
    #[test]
    fn tls_urls_that_skip_certificate_checks_are_refused() {
        for url in [
            "rediss://:s3cret@127.0.0.1:6380/#insecure",
            "rediss://user:s3cret@127.0.0.1:6380#insecure",
            "valkeys://127.0.0.1:6380/0#insecure",
        ] {
            let e = config_err(Builder::default().node(url));
            assert!(matches!(e, ConfigError::InsecureTls { .. }), "{e:?}");
            let shown = e.to_string();
            assert!(shown.contains("tls_root_certificate"), "{shown}");
            assert!(!shown.contains("s3cret"), "{shown}");
            assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
        }
    }

    #[test]
    fn sentinel_urls_are_checked() {
        let built = Builder::default().sentinel_node("m", ["h1:1", " h2:2"]);
        assert_eq!(built.urls, ["redis+sentinel://h1:1,h2:2/m"]);
        #[cfg(not(feature = "sentinel"))]
        {
            let e = config_err(built);
            assert!(matches!(e, ConfigError::SentinelNotEnabled { .. }), "{e:?}");
            assert!(e.to_string().contains("--features sentinel"), "{e}");
        }
        #[cfg(feature = "sentinel")]
        {
            assert!(built.validate().is_ok());
            // One sentinel and one master name in two nodes: one master.
            let dup = config_err(Builder::default().nodes([
                "redis+sentinel://h1:1,h2:2/m",
                "redis+sentinel://h3:3,H2:2/m",
            ]));
            assert_eq!(
                dup,
                ConfigError::DuplicateNode {
                    node: "m@h2:2".into()
                }
            );
            // Its own sentinel listed twice is no duplicate of another node.
            assert!(
                Builder::default()
                    .nodes(["redis+sentinel://h1:1,h1:1/m", "redis+sentinel://h1:1/n"])
                    .validate()
                    .is_ok()
            );
            for (url, says) in [
                ("redis+sentinel://:s3cret@/m", "no sentinel address"),
                ("redis+sentinel://:s3cret@h1:1", "no master name"),
                ("redis+sentinel://:s3cret@h1:99999/m", "no valid port"),
                ("redis+sentinel://h1:s3cret/m", "no valid port"),
            ] {
                let e = config_err(Builder::default().node(url));
                assert!(matches!(e, ConfigError::InvalidSentinelUrl { .. }), "{e:?}");
                assert!(e.to_string().contains(says), "{e}");
                assert!(e.to_string().contains("<master-name>"), "{e}");
                assert!(!e.to_string().contains("s3cret"), "{e}");
                assert!(!format!("{e:?}").contains("s3cret"), "{e:?}");
            }
            let e = config_err(Builder::default().node("rediss+sentinel://:s3cret@h:1/m"));
            assert!(
                matches!(e, ConfigError::SentinelTlsNotSupported { .. }),
                "{e:?}"
            );
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn builder_debug_does_not_show_passwords() {
        let b = Builder::default().nodes(["redis://u:s3cret@h:1", "redis+unix:///s?pass=s3cret"]);
        let shown = format!("{b:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("h:1"), "{shown}");
    }

    #[test]
    fn ttl_plans_against_the_options() {
        let o = Options::default();
        assert_eq!(o.plan(Duration::ZERO), Err(ConfigError::ZeroTtl));
        let p = o.plan(Duration::from_secs(10)).unwrap();
        assert_eq!((p.ttl_ms, p.drift), (10_000, ms(102)));
        // The node timeout must stay below the TTL.
        assert_eq!(
            o.plan(ms(50)),
            Err(ConfigError::TimeoutNotBelowTtl {
                node_timeout: ms(50),
                ttl: ms(50)
            })
        );
        // A minimum validity no acquisition could ever leave.
        let picky = Options {
            min_validity: ms(988),
            ..Options::default()
        };
        assert_eq!(
            picky.plan(ms(1_000)),
            Err(ConfigError::MinValidityTooLong {
                min_validity: ms(988),
                ttl: ms(1_000),
                drift: ms(12)
            })
        );
        assert!(picky.plan(ms(1_001)).is_ok());
    }
}
