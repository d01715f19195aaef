//! Waiting without polling: a release wakes the waiter whose turn it is.
//!
//! A release used to be announced to every waiter, and every waiter in
//! every process then tried at once: with 256 waiters, 256 rounds to every
//! node per release, all but one lost. Now waiters queue on the nodes and a
//! release wakes one of them.
//!
//! A release wakes the first of the queue: the release script publishes
//! `<waiter> <token>` on the channel `<key>:wake:<client id>` of the first
//! waiter's client, on every node where it deletes the key (rollbacks of
//! failed attempts only when they may have reached a majority, or when the
//! kind asks it: [`Kind::release`](crate::kinds::Kind::release),
//! [`Kind::announce_rollback`](crate::kinds::Kind::announce_rollback)). So
//! each `Redlock` hears only the wake-ups of its own waiters, and a release costs one
//! waiter one attempt, not every waiter one each. A [`Redlock`] keeps one
//! subscriber connection per node ([`subscriber`]), made when the first of
//! its `lock()` calls has to wait and shared by all of them, and a registry
//! of the channels its calls wait on ([`subscriber`]), each subscribed while
//! it has waiters and for [`LINGER`](subscriber::LINGER) after. Each `lock()`
//! call that waits is one waiter of its own (a [`Listener`], numbered),
//! queued on the nodes by its attempts, which carry its name: several calls
//! of one process on one resource queue there like calls of different
//! processes, and only the one whose turn it is wakes.
//!
//! ## The queue on the nodes
//!
//! The waiters' queue on each node is shared by every kind ([`queue`], its
//! scripts `queue.lua`, `leave.lua` and `pass_on.lua` beside it).
//!
//! * **Queueing.** A waiter's attempt that finds the key held by another
//!   owner puts the waiter (`<since>:<client id>:<wait id>`, see
//!   [`queue::member`]) in the key's queue, the sorted set `<key>:waiters`, unless
//!   it is in it already. Every score is 0, so the queue is in the order of
//!   the names, that is of `<since>`, when the wait began by the waiter's
//!   clock: **every node orders its queue alike**, whatever order the
//!   attempts reached it in, so every node wakes the same waiter. (Ordered
//!   by arrival, the nodes' queues differed, and a release woke up to one
//!   waiter per node: 64 waiters cost 2.5 attempts per acquisition where
//!   one would do.) The attempt that gets the lock takes it out. The queue lives while its waiters come back (a waiter
//!   sleeps no longer than the holder's PTTL before its next attempt) and
//!   expires a few seconds after they stop.
//! * **Waking.** A release (or a rollback that may have reached a majority,
//!   or any failed read's rollback: see
//!   [`Kind::announce_rollback`](crate::kinds::Kind::announce_rollback),
//!   or an operator's clear) that frees what a waiter could take (deletes
//!   the key, or lets a semaphore's slot go) takes the first waiter out of
//!   its queue and publishes `<member> <token>` on that waiter's client's
//!   channel `<key>:wake:<client id>` ([`queue::channel`]). A waiter whose
//!   channel has no subscriber of its own (the process is gone, or its
//!   subscription is) is skipped and the next one tried, in the same
//!   script: the node asks `PUBSUB NUMSUB` before it publishes, since
//!   `PUBLISH`'s count of those who heard includes pattern subscribers (a
//!   monitoring tool's `PSUBSCRIBE *`), which wake nobody. (Where an ACL
//!   forbids `PUBSUB`, `PUBLISH`'s count decides alone.)
//! * **Leaving.** A waiter that stops waiting without the lock takes itself
//!   out of the queues ([`queue::leave`]), and its intent with them, in the
//!   background, and wakes the next waiter where the lock has room (it
//!   may have been woken for that room itself); a node that does not
//!   answer is sent it again until the intent would have lapsed
//!   ([`queue::LEAVE_LIFE`]). (The first send is not copied onto a retired
//!   connection as removals are: a writer's attempt still held on one,
//!   delivered after the leave, sets its intent again for up to its life.)
//! * **Passing on.** A wake-up can name a wait that has ended: one that got
//!   the lock while a node still had it queued (its attempt there came
//!   late, or found the old holder's key still there), or one whose leaving
//!   a node missed. Such a wake-up would wake nobody, and the lock could
//!   stay free with every other waiter asleep until its timer. So the
//!   client that hears it, unless the same release woke one of its live
//!   waits, asks that node to wake the next waiter if the lock has room
//!   there ([`queue::pass_on`]).
//! * **Room.** A pass-on and a leave wake whenever the lock has room for a
//!   waiter, whatever the kind: `vacant` in `queue.lua`, on top of the
//!   layouts' own `room` in `keyspace.lua` — a free key, a semaphore with
//!   a slot free (let go or expired: its key stays while other slots are
//!   held), readers whom no writer's intent keeps others from. (Only a
//!   free key counted: behind a dropped waiter, a semaphore's free permit
//!   stayed idle while the next waiter slept out its timer, 15 s in a
//!   review's run.) A new layout says its room in `room`; no script of
//!   the queue changes.
//!
//! Each node keeps its own queue and wakes its own first waiter: the same
//! one, unless a node missed a waiter's attempt (it timed out there, or
//! the node restarted), and never more than one per node.
//!
//! **Order.** Waiters are woken in the order their waits began, by their
//! own clocks: first come, first served, as far as the clients' clocks
//! agree and no newcomer takes the lock in between. A client whose clock
//! is behind gets ahead of the queue, no more: order is fairness, never
//! safety.
//!
//! ## Hearing a wake-up
//!
//! **When is a wake-up sure to come?** A release that counts reaches a
//! majority, `Q` of `N` nodes. If the channel is subscribed on at least
//! `N − Q + 1` nodes, the two sets share a node, so the release is heard
//! by the waiter whose turn it is, if it is ours; if it is another
//! waiter's, that one tries next, and its release comes in turn. A woken
//! wait that cannot act passes the turn on: a wait that has ended (its
//! client asks the node to wake the next if the lock has room there:
//! the pass-on), or one that gives up (leaving the queue wakes the
//! next if the lock has room: a free key, a semaphore's free slot, readers
//! no writer's intent keeps others from). A waiter whose client no longer
//! subscribes on a node is skipped there, also when a pattern subscriber
//! (`PSUBSCRIBE *`, a monitoring tool) would count the wake-up as heard
//! (the node asks `PUBSUB NUMSUB` first). What escapes that — a wake-up for a `Redlock`
//! dropped a moment before, its subscriptions not yet closed, or one
//! counted by a pattern subscriber where an ACL forbids `PUBSUB` — costs
//! the next waiter its timer: the holder's PTTL, capped at ten retry
//! delays. A node that is a Redis Cluster is subscribed on one of its
//! servers (the next seed after a failure: [`Endpoint::pubsub`]); a
//! release's `PUBLISH`, on the primary of the key's slot, reaches every
//! server of the cluster, but there `PUBSUB NUMSUB` and `PUBLISH`'s reply
//! count only that server's subscribers, so the script takes the waiter as
//! listening (a waiter whose client is gone then costs the next one its
//! timer too).
//! Below that the waiter is
//! [`listening`](subscriber::Channel::listening) no more, and
//! the retry loop falls back to its ordinary retry pause. The
//! subscriptions that count for a wait are those made before the attempt
//! that preceded it ([`Channel::heard_since`]): one made later may have
//! come after the release.
//!
//! **Whom does a wake-up wake?** Only the wait it names, whatever its last
//! attempt saw ([`Channel::wake`]): the nodes took that wait out of their
//! queues, so if it did not act the turn would be lost. One exception:
//! copies of a release the wait has already acted on, once its attempt
//! since found a majority held by another holder. That majority queued the
//! wait again, and that holder's release reaches one of them and wakes it,
//! so the copies' turn is not lost ([`Listener`]'s
//! [`Snapshots::settle`](listener::Snapshots::settle)). Not where the
//! majority named a writer's intent, which has no release of its own, nor
//! for a wake-up that names no holder (a waiter's leaving, a reader
//! joining): a copy of those may have taken the wait out of a node's
//! queue where the attempt had just queued it, and ignored, it left a
//! reader in no queue at all while the lock had room. Wake-ups
//! are remembered (the last [`RECENT`](subscriber::RECENT)), not just
//! signalled, so one heard while the waiter was still busy with its
//! attempt still wakes it; one for a wait that has ended wakes nobody.
//!
//! **Wake-ups are hints, never needed for safety or for progress.**
//! Safety stays with the quorum: a woken waiter still needs a majority. A
//! waiter whose wake-up is lost (a message dropped with its connection, a
//! woken waiter that does not try: its process frozen) still tries when the
//! holder it saw would have expired, and every waiter's sleep is capped
//! (see [`pause`]). A woken waiter that loses (to a caller who
//! was not waiting: there is no turning newcomers away, which over
//! independent nodes could split every vote) queues again, in its place.
//!
//! Every wait also has a timer (the holder's remaining TTL, learnt by the
//! failed attempt, or the retry pause), so that a key that expires without a
//! release is noticed too. How a broken or silent subscriber connection
//! degrades to timers, never to a hang, is [`subscriber`]'s; how copies of
//! one release, lingering channels and multi-resource waits are heard,
//! too.
//!
//! ## Where the code is
//!
//! * [`waiters`]: the handle on one `Redlock`'s waiting ([`Waiters`]):
//!   its channels, registered by key, and each call's listener.
//! * [`subscriber`]: the subscriber connections, one per node, and the
//!   channels on them: one key's wake-up channel, its wake-ups and
//!   lingering (one file, as each needs the other).
//! * [`listener`]: one call's wait, a [`Listener`] over the channels of its
//!   keys.
//! * [`queue`]: the node-side queue — the names, the wake-up's format, the
//!   leave and pass-on commands and their scripts.
//! * [`announcements`]: an election observer's own subscriber connections,
//!   for `<key>:leader`: a second use of pub/sub, apart from the waiters'.
//! * [`pause`]: how long a waiter sleeps after a failed attempt, and the
//!   acquire loop's [`Waiting`] between attempts.
//!
//! [`Redlock`]: crate::Redlock
//! [`Endpoint::pubsub`]: crate::net::Endpoint::pubsub
//! [`Channel::heard_since`]: subscriber::Channel::heard_since
//! [`Channel::wake`]: subscriber::Channel::wake

pub(crate) mod announcements;
pub(crate) mod listener;
pub(crate) mod pause;
pub(crate) mod queue;
pub(crate) mod subscriber;
pub(crate) mod waiters;

pub(crate) use listener::Listener;
pub(crate) use pause::Waiting;
pub(crate) use subscriber::Wake;
pub(crate) use waiters::Waiters;
