//! The restart guard: a node that restarted without persistence has
//! forgotten the keys it granted, so its vote on an acquisition could hand
//! out a lock that is still held elsewhere. It gets no vote on acquisitions
//! (a *quarantine*) until those keys would have expired.
//!
//! Every new connection starts with `INFO server`; a `run_id` other than the
//! one seen on the previous connection means a restart. How long the
//! forgotten keys may still matter has two parts:
//!
//! * **Ours**, exactly: per node, the latest moment a key this client sent
//!   there (acquisition or extension) may live to — the send moment plus
//!   TTL plus drift, on our monotonic clock. Recorded before the command is
//!   sent.
//! * **Other clients'**, by assumption: they use TTLs like ours. The node
//!   restarted `uptime` ago (Redis reports whole wall-clock seconds, so we
//!   take a second off); keys granted before that live at most one TTL past
//!   the restart. The TTL assumed is the longest among our keys that may
//!   still be alive — so one long TTL, once, stops counting once its key
//!   could have expired.
//!
//! Releases and extensions are never refused: they compare the token and
//! cannot create a key.
//!
//! **A node that fails over** (a Sentinel-managed primary, see
//! `net::sentinel`) loses what asynchronous replication had
//! not copied to the promoted replica, exactly as a restart without
//! persistence loses everything. The promoted replica has its own
//! `run_id`, so the guard sees the failover as a restart. But its
//! `uptime_in_seconds` is the replica's process uptime, not the time since
//! it became the primary, and would cancel the other clients' term. For
//! such a node the uptime is taken as zero, and the term is lengthened by
//! a margin: a new `run_id` keeps it out for the whole longest TTL from the
//! moment it is seen, plus the time a client still connected to the old
//! primary may go on writing there after a majority of the sentinels named
//! the new one — the re-check period, two sentinel queries and a request
//! timeout (`net::failover_margin` argues it) — and, as for any node, until
//! our own keys there may have expired. What the guard sees and does not:
//!
//! * It sees a failover to another server, and a restart of the primary,
//!   at this client's first new connection after it (a Sentinel-managed
//!   node's connection is retired within a re-check once the sentinels'
//!   majority names another primary).
//! * It cannot see a failover that happened before this client first
//!   connected to the node (no earlier `run_id` to compare), nor keys
//!   written to an old primary past the margin by a client that never
//!   re-checks (another Redlock library) or uses longer timeouts than this
//!   one (the margin is this client's). A client cut off from the
//!   sentinels has no connection to the node (no majority confirms its
//!   primary). Run the data nodes with
//!   `min-replicas-to-write 1` and a small `min-replicas-max-lag` to bound
//!   that window (the old primary then refuses writes, `NOREPLICAS`, once
//!   its replica stops acknowledging): the only real bound.
//! * A failover to a replica that had copied every key is harmless, and is
//!   quarantined all the same: the guard cannot tell what was copied.
//!
//! **A node that is a Redis Cluster** (see [`cluster`](super::cluster))
//! keeps one connection across its shards' failovers, so the guard learns
//! its primaries at connect and is told which primary ran each grant. A
//! primary is identified by its `run_id` and its replication ID
//! ([`primary_identity`]): a failback (P1 fails over to R1, then R1 back to
//! P1) brings back a `run_id` already seen, on a server that was a replica
//! meanwhile and may lack R1's grants, but Redis draws a new replication ID
//! at every promotion. A grant by an identity not seen is no vote, and the
//! node is quarantined as after a failover. As for any node, a failover
//! before this client first connected is not seen.

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

/// What the guards of one `Redlock`'s nodes share: the longest key life
/// among its acquisitions and extensions whose keys may still be alive,
/// taken as what other clients use too.
#[derive(Debug, Default)]
pub(crate) struct Lives {
    /// The life, and until when a key sent with it may live.
    longest: Mutex<(Duration, Option<Moment>)>,
}

impl Lives {
    fn note(&self, life: Duration, now: Moment) {
        let mut longest = self.longest.lock().unwrap_or_else(|p| p.into_inner());
        let (current, until) = *longest;
        let current_gone = until.is_none_or(|u| u <= now);
        if life >= current || current_gone {
            *longest = (life, Some(now.after(life)));
        }
    }

    fn longest(&self) -> Duration {
        self.longest.lock().unwrap_or_else(|p| p.into_inner()).0
    }
}

/// One node's restart guard.
#[derive(Debug)]
pub(crate) struct Guard {
    lives: Arc<Lives>,
    /// The latest moment a key we sent to this node may live to, as
    /// [`Moment::as_nanos`].
    latest_expiry: AtomicU64,
    /// Until when acquisitions get no vote, as [`Moment::as_nanos`]; 0 when
    /// there is no quarantine.
    quarantine: AtomicU64,
    /// The node's `run_id` as of the last connection, once known.
    run_id: Mutex<Option<String>>,
    /// A cluster node's primaries seen so far, by identity (`run_id` and
    /// replication ID, see [`primary_identity`] and
    /// [`cluster`](super::cluster)): a grant by another one is no vote.
    primaries: Mutex<std::collections::HashSet<String>>,
    /// Whether the node has refused `INFO`, so that its restarts cannot be
    /// seen (warned about once).
    unwatched: AtomicBool,
    /// For a node that fails over to a replica that was running all along
    /// (its uptime is then not the time since it holds the keys, and is
    /// taken as zero): how much longer than the longest TTL a new `run_id`
    /// keeps it out, the time a client may still write to the old primary
    /// after the sentinels named the new one (`net::failover_margin`).
    failover: Option<Duration>,
}

/// What `INFO server` tells of a node's process.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// Drawn afresh at every start: a new one means the node restarted.
    pub(crate) run_id: String,
    /// `uptime_in_seconds`.
    pub(crate) uptime: Duration,
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
            run_id: Mutex::new(None),
            primaries: Mutex::default(),
            unwatched: AtomicBool::new(false),
            failover,
        }
    }

    /// Refuses a command that may create a key while the node is
    /// quarantined; records how long the keys of the others may live.
    pub(crate) fn admit(&self, effect: Effect) -> Result<(), NodeFailure> {
        if let Effect::Grant { .. } = effect {
            self.check()?;
        }
        if let Some(life) = effect.life() {
            let now = Moment::now();
            self.latest_expiry
                .fetch_max(now.after(life).as_nanos(), Ordering::AcqRel);
            self.lives.note(life, now);
        }
        Ok(())
    }

    /// Whether acquisitions may go to the node now.
    pub(crate) fn check(&self) -> Result<(), NodeFailure> {
        // 0 (no quarantine) spares the clock read on the hot path.
        let until = self.quarantine.load(Ordering::Acquire);
        if until == 0 {
            return Ok(());
        }
        match Moment::from_nanos(until).remaining() {
            remaining if remaining.is_zero() => {
                // Over: back to 0, unless a newer restart moved it meanwhile.
                let _ =
                    self.quarantine
                        .compare_exchange(until, 0, Ordering::AcqRel, Ordering::Relaxed);
                Ok(())
            }
            remaining => Err(NodeFailure::Restarted { remaining }),
        }
    }

    /// On a new connection: what `INFO server` answered (the reason, if the
    /// node refused it or the answer lacked the fields). Returns how long
    /// the node gets no vote, if it restarted.
    ///
    /// A node whose run id is known from an earlier connection and that
    /// does not answer now could have restarted unseen: it is treated as
    /// just restarted (no vote on acquisitions until the keys it may have
    /// forgotten would have expired), with a warning once. One that never
    /// answered is watched by no one, with a warning once.
    pub(crate) fn connected(&self, node: &str, info: Result<ServerInfo, String>) -> Duration {
        let info = match info {
            Ok(info) => info,
            Err(reason) => {
                let known = self
                    .run_id
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .is_some();
                if !self.unwatched.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        node,
                        reason,
                        "INFO server failed on this node, so its restarts cannot be seen: after one, \
                         it may grant locks it forgot; allow INFO in the ACL, or run the node with \
                         appendfsync always and turn Builder::restart_guard off"
                    );
                }
                return if known {
                    self.quarantine(node, Duration::ZERO)
                } else {
                    Duration::ZERO
                };
            }
        };
        let mut known = self.run_id.lock().unwrap_or_else(|p| p.into_inner());
        let restarted = known.as_deref().is_some_and(|id| id != info.run_id);
        *known = Some(info.run_id);
        if !restarted {
            return Duration::ZERO;
        }
        // A promoted replica's uptime is not the time since it became the
        // primary: the whole longest TTL from now, and the time clients of
        // the old primary may still write there (`failover`).
        match self.failover {
            Some(margin) => self.quarantine_for(node, Duration::ZERO, margin),
            None => self.quarantine(node, info.uptime),
        }
    }

    /// On a new connection to a cluster: the identities of its primaries
    /// ([`primary_identity`]; the
    /// reason, if `INFO` failed). A primary not seen before, once some
    /// are known, is taken as a restart just now (a replica promoted, or a
    /// primary restarted): the node is quarantined. The first connection
    /// only learns them.
    #[cfg(feature = "cluster")]
    pub(crate) fn cluster_connected(&self, node: &str, info: Result<Vec<String>, String>) {
        let ids = match info {
            Ok(ids) => ids,
            Err(reason) => {
                // Warned as for any node; quarantined if primaries were
                // known (they could have failed over unseen).
                self.connected(node, Err(reason));
                if self.knows_primaries() {
                    self.quarantine(node, Duration::ZERO);
                }
                return;
            }
        };
        let mut known = self.primaries.lock().unwrap_or_else(|p| p.into_inner());
        let first = known.is_empty();
        let mut new = false;
        for id in ids {
            new |= known.insert(id);
        }
        drop(known);
        if new && !first {
            self.quarantine(node, Duration::ZERO);
        }
    }

    /// A cluster node granted a key; `primary` is the identity of the
    /// primary that ran the grant ([`primary_identity`]; the reason, if it
    /// could not be told). A primary not seen before (a new process, or a
    /// known one promoted again) has taken over the slot since we last
    /// looked: it may
    /// have lost keys replication had not copied, so this grant is no vote
    /// and the node is quarantined as after a restart just now
    /// ([`NodeFailure::Restarted`]). A grant whose primary cannot be told
    /// counts, with a warning once, while no primary is known (as a node
    /// refusing `INFO` from the start does); once some are known, it is
    /// taken as a primary not seen before (as a known node that stops
    /// answering `INFO` is taken as restarted).
    pub(crate) fn granted_by(
        &self,
        node: &str,
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
                    self.quarantine(node, Duration::ZERO);
                    return self.check();
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
            self.quarantine(node, Duration::ZERO);
        }
        self.check()
    }

    /// Whether a cluster node's primaries are known (from a connection
    /// whose `INFO` answered).
    fn knows_primaries(&self) -> bool {
        !self
            .primaries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Quarantines the node after a restart `uptime` ago (taken a second
    /// short); returns for how long.
    fn quarantine(&self, node: &str, uptime: Duration) -> Duration {
        self.quarantine_for(node, uptime, Duration::ZERO)
    }

    /// `quarantine`, the others' term lengthened by `margin`.
    fn quarantine_for(&self, node: &str, uptime: Duration, margin: Duration) -> Duration {
        let now = Moment::now();
        let ours = Moment::from_nanos(self.latest_expiry.load(Ordering::Acquire)).remaining();
        let longest = self.lives.longest();
        let theirs = if longest.is_zero() {
            Duration::ZERO
        } else {
            (longest + margin).saturating_sub(uptime.saturating_sub(UPTIME_SLACK))
        };
        let no_vote = ours.max(theirs);
        if !no_vote.is_zero() {
            self.quarantine
                .fetch_max(now.after(no_vote).as_nanos(), Ordering::AcqRel);
            tracing::warn!(
                node,
                uptime_s = uptime.as_secs(),
                no_vote_ms = no_vote.as_millis() as u64,
                "this node restarted (or cannot say it did not) and may have forgotten locks it \
                 granted: it gets no vote on acquisitions until they would have expired"
            );
        }
        no_vote
    }
}

/// A cluster primary's identity, `run_id/master_replid`, from the texts of
/// its `INFO server` and `INFO replication`. The `run_id` alone is not
/// enough: a primary that failed over to its replica and was promoted
/// again (a failback) keeps its `run_id`, though as a replica meanwhile it
/// may have lost keys granted by the other one. Redis draws a new
/// replication ID at every promotion (and at a start without persistence),
/// so the pair is new after a failover, a failback, or a restart.
#[cfg(feature = "cluster")]
pub(crate) fn primary_identity(server: &str, replication: &str) -> Result<String, String> {
    let run_id = parse_info(server)?.run_id;
    let replid = info_field(replication, "master_replid")
        .filter(|id| !id.is_empty())
        .ok_or_else(|| "no master_replid in the answer to INFO replication".to_owned())?;
    Ok(format!("{run_id}/{replid}"))
}

/// Reads `run_id` and `uptime_in_seconds` from the text of `INFO server`.
pub(crate) fn parse_info(text: &str) -> Result<ServerInfo, String> {
    let field = |name: &str| info_field(text, name);
    let parsed = (|| {
        let run_id = field("run_id").filter(|id| !id.is_empty())?.to_owned();
        let uptime = Duration::from_secs(field("uptime_in_seconds")?.parse().ok()?);
        Some(ServerInfo { run_id, uptime })
    })();
    parsed.ok_or_else(|| "no run_id or uptime_in_seconds in its answer".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: &str, uptime_s: u64) -> Result<ServerInfo, String> {
        Ok(ServerInfo {
            run_id: run_id.to_owned(),
            uptime: Duration::from_secs(uptime_s),
        })
    }

    fn s(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn reads_run_id_and_uptime_from_info_server() {
        let text = "# Server\r\nredis_version:7.0.15\r\nrun_id:4f1c9b0e\r\n\
                    tcp_port:7001\r\nuptime_in_seconds:42\r\nuptime_in_days:0\r\n";
        assert_eq!(parse_info(text), info("4f1c9b0e", 42));
        // A field is matched whole, not by prefix.
        let text = "run_idx:nope\nrun_id:a\nuptime_in_seconds_total:9\nuptime_in_seconds:3\n";
        assert_eq!(parse_info(text), info("a", 3));
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
    }

    #[cfg(feature = "cluster")]
    #[test]
    fn a_primary_is_its_run_id_and_its_replication_id() {
        let server = "# Server\r\nrun_id:p1\r\nuptime_in_seconds:9\r\n";
        let before = "# Replication\r\nrole:master\r\nmaster_replid:aaa\r\nmaster_replid2:000\r\n";
        // The same process promoted again (a failback) draws a new
        // replication ID: another identity, though its run_id is known.
        let after = "# Replication\r\nrole:master\r\nmaster_replid:bbb\r\nmaster_replid2:aaa\r\n";
        let first = primary_identity(server, before).unwrap();
        let again = primary_identity(server, after).unwrap();
        assert_eq!(first, "p1/aaa");
        assert_ne!(first, again);
        // `master_replid2` is not `master_replid`.
        assert_eq!(
            primary_identity(server, "master_replid2:x\nmaster_replid:y\n"),
            Ok("p1/y".to_owned())
        );
        for broken in ["", "master_replid:\r\n", "master_replid2:x\r\n"] {
            assert!(primary_identity(server, broken).is_err(), "{broken:?}");
        }
        assert!(primary_identity("", before).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn quarantine_covers_our_keys_exactly_and_others_by_our_ttls() {
        let guard = Guard::new(Arc::default(), None);
        // First meeting, or the same process: nothing to hold against it.
        assert_eq!(guard.connected("n", info("a", 0)), Duration::ZERO);
        assert_eq!(guard.connected("n", info("a", 0)), Duration::ZERO);
        // No key sent yet: a restart costs nothing.
        assert_eq!(guard.connected("n", info("b", 0)), Duration::ZERO);
        guard.check().unwrap();

        // A 30 s key sent now: a restart right away keeps the node out for
        // 30 s (ours); one 10 s into its life, for the remaining 20 s.
        guard.admit(Effect::Grant { life: s(30) }).unwrap();
        assert_eq!(guard.connected("n", info("c", 0)), s(30));
        assert!(matches!(guard.check(), Err(NodeFailure::Restarted { .. })));
        // Acquisitions are refused, extensions and releases pass.
        assert!(guard.admit(Effect::Grant { life: s(1) }).is_err());
        guard.admit(Effect::Remove).unwrap();
        tokio::time::sleep(s(30)).await;
        guard.check().unwrap();
    }

    #[cfg(feature = "cluster")]
    #[tokio::test(start_paused = true)]
    async fn a_grant_by_a_primary_not_seen_before_is_no_vote() {
        let guard = Guard::new(Arc::default(), None);
        let ids = |v: &[&str]| Ok(v.iter().map(|s| (*s).to_owned()).collect());
        // The first connection learns the primaries.
        guard.cluster_connected("c", ids(&["p1", "p2", "p3"]));
        guard.check().unwrap();
        guard.admit(Effect::Grant { life: s(10) }).unwrap();
        guard.granted_by("c", Ok("p2".into())).unwrap();
        // A replica promoted: its grant does not count, and the node is
        // out for the whole TTL from now (uptime taken as 0).
        tokio::time::sleep(s(4)).await;
        guard.admit(Effect::Grant { life: s(10) }).unwrap();
        match guard.granted_by("c", Ok("r2".into())) {
            Err(NodeFailure::Restarted { remaining }) => assert_eq!(remaining, s(10)),
            other => panic!("{other:?}"),
        }
        assert!(guard.admit(Effect::Grant { life: s(10) }).is_err());
        tokio::time::sleep(s(10)).await;
        // Known from now on.
        guard.admit(Effect::Grant { life: s(10) }).unwrap();
        guard.granted_by("c", Ok("r2".into())).unwrap();
        // A new connection that finds a primary not seen trips it too; one
        // that finds only known ones does not.
        guard.cluster_connected("c", ids(&["p1", "r2", "p3"]));
        guard.check().unwrap();
        guard.cluster_connected("c", ids(&["p1", "r2", "p4"]));
        assert!(guard.check().is_err());
        // A primary that cannot be told, once primaries are known: it may be
        // one not seen, so the grant is no vote (as a known node that stops
        // answering INFO is taken as restarted).
        tokio::time::sleep(s(11)).await;
        guard.admit(Effect::Grant { life: s(10) }).unwrap();
        assert!(matches!(
            guard.granted_by("c", Err("NOPERM".into())),
            Err(NodeFailure::Restarted { .. })
        ));
        // So is a new connection whose INFO fails.
        tokio::time::sleep(s(11)).await;
        guard.check().unwrap();
        guard.cluster_connected("c", Err("NOPERM".into()));
        assert!(guard.check().is_err());
        // A cluster that never answered INFO is watched by no one: its
        // grants count (warned once).
        let blind = Guard::new(Arc::default(), None);
        blind.cluster_connected("c", Err("NOPERM".into()));
        blind.admit(Effect::Grant { life: s(10) }).unwrap();
        blind.granted_by("c", Err("NOPERM".into())).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn one_long_ttl_stops_counting_once_its_key_could_have_expired() {
        let guard = Guard::new(Arc::default(), None);
        guard.connected("n", info("a", 0));
        guard.admit(Effect::Grant { life: s(60) }).unwrap();
        tokio::time::sleep(s(61)).await;
        guard.admit(Effect::Grant { life: s(2) }).unwrap();
        // Our last key has 2 s left; others are assumed to use 2 s TTLs
        // too, granted up to the restart 0–1 s ago.
        let no_vote = guard.connected("n", info("b", 0));
        assert_eq!(no_vote, s(2));
        // Up for 10 s: others' keys are gone; ours is gone too.
        tokio::time::sleep(s(3)).await;
        assert_eq!(guard.connected("n", info("c", 10)), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_known_node_that_stops_answering_info_is_taken_as_restarted() {
        let guard = Guard::new(Arc::default(), None);
        // Never answered: cannot be watched, votes as usual.
        assert_eq!(guard.connected("n", Err("NOPERM".into())), Duration::ZERO);
        guard.connected("n", info("a", 0));
        guard.admit(Effect::Grant { life: s(10) }).unwrap();
        // Answered before: a failure now could hide a restart.
        assert_eq!(guard.connected("n", Err("NOPERM".into())), s(10));
        assert!(matches!(guard.check(), Err(NodeFailure::Restarted { .. })));
        tokio::time::sleep(s(10)).await;
        guard.check().unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn extensions_count_as_what_others_use_too() {
        let lives = Arc::new(Lives::default());
        let quiet = Guard::new(lives.clone(), None);
        let busy = Guard::new(lives, None);
        quiet.connected("n", info("a", 0));
        busy.admit(Effect::Grant { life: s(2) }).unwrap();
        busy.admit(Effect::Refresh { life: s(60) }).unwrap();
        assert_eq!(quiet.connected("n", info("b", 1)), s(60));
    }

    #[tokio::test(start_paused = true)]
    async fn other_clients_keys_are_covered_by_the_uptime() {
        // A client that has not sent to this node lately still assumes its
        // peers hold keys with its TTLs.
        let lives = Arc::new(Lives::default());
        let quiet = Guard::new(lives.clone(), None);
        let busy = Guard::new(lives, None);
        quiet.connected("n", info("a", 0));
        busy.admit(Effect::Grant { life: s(30) }).unwrap();
        tokio::time::sleep(s(5)).await;
        // Restarted 10 s ago (reported 11, a second high): 20 s left.
        assert_eq!(quiet.connected("n", info("b", 11)), s(20));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failover_keeps_the_node_out_for_the_whole_ttl_whatever_its_uptime() {
        let lives = Arc::new(Lives::default());
        let primary = Guard::new(lives.clone(), Some(s(3)));
        let busy = Guard::new(lives, None);
        primary.connected("n", info("old-primary", 500));
        busy.admit(Effect::Grant { life: s(30) }).unwrap();
        tokio::time::sleep(s(5)).await;
        // The promoted replica has run for an hour: as a plain server's
        // restart that would say every key of the others is gone; as a
        // failover it keeps the node out for the whole longest TTL from now,
        // and the margin (3 s here) for clients still on the old primary.
        assert_eq!(primary.connected("n", info("promoted", 3_600)), s(33));
        assert!(matches!(
            primary.check(),
            Err(NodeFailure::Restarted { .. })
        ));
        tokio::time::sleep(s(32)).await;
        assert!(primary.check().is_err());
        tokio::time::sleep(s(1)).await;
        primary.check().unwrap();
        // A longer TTL since: the others' term grows with it.
        primary.admit(Effect::Grant { life: s(40) }).unwrap();
        tokio::time::sleep(s(1)).await;
        assert_eq!(primary.connected("n", info("old-primary", 9_999)), s(43));
        // The same server again (a reconnect): nothing.
        assert_eq!(
            primary.connected("n", info("old-primary", 9_999)),
            Duration::ZERO
        );
        // A plain server up for an hour after a restart: nothing.
        let plain = Guard::new(Arc::default(), None);
        plain.connected("n", info("a", 0));
        plain.admit(Effect::Grant { life: s(1) }).unwrap();
        tokio::time::sleep(s(2)).await;
        assert_eq!(plain.connected("n", info("b", 3_600)), Duration::ZERO);
    }
}
