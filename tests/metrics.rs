//! The metrics (feature `metrics`), read back through a recorder: attempts,
//! acquisitions by kind, calls that gave up and why, extension failures,
//! lost locks, and per-node request latency labelled by node.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What the recorder has seen so far. Its snapshots drain what they
/// report, so they are added up here.
struct Seen {
    snapshotter: Snapshotter,
    /// (name, sorted labels) → counter total.
    counters: HashMap<(String, Vec<(String, String)>), u64>,
    /// (name, sorted labels) → histogram samples.
    histograms: HashMap<(String, Vec<(String, String)>), usize>,
}

impl Seen {
    fn update(&mut self) {
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let mut labels: Vec<(String, String)> = key
                .key()
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            labels.sort();
            let id = (key.key().name().to_owned(), labels);
            match value {
                DebugValue::Counter(n) => *self.counters.entry(id).or_default() += n,
                DebugValue::Histogram(samples) => {
                    *self.histograms.entry(id).or_default() += samples.len()
                }
                DebugValue::Gauge(_) => {}
            }
        }
    }

    /// `name`'s counter with exactly these labels, 0 if never incremented.
    fn counter(&mut self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.update();
        let mut labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        labels.sort();
        self.counters
            .get(&(name.to_owned(), labels))
            .copied()
            .unwrap_or(0)
    }

    /// The values of label `label` of `name`'s histograms that have samples.
    fn histogram_labels(&mut self, name: &str, label: &str) -> Vec<String> {
        self.update();
        self.histograms
            .iter()
            .filter(|((n, _), samples)| n == name && **samples > 0)
            .flat_map(|((_, labels), _)| labels.iter().filter(|(k, _)| k == label))
            .map(|(_, v)| v.clone())
            .collect()
    }
}

#[tokio::test]
async fn every_outcome_is_counted_and_requests_are_timed_per_node() {
    let recorder = DebuggingRecorder::new();
    let mut seen = Seen {
        snapshotter: recorder.snapshotter(),
        counters: HashMap::new(),
        histograms: HashMap::new(),
    };
    metrics::set_global_recorder(recorder).unwrap();

    let c = servers(3);
    let redlock = short_ttl(&c);
    let mutex = [("kind", "mutex")];
    let plain = redlock.lock("r", Duration::from_secs(10)).await.unwrap();
    let set = redlock
        .lock_all(["a", "b"], Duration::from_secs(10))
        .await
        .unwrap();
    let fenced = redlock
        .lock("f", Duration::from_secs(10))
        .fenced()
        .await
        .unwrap();
    let reentrant = redlock
        .lock("h", Duration::from_secs(10))
        .reentrant("o")
        .await
        .unwrap();
    for kind in ["mutex", "set", "fenced", "reentrant"] {
        assert_eq!(
            seen.counter("redquorum_acquired_total", &[("kind", kind)]),
            1,
            "{kind}"
        );
    }
    // A call that gives up on its retries: held by `plain`.
    redlock
        .lock("r", Duration::from_secs(10))
        .retries(2)
        .await
        .unwrap_err();
    assert_eq!(
        seen.counter(
            "redquorum_gave_up_total",
            &[("kind", "mutex"), ("cause", "retries")]
        ),
        1
    );
    assert!(seen.counter("redquorum_attempts_total", &mutex) >= 4);
    // Keys deleted behind a watched lock's back: extensions fail, it is lost.
    let mut watched = redlock.lock("w", Duration::from_millis(600)).await.unwrap();
    let held = watched.keep_alive();
    for i in 0..3 {
        run(&c, i, &["DEL", &key("w")]);
    }
    tokio::time::timeout(Duration::from_secs(5), held.lost())
        .await
        .expect("never lost");
    assert_eq!(seen.counter("redquorum_lost_total", &mutex), 1);
    // Without a watchdog: the validity runs out before the release.
    let late = redlock.lock("l", Duration::from_millis(300)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    late.release().await.unwrap_err();
    assert_eq!(seen.counter("redquorum_lost_total", &mutex), 2);
    assert!(seen.counter("redquorum_extend_failures_total", &mutex) >= 1);
    // Requests to each node, by outcome, in a histogram labelled by node.
    let timed = seen.histogram_labels("redquorum_node_request_seconds", "node");
    for i in 0..3 {
        let node = format!("127.0.0.1:{}", c.port(i));
        assert!(timed.contains(&node), "{node} not in {timed:?}");
    }
    for lock in [plain, set, fenced, reentrant] {
        lock.release().await.unwrap();
    }
}
