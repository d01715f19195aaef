//! Metrics a service can scrape, through the [`metrics`] facade (feature
//! `metrics`): install any `metrics` recorder (a Prometheus exporter, say)
//! and these appear. Without the feature every function here is empty.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `redquorum_attempts_total` | counter | `kind` | acquisition attempts (one round of requests to every node) |
//! | `redquorum_acquired_total` | counter | `kind` | locks acquired |
//! | `redquorum_gave_up_total` | counter | `kind`, `cause` | `lock()` calls that gave up: `retries`, `deadline`, `mismatch` (a semaphore of another number of permits) or `unavailable` (an outage waiting does not mend) |
//! | `redquorum_extend_failures_total` | counter | `kind` | extensions (yours or the watchdog's) that did not get a majority |
//! | `redquorum_lost_total` | counter | `kind` | held locks lost before their release (a majority gone, or the validity ran out first) |
//! | `redquorum_node_request_seconds` | histogram | `node`, `outcome` | each request to a node, from the call to its answer: `outcome` is `ok`, `timeout`, `connection` or `error` |
//!
//! `kind` is `mutex`, `set` (`lock_all`), `reentrant`, `fenced`,
//! `semaphore`, `read` (a reader of a read-write lock; a writer is a
//! `mutex`) or `election` (a candidate's campaign); `node` is `host:port`
//! (or a socket path), `master@host:port,…` for a Sentinel-managed node,
//! `cluster(host:port,…)` for a Redis Cluster, never a password. Without
//! the feature nothing is timed.

#[cfg(feature = "metrics")]
mod on {
    use std::time::Duration;

    pub(crate) fn attempt(kind: &'static str) {
        metrics::counter!("redquorum_attempts_total", "kind" => kind).increment(1);
    }

    pub(crate) fn acquired(kind: &'static str) {
        metrics::counter!("redquorum_acquired_total", "kind" => kind).increment(1);
    }

    pub(crate) fn gave_up(kind: &'static str, cause: &'static str) {
        metrics::counter!("redquorum_gave_up_total", "kind" => kind, "cause" => cause).increment(1);
    }

    pub(crate) fn extend_failed(kind: &'static str) {
        metrics::counter!("redquorum_extend_failures_total", "kind" => kind).increment(1);
    }

    pub(crate) fn lost(kind: &'static str) {
        metrics::counter!("redquorum_lost_total", "kind" => kind).increment(1);
    }

    pub(crate) fn request(
        node: &str,
        reply: &Result<redis::Value, crate::error::NodeFailure>,
        took: Duration,
    ) {
        use crate::error::NodeFailure;
        let outcome = match reply {
            Ok(_) => "ok",
            Err(NodeFailure::Timeout) => "timeout",
            Err(NodeFailure::Connection(_) | NodeFailure::Tls(_)) => "connection",
            Err(_) => "error",
        };
        metrics::histogram!(
            "redquorum_node_request_seconds",
            "node" => node.to_owned(),
            "outcome" => outcome
        )
        .record(took.as_secs_f64());
    }
}

#[cfg(not(feature = "metrics"))]
mod on {

    pub(crate) fn attempt(_: &'static str) {}
    pub(crate) fn acquired(_: &'static str) {}
    pub(crate) fn gave_up(_: &'static str, _: &'static str) {}
    pub(crate) fn extend_failed(_: &'static str) {}
    pub(crate) fn lost(_: &'static str) {}
}

pub(crate) use on::*;

#[cfg(test)]
mod tests {
    /// The module's doc names every `kind` label the lock kinds report
    /// (`Kind::name`) and every `cause` of `gave_up`.
    #[test]
    fn the_doc_lists_every_label() {
        let doc = include_str!("metrics.rs");
        let doc: String = doc
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join(" ");
        // The kinds' names: `grep -rn 'fn name' -A3 src/kinds`.
        for label in [
            "mutex",
            "set",
            "reentrant",
            "fenced",
            "semaphore",
            "read",
            "election",
            "retries",
            "deadline",
            "mismatch",
            "unavailable",
        ] {
            assert!(
                doc.contains(&format!("`{label}`")),
                "{label} not in the doc"
            );
        }
    }
}
