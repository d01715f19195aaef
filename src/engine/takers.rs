//! Who took a lock, for the engine's callers: the descriptions the takers
//! recorded on the nodes (see [`who`](crate::who)), read when needed and
//! remembered, and the holder a failed acquisition names.

use std::collections::HashMap;

use crate::who::{Id, Process, Who, read};

use super::Engine;

impl Engine {
    /// The descriptions of `ids`: from what was read before, or read now
    /// (one `GET` per id not known, on every node at once, each bounded by
    /// the node timeout; the first node that has it tells).
    pub(crate) async fn processes(&self, ids: &[Id]) -> HashMap<Id, Option<Process>> {
        let mut found = HashMap::new();
        let mut unknown = Vec::new();
        for id in ids {
            match self.who.known(id) {
                Some(process) => {
                    found.insert(*id, process);
                }
                None if !unknown.contains(id) => unknown.push(*id),
                None => {}
            }
        }
        // `MGET` of one key: `GET`, counted apart from the lock scripts'
        // reads in `INFO commandstats`.
        let reads = unknown.iter().map(|id| {
            let mut get = redis::cmd("MGET");
            get.arg(&*self.who.key(id));
            self.gather(crate::proto::Command {
                call: crate::proto::Call::Command(get),
                effect: crate::proto::Effect::Count,
            })
        });
        let replies = futures::future::join_all(reads).await;
        for (id, replies) in unknown.into_iter().zip(replies) {
            // A node that did not answer may have it: not remembered then.
            let answered = replies.iter().all(Result::is_ok);
            let process = replies.into_iter().find_map(|reply| match reply {
                Ok(redis::Value::Array(values)) => match values.first() {
                    Some(redis::Value::BulkString(value)) => read(value),
                    _ => None,
                },
                _ => None,
            });
            if process.is_some() || answered {
                self.who.learn(id, process.clone());
            }
            found.insert(id, process);
        }
        found
    }

    /// The holder a failed acquisition of `key` met, described: `holder`
    /// if its votes named it (a script's refusal does), else, if nodes
    /// refused it as held (`SET NX` names nobody), as the nodes hold `key`
    /// now. Only on failure, and at most one node timeout in all (the key
    /// read and the taker's record, whichever of them are needed; the
    /// record is remembered): a node that does not answer in time costs a
    /// failed call that much, and the holder is then named as far as was
    /// read: as its votes named it, or not at all.
    pub(crate) async fn name_holder(
        &self,
        holder: Option<Box<Who>>,
        key: &str,
        report: &crate::Report,
    ) -> Option<Box<Who>> {
        let limit = self.options.node_timeout;
        let named = holder.clone();
        tokio::time::timeout(limit, self.name_holder_unbounded(holder, key, report))
            .await
            .unwrap_or(named)
    }

    async fn name_holder_unbounded(
        &self,
        holder: Option<Box<Who>>,
        key: &str,
        report: &crate::Report,
    ) -> Option<Box<Who>> {
        let mut holder = match holder {
            Some(holder) => holder,
            None if report.held_by_others() > 0 => {
                use crate::kinds::{admin, fenced};
                let keys: crate::proto::Keys =
                    std::sync::Arc::new([key.into(), fenced::counter_key(key)]);
                let answers = self.gather(admin::inspect(keys)).await;
                let status = crate::Status {
                    resource: String::new(),
                    quorum: self.quorum(),
                    nodes: answers
                        .into_iter()
                        .map(|a| (String::new(), a.and_then(admin::read_inspect)))
                        .collect(),
                    processes: HashMap::new(),
                };
                Box::new(status.taken_by().into_iter().next()?)
            }
            None => return None,
        };
        if let Some(id) = holder.raw_id() {
            holder.process = self.processes(&[id]).await.remove(&id).flatten();
        }
        Some(holder)
    }
}
