//! The restart guard: a node that restarted without persistence has
//! forgotten the keys it granted, so its vote on an acquisition could hand
//! out a lock that is still held elsewhere. It gets no vote on acquisitions
//! (a *quarantine*) until those keys would have expired.
//!
//! **The rule.** Every new connection starts with `INFO server`, the first
//! one included. The node's start is `uptime_in_seconds` ago (Redis
//! reports whole wall-clock seconds, so we take a second off); a key
//! granted before it lives at most one TTL past it. So an acquisition of
//! TTL `t` gets no vote from the node until its start plus the longer of
//! `t` and the longest TTL this client uses (other clients are assumed to
//! use TTLs like ours: "the longest" is the longest among our keys that
//! may still be alive, so one long TTL, once, stops counting once its key
//! could have expired). The moment is kept, not turned into a deadline
//! when it is learnt: a restart seen by a read, before this client took
//! any lock (it knew no TTL then), holds the next acquisition all the
//! same. This is what makes the promise hold whatever the client has
//! seen:
//!
//! * a process that first meets a node after the node restarted empty
//!   has no earlier `run_id` to compare, but the uptime says it;
//! * a restart seen by `status`, `leader()` or `observe()` before any
//!   lock keeps its moment;
//! * on top of that, a `run_id` other than the one seen on the previous
//!   connection means a restart this client saw: no vote while the keys
//!   *this client* sent there may live, exactly (the send moment plus TTL
//!   plus drift, on our monotonic clock, recorded before the command is
//!   sent).
//!
//! The price: a node restarted less than a TTL ago gives a fresh process
//! no vote for the rest of that TTL, whether it forgot anything or not. A
//! new node has nothing to forget, but cannot be told from a restarted
//! one by what it says of itself; whoever starts it empty as a new node
//! can declare it *born empty* — its `run_id` in the set
//! `redquorum-born-empty` ([`BORN_EMPTY_KEY`]; the local launchers and
//! `redquorum servers up` do, `local_servers::declare_born_empty`) — and
//! a client that first meets it then holds nothing against its uptime. A
//! restart draws a new `run_id` that the set does not name; a declared
//! primary that failed over and back keeps its `run_id`, so the
//! declaration counts only for a server never promoted in its life
//! (`second_repl_offset:-1` in `INFO replication`, read at first contact).
//!
//! Only what is sent counts as a TTL in use (an acquisition refused here is
//! no key), and the term a restart gives the TTLs in use when it is seen
//! is kept: a shorter TTL used afterwards does not shorten it. Moments are
//! kept with a bias, so a node up for longer than this machine's clock has
//! counted (just after boot; off Linux, the process's first reading) keeps
//! its start, rather than being taken as started at the clock's zero.
//!
//! Releases and extensions are never refused: they compare the token and
//! cannot create a key.
//!
//! **A node that fails over** (a Sentinel-managed primary, see
//! `net::sentinel`) loses what asynchronous replication had
//! not copied to the promoted replica, exactly as a restart without
//! persistence loses everything. Its identity is its replication ID
//! ([`primary_identity`]): Redis draws a new one at every promotion and
//! every start, so a restart, a failover *and a failback* (P fails over to
//! R, then R back to P, whose `run_id` this client knows) are new
//! identities. The promoted replica's `uptime_in_seconds` is its process
//! uptime, not the time since it became the primary: on a new identity
//! the start is taken as now, plus a margin: the time a client still
//! connected to the old primary may go on writing there after a majority
//! of the sentinels named the new one — the re-check period, two sentinel
//! queries and a request timeout (`net::failover_margin` argues it) — and,
//! as for any node, no vote while our own keys there may live. What the
//! guard sees and does not:
//!
//! * It sees a failover or failback, and a restart of the primary, at this
//!   client's first new connection after it (a Sentinel-managed node's
//!   connection is retired within a re-check once the sentinels' majority
//!   names another primary), also if this client slept through both.
//! * A failover before this client first connected to the node: the
//!   primary says it was promoted in its life (`second_repl_offset` in
//!   `INFO replication`), and its uptime is the replica's process's, so
//!   the sentinels time it (`sentinel::Sentinel::switched_ago`: the least
//!   `role-reported-time` of a majority) and the node is out for the
//!   longest TTL plus the margin from that switch (from now, if they
//!   cannot say).
//! * It cannot see keys written to an old primary past the margin by a
//!   client that
//!   never re-checks (another Redlock library) or uses longer timeouts
//!   than this one (the margin is this client's). A client cut off from
//!   the sentinels has no connection to the node (no majority confirms its
//!   primary). Run the data nodes with `min-replicas-to-write 1` and a
//!   small `min-replicas-max-lag` to bound that window (the old primary
//!   then refuses writes, `NOREPLICAS`, once its replica stops
//!   acknowledging): the only real bound.
//! * A failover to a replica that had copied every key is harmless, and is
//!   quarantined all the same: the guard cannot tell what was copied.
//!
//! **A node that is a Redis Cluster** (see [`cluster`](super::topology::cluster))
//! keeps one connection across its shards' failovers, so the guard learns
//! its primaries at connect (each one's uptime starts the node's memory
//! as a plain node's does) and is told which primary ran each grant. A
//! primary is identified as a Sentinel-managed one is. A grant by an
//! identity not seen is no vote, and the node is quarantined as after a
//! failover. The time of a shard's failover before this client first
//! connected is not seen: a cluster keeps no switch time, and the
//! promoted replica's uptime is its process's.
//!
//! A node that refuses `INFO` (an ACL) cannot be watched: it votes, with a
//! warning once that says how to fix it (allow `INFO`, or persistence and
//! `restart_guard(false)`); one that answered before and refuses now is
//! taken as restarted just now.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::clock::Moment;
use crate::error::NodeFailure;
use crate::info::info_field;
use crate::proto::Effect;

/// How much more than the time since its start a node's reported uptime may
/// be. Redis subtracts two wall-clock readings truncated to whole seconds.
const UPTIME_SLACK: Duration = Duration::from_secs(1);

/// Added to the moments kept in [`Guard::forgot_at`] (as nanoseconds), so
/// that a node's start before this machine's clock began (a node up for
/// longer than the machine, or than the process off Linux) is kept as it
/// is, not moved up to the clock's zero: 2^62 ns, about 146 years.
const BIAS: u64 = 1 << 62;

/// The key of the set of `run_id`s of server processes that were started
/// empty as new nodes, never having granted anything before (see the
/// module doc).
pub(crate) const BORN_EMPTY_KEY: &str = "redquorum-born-empty";

/// What the guards of one `Redlock`'s nodes share: the lives of its
/// acquisitions and extensions whose keys may still be alive, the longest
/// of which is taken as what other clients use too.
#[derive(Debug, Default)]
pub(crate) struct Lives {
    /// Each life in use, with until when a key sent with it may live: a
    /// staircase (a longer life, an earlier end), since an entry with a
    /// shorter life and an earlier end than another never matters.
    alive: Mutex<Vec<(Duration, Moment)>>,
    /// The longest life alive when last noted, in nanoseconds, read by
    /// every acquisition's check without the lock (stale only high).
    life: AtomicU64,
}

/// How many distinct lives [`Lives`] keeps; past it the two shortest are
/// merged into one with the longer life and the later end (which only
/// lengthens quarantines).
const MAX_LIVES: usize = 16;

impl Lives {
    fn note(&self, life: Duration, now: Moment) {
        let mut alive = self.alive.lock().unwrap_or_else(|p| p.into_inner());
        let until = now.after(life);
        alive.retain(|&(_, end)| end > now);
        if alive.iter().any(|&(l, end)| l >= life && end >= until) {
            // Dominated: nothing changes.
        } else {
            alive.retain(|&(l, end)| !(l <= life && end <= until));
            alive.push((life, until));
            alive.sort_by_key(|&(l, _)| l);
            if alive.len() > MAX_LIVES {
                let (l, end) = alive.remove(1);
                alive[0] = (l, end.max(alive[0].1));
            }
        }
        let longest = alive.last().map_or(life, |&(l, _)| l);
        let nanos = u64::try_from(longest.as_nanos()).unwrap_or(u64::MAX);
        self.life.store(nanos, Ordering::Release);
    }

    fn longest(&self) -> Duration {
        Duration::from_nanos(self.life.load(Ordering::Acquire))
    }
}

/// One node's restart guard.
#[derive(Debug)]
pub(crate) struct Guard {
    lives: Arc<Lives>,
    /// The latest moment a key we sent to this node may live to, as
    /// [`Moment::as_nanos`].
    latest_expiry: AtomicU64,
    /// Until when acquisitions get no vote whatever their TTL (our own keys
    /// that the node may have forgotten), as [`Moment::as_nanos`]; 0 when
    /// there is none.
    quarantine: AtomicU64,
    /// The latest moment the node may have started forgetting: its last
    /// (re)start or failover as best known, as [`Moment::as_nanos`] plus
    /// [`BIAS`]; 0 while none is known. The keys other clients had there
    /// live at most one TTL past it.
    forgot_at: AtomicU64,
    /// The `forgot_at` a refusal was last warned about (one warning each).
    warned: AtomicU64,
    /// The node's identity (its `run_id`; the replication ID for a node
    /// that fails over) as of the last connection, once known.
    identity: Mutex<Option<String>>,
    /// A cluster node's primaries seen so far, by identity (replication
    /// ID, see [`primary_identity`] and
    /// [`cluster`](super::topology::cluster)): a grant by another one is no vote.
    primaries: Mutex<std::collections::HashSet<String>>,
    /// Whether the node has refused `INFO`, so that its restarts cannot be
    /// seen (warned about once).
    unwatched: AtomicBool,
    /// For a node that fails over to a replica that was running all along
    /// (its uptime is then not the time since it holds the keys, and is
    /// taken as zero): how much longer than the longest TTL a new identity
    /// keeps it out, the time a client may still write to the old primary
    /// after the sentinels named the new one (`net::failover_margin`).
    failover: Option<Duration>,
}

/// What `INFO` tells of a node's process, and whether it was declared
/// born empty.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// Drawn afresh at every start: a new one means the node restarted.
    /// For a node that fails over, it is the replication ID instead
    /// ([`primary_identity`]), drawn afresh at every promotion and start.
    pub(crate) identity: String,
    /// `uptime_in_seconds`.
    pub(crate) uptime: Duration,
    /// Whether [`BORN_EMPTY_KEY`] names this process: it started empty as
    /// a new node and has nothing to forget.
    pub(crate) born_empty: bool,
    /// Whether it was promoted in its life (`second_repl_offset` other
    /// than -1): its uptime is then not the time since it holds the keys.
    pub(crate) promoted: bool,
    /// For a promoted primary first met, how long ago it was promoted at
    /// least (the sentinels' switch, `sentinel::Sentinel::switched_ago`;
    /// zero when they cannot say).
    pub(crate) promoted_ago: Option<Duration>,
}

impl Guard {
    /// The guard of a node; `failover`, the margin past the longest TTL,
    /// for one whose server can change to a replica that was running all
    /// along (a Sentinel-managed node).
    pub(crate) fn new(lives: Arc<Lives>, failover: Option<Duration>) -> Guard {
        Guard {
            lives,
            latest_expiry: AtomicU64::new(0),
            quarantine: AtomicU64::new(0),
            forgot_at: AtomicU64::new(0),
            warned: AtomicU64::new(0),
            identity: Mutex::new(None),
            primaries: Mutex::default(),
            unwatched: AtomicBool::new(false),
            failover,
        }
    }

    /// Refuses a command that may create a key while the node may have
    /// forgotten keys of that life.
    pub(crate) fn admit(&self, node: &str, effect: Effect) -> Result<(), NodeFailure> {
        match effect {
            Effect::Grant { life } => self.check(node, life),
            _ => Ok(()),
        }
    }

    /// Records, right before a command is sent, how long its keys may
    /// live: ours exactly, and as what the others use too. Only what is
    /// sent counts (a refused acquisition's TTL is no key's).
    pub(crate) fn sending(&self, effect: Effect) {
        if let Some(life) = effect.life() {
            let now = Moment::now();
            self.latest_expiry
                .fetch_max(now.after(life).as_nanos(), Ordering::AcqRel);
            self.lives.note(life, now);
        }
    }

    /// Whether an acquisition of `life` may go to the node now: not while
    /// keys this client sent there before a restart may live, nor within
    /// the longer of `life` and the longest TTL we use from the moment the
    /// node may have started forgetting (other clients are assumed to use
    /// TTLs like ours). `life` zero asks about the TTLs we use.
    pub(crate) fn check(&self, node: &str, life: Duration) -> Result<(), NodeFailure> {
        // 0 (no quarantine) spares the clock read on the hot path.
        let until = self.quarantine.load(Ordering::Acquire);
        let ours = match until {
            0 => Duration::ZERO,
            until => match Moment::from_nanos(until).remaining() {
                remaining if remaining.is_zero() => {
                    // Over: back to 0, unless a newer restart moved it.
                    let _ = self.quarantine.compare_exchange(
                        until,
                        0,
                        Ordering::AcqRel,
                        Ordering::Relaxed,
                    );
                    Duration::ZERO
                }
                remaining => remaining,
            },
        };
        let forgot_at = self.forgot_at.load(Ordering::Acquire);
        let (theirs, assumed) = match forgot_at {
            0 => (Duration::ZERO, Duration::ZERO),
            at => {
                let assumed = self.lives.longest().max(life);
                let until = u128::from(at) + assumed.as_nanos();
                let now = u128::from(Moment::now().as_nanos()) + u128::from(BIAS);
                let left = u64::try_from(until.saturating_sub(now)).unwrap_or(u64::MAX);
                (Duration::from_nanos(left), assumed)
            }
        };
        let remaining = ours.max(theirs);
        if remaining.is_zero() {
            return Ok(());
        }
        if self.warned.swap(forgot_at, Ordering::Relaxed) != forgot_at {
            tracing::warn!(
                node,
                no_vote_ms = remaining.as_millis() as u64,
                ttl_ms = assumed.as_millis() as u64,
                "this node (re)started or failed over less than a TTL ago and may have forgotten \
                 locks it granted: it gets no vote on acquisitions until they would have expired"
            );
        }
        Err(NodeFailure::Restarted { remaining })
    }

    /// On a new connection: what `INFO` answered (the reason, if the node
    /// refused it or the answer lacked the fields).
    ///
    /// On every connection, the first one included, the node's start is
    /// taken from its uptime: keys other clients had there before it live
    /// at most one TTL past it ([`check`](Self::check)), unless the
    /// process was declared born empty ([`BORN_EMPTY_KEY`]) when this
    /// client first met it. A new identity since the last connection is a
    /// restart: the node also gets no vote while our own keys there may
    /// live; for a node that fails over, the start is taken as now plus
    /// the failover margin, whatever the uptime (a promoted replica's
    /// uptime is not the time since its promotion). A later connection to
    /// the same identity changes nothing.
    ///
    /// A node whose identity is known from an earlier connection and that
    /// does not answer now could have restarted unseen: it is treated as
    /// just restarted, with a warning once. One that never answered is
    /// watched by no one, with a warning once.
    pub(crate) fn connected(&self, node: &str, info: Result<ServerInfo, String>) {
        let info = match info {
            Ok(info) => info,
            Err(reason) => {
                let known = self
                    .identity
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some();
                self.unwatched(node, &reason);
                if known {
                    // As a new identity: a failover hidden behind the
                    // refusal keeps its margin too.
                    self.ours_forgotten();
                    self.started(Duration::ZERO, self.failover.unwrap_or_default());
                }
                return;
            }
        };
        let mut known = self.identity.lock().unwrap_or_else(|p| p.into_inner());
        let first = known.is_none();
        let restarted = known.as_deref().is_some_and(|id| id != info.identity);
        *known = Some(info.identity);
        drop(known);
        if first && !info.born_empty {
            match (self.failover, info.promoted_ago) {
                // A failover before we first met the node: timed by the
                // sentinels' switch, the margin added.
                (Some(margin), Some(ago)) => self.started(ago, margin),
                _ => self.started(info.uptime, Duration::ZERO),
            }
        } else if restarted {
            match self.failover {
                Some(margin) => {
                    self.ours_forgotten();
                    self.started(Duration::ZERO, margin);
                }
                None => self.restarted(info.uptime),
            }
        }
    }

    /// Whether the node has been met (its identity answered once): its
    /// [`BORN_EMPTY_KEY`] set is read only before.
    pub(crate) fn knows_identity(&self) -> bool {
        self.identity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
    }

    /// Warns once that the node's restarts cannot be seen.
    fn unwatched(&self, node: &str, reason: &str) {
        if !self.unwatched.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                node,
                reason,
                "INFO failed on this node, so its restarts cannot be seen: after one, it may \
                 grant locks it forgot; allow INFO in the ACL, or run the node with appendfsync \
                 always and turn Builder::restart_guard off"
            );
        }
    }

    /// The node restarted `uptime` ago (or just now, for zero): no vote
    /// while our keys there may live, nor within a TTL of its start.
    fn restarted(&self, uptime: Duration) {
        self.ours_forgotten();
        self.started(uptime, Duration::ZERO);
    }

    /// The node started `uptime` ago (taken a second short), lengthened by
    /// `margin`: it may have forgotten everything granted before then.
    /// Kept as the latest such moment, biased ([`BIAS`]) so that a node up
    /// for longer than this machine's clock has counted keeps its moment.
    /// The term it gives the TTLs in use now is kept as well: a shorter
    /// TTL used later does not shorten it.
    fn started(&self, uptime: Duration, margin: Duration) {
        let now = u128::from(Moment::now().as_nanos()) + u128::from(BIAS);
        let since = (now + margin.as_nanos())
            .saturating_sub(uptime.saturating_sub(UPTIME_SLACK).as_nanos());
        let since = u64::try_from(since).unwrap_or(u64::MAX).max(1);
        self.forgot_at.fetch_max(since, Ordering::AcqRel);
        let until = u128::from(since) + self.lives.longest().as_nanos();
        if until > now {
            let until = u64::try_from(until - u128::from(BIAS)).unwrap_or(u64::MAX - 1);
            self.quarantine.fetch_max(until, Ordering::AcqRel);
        }
    }

    /// Every key we sent to the node before now may be gone: no vote on
    /// acquisitions until they would have expired.
    fn ours_forgotten(&self) {
        let ours = self.latest_expiry.load(Ordering::Acquire);
        if Moment::from_nanos(ours).remaining() > Duration::ZERO {
            self.quarantine.fetch_max(ours, Ordering::AcqRel);
        }
    }

    /// On a new connection to a cluster: its primaries, each with its
    /// identity ([`primary_identity`]) and uptime, and whether it was
    /// declared born empty (the reason, if `INFO` failed). On every
    /// connection, the first one included, the youngest primary not
    /// declared born empty when first met starts the node's memory, as a
    /// plain node's uptime does. A primary not seen before, once some are
    /// known, is taken as a failover just now (a replica promoted, or a
    /// primary restarted): the node is quarantined.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_connected(&self, node: &str, info: Result<Vec<ServerInfo>, String>) {
        let primaries = match info {
            Ok(primaries) => primaries,
            Err(reason) => {
                // Warned as for any node; quarantined if primaries were
                // known (they could have failed over unseen).
                self.unwatched(node, &reason);
                if self.knows_primaries() {
                    self.restarted(Duration::ZERO);
                }
                return;
            }
        };
        let mut known = self.primaries.lock().unwrap_or_else(|p| p.into_inner());
        let first = known.is_empty();
        let mut new = false;
        for primary in primaries {
            if first && !primary.born_empty {
                self.started(primary.uptime, Duration::ZERO);
            }
            new |= known.insert(primary.identity);
        }
        drop(known);
        if new && !first {
            self.restarted(Duration::ZERO);
        }
    }

    /// A cluster node granted a key of `life`; `primary` is the identity
    /// of the primary that ran the grant ([`primary_identity`]; the
    /// reason, if it could not be told). A primary not seen before (a new
    /// process, or a known one promoted again) has taken over the slot
    /// since we last looked: it may have lost keys replication had not
    /// copied, so this grant is no vote and the node is quarantined as
    /// after a restart just now ([`NodeFailure::Restarted`]). A grant
    /// whose primary cannot be told counts, with a warning once, while no
    /// primary is known (as a node refusing `INFO` from the start does);
    /// once some are known, it is taken as a primary not seen before (as a
    /// known node that stops answering `INFO` is taken as restarted).
    pub(crate) fn granted_by(
        &self,
        node: &str,
        life: Duration,
        primary: Result<String, String>,
    ) -> Result<(), NodeFailure> {
        let primary = match primary {
            Ok(id) => id,
            Err(reason) => {
                if !self.unwatched.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        node,
                        reason,
                        "the primary that ran a grant could not be told, so a shard's \
                         failover cannot be seen: allow INFO in the ACL"
                    );
                }
                if self.knows_primaries() {
                    self.restarted(Duration::ZERO);
                    return self.check(node, life);
                }
                return Ok(());
            }
        };
        let new = self
            .primaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(primary);
        if new {
            self.restarted(Duration::ZERO);
        }
        self.check(node, life)
    }

    /// Whether a cluster node's primaries are known (from a connection
    /// whose `INFO` answered).
    pub(crate) fn knows_primaries(&self) -> bool {
        !self
            .primaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }
}

/// A primary's identity, its `master_replid`, from the text of its `INFO
/// replication` (or of its raw bytes, as a cluster's grant brings it back).
/// Redis draws a new replication ID at every promotion of a replica
/// (`shiftReplicationId`) and at every start of a primary, from an RDB file
/// too (the file's ID becomes `master_replid2`): checked on Redis 6.2.14,
/// 7.0.15 and Valkey 9.1, a primary with a replica restarted from its
/// `SAVE` came back with a new `master_replid` on each. So a new
/// identity follows a restart, a failover and a failback (P fails over to
/// R and back: P, a replica meanwhile, may lack R's grants, and P's
/// `run_id` is unchanged: the `run_id` alone would miss it); the
/// `run_id` adds nothing, and reading it would cost `INFO server` (about
/// 1 KB) with every cluster grant.
///
/// Only a primary's answer names it: a replica reports its primary's
/// `master_replid`, so an answer with a role other than `master` (a
/// primary demoted between the grant and the `INFO`) names no one.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) fn primary_identity(replication: &[u8]) -> Result<String, String> {
    // A field's value (`name` is `\n<field>:`), its line first or not.
    let field = |name: &[u8]| {
        let value = match replication.strip_prefix(&name[1..]) {
            Some(value) => value,
            None => {
                let at = replication.windows(name.len()).position(|w| w == name)?;
                &replication[at + name.len()..]
            }
        };
        let end = value
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(value.len());
        std::str::from_utf8(&value[..end]).ok().map(str::trim)
    };
    named_primary(field(b"\nrole:"), field(b"\nmaster_replid:"))
}

/// The identity `INFO replication`'s `role` and `master_replid` name: the
/// ID, where the role is `master` and the ID is told.
#[cfg(any(feature = "cluster", feature = "sentinel"))]
pub(crate) fn named_primary(role: Option<&str>, id: Option<&str>) -> Result<String, String> {
    match role {
        Some("master") => {}
        role => {
            return Err(format!(
                "INFO replication answered by a server whose role is {}, not a primary",
                role.unwrap_or("not told")
            ));
        }
    }
    match id {
        Some(id) if !id.is_empty() => Ok(id.to_owned()),
        _ => Err("no master_replid in the answer to INFO replication".to_owned()),
    }
}

/// Reads `run_id` and `uptime_in_seconds` from the text of `INFO server`.
pub(crate) fn parse_info(text: &str) -> Result<(String, Duration), String> {
    let field = |name: &str| info_field(text, name);
    let parsed = (|| {
        let run_id = field("run_id").filter(|id| !id.is_empty())?.to_owned();
        let uptime = Duration::from_secs(field("uptime_in_seconds")?.parse().ok()?);
        Some((run_id, uptime))
    })();
    parsed.ok_or_else(|| "no run_id or uptime_in_seconds in its answer".to_owned())
}

/// What the guard learns of a server from the texts of its `INFO server`
/// and `INFO replication` (where read), and the members of its
/// [`BORN_EMPTY_KEY`] set. For a node that fails over (`fails_over`), the
/// identity is its replication ID
/// ([`primary_identity`]). A server counts as born empty when the set
/// names its `run_id` and it was never promoted in its life
/// (`second_repl_offset:-1`): a declared primary that failed over and
/// back keeps its `run_id`, but not that.
pub(crate) fn server_info(
    server: &str,
    replication: Option<&str>,
    fails_over: bool,
    born_empty: &[String],
) -> Result<ServerInfo, String> {
    let (run_id, uptime) = parse_info(server)?;
    let identity = match (fails_over, replication) {
        #[cfg(any(feature = "cluster", feature = "sentinel"))]
        (true, Some(replication)) => primary_identity(replication.as_bytes())?,
        (true, _) => return Err("no answer to INFO replication".to_owned()),
        (false, _) => run_id.clone(),
    };
    let offset = replication.and_then(|text| info_field(text, "second_repl_offset"));
    let never_promoted = offset == Some("-1");
    Ok(ServerInfo {
        born_empty: never_promoted && born_empty.contains(&run_id),
        promoted: offset.is_some_and(|o| o != "-1"),
        promoted_ago: None,
        identity,
        uptime,
    })
}

/// What a new plain or Sentinel-managed connection tells the guard: `INFO
/// server`; `INFO replication` for a node that fails over, and when
/// `born`; and the [`BORN_EMPTY_KEY`] set when `born` (read only when the
/// node is first met; a refusal of it, by an ACL say, reads as empty).
/// `Err` only for a connection error; the inner `Err` is why the node
/// cannot be watched.
pub(crate) async fn ask<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    fails_over: bool,
    born: bool,
) -> Result<Result<ServerInfo, String>, redis::RedisError> {
    async fn info<C: redis::aio::ConnectionLike>(
        conn: &mut C,
        section: &str,
    ) -> Result<Result<String, String>, redis::RedisError> {
        match redis::cmd("INFO").arg(section).query_async(conn).await {
            Ok(text) => Ok(Ok(text)),
            Err(e) if crate::net::classify::is_connection_error(&e) => Err(e),
            Err(e) => Ok(Err(e.to_string())),
        }
    }
    let server = match info(conn, "server").await? {
        Ok(text) => text,
        Err(reason) => return Ok(Err(reason)),
    };
    let replication = match fails_over || born {
        true => match info(conn, "replication").await? {
            Ok(text) => Some(text),
            Err(reason) => return Ok(Err(reason)),
        },
        false => None,
    };
    let born_empty: Vec<String> = match born {
        true => match redis::cmd("SMEMBERS")
            .arg(BORN_EMPTY_KEY)
            .query_async(conn)
            .await
        {
            Ok(members) => members,
            Err(e) if crate::net::classify::is_connection_error(&e) => return Err(e),
            Err(_) => Vec::new(),
        },
        false => Vec::new(),
    };
    Ok(server_info(
        &server,
        replication.as_deref(),
        fails_over,
        &born_empty,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: &str, uptime_s: u64) -> Result<ServerInfo, String> {
        Ok(ServerInfo {
            identity: run_id.to_owned(),
            uptime: Duration::from_secs(uptime_s),
            born_empty: false,
            promoted: false,
            promoted_ago: None,
        })
    }

    fn born(run_id: &str) -> Result<ServerInfo, String> {
        Ok(ServerInfo {
            born_empty: true,
            ..info(run_id, 0).unwrap()
        })
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A command admitted and sent.
    fn sent(guard: &Guard, effect: Effect) {
        guard.admit("n", effect).unwrap();
        guard.sending(effect);
    }

    /// How long an acquisition of `life` still gets no vote (zero: it may
    /// go).
    fn no_vote(guard: &Guard, life: Duration) -> Duration {
        match guard.check("n", life) {
            Ok(()) => Duration::ZERO,
            Err(NodeFailure::Restarted { remaining }) => remaining,
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn reads_run_id_and_uptime_from_info_server() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c9b0e\r\n\
                    tcp_port:7001\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        assert_eq!(parse_info(text), Ok(("4f1c9b0e".to_owned(), s(42))));
        // A field is matched whole, not by prefix.
        let text = "run_idx:nope\nrun_id:a\nuptime_in_seconds_total:9\nuptime_in_seconds:3\n";
        assert_eq!(parse_info(text), Ok(("a".to_owned(), s(3))));
        for broken in [
            "",
            "uptime_in_seconds:3\r\n",
            "run_id:a\r\n",
            "run_id:\r\nuptime_in_seconds:3\r\n",
            "run_id:a\r\nuptime_in_seconds:-1\r\n",
            "run_id:a\r\nuptime_in_seconds:soon\r\n",
        ] {
            assert!(parse_info(broken).is_err(), "{broken:?}");
        }
        // Born empty: the set names this very process, never promoted.
        let server = "run_id:a\r\nuptime_in_seconds:3\r\n";
        let fresh = "role:master\r\nmaster_replid2:0000\r\nsecond_repl_offset:-1\r\n";
        let promoted = "role:master\r\nmaster_replid2:9f3c\r\nsecond_repl_offset:1207\r\n";
        let members = ["z".to_owned(), "a".to_owned()];
        let born = |replication, members| {
            server_info(server, replication, false, members)
                .unwrap()
                .born_empty
        };
        assert!(born(Some(fresh), &members));
        assert!(!born(Some(fresh), &members[..1]));
        // A declared primary that failed over and back keeps its run_id.
        assert!(!born(Some(promoted), &members));
        // Not asked: not taken.
        assert!(!born(None, &members));
    }

    #[cfg(any(feature = "cluster", feature = "sentinel"))]
    #[test]
    fn a_primary_is_its_replication_id() {
        let server = "# Server\r\nrun_id:p1\r\nuptime_in_seconds:9\r\n";
        let before = "# Replication\r\nrole:master\r\nmaster_replid:aaa\r\nmaster_replid2:000\r\n";
        // The same process promoted again (a failback) draws a new
        // replication ID: another identity, though its run_id is known.
        let after = "# Replication\r\nrole:master\r\nmaster_replid:bbb\r\nmaster_replid2:aaa\r\n";
        let first = primary_identity(before.as_bytes()).unwrap();
        let again = primary_identity(after.as_bytes()).unwrap();
        assert_eq!(first, "aaa");
        assert_ne!(first, again);
        // `master_replid2` is not `master_replid`, first or last.
        assert_eq!(
            primary_identity(b"# R\nrole:master\nmaster_replid2:x\nmaster_replid:y"),
            Ok("y".to_owned())
        );
        // A replica names its primary's ID: it names no one.
        let replica = "# Replication\r\nrole:slave\r\nmaster_replid:aaa\r\n";
        assert!(primary_identity(replica.as_bytes()).is_err());
        assert!(primary_identity(b"# R\r\nmaster_replid:aaa\r\n").is_err());
        for broken in [
            "",
            "master_replid:z\r\n",
            "role:master\r\n",
            "# R\r\nrole:master\r\nmaster_replid:\r\n",
            "# R\r\nrole:master\r\nmaster_replid2:x\r\n",
        ] {
            assert!(primary_identity(broken.as_bytes()).is_err(), "{broken:?}");
        }
        assert!(primary_identity(b"# R\r\nrole:master\r\nmaster_replid:\xff\r\n").is_err());
        // A node that fails over is known by it; one that does not, by
        // its run_id.
        assert_eq!(
            server_info(server, Some(before), true, &[])
                .unwrap()
                .identity,
            "aaa"
        );
        assert_eq!(
            server_info(server, Some(before), false, &[])
                .unwrap()
                .identity,
            "p1"
        );
        assert!(server_info(server, None, true, &[]).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn quarantine_covers_our_keys_exactly_and_others_by_our_ttls() {
        let guard = Guard::new(Arc::default(), None);
        // First met, declared born empty; then the same process: nothing
        // to hold against it.
        guard.connected("n", born("a"));
        guard.connected("n", info("a", 0));
        assert_eq!(no_vote(&guard, s(3_600)), Duration::ZERO);

        // A 30 s key sent now: a restart right away keeps the node out for
        // 30 s (ours, and the others' with a TTL like ours).
        sent(&guard, Effect::Grant { life: s(30) });
        guard.connected("n", info("c", 0));
        assert_eq!(no_vote(&guard, s(1)), s(30));
        // Acquisitions are refused, extensions and releases pass.
        assert!(guard.admit("n", Effect::Grant { life: s(1) }).is_err());
        guard.admit("n", Effect::Remove).unwrap();
        sent(&guard, Effect::Refresh { life: s(30) });
        tokio::time::sleep(s(30)).await;
        guard.check("n", s(30)).unwrap();
        // A longer acquisition is held to its own TTL from the restart:
        // others may use it too.
        assert_eq!(no_vote(&guard, s(45)), s(15));
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_connection_is_held_to_the_uptime_too() {
        // A process that first meets a node up for 5 s (reported 6, a
        // second high): keys granted before its start may live a TTL past
        // it, whatever this client did or did not see.
        let guard = Guard::new(Arc::default(), None);
        guard.connected("n", info("a", 6));
        // Knowing no TTL yet, it holds the acquisition's own.
        assert_eq!(no_vote(&guard, s(60)), s(55));
        assert_eq!(no_vote(&guard, s(5)), Duration::ZERO);
        // Up for an hour: nothing.
        let old = Guard::new(Arc::default(), None);
        old.connected("n", info("a", 3_600));
        assert_eq!(no_vote(&old, s(60)), Duration::ZERO);
        // Declared born empty: nothing it could have forgotten.
        let new = Guard::new(Arc::default(), None);
        new.connected("n", born("a"));
        assert_eq!(no_vote(&new, s(60)), Duration::ZERO);
        // The declaration counts at the first meeting only: a known node
        // whose identity changed restarted, whatever it says.
        new.connected("n", born("b"));
        assert_eq!(no_vote(&new, s(60)), s(60));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_before_the_first_meeting_is_timed_by_the_sentinels() {
        // A promoted replica up for an hour, promoted 4 s ago as the
        // sentinels tell: out for the TTL and the margin (3 s) from then.
        let guard = Guard::new(Arc::default(), Some(s(3)));
        guard.connected(
            "n",
            Ok(ServerInfo {
                promoted: true,
                promoted_ago: Some(s(4)),
                ..info("r", 3_600).unwrap()
            }),
        );
        assert_eq!(no_vote(&guard, s(30)), s(30 + 3 + 1 - 4));
        // The sentinels could not say: from now.
        let blind = Guard::new(Arc::default(), Some(s(3)));
        blind.connected(
            "n",
            Ok(ServerInfo {
                promoted: true,
                promoted_ago: Some(Duration::ZERO),
                ..info("r", 3_600).unwrap()
            }),
        );
        assert_eq!(no_vote(&blind, s(30)), s(33));
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_seen_by_a_read_keeps_its_moment() {
        // A client that has taken no lock (no TTL known) sees the restart
        // on a new connection (a read); its first acquisition, 3 s later,
        // is held to its own TTL from the restart.
        let guard = Guard::new(Arc::default(), None);
        guard.connected("n", info("a", 3_600));
        tokio::time::sleep(s(10)).await;
        guard.connected("n", info("b", 0));
        tokio::time::sleep(s(3)).await;
        assert_eq!(no_vote(&guard, s(60)), s(57));
        // A later connection to the same process moves nothing.
        guard.connected("n", info("b", 3));
        assert_eq!(no_vote(&guard, s(60)), s(57));
    }

    #[cfg(feature = "cluster")]
    #[tokio::test(start_paused = true)]
    async fn a_grant_by_a_primary_not_seen_before_is_no_vote() {
        let guard = Guard::new(Arc::default(), None);
        let ids = |v: &[&str]| Ok(v.iter().map(|id| born(id).unwrap()).collect());
        // The first connection learns the primaries.
        guard.cluster_connected("c", ids(&["p1", "p2", "p3"]));
        guard.check("c", s(10)).unwrap();
        sent(&guard, Effect::Grant { life: s(10) });
        guard.granted_by("c", s(10), Ok("p2".into())).unwrap();
        // A replica promoted: its grant does not count, and the node is
        // out for the whole TTL from now (uptime taken as 0).
        tokio::time::sleep(s(4)).await;
        sent(&guard, Effect::Grant { life: s(10) });
        match guard.granted_by("c", s(10), Ok("r2".into())) {
            Err(NodeFailure::Restarted { remaining }) => assert_eq!(remaining, s(10)),
            other => panic!("{other:?}"),
        }
        assert!(guard.admit("c", Effect::Grant { life: s(10) }).is_err());
        tokio::time::sleep(s(10)).await;
        // Known from now on.
        sent(&guard, Effect::Grant { life: s(10) });
        guard.granted_by("c", s(10), Ok("r2".into())).unwrap();
        // A new connection that finds a primary not seen trips it too; one
        // that finds only known ones does not.
        tokio::time::sleep(s(11)).await;
        guard.cluster_connected("c", ids(&["p1", "r2", "p3"]));
        guard.check("c", s(10)).unwrap();
        guard.cluster_connected("c", ids(&["p1", "r2", "p4"]));
        assert!(guard.check("c", s(10)).is_err());
        // A primary that cannot be told, once primaries are known: it may be
        // one not seen, so the grant is no vote (as a known node that stops
        // answering INFO is taken as restarted).
        tokio::time::sleep(s(11)).await;
        sent(&guard, Effect::Grant { life: s(10) });
        assert!(matches!(
            guard.granted_by("c", s(10), Err("NOPERM".into())),
            Err(NodeFailure::Restarted { .. })
        ));
        // So is a new connection whose INFO fails.
        tokio::time::sleep(s(11)).await;
        guard.check("c", s(10)).unwrap();
        guard.cluster_connected("c", Err("NOPERM".into()));
        assert!(guard.check("c", s(10)).is_err());
        // A cluster that never answered INFO is watched by no one: its
        // grants count (warned once).
        let blind = Guard::new(Arc::default(), None);
        blind.cluster_connected("c", Err("NOPERM".into()));
        sent(&blind, Effect::Grant { life: s(10) });
        blind.granted_by("c", s(10), Err("NOPERM".into())).unwrap();
        // A first connection to a cluster whose youngest primary not
        // declared born empty is up for 3 s: held to it.
        let young = Guard::new(Arc::default(), None);
        let mut primaries: Vec<ServerInfo> = ["p1", "p2"].map(|id| born(id).unwrap()).into();
        primaries.push(info("p3", 4).unwrap());
        young.cluster_connected("c", Ok(primaries));
        assert_eq!(no_vote(&young, s(10)), s(7));
    }

    #[tokio::test(start_paused = true)]
    async fn one_long_ttl_stops_counting_once_its_key_could_have_expired() {
        let guard = Guard::new(Arc::default(), None);
        guard.connected("n", born("a"));
        sent(&guard, Effect::Grant { life: s(60) });
        tokio::time::sleep(s(61)).await;
        sent(&guard, Effect::Grant { life: s(2) });
        // Our last key has 2 s left; others are assumed to use 2 s TTLs
        // too, granted up to the restart 0–1 s ago.
        guard.connected("n", info("b", 0));
        assert_eq!(no_vote(&guard, s(1)), s(2));
        // Up for 10 s: others' keys are gone; ours is gone too.
        tokio::time::sleep(s(3)).await;
        guard.connected("n", info("c", 10));
        assert_eq!(no_vote(&guard, s(1)), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_known_node_that_stops_answering_info_is_taken_as_restarted() {
        let guard = Guard::new(Arc::default(), None);
        // Never answered: cannot be watched, votes as usual.
        guard.connected("n", Err("NOPERM".into()));
        assert_eq!(no_vote(&guard, s(10)), Duration::ZERO);
        guard.connected("n", born("a"));
        sent(&guard, Effect::Grant { life: s(10) });
        // Answered before: a failure now could hide a restart.
        guard.connected("n", Err("NOPERM".into()));
        assert_eq!(no_vote(&guard, s(1)), s(10));
        tokio::time::sleep(s(10)).await;
        guard.check("n", s(1)).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_count_as_what_others_use_too() {
        let lives = Arc::new(Lives::default());
        let quiet = Guard::new(lives.clone(), None);
        let busy = Guard::new(lives, None);
        quiet.connected("n", born("a"));
        sent(&busy, Effect::Grant { life: s(2) });
        sent(&busy, Effect::Refresh { life: s(60) });
        quiet.connected("n", info("b", 1));
        assert_eq!(no_vote(&quiet, s(1)), s(60));
    }

    #[tokio::test(start_paused = true)]
    async fn other_clients_keys_are_covered_by_the_uptime() {
        // A client that has not sent to this node lately still assumes its
        // peers hold keys with its TTLs.
        let lives = Arc::new(Lives::default());
        let quiet = Guard::new(lives.clone(), None);
        let busy = Guard::new(lives, None);
        quiet.connected("n", born("a"));
        sent(&busy, Effect::Grant { life: s(30) });
        tokio::time::sleep(s(5)).await;
        // Restarted 10 s ago (reported 11, a second high): 20 s left.
        quiet.connected("n", info("b", 11));
        assert_eq!(no_vote(&quiet, s(1)), s(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_keeps_the_node_out_for_the_whole_ttl_whatever_its_uptime() {
        let lives = Arc::new(Lives::default());
        let primary = Guard::new(lives.clone(), Some(s(3)));
        let busy = Guard::new(lives, None);
        primary.connected("n", info("old-primary", 500));
        sent(&busy, Effect::Grant { life: s(30) });
        tokio::time::sleep(s(5)).await;
        // The promoted replica has run for an hour: as a plain server's
        // restart that would say every key of the others is gone; as a
        // failover it keeps the node out for the whole longest TTL from now,
        // and the margin (3 s here) for clients still on the old primary.
        primary.connected("n", info("promoted", 3_600));
        assert_eq!(no_vote(&primary, s(1)), s(33));
        tokio::time::sleep(s(32)).await;
        assert!(primary.check("n", s(1)).is_err());
        tokio::time::sleep(s(1)).await;
        primary.check("n", s(1)).unwrap();
        // A longer TTL since: the others' term grows with it. (This node
        // would hold a 40 s acquisition to its own TTL from the failover.)
        assert_eq!(no_vote(&primary, s(40)), s(10));
        sent(&busy, Effect::Grant { life: s(40) });
        tokio::time::sleep(s(1)).await;
        primary.connected("n", info("old-primary", 9_999));
        assert_eq!(no_vote(&primary, s(1)), s(43));
        // The same server again (a reconnect): nothing more.
        tokio::time::sleep(s(43)).await;
        primary.connected("n", info("old-primary", 9_999));
        assert_eq!(no_vote(&primary, s(1)), Duration::ZERO);
        // A plain server up for an hour after a restart: nothing.
        let plain = Guard::new(Arc::default(), None);
        plain.connected("n", born("a"));
        sent(&plain, Effect::Grant { life: s(1) });
        tokio::time::sleep(s(2)).await;
        plain.connected("n", info("b", 3_600));
        assert_eq!(no_vote(&plain, s(1)), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn lives_keep_every_life_whose_keys_may_live() {
        // 60 s, then 30 s while the 60 s key lives, then 2 s once it is
        // gone: the 30 s key still lives, so 30 s is what others use.
        let lives = Lives::default();
        lives.note(s(60), Moment::now());
        tokio::time::sleep(s(50)).await;
        lives.note(s(30), Moment::now());
        assert_eq!(lives.longest(), s(60));
        tokio::time::sleep(s(12)).await;
        lives.note(s(2), Moment::now());
        assert_eq!(lives.longest(), s(30));
        tokio::time::sleep(s(19)).await;
        lives.note(s(2), Moment::now());
        assert_eq!(lives.longest(), s(2));
        // Many distinct lives: merged upwards, never lost.
        for ms in 1..=100 {
            lives.note(Duration::from_millis(ms * 1_000), Moment::now());
        }
        assert_eq!(lives.longest(), s(100));
        assert!(lives.alive.lock().unwrap().len() <= MAX_LIVES);
    }

    #[tokio::test(start_paused = true)]
    async fn a_restart_keeps_the_term_of_the_ttls_in_use_then() {
        // A restart seen while 60 s keys may live: the node is out for
        // 60 s, though a 2 s TTL is all that is used afterwards.
        let lives = Arc::new(Lives::default());
        let guard = Guard::new(lives.clone(), None);
        guard.connected("n", born("a"));
        let other = Guard::new(lives, None);
        sent(&other, Effect::Grant { life: s(60) });
        tokio::time::sleep(s(10)).await;
        guard.connected("n", info("b", 0));
        tokio::time::sleep(s(51)).await;
        sent(&other, Effect::Grant { life: s(2) });
        assert_eq!(no_vote(&guard, s(2)), s(9));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_up_longer_than_our_clock_has_counted_is_not_held() {
        // The paused clock starts near its zero, as a process's clock does
        // off Linux, or a machine's just after boot.
        let guard = Guard::new(Arc::default(), None);
        guard.connected("n", info("a", 86_400));
        assert_eq!(no_vote(&guard, s(30)), Duration::ZERO);
        // A TTL longer than the node's life (a century) waits it out.
        let century = s(100 * 365 * 86_400);
        assert_eq!(no_vote(&guard, century), century - s(86_400 - 1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_acquisition_leaves_no_life_behind() {
        // A fresh process's 1-day attempt, refused by a node met up for 5 s,
        // is no key: a later 1 s acquisition is not held to a day.
        let guard = Guard::new(Arc::default(), None);
        guard.connected("n", info("a", 6));
        assert!(guard.admit("n", Effect::Grant { life: s(86_400) }).is_err());
        assert_eq!(no_vote(&guard, s(1)), Duration::ZERO);
        assert_eq!(guard.lives.longest(), Duration::ZERO);
    }
}
