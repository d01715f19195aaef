//! What an operator does to a lock of any kind: look at it on every node
//! ([`Redlock::status`](crate::Redlock::status)), and clear one known to be
//! stale by its token ([`Redlock::release_token`](crate::Redlock::release_token)).
//!
//! | operation | on each node | round trips |
//! |---|---|---|
//! | status | [`inspect.lua`](INSPECT): the key's layout, holder, PTTL, holds, and the fencing counter; changes nothing | 1 |
//! | release by token | [`clear.lua`](CLEAR): lets the hold with that token go, whatever its kind, announced | 1 |
//!
//! Both read keys through the key space's owner ([`keyspace`](super::keyspace)),
//! so they know every kind's layout without a line of their own.
//!
//! Neither takes part in the protocol: a status is a snapshot of each node
//! at a slightly different moment (a lock may move between two nodes'
//! answers), and clearing a lock whose holder is alive takes it away from
//! that holder, who finds out at its next extension (or when its validity
//! runs out). Clearing by token can never touch a newer holder's key:
//! tokens are drawn fresh for every attempt, so the token of a stale lock
//! names that lock and nothing else.

mod takers;

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use redis::Value;

use crate::error::NodeFailure;
use crate::kinds::keyspace::script;
use crate::kinds::{mutex, reentrant, rwlock, script_outcome, semaphore, unexpected};
use crate::proto::{Answer, Call, Command, Effect, Keys, Script};

/// Reads what one node holds for a key, changing nothing.
pub(crate) static INSPECT: LazyLock<Script> =
    LazyLock::new(|| Script::new(script!(keys "inspect.lua")));

/// Compare-and-delete by a token, of any kind's key.
pub(crate) static CLEAR: LazyLock<Script> = LazyLock::new(|| Script::new(script!("clear.lua")));

/// What the nodes hold for one resource: [`Redlock::status`](crate::Redlock::status).
#[derive(Debug, Clone)]
pub struct Status {
    pub(crate) resource: String,
    pub(crate) quorum: usize,
    pub(crate) nodes: Vec<(String, Result<NodeState, NodeFailure>)>,
    /// The descriptions of the takers seen (see [`who`](crate::who)).
    pub(crate) processes: std::collections::HashMap<crate::who::Id, Option<crate::who::Process>>,
}

impl Status {
    /// The resource looked at.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// How many nodes make a majority.
    pub fn quorum(&self) -> usize {
        self.quorum
    }

    /// Each node (`host:port`) with what it holds, or why it did not
    /// answer, in the order the nodes were given.
    pub fn nodes(&self) -> &[(String, Result<NodeState, NodeFailure>)] {
        &self.nodes
    }

    /// The lock a majority of nodes agree on, if any: a lock is held only
    /// where one holder (one token; for reentrant holds, one owner) has its
    /// key on at least [`quorum`](Self::quorum) nodes.
    pub fn holder(&self) -> Option<&Holding> {
        self.held().find(|h| self.held_by(h).count() >= self.quorum)
    }

    /// The nodes where `holder` holds the lock: its token, or (reentrant
    /// holds) its owner.
    pub fn held_by<'a>(&'a self, holder: &'a Holding) -> impl Iterator<Item = &'a NodeState> {
        self.nodes
            .iter()
            .filter_map(|(_, s)| s.as_ref().ok())
            .filter(|s| s.lock.as_ref().is_some_and(|h| h.same_holder(holder)))
    }

    /// Whether a majority of nodes hold no key for the resource: nobody can
    /// hold it, and the next lock can be taken at once.
    pub fn is_free(&self) -> bool {
        let free = self
            .nodes
            .iter()
            .filter(|(_, s)| matches!(s, Ok(NodeState { lock: None, .. })))
            .count();
        free >= self.quorum
    }

    /// A semaphore's holders: each token that holds one slot on at least
    /// [`quorum`](Self::quorum) nodes, with that slot, in slot order. Empty
    /// for any other kind of lock.
    pub fn permits(&self) -> Vec<(u32, &str)> {
        let mut seen: Vec<(u32, &str, usize)> = Vec::new();
        for holding in self.held() {
            if let Holding::Permits { holders, .. } = holding {
                for (slot, token) in holders {
                    match seen.iter_mut().find(|(s, t, _)| s == slot && t == token) {
                        Some((_, _, count)) => *count += 1,
                        None => seen.push((*slot, token, 1)),
                    }
                }
            }
        }
        let mut held: Vec<(u32, &str)> = seen
            .into_iter()
            .filter(|(_, _, count)| *count >= self.quorum)
            .map(|(slot, token, _)| (slot, token))
            .collect();
        held.sort();
        held
    }

    fn held(&self) -> impl Iterator<Item = &Holding> {
        self.nodes
            .iter()
            .filter_map(|(_, s)| s.as_ref().ok()?.lock.as_ref())
    }
}

/// What one node holds for a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeState {
    /// The lock held there, `None` if the key is absent.
    pub lock: Option<Holding>,
    /// How long the key has left on that node; `None` if it is absent or
    /// has no expiry (which no lock of ours leaves).
    pub ttl: Option<Duration>,
    /// The resource's fencing counter on that node (the last fencing token
    /// it saw drawn), `None` if it has none: fenced locks were never taken
    /// there, or the node lost its counters.
    pub fence: Option<u64>,
}

/// A lock as one node holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Holding {
    /// A plain or fenced lock, or a set taken with
    /// [`lock_all`](crate::Redlock::lock_all): the holder's token, as
    /// [`Lock::token`](crate::Lock::token) says it.
    Token(String),
    /// Reentrant holds of one owner: the owner id and each hold's token.
    Reentrant {
        /// The owner id.
        owner: String,
        /// The token of each hold on this node.
        holds: Vec<String>,
    },
    /// The permits of a semaphore held on this node: its number of
    /// permits, and each held slot's number and holder's token.
    Permits {
        /// The semaphore's number of permits.
        permits: u32,
        /// Each held slot: its number and its holder's token.
        holders: Vec<(u32, String)>,
    },
    /// The readers of a read-write lock on this node: each share's token.
    Readers {
        /// Each reader's token.
        readers: Vec<String>,
    },
    /// A key that is not a lock (another type, under the lock's name); the
    /// type Redis names. It keeps every lock out, like a holder would.
    Other(String),
}

impl Holding {
    /// Whether two nodes' holdings are the same holder's: the same token,
    /// the same reentrant owner (whatever holds each node has seen), a
    /// semaphore (whichever permits each node has seen: see
    /// [`Status::permits`] for its holders), readers (whichever each node
    /// has seen), or the same foreign type.
    pub fn same_holder(&self, other: &Holding) -> bool {
        match (self, other) {
            (Holding::Token(a), Holding::Token(b)) => a == b,
            (Holding::Reentrant { owner: a, .. }, Holding::Reentrant { owner: b, .. }) => a == b,
            (Holding::Permits { .. }, Holding::Permits { .. }) => true,
            (Holding::Readers { .. }, Holding::Readers { .. }) => true,
            (Holding::Other(a), Holding::Other(b)) => a == b,
            _ => false,
        }
    }
}

/// What `redquorum status` says of a holder: `token <token>`, `reentrant
/// owner "job-1" (2 holds: …)`, `semaphore of 3 permits (1 held: 0: …)`,
/// `2 readers (…)`, `a list key that is not a lock`; each kind says its
/// own (its folder's `show`). The alternate form (`{:#}`) is short, for
/// one line: the token's first 8 characters, the owner, how many permits
/// or readers on this node.
impl fmt::Display for Holding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Holding::Token(token) => mutex::show(f, token),
            Holding::Reentrant { owner, holds } => reentrant::show(f, owner, holds),
            Holding::Permits { permits, holders } => semaphore::show(f, *permits, holders),
            Holding::Readers { readers } => rwlock::show(f, readers),
            Holding::Other(kind) if f.alternate() => write!(f, "a {kind} key (not a lock)"),
            Holding::Other(kind) => write!(f, "a {kind} key that is not a lock"),
        }
    }
}

/// The command that reads `keys[0]` and its counter `keys[1]` on a node.
pub(crate) fn inspect(keys: Keys) -> Command {
    Command {
        call: Call::Script {
            script: &INSPECT,
            keys,
            args: Vec::new(),
        },
        effect: Effect::Count,
    }
}

/// The command that clears `key` if it holds `token`.
pub(crate) fn clear(key: Keys, token: &str) -> Command {
    Command {
        call: Call::Script {
            script: &CLEAR,
            keys: key,
            args: vec![token.as_bytes().to_vec()],
        },
        effect: Effect::Remove,
    }
}

/// Reads a reply to [`inspect`].
pub(crate) fn read_inspect(reply: Value) -> Result<NodeState, NodeFailure> {
    let bad = || unexpected(&reply);
    let Value::Array(items) = &reply else {
        return Err(bad());
    };
    let [kind, holder, Value::Int(pttl), counter, holds @ ..] = items.as_slice() else {
        return Err(bad());
    };
    let text = |v: &Value| match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    };
    let kind = text(kind).ok_or_else(bad)?;
    let lock = match kind.as_str() {
        "none" => None,
        "exclusive" => Some(Holding::Token(text(holder).ok_or_else(bad)?)),
        "reentrant" => Some(Holding::Reentrant {
            owner: text(holder).unwrap_or_default(),
            holds: holds.iter().filter_map(text).collect(),
        }),
        "readers" => Some(Holding::Readers {
            readers: holds.iter().filter_map(text).collect(),
        }),
        "semaphore" => Some(Holding::Permits {
            permits: text(holder).and_then(|k| k.parse().ok()).ok_or_else(bad)?,
            holders: holds
                .iter()
                .map(|h| {
                    let h = text(h)?;
                    let (slot, token) = h.split_once(':')?;
                    Some((slot.parse().ok()?, token.to_owned()))
                })
                .collect::<Option<_>>()
                .ok_or_else(bad)?,
        }),
        _ => Some(Holding::Other(kind)),
    };
    let fence = match counter {
        Value::Nil => None,
        other => Some(text(other).and_then(|c| c.parse().ok()).ok_or_else(bad)?),
    };
    Ok(NodeState {
        ttl: (lock.is_some() && *pttl >= 0).then(|| Duration::from_millis(*pttl as u64)),
        lock,
        fence,
    })
}

/// Reads a reply to [`clear`]: yes where it cleared, `Missing` where there
/// was no key, `Held` where the key holds other tokens.
pub(crate) fn read_clear(reply: Value) -> Answer {
    script_outcome(&reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn state(lock: Option<Holding>) -> Result<NodeState, NodeFailure> {
        Ok(NodeState {
            lock,
            ttl: None,
            fence: None,
        })
    }

    fn status(nodes: Vec<Result<NodeState, NodeFailure>>) -> Status {
        Status {
            resource: "r".into(),
            quorum: nodes.len() / 2 + 1,
            nodes: nodes
                .into_iter()
                .enumerate()
                .map(|(i, s)| (format!("n{i}"), s))
                .collect(),
            processes: Default::default(),
        }
    }

    #[test]
    fn reads_each_kind_of_key() {
        let read = |items: Vec<Value>| read_inspect(Value::Array(items));
        let free = read(vec![bulk("none"), Value::Nil, Value::Int(-2), Value::Nil]).unwrap();
        assert_eq!(free, state(None).unwrap());
        let plain = read(vec![
            bulk("exclusive"),
            bulk("t1"),
            Value::Int(900),
            bulk("42"),
            bulk("t1"),
        ])
        .unwrap();
        assert_eq!(plain.lock, Some(Holding::Token("t1".into())));
        assert_eq!(plain.ttl, Some(Duration::from_millis(900)));
        assert_eq!(plain.fence, Some(42));
        let holds = read(vec![
            bulk("reentrant"),
            bulk("job-1"),
            Value::Int(-1),
            Value::Nil,
            bulk("h1"),
            bulk("h2"),
        ])
        .unwrap();
        assert_eq!(
            holds.lock,
            Some(Holding::Reentrant {
                owner: "job-1".into(),
                holds: vec!["h1".into(), "h2".into()]
            })
        );
        assert_eq!(holds.ttl, None, "no expiry");
        let other = read(vec![bulk("list"), Value::Nil, Value::Int(-1), Value::Nil]).unwrap();
        assert_eq!(other.lock, Some(Holding::Other("list".into())));
        // A hash that no layout claims is no reentrant lock.
        let hash = read(vec![bulk("hash"), Value::Nil, Value::Int(-1), Value::Nil]).unwrap();
        assert_eq!(hash.lock, Some(Holding::Other("hash".into())));
        // Not our script's reply, or a counter that is not a number.
        assert!(read_inspect(Value::Int(1)).is_err());
        assert!(read(vec![bulk("none"), Value::Nil, Value::Int(-2), bulk("x")]).is_err());
    }

    #[test]
    fn each_kind_shows_its_holding_in_full_and_in_short() {
        let token = "0123456789abcdef".to_owned();
        let shown = |h: Holding| (format!("{h}"), format!("{h:#}"));
        assert_eq!(
            shown(Holding::Token(token.clone())),
            ("token 0123456789abcdef".into(), "token 01234567…".into())
        );
        assert_eq!(
            shown(Holding::Reentrant {
                owner: "job-1".into(),
                holds: vec!["h1".into(), "h2".into()]
            }),
            (
                r#"reentrant owner "job-1" (2 holds: h1, h2)"#.into(),
                r#"owner "job-1""#.into()
            )
        );
        assert_eq!(
            shown(Holding::Permits {
                permits: 3,
                holders: vec![(0, "a".into()), (2, "b".into())]
            }),
            (
                "semaphore of 3 permits (2 held: 0: a, 2: b)".into(),
                "2 of 3 permits".into()
            )
        );
        assert_eq!(
            shown(Holding::Readers {
                readers: vec!["a".into(), "b".into()]
            }),
            ("2 readers (a, b)".into(), "2 readers".into())
        );
        assert_eq!(
            shown(Holding::Other("list".into())),
            (
                "a list key that is not a lock".into(),
                "a list key (not a lock)".into()
            )
        );
    }

    #[test]
    fn a_holder_needs_a_majority_and_free_needs_one_too() {
        let token = |t: &str| state(Some(Holding::Token(t.into())));
        let held = status(vec![
            token("a"),
            token("a"),
            Err(NodeFailure::Timeout),
            token("a"),
            state(None),
        ]);
        assert_eq!(held.holder(), Some(&Holding::Token("a".into())));
        assert_eq!(held.held_by(&Holding::Token("a".into())).count(), 3);
        assert!(!held.is_free());
        // Split: two tokens and a free node, none on a majority.
        let split = status(vec![
            token("a"),
            token("a"),
            token("b"),
            token("b"),
            state(None),
        ]);
        assert_eq!(split.holder(), None);
        assert!(!split.is_free());
        // A reentrant owner agrees with itself whatever holds each node saw.
        let owner = |holds: &[&str]| {
            state(Some(Holding::Reentrant {
                owner: "o".into(),
                holds: holds.iter().map(|h| (*h).to_owned()).collect(),
            }))
        };
        let reentrant = status(vec![owner(&["x"]), owner(&["x", "y"]), owner(&["y"])]);
        assert!(matches!(
            reentrant.holder(),
            Some(Holding::Reentrant { .. })
        ));
        let free = status(vec![state(None), state(None), token("a")]);
        assert!(free.is_free());
        assert_eq!(free.holder(), None);
    }
}
