//! A held lock's shared state: its validity deadline, whether it has ended,
//! the one extension in flight, and the watchdog.
//!
//! Every handle on a lock — the [`Lock`](crate::Lock) itself, each
//! [`Held`](crate::Held) it hands out, and the watchdog — is a [`Handle`] on
//! the same record (the lock's one allocation: see `proto::state`), so
//! they never disagree. A lock is **lost** as soon as any of these is true, and
//! stays lost:
//!
//! * its validity deadline has passed — read from the clock on every
//!   question, so the answer does not wait for the watchdog to run (a busy
//!   or current-thread runtime may not let it);
//! * it was released or dropped;
//! * an extension found that a majority can no longer be had (another
//!   owner's key, or keys gone, on too many nodes).
//!
//! **Extensions never take validity back.** The extension script never
//! shortens a key (see `kinds::mutex`), so every majority that took an
//! extension keeps our keys at least until the deadline that extension
//! produced: the lock's deadline is the latest of them, and a failed or
//! shorter extension leaves it where it was. At most one extension is in
//! flight ([`Handle::extend`] holds the turn for its whole round), so the
//! watchdog and a caller's `extend` take turns, and the watchdog reads the
//! TTL to renew with only when its turn has come: a caller's newer TTL is
//! never overwritten by an older one.
//!
//! **The watchdog** ([`keep_alive`]) extends the lock by its TTL every
//! `ttl × keep_alive_fraction` (a third by default, as Redisson's watchdog
//! does), and in any case while a round can still finish: an extension is
//! *sent* at the latest when two node timeouts of validity are left (one
//! round that times out, and one more), or half the validity, where that
//! is less. The cap is what renews a TTL that is short against the node
//! timeout (a 1 s node timeout with a 1.5 s TTL, say): its extensions are
//! sent with half the validity left, which is plenty for nodes that answer
//! in a few milliseconds, and not non-stop. Below about two node timeouts
//! of TTL, a lock does not survive a majority that answers only near its
//! timeout; from about four, even an extension that timed out can be
//! followed by another in time. The watchdog gives a lock up only when an
//! extension it sent failed, or the validity ran out: an extension that
//! fails for a passing reason (timeouts, connection errors) is tried again
//! soon, for as long as another one can still be sent with a node timeout
//! and a quarter of validity left; past that, the lock is given up while
//! still valid, so that its holder hears it before the validity ends.

use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::clock::Moment;
use crate::engine::Engine;
use crate::engine::acquire::Acquired;
use crate::error::{Error, NodeFailure, Report};
use crate::kinds::{Kind, OnEnd};
use crate::metrics;
use crate::proto::quorum::{Plan, Tally};
use crate::proto::{Keys, LockId, LockState};

/// A handle on one held lock: its record, which every handle on it shares,
/// and its context, which most locks share with the client's other locks.
/// Two pointers; cloning one is two counts up.
///
/// The record (see `proto::state`) keeps the lock's token, its key, its
/// gate, the validity deadline (as [`Moment::as_nanos`]; [`ENDED`] once the
/// lock has ended), the TTL of the last acquisition or extension (what the
/// watchdog renews with) and the flags ([`TURN`], [`RELEASED`]). Atomics,
/// and a `Notify` made only for whoever waits, rather than a `watch`
/// channel and a mutex: a held lock is a few hundred bytes less (one
/// process may hold many thousands).
#[derive(Clone)]
pub(crate) struct Handle {
    state: LockState,
    ctx: Arc<Context>,
}

/// What a held lock needs beyond its record: the engine and its kind, and
/// what its key does not say. A plain lock on one resource shares its
/// client's ([`Context::plain`]); a fenced, reentrant or multi-resource lock
/// has one of its own.
pub(crate) struct Context {
    pub(crate) engine: Arc<Engine>,
    kind: Arc<dyn Kind>,
    /// The fencing token, for a fenced lock: it stays the same for the
    /// lock's whole life, extensions included.
    fence: Option<u64>,
    /// The resource's name, where the key does not give it (a set's
    /// names, or a key that is not the prefix and the name).
    resource: Option<Box<str>>,
    /// Every key of a multi-resource lock (the record has the first).
    keys: Option<Keys>,
    /// What the kind does when the lock ends (a read lock: its entry
    /// among its client's read locks, which refuses its task a write on
    /// the name; see `kinds::rwlock::upgrade`).
    hook: Option<Box<dyn OnEnd>>,
}

impl Context {
    /// The context of the plain locks of `kind` on one resource: made once
    /// per client, shared by all of them.
    pub(crate) fn plain(engine: Arc<Engine>, kind: Arc<dyn Kind>) -> Arc<Context> {
        Arc::new(Context {
            engine,
            kind,
            fence: None,
            resource: None,
            keys: None,
            hook: None,
        })
    }
}

/// The deadline of a lock that has ended.
const ENDED: u64 = u64::MAX;

/// Flag: an extension has its turn (see [`Handle::turn`]).
const TURN: u8 = 1;
/// Flag: the [`Lock`](crate::Lock)'s release round has been decided (until
/// then, a drop releases in the background).
const RELEASED: u8 = 2;

impl Handle {
    /// The handle of a lock just acquired, of `kind` on `resource`, for
    /// `plan.ttl`; `plain` is the context the client's plain locks share,
    /// taken where it says all there is to say.
    /// A kind that acts when its lock ends brings its `hook` (a read
    /// lock: its entry among its client's read locks).
    pub(crate) fn new(
        plain: &Arc<Context>,
        kind: Arc<dyn Kind>,
        acquired: Acquired,
        resource: &str,
        plan: Plan,
        hook: Option<Box<dyn OnEnd>>,
    ) -> Handle {
        let Acquired {
            id,
            deadline,
            fence,
        } = acquired;
        let state = id.state().clone();
        state.deadline.store(deadline.as_nanos(), Ordering::Release);
        state.ttl_ms.store(plan.ttl_ms, Ordering::Release);
        let engine = &plain.engine;
        let one = id.keys.len() == 1;
        // The key is the prefix and the name: keep no copy of the name.
        let derivable = one && engine.options.resource(state.key()) == Some(resource);
        let ctx =
            if derivable && fence.is_none() && hook.is_none() && Arc::ptr_eq(&kind, &plain.kind) {
                plain.clone()
            } else {
                Arc::new(Context {
                    engine: engine.clone(),
                    kind,
                    fence,
                    resource: (!derivable).then(|| resource.into()),
                    keys: (!one).then(|| id.keys.clone()),
                    hook,
                })
            };
        Handle { state, ctx }
    }

    /// The engine the lock was taken on.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.ctx.engine
    }

    /// The lock's fencing token, for a fenced lock.
    pub(crate) fn fence(&self) -> Option<u64> {
        self.ctx.fence
    }

    /// The token, 40 hex digits (made the first time it is asked for).
    pub(crate) fn token(&self) -> &str {
        self.state.extras().token()
    }

    /// The lock's id, for one of its rounds: its keys (made anew, but for a
    /// set's), its token, and its record, whose gate the round passes.
    fn id(&self) -> LockId {
        let keys = match &self.ctx.keys {
            Some(keys) => keys.clone(),
            None => Arc::new([self.state.key().into()]),
        };
        LockId::of(self.state.clone(), keys)
    }

    /// The validity deadline; now, once the lock has ended.
    fn deadline(&self) -> Moment {
        match self.state.deadline.load(Ordering::Acquire) {
            ENDED => Moment::now(),
            nanos => Moment::from_nanos(nanos),
        }
    }

    /// Whether the lock has ended (released, dropped, or found lost).
    fn ended(&self) -> bool {
        self.state.deadline.load(Ordering::Acquire) == ENDED
    }

    /// How long the lock is still valid; zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        self.deadline().remaining()
    }

    /// Whether the lock is lost: ended, or its deadline has passed.
    pub(crate) fn is_lost(&self) -> bool {
        self.remaining().is_zero()
    }

    /// Resolves when the lock is lost.
    pub(crate) async fn lost(&self) {
        loop {
            // Registered before the deadline is read: a change after the
            // read still wakes us (see `LockState::wake`).
            let changed = self.state.extras().changed.notified();
            let mut changed = pin!(changed);
            changed.as_mut().enable();
            let left = self.remaining();
            if left.is_zero() {
                return;
            }
            // In steps of at most a second: tokio's timers stop while the
            // machine is suspended, the deadline's clock does not.
            tokio::select! {
                () = changed => {}
                () = tokio::time::sleep(left.min(Duration::from_secs(1))) => {}
            }
        }
    }

    /// Runs the kind's end hook ([`OnEnd`]): the [`Lock`](crate::Lock) is
    /// released or dropped (a read lock's task may now ask to write).
    pub(crate) fn end_hook(&self) {
        if let Some(hook) = &self.ctx.hook {
            hook.end();
        }
    }

    /// Whether the [`Lock`](crate::Lock)'s release round has been decided.
    pub(crate) fn released(&self) -> bool {
        self.state.flags.load(Ordering::Acquire) & RELEASED != 0
    }

    /// Notes that the [`Lock`](crate::Lock)'s release round has been
    /// decided: its drop releases nothing more.
    pub(crate) fn mark_released(&self) {
        self.state.flags.fetch_or(RELEASED, Ordering::AcqRel);
    }

    /// Starts the watchdog ([`keep_alive`]), unless it runs already.
    pub(crate) fn start_keeper(&self) {
        let mut keeper = self
            .state
            .extras()
            .keeper
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if keeper.is_none() {
            *keeper = Some(tokio::spawn(keep_alive(self.clone())).abort_handle());
        }
    }

    /// Aborts the watchdog, if it was started.
    pub(crate) fn stop_keeper(&self) {
        let Some(extras) = self.state.extras_if_any() else {
            return;
        };
        let keeper = extras
            .keeper
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(keeper) = keeper {
            keeper.abort();
        }
    }

    /// The lock is lost while held (not released): says why, counts it, and
    /// ends it.
    /// Nothing if it had already ended (a release, or another path, got
    /// there first).
    fn lose(&self, why: std::fmt::Arguments<'_>) {
        if self.end() {
            self.report_lost(why);
        }
    }

    /// Says that the lock was lost while held, and counts it: once per lock,
    /// by whichever path ended it.
    fn report_lost(&self, why: std::fmt::Arguments<'_>) {
        tracing::warn!(key = %self.state.key(), "lock lost: {why}");
        metrics::lost(self.ctx.kind.name(&self.id()));
    }

    /// Marks the lock as ended: every handle says it is lost from now on.
    /// Whether this call ended it.
    pub(crate) fn end(&self) -> bool {
        let ended = self.state.deadline.swap(ENDED, Ordering::AcqRel) != ENDED;
        if ended {
            self.state.wake();
        }
        ended
    }

    /// Moves the deadline to `deadline` if that is later; says whether it
    /// moved. A lock that has ended, or whose deadline has passed, stays
    /// lost: it is marked ended instead (an extension that got through
    /// after the validity ran out does not make it valid again).
    fn set_deadline(&self, deadline: Moment) -> bool {
        let mut current = self.state.deadline.load(Ordering::Acquire);
        loop {
            let (new, ran_out) = if current == ENDED {
                return false;
            } else if Moment::from_nanos(current).remaining().is_zero() {
                (ENDED, true)
            } else if deadline.as_nanos() > current {
                (deadline.as_nanos(), false)
            } else {
                return false;
            };
            match self.state.deadline.compare_exchange_weak(
                current,
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.state.wake();
                    if ran_out {
                        self.report_lost(format_args!(
                            "validity ran out before an extension got through"
                        ));
                    }
                    return !ran_out;
                }
                Err(now) => current = now,
            }
        }
    }

    fn plan(&self) -> Plan {
        let ttl_ms = self.state.ttl_ms.load(Ordering::Acquire);
        Plan::of_ms(ttl_ms, self.ctx.engine.options.drift_factor)
    }

    /// The resource the lock is on.
    pub(crate) fn resource(&self) -> &str {
        match &self.ctx.resource {
            Some(resource) => resource,
            // `derivable` at the handle's making: the key is the name's.
            None => self
                .ctx
                .engine
                .options
                .resource(self.state.key())
                .unwrap_or_default(),
        }
    }

    /// Waits for the turn to extend: at most one extension is in flight.
    /// The turn is handed back when the returned guard drops, also when the
    /// extension is cancelled. Like a mutex, but a flag in the record and
    /// the lock's `Notify`, which a lock that nobody extends at once never
    /// makes (it also wakes [`lost`](Self::lost), which looks again).
    async fn turn(&self) -> Turn<'_> {
        loop {
            if self.take_turn() {
                return Turn(self);
            }
            // Registered before the flag is read again: a turn handed back
            // after the read still wakes us (see `LockState::wake`).
            let changed = self.state.extras().changed.notified();
            let mut changed = pin!(changed);
            changed.as_mut().enable();
            if self.take_turn() {
                return Turn(self);
            }
            changed.await;
        }
    }

    /// Takes the turn if nobody has it.
    fn take_turn(&self) -> bool {
        self.state.flags.fetch_or(TURN, Ordering::AcqRel) & TURN == 0
    }

    /// One extension round, the only one in flight: to `plan.ttl`, or, for
    /// the watchdog (`None`), to the TTL of the last acquisition or
    /// extension as of when its turn comes. `None` if the lock was already
    /// lost (nothing sent); the plan used, and the outcome, otherwise.
    async fn extend_once(&self, plan: Option<Plan>) -> Option<(Plan, Result<(), Tally>)> {
        let _alone = self.turn().await;
        if self.is_lost() {
            return None;
        }
        let plan = plan.unwrap_or_else(|| self.plan());
        let start = Moment::now();
        let id = self.id();
        let outcome = self
            .ctx
            .engine
            .extend(&self.ctx.kind, &id, &plan, start)
            .await;
        if outcome.is_err() {
            metrics::extend_failed(self.ctx.kind.name(&id));
        }
        Some((
            plan,
            outcome.map(|deadline| {
                // The TTL the keys now have: what the watchdog renews with.
                // One shorter than what was left changed nothing.
                if self.set_deadline(deadline) {
                    self.state.ttl_ms.store(plan.ttl_ms, Ordering::Release);
                }
            }),
        ))
    }

    /// Extends the lock to `plan.ttl` on a majority.
    pub(crate) async fn extend(&self, plan: Plan) -> Result<(), Error> {
        match self.extend_once(Some(plan)).await {
            None => Err(self.gone(Report::default())),
            // Got through, but only after the validity had run out.
            Some((_, Ok(()))) if self.is_lost() => Err(self.gone(Report::default())),
            Some((_, Ok(()))) => Ok(()),
            Some((_, Err(tally))) => Err(self.refused(self.ctx.engine.report(&tally))),
        }
    }

    /// Releases the lock on every node; every handle says it is lost from
    /// the start of the call.
    pub(crate) async fn release(&self) -> Result<(), Error> {
        // Taken before the lock ends below.
        let valid = self.remaining();
        let late = valid.is_zero();
        if self.end() && late {
            self.report_lost(format_args!("validity ran out before the release"));
        }
        let engine = &self.ctx.engine;
        let tally = engine
            .release(&self.ctx.kind, &self.id(), &self.plan(), valid)
            .await;
        tracing::debug!(
            resource = %self.resource(),
            agreed = tally.agreed(),
            needed = tally.needed(),
            "release"
        );
        let report = engine.report(&tally);
        match (tally.has_majority(), late) {
            (true, false) => Ok(()),
            (true, true) => Err(Error::ReleasedLate {
                resource: self.resource().to_owned(),
                report,
            }),
            (false, _) => Err(self.refused(report)),
        }
    }

    /// Releases in the background, for a handle dropped without release.
    pub(crate) fn release_in_background(&self) {
        let late = self.is_lost();
        if self.end() && late {
            self.report_lost(format_args!("validity ran out before the lock was dropped"));
        }
        self.ctx
            .engine
            .release_in_background(&self.ctx.kind, &self.id(), &self.plan());
    }

    /// The error for votes without a majority.
    fn refused(&self, report: Report) -> Error {
        if report.held_by_others() > 0 {
            Error::Taken {
                resource: self.resource().to_owned(),
                report,
            }
        } else if report.count(|f| *f == NodeFailure::Missing) > 0 {
            self.gone(report)
        } else {
            Error::NoQuorum {
                resource: self.resource().to_owned(),
                report,
            }
        }
    }

    fn gone(&self, report: Report) -> Error {
        Error::Expired {
            resource: self.resource().to_owned(),
            report,
        }
    }
}

/// An extension's turn (see [`Handle::turn`]); handed back on drop.
struct Turn<'a>(&'a Handle);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.0.state.flags.fetch_and(!TURN, Ordering::AcqRel);
        self.0.state.wake();
    }
}

/// How much validity is left, at the latest, when the watchdog sends an
/// extension: two node timeouts, or half the validity of `plan` where that
/// is less (see the module doc).
fn lead(plan: &Plan, node_timeout: Duration) -> Duration {
    (node_timeout * 2).min(plan.best_validity() / 2)
}

/// The least validity with which a failed extension is tried again: one
/// node timeout for the round, and a quarter more for a late timer.
fn last_try(node_timeout: Duration) -> Duration {
    node_timeout + node_timeout / 4
}

/// The watchdog: extends the lock until it is lost or has ended (the task
/// is also aborted by a release or drop).
pub(crate) async fn keep_alive(handle: Handle) {
    let options = &handle.ctx.engine.options;
    let node_timeout = options.node_timeout;
    let every = |plan: Plan| plan.ttl.mul_f64(options.keep_alive_fraction);
    let mut next = Moment::now().after(every(handle.plan()));
    // The last failure since the last extension that got through.
    let mut failed: Option<Report> = None;
    loop {
        // Sleep until the next extension is due, but send it while there is
        // still time for it (and, after a failure, for another).
        let left = handle.remaining();
        let latest = match &failed {
            None => left.saturating_sub(lead(&handle.plan(), node_timeout)),
            Some(report) => match left.checked_sub(last_try(node_timeout)) {
                Some(room) if !room.is_zero() => room,
                _ => {
                    return handle.lose(format_args!(
                        "an extension failed ({report}), and too little validity is left \
                         for another to finish"
                    ));
                }
            },
        };
        tokio::time::sleep(next.remaining().min(latest)).await;
        if handle.ended() {
            return;
        }
        let started = Moment::now();
        match handle.extend_once(None).await {
            None => {
                return handle.lose(format_args!(
                    "validity ran out before an extension was sent"
                ));
            }
            Some((_, Ok(()))) if handle.is_lost() => {
                return handle.lose(format_args!(
                    "validity ran out before an extension succeeded"
                ));
            }
            Some((plan, Ok(()))) => {
                failed = None;
                next = started.after(every(plan));
            }
            Some((_, Err(tally))) if !tally.recoverable() => {
                let report = handle.ctx.engine.report(&tally);
                return handle.lose(format_args!("a majority no longer holds it ({report})"));
            }
            Some((plan, Err(tally))) => {
                let report = handle.ctx.engine.report(&tally);
                tracing::debug!(key = %handle.state.key(), %report, "extension failed; trying again");
                failed = Some(report);
                next = Moment::now().after((every(plan) / 4).max(node_timeout));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Options;
    use crate::kinds::{fenced, mutex, reentrant};

    /// A client's plain context, on a node nobody listens on: nothing here
    /// does I/O.
    fn plain() -> Arc<Context> {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let engine = Arc::new(Engine::new(
            vec![crate::net::Endpoint::Server(client)],
            Options::default(),
        ));
        Context::plain(engine, mutex::kind())
    }

    /// The handle of a lock of `kind` on `names`, as if just acquired.
    fn handle(
        plain: &Arc<Context>,
        kind: Arc<dyn Kind>,
        names: &[&str],
        fence: Option<u64>,
    ) -> Handle {
        let options = &plain.engine.options;
        let keys: Keys = names.iter().map(|n| options.key(n)).collect();
        let plan = options.plan(Duration::from_secs(10)).unwrap();
        let acquired = Acquired {
            id: LockId::new(keys),
            deadline: Moment::now().after(plan.best_validity()),
            fence,
        };
        Handle::new(plain, kind, acquired, &names.join(","), plan, None)
    }

    #[tokio::test]
    async fn a_plain_lock_shares_its_clients_context_and_others_keep_what_they_need() {
        let plain = plain();
        let one = handle(&plain, mutex::kind(), &["r"], None);
        assert!(Arc::ptr_eq(&one.ctx, &plain));
        assert_eq!(size_of::<Handle>(), 2 * size_of::<usize>());
        assert_eq!(one.resource(), "r");
        assert_eq!(&one.id().keys[..], &[Box::from("redquorum:r")]);
        assert!(!one.is_lost());

        let set = handle(&plain, mutex::kind(), &["a", "b"], None);
        assert!(!Arc::ptr_eq(&set.ctx, &plain));
        assert_eq!(set.resource(), "a,b");
        let keys = set.id().keys;
        assert_eq!(&keys[..], &[Box::from("redquorum:a"), "redquorum:b".into()]);

        let fenced = handle(&plain, fenced::kind("redquorum:f", false), &["f"], Some(7));
        assert!(!Arc::ptr_eq(&fenced.ctx, &plain));
        assert_eq!((fenced.fence(), fenced.resource()), (Some(7), "f"));

        let reentrant = handle(&plain, reentrant::kind("job"), &["r"], None);
        assert!(!Arc::ptr_eq(&reentrant.ctx, &plain));
        assert_eq!((reentrant.fence(), reentrant.resource()), (None, "r"));
    }

    #[tokio::test]
    async fn a_rounds_id_has_the_token_and_the_gate_of_the_acquisition() {
        let plain = plain();
        let options = &plain.engine.options;
        let plan = options.plan(Duration::from_secs(10)).unwrap();
        let id = LockId::new(Arc::new(["redquorum:r".into()]));
        let acquired = Acquired {
            id: id.clone(),
            deadline: Moment::now().after(plan.best_validity()),
            fence: None,
        };
        let handle = Handle::new(&plain, mutex::kind(), acquired, "r", plan, None);
        let round = handle.id();
        assert_eq!(round.token(), id.token());
        assert_eq!(handle.token(), id.token());
        // A straggler of the acquisition is stopped by the round's removal.
        round.gate().shut();
        assert_eq!(
            crate::proto::Pass::new(Some(id.gate()), async { 1 }).await,
            None
        );
    }

    #[tokio::test]
    async fn extensions_take_turns_also_when_one_is_cancelled() {
        let plain = plain();
        let handle = handle(&plain, mutex::kind(), &["r"], None);
        let first = handle.turn().await;
        let mut second = pin!(handle.turn());
        assert!(futures::poll!(second.as_mut()).is_pending());
        {
            // Cancelled while waiting: holds nothing.
            let mut cancelled = pin!(handle.turn());
            assert!(futures::poll!(cancelled.as_mut()).is_pending());
        }
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), second)
            .await
            .expect("the turn is handed on");
        let mut third = pin!(handle.turn());
        assert!(futures::poll!(third.as_mut()).is_pending());
        drop(second);
        tokio::time::timeout(Duration::from_secs(5), third)
            .await
            .expect("the turn is handed on");
    }

    #[tokio::test]
    async fn lost_resolves_when_the_lock_ends_and_not_before() {
        let plain = plain();
        let handle = handle(&plain, mutex::kind(), &["r"], None);
        let mut lost = pin!(handle.lost());
        assert!(futures::poll!(lost.as_mut()).is_pending());
        // A later deadline wakes it, and it waits again.
        assert!(handle.set_deadline(Moment::now().after(Duration::from_secs(60))));
        assert!(futures::poll!(lost.as_mut()).is_pending());
        assert!(handle.end());
        tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .expect("lost once ended");
        assert!(handle.is_lost());
        assert!(!handle.end(), "ended once");
    }
}
