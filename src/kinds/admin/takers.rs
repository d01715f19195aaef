//! Who took a resource's lock, as [`Status`] tells it: each holder's
//! token says its taker and when (see [`who`](crate::who)), and the
//! descriptions the takers recorded on the nodes were read with the status.

use crate::who::{Id, Who, parse};

use super::Status;

impl Status {
    /// Who took the lock whose token is `token` (one a node holds for this
    /// resource, as [`Holding`](crate::Holding) shows it), with the
    /// description its taker recorded if a node had it; `None` for a
    /// token that does not say (another Redlock client's).
    pub fn who(&self, token: &str) -> Option<Who> {
        let mut who = Who::from_token(token)?;
        who.process = self.processes.get(&who.raw_id()?).cloned().flatten();
        Some(who)
    }

    /// Who took the lock a majority holds ([`holder`](Self::holder)):
    /// its taker; for reentrant holds, each hold's; for readers, each
    /// reader's; for a semaphore, each permit's ([`permits`](Self::permits)).
    /// Empty if no majority holds it, or its tokens do not say.
    pub fn taken_by(&self) -> Vec<Who> {
        use crate::Holding;
        let tokens: Vec<&str> = match self.holder() {
            Some(Holding::Token(token)) => vec![token],
            Some(Holding::Reentrant { .. } | Holding::Readers { .. }) => {
                let mut tokens: Vec<&str> = Vec::new();
                for holding in self
                    .nodes
                    .iter()
                    .filter_map(|(_, s)| s.as_ref().ok()?.lock.as_ref())
                {
                    if let Holding::Reentrant { holds: t, .. } | Holding::Readers { readers: t } =
                        holding
                    {
                        for token in t {
                            if !tokens.contains(&token.as_str()) {
                                tokens.push(token);
                            }
                        }
                    }
                }
                tokens
            }
            Some(Holding::Permits { .. }) => self.permits().into_iter().map(|(_, t)| t).collect(),
            _ => Vec::new(),
        };
        tokens.into_iter().filter_map(|t| self.who(t)).collect()
    }

    /// The takers of every token a node holds, for [`Redlock::status`](crate::Redlock::status)
    /// to describe.
    pub(crate) fn taker_ids(&self) -> Vec<Id> {
        use crate::Holding;
        let mut ids = Vec::new();
        let mut add = |token: &str| {
            if let Some((id, _)) = parse(token)
                && !ids.contains(&id)
            {
                ids.push(id);
            }
        };
        for holding in self
            .nodes
            .iter()
            .filter_map(|(_, s)| s.as_ref().ok()?.lock.as_ref())
        {
            match holding {
                Holding::Token(t) => add(t),
                Holding::Reentrant { holds: t, .. } | Holding::Readers { readers: t } => {
                    t.iter().for_each(|t| add(t))
                }
                Holding::Permits { holders, .. } => holders.iter().for_each(|(_, t)| add(t)),
                _ => {}
            }
        }
        ids
    }
}
