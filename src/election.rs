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

mod leader;
mod observe;

use std::fmt;
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;

pub use leader::Leader;
pub use observe::{Observed, Observer};

use crate::client::Redlock;
use crate::engine::acquire::Budget;
use crate::error::{ConfigError, Error};
use crate::kinds::Kind;
use crate::kinds::election::Campaigner;
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
        leader::leader(self, name).await
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
            let call = Budget {
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
