//! Who leads an election, as a majority of its nodes agrees: the
//! [`Leader`] type, and the judgement shared by
//! [`Redlock::leader`] and the [`Observer`](super::Observer) — each node's
//! answer read, a lately restarted node's "free" discounted, then a leader
//! only where a majority shows one token with its record.

use std::time::Duration;

use crate::client::Redlock;
use crate::error::{Error, NodeFailure, Report};
use crate::kinds::election::{self, Found};

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
    /// less: its validity). Zero for a leadership an [`Observer`](super::Observer) read
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
    seen: Vec<Result<Found, NodeFailure>>,
) -> (Result<Option<Leader>, Error>, Vec<bool>) {
    let engine = redlock.engine();
    // A node that restarted lately may have forgotten the leader's key: its
    // "free" says nothing while a key that lives as long as the longest
    // one seen (or our TTLs) may have been granted before its restart.
    let life = seen
        .iter()
        .filter_map(|s| match s {
            Ok(Found::Held { pttl_ms, .. }) => Some(Duration::from_millis(*pttl_ms)),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    let mut restarted = Vec::with_capacity(seen.len());
    let seen: Vec<Result<Found, NodeFailure>> = seen
        .into_iter()
        .zip(&engine.nodes)
        .map(|(seen, node)| {
            let quarantined = node.quarantined(life);
            restarted.push(quarantined.is_some());
            match (seen, quarantined) {
                (Ok(Found::Free), Some(restarted)) => Err(restarted),
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
    seen: &[Result<Found, NodeFailure>],
    names: &[String],
    quorum: usize,
) -> Result<Option<Leader>, Error> {
    let free = seen.iter().filter(|s| matches!(s, Ok(Found::Free))).count();
    if free >= quorum {
        return Ok(None);
    }
    // The token most nodes hold with its record.
    let mut best: Option<(&str, Vec<(u64, &election::Record)>)> = None;
    for s in seen {
        let Ok(Found::Held {
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
                Ok(Found::Held {
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
                Ok(Found::Free) => NodeFailure::Missing,
                Ok(Found::Other | Found::Held { .. }) => NodeFailure::Contended,
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

    fn held(token: &str, pttl_ms: u64, term: u64, seq: u64) -> Result<Found, NodeFailure> {
        Ok(Found::Held {
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
            Ok(Found::Free),
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
            Ok(Found::Held {
                token: "a".into(),
                pttl_ms: 900,
                record: None,
            }),
            Ok(Found::Free),
            Ok(Found::Free),
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
            Ok(Found::Free),
            Ok(Found::Free),
            Ok(Found::Free),
            held("a", 900, 7, 0),
            Ok(Found::Other),
        ];
        assert_eq!(decide("e", &seen, &names(5), 3).unwrap(), None);
        let seen = [
            Ok(Found::Free),
            Ok(Found::Free),
            Ok(Found::Other),
            Err(NodeFailure::Timeout),
            Err(NodeFailure::Timeout),
        ];
        let Err(Error::NoQuorum { report, .. }) = decide("e", &seen, &names(5), 3) else {
            panic!("two free nodes of five decide nothing");
        };
        assert_eq!(report.failures().len(), 5);
    }
}
