//! Tests of the node layer (`net`) against a real local Redis Cluster
//! (`local_redis_cluster`). Here, beside both, so that `net` never imports
//! the launchers, which read `INFO` with what `net` uses too.

use std::time::Duration;

use crate::local_redis_cluster::LocalRedisCluster;
use crate::net::topology::cluster::ClusterEndpoint;
use crate::net::{Endpoint, Limits, Node};

/// A connection error on a cluster connection retires it (removals keep
/// being written on it), once however many requests fail on it; a plain
/// connection is dropped as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_connection_that_failed_is_retired_not_forgotten() {
    let c = tokio::task::spawn_blocking(LocalRedisCluster::start)
        .await
        .unwrap()
        .unwrap();
    let seeds: Vec<String> = c
        .ports()
        .iter()
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let limits = Limits {
        request: Duration::from_secs(1),
        connect: Duration::from_secs(2),
        in_flight: 8,
    };
    let endpoint = ClusterEndpoint::new(&seeds, limits.connect).unwrap();
    let node = Node::new(Endpoint::Cluster(endpoint), limits, None, None);
    let generation = node.connect_now().await.unwrap();
    // Two requests fail on it: retired once.
    assert!(node.fail_connection(generation, 2));
    assert_eq!(node.retired_generations(), vec![generation]);
    assert_ne!(node.live_generation(), generation);
    // Kept for at least the connect timeout, whatever its drain says.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.retired_generations(), vec![generation]);
    drop(c);
}
