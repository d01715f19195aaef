//! Leader election: the fenced lock on the election's name, and a record
//! of who leads beside it.
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | campaign | the fenced kind's [`acquire.lua`](super::fenced): `SET NX PX` and `counter := max(counter + 1, floor)` | 1 |
//! | … then always | [`announce.lua`](ANNOUNCE): `counter := max(counter, term)`, and where our key is, the record: who leads, its value, its term | +1 |
//! | renew, proclaim | [`extend.lua`](EXTEND): compare-and-pexpire, and the record brought up to date (a newer value, or a node that missed it) | 1 |
//! | resign | [`resign.lua`](RESIGN): compare-and-delete, the record with it; the next candidate woken | 1 |
//! | leader | [`leader.lua`](LEADER): the key's token and PTTL, and the record if it is that token's | 1 |
//! | observe | [`observe.lua`](OBSERVE): the same, and the history's leaderships above a term | 1 |
//!
//! On a node the leader's key is the fenced lock's (the `exclusive` layout
//! of [`keyspace`](super::keyspace)), and `<key>:leader` is a hash, the
//! **record** (`record.lua`): the leader's lock token, identity,
//! value, term and the number of its latest proclamation. The record is
//! the leader's only while the key holds the token it names: a record left
//! by a leader that crashed names a token that is gone, and says nothing
//! (and goes with its key: the record lives as long as the key). Every
//! change of a record is published on the channel `<key>:leader`, for
//! observers.
//!
//! Beside them, `<key>:terms` is the node's **history** (`record.lua`):
//! every leadership whose record was written on the node, noted in the
//! same step (so a record on a majority is a history entry on a
//! majority), with its latest value there; the latest [`HISTORY_KEEP`] by
//! term, and the highest term dropped to keep so few. It has no TTL, as
//! the counter has none: a history that lapsed could not say what it had
//! lost, and observers rely on knowing (see `election::observe`, which
//! argues what an observer yields from it). Cost: one hash per election
//! per node, about 75 bytes per leadership kept (at most 32) plus its
//! identity and value: 3.1 KB for 32 of `host-a` at `10.0.0.7:8080`
//! (`MEMORY USAGE`, Redis 7.0.15). Delete it with the counter
//! (`redis-cli --scan --pattern 'redquorum:*:terms' | xargs redis-cli
//! unlink`) for elections no longer used: an observer running across the
//! deletion may miss what it had not read yet.
//!
//! **Guarantee.** Under the fenced lock's assumptions (a majority of nodes
//! run and keep their keys and counters; clocks drift within the
//! allowance): at most one candidate believes it leads at any moment (its
//! leadership is a lock, and it believes only within the lock's validity);
//! every leader's term is greater than the term of every leader before it
//! (the term *is* the fencing token: see [`fenced`](super::fenced) for why
//! it grows); and while a candidate believes it leads, a majority of nodes
//! hold its record, so [`leader`](crate::Redlock::leader) names it.
//!
//! **Why the record agrees with the lock.** A campaign is handed out only
//! after the second round has written the record on a majority where our
//! key still was (`announce.lua` checks the key and writes the record in
//! one step), within the validity; it fails and is rolled back otherwise.
//! So a leader holds its key *and* its record on a majority, and any read
//! of a majority meets one of them. `leader` names a leader only when a
//! majority shows the same token with that token's record; a record whose
//! token is not the key's is ignored, so one left by an earlier leader
//! never speaks for a later one. Two leaders are never named by one read
//! (two majorities of one read would share a node, which holds one key);
//! and a read that names a leader of term `T` is never followed by a read
//! that names an earlier one, whose key would have to be back on a
//! majority after the later leader's was set there.
//!
//! **What is tempting and wrong.** (1) Publishing who leads in a command
//! of its own after the lock is won: until it lands, readers see a leader
//! with no name, or the previous leader's record beside the new key, and a
//! leader that crashes between the two leaves the key named by nobody.
//! Here the record is written inside the acquisition's second round, on
//! the nodes where the key is ours, and the lock is not handed out without
//! it. (2) Taking the term from one node's `INCR` (or a counter read
//! apart from the key): it goes backwards after failed campaigns inflated a
//! minority, exactly as the naive fencing token does. (3) Treating *holding
//! the key* as leading: a leader paused past its validity still holds the
//! key until it expires, and the next leader may already have been elected
//! on the nodes where it did; a leader leads only while
//! [`Leadership::is_lost`](crate::Leadership::is_lost) says no, and fences
//! its writes with the term.

use std::sync::{Arc, LazyLock, Mutex};

use redis::Value;

use crate::error::NodeFailure;
use crate::kinds::fenced::{Fenced, read_fence_error};
use crate::kinds::keyspace::script;
use crate::kinds::{Agreed, Kind};
use crate::proto::quorum::{Plan, Tally};
use crate::proto::{Answer, Call, Command, Effect, LockId, Script};

/// The campaign's second round: the counter raised to the term, and the
/// record written where our key is.
pub(crate) static ANNOUNCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(script!(
        keys sides "../fenced/counter.lua",
        "record.lua",
        "announce.lua"
    ))
});

/// A leader's renewal (and proclamation).
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys sides "record.lua", "extend.lua")));

/// A leader's release.
pub(crate) static RESIGN: LazyLock<Script> = LazyLock::new(|| Script::new(script!("resign.lua")));

/// Who leads, on one node.
pub(crate) static LEADER: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "record.lua", "leader.lua")));

/// Who leads on one node, and its history above a term (an observer's
/// read).
pub(crate) static OBSERVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "record.lua", "observe.lua")));

/// How many leaderships each node's history keeps (`record.lua`'s
/// `HISTORY_KEEP`, which a test holds to this): named by the observer's
/// docs, used by no code here.
#[allow(dead_code)]
pub(crate) const HISTORY_KEEP: usize = 32;

/// What a leader publishes: its value, numbered by proclamation, and its
/// term once the campaign is agreed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Published {
    pub(crate) value: Arc<str>,
    pub(crate) seq: u64,
    pub(crate) term: u64,
}

/// One candidate's campaign: the fenced lock of the election's key, and
/// what it publishes.
#[derive(Debug)]
pub(crate) struct Campaigner {
    fenced: Fenced,
    identity: Arc<str>,
    published: Mutex<Published>,
}

impl Campaigner {
    /// The campaign of `identity` for the election whose lock key is `key`.
    pub(crate) fn new(key: &str, floor: bool, identity: &str, value: &str) -> Campaigner {
        Campaigner {
            fenced: Fenced::new(key, floor),
            identity: identity.into(),
            published: Mutex::new(Published {
                value: value.into(),
                ..Published::default()
            }),
        }
    }

    /// What it publishes now.
    pub(crate) fn published(&self) -> Published {
        self.published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A new value, numbered after every earlier one: every renewal from
    /// now on carries it.
    pub(crate) fn proclaim(&self, value: &str) {
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        published.value = value.into();
        published.seq += 1;
    }

    fn record_args(&self, id: &LockId, published: &Published) -> Vec<Vec<u8>> {
        vec![
            id.token().into(),
            published.term.to_string().into_bytes(),
            self.identity.as_bytes().to_vec(),
            published.value.as_bytes().to_vec(),
            published.seq.to_string().into_bytes(),
        ]
    }
}

impl Kind for Campaigner {
    fn name(&self, _: &LockId) -> &'static str {
        "election"
    }

    fn acquire(&self, id: &LockId, plan: &Plan, waiter: Option<&str>) -> Command {
        self.fenced.acquire(id, plan, waiter)
    }

    fn read_acquire(&self, reply: Value) -> Answer {
        self.fenced.read_acquire(reply)
    }

    /// The fenced kind's errors: its acquisition and the announcement
    /// read the fencing counter.
    fn read_error(&self, failure: NodeFailure) -> NodeFailure {
        read_fence_error(failure)
    }

    fn release(&self, id: &LockId, announce: bool) -> Command {
        Command {
            call: Call::Script {
                script: &RESIGN,
                keys: id.keys.clone(),
                args: vec![
                    id.token().into(),
                    if announce { b"1" } else { b"0" }.to_vec(),
                ],
            },
            effect: Effect::Remove,
        }
    }

    fn extend(&self, id: &LockId, plan: &Plan) -> Command {
        let published = self.published();
        let args = vec![
            id.token().into(),
            plan.ttl_ms.to_string().into_bytes(),
            self.identity.as_bytes().to_vec(),
            published.value.as_bytes().to_vec(),
            published.term.to_string().into_bytes(),
            published.seq.to_string().into_bytes(),
        ];
        Command {
            call: Call::Script {
                script: &EXTEND,
                keys: id.keys.clone(),
                args,
            },
            effect: Effect::Refresh { life: plan.life() },
        }
    }

    /// The term is the fencing token the votes agree on; the record is
    /// written on every node in a second round, always (see the module
    /// doc: a leader is not handed out before a majority names it).
    fn agreed(&self, id: &LockId, tally: &Tally) -> Agreed {
        let term = self.fenced.agreed(id, tally).fence;
        let published = {
            let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
            published.term = term.unwrap_or(0);
            published.clone()
        };
        Agreed {
            fence: term,
            confirm: Some(Command {
                call: Call::Script {
                    script: &ANNOUNCE,
                    keys: self.fenced.keys().clone(),
                    args: self.record_args(id, &published),
                },
                effect: Effect::Count,
            }),
        }
    }
}

/// The command that asks each node who leads the election of `key`.
pub(crate) fn leader(key: &str) -> Command {
    Command {
        call: Call::Script {
            script: &LEADER,
            keys: Arc::new([key.into()]),
            args: Vec::new(),
        },
        effect: Effect::Count,
    }
}

/// The command that asks each node who leads the election of `key`, and
/// which leaderships its history holds with a term above `above`.
pub(crate) fn observe(key: &str, above: u64) -> Command {
    Command {
        call: Call::Script {
            script: &OBSERVE,
            keys: Arc::new([key.into()]),
            args: vec![above.to_string().into_bytes()],
        },
        effect: Effect::Count,
    }
}

/// One leadership of a node's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    pub(crate) term: u64,
    pub(crate) token: String,
    pub(crate) identity: String,
    /// Its latest value written on the node, and that proclamation's
    /// number.
    pub(crate) value: String,
    pub(crate) seq: u64,
}

/// What one node's history says above the term asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct History {
    /// The highest term it dropped to keep [`HISTORY_KEEP`] leaderships (0:
    /// none): it cannot say what it held up to there.
    pub(crate) dropped: u64,
    /// Its leaderships above the term asked for, in term order.
    pub(crate) entries: Vec<Entry>,
}

/// Reads one node's reply to [`observe`]; `None` for a reply that is none
/// of its shapes.
pub(crate) fn read_observe(reply: &Value) -> Option<(Found, History)> {
    let Value::Array(items) = reply else {
        return None;
    };
    let [seen, dropped, entries @ ..] = items.as_slice() else {
        return None;
    };
    let seen = read_leader(seen)?;
    let dropped = text(dropped)?.parse().ok()?;
    let mut history = History {
        dropped,
        entries: Vec::with_capacity(entries.len() / 2),
    };
    for pair in entries.chunks(2) {
        let [field, value] = pair else {
            return None;
        };
        history
            .entries
            .push(read_entry(&bytes(field)?, &bytes(value)?)?);
    }
    history
        .entries
        .sort_by(|a, b| (a.term, &a.token).cmp(&(b.term, &b.token)));
    Some((seen, history))
}

/// One leadership of a history: its field `<term> <token>` and its value
/// `<seq> <#identity> <identity><value>`.
fn read_entry(field: &[u8], value: &[u8]) -> Option<Entry> {
    let field = std::str::from_utf8(field).ok()?;
    let (term, token) = field.split_once(' ')?;
    let mut parts = value.splitn(3, |&b| b == b' ');
    let seq = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let len: usize = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let rest = parts.next()?;
    let (identity, value) = (rest.get(..len)?, rest.get(len..)?);
    Some(Entry {
        term: term.parse().ok()?,
        token: token.to_owned(),
        identity: String::from_utf8(identity.to_vec()).ok()?,
        value: String::from_utf8(value.to_vec()).ok()?,
        seq,
    })
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    String::from_utf8(bytes(v)?).ok()
}

/// What one node says of an election.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// No key.
    Free,
    /// A lock of another kind on the name.
    Other,
    /// A key with this token, living `pttl_ms` more; its record, if it is
    /// that token's.
    Held {
        token: String,
        pttl_ms: u64,
        record: Option<Record>,
    },
}

/// A leader's record, as one node holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) identity: String,
    pub(crate) value: String,
    pub(crate) term: u64,
    pub(crate) seq: u64,
}

/// Reads one node's reply to [`leader`]; `None` for a reply that is none
/// of its shapes.
pub(crate) fn read_leader(reply: &Value) -> Option<Found> {
    let number = |v: &Value| match v {
        Value::Int(n) => u64::try_from(*n).ok(),
        v => text(v)?.parse().ok(),
    };
    match reply {
        Value::Int(0) => Some(Found::Free),
        Value::Int(-1) => Some(Found::Other),
        Value::Array(items) => match items.as_slice() {
            [token, Value::Int(pttl), identity, value, term, seq] => {
                let record = match identity {
                    Value::Nil => None,
                    identity => Some(Record {
                        identity: text(identity)?,
                        value: text(value)?,
                        term: number(term)?,
                        seq: number(seq)?,
                    }),
                };
                Some(Found::Held {
                    token: text(token)?,
                    // -1 (no TTL) or -2 (gone meanwhile): no life to count.
                    pttl_ms: u64::try_from(*pttl).unwrap_or(0),
                    record,
                })
            }
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_what_a_node_says_of_an_election() {
        assert_eq!(read_leader(&Value::Int(0)), Some(Found::Free));
        assert_eq!(read_leader(&Value::Int(-1)), Some(Found::Other));
        let held = read_leader(&Value::Array(vec![
            bulk("t1"),
            Value::Int(900),
            bulk("a"),
            bulk("10.0.0.1"),
            bulk("17"),
            bulk("2"),
        ]));
        assert_eq!(
            held,
            Some(Found::Held {
                token: "t1".into(),
                pttl_ms: 900,
                record: Some(Record {
                    identity: "a".into(),
                    value: "10.0.0.1".into(),
                    term: 17,
                    seq: 2,
                }),
            })
        );
        let unannounced = read_leader(&Value::Array(vec![
            bulk("t1"),
            Value::Int(-1),
            Value::Nil,
            Value::Nil,
            Value::Nil,
            Value::Nil,
        ]));
        assert_eq!(
            unannounced,
            Some(Found::Held {
                token: "t1".into(),
                pttl_ms: 0,
                record: None,
            })
        );
        for bad in [
            Value::Int(3),
            Value::Array(vec![bulk("t1"), Value::Int(5)]),
            Value::Array(vec![
                bulk("t1"),
                Value::Int(5),
                bulk("a"),
                bulk("v"),
                bulk("not a term"),
                bulk("0"),
            ]),
        ] {
            assert_eq!(read_leader(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_what_a_node_says_to_an_observer() {
        let (seen, history) = read_observe(&Value::Array(vec![
            Value::Int(0),
            bulk("12"),
            bulk("40 t40"),
            bulk("3 5 a b cv 1"),
            bulk("31 t31"),
            bulk("0 1 xy"),
        ]))
        .unwrap();
        assert_eq!(seen, Found::Free);
        assert_eq!(history.dropped, 12);
        let entry = |term, token: &str, identity: &str, value: &str, seq| Entry {
            term,
            token: token.into(),
            identity: identity.into(),
            value: value.into(),
            seq,
        };
        assert_eq!(
            history.entries,
            [
                entry(31, "t31", "x", "y", 0),
                entry(40, "t40", "a b c", "v 1", 3),
            ],
            "in term order, identities and values whole"
        );
        for bad in [
            Value::Int(0),
            Value::Array(vec![Value::Int(0)]),
            Value::Array(vec![Value::Int(0), bulk("x")]),
            Value::Array(vec![Value::Int(0), bulk("0"), bulk("40 t40")]),
            Value::Array(vec![Value::Int(0), bulk("0"), bulk("t40"), bulk("0 0 ")]),
            Value::Array(vec![Value::Int(0), bulk("0"), bulk("40 t"), bulk("0 9 ab")]),
        ] {
            assert_eq!(read_observe(&bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_history_keeps_as_many_leaderships_as_the_observer_is_told() {
        let record = include_str!("record.lua");
        assert!(
            record.contains(&format!("local HISTORY_KEEP = {HISTORY_KEEP}\n")),
            "record.lua and HISTORY_KEEP disagree"
        );
    }

    #[test]
    fn a_proclamation_is_numbered_after_every_earlier_one() {
        let c = Campaigner::new("k", false, "a", "v0");
        assert_eq!(c.published().seq, 0);
        c.proclaim("v1");
        c.proclaim("v2");
        let p = c.published();
        assert_eq!((&*p.value, p.seq), ("v2", 2));
    }
}
