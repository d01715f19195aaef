//! Leader election: one leader at a time on a name, with a term that grows
//! from leader to leader, that every process can see.
//!
//! * [`Redlock::campaign`] waits until the candidate leads (woken when the
//!   leader resigns, or when its key expires) and keeps leadership alive:
//!   the [`Leadership`] handle gives the [`term`](Leadership::term), says
//!   when leadership is [`lost`](Leadership::lost), and can
//!   [`proclaim`](Leadership::proclaim) a new value or
//!   [`resign`](Leadership::resign).
//! * [`Redlock::leader`] says who leads, as a majority of nodes agrees.
//! * [`Redlock::observe`] is a [`Stream`](futures::Stream) of every
//!   leadership, in term order ([`Observed`]), or of a word on the ones it
//!   could not read (module `observe`).
//!
//! The guarantee and why it holds are in the election kind's doc
//! (`kinds::election`) and the README's "Leader election". In short: a
//! leader is a [fenced](crate::LockRequest::fenced) lock whose fencing
//! token is the term, with a record of who leads written on a majority
//! before the lock is handed out. At most one candidate believes it leads
//! at a time, but **holding leadership is not acting safely**: a leader
//! paused (a GC pause, `SIGSTOP`, a long `await`) past its validity still
//! believes it leads until it looks again. Check
//! [`is_lost`](Leadership::is_lost) before acting, and pass the term with
//! every write to what the leader controls, which refuses a term lower
//! than the highest it has seen.

mod observe;

use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

pub use observe::{Observed, Observer};

use crate::client::Redlock;
use crate::engine::acquire::Call;
use crate::error::{ConfigError, Error, NodeFailure, Report};
use crate::kinds::Kind;
use crate::kinds::election::{self, Campaigner, Seen};
use crate::lock::{Held, Lock};

/// The longest value a leader may publish.
pub const MAX_LEADER_VALUE: usize = 64 << 10;

impl Redlock {
    /// Campaigns for leadership of the election `name`, as the candidate
    /// `identity`: `.await` it to wait until it leads (for ever by default:
    /// [`Campaign::wait`]). Leadership is kept alive in the background,
    /// renewed every third of `ttl`, until it is resigned, dropped or lost.
    ///
    /// ```no_run
    /// # async fn run(redlock: redquorum::Redlock) -> Result<(), redquorum::Error> {
    /// use std::time::Duration;
    /// let leadership = redlock
    ///     .campaign("scheduler", "host-a", Duration::from_secs(10))
    ///     .value("10.0.0.7:8080")
    ///     .await?;
    /// let term = leadership.term();
    /// tokio::select! {
    ///     () = leadership.lost() => { /* stop acting as the leader */ }
    ///     () = async { /* lead, passing `term` with every write */ } => {}
    /// }
    /// leadership.resign().await?;
    /// # let _ = term;
    /// # Ok(()) }
    /// ```
    ///
    /// A candidate waits in the lock's queue: the leader's resignation
    /// wakes it at once, a leader that dies without resigning lets it in
    /// when its key expires (at most `ttl` after its last renewal). The
    /// [`term`](Leadership::term) is greater than every earlier leader's;
    /// the leader is named by [`leader`](Self::leader) and
    /// [`observe`](Self::observe) from the moment the campaign returns.
    /// See [`Leadership`] for what leading guarantees and what it does not.
    ///
    /// A campaign is a write on the name: from a task that holds a read
    /// lock on it ([`LockRequest::shared`](crate::LockRequest::shared)), it
    /// would wait for its own reader for ever, its intent turning every
    /// other reader away; it is refused at once instead.
    ///
    /// # Errors
    /// As [`lock`](Self::lock) with a fenced lock (the wait deadline, if
    /// set; bad TTLs); [`Error::Upgrade`] from a task that reads `name`,
    /// nothing sent; [`ConfigError::EmptyCandidate`],
    /// [`ConfigError::ValueTooLong`].
    pub fn campaign<'a>(
        &'a self,
        name: &'a str,
        identity: impl Into<String>,
        ttl: Duration,
    ) -> Campaign<'a> {
        Campaign::new(self, name, identity.into(), ttl)
    }

    /// Who leads the election `name`, as a majority of nodes agrees: the
    /// leader; `None` when a majority shows no leader. Reads every node
    /// once (each within the node timeout); changes nothing.
    ///
    /// # Errors
    /// [`Error::NoQuorum`] when no majority agrees either way (nodes down,
    /// a campaign between its two rounds, a lock of another kind on the
    /// name): its report says what each node showed.
    pub async fn leader(&self, name: &str) -> Result<Option<Leader>, Error> {
        leader(self, name).await
    }

    /// Every leadership of the election `name`, as a [`Stream`]
    /// (`futures::Stream`) of [`Observed`] items: who leads when it
    /// starts, then each leadership whose record reached a majority of
    /// nodes, once, in term order — those that began and ended between two
    /// reads too —, the current leader's new values, and no leader when a
    /// read finds none; where it cannot rule out having missed a
    /// leadership between two terms, it says so
    /// ([`Observed::Skipped`]). Pushed by the nodes, polled as a fallback;
    /// see [`Observer`] for exactly when it skips.
    ///
    /// [`Stream`]: futures::Stream
    pub fn observe(&self, name: &str) -> Observer {
        Observer::new(self.clone(), name)
    }
}

/// A campaign for leadership of one election: `.await` it to get the
/// [`Leadership`]. Made by [`Redlock::campaign`].
#[must_use = "a Campaign does nothing until it is awaited"]
pub struct Campaign<'a> {
    redlock: &'a Redlock,
    name: &'a str,
    identity: String,
    value: String,
    ttl: Duration,
    wait: Option<Duration>,
}

impl<'a> Campaign<'a> {
    pub(crate) fn new(
        redlock: &'a Redlock,
        name: &'a str,
        identity: String,
        ttl: Duration,
    ) -> Self {
        Campaign {
            redlock,
            name,
            identity,
            value: String::new(),
            ttl,
            wait: None,
        }
    }

    /// The value to publish with the leadership (an address, say), which
    /// [`Redlock::leader`] and [`Redlock::observe`] show; empty by default.
    /// At most [`MAX_LEADER_VALUE`] bytes.
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }

    /// How long to wait for leadership at most; by default, for ever.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }
}

impl<'a> IntoFuture for Campaign<'a> {
    type Output = Result<Leadership, Error>;
    type IntoFuture = BoxFuture<'a, Result<Leadership, Error>>;

    fn into_future(self) -> Self::IntoFuture {
        async move {
            if self.identity.is_empty() {
                return Err(ConfigError::EmptyCandidate.into());
            }
            if self.value.len() > MAX_LEADER_VALUE {
                return Err(ConfigError::ValueTooLong {
                    bytes: self.value.len(),
                }
                .into());
            }
            let key = self.redlock.key(self.name);
            let floor = self.redlock.options().fence_time_floor;
            let campaigner = Arc::new(Campaigner::new(&key, floor, &self.identity, &self.value));
            let kind: Arc<dyn Kind> = campaigner.clone();
            let call = Call {
                retries: u32::MAX,
                // For ever, as near as a deadline can say it.
                wait: self.wait.unwrap_or(Duration::from_secs(100 * 365 * 86_400)),
            };
            let mut lock = self
                .redlock
                .acquire(
                    kind,
                    self.name,
                    Arc::new([key]),
                    self.ttl,
                    call,
                    false,
                    None,
                )
                .await?;
            lock.keep_alive();
            Ok(Leadership {
                lock,
                campaigner,
                identity: self.identity,
                ttl: self.ttl,
            })
        }
        .boxed()
    }
}

impl fmt::Debug for Campaign<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Campaign")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .field("ttl", &self.ttl)
            .field("wait", &self.wait)
            .finish_non_exhaustive()
    }
}

/// Leadership of an election, kept alive in the background until it is
/// resigned, dropped (which resigns in the background) or lost.
///
/// **Leading is believing, within a deadline.** The handle says it leads
/// while its lock is valid: the nodes' keys outlive that validity, so no
/// other candidate can lead before it ends. A process paused past it (a GC
/// pause, `SIGSTOP`, swapping) learns that it lost only when it looks
/// again: check [`is_lost`](Self::is_lost) before each action, and pass
/// the [`term`](Self::term) with every write to what the leader controls,
/// so that it refuses a deposed leader's late writes.
pub struct Leadership {
    lock: Lock,
    campaigner: Arc<Campaigner>,
    identity: String,
    ttl: Duration,
}

impl Leadership {
    /// The election's name.
    pub fn name(&self) -> &str {
        self.lock.resource()
    }

    /// This candidate's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The term: greater than the term of every earlier leader of this
    /// election (the leadership's fencing token).
    pub fn term(&self) -> u64 {
        self.lock.fence().unwrap_or(0)
    }

    /// The value published now.
    pub fn value(&self) -> String {
        self.campaigner.published().value.to_string()
    }

    /// Whether leadership has been lost (its validity ran out, or a renewal
    /// found it gone). Once lost, it stays lost.
    pub fn is_lost(&self) -> bool {
        self.lock.is_lost()
    }

    /// How long leadership is still valid; zero once lost.
    pub fn remaining(&self) -> Duration {
        self.lock.remaining()
    }

    /// Resolves when leadership is lost — at the latest when its validity
    /// runs out. Use it in a `tokio::select!` against the leader's work.
    pub async fn lost(&self) {
        self.lock.held().lost().await;
    }

    /// A view of the leadership for the code it protects (cheap to clone):
    /// [`Held::lost`], [`Held::remaining`].
    pub fn held(&self) -> Held {
        self.lock.held()
    }

    /// Publishes a new value, only while leading: on a majority of nodes,
    /// where [`Redlock::leader`] and [`Redlock::observe`] see it. It is also
    /// a renewal of the leadership.
    ///
    /// # Errors
    /// As [`Lock::extend`]: [`Error::Expired`] once leadership is lost
    /// (nothing sent), [`Error::Taken`], [`Error::NoQuorum`]. The value is
    /// kept for the renewals that follow either way, so a value whose
    /// proclamation failed for a passing reason (timeouts) may still be
    /// published by the next renewal; [`ConfigError::ValueTooLong`], before
    /// anything changes.
    pub async fn proclaim(&mut self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        if value.len() > MAX_LEADER_VALUE {
            return Err(ConfigError::ValueTooLong { bytes: value.len() }.into());
        }
        if self.lock.is_lost() {
            return self.lock.extend(self.ttl).await;
        }
        self.campaigner.proclaim(&value);
        self.lock.extend(self.ttl).await
    }

    /// Gives leadership up on every node, at once: the next candidate is
    /// woken, and observers told.
    ///
    /// # Errors
    /// As [`Lock::release`].
    pub async fn resign(self) -> Result<(), Error> {
        self.lock.release().await
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("name", &self.name())
            .field("identity", &self.identity)
            .field("term", &self.term())
            .field("remaining", &self.remaining())
            .finish()
    }
}

/// Who leads an election, as a majority of nodes agrees: the last
/// candidate whose record of leadership reached a majority, as long as its
/// key lives there.
///
/// A read is a snapshot, not a linearizable one: each node answers at its
/// own moment, within the node timeout. A candidate whose campaign wrote
/// its record on a majority but then failed (its second round counted too
/// late, or its process died between the rounds) is named until its
/// rollback lands or its key expires — at most `expires_in` — although it
/// never believed it led. A node restarted without persistence answers
/// "free": the restart guard of the reading client discounts that answer
/// while the node has been up for less than the longest key life seen on
/// the other nodes (or the longest TTL this client uses), whether the
/// client met the node before its restart or first after it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's identity.
    pub identity: String,
    /// The value it published last (on the nodes read).
    pub value: String,
    /// Its term.
    pub term: u64,
    /// How long its key lives on a majority unless renewed: leadership
    /// ends by then at the latest (the leader itself believes in a little
    /// less: its validity). Zero for a leadership an [`Observer`] read
    /// from the nodes' history rather than as the current leader (it may
    /// have ended).
    pub expires_in: Duration,
    /// The number of the proclamation `value` came from (0: the value it
    /// campaigned with).
    pub proclamation: u64,
}

/// Who leads the election `name`, from one answer of every node (see
/// [`Redlock::leader`]).
pub(crate) async fn leader(redlock: &Redlock, name: &str) -> Result<Option<Leader>, Error> {
    let key = redlock.key(name);
    let answers = redlock.engine().gather(election::leader(&key)).await;
    let seen = answers
        .into_iter()
        .map(|a| {
            a.and_then(|reply| election::read_leader(&reply).ok_or_else(|| unexpected(&reply)))
        })
        .collect();
    judge(redlock, name, seen).0
}

/// The failure of a node whose reply is none of an election script's.
pub(crate) fn unexpected(reply: &redis::Value) -> NodeFailure {
    NodeFailure::Server {
        code: "UNEXPECTED".into(),
        message: format!("a reply that is no election's: {reply:?}"),
    }
}

/// Who leads, from what each node showed: a restarted node's "free" is
/// discounted first. Also says which nodes restarted lately (their
/// history, too, may be missing what they forgot).
pub(crate) fn judge(
    redlock: &Redlock,
    name: &str,
    seen: Vec<Result<Seen, NodeFailure>>,
) -> (Result<Option<Leader>, Error>, Vec<bool>) {
    let engine = redlock.engine();
    // A node that restarted lately may have forgotten the leader's key: its
    // "free" says nothing while a key that lives as long as the longest
    // one seen (or our TTLs) may have been granted before its restart.
    let life = seen
        .iter()
        .filter_map(|s| match s {
            Ok(Seen::Held { pttl_ms, .. }) => Some(Duration::from_millis(*pttl_ms)),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    let mut restarted = Vec::with_capacity(seen.len());
    let seen: Vec<Result<Seen, NodeFailure>> = seen
        .into_iter()
        .zip(&engine.nodes)
        .map(|(seen, node)| {
            let quarantined = node.quarantined(life);
            restarted.push(quarantined.is_some());
            match (seen, quarantined) {
                (Ok(Seen::Free), Some(restarted)) => Err(restarted),
                (seen, _) => seen,
            }
        })
        .collect();
    let names: Vec<String> = engine.nodes.iter().map(|n| n.name().to_owned()).collect();
    (decide(name, &seen, &names, engine.quorum()), restarted)
}

/// What the nodes' answers say together: a leader when a majority shows
/// one token with that token's record; none when a majority shows no key;
/// otherwise the report of a read that could not tell.
fn decide(
    name: &str,
    seen: &[Result<Seen, NodeFailure>],
    names: &[String],
    quorum: usize,
) -> Result<Option<Leader>, Error> {
    let free = seen.iter().filter(|s| matches!(s, Ok(Seen::Free))).count();
    if free >= quorum {
        return Ok(None);
    }
    // The token most nodes hold with its record.
    let mut best: Option<(&str, Vec<(u64, &election::Record)>)> = None;
    for s in seen {
        let Ok(Seen::Held {
            token,
            record: Some(_),
            ..
        }) = s
        else {
            continue;
        };
        if best.as_ref().is_some_and(|(t, _)| t == token) {
            continue;
        }
        let with: Vec<(u64, &election::Record)> = seen
            .iter()
            .filter_map(|s| match s {
                Ok(Seen::Held {
                    token: t,
                    pttl_ms,
                    record: Some(r),
                }) if t == token => Some((*pttl_ms, r)),
                _ => None,
            })
            .collect();
        if best.as_ref().is_none_or(|(_, b)| with.len() > b.len()) {
            best = Some((token, with));
        }
    }
    let most = best.as_ref().map_or(0, |(_, with)| with.len());
    if let Some((_, mut with)) = best.filter(|(_, with)| with.len() >= quorum) {
        // The key lives on a majority until the quorum-th longest PTTL.
        with.sort_by_key(|w| std::cmp::Reverse(w.0));
        let expires_in = Duration::from_millis(with[quorum - 1].0);
        let latest = with
            .iter()
            .map(|(_, r)| *r)
            .max_by_key(|r| r.seq)
            .expect("a majority is not empty");
        let term = with.iter().map(|(_, r)| r.term).max().unwrap_or(0);
        return Ok(Some(Leader {
            identity: latest.identity.clone(),
            value: latest.value.clone(),
            term,
            expires_in,
            proclamation: latest.seq,
        }));
    }
    // Neither: what each node showed (no key: `Missing`; a key: `Held`),
    // and the largest agreement, of either kind.
    let nodes = names
        .iter()
        .zip(seen)
        .map(|(n, s)| {
            let why = match s {
                Ok(Seen::Free) => NodeFailure::Missing,
                Ok(Seen::Other | Seen::Held { .. }) => NodeFailure::Held,
                Err(e) => e.clone(),
            };
            (n.clone(), why)
        })
        .collect();
    let agreed = free.max(most);
    Err(Error::NoQuorum {
        resource: name.to_owned(),
        report: Report {
            needed: quorum,
            agreed,
            nodes,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::election::Record;

    fn held(token: &str, pttl_ms: u64, term: u64, seq: u64) -> Result<Seen, NodeFailure> {
        Ok(Seen::Held {
            token: token.into(),
            pttl_ms,
            record: Some(Record {
                identity: format!("id-{token}"),
                value: format!("v{seq}"),
                term,
                seq,
            }),
        })
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("n{i}")).collect()
    }

    #[test]
    fn a_leader_is_named_only_by_a_majority_with_its_record() {
        let seen = [
            held("a", 900, 7, 0),
            held("a", 800, 7, 1),
            held("a", 700, 7, 0),
            Ok(Seen::Free),
            Err(NodeFailure::Timeout),
        ];
        let leader = decide("e", &seen, &names(5), 3).unwrap().unwrap();
        assert_eq!(leader.identity, "id-a");
        assert_eq!((leader.term, leader.proclamation), (7, 1));
        assert_eq!(leader.value, "v1", "the latest proclamation seen");
        assert_eq!(leader.expires_in, Duration::from_millis(700));
        // Two with the record and one without (not announced there): no
        // majority names it.
        let seen = [
            held("a", 900, 7, 0),
            held("a", 800, 7, 0),
            Ok(Seen::Held {
                token: "a".into(),
                pttl_ms: 900,
                record: None,
            }),
            Ok(Seen::Free),
            Ok(Seen::Free),
        ];
        let err = decide("e", &seen, &names(5), 3).unwrap_err();
        assert!(matches!(err, Error::NoQuorum { .. }), "{err}");
        // A split between two tokens (a partition healing) names neither.
        let seen = [
            held("a", 900, 7, 0),
            held("a", 800, 7, 0),
            held("b", 900, 8, 0),
            held("b", 900, 8, 0),
            Err(NodeFailure::Timeout),
        ];
        assert!(decide("e", &seen, &names(5), 3).is_err());
    }

    #[test]
    fn no_leader_takes_a_majority_of_free_nodes() {
        let seen = [
            Ok(Seen::Free),
            Ok(Seen::Free),
            Ok(Seen::Free),
            held("a", 900, 7, 0),
            Ok(Seen::Other),
        ];
        assert_eq!(decide("e", &seen, &names(5), 3).unwrap(), None);
        let seen = [
            Ok(Seen::Free),
            Ok(Seen::Free),
            Ok(Seen::Other),
            Err(NodeFailure::Timeout),
            Err(NodeFailure::Timeout),
        ];
        let Err(Error::NoQuorum { report, .. }) = decide("e", &seen, &names(5), 3) else {
            panic!("two free nodes of five decide nothing");
        };
        assert_eq!(report.failures().len(), 5);
    }
}
