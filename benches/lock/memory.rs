//! The memory figure: this program again, as a child (`--memory-child`)
//! that takes `n` locks with one implementation and holds them all at
//! once: its RSS growth (`VmRSS` before, `VmHWM` at the peak, from
//! `/proc/self/status`) and the heap it keeps (the counting allocator's
//! live bytes), per held lock.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use redquorum::Redlock;

use crate::clients::Client;
use crate::measure::LIVE_BYTES;

/// The memory figure: this program again, in a child process that takes
/// `n` locks with one implementation and holds them all at once.
pub fn memory(imp: &str, urls: &[String], n: usize) -> Option<(f64, f64, f64)> {
    let out = Command::new(std::env::current_exe().ok()?)
        .args(["--memory-child", imp, &n.to_string()])
        .args(urls)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.starts_with("memory "))?;
    let mut words = line
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse::<f64>().ok());
    let (before, peak, heap) = (words.next()??, words.next()??, words.next()??);
    Some((peak, (peak - before) / n as f64, heap / n as f64))
}

fn rss_kib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(f64::NAN)
}

/// The child side of [`memory`].
pub fn memory_child(args: &[String]) {
    let (imp, n, urls) = (&args[0], args[1].parse::<usize>().unwrap(), &args[2..]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = match imp.as_str() {
            "redquorum" => Client::Redquorum(Redlock::new(urls).unwrap()),
            _ => Client::Rslock(rslock::LockManager::new(urls.to_vec())),
        };
        client.cycle("bench:mem:warm").await.unwrap();
        let before = rss_kib("VmRSS:");
        let heap_before = LIVE_BYTES.load(Ordering::Relaxed);
        // Room for the measured library's locks only: each is charged its
        // own handles, not the other's.
        let room = |of: &str| if imp == of { n } else { 0 };
        let mut redquorum_locks = Vec::with_capacity(room("redquorum"));
        let mut rslock_locks = Vec::with_capacity(room("rslock"));
        for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
            let futs = chunk.iter().map(|i| {
                let client = client.clone();
                async move {
                    let resource = format!("bench:mem:{imp}:{i}");
                    match &client {
                        Client::Redquorum(r) => (
                            Some(r.lock(&resource, Duration::from_secs(120)).await.unwrap()),
                            None,
                        ),
                        Client::Rslock(m) => (
                            None,
                            Some(m.lock(&*resource, Duration::from_secs(120)).await.unwrap()),
                        ),
                        Client::Floor(..) | Client::Lean(..) => unreachable!(),
                    }
                }
            });
            for (a, b) in futures::future::join_all(futs).await {
                redquorum_locks.extend(a);
                rslock_locks.extend(b);
            }
        }
        let peak = rss_kib("VmHWM:");
        // What the held locks keep on the heap, once the requests beyond
        // each majority are done.
        if let Client::Redquorum(r) = &client {
            r.drain(Duration::from_secs(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let heap = LIVE_BYTES.load(Ordering::Relaxed) - heap_before;
        println!("memory {} {} {heap}", before * 1024.0, peak * 1024.0);
        // Release everything, 64 at a time.
        while !redquorum_locks.is_empty() {
            let batch: Vec<_> = redquorum_locks
                .drain(..redquorum_locks.len().min(64))
                .collect();
            futures::future::join_all(batch.into_iter().map(|l| l.release())).await;
        }
        if let Client::Rslock(m) = &client {
            for batch in rslock_locks.chunks(64) {
                futures::future::join_all(batch.iter().map(|l| m.unlock(l))).await;
            }
        }
    });
}
