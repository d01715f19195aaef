//! Errors: what went wrong, and what to do about it.
//!
//! There are three layers, from the outside in:
//!
//! * [`Error`] is what every public call returns. It says which operation
//!   failed and why, in terms of the lock: not acquired, expired, taken by
//!   another owner, or too few nodes answering.
//! * [`Report`] is attached to every error that involved the nodes. It says how
//!   many nodes agreed, how many were needed, and why each of the others did
//!   not agree.
//! * [`NodeFailure`] is one node's reason. Errors that Redis answered are
//!   sorted into the cases a user can act on (wrong key type, out of memory,
//!   authentication, read-only replica); their `Display` says what to fix.
//!
//! Configuration mistakes are [`ConfigError`]s. They are found before any
//! I/O: by [`Builder::build`](crate::Builder::build) for the node list and
//! options, and at the start of [`Redlock::lock`](crate::Redlock::lock) for the
//! TTL.

use std::fmt;
use std::time::Duration;

use crate::who::Who;

/// What an ACL user needs on every node: the commands the locks send and
/// their scripts run, the keys and channels under the key prefix, and the
/// restart guard's `INFO`/`ROLE`/`SMEMBERS`. The one list, shown by
/// [`NodeFailure::Denied`] and [`NodeFailure::Auth`], and tested against a
/// real server (`tests/lock.rs`, against Redis 6.2 and Valkey too).
/// `resetchannels` first: Redis 6.2 gives a user every channel by default
/// (`acl-pubsub-default allchannels`) and then refuses a channel pattern.
pub(crate) const ACL_NEEDED: &str = "resetchannels ~<key prefix>* &<key prefix>* ~redquorum-born-empty \
     +evalsha +eval +script|load +set +get +del +exists +type +pttl +pexpire +time \
     +hset +hget +hmget +hgetall +hkeys +hlen +hdel +hexists +zadd +zrange +zrem +zscore \
     +psetex +mget +publish +pubsub|numsub +subscribe +unsubscribe +ping +info +role +smembers \
     (with a Redis Cluster node, keys are ~{<key prefix>*, and +cluster|slots +asking)";

/// Everything that can go wrong with a lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The configuration (or the TTL of a call) is invalid. Nothing was sent.
    Config(ConfigError),
    /// [`lock`](crate::Redlock::lock) or [`try_lock`](crate::Redlock::try_lock)
    /// gave up. Every attempt was rolled back on every node.
    NotAcquired {
        /// The resource asked for.
        resource: String,
        /// How many attempts were made.
        attempts: u32,
        /// What ended the attempts.
        gave_up: GaveUp,
        /// The votes of the last attempt.
        report: Report,
        /// Who held the resource on a majority at the last attempt, when
        /// its token says (one of this crate's: see [`Who`]), with its
        /// description when a node had it. Boxed: errors stay small.
        holder: Option<Box<Who>>,
    },
    /// The lock is gone: [`extend`](crate::Lock::extend) on a lock whose
    /// validity ran out sends nothing, and [`release`](crate::Lock::release)
    /// or `extend` found the keys gone on the nodes (they expired, were
    /// already released, or a node restarted without persistence).
    Expired {
        /// The resource of the lock.
        resource: String,
        /// The votes, if anything was sent.
        report: Report,
    },
    /// Another owner's token was found on some nodes and ours was not on a
    /// majority: the lock expired and was taken by someone else.
    Taken {
        /// The resource of the lock.
        resource: String,
        /// The votes; [`Report::held_by_others`] counts the nodes with a
        /// different owner.
        report: Report,
    },
    /// Too few nodes confirmed the operation and none was seen held by
    /// another owner: most likely nodes are down or slow. After a failed
    /// release, the nodes that did not answer are sent it again in the
    /// background until they answer or the keys have expired.
    NoQuorum {
        /// The resource of the lock.
        resource: String,
        /// The votes.
        report: Report,
    },
    /// [`release`](crate::Lock::release) deleted our keys on a majority,
    /// but the lock's validity had already run out: the critical section
    /// overran the lock, and another holder may have been in it meanwhile.
    ReleasedLate {
        /// The resource of the lock.
        resource: String,
        /// The votes.
        report: Report,
    },
    /// The lock was lost while [`with_lock`](crate::Redlock::with_lock)'s
    /// work ran (another owner took it, its keys were lost, or its validity
    /// ran out before an extension got through). What the work returned is
    /// dropped: it may have acted without the lock.
    Lost {
        /// The resource of the lock.
        resource: String,
    },
    /// A write lock was asked for (a plain, fenced or reentrant lock, a
    /// semaphore, a set that names the resource, or a
    /// [`campaign`](crate::Redlock::campaign) for the election of that
    /// name) from a task (or, outside
    /// any task, a thread) that holds a read lock
    /// ([`LockRequest::shared`](crate::LockRequest::shared)) on the resource
    /// through this client or a clone: the writer would wait for its own
    /// reader until it gave up, so nothing was sent. Release the read lock
    /// first (an upgrade is refused, as it deadlocks on any lock: two
    /// readers upgrading wait for each other). Branches of one task
    /// (`join!`, `select!`) count as one: spawn a writer that must wait for
    /// a read lock of its own task's.
    Upgrade {
        /// The resource read and asked for.
        resource: String,
    },
    /// A [`lock_all`](crate::Redlock::lock_all) whose keys fall in
    /// different slots of a Redis Cluster node: one lock's keys must be on
    /// one primary, where its script runs. Nothing was sent. Give the
    /// resources a shared hash tag, `{order:42}:a` and `{order:42}:b`, so
    /// that they share a slot (see the README's "Redis Cluster nodes").
    CrossSlot {
        /// The resources asked for, with the slot of each.
        resources: Vec<(String, u16)>,
    },
}

/// Why [`Redlock::lock`](crate::Redlock::lock) stopped trying.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum GaveUp {
    /// The retry limit ([`Builder::retry_count`](crate::Builder::retry_count))
    /// was used up (always the case for `try_lock`, which makes one attempt).
    Retries,
    /// The overall wait deadline
    /// ([`Builder::wait_timeout`](crate::Builder::wait_timeout)) would have
    /// passed before the next attempt.
    Deadline,
    /// So many nodes refused in a way no retry changes that no majority
    /// could agree: they hold the resource as a semaphore of another number
    /// of permits ([`NodeFailure::PermitsMismatch`]).
    Mismatch,
    /// So many nodes failed in a way that waiting does not mend that no
    /// majority could agree while it lasts: they refused our credentials
    /// or an ACL permission, their sentinels know no such master, their
    /// host name does not resolve, their TLS handshake or the client's own
    /// configuration failed ([`NodeFailure::is_lasting`]). A refused
    /// connection or a timeout is not such a failure: the node may be
    /// restarting, or paused. The call ends at its first such attempt, whatever its wait: retrying
    /// would only hide the outage until the wait ran out.
    /// [`Error::is_unavailable`] is true.
    Unavailable,
}

impl Error {
    /// Whether the lock could not be taken because another owner holds it:
    /// a [`NotAcquired`](Error::NotAcquired) whose last attempt found the
    /// resource held by another owner on some node, and that is not
    /// [unavailable](Self::is_unavailable). The refusal is judged by
    /// whether contention alone could explain it: enough nodes answered
    /// for a majority to agree had the others' holds been released. With
    /// five nodes, two down and three answering "held" is contention: the
    /// holder's release would let the three agree. Waiting (or trying
    /// later) is the remedy: `EX_TEMPFAIL`, 75, for a command.
    pub fn is_contended(&self) -> bool {
        match self {
            Error::NotAcquired {
                gave_up, report, ..
            } => {
                *gave_up != GaveUp::Unavailable
                    && !report.is_unavailable()
                    && report.held_by_others() > 0
            }
            _ => false,
        }
    }

    /// Whether too few nodes could take part for a majority to agree,
    /// whatever the others answered: an outage, not contention. True when
    /// the nodes that failed for want of availability
    /// ([`NodeFailure::is_unavailable`]: no answer, a broken or refused
    /// connection, refused credentials or ACL permission, an unknown
    /// Sentinel master, a host name that does not resolve, …) are so many
    /// that the rest are fewer than a majority, and for an acquisition
    /// given up as [`GaveUp::Unavailable`]. With five nodes, three down
    /// is an outage even if the other two answer "held". An operator's
    /// remedy, not a retry's: `EX_UNAVAILABLE`, 69, for a command.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::NotAcquired {
                gave_up: GaveUp::Unavailable,
                ..
            } => true,
            _ => self.report().is_some_and(Report::is_unavailable),
        }
    }

    /// The per-node votes behind this error, when nodes were asked.
    pub fn report(&self) -> Option<&Report> {
        match self {
            Error::Config(_)
            | Error::Lost { .. }
            | Error::Upgrade { .. }
            | Error::CrossSlot { .. } => None,
            Error::ReleasedLate { report, .. }
            | Error::NotAcquired { report, .. }
            | Error::Expired { report, .. }
            | Error::Taken { report, .. }
            | Error::NoQuorum { report, .. } => Some(report),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => write!(f, "invalid configuration: {e}"),
            Error::CrossSlot { resources } => {
                let list: Vec<String> = resources
                    .iter()
                    .map(|(r, slot)| format!("{r:?} (slot {slot})"))
                    .collect();
                write!(
                    f,
                    "lock_all refused, nothing sent: a node is a Redis Cluster and the resources \
                     fall in different slots: {}; give them a shared hash tag, such as \
                     {{order:42}}:a and {{order:42}}:b, so that one primary holds them all",
                    list.join(", ")
                )
            }
            Error::Upgrade { resource } => write!(
                f,
                "write lock on {resource:?} refused: this task holds a read lock on it, which the writer would wait for until it gave up; release the read lock first"
            ),
            Error::NotAcquired {
                resource,
                attempts,
                gave_up,
                report,
                holder,
            } => {
                let why = match gave_up {
                    GaveUp::Retries => "retry limit reached",
                    GaveUp::Deadline => "wait deadline reached",
                    GaveUp::Mismatch => "refused: see the nodes' reasons",
                    GaveUp::Unavailable => {
                        "too few nodes available for a majority, for reasons waiting does not mend"
                    }
                };
                write!(
                    f,
                    "lock on {resource:?} not acquired after {attempts} attempt(s) ({why}); last attempt: {report}"
                )?;
                if let Some(holder) = holder {
                    write!(f, "; held by {holder}")?;
                }
                if report.agreed >= report.needed {
                    write!(
                        f,
                        "; a majority agreed but too little validity was left: use a longer TTL or a shorter node timeout"
                    )?;
                }
                Ok(())
            }
            Error::Expired { resource, report } if report.nodes.is_empty() => write!(
                f,
                "lock on {resource:?} had expired before the call; nothing was sent"
            ),
            Error::Expired { resource, report } => write!(
                f,
                "lock on {resource:?} had expired or was already released: {report}"
            ),
            Error::Taken { resource, report } => write!(
                f,
                "lock on {resource:?} was taken by another owner on {} node(s): {report}",
                report.held_by_others()
            ),
            Error::NoQuorum { resource, report } => write!(
                f,
                "too few nodes confirmed the operation on {resource:?}: {report}"
            ),
            Error::ReleasedLate { resource, report } => write!(
                f,
                "lock on {resource:?} was released after its validity had run out: the critical \
                 section overran the lock (use a longer TTL, extend it, or keep_alive): {report}"
            ),
            Error::Lost { resource } => write!(
                f,
                "lock on {resource:?} was lost while the work ran: its result was dropped"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for Error {
    fn from(e: ConfigError) -> Self {
        Error::Config(e)
    }
}

/// A configuration mistake, found before any I/O.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConfigError {
    /// No node was given.
    NoNodes,
    /// A node URL could not be parsed.
    InvalidUrl {
        /// The URL as given (password removed).
        url: String,
        /// What the parser said.
        reason: String,
    },
    /// The same node (host and port, or socket path) was given twice. A node
    /// counted twice would let one failure cost two votes, and one server
    /// grant two.
    DuplicateNode {
        /// The address that appears twice.
        node: String,
    },
    /// The drift factor is not a finite number in `0.0..1.0`.
    InvalidDriftFactor(f64),
    /// The per-node timeout is zero.
    ZeroNodeTimeout,
    /// The connect timeout is zero.
    ZeroConnectTimeout,
    /// [`max_in_flight`](crate::Builder::max_in_flight) is zero: no request
    /// could ever be sent.
    ZeroInFlight,
    /// [`max_in_flight`](crate::Builder::max_in_flight) is above the most a
    /// connection's queue holds: handing a request to the connection must
    /// never wait (a lock's removal relies on it), so no more can be on the
    /// wire to one node at once.
    InFlightTooLarge {
        /// The number given.
        requests: usize,
        /// The most accepted (65 536).
        max: usize,
    },
    /// A per-node or connect timeout longer than a day: a node that takes
    /// that long to answer is as good as down, and a deadline that far off
    /// is no bound.
    TimeoutTooLong {
        /// The builder option: `node_timeout` or `connect_timeout`.
        option: &'static str,
        /// The timeout given.
        timeout: Duration,
        /// The longest accepted.
        max: Duration,
    },
    /// The keep-alive fraction is not in `(0.0, 1.0)`.
    InvalidKeepAliveFraction(f64),
    /// A TTL of zero (or below one millisecond, which Redis cannot express).
    ZeroTtl,
    /// A TTL larger than Redis accepts for `PX`.
    TtlTooLarge {
        /// The TTL asked for.
        ttl: Duration,
        /// The largest TTL accepted.
        max: Duration,
    },
    /// The clock drift allowance (`ttl × drift_factor + 2 ms`) is not smaller
    /// than the TTL, so no acquisition could ever be valid.
    DriftExceedsTtl {
        /// The TTL asked for.
        ttl: Duration,
        /// The drift allowance computed for it.
        drift: Duration,
    },
    /// The per-node timeout is not smaller than the TTL: a slow node could
    /// eat the whole validity before it is counted.
    TimeoutNotBelowTtl {
        /// The per-node timeout.
        node_timeout: Duration,
        /// The TTL asked for.
        ttl: Duration,
    },
    /// The minimum validity is not smaller than `ttl − drift`, the most an
    /// acquisition can leave: no acquisition could ever succeed.
    MinValidityTooLong {
        /// The minimum validity asked for.
        min_validity: Duration,
        /// The TTL asked for.
        ttl: Duration,
        /// The drift allowance computed for it.
        drift: Duration,
    },
    /// [`lock_all`](crate::Redlock::lock_all) was given no resource.
    NoResources,
    /// A semaphore's number of permits
    /// ([`LockRequest::permits`](crate::LockRequest::permits)) is 0 or
    /// more than 1 024.
    Permits {
        /// The number asked for.
        permits: u32,
    },
    /// A resource's key (the key prefix and its name) is longer than
    /// Redis takes (512 MB).
    KeyTooLong {
        /// The key's length, in bytes.
        bytes: usize,
    },
    /// A reentrant lock was asked for with an empty owner id.
    EmptyOwner,
    /// A candidate of an election ([`Redlock::campaign`](crate::Redlock::campaign))
    /// has an empty identity.
    EmptyCandidate,
    /// A leader's value ([`Campaign::value`](crate::Campaign::value),
    /// [`Leadership::proclaim`](crate::Leadership::proclaim)) is longer
    /// than [`MAX_LEADER_VALUE`](crate::MAX_LEADER_VALUE).
    ValueTooLong {
        /// The value's length, in bytes.
        bytes: usize,
    },
    /// A node URL asks for TLS (`rediss://`), and the crate was built
    /// without its `tls` feature.
    TlsNotEnabled {
        /// The URL as given (password removed).
        url: String,
    },
    /// A node URL is a Sentinel-managed node's (`redis+sentinel://`), and
    /// the crate was built without its `sentinel` feature.
    SentinelNotEnabled {
        /// The URL as given (password removed).
        url: String,
    },
    /// A Sentinel-managed node's URL (`redis+sentinel://`) cannot be used:
    /// no sentinel address, no master name, a port that is not one, an
    /// unknown query parameter. The reason says what to fix.
    InvalidSentinelUrl {
        /// The URL as given (passwords removed).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A Sentinel-managed node over TLS (`rediss+sentinel://`), which is
    /// not supported yet.
    SentinelTlsNotSupported {
        /// The URL as given (passwords removed).
        url: String,
    },
    /// A cluster node's URL (`redis+cluster://…`) is not of the form
    /// `redis+cluster://[user:password@]host:port[,host:port…]`.
    InvalidClusterUrl {
        /// The URL as given (password removed).
        url: String,
        /// What is wrong, and how to fix it.
        reason: String,
    },
    /// A node is a Redis Cluster, so keys are hash-tagged, and the key
    /// prefix is empty or holds `{` or `}`: two names could then share one
    /// key (with an empty prefix, the names `a` and `{a}` both make `{a}`).
    InvalidKeyPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A node is a Redis Cluster (`redis+cluster://…`), which needs the
    /// crate feature `cluster`.
    ClusterNotEnabled {
        /// The URL as given (password removed).
        url: String,
    },
    /// A node URL asks to skip the checks of the node's TLS certificate
    /// (redis-rs's `rediss://host/#insecure`): anyone between this client
    /// and the node could then stand in for it and grant locks. Trust the
    /// node's CA instead
    /// ([`Builder::tls_root_certificate`](crate::Builder::tls_root_certificate)).
    InsecureTls {
        /// The URL as given (password removed).
        url: String,
    },
    /// A certificate or key given for TLS cannot be used: no certificate in
    /// its PEM, a PEM that does not parse, or no private key. Never quotes a
    /// key.
    InvalidCertificate {
        /// The builder option it was given to.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// Options of a lock that do not go together: reentrant holds and
    /// fencing tokens are on one resource, and fencing tokens are for plain
    /// (not reentrant) locks. Names the combination asked for.
    Combination(&'static str),
    /// [`release_token`](crate::Redlock::release_token) was given a token
    /// that no lock has: tokens are 40 lower-case hex digits.
    InvalidToken,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::NoNodes => write!(
                f,
                "no Redis nodes given: pass at least one URL (five independent nodes are recommended)"
            ),
            ConfigError::InvalidUrl { url, reason } => write!(
                f,
                "node URL {url:?} is invalid ({reason}): use redis://[:password@]host:port[/db]"
            ),
            ConfigError::DuplicateNode { node } => write!(
                f,
                "node {node} is given twice: every node must be a distinct Redis server"
            ),
            ConfigError::InvalidDriftFactor(x) => {
                write!(
                    f,
                    "drift factor {x} must be a number in 0.0..1.0 (default 0.01)"
                )
            }
            ConfigError::InvalidKeepAliveFraction(x) => write!(
                f,
                "keep-alive fraction {x} must be a number between 0.0 and 1.0 (default 1/3)"
            ),
            ConfigError::ZeroNodeTimeout => {
                write!(f, "the per-node timeout must be greater than zero")
            }
            ConfigError::ZeroConnectTimeout => {
                write!(f, "the connect timeout must be greater than zero")
            }
            ConfigError::ZeroInFlight => write!(
                f,
                "max_in_flight must be at least 1 (requests on the wire to one node at once; \
                 default 256)"
            ),
            ConfigError::InFlightTooLarge { requests, max } => write!(
                f,
                "max_in_flight {requests} is more than the {max} requests a connection queues: \
                 give at most {max} (default 256; more requests wait their turn in the client)"
            ),
            ConfigError::TimeoutTooLong {
                option,
                timeout,
                max,
            } => write!(
                f,
                "{option} {timeout:?} is longer than the most accepted, {max:?}: a node that takes \
                 longer than that to answer is as good as down; give milliseconds to seconds"
            ),
            ConfigError::ZeroTtl => write!(f, "the TTL must be at least 1 ms"),
            ConfigError::TtlTooLarge { ttl, max } => {
                write!(f, "TTL {ttl:?} is larger than Redis accepts ({max:?})")
            }
            ConfigError::DriftExceedsTtl { ttl, drift } => write!(
                f,
                "TTL {ttl:?} is not larger than its clock drift allowance {drift:?}: use a longer TTL or a smaller drift factor"
            ),
            ConfigError::TimeoutNotBelowTtl { node_timeout, ttl } => write!(
                f,
                "per-node timeout {node_timeout:?} is not smaller than TTL {ttl:?}: use a longer TTL or a shorter node timeout"
            ),
            ConfigError::MinValidityTooLong {
                min_validity,
                ttl,
                drift,
            } => write!(
                f,
                "minimum validity {min_validity:?} is not below TTL {ttl:?} less its drift allowance {drift:?}, \
                 so no acquisition could succeed: use a longer TTL or a smaller min_validity"
            ),
            ConfigError::NoResources => {
                write!(f, "lock_all was given no resource: pass at least one name")
            }
            ConfigError::KeyTooLong { bytes } => write!(
                f,
                "a resource's key is {bytes} bytes, beyond the 512 MB Redis takes: use a shorter resource name"
            ),
            ConfigError::EmptyCandidate => write!(
                f,
                "the identity of an election's candidate is empty: pass one that names it (a host name, a pod name)"
            ),
            ConfigError::ValueTooLong { bytes } => write!(
                f,
                "a leader's value of {bytes} bytes is longer than the {} allowed: publish where to find it (an address), not the data itself",
                crate::MAX_LEADER_VALUE
            ),
            ConfigError::EmptyOwner => write!(
                f,
                "the owner id of a reentrant lock is empty: pass an id that names the owner (a job or request id)"
            ),
            ConfigError::TlsNotEnabled { url } => write!(
                f,
                "node URL {url:?} uses TLS, which needs redquorum's `tls` feature: \
                 `cargo add redquorum --features tls`"
            ),
            ConfigError::SentinelNotEnabled { url } => write!(
                f,
                "node URL {url:?} is a Sentinel-managed node's, which needs redquorum's \
                 `sentinel` feature: `cargo add redquorum --features sentinel`"
            ),
            ConfigError::InvalidSentinelUrl { url, reason } => write!(
                f,
                "Sentinel node URL {url:?} is invalid ({reason}): use \
                 redis+sentinel://[user:password@]host1:port1[,host2:port2...]/<master-name>[/<db>]\
                 [?sentinel_password=...] (the password before '@' is the data nodes', \
                 sentinel_password the sentinels')"
            ),
            ConfigError::SentinelTlsNotSupported { url } => write!(
                f,
                "node URL {url:?} asks for TLS to a Sentinel-managed node, which redquorum does \
                 not support yet: use redis+sentinel:// on a trusted network, or give the \
                 primaries as rediss:// nodes"
            ),
            ConfigError::InvalidClusterUrl { url, reason } => write!(
                f,
                "cluster node URL {url:?} is invalid: {reason} \
                 (redis+cluster://[user:password@]host:port[,host:port...])"
            ),
            ConfigError::InvalidKeyPrefix { prefix } => write!(
                f,
                "key prefix {prefix:?} is empty or holds '{{' or '}}', which with a Redis Cluster \
                 node (hash-tagged keys) could give two names one key: use a non-empty prefix \
                 without braces, such as the default \"redquorum:\""
            ),
            ConfigError::ClusterNotEnabled { url } => write!(
                f,
                "node URL {url:?} is a Redis Cluster, which needs redquorum's `cluster` feature: \
                 `cargo add redquorum --features cluster`"
            ),
            ConfigError::InsecureTls { url } => write!(
                f,
                "node URL {url:?} asks to skip the checks of the node's TLS certificate \
                 (#insecure), which redquorum does not do: anyone on the way could stand in \
                 for the node and grant locks. Drop #insecure; if the node's certificate is \
                 signed by a private CA (or is self-signed), trust that CA with \
                 Builder::tls_root_certificate(std::fs::read(\"ca.pem\")?)"
            ),
            ConfigError::InvalidCertificate { option, reason } => write!(
                f,
                "the PEM given to Builder::{option} cannot be used ({reason}): \
                 pass the file's contents, e.g. std::fs::read(\"ca.pem\")?"
            ),
            ConfigError::Permits { permits } => write!(
                f,
                "a semaphore of {permits} permits: ask for 1 to 1024 (for one holder at a time, \
                 take a plain lock)"
            ),
            ConfigError::Combination(asked) => write!(
                f,
                "a lock cannot be {asked}: reentrant holds and fencing tokens are on one resource, \
                 and fencing tokens are for plain locks; use lock(resource, ttl).reentrant(owner), \
                 lock(resource, ttl).fenced() or lock_all(resources, ttl)"
            ),
            ConfigError::InvalidToken => write!(
                f,
                "not a lock token: a lock's token is 40 lower-case hex digits, as Lock::token() or \
                 Redlock::status() shows it"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// How the nodes voted on one operation.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub(crate) needed: usize,
    pub(crate) agreed: usize,
    /// Every node that did not agree, with its reason, in node order.
    pub(crate) nodes: Vec<(String, NodeFailure)>,
}

impl Report {
    /// How many nodes agreed.
    pub fn agreed(&self) -> usize {
        self.agreed
    }

    /// How many had to agree (the quorum, `N/2 + 1`).
    pub fn needed(&self) -> usize {
        self.needed
    }

    /// The nodes that did not agree, each with its reason.
    pub fn failures(&self) -> &[(String, NodeFailure)] {
        &self.nodes
    }

    /// How many nodes had the key under another owner's token.
    pub fn held_by_others(&self) -> usize {
        self.count(|f| matches!(f, NodeFailure::Contended))
    }

    /// How many nodes were asked: those that agreed and those that did
    /// not.
    pub fn total(&self) -> usize {
        self.agreed + self.nodes.len()
    }

    /// How many nodes failed for want of availability
    /// ([`NodeFailure::is_unavailable`]).
    pub fn unavailable(&self) -> usize {
        self.count(NodeFailure::is_unavailable)
    }

    /// Whether the nodes available were fewer than a majority: the
    /// operation could not have succeeded whatever they answered (see
    /// [`Error::is_unavailable`]).
    pub fn is_unavailable(&self) -> bool {
        self.total() - self.unavailable() < self.needed
    }

    pub(crate) fn count(&self, pred: impl Fn(&NodeFailure) -> bool) -> usize {
        self.nodes.iter().filter(|(_, f)| pred(f)).count()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} needed nodes agreed", self.agreed, self.needed)?;
        for (i, (node, failure)) in self.nodes.iter().enumerate() {
            f.write_str(if i == 0 { " (" } else { "; " })?;
            write!(f, "{node}: {failure}")?;
        }
        if !self.nodes.is_empty() {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Why one node did not agree.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeFailure {
    /// The key is held under another owner's token (or holds a value that is
    /// not a lock token, which `SET NX` cannot tell apart).
    Contended,
    /// The key is gone on this node: it expired, was released, or the node
    /// restarted without persistence.
    Missing,
    /// No answer within the per-node timeout. The command may still have
    /// been applied; acquisitions roll it back like any other.
    Timeout,
    /// The node was not asked, or had not answered, when the outcome was
    /// already decided by the others.
    NotWaited,
    /// The node could not be reached or the connection dropped.
    Connection(String),
    /// The TLS handshake failed: a certificate the client does not trust, a
    /// name that does not match, or the node's alert (a client certificate
    /// required), as rustls reports them; or redis-rs could not build a TLS
    /// configuration from the certificates given. A connection that breaks
    /// later is a [`Connection`](NodeFailure::Connection) failure.
    Tls(String),
    /// The node refused our credentials (`NOAUTH`, `WRONGPASS`).
    Auth(String),
    /// The node's ACL does not let this client's user run a command a lock
    /// needs, or touch one of its keys or channels (`NOPERM`, or an ACL
    /// failure inside a script). Its `Display` says what the user needs.
    /// A new connection is refused this way, before any lock is sent on
    /// it, when the user may not run the scripts that extend and release
    /// locks (`EVALSHA`, `EVAL`): the node never grants a lock the client
    /// could not release.
    Denied {
        /// The command refused, where the node named it (Redis 7.0 does
        /// not inside a script; nor for a key or a channel).
        command: Option<String>,
        /// The node's answer.
        message: String,
    },
    /// The node answered `MOVED` or `ASK`: it is a member of a Redis
    /// Cluster, given as a plain server (`redis://`). Give the whole cluster
    /// as one node, `redis+cluster://host:port[,host:port…]` (crate
    /// feature `cluster`) or [`Builder::cluster_node`](crate::Builder::cluster_node).
    ClusterMember(String),
    /// The key holds a value of another type (`WRONGTYPE`).
    WrongType(String),
    /// The node is out of memory (`OOM`): `maxmemory` is reached under
    /// `noeviction`.
    OutOfMemory(String),
    /// The node is a read-only replica (`READONLY`).
    ReadOnly(String),
    /// The node restarted or failed over less than a TTL ago (as its uptime
    /// says, on any connection, the first one included; or as this client
    /// saw) and may have forgotten locks it granted before: acquisitions get
    /// no vote from it until the keys it may have forgotten would have
    /// expired. Nothing was sent. See
    /// [`Builder::restart_guard`](crate::Builder::restart_guard).
    Restarted {
        /// How long it still gets no vote.
        remaining: Duration,
    },
    /// The resource's fencing counter (`<key>:fence`) on this node holds
    /// something redquorum never writes there: not a whole number from 0
    /// below 2^53 (`nan`, `inf`, `-5` or `1.5`, which Lua would otherwise
    /// take for numbers; text; a key of another type). The fenced scripts
    /// refuse it before writing anything: no token can be drawn from it.
    BadFenceCounter {
        /// The counter's key.
        key: String,
    },
    /// The resource is a semaphore of another number of permits on this
    /// node than the call asked for
    /// ([`LockRequest::permits`](crate::LockRequest::permits)). The
    /// number belongs to the semaphore, set by its first holder; a caller
    /// that disagrees is refused, never admitted beyond it. Nothing was
    /// written.
    PermitsMismatch {
        /// The semaphore's number of permits on this node.
        permits: u32,
    },
    /// None of a Sentinel-managed node's sentinels could be asked for the
    /// primary: each one's reason, by address.
    SentinelsUnreachable(String),
    /// The sentinels of a Sentinel-managed node (not its data nodes)
    /// refused this client's credentials, or their ACL refused it `SENTINEL`
    /// (none of the others answered either). The sentinels' user and
    /// password are the URL's `sentinel_username` and `sentinel_password`
    /// query parameters; the `user:password@` before the addresses is the
    /// data nodes'.
    SentinelAuth {
        /// The master name asked for.
        master: String,
        /// Each sentinel's answer, by address.
        answers: String,
    },
    /// The sentinels of a Sentinel-managed node monitor no master of the
    /// node's name.
    UnknownMaster {
        /// The master name asked for.
        master: String,
    },
    /// The sentinels of a Sentinel-managed node named no primary by a
    /// majority of those listed in its URL: some named another address, did
    /// not answer, or know no such master (a failover under way, sentinels
    /// cut off from each other, or a URL that lists too few of them). No
    /// connection was made: a primary named by a minority may be an old one
    /// that still accepts writes. The next connection asks again.
    SentinelsDisagree {
        /// The master name asked for.
        master: String,
        /// Each sentinel's answer, by address.
        answers: String,
    },
    /// The server the sentinels named as a Sentinel-managed node's primary
    /// says it is not a master (`ROLE`): a failover is under way, or the
    /// sentinels' view is stale. Nothing was sent; the next connection asks
    /// again.
    NotPrimary {
        /// The master name asked for.
        master: String,
        /// The address the sentinels named.
        addr: String,
        /// What it says it is (`slave`, `sentinel`).
        role: String,
    },
    /// The Redis client refused to send the request: a mistake in its
    /// configuration for this node (redis-rs's `InvalidClientConfig` and
    /// client-side errors), not an answer from the node. Nothing was sent.
    Client(String),
    /// Any other error answer from Redis.
    Server {
        /// The error code (`ERR`, `NOSCRIPT`, `BUSY`, …).
        code: String,
        /// The full message.
        message: String,
    },
}

impl NodeFailure {
    /// Whether the node gave no answer: a timeout or a broken connection,
    /// after which the command may or may not have been applied; a TLS
    /// failure; or a Sentinel-managed node whose primary could not be found
    /// this time (nothing was sent, but an earlier command may have landed
    /// there, and a removal is worth sending again once it is found). The
    /// one list: the tally's "may hold our key" and "replied" use it too
    /// (`proto::quorum`).
    pub(crate) fn unanswered(&self) -> bool {
        matches!(
            self,
            NodeFailure::Timeout
                | NodeFailure::Connection(_)
                | NodeFailure::Tls(_)
                | NodeFailure::SentinelsUnreachable(_)
                | NodeFailure::SentinelAuth { .. }
                | NodeFailure::UnknownMaster { .. }
                | NodeFailure::SentinelsDisagree { .. }
                | NodeFailure::NotPrimary { .. }
        )
    }
}

impl NodeFailure {
    /// Whether the node could not take part in the vote: it gave no answer
    /// (a timeout, a broken or refused connection, a host name that does
    /// not resolve), refused our credentials or an ACL permission, could
    /// not be found through its sentinels, failed its TLS handshake, is a
    /// read-only replica, out of memory, restarted too recently to vote, or
    /// answered another error. Not so: a node that answered the resource's
    /// state ([`Contended`](Self::Contended), [`Missing`](Self::Missing), a
    /// [`PermitsMismatch`](Self::PermitsMismatch), a key of another type or
    /// a bad fencing counter), nor one not waited for
    /// ([`NotWaited`](Self::NotWaited)).
    pub fn is_unavailable(&self) -> bool {
        !matches!(
            self,
            NodeFailure::Contended
                | NodeFailure::Missing
                | NodeFailure::NotWaited
                | NodeFailure::PermitsMismatch { .. }
                | NodeFailure::WrongType(_)
                | NodeFailure::BadFenceCounter { .. }
        )
    }

    /// Whether waiting will not mend this failure: refused credentials
    /// ([`Auth`](Self::Auth), [`SentinelAuth`](Self::SentinelAuth)), an ACL
    /// permission ([`Denied`](Self::Denied)), a member of a Redis Cluster
    /// given as a plain server ([`ClusterMember`](Self::ClusterMember)), a
    /// Sentinel master name the sentinels do not know
    /// ([`UnknownMaster`](Self::UnknownMaster)), a TLS handshake refused
    /// ([`Tls`](Self::Tls)), the client's own configuration
    /// ([`Client`](Self::Client)), or a host name that does not resolve (a
    /// [`Connection`](Self::Connection) failure whose reason is the
    /// resolver's). Each needs an operator, not a retry.
    pub fn is_lasting(&self) -> bool {
        match self {
            NodeFailure::Auth(_)
            | NodeFailure::SentinelAuth { .. }
            | NodeFailure::Denied { .. }
            | NodeFailure::ClusterMember(_)
            | NodeFailure::UnknownMaster { .. }
            | NodeFailure::Tls(_)
            | NodeFailure::Client(_) => true,
            NodeFailure::Connection(reason) => unresolved(reason),
            _ => false,
        }
    }

    /// Whether the node refused the connection: nothing listens on its
    /// address (it is down, restarting, or the port is wrong). Not
    /// [lasting](Self::is_lasting): a node restarting refuses for a while.
    pub fn is_refused(&self) -> bool {
        matches!(self, NodeFailure::Connection(reason) if reason.contains("Connection refused"))
    }
}

/// Whether a connection failure's reason is the resolver's: the host name
/// does not resolve. Read from the text, as the I/O error the Redis client
/// passes on has no kind of its own for it (Rust's standard library words
/// it so on every Unix).
fn unresolved(reason: &str) -> bool {
    // A resolver that could not answer now (`EAI_AGAIN`: "Temporary
    // failure in name resolution", a DNS server restarting, a name not yet
    // published for a pod that is starting) is not an answer that the name
    // does not exist: waiting may mend it.
    reason.contains("failed to lookup address information") && !reason.contains("Temporary failure")
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeFailure::Contended => write!(f, "held by another owner"),
            NodeFailure::Missing => {
                write!(f, "key not found (expired, released or node restarted)")
            }
            NodeFailure::Timeout => write!(f, "no answer within the per-node timeout"),
            NodeFailure::NotWaited => write!(f, "not waited for (the outcome was already decided)"),
            NodeFailure::Connection(e) => write!(f, "connection failed: {e}"),
            NodeFailure::Tls(e) => write!(
                f,
                "TLS failed ({e}): trust the CA that signed the node's certificate \
                 (Builder::tls_root_certificate), use the host name the certificate names, \
                 and give a client certificate where the node asks for one \
                 (Builder::tls_client_certificate)"
            ),
            NodeFailure::Auth(e) => write!(
                f,
                "authentication failed ({e}): put the right credentials in the node's URL, \
                 redis://user:password@host:port (an ACL user also needs: {})",
                ACL_NEEDED
            ),
            NodeFailure::Denied { command, message } => {
                let refused = match command {
                    Some(command) => format!("the command {command}"),
                    None => "a command, key or channel a lock needs".to_owned(),
                };
                write!(
                    f,
                    "the node's ACL refuses this client's user {refused} ({message}): give the \
                     user, on every node, ACL SETUSER <user> {}",
                    ACL_NEEDED
                )?;
                if let Some(command) = command {
                    write!(f, "; what is refused now: +{command}")?;
                }
                Ok(())
            }
            NodeFailure::ClusterMember(e) => write!(
                f,
                "the node is a member of a Redis Cluster ({e}), given as a plain server: give \
                 the whole cluster as one node, redis+cluster://host:port[,host:port...] or \
                 Builder::cluster_node (redquorum's `cluster` feature), each independent \
                 cluster one node"
            ),
            NodeFailure::WrongType(e) => write!(
                f,
                "the key holds a non-lock value ({e}): choose a key prefix that no other data uses, \
                 and no resource named like another's side keys (<name>:fence, :waiters, :intent, \
                 :leader, :terms)"
            ),
            NodeFailure::OutOfMemory(e) => write!(
                f,
                "the node is out of memory ({e}): raise maxmemory or free memory on it"
            ),
            NodeFailure::ReadOnly(e) => write!(
                f,
                "the node is a read-only replica ({e}): Redlock needs independent masters"
            ),
            NodeFailure::Restarted { remaining } => write!(
                f,
                "the node restarted or failed over less than a TTL ago and may have forgotten \
                 locks it granted: it gets no vote on acquisitions for another {} ms, until \
                 they would have expired; nodes run with appendfsync always keep their keys \
                 and can do without this (Builder::restart_guard)",
                remaining.as_millis()
            ),
            NodeFailure::BadFenceCounter { key } => write!(
                f,
                "the fencing counter {key:?} holds no whole number from 0 below 2^53 (NaN, an \
                 infinity, a negative or fractional number, or no number), so no token can be \
                 drawn and nothing was written: redquorum writes only such numbers there, so \
                 someone else wrote it; on this node, set it to the largest counter the other \
                 nodes hold for the resource, or delete it where tokens follow the clock \
                 (Builder::fence_time_floor, the default)"
            ),
            NodeFailure::PermitsMismatch { permits } => write!(
                f,
                "the resource is a semaphore of {permits} permits here, not the number this call \
                 asked for: every caller of one semaphore must ask for the same number (a new \
                 number takes effect once every permit has been let go or has expired)"
            ),
            NodeFailure::SentinelsUnreachable(e) => write!(
                f,
                "no sentinel of the node could be asked for its primary ({e}): check the \
                 sentinel addresses in the node's URL, that they run and are reachable from \
                 here, and their credentials (?sentinel_password=...)"
            ),
            NodeFailure::SentinelAuth { master, answers } => write!(
                f,
                "the sentinels of {master:?} refused this client's credentials ({answers}): \
                 the sentinels' user and password are the URL's query parameters, \
                 ?sentinel_username=...&sentinel_password=... (percent-encoded), not the \
                 user:password@ before the addresses, which is the data nodes'; an ACL user \
                 on the sentinels needs +sentinel|get-master-addr-by-name +sentinel|master"
            ),
            NodeFailure::UnknownMaster { master } => write!(
                f,
                "the node's sentinels monitor no master named {master:?}: use the name of their \
                 `sentinel monitor <name> ...` line as the URL's path"
            ),
            NodeFailure::SentinelsDisagree { master, answers } => write!(
                f,
                "no majority of the sentinels listed for {master:?} names one primary \
                 ({answers}): nothing was sent, since a primary only some name may be an old one \
                 still accepting writes; a failover under way settles within seconds (if it \
                 lasts, check that the URL lists every sentinel and that they agree: SENTINEL \
                 CKQUORUM {master})"
            ),
            NodeFailure::NotPrimary { master, addr, role } => write!(
                f,
                "the sentinels name {addr} as the primary of {master:?}, but it says it is a \
                 {role} (a failover under way, or sentinels with a stale view): nothing was \
                 sent there; the next connection asks the sentinels again (if it lasts, check \
                 that the sentinels agree: SENTINEL CKQUORUM {master})"
            ),
            NodeFailure::Client(e) => write!(
                f,
                "the Redis client refused to send the request ({e}): its configuration for this \
                 node is wrong (the node's URL, or the builder's options); the node was not asked"
            ),
            NodeFailure::Server { message, .. } => write!(f, "Redis error: {message}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn not_acquired(agreed: usize, failures: &[NodeFailure], gave_up: GaveUp) -> Error {
        Error::NotAcquired {
            resource: "r".into(),
            attempts: 1,
            gave_up,
            holder: None,
            report: Report {
                needed: (agreed + failures.len()) / 2 + 1,
                agreed,
                nodes: failures
                    .iter()
                    .enumerate()
                    .map(|(i, f)| (format!("n{i}"), f.clone()))
                    .collect(),
            },
        }
    }

    /// Five nodes: contention is what the holds alone explain; an outage
    /// is too few nodes available for a majority, whatever the rest said.
    #[test]
    fn contention_and_unavailability_are_told_apart() {
        use NodeFailure::{Auth, Contended, NotWaited, Timeout};
        let refused = || NodeFailure::Connection("Connection refused (os error 111)".into());
        let retries = GaveUp::Retries;
        let cases: [(usize, Vec<NodeFailure>, bool, bool); 8] = [
            // Contended on three, two not waited for: contention.
            (
                0,
                vec![Contended, Contended, Contended, NotWaited, NotWaited],
                true,
                false,
            ),
            // Two down, three held: the holder's release would let the
            // three agree. Contention.
            (
                0,
                vec![Timeout, refused(), Contended, Contended, Contended],
                true,
                false,
            ),
            // Two down, one held (the decision came there): contention.
            (
                0,
                vec![Timeout, Timeout, Contended, NotWaited, NotWaited],
                true,
                false,
            ),
            // Three down, two held: no majority even if nobody held it.
            (
                0,
                vec![Timeout, Timeout, Timeout, Contended, Contended],
                false,
                true,
            ),
            (2, vec![Timeout, refused(), Timeout], false, true),
            (0, vec![Auth("WRONGPASS".into()); 5], false, true),
            // Two agreed, one down, two not waited for: neither (a
            // validity too short, say).
            (2, vec![Timeout, NotWaited, NotWaited], false, false),
            (3, vec![Timeout, Timeout], false, false),
        ];
        for (agreed, failures, contended, unavailable) in cases {
            let e = not_acquired(agreed, &failures, retries);
            assert_eq!(e.is_contended(), contended, "{e}");
            assert_eq!(e.is_unavailable(), unavailable, "{e}");
        }
        let lasting = not_acquired(0, &[Contended, Contended, Contended], GaveUp::Unavailable);
        assert!(lasting.is_unavailable() && !lasting.is_contended());
        assert!(
            !Error::Lost {
                resource: "r".into()
            }
            .is_unavailable()
        );
    }

    #[test]
    fn lasting_failures_are_those_waiting_does_not_mend() {
        let lasting = [
            NodeFailure::Auth("NOPERM".into()),
            NodeFailure::UnknownMaster { master: "m".into() },
            NodeFailure::Connection(
                "failed to lookup address information: Name or service not known".into(),
            ),
            NodeFailure::Client("bad".into()),
        ];
        for f in lasting {
            assert!(f.is_lasting() && f.is_unavailable(), "{f}");
        }
        let passing = [
            NodeFailure::Timeout,
            NodeFailure::Connection("Connection refused (os error 111)".into()),
            NodeFailure::Restarted {
                remaining: Duration::from_secs(1),
            },
            NodeFailure::Contended,
        ];
        for f in passing {
            assert!(!f.is_lasting(), "{f}");
        }
        assert!(NodeFailure::Connection("Connection refused (os error 111)".into()).is_refused());
        assert!(!NodeFailure::Contended.is_unavailable());
        assert!(!NodeFailure::NotWaited.is_unavailable());
    }

    /// Messages wrapped across source lines keep single spaces (a line
    /// continuation without its `\` keeps the next line's indentation).
    #[test]
    fn messages_have_no_runs_of_spaces() {
        let failures = [
            NodeFailure::PermitsMismatch { permits: 2 },
            NodeFailure::Restarted {
                remaining: Duration::from_secs(1),
            },
            NodeFailure::Auth("WRONGPASS".into()),
            NodeFailure::Denied {
                command: Some("evalsha".into()),
                message: "NOPERM".into(),
            },
            NodeFailure::ClusterMember("MOVED 1 h:1".into()),
            NodeFailure::SentinelAuth {
                master: "m".into(),
                answers: "h:1 refused the credentials: WRONGPASS".into(),
            },
            NodeFailure::UnknownMaster { master: "m".into() },
            NodeFailure::BadFenceCounter { key: "k".into() },
        ];
        for failure in failures {
            let shown = failure.to_string();
            assert!(!shown.contains("  "), "{shown:?}");
        }
    }
}
