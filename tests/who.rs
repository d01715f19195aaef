//! Who holds it: a lock's token names its taker and when, and each client
//! records who it is (host, pid, program, label) on the nodes, for
//! `status` and `Error::NotAcquired` to show, at no cost to the lock.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use common::logs::Logs;
use common::*;
use redquorum::local_servers::{LocalServers, Reply};
use redquorum::{Error, Redlock, Who};
use tracing::Level;

const ALL: [usize; 3] = [0, 1, 2];

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The `who` keys on node `i`.
fn who_keys(c: &LocalServers, i: usize) -> Vec<String> {
    match run(c, i, &["KEYS", "redquorum:who:*"]) {
        Reply::Array(Some(keys)) => keys
            .into_iter()
            .map(|k| match k {
                Reply::Bulk(Some(k)) => String::from_utf8(k).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("KEYS: {other:?}"),
    }
}

/// Waits until node `i` has `n` `who` keys.
async fn await_who_keys(c: &LocalServers, i: usize, n: usize) -> Vec<String> {
    let start = std::time::Instant::now();
    loop {
        let keys = who_keys(c, i);
        if keys.len() >= n || start.elapsed() > secs(5) {
            return keys;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn this_program() -> String {
    let arg0 = std::env::args_os().next().unwrap();
    std::path::Path::new(&arg0)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// `who` is this process, labelled `label`, and took its lock between
/// `before` and now.
fn assert_is_us(who: &Who, label: Option<&str>, before: SystemTime) {
    let process = who.process.as_ref().unwrap_or_else(|| panic!("{who:?}"));
    assert_eq!(process.pid, std::process::id());
    assert_eq!(process.program, this_program());
    if !this_host().is_empty() {
        assert_eq!(process.host, this_host());
    }
    assert_eq!(process.label.as_deref(), label);
    assert!(
        who.since >= before - Duration::from_millis(2) && who.since <= SystemTime::now(),
        "{who:?}"
    );
    let text = who.to_string();
    let named = format!("{}[{}] on {}", process.program, process.pid, process.host);
    assert!(text.starts_with(&named), "{text}");
    if let Some(label) = label {
        assert!(text.contains(&format!("({label})")), "{text}");
    }
}

#[tokio::test]
async fn status_names_the_taker_of_another_clients_lock() {
    let c = servers(3);
    let taker = redlock(&c);
    let looker = redlock(&c);
    let before = SystemTime::now();
    let lock = taker.lock("r", secs(10)).label("nightly").await.unwrap();
    // Written in the background, beside the acquisition.
    await_who_keys(&c, 0, 1).await;
    let status = looker.status("r").await;
    let taken_by = status.taken_by();
    assert_eq!(taken_by.len(), 1, "{status:?}");
    assert_is_us(&taken_by[0], Some("nightly"), before);
    assert_eq!(status.who(lock.token()), Some(taken_by[0].clone()));
    lock.release().await.unwrap();

    // Unlabelled, and several takers: readers, each named.
    let before = SystemTime::now();
    let a = taker.lock("s", secs(10)).shared().await.unwrap();
    let b = looker.lock("s", secs(10)).shared().await.unwrap();
    await_who_keys(&c, 0, 3).await;
    let status = taker.status("s").await;
    let taken_by = status.taken_by();
    assert_eq!(taken_by.len(), 2, "{status:?}");
    for who in &taken_by {
        assert_is_us(who, None, before);
    }
    assert_ne!(taken_by[0].id, taken_by[1].id, "two clients, two ids");
    a.release().await.unwrap();
    b.release().await.unwrap();
    // A token that is not ours (another Redlock client's) names nobody.
    assert_eq!(status.who(&"0".repeat(40)), None);
}

#[tokio::test]
async fn not_acquired_names_the_holder() {
    let c = servers(3);
    let taker = redlock(&c);
    let before = SystemTime::now();
    let lock = taker.lock("r", secs(10)).label("backup").await.unwrap();
    await_who_keys(&c, 0, 1).await;
    let other = redlock(&c);
    let err = other.try_lock("r", secs(10)).await.unwrap_err();
    let Error::NotAcquired {
        holder: Some(holder),
        ..
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_is_us(holder, Some("backup"), before);
    assert!(err.to_string().contains("; held by "), "{err}");
    assert!(
        err.to_string()
            .contains(&format!("[{}]", std::process::id())),
        "{err}"
    );
    lock.release().await.unwrap();
}

#[tokio::test(flavor = "current_thread")]
async fn a_node_refusing_the_record_still_locks_and_warns_once() {
    let c = servers(3);
    for i in ALL {
        run(
            &c,
            i,
            &[
                "ACL",
                "SETUSER",
                "locker",
                "on",
                ">pw",
                "~redquorum:r*",
                "&*",
                "+@all",
            ],
        );
    }
    let warnings = Logs::at(Level::WARN);
    let _guard = tracing::subscriber::set_default(warnings.clone());
    let urls: Vec<String> = ALL
        .iter()
        .map(|&i| format!("redis://locker:pw@127.0.0.1:{}", c.port(i)))
        .collect();
    // (The restart guard would want `redquorum-born-empty`, not ours to read.)
    let redlock = Redlock::builder()
        .nodes(&urls)
        .node_timeout(NODE_TIMEOUT)
        .restart_guard(false)
        .build()
        .unwrap();
    let before = SystemTime::now();
    for _ in 0..3 {
        let lock = redlock.try_lock("r", secs(10)).await.unwrap();
        await_holders(&c, &ALL, &key("r"), 3, secs(5)).await;
        // Its token still says when, and which taker; nobody says who.
        let status = redlock.status("r").await;
        let who = status.who(lock.token()).unwrap();
        assert!(who.since >= before - Duration::from_millis(2), "{who:?}");
        assert_eq!(who.process, None);
        assert!(who.to_string().starts_with("taker "), "{who}");
        lock.release().await.unwrap();
        // The release is decided by a majority; the node beyond it must
        // have let go too, or the next `SET NX` there finds the old key
        // (and its late release then empties that node under our eyes).
        assert!(redlock.drain(secs(5)).await);
    }
    let seen = warnings.settle(3).await;
    assert!(ALL.iter().all(|&i| who_keys(&c, i).is_empty()));
    assert_eq!(seen.len(), 3, "one warning per node: {seen:#?}");
    assert!(seen.iter().all(|w| w.contains("who")), "{seen:#?}");
}

#[tokio::test]
async fn a_node_restarted_empty_gets_the_record_again() {
    let mut c = servers(3);
    let redlock = builder(&c).restart_guard(false).build().unwrap();
    warm(&redlock).await;
    let keys = await_who_keys(&c, 0, 1).await;
    assert_eq!(keys.len(), 1);
    c.restart(0).unwrap();
    assert!(who_keys(&c, 0).is_empty());
    let lock = redlock.try_lock("r", secs(10)).await.unwrap();
    assert_eq!(await_who_keys(&c, 0, 1).await, keys);
    let pttl = pttl(&c, 0, &keys[0]);
    assert!(pttl > 23 * 3600 * 1000, "{pttl}");
    lock.release().await.unwrap();
}

/// Every command's calls on node `i` (`INFO commandstats`).
fn calls(c: &LocalServers, i: usize) -> BTreeMap<String, u64> {
    let Reply::Bulk(Some(text)) = run(c, i, &["INFO", "commandstats"]) else {
        panic!("INFO commandstats on node {i}")
    };
    String::from_utf8(text)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (name, fields) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let n = fields.split(',').find_map(|f| f.strip_prefix("calls="))?;
            Some((name.to_owned(), n.parse().ok()?))
        })
        .collect()
}

/// What a lock costs on a node: the same commands as without the record.
/// Once a connection has written it, N locks and releases are N `SET`s and
/// N `EVALSHA`s on each node, and nothing else.
#[tokio::test]
async fn a_lock_costs_the_same_commands() {
    let c = servers(3);
    let redlock = builder(&c).restart_guard(false).build().unwrap();
    warm(&redlock).await;
    await_who_keys(&c, 0, 1).await;
    // Let the first release's answers from every node come in.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before: Vec<_> = ALL.iter().map(|&i| calls(&c, i)).collect();
    const N: u64 = 20;
    for _ in 0..N {
        let lock = redlock.try_lock("r", secs(10)).await.unwrap();
        lock.release().await.unwrap();
        // Every node let go before the next lock (see above; `drain` asks
        // the nodes nothing more).
        assert!(redlock.drain(secs(5)).await);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    for (i, before) in ALL.iter().zip(before) {
        let mut delta = calls(&c, *i);
        assert!(
            delta.get("psetex") >= Some(&1),
            "node {i}: the record was written"
        );
        for (command, n) in &before {
            *delta.get_mut(command).unwrap() -= n;
        }
        delta.retain(|command, n| *n > 0 && command != "info");
        // Sent: SET NX PX and the release's EVALSHA, per lock; run by the
        // release script's fast path (kinds/mutex/release_fast.lua): GET,
        // its look for waiters and an intent (EXISTS), DEL. Nothing else:
        // no record written (`psetex`).
        let expected: BTreeMap<String, u64> = [
            ("set", N),
            ("evalsha", N),
            ("get", N),
            ("del", N),
            ("exists", N),
        ]
        .into_iter()
        .map(|(c, n)| (c.to_owned(), n))
        .collect();
        assert_eq!(delta, expected, "node {i}");
    }
    let key = &who_keys(&c, 0)[0];
    let value = get(&c, 0, key).unwrap();
    println!(
        "one record: key {} bytes, value {} bytes: {key} = {value:?}",
        key.len(),
        value.len()
    );
}
