//! `failover`: a leader's process stalls (its runtime's thread blocks: no
//! renewal runs) while a candidate waits; the time from the stall to the
//! candidate leading, each failover one sample.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use redquorum::Redlock;

use crate::measure::Sample;

/// Failover: a leader whose process stalls (its own runtime, on a thread
/// that then blocks: no renewal runs) while a candidate waits; the time
/// from the stall to the candidate leading, `times` times, with a TTL of
/// `ttl`. Each sample is one failover.
pub async fn failover(urls: &[String], ttl: Duration, times: usize) -> Sample {
    let mut s = Sample::default();
    let started = Instant::now();
    let candidate = Redlock::new(urls).unwrap();
    for i in 0..times {
        let name = format!("bench:failover:{i}");
        let (elected, stalled) = std::sync::mpsc::channel();
        let (urls, leader_name) = (urls.to_vec(), name.clone());
        let leader = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let redlock = Redlock::new(urls).unwrap();
            let leadership = rt
                .block_on(redlock.campaign(&leader_name, "stalls", ttl).into_future())
                .unwrap();
            elected.send(()).unwrap();
            // Until well past the failover, then a clean exit.
            std::thread::sleep(ttl * 2);
            rt.block_on(async {
                drop(leadership);
                redlock.drain(Duration::from_secs(2)).await;
            });
        });
        stalled.recv().unwrap();
        let stall = Instant::now();
        let took = match candidate.campaign(&name, "waits", ttl).wait(ttl * 5).await {
            Ok(leadership) => {
                let took = stall.elapsed();
                leadership.resign().await.unwrap();
                Some(took)
            }
            Err(_) => None,
        };
        match took {
            Some(took) => s.latencies.push(took),
            None => s.errors += 1,
        }
        s.ops += 1;
        tokio::task::spawn_blocking(move || leader.join().unwrap())
            .await
            .unwrap();
    }
    s.busy = started.elapsed();
    s.extra.insert("ttl_ms", ttl.as_millis() as f64);
    s
}
