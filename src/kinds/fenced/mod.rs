//! Fenced locks: the mutex, plus a fencing token that grows with every new
//! holder.
//!
//! A holder paused past its validity (a GC pause, swapping, a long `await`)
//! may still act on the protected resource after the lock moved on: no lock
//! built on timeouts can prevent that. A fencing token lets the *resource*
//! prevent it: every write carries the holder's token, and the storage
//! refuses a token lower than the highest it has seen (Kleppmann, "How to do
//! distributed locking"). etcd's lock revision and Redisson's `FencedLock`
//! (one `INCR` on one master) give one; this is one over a quorum of
//! independent nodes.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | acquire | [`acquire.lua`](ACQUIRE): `SET NX PX`, and in the same step `counter := max(counter + 1, floor)` | 1 |
//! | … when fewer than a majority of the yes votes read the token | [`confirm.lua`](CONFIRM): `counter := max(counter, token)`, and is our key still here? | +1 |
//! | release, extend | the mutex's scripts; the token stays the lock's | 1 |
//!
//! **Guarantee.** Under the mutex's assumptions (a majority of nodes run
//! and keep their keys; clocks drift within the allowance), and while no
//! node loses its counters, every successful acquisition of a resource
//! carries a token strictly greater than the token of every acquisition of
//! it that was handed out before. With the time floor (the default) this
//! also holds across lost counters, under a condition on client clocks
//! (below).
//!
//! **The trap.** "`INCR` the counter on each node that grants the lock and
//! take the largest" is wrong. Failed and partial acquisitions `INCR` the
//! counters of the minority that granted them, so counters diverge; a
//! holder whose majority includes inflated nodes draws a large token that
//! only those nodes ever saw, and the next holder, whose majority misses
//! them, draws a smaller one. `tests/fenced.rs` builds this and shows the
//! naive token going backwards while ours does not.
//!
//! **Why ours grows.** Treat the counters as a max-register over the quorum.
//! Holder `A` draws `T = max(v)` over the values `v` its yes votes
//! returned, and hands the lock out only once a set `C(A)` of a majority of
//! nodes has held, *at one atomic moment each*, both `A`'s key and a counter
//! of at least `T`: the acquisition script sets both in one step, so when a
//! majority of the yes votes returned `T` itself, `C(A)` is those nodes and
//! no second round is needed; otherwise the second round raises the
//! counter to `T` on every node and counts the nodes where `A`'s key still
//! is. Both rounds are inside the validity (`ttl − elapsed − drift`, with
//! `elapsed` over both).
//!
//! Now let `B` be handed out after `A`. `B`'s majority of yes votes meets
//! `C(A)` in some node `n`. `B`'s script on `n` found no key and set its own
//! in one step (or, sent twice after a reconnect, found its own key from
//! that step and returned the counter as it is: no lower). Before `A`'s moment on `n`? Then `B`'s key was on `n` until
//! it went: `B` is handed out after `A`, so it neither released nor rolled
//! back (it succeeded) before then, and its key outlives its deadline,
//! which is after its hand-out — all later than `A`'s moment on `n`, where
//! `A`'s key was set: a contradiction. So `B`'s script ran after `A`'s key
//! left `n` — by `A`'s release (after `A`'s hand-out) or its expiry (after
//! `A`'s deadline) — and therefore after `A`'s moment there. Counters only
//! grow, so `B` read at least `T` on `n`, set `v ≥ T + 1`, and drew a token
//! of at least `T + 1`. It does not matter whether `A`'s key was released
//! or expired, nor how many failed attempts raised counters in between: they
//! only raise them. An extension does not touch the counter, and the lock
//! keeps its token for its whole life.
//!
//! **Losing counters, and the time floor.** A node restarted without
//! persistence forgets its counters as well as its keys, and the restart
//! guard's quarantine covers keys, not counters. *One* such node is enough
//! to break the counters alone: if it was the only node where a later
//! majority met `C(A)`, that majority draws a token from counters that
//! never saw `T` (`tests/fenced.rs` shows it). So each acquisition also
//! passes a floor, this process's wall clock in microseconds, and the
//! counter becomes `max(counter + 1, floor)`. Since one resource is not
//! locked a million times a second, tokens follow the wall clock, and after
//! counters are lost (on one node, a majority, or all at once) tokens keep
//! growing as long as no two clients' clocks differ by more than the time
//! between the holder before the loss and the next one — which can be as
//! short as a hand-off, so keep client clocks in sync (NTP) and, where
//! that cannot be promised, make the nodes keep their counters:
//! `appendonly yes` and `appendfsync always`. Without the floor
//! ([`Builder::fence_time_floor`](crate::Builder::fence_time_floor) off)
//! tokens are small counts that rely on the counters alone: every node must
//! keep them.
//!
//! The floor also means that every node of a healthy majority lands on the
//! same value, so the second round is rare: it happens only when some yes
//! votes carry a counter above our clock and others do not (a client whose
//! clock runs ahead took the lock on only some nodes, or a node missed its
//! acquisitions).
//!
//! Counters are exact below 2^53 (Lua's numbers are doubles; a floor in
//! microseconds gets there in the year 2255). A counter that cannot grow
//! past that limit makes the script fail before it writes anything, so no
//! key is taken behind an error; and so does one that is not a whole number
//! from 0 below 2^53, which only someone else can have written. Lua 5.1's
//! `tonumber` reads `nan`, `inf`, `-5` and `1.5` as numbers, and a NaN
//! fails every comparison and survives `math.max`: unchecked, `nan` took
//! the key and drew a token of `i64::MIN`, and the second round agreed.
//! Both scripts refuse such a counter with `BADFENCE <counter key>`, which
//! the kind reads ([`read_fence_error`]) as
//! [`NodeFailure::BadFenceCounter`].
//!
//! **Counters accumulate**: one key per fenced resource per node
//! (`<key>:fence`, a short string), kept without a TTL: about 91 bytes of
//! memory each (100 000 counters took 9.1 MB of `used_memory` on Redis
//! 7.0.15; `MEMORY USAGE` says 72 for one). A resource named `x:fence` would collide with the counter
//! of `x`: do not name resources so. Deleting the counters of resources no
//! longer used is safe under the time floor on the clock condition above
//! (it is a loss of counters), for instance
//! `redis-cli --scan --pattern 'redquorum:*:fence' | xargs redis-cli unlink`
//! on each node for the default prefix.

use std::sync::{Arc, LazyLock};
use std::time::{SystemTime, UNIX_EPOCH};

use redis::Value;

use crate::error::NodeFailure;
use crate::kinds::keyspace::script;
use crate::kinds::mutex::Mutex;
use crate::kinds::{Agreed, Kind, acquire_outcome, own_error};
use crate::proto::quorum::{Plan, Tally};
use crate::proto::{Answer, Call, Command, Effect, Keys, LockId, Script};

/// Take the key and draw the next token, in one step.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!("counter.lua", "acquire.lua")));

/// Raise the counter to the token; is our key still here?
pub(crate) static CONFIRM: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "counter.lua", "confirm.lua")));

/// The fenced kind, for one resource.
#[derive(Debug, Clone)]
pub(crate) struct Fenced {
    /// The lock's key and its counter's.
    keys: Keys,
    /// Whether counters are raised to the wall clock.
    floor: bool,
}

/// The fenced lock of `key`.
pub(crate) fn kind(key: &str, floor: bool) -> Arc<dyn Kind> {
    Arc::new(Fenced::new(key, floor))
}

/// The key of the fencing counter of the lock `key`.
pub(crate) fn counter_key(key: &str) -> Box<str> {
    format!("{key}:fence").into()
}

impl Fenced {
    /// The fenced lock of `key`, for a kind built on it (the election's).
    pub(crate) fn new(key: &str, floor: bool) -> Fenced {
        Fenced {
            keys: Arc::new([key.into(), counter_key(key)]),
            floor,
        }
    }

    /// The lock's key and its counter's.
    pub(crate) fn keys(&self) -> &Keys {
        &self.keys
    }

    /// The least a counter may become: now in microseconds since the epoch
    /// (0 without the floor, or with a clock before 1970).
    fn floor(&self) -> u64 {
        if !self.floor {
            return 0;
        }
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64)
    }
}

impl Kind for Fenced {
    fn name(&self, _: &LockId) -> &'static str {
        "fenced"
    }

    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command {
        Command {
            call: Call::Script {
                script: &ACQUIRE,
                keys: self.keys.clone(),
                args: vec![
                    id.token().into(),
                    plan.ttl_ms.to_string().into_bytes(),
                    waiter.unwrap_or_default().into(),
                    self.floor().to_string().into_bytes(),
                ],
            },
            effect: Effect::Grant { life: plan.life() },
        }
    }

    fn read_acquire(&self, reply: Value) -> Answer {
        if let Value::Array(items) = &reply
            && let [Value::Int(n)] = items.as_slice()
        {
            return match u64::try_from(*n) {
                Ok(n) if n > 0 => Answer {
                    counter: Some(n),
                    ..Ok(()).into()
                },
                _ => Err(crate::kinds::unexpected(&reply)).into(),
            };
        }
        acquire_outcome(&reply)
    }

    fn read_error(&self, failure: NodeFailure) -> NodeFailure {
        read_fence_error(failure)
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Mutex.release(id, announce)
    }

    fn extend(&self, id: &LockId, plan: &Plan) -> Command {
        Mutex.extend(id, plan)
    }

    fn agreed(&self, id: &LockId, tally: &Tally) -> Agreed {
        let counters = tally.counters();
        let token = counters.iter().copied().max().unwrap_or(0);
        let at_token = counters.iter().filter(|&&c| c == token).count();
        let confirm = (at_token < tally.needed()).then(|| Command {
            call: Call::Script {
                script: &CONFIRM,
                keys: self.keys.clone(),
                args: vec![id.token().into(), token.to_string().into_bytes()],
            },
            effect: Effect::Count,
        });
        Agreed {
            fence: Some(token),
            confirm,
        }
    }
}

/// Reads a node's error to a script that reads the fencing counter
/// (`counter.lua`): `BADFENCE <counter key>` is
/// [`NodeFailure::BadFenceCounter`].
pub(crate) fn read_fence_error(failure: NodeFailure) -> NodeFailure {
    match own_error(&failure, "BADFENCE") {
        Some(key) => NodeFailure::BadFenceCounter {
            key: key.to_owned(),
        },
        None => failure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::keys;
    use std::time::Duration;

    fn tally(counters: &[Option<u64>], nodes: usize) -> Tally {
        let mut tally = Tally::new(nodes);
        for (i, c) in counters.iter().enumerate() {
            tally.record(
                i,
                Answer {
                    counter: *c,
                    ..Ok(()).into()
                },
            );
        }
        tally
    }

    fn fenced() -> Fenced {
        Fenced {
            keys: keys(&["k", "k:fence"]),
            floor: false,
        }
    }

    #[test]
    fn a_majority_at_the_token_needs_no_second_round() {
        let id = LockId::new(keys(&["k"]));
        let agreed = fenced().agreed(&id, &tally(&[Some(7), Some(7), Some(7)], 5));
        assert_eq!(agreed.fence, Some(7));
        assert!(agreed.confirm.is_none());
    }

    #[test]
    fn a_token_read_on_a_minority_is_written_to_a_majority_first() {
        let id = LockId::new(keys(&["k"]));
        // The trap: two inflated nodes and a lagging one.
        let agreed = fenced().agreed(&id, &tally(&[Some(9), Some(9), Some(3)], 5));
        assert_eq!(agreed.fence, Some(9));
        let confirm = agreed.confirm.expect("a second round");
        assert_eq!(confirm.effect, Effect::Count);
        let Call::Script { script, args, .. } = confirm.call else {
            panic!("the second round is a script")
        };
        assert!(std::ptr::eq(script, &*CONFIRM));
        assert_eq!(args[1], b"9");
        // A yes without a counter cannot count as having read the token.
        let agreed = fenced().agreed(&id, &tally(&[Some(4), Some(4), None], 5));
        assert!(agreed.confirm.is_some());
    }

    #[test]
    fn reads_the_counter_of_a_yes() {
        let read = |v: Value| fenced().read_acquire(v);
        let yes = read(Value::Array(vec![Value::Int(42)]));
        assert_eq!((yes.vote, yes.counter), (Ok(()), Some(42)));
        assert_eq!(read(Value::Int(0)).vote, Err(NodeFailure::Contended));
        let held = read(Value::Array(vec![
            Value::BulkString(b"t".to_vec()),
            Value::Int(5),
        ]));
        assert_eq!(held.holder.unwrap().ttl, Some(Duration::from_millis(5)));
        for bad in [
            Value::Array(vec![Value::Int(0)]),
            Value::Array(vec![Value::Int(-3)]),
        ] {
            assert!(matches!(read(bad).vote, Err(NodeFailure::Server { .. })));
        }
    }

    #[test]
    fn the_floor_is_the_wall_clock_in_microseconds_when_on() {
        assert_eq!(fenced().floor(), 0);
        let on = Fenced {
            floor: true,
            ..fenced()
        };
        // After 2020-01-01 and in microseconds.
        assert!(on.floor() > 1_577_836_800_000_000);
    }
}
