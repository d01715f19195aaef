//! Several workers contend for one resource on five local servers; one node
//! is killed mid-run, and the lock carries on.
//!
//! ```text
//! cargo run --example quickstart                       # starts its own five local servers
//! REDQUORUM_NODES=redis://127.0.0.1:7001,redis://127.0.0.1:7002,... cargo run --example quickstart
//! ```
//!
//! With `REDQUORUM_NODES` unset it starts five local `redis-server`
//! processes (Redis must be installed) and stops them at the end. A URL
//! with several hosts (`redis+sentinel://h1:p1,h2:p2/name`) stays one node:
//! a new URL starts only where a piece has a scheme (`…://`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redquorum::Redlock;
use redquorum::local_servers::LocalServers;
use tokio::sync::Mutex;

const WORKERS: usize = 4;
const ROUNDS: usize = 5;
const HOLD: Duration = Duration::from_millis(25);
/// Work done between two turns, without the lock.
const ELSEWHERE: Duration = Duration::from_millis(40);
const TTL: Duration = Duration::from_secs(5);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (urls, mut local) = match std::env::var("REDQUORUM_NODES") {
        Ok(nodes) => (split_urls(&nodes), None),
        Err(_) => {
            let servers = LocalServers::start(5)?;
            println!("started 5 local redis-server processes:");
            (servers.urls(), Some(servers))
        }
    };
    for url in &urls {
        println!("  {url}");
    }
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(Duration::from_millis(50))
        .retry_count(500)
        .retry_delay(Duration::from_millis(10))
        .retry_jitter(Duration::from_millis(5))
        .wait_timeout(Duration::from_secs(30))
        .build()?;
    println!(
        "{WORKERS} workers, {ROUNDS} rounds each, on resource \"quickstart\" (quorum {} of {})\n",
        redlock.quorum(),
        urls.len()
    );

    let started = Instant::now();
    let acquired = Arc::new(AtomicUsize::new(0));
    // Only ever touched by the holder of the distributed lock; the local
    // mutex is just how Rust shares it, and try_lock proves no one else is in.
    let log = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (redlock, acquired, log) = (redlock.clone(), acquired.clone(), log.clone());
            tokio::spawn(async move {
                let mut lines = Vec::new();
                for round in 1..=ROUNDS {
                    let asked = Instant::now();
                    match redlock.lock("quickstart", TTL).await {
                        Ok(lock) => {
                            let waited = asked.elapsed();
                            let valid = lock.remaining();
                            {
                                let mut log = log.try_lock().expect("two holders at once");
                                log.push(w);
                                tokio::time::sleep(HOLD).await;
                            }
                            acquired.fetch_add(1, Ordering::SeqCst);
                            let released = lock.release().await;
                            lines.push(format!(
                                "[{:>6.1} ms] worker {w} round {round}: held after waiting {:>5.1} ms \
                                 ({:.2} s valid), released: {}",
                                started.elapsed().as_secs_f64() * 1e3,
                                waited.as_secs_f64() * 1e3,
                                valid.as_secs_f64(),
                                match released {
                                    Ok(()) => "ok".to_owned(),
                                    Err(e) => e.to_string(),
                                }
                            ));
                        }
                        Err(e) => lines.push(format!("worker {w} round {round}: {e}")),
                    }
                    tokio::time::sleep(ELSEWHERE).await;
                }
                lines
            })
        })
        .collect();

    // Kill one node once a few locks have been taken.
    let mut lines = Vec::new();
    if let Some(servers) = local.as_mut() {
        while acquired.load(Ordering::SeqCst) < WORKERS * ROUNDS / 3 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        servers.kill(0);
        lines.push(format!(
            "[{:>6.1} ms] ---- killed node {} (SIGKILL) after {} acquisitions ----",
            started.elapsed().as_secs_f64() * 1e3,
            servers.url(0),
            acquired.load(Ordering::SeqCst)
        ));
    }

    for worker in workers {
        lines.extend(worker.await?);
    }
    lines.sort();
    for line in &lines {
        println!("{line}");
    }
    let order = log.lock().await;
    println!(
        "\n{} of {} acquisitions in {:.2} s, one holder at a time; holders in order: {:?}",
        order.len(),
        WORKERS * ROUNDS,
        started.elapsed().as_secs_f64(),
        *order
    );
    if order.len() != WORKERS * ROUNDS {
        return Err("some workers did not get the lock".into());
    }
    Ok(())
}

/// `REDQUORUM_NODES` split at the commas that start a new URL: a piece
/// without `://` is one more host of the URL before it.
fn split_urls(nodes: &str) -> Vec<String> {
    let mut urls: Vec<String> = Vec::new();
    for piece in nodes.split(',') {
        match urls.last_mut() {
            Some(last) if !piece.contains("://") => {
                last.push(',');
                last.push_str(piece);
            }
            _ => urls.push(piece.to_owned()),
        }
    }
    urls
}
