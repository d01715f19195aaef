//! The chaos suite: the lock's one promise — at most one holder at a time
//! while a majority of nodes behave — checked under the faults that really
//! happen, by an independent checker (`history`) that can fail, and shown
//! to fail by negative controls.
//!
//! Each scenario starts five real `redis-server` processes (and a sixth for
//! the register), runs two client processes (`client`) of six tasks each
//! against them for a bounded time while this process injects faults, then
//! checks every history and prints the figures. Scenarios whose setting is
//! unsafe on purpose must show violations; the others must show none.
//!
//! The clients take plain locks (`lock()`), except in the scenarios named
//! `reentrant_*` (nested reentrant holds, each task an owner), `multi_*`
//! (`lock_all()` on sets of 2–3 resources) and `fenced_*` (`fenced()`
//! locks, whose tokens must grow in acquire order, and a register that
//! refuses stale tokens must lose no update), which run the same faults as
//! the scenario after the underscore on the other lock kinds (the table in
//! `scenarios`).
//!
//! The `come_and_go` scenarios (`come_and_go`) add client processes that
//! join the load during the run, some right after a restart, and so meet
//! restarted nodes for the first time: every lock kind but `multi`, and
//! leader election, with the restart guard on (no violation), and a
//! negative control with it off (`control_come_and_go_unguarded`). Each
//! loads the servers for 60% of the usual time.
//!
//! The scenarios added for issue 35 look for waiters left asleep while the
//! lock has room for them: `<kind>_cancel` on every kind, `zones` (each
//! client process next to one node and 40 ms from the others, through
//! proxies of its own), `long_retry` (retry delays of 2-5 s, so that only
//! wake-ups bring waiters in) and `kinds_on_one_name` (every kind on the
//! same names at once, which exclude each other). Each asserts a bound on
//! the run's idle capacity: how long a resource (a permit, the lock) had
//! room for a waiter that was waiting (see `history::Verdict::idle`); every
//! scenario prints it.
//!
//! ```text
//! cargo test --test chaos                     # every scenario, ~10 s each
//! cargo test --test chaos -- kill freeze     # those whose name contains a word
//! cargo test --test chaos -- come_and_go     # clients that come and go (7 runs)
//! cargo test --test chaos -- reentrant multi fenced # the other lock kinds
//! cargo test --test chaos -- cancel zones long_retry kinds_on_one_name # issue 35
//! cargo test --test chaos -- kill --skip election   # all but those with a word
//! REDQUORUM_CHAOS_SECS=60 cargo test --test chaos   # longer runs
//! ```
//!
//! This binary has its own `main` (`harness = false`): it is also the client
//! process, run again with `REDQUORUM_CHAOS_CLIENT` set.

mod client;
mod come_and_go;
#[path = "../common/mod.rs"]
mod common;
mod election;
mod history;
mod scenarios;

use std::time::Duration;

/// The environment variable that makes this binary a client process.
const CLIENT: &str = "REDQUORUM_CHAOS_CLIENT";

fn main() {
    if let Ok(spec) = std::env::var(CLIENT) {
        client::main(client::Spec::decode(&spec));
        return;
    }
    if let Ok(spec) = std::env::var(election::CANDIDATE) {
        election::main(election::Spec::decode(&spec));
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let cases = scenarios::cases();
    if flag("--list") {
        // The listing format of libtest, for runners such as nextest.
        if !flag("--ignored") {
            for case in &cases {
                println!("{}: test", case.name);
            }
        }
        return;
    }
    // `--skip WORD` (as libtest has it) leaves out the scenarios whose
    // name contains WORD; the other words choose.
    let mut words: Vec<&String> = Vec::new();
    let mut skip: Vec<&String> = Vec::new();
    let mut rest = args.iter();
    while let Some(a) = rest.next() {
        if a == "--skip" {
            skip.extend(rest.next());
        } else if !a.starts_with('-') {
            words.push(a);
        }
    }
    let exact = flag("--exact");
    let chosen: Vec<&scenarios::Case> = cases
        .iter()
        .filter(|c| {
            words.is_empty()
                || words.iter().any(|w| {
                    if exact {
                        c.name == **w
                    } else {
                        c.name.contains(w.as_str())
                    }
                })
        })
        .filter(|c| !skip.iter().any(|w| c.name.contains(w.as_str())))
        .collect();
    let secs = run_time();
    println!(
        "running {} chaos scenarios, {} s of load each (REDQUORUM_CHAOS_SECS)",
        chosen.len(),
        secs.as_secs()
    );
    let mut failed = Vec::new();
    for case in chosen {
        println!("\n== {}: {}", case.name, case.about);
        let began = std::time::Instant::now();
        let outcome = std::panic::catch_unwind(|| case.run(secs));
        let took = began.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => println!("   PASS {} ({took:.1} s)", case.name),
            Err(_) => {
                println!("   FAIL {} ({took:.1} s)", case.name);
                failed.push(case.name.as_str());
            }
        }
    }
    if !failed.is_empty() {
        println!("\nchaos scenarios failed: {}", failed.join(", "));
        std::process::exit(1);
    }
}

/// How long each scenario loads the servers: `REDQUORUM_CHAOS_SECS`, 10 s by
/// default (the CI run).
fn run_time() -> Duration {
    let secs = std::env::var("REDQUORUM_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    Duration::from_secs(secs)
}

/// `k` distinct random indices below `n`, in a random order.
fn pick(n: usize, k: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..n).collect();
    for i in 0..k {
        let j = rand::random_range(i..n);
        all.swap(i, j);
    }
    all.truncate(k);
    all
}
