//! The key space's one owner: what a lock key is, for every kind.
//!
//! Every kind keeps a resource's lock in one key, `<prefix><resource>`,
//! and all kinds share that key space: a mutex and a reentrant lock on one
//! name exclude each other, and `status` and `release_token` read any of
//! them. What a key *is* is said in one place, a Lua prelude put before the
//! text of every script ([`script!`]):
//!
//! | part | what it says |
//! |---|---|
//! | `common.lua` | what every layout and script uses: `whole` and `lifespan`, through which every number a script computes goes to Redis (below), `prolong`, `now_ms`, `fit_life` |
//! | each layout's `layout.lua`, in its kind's folder | how a key of that layout looks, holds, is removed and has room: one function, `<layout>_layout(question, …)`, answering `ask`'s questions (below), and the layout's own helpers (a semaphore's `semaphore_slots`, readers' `reader_shares`) |
//! | `keyspace.lua` | which layout a key has, for any key: `look` (free; or held — in which layout, by whom, the token waiters wait for; or no lock at all: the node's `WRONGTYPE` error to return); `mine` (the key if it is a given layout's, and a given holder's); and `ask`, which passes a question to the key's layout: `told` (the name a refused waiter is told: the token waiters wait for, or for a semaphore `permits:<k>:<digest of who holds which slot>`, for readers `readers:<digest of their tokens>`, for a reentrant owner `holds:<its smallest hold>`; a release announces the holds it ended by that name), `holds` (the holds' tokens), `remove` (one hold removed by its token, as the key's own kind would), `room` (whether a waiter could get in, by the layout's rules) |
//! | `keyspace_queue.lua` | `ask`'s questions in the words of `queue.lua`, which builds on them: `waited_for`, `remove`, `room` (only in the scripts that queue: every function of the prelude is made anew on every call) |
//! | `queue.lua` | the waiters' queue `<key>:waiters` and the wake-up channels ([`queue`](crate::wait::queue)), and on top of the owner: `refuse` (the reply of a refused attempt, queueing its waiter), `let_go` (`remove`, and the next waiter woken when that freed something), and `vacant` (`room`, and a writer's intent: what a pass-on or a leave asks before it wakes) |
//!
//! The layouts today:
//!
//! | layout | kinds | its Lua | the key |
//! |---|---|---|---|
//! | `exclusive` | mutex, set, fenced, election | `mutex/layout.lua` | a string: the holder's token (`SET NX PX`, as every Redlock client makes it) |
//! | `reentrant` | reentrant | `reentrant/layout.lua` | a hash: `o` = owner, `i` = smallest hold token, a field per hold |
//! | `readers` | read-write (readers; the writer is `exclusive`) | `rwlock/layout.lua` | a hash: `R`, and per reader its token = expiry (ms, node clock) |
//! | `semaphore` | semaphore | `semaphore/layout.lua` | a hash: `k` = permits; per held slot `i`, `t<i>` = holder's token and `x<i>` = expiry (ms, node clock) |
//!
//! A kind's scripts ask `look` what a key is and speak only of their own
//! layout: a key is theirs when `look` names their layout and their
//! identity (a token, an owner); anything else that is held is another
//! holder's, whatever made it. That is the whole argument for exclusion
//! *between* kinds: on one node a key has one layout at a time, and a key
//! is created only where it is absent (by a script after `look` found it
//! free, or by the plain lock's `SET NX`), so a node grants one kind's
//! holder only where no other kind's holder has the key; each kind's quorum
//! argument then carries over unchanged, two majorities sharing a node.
//! (The mutex, a set and the fenced lock share the `exclusive` layout: a
//! holder is told from another by its token, drawn fresh for every
//! attempt.) A key that no layout claims (a list, a hash without the fields
//! of ours) is never taken for free or for held: the scripts answer a
//! `WRONGTYPE` error naming its type, before they write anything, and the
//! client reports it as such; the plain lock's `SET NX`, which runs no
//! script, finds such a key there and votes no; the fenced kind's second
//! round counts it as another holder's; `status` shows its type. A foreign
//! hash that happens to have an `o` field reads as reentrant holds: keep
//! the lock's key prefix for locks.
//!
//! Operators' tools go through the owner too: [`admin`](super::admin)'s
//! `inspect.lua` reports the layout's name, the holder and the holds, and
//! `clear.lua` lets one hold go by its token with `let_go`, whichever kind
//! made it. A new kind with a layout of its own adds its `layout.lua` (and
//! a line for it in [`prelude!`] and `tests/scripts.rs`), its fields to
//! `look` and a branch to `ask` in `keyspace.lua`, and a variant to
//! [`Holding`](super::admin::Holding); no other kind's script changes.
//!
//! `look` asks `GET` first for the kinds that expect a string and `TYPE`
//! first for the others: a `GET` on a hash is an error reply the node
//! counts (`errorstat_WRONGTYPE`), and a reentrant lock's or a semaphore's
//! every call would raise the node's error rate.
//!
//! The prelude runs on every call of every script (a script is one Lua
//! function, run whole, and each `local function` in it is a closure made
//! anew), so it is a few plain functions returning several values, and the
//! extension scripts (a held lock's steady cost) carry the owner without
//! the queue. Measured with `redis-benchmark` on `EVALSHA` (µs per call on
//! the node): a first version that registered each layout as a table of
//! closures took the mutex's release from 1.7 to 3.6; this one takes it to
//! 2.0, and the extension from 1.45 to 1.7 (a node's whole cost of one
//! request, network included, is about 7 µs). Each function costs every
//! call (a closure made, with a link to each outer function it calls),
//! so a layout is one function answering `ask`'s questions, not
//! one per question; a helper used by one layout alone is made inside it
//! (`readers_name`); and `keyspace_queue.lua`'s three go only where the
//! queue does. The extension scripts carry as many functions as before the
//! layouts moved to their kinds' folders (15), the scripts that queue
//! three more.
//!
//! Those figures were a release and an extension of a key that was not
//! there. With the key held (a lock, then its release), `scripts/lua-cost.sh`
//! measures the mutex's release at 6.4-8.4 µs per call with the prelude
//! against 2.1-2.5 for rslock's compare-and-delete, and its extension at
//! 3.8-4.5 against 2.0-2.7 (Redis 7.0.15, `INFO commandstats`, a loaded
//! machine). So the mutex's release and extension begin with a fast path
//! that answers the common case (one key, ours, nobody waiting) before the
//! prelude, which only runs, as a function `slow`, where the fast path
//! leaves the case to it (`script!(fast …)`, see
//! [`mutex`](super::mutex)): 2.3-3.0 µs and 2.5-3.0, a lock and its release
//! 1.09-1.18 times rslock's (`SET` + release; 2.2-3.0 times before). The
//! other kinds' scripts run the prelude on every call still.
//!
//! Beside the lock key live `<key>:waiters` (the queue), `<key>:fence` (the
//! fenced kind's counter), `<key>:intent` (a writer waiting for readers:
//! see [`rwlock`](super::rwlock)), `<key>:leader` (an election's record of
//! who leads, and its channel: see [`election`](super::election)),
//! `<key>:terms` (an election's history of leaderships) and the
//! channels `<key>:wake:<client>`: a resource named with one of those
//! suffixes would collide with another's. Every one of them but the
//! fencing counter and an election's history always has an expiry: the
//! queue lives a few seconds past the holder its last waiter saw, the
//! intent at most eleven seconds, the record as long as its leader's key.
//! The counter has none by design: it must outlive every lock on the name,
//! or tokens would go back; nor has the history, bounded to the latest 32
//! leaderships, which observers read to tell what they missed (one that
//! lapsed could not say what it lost).
//!
//! Under the prefix, too, each client's record of who it is,
//! `<prefix>who:<id>` (12 hex digits; see [`who`](crate::who)), a day's
//! expiry: a resource named `who:` and a client's id would share its key
//! (the lock would look held by a record for a day; never two holders).
//! Keep resource names out of `who:`. A client made per request writes one
//! record per node each time: about 100 bytes, for a day.
//!
//! **Numbers.** Lua 5.1's numbers are doubles, and `redis.call` hands one
//! to Redis as `%.17g` text (Redis 6.2 and 7.0): `1e17` and above in
//! exponent form, which `PEXPIRE`, `PX` and every integer argument refuse.
//! A queue behind a lock held for [`MAX_TTL`](crate::MAX_TTL) got the
//! holder's PTTL plus 5 s that way: its `PEXPIRE` failed after its `ZADD`,
//! leaving a queue with no expiry and the waiter with an error. So every
//! number a script computes goes to Redis as its exact digits (`whole`),
//! every life it computes for a key clamped to 2^62 ms (`lifespan`: Redis
//! refuses an expiry past `i64::MAX` ms of its clock, and a lock key that
//! another client gave the longest expiry Redis takes would put its
//! queue's past it); the numbers the caller gives go as given. Above 2^53
//! a double is exact to its spacing only (1 024 ms near `MAX_TTL`): a
//! PTTL read there is off by up to 512 ms, rounding keeps order so no key
//! is ever shortened, and a prolonged key may get up to that much less
//! than asked, far inside the drift allowance (1% of the TTL) the client
//! counts off its validity.

/// The key space's prelude, in its order: what every layout uses, each
/// layout (its kind's `layout.lua`), then the owner that dispatches to them;
/// `prelude!(queue)` adds the owner's questions as `queue.lua` asks them
/// (`keyspace_queue.lua`).
macro_rules! prelude {
    () => {
        concat!(
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/kinds/common.lua")),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/kinds/mutex/layout.lua"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/kinds/reentrant/layout.lua"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/kinds/semaphore/layout.lua"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/kinds/rwlock/layout.lua"
            )),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/kinds/keyspace.lua"
            )),
        )
    };
    (queue) => {
        concat!(
            $crate::kinds::keyspace::prelude!(),
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/kinds/keyspace_queue.lua"
            )),
        )
    };
}
pub(crate) use prelude;

/// The text of a script: the key space's prelude ([`prelude!`]), then the
/// script's own files (relative to the caller; a kind's helpers first, its
/// script last). `script!("x.lua")` puts the prelude and the queue
/// (`queue.lua`: queueing, waking, letting go) before it; `script!(keys
/// "x.lua")`, for scripts that only read and prolong keys, the prelude
/// alone, which costs the node less per call. Both but `keys` alone then
/// run `moving.lua` first: a script that reaches a side key (`<key>:waiters`,
/// `:intent`, `:leader`, `:terms`) answers `TRYAGAIN`, having written
/// nothing, where its Redis Cluster slot is moving away and a side key has
/// left (see that file); `script!(keys sides "x.lua")` is `keys` with it,
/// for the election's scripts that write its record.
///
/// `script!(fast "x_fast.lua"; …)` puts a fast path before that whole
/// text, which becomes a function: the fast path's text, then `local
/// function slow()`, the script as `script!(…)` makes it, `end` and
/// `return slow()`. The fast path answers the common case itself, with no
/// function of the prelude made (Lua makes a `local function`'s closure
/// when its statement runs: here only when `slow` runs), and leaves
/// anything else to `slow`, unchanged; the script's top-level `return`s
/// are `slow`'s. Its locals and upvalues are counted as before (Lua 5.1
/// allows 200 locals and 60 upvalues per function: the prelude's
/// top-level locals were the main chunk's, now `slow`'s, and the fast
/// path's are its blocks' own).
macro_rules! script {
    (fast $fast:literal; keys $($file:literal),+) => {
        concat!(
            include_str!($fast),
            "local function slow()\n",
            $crate::kinds::keyspace::script!(keys $($file),+),
            "\nend\nreturn slow()\n"
        )
    };
    (fast $fast:literal; $($file:literal),+) => {
        concat!(
            include_str!($fast),
            "local function slow()\n",
            $crate::kinds::keyspace::script!($($file),+),
            "\nend\nreturn slow()\n"
        )
    };
    ($($file:literal),+) => {
        concat!(
            $crate::kinds::keyspace::prelude!(queue),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/wait/queue.lua")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/kinds/moving.lua")),
            $(include_str!($file)),+
        )
    };
    (keys sides $($file:literal),+) => {
        concat!(
            $crate::kinds::keyspace::prelude!(),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/kinds/moving.lua")),
            $(include_str!($file)),+
        )
    };
    (keys $($file:literal),+) => {
        concat!(
            $crate::kinds::keyspace::prelude!(),
            $(include_str!($file)),+
        )
    };
}
pub(crate) use script;
