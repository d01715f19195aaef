//! `scaleout1`, `scaleout16`, `scaleout64` and `scaleout_keys`: three local
//! Redis Clusters of three shards as the three nodes, against three single
//! servers, and the clusters again without the restart guard, each run
//! through [`throughput`] at 1, 16 and 64 tasks; the CPU each primary spent
//! per lock, read from the servers' own accounting before and after; then
//! the keys on each primary of the first cluster while locks are held.

use std::time::Duration;

use redquorum::Redlock;
use redquorum::local_redis_cluster::LocalRedisCluster;
use redquorum::local_servers::LocalServers;

use crate::clients::Client;
use crate::measure::{Row, Sample, row};
use crate::uncontended::throughput;
use crate::{Scale, TTL};

/// The CPU seconds (user + system) the server on `port` has used.
fn server_cpu(port: u16) -> f64 {
    redquorum::local_redis_cluster::cpu_seconds(port).unwrap_or(f64::NAN)
}

/// Three local Redis Clusters (three shards each) as the three nodes,
/// against three single servers: throughput at each task count of `names`
/// wanted, with the CPU per lock of each primary of the first cluster (and
/// of the first single server); then the keys per primary of the first
/// cluster while 3 000 locks are held.
pub async fn scaleout(
    scale: Scale,
    names: &[&'static str; 3],
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<Row> {
    let started: Vec<_> = (0..3)
        .map(|_| std::thread::spawn(LocalRedisCluster::start))
        .collect();
    let clusters: Vec<LocalRedisCluster> = started
        .into_iter()
        .map(|h| h.join().unwrap().expect("a local Redis Cluster"))
        .collect();
    let servers = LocalServers::start(3).expect("three local servers");
    let cluster =
        Client::Redquorum(Redlock::new(clusters.iter().map(LocalRedisCluster::url)).unwrap());
    // The restart guard's `INFO replication` in every grant, priced.
    let unguarded = Client::Redquorum(
        Redlock::builder()
            .nodes(clusters.iter().map(LocalRedisCluster::url))
            .restart_guard(false)
            .build()
            .unwrap(),
    );
    let single = Client::Redquorum(Redlock::new(servers.urls()).unwrap());
    for c in [&cluster, &unguarded, &single] {
        c.cycle("bench:warm").await.unwrap();
    }
    let primaries = clusters[0].primaries().unwrap();
    let mut rows = Vec::new();
    for (&name, tasks) in names.iter().zip([1, 16, 64]) {
        if !wanted(name) {
            continue;
        }
        let before: Vec<f64> = primaries.iter().map(|&p| server_cpu(p)).collect();
        let single_before = server_cpu(servers.port(0));
        let samples = throughput(&[cluster.clone(), single.clone()], tasks, scale).await;
        let spent: Vec<f64> = primaries
            .iter()
            .zip(&before)
            .map(|(&p, b)| server_cpu(p) - b)
            .collect();
        let single_spent = server_cpu(servers.port(0)) - single_before;
        // Apart, so that the shards' CPU is this client's own.
        let before: Vec<f64> = primaries.iter().map(|&p| server_cpu(p)).collect();
        let unguarded_samples = throughput(std::slice::from_ref(&unguarded), tasks, scale).await;
        let unguarded_spent: Vec<f64> = primaries
            .iter()
            .zip(&before)
            .map(|(&p, b)| server_cpu(p) - b)
            .collect();
        for ((imp, s), shards) in ["cluster3x3", "servers3", "cluster3x3_noguard"]
            .into_iter()
            .zip(samples.into_iter().chain(unguarded_samples))
            .zip([spent, vec![single_spent], unguarded_spent])
        {
            let ops = s.ops.max(1) as f64;
            let mut r = row(name, imp, s);
            // The probe watches the bench's own five nodes, not these.
            for key in [
                "server_cpu_us_per_op",
                "server_reads_per_op",
                "cpu_bound_ops_per_s",
            ] {
                r.extra.remove(key);
            }
            for (i, cpu) in shards.iter().enumerate() {
                r.extra.insert(
                    [
                        "shard0_cpu_us_per_op",
                        "shard1_cpu_us_per_op",
                        "shard2_cpu_us_per_op",
                    ][i],
                    cpu * 1e6 / ops,
                );
            }
            rows.push(r);
        }
    }
    // Keys per shard: distinct names spread over the primaries.
    let Client::Redquorum(redlock) = &cluster else {
        unreachable!()
    };
    let held = if scale.iterations > 100 { 3_000 } else { 300 };
    // Once the load's keys are gone (a release a loaded node did not
    // answer in time is sent again; a key left behind expires at its TTL).
    // Not in the smoke run, which only checks that this runs.
    if scale.iterations > 100 {
        tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    }
    let before = clusters[0].keys_per_shard().unwrap();
    let mut locks = Vec::with_capacity(held);
    for i in 0..held {
        locks.push(redlock.lock(&format!("bench:keys:{i}"), TTL).await.unwrap());
    }
    // The last SETs follow the majority's answers.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let keys = clusters[0].keys_per_shard().unwrap();
    let mut r = row("scaleout_keys", "cluster3x3", Sample::default());
    for (i, ((_, n), (_, b))) in keys.iter().zip(&before).enumerate().take(3) {
        r.extra.insert(
            ["shard0_keys", "shard1_keys", "shard2_keys"][i],
            (n - b) as f64,
        );
    }
    rows.push(r);
    for lock in locks {
        let _ = lock.release().await;
    }
    rows
}
