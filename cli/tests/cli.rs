//! The `redquorum` command as a user runs it: the real binary, real child
//! processes, against real local `redis-server` processes.

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use redquorum::local_servers::{LocalServers, Reply, answering_pid, command};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_redquorum");
const ALL: [usize; 5] = [0, 1, 2, 3, 4];

fn servers() -> LocalServers {
    LocalServers::start(5)
        .unwrap_or_else(|e| panic!("cannot start local redis-server processes: {e}"))
}

/// `redquorum ARGS…` against `servers`: its nodes in REDQUORUM_NODES (the
/// command's default node timeout, 1 s, is one a loaded CI machine does not
/// miss on a healthy node, connecting included).
fn redquorum(servers: &LocalServers, args: &[&str]) -> Command {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env("REDQUORUM_NODES", servers.urls().join(","))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null());
    command
}

/// `redquorum run OPTIONS… RESOURCE -- sh -c SCRIPT`.
fn run_sh(servers: &LocalServers, options: &[&str], resource: &str, script: &str) -> Command {
    let mut args = vec!["run"];
    args.extend(options);
    args.extend([resource, "--", "sh", "-c", script]);
    redquorum(servers, &args)
}

fn output(mut command: Command) -> Output {
    command.output().expect("redquorum runs")
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("redquorum exits, not killed")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn key(resource: &str) -> String {
    format!("redquorum:{resource}")
}

/// How many nodes hold `key`.
fn holders(servers: &LocalServers, key: &str) -> usize {
    ALL.iter()
        .filter(|&&i| command(servers.port(i), &["EXISTS", key]).unwrap() == Reply::Int(1))
        .count()
}

fn wait_for(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A first line from a child's stdout.
fn first_line(child: &mut Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim().to_owned()
}

fn signal(pid: u32, signal: libc::c_int) {
    // SAFETY: a signal to a child process of this test, not yet reaped.
    unsafe {
        libc::kill(pid as libc::pid_t, signal);
    }
}

/// Four shells at once, six runs each, append start and end stamps to one
/// file from inside the lock: no two intervals overlap, and every run ran.
#[test]
fn contended_runs_never_overlap() {
    let c = servers();
    let dir = TempDir::new("overlap");
    let file = dir.path().join("stamps");
    let script = format!(
        "echo \"start $$ $(date +%s%N)\" >> {f}; sleep 0.02; echo \"end $$ $(date +%s%N)\" >> {f}",
        f = file.display()
    );
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..6 {
                    let out = output(run_sh(&c, &["--wait", "60s"], "cron", &script));
                    assert_eq!(code(&out), 0, "{}", stderr(&out));
                }
            });
        }
    });
    let mut events: Vec<(u128, bool, String)> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|line| {
            let parts: Vec<&str> = line.split(' ').collect();
            (
                parts[2].parse().unwrap(),
                parts[0] == "start",
                parts[1].to_owned(),
            )
        })
        .collect();
    assert_eq!(events.len(), 48, "every run started and ended once");
    events.sort();
    let mut inside: Option<String> = None;
    for (at, start, pid) in &events {
        if *start {
            assert!(
                inside.is_none(),
                "run {pid} started at {at} inside run {inside:?}"
            );
            inside = Some(pid.clone());
        } else {
            assert_eq!(
                inside.as_ref(),
                Some(pid),
                "run {pid} ended at {at} out of turn"
            );
            inside = None;
        }
    }
    assert_eq!(holders(&c, &key("cron")), 0, "the last run released");
}

#[test]
fn the_command_gets_its_lock_in_its_environment() {
    let c = servers();
    let out = output(run_sh(
        &c,
        &["--fence"],
        "job",
        "echo $REDQUORUM_RESOURCE $REDQUORUM_TOKEN $REDQUORUM_FENCE",
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let fields: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(fields[0], "job");
    assert_eq!(fields[1].len(), 40, "a token: {text}");
    assert!(
        fields[2].parse::<u64>().unwrap() > 0,
        "a fencing token: {text}"
    );
    let out = output(run_sh(
        &c,
        &["--reentrant-owner", "deploy-7"],
        "job",
        "echo $REDQUORUM_OWNER ${REDQUORUM_FENCE:-none}",
    ));
    assert_eq!(stdout(&out).trim(), "deploy-7 none");
}

/// `--permits K`: K runs hold RESOURCE at once, the next is refused (or
/// waits), and `status` shows the semaphore's holders.
#[test]
fn permits_let_k_runs_hold_at_once() {
    let c = servers();
    let mut holders: Vec<_> = (0..2)
        .map(|_| {
            run_sh(
                &c,
                &["--permits", "2"],
                "pool",
                "echo held $REDQUORUM_PERMITS; exec sleep 30",
            )
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for holder in &mut holders {
        assert_eq!(first_line(holder), "held 2");
    }
    let out = output(run_sh(
        &c,
        &["--permits", "2", "--no-wait"],
        "pool",
        "echo ran",
    ));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
    let status = output(redquorum(&c, &["status", "pool"]));
    assert!(
        stdout(&status).contains("semaphore of 2 permits (2 held"),
        "{}",
        stdout(&status)
    );
    for mut holder in holders {
        holder.kill().unwrap();
        holder.wait().unwrap();
    }
}

/// `--shared`: readers run at once; a writer (a run without it) waits
/// until they end, and `status` shows the readers.
#[test]
fn shared_runs_read_together_and_a_writer_waits_for_them() {
    let c = servers();
    let mut readers: Vec<_> = (0..2)
        .map(|_| {
            run_sh(
                &c,
                &["--shared"],
                "doc",
                "echo reading $REDQUORUM_SHARED; exec sleep 30",
            )
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for reader in &mut readers {
        assert_eq!(first_line(reader), "reading 1");
    }
    let status = output(redquorum(&c, &["status", "doc"]));
    assert!(stdout(&status).contains("2 readers"), "{}", stdout(&status));
    let writer = output(run_sh(&c, &["--no-wait"], "doc", "echo wrote"));
    assert_eq!(code(&writer), 75, "{}", stderr(&writer));
    for mut reader in readers {
        reader.kill().unwrap();
        reader.wait().unwrap();
    }
}

/// A child's stdout, line by line, read on a thread of its own: a line
/// that never comes fails the test (`next_line`) instead of hanging it.
fn lines_of(child: &mut Child) -> std::sync::mpsc::Receiver<String> {
    let (lines, received) = std::sync::mpsc::channel();
    let printed = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(printed).lines() {
            if lines.send(line.unwrap()).is_err() {
                break;
            }
        }
    });
    received
}

fn next_line(lines: &std::sync::mpsc::Receiver<String>, from: &str) -> String {
    lines
        .recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("no line from {from} within 10 s"))
}

/// `elect`: the command runs while leading, with its term; `leader` names
/// it (text and JSON) and `leader --watch` sees it go and the next come; a
/// second candidate waits and runs once the first's command exits, with a
/// greater term.
#[test]
fn elect_runs_the_command_while_leading_and_leader_shows_who_leads() {
    let c = servers();
    let elect = |id: &str, script: &str| {
        redquorum(
            &c,
            &[
                "elect",
                "--id",
                id,
                "--value",
                "addr-of-a",
                "sched",
                "--",
                "sh",
                "-c",
                script,
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let mut watch = redquorum(
        &c,
        &["leader", "--watch", "--json", "--every", "100ms", "sched"],
    )
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let watched = lines_of(&mut watch);
    let next_watched =
        || -> Value { serde_json::from_str(&next_line(&watched, "`leader --watch`")).unwrap() };
    assert_eq!(next_watched()["leader"], Value::Null);
    // `a` leads until its command reads a line from a file that is not
    // there yet: it exits when told.
    let dir = std::env::temp_dir().join(format!("redquorum-elect-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let go = dir.join("go");
    let script_a = format!(
        "echo $REDQUORUM_ELECTION $REDQUORUM_ID $REDQUORUM_TERM; while [ ! -e {} ]; do sleep 0.05; done",
        go.display()
    );
    let mut a = elect("a", &script_a);
    let line = first_line(&mut a);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[..2], ["sched", "a"], "{line}");
    let term_a: u64 = fields[2].parse().unwrap();
    let shown = output(redquorum(&c, &["leader", "sched"]));
    assert_eq!(code(&shown), 0, "{}", stderr(&shown));
    assert!(
        stdout(&shown).starts_with(&format!(
            "sched: led by \"a\", term {term_a}, value \"addr-of-a\""
        )),
        "{}",
        stdout(&shown)
    );
    let json: Value = serde_json::from_str(&stdout(&output(redquorum(
        &c,
        &["leader", "--json", "sched"],
    ))))
    .unwrap();
    assert_eq!(json["leader"]["identity"], "a");
    assert_eq!(json["leader"]["term"], term_a);
    assert_eq!(next_watched()["leader"]["identity"], "a");
    // `b` campaigns meanwhile, and waits.
    // (b leads for a second: long enough to be seen by the watcher.)
    let mut b = elect("b", "echo $REDQUORUM_ID $REDQUORUM_TERM; sleep 1");
    std::thread::sleep(Duration::from_millis(300));
    assert!(b.try_wait().unwrap().is_none(), "b ran while a led");
    std::fs::write(&go, "").unwrap();
    let out_a = a.wait_with_output().unwrap();
    assert_eq!(code(&out_a), 0, "{}", stderr(&out_a));
    let out_b = b.wait_with_output().unwrap();
    assert_eq!(code(&out_b), 0, "{}", stderr(&out_b));
    let line = stdout(&out_b);
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(fields[0], "b", "{line}");
    let term_b: u64 = fields[1].parse().unwrap();
    assert!(term_b > term_a, "terms must grow: {term_a} then {term_b}");
    // The watcher saw b lead (perhaps with no leader between), then none.
    let mut seen = Vec::new();
    loop {
        let change = next_watched();
        seen.push(change["leader"]["identity"].clone());
        if change["leader"].is_null() && seen.contains(&Value::from("b")) {
            break;
        }
    }
    watch.kill().unwrap();
    watch.wait().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // Bad input is a usage error.
    let out = output(redquorum(&c, &["elect", "--id", "", "x", "--", "true"]));
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("identity"), "{}", stderr(&out));
}

/// `elect --again`: a leadership lost while the command ran (its nodes
/// frozen past the TTL) stops the command, and redquorum campaigns again
/// and runs it anew once it leads, with a greater term.
#[test]
fn elect_again_campaigns_anew_after_a_lost_leadership() {
    let mut c = servers();
    let mut run = redquorum(
        &c,
        &[
            "elect",
            "--id",
            "a",
            "--again",
            "--node-timeout",
            "100ms",
            "--ttl",
            "1s",
            "--kill-after",
            "400ms",
            "e",
            "--",
            "sh",
            "-c",
            "echo $REDQUORUM_TERM; exec sleep 30",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let lines = lines_of(&mut run);
    let first: u64 = next_line(&lines, "elect").parse().unwrap();
    for i in [0, 1, 2] {
        c.freeze(i);
    }
    std::thread::sleep(Duration::from_millis(1_500));
    for i in [0, 1, 2] {
        c.thaw(i);
    }
    let second: u64 = next_line(&lines, "elect --again").parse().unwrap();
    assert!(second > first, "terms must grow: {first} then {second}");
    signal(run.id(), libc::SIGTERM);
    let out = run.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(err.contains("campaigning for \"e\" again"), "{err}");
}

#[test]
fn every_exit_status() {
    let c = servers();
    // The command's own status, and 128 + the signal that killed it.
    assert_eq!(code(&output(run_sh(&c, &[], "r", "exit 7"))), 7);
    assert_eq!(code(&output(run_sh(&c, &[], "r", "kill -TERM $$"))), 143);
    // Cannot run it.
    let missing = output(redquorum(&c, &["run", "r", "--", "/nonexistent/cmd"]));
    assert_eq!(code(&missing), 127);
    assert!(
        stderr(&missing).contains("cannot run"),
        "{}",
        stderr(&missing)
    );
    let dir = TempDir::new("exec");
    let file = dir.path().join("not-executable");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    let file = file.to_str().unwrap();
    let not_executable = output(redquorum(&c, &["run", "r", "--", file]));
    assert_eq!(code(&not_executable), 126);
    // Held elsewhere: 75, with the nodes' report; or the status asked for.
    let mut holder = run_sh(&c, &[], "r", "echo held; exec sleep 30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut holder), "held");
    for options in [&["--no-wait"][..], &["--wait", "300ms"]] {
        let started = Instant::now();
        let out = output(run_sh(&c, options, "r", "echo ran"));
        assert_eq!(code(&out), 75, "{options:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "the command never ran");
        assert!(
            stderr(&out).contains("held by another owner"),
            "{}",
            stderr(&out)
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    let out = output(run_sh(
        &c,
        &["--no-wait", "--conflict-exit-code", "9"],
        "r",
        "true",
    ));
    assert_eq!(code(&out), 9);
    signal(holder.id(), libc::SIGTERM);
    assert_eq!(holder.wait().unwrap().code(), Some(143));
    // Usage errors: 2, with what to fix.
    let usage = |args: &[&str], nodes: Option<&str>, says: &str| {
        let mut command = redquorum(&c, args);
        match nodes {
            Some(nodes) => command.env("REDQUORUM_NODES", nodes),
            None => command.env_remove("REDQUORUM_NODES"),
        };
        let out = output(command);
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    };
    let urls = c.urls().join(",");
    let urls = Some(urls.as_str());
    usage(
        &["run", "--ttl", "5parsecs", "r", "--", "true"],
        urls,
        "write a duration like",
    );
    usage(
        &["run", "--wait", "soon", "r", "--", "true"],
        urls,
        "--wait",
    );
    usage(&["run", "r", "--", "true"], None, "REDQUORUM_NODES");
    usage(&["status", "r"], None, "--nodes");
    usage(
        &["run", "r", "--", "true"],
        Some("http://x:1"),
        "is invalid",
    );
    usage(&["run", "r"], urls, "COMMAND");
    usage(
        &[
            "run",
            "--fence",
            "--reentrant-owner",
            "o",
            "r",
            "--",
            "true",
        ],
        urls,
        "cannot be used with",
    );
    usage(
        &[
            "run",
            "--node-timeout",
            "2m",
            "--ttl",
            "1m",
            "r",
            "--",
            "true",
        ],
        urls,
        "timeout",
    );
    usage(
        &["release", "--token", "stale", "r"],
        urls,
        "not a lock token",
    );
    usage(&["frobnicate"], urls, "unrecognized subcommand");
    usage(
        &[
            "run",
            "--ttl",
            "1s",
            "--kill-after",
            "600ms",
            "r",
            "--",
            "true",
        ],
        urls,
        "more than half",
    );
    usage(
        &["run", "--kill-after", "500000000000y", "r", "--", "true"],
        urls,
        "more than half",
    );
}

/// Durations too long for what they bound: a usage error that says the
/// bound, never a panic (the status command exited 101 on a node timeout
/// of 300000000000 years). Nothing listens on port 1: each is refused
/// before any request. A wait that long is no error: it waits for ever.
#[test]
fn huge_durations_are_usage_errors_not_panics() {
    const TOKEN: &str = "0123456789abcdef0123456789abcdef01234567";
    const HUGE: &str = "300000000000y";
    for args in [
        &["status", "--node-timeout", HUGE, "r"][..],
        &["release", "--node-timeout", HUGE, "--token", TOKEN, "r"],
        &["run", "--node-timeout", HUGE, "r", "--", "true"],
        &["run", "--ttl", HUGE, "r", "--", "true"],
    ] {
        let out = Command::new(BIN)
            .args(args)
            .env("REDQUORUM_NODES", "redis://127.0.0.1:1")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .expect("redquorum runs");
        assert_eq!(code(&out), 2, "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("invalid configuration"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let c = servers();
    let out = output(run_sh(&c, &["--wait", HUGE], "r", "echo ran"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "ran\n");
}

/// Sentinel-managed nodes in REDQUORUM_NODES: the comma-separated list is
/// split at each `redis+sentinel://`, not at the sentinels' commas; a bad
/// one is a usage error that says what to fix, its password not shown.
#[test]
fn sentinel_urls_are_nodes() {
    let s = redquorum::local_sentinel::LocalSentinels::start(3)
        .unwrap_or_else(|e| panic!("cannot start Sentinel-managed nodes: {e}"));
    let out = Command::new(BIN)
        .args(["run", "r", "--", "sh", "-c", "echo ran"])
        .env("REDQUORUM_NODES", s.urls().join(","))
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("redquorum runs");
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "ran\n");
    let out = Command::new(BIN)
        .args(["run", "r", "--", "true"])
        .env(
            "REDQUORUM_NODES",
            "redis+sentinel://:s3cret@127.0.0.1:1,127.0.0.1:2",
        )
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("redquorum runs");
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("no master name"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("s3cret"), "{}", stderr(&out));
}

/// A majority frozen while the command runs: renewals fail, and once no
/// more than --kill-after of the lock is left the command's whole process
/// group gets SIGTERM (a child it started in the background too), then
/// SIGKILL --kill-after later, when the lock ends; redquorum exits 76.
#[test]
fn a_failing_lock_stops_the_command_and_what_it_started() {
    let mut c = servers();
    for (script, gets) in [
        // Prints the pid of a background child, which SIGTERM ends.
        ("sleep 30 & echo $!; wait", "SIGTERM"),
        // Ignores SIGTERM: only SIGKILL ends it.
        ("echo $$; trap '' TERM; exec sleep 30", "SIGKILL"),
    ] {
        let mut run = redquorum(
            &c,
            &[
                "run",
                "--node-timeout",
                "100ms",
                "--ttl",
                "1s",
                "--kill-after",
                "400ms",
                "r",
                "--",
                "sh",
                "-c",
                script,
            ],
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
        let pid: i32 = first_line(&mut run).parse().unwrap();
        for i in [0, 1, 2] {
            c.freeze(i);
        }
        let frozen = Instant::now();
        // Gone within the lock's last validity (at most the TTL), with a
        // margin for a loaded machine.
        wait_for(gets, Duration::from_secs(3), || !alive(pid));
        let stopped = frozen.elapsed();
        // redquorum itself may spend a few seconds trying to release on
        // the frozen nodes before it exits.
        let out = run.wait_with_output().unwrap();
        for i in [0, 1, 2] {
            c.thaw(i);
        }
        assert_eq!(code(&out), 76, "{gets}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("less than --kill-after left"),
            "{gets}: {}",
            stderr(&out)
        );
        eprintln!("{gets}: stopped {stopped:?} after the freeze");
        // The lock is free again once the nodes are back.
        wait_for("the lost lock's keys gone", Duration::from_secs(5), || {
            holders(&c, &key("r")) == 0
        });
    }
}

/// A failing lock, and a command whose shell exits on SIGTERM (at once, or
/// after a second of cleanup) but whose background child ignores it: the
/// child gets SIGKILL by the time the lock's validity ends, not a fresh
/// --kill-after after the shell's exit. The majority is frozen just after
/// the command starts, so the validity ends within the TTL of the freeze
/// (the acquisition, and any renewal that got through, began before it);
/// the child stamps the time every 10 ms while it runs.
#[test]
fn what_a_failing_lock_leaves_running_dies_by_its_deadline() {
    const TTL_MS: u128 = 3000;
    let mut c = servers();
    let dir = TempDir::new("leftover");
    for (shell, cleanup) in [("exits at once", ""), ("cleans up for 1s", "sleep 1; ")] {
        let stamps = dir.path().join(shell.replace(' ', "-"));
        let script = format!(
            "(trap '' TERM; while :; do date +%s%N >> {f}; sleep 0.01; done) & \
             trap '{cleanup}exit 143' TERM; echo ready; wait",
            f = stamps.display()
        );
        let options = [
            "--node-timeout",
            "100ms",
            "--ttl",
            "3s",
            "--kill-after",
            "1400ms",
        ];
        let mut run = run_sh(&c, &options, "r", &script)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        assert_eq!(first_line(&mut run), "ready");
        let frozen = unix_nanos();
        for i in [0, 1, 2] {
            c.freeze(i);
        }
        let out = run.wait_with_output().unwrap();
        for i in [0, 1, 2] {
            c.thaw(i);
        }
        assert_eq!(code(&out), 76, "{shell}: {}", stderr(&out));
        let last: u128 = std::fs::read_to_string(&stamps)
            .unwrap()
            .lines()
            .filter_map(|line| line.parse().ok())
            .max()
            .expect("the child ran");
        // The margin is for a late timer on a loaded machine; a grace
        // counted from the shell's exit overruns by most of a second.
        let past_ms = (last as i128 - (frozen + TTL_MS * 1_000_000) as i128) / 1_000_000;
        assert!(
            past_ms < 500,
            "{shell}: the leftover child ran {past_ms} ms past the lock's validity"
        );
        eprintln!("{shell}: the leftover child's last stamp {past_ms} ms from the deadline");
        wait_for("the lost lock's keys gone", Duration::from_secs(5), || {
            holders(&c, &key("r")) == 0
        });
    }
}

/// The wall clock, as `date +%s%N` prints it.
fn unix_nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A command that leaves a process running in its group: it is stopped
/// before the lock is released, and the command's status stands.
#[test]
fn what_the_command_leaves_running_ends_before_the_release() {
    let c = servers();
    let out = output(run_sh(&c, &[], "r", "sleep 30 & echo $!"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let pid: i32 = stdout(&out).trim().parse().unwrap();
    assert!(!alive(pid), "the background child outlived the lock");
    assert!(
        stderr(&out).contains("left processes running"),
        "{}",
        stderr(&out)
    );
    assert_eq!(holders(&c, &key("r")), 0);
}

/// Whether process `pid` runs (not gone, nor a zombie awaiting its reaper).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

/// redquorum killed (SIGKILL: nothing keeps the lock alive any more): the
/// command dies with it, and does not run on unprotected.
#[test]
fn the_command_dies_with_redquorum() {
    let c = servers();
    let mut run = run_sh(&c, &[], "r", "echo $$; exec sleep 30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid: i32 = first_line(&mut run).parse().unwrap();
    signal(run.id(), libc::SIGKILL);
    run.wait().unwrap();
    wait_for(
        "the command killed with redquorum",
        Duration::from_secs(5),
        || !alive(pid),
    );
}

/// SIGINT, SIGTERM and SIGHUP to redquorum reach the command; the lock is
/// released once the command has exited, and its status is redquorum's.
#[test]
fn signals_reach_the_command_and_the_lock_is_released_after_it() {
    let c = servers();
    let dir = TempDir::new("signals");
    for (sig, name) in [
        (libc::SIGINT, "INT"),
        (libc::SIGTERM, "TERM"),
        (libc::SIGHUP, "HUP"),
    ] {
        // The trap waits for the test's word before it exits.
        let go = dir.path().join(name);
        let script = format!(
            "trap 'echo got {name}; while [ ! -e {go} ]; do sleep 0.01; done; exit 3' {name}; \
             echo ready; while :; do sleep 0.05; done",
            go = go.display()
        );
        let mut run = run_sh(&c, &[], "r", &script)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(run.stdout.take().unwrap()).lines();
        assert_eq!(lines.next().unwrap().unwrap(), "ready");
        assert!(holders(&c, &key("r")) >= 3);
        signal(run.id(), sig);
        assert_eq!(lines.next().unwrap().unwrap(), format!("got {name}"));
        // Still held while the command finishes.
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            holders(&c, &key("r")) >= 3,
            "{name}: released before the command exited"
        );
        std::fs::write(&go, "").unwrap();
        assert_eq!(run.wait().unwrap().code(), Some(3), "{name}");
        assert_eq!(holders(&c, &key("r")), 0, "{name}: not released on exit");
    }
    // A signal while waiting for the lock ends the wait, as if it had
    // killed redquorum (128 + 2); the command never runs.
    let mut holder = run_sh(&c, &[], "w", "echo held; exec sleep 30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut holder), "held");
    let waiter = run_sh(&c, &[], "w", "echo ran")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    signal(waiter.id(), libc::SIGINT);
    let out = waiter.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130));
    assert!(stdout(&out).is_empty());
    signal(holder.id(), libc::SIGTERM);
    holder.wait().unwrap();
}

/// Passwords with a comma in them, in URLs that are fine, that point
/// nowhere, or that are bad, given by `--nodes` or by `REDQUORUM_NODES`:
/// no part of a password is ever printed (a list split at every comma used
/// to print `node URL "redis://:hunter2" is invalid`).
#[test]
fn no_password_is_ever_printed() {
    let secrets = ["hunter2", "secret", "s3cr3t", "xyzzy"];
    let lists = [
        "redis://:hunter2,secret@127.0.0.1:1",
        "redis://admin:s3cr3t,@127.0.0.1:1",
        "redis://:hunter2,secret@127.0.0.1:1,redis://admin:s3cr3t,@127.0.0.1:2",
        "redis://:hunter2,secret@127.0.0.1:notaport",
        "redis://admin:s3cr3t,@127.0.0.1:x/0",
        "unix:///tmp/redquorum-none.sock?pass=s3cr3t,xyzzy&db=x",
        // Lists already cut at a comma, or cut in a bad place: still no
        // password shown.
        "redis://:hunter2",
        "redis://admin:s3cr3t",
        "secret@127.0.0.1:1",
        "redis://:hunter2,secret@127.0.0.1:1/0,h:2",
    ];
    for list in lists {
        for (how, args) in [
            ("--nodes", vec!["--nodes", list]),
            ("REDQUORUM_NODES", vec![]),
        ] {
            for command in [
                &["status", "--node-timeout", "200ms", "r"][..],
                &[
                    "run",
                    "--node-timeout",
                    "200ms",
                    "--no-wait",
                    "r",
                    "--",
                    "true",
                ],
            ] {
                let mut redquorum = Command::new(BIN);
                redquorum
                    .args(&command[..1])
                    .args(&args)
                    .args(&command[1..])
                    .env_remove("RUST_LOG")
                    .stdin(Stdio::null());
                match how {
                    "--nodes" => redquorum.env_remove("REDQUORUM_NODES"),
                    _ => redquorum.env("REDQUORUM_NODES", list),
                };
                let out = output(redquorum);
                let shown = format!("{}{}", stdout(&out), stderr(&out));
                assert_ne!(code(&out), 0, "{list} by {how}: {shown}");
                for secret in secrets {
                    assert!(
                        !shown.contains(secret),
                        "{list} by {how}, {:?}: {secret:?} shown in: {shown}",
                        command[0]
                    );
                }
            }
        }
    }
}

/// A comma in a password works against nodes that have that password (the
/// default user's, and an ACL user's ending in a comma), in a list by
/// `REDQUORUM_NODES` or `--nodes`, and with `--nodes` given once per URL.
#[test]
fn a_comma_in_a_password_works_and_nodes_may_be_given_one_by_one() {
    let c = LocalServers::start(3)
        .unwrap_or_else(|e| panic!("cannot start local redis-server processes: {e}"));
    for i in 0..3 {
        let port = c.port(i);
        for setting in [
            &[
                "ACL", "SETUSER", "admin", "on", ">s3cr3t,", "~*", "&*", "+@all",
            ][..],
            &["CONFIG", "SET", "requirepass", "hunter2,secret"],
        ] {
            assert_eq!(
                command(port, setting).unwrap(),
                Reply::Status("OK".to_owned()),
                "{setting:?}"
            );
        }
    }
    let default_user: Vec<String> = (0..3)
        .map(|i| format!("redis://:hunter2,secret@127.0.0.1:{}", c.port(i)))
        .collect();
    let admin: Vec<String> = (0..3)
        .map(|i| format!("redis://admin:s3cr3t,@127.0.0.1:{}", c.port(i)))
        .collect();
    for urls in [&default_user, &admin] {
        let list = urls.join(",");
        let by_env = vec![];
        let by_list = vec!["--nodes".to_owned(), list.clone()];
        let one_by_one: Vec<String> = urls
            .iter()
            .flat_map(|u| ["--nodes".to_owned(), u.clone()])
            .collect();
        let mixed = vec![
            "--nodes".to_owned(),
            urls[0].clone(),
            "--nodes".to_owned(),
            urls[1..].join(","),
        ];
        for (how, nodes) in [
            ("REDQUORUM_NODES", by_env),
            ("a --nodes list", by_list),
            ("--nodes once per URL", one_by_one),
            ("--nodes, then a list", mixed),
        ] {
            let mut run = Command::new(BIN);
            run.arg("run")
                .args(&nodes)
                .args(["--no-wait", "r", "--", "sh", "-c", "echo ran"])
                .env_remove("RUST_LOG")
                .stdin(Stdio::null());
            match how {
                "REDQUORUM_NODES" => run.env("REDQUORUM_NODES", &list),
                _ => run.env_remove("REDQUORUM_NODES"),
            };
            let out = output(run);
            assert_eq!(code(&out), 0, "{} by {how}: {}", urls[0], stderr(&out));
            assert_eq!(stdout(&out).trim(), "ran", "{} by {how}", urls[0]);
            let out = output({
                let mut status = Command::new(BIN);
                status
                    .arg("status")
                    .args(&nodes)
                    .arg("r")
                    .env_remove("RUST_LOG");
                match how {
                    "REDQUORUM_NODES" => status.env("REDQUORUM_NODES", &list),
                    _ => status.env_remove("REDQUORUM_NODES"),
                };
                status
            });
            assert_eq!(code(&out), 0, "{how}: {}", stderr(&out));
            assert!(
                stdout(&out).starts_with("r: free (no lock on a majority of 3 nodes)"),
                "{how}: {}",
                stdout(&out)
            );
        }
    }
}

fn status_json(c: &LocalServers, resource: &str) -> (i32, Value) {
    let out = output(redquorum(
        c,
        &["status", "--node-timeout", "1s", "--json", resource],
    ));
    let all: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    (code(&out), all[0].clone())
}

#[test]
fn status_shows_free_held_split_and_fenced_states() {
    let mut c = servers();
    let (code0, free) = status_json(&c, "r");
    assert_eq!(code0, 0);
    assert_eq!(free["verdict"], "free");
    assert_eq!(free["resource"], "r");
    assert_eq!(free["quorum"], 3);
    assert_eq!(free["nodes"].as_array().unwrap().len(), 5);

    // Held by a fenced run: the command looks at its own lock.
    let script = format!(
        "echo $REDQUORUM_TOKEN $REDQUORUM_FENCE; sleep 0.3; {BIN} status --node-timeout 1s --json r; {BIN} status r"
    );
    let out = output(run_sh(&c, &["--fence"], "r", &script));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let first: Vec<&str> = lines.next().unwrap().split(' ').collect();
    let (token, fence) = (first[0], first[1].parse::<u64>().unwrap());
    let held: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let held = &held[0];
    assert_eq!(held["verdict"], "held");
    assert_eq!(held["holder"]["kind"], "lock");
    assert_eq!(held["holder"]["token"], token);
    for node in held["nodes"].as_array().unwrap() {
        assert_eq!(node["state"], "held", "{node}");
        assert_eq!(node["fence"], fence, "{node}");
        let ttl = node["ttl_ms"].as_u64().unwrap();
        assert!(ttl > 20_000 && ttl <= 30_000, "{node}");
    }
    let human: Vec<&str> = lines.collect();
    assert!(
        human[0].starts_with(&format!("r: held by token {token} on 5/5 nodes")),
        "{human:?}"
    );
    assert!(
        human[1].contains(&format!("fencing counter {fence}")),
        "{human:?}"
    );

    // Split: two tokens on two nodes each, one node free.
    for (i, token) in [(0, "a"), (1, "a"), (2, "b"), (3, "b")] {
        command(c.port(i), &["SET", &key("s"), token, "PX", "30000"]).unwrap();
    }
    let (code1, split) = status_json(&c, "s");
    assert_eq!(code1, 0);
    assert_eq!(split["verdict"], "split");
    assert_eq!(split["holder"], Value::Null);
    let out = output(redquorum(&c, &["status", "s", "r"]));
    assert!(stdout(&out).starts_with("s: split"), "{}", stdout(&out));
    assert!(stdout(&out).contains("\nr: free"), "{}", stdout(&out));

    // Frozen nodes: an error each; fewer than a majority answering is 1.
    c.freeze(4);
    let (code2, one_frozen) = status_json(&c, "s");
    assert_eq!(code2, 0);
    assert_eq!(one_frozen["nodes"][4]["state"], "error");
    assert!(
        one_frozen["nodes"][4]["error"]
            .as_str()
            .unwrap()
            .contains("no answer within")
    );
    c.freeze(3);
    c.freeze(2);
    let (code3, _) = status_json(&c, "s");
    for i in [2, 3, 4] {
        c.thaw(i);
    }
    assert_eq!(code3, 1, "three of five frozen");
}

#[test]
fn release_by_token_clears_only_that_lock() {
    let c = servers();
    // A short TTL, so that its watchdog soon finds the lock gone.
    let mut holder = run_sh(
        &c,
        &["--ttl", "3s"],
        "r",
        "echo $REDQUORUM_TOKEN; exec sleep 30",
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let token = first_line(&mut holder);
    wait_for("held on every node", Duration::from_secs(5), || {
        holders(&c, &key("r")) == 5
    });
    // Another token: nothing changes, status 1.
    let wrong = "0".repeat(40);
    let out = output(redquorum(&c, &["release", "--token", &wrong, "r"]));
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing was changed"),
        "{}",
        stderr(&out)
    );
    for i in ALL {
        let value = command(c.port(i), &["GET", &key("r")]).unwrap();
        assert_eq!(
            value,
            Reply::Bulk(Some(token.clone().into_bytes())),
            "node {i}"
        );
    }
    // The right token: gone everywhere, and a waiting run gets it at once.
    let out = output(redquorum(
        &c,
        &["release", "--json", "--token", &token, "r"],
    ));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["cleared"], 5, "{report}");
    assert_eq!(holders(&c, &key("r")), 0);
    let out = output(run_sh(&c, &["--no-wait"], "r", "echo mine"));
    assert_eq!(stdout(&out).trim(), "mine");
    // The old holder finds its lock gone at its next renewal: its command
    // is stopped as for a lost lock.
    let out = holder.wait_with_output().unwrap();
    assert_eq!(code(&out), 76, "{}", stderr(&out));
    assert!(stderr(&out).contains("was lost"), "{}", stderr(&out));
}

/// `servers up`, `ls`, a run against it, and `down`, on ports of its own
/// and with its records in a temp dir of its own.
#[test]
fn a_local_set_of_servers_goes_up_and_down() {
    let tmp = TempDir::new("servers");
    let base = free_ports(3);
    let servers_cmd = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("servers")
            .args(args)
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let up = servers_cmd(&["up", "--nodes", "3", "--base-port", &base.to_string()]);
    let urls: Vec<String> = (base..base + 3)
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    assert!(
        up.contains(&format!("export REDQUORUM_NODES={}", urls.join(","))),
        "{up}"
    );
    let ls = servers_cmd(&["ls"]);
    assert_eq!(ls.matches(" up").count(), 3, "{ls}");
    let out = Command::new(BIN)
        .args(["run", "--nodes", &urls.join(","), "r", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // A second `up` of the same set finds it up and leaves it alone; one
    // of another size is refused.
    let again = servers_cmd(&["up", "--nodes", "3", "--base-port", &base.to_string()]);
    assert!(again.contains("is up already"), "{again}");
    let other = Command::new(BIN)
        // (`cluster`, the command's name before 0.2, is still understood.)
        .args([
            "cluster",
            "up",
            "--nodes",
            "2",
            "--base-port",
            &base.to_string(),
        ])
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    assert_eq!(code(&other), 2);
    assert!(stderr(&other).contains("has 3 nodes"), "{}", stderr(&other));
    assert_eq!(servers_cmd(&["ls"]).matches(" up").count(), 3);
    servers_cmd(&["down"]);
    for port in base..base + 3 {
        assert!(
            command(port, &["PING"]).is_err(),
            "port {port} still answers"
        );
    }
    assert!(servers_cmd(&["ls"]).contains("no local set of servers"));
}

/// `n` consecutive ports that are free now, below the range the kernel
/// hands out to other tests' servers (32768 and up); where the search
/// starts depends on the process, so that copies of this test running at
/// once look in different places.
fn free_ports(n: u16) -> u16 {
    let start = 20_000 + (std::process::id() % 120) as u16 * 97;
    'base: for base in (start..32_000).chain(20_000..start).step_by(97) {
        for port in base..base + n {
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue 'base;
            }
        }
        return base;
    }
    panic!("no {n} consecutive free ports")
}

/// A fresh directory, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("redquorum-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The nodes of `c` with a password they do not have.
fn wrong_password(c: &LocalServers) -> String {
    ALL.map(|i| format!("redis://:not-it@127.0.0.1:{}", c.port(i)))
        .join(",")
}

/// A closed stderr (`redquorum run … 2>&1 | head`, the reader gone) does
/// not kill the command's supervisor: what it would say is dropped, and it
/// exits with the status that applies (it panicked, exit 101, on its first
/// message).
#[test]
fn a_closed_stderr_does_not_end_a_run_early() {
    let c = servers();
    let mut holder = run_sh(&c, &[], "r", "echo held; exec sleep 30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut holder), "held");
    let mut refused = run_sh(&c, &["--no-wait"], "r", "echo ran")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(refused.stderr.take());
    let status = refused.wait().unwrap();
    assert_eq!(status.code(), Some(75), "{status:?}");
    signal(holder.id(), libc::SIGTERM);
    holder.wait().unwrap();
}

/// An outage is not contention: a wrong password, or nothing listening,
/// ends `run` at once with 69 (EX_UNAVAILABLE) and the reason, with or
/// without --wait, stderr not a terminal (as under cron); so do three of
/// five nodes frozen, at --wait. Two frozen and the lock held elsewhere is
/// contention: 75.
#[test]
fn an_outage_exits_69_and_contention_75() {
    let mut c = servers();
    let wrong = wrong_password(&c);
    for options in [&[][..], &["--no-wait"], &["--wait", "1h"]] {
        let started = Instant::now();
        let mut command = run_sh(&c, options, "r", "echo ran");
        command.env("REDQUORUM_NODES", &wrong);
        let out = output(command);
        assert_eq!(code(&out), 69, "{options:?}: {}", stderr(&out));
        assert!(stdout(&out).is_empty(), "the command never ran");
        assert!(
            stderr(&out).contains("authentication failed"),
            "{}",
            stderr(&out)
        );
        assert!(!stderr(&out).contains("not-it"), "{}", stderr(&out));
        assert!(started.elapsed() < Duration::from_secs(5), "{options:?}");
    }
    // Nothing listening on any node.
    let base = free_ports(3);
    let nowhere: Vec<String> = (base..base + 3)
        .map(|p| format!("redis://127.0.0.1:{p}"))
        .collect();
    let started = Instant::now();
    let mut command = run_sh(&c, &[], "r", "echo ran");
    command.env("REDQUORUM_NODES", nowhere.join(","));
    let out = output(command);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(stderr(&out).contains("refused"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(5));
    // Held elsewhere, two nodes frozen: contention.
    let mut holder = run_sh(&c, &[], "h", "echo held; exec sleep 60")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut holder), "held");
    wait_for("held on every node", Duration::from_secs(5), || {
        holders(&c, &key("h")) == 5
    });
    c.freeze(0);
    c.freeze(1);
    let out = output(run_sh(&c, &["--wait", "1s"], "h", "echo ran"));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    // Three frozen: an outage, held or not.
    c.freeze(2);
    for resource in ["h", "free"] {
        let out = output(run_sh(&c, &["--wait", "1s"], resource, "echo ran"));
        assert_eq!(code(&out), 69, "{resource}: {}", stderr(&out));
        let out = output(run_sh(&c, &["--no-wait"], resource, "echo ran"));
        assert_eq!(code(&out), 69, "{resource}: {}", stderr(&out));
    }
    for i in 0..3 {
        c.thaw(i);
    }
    signal(holder.id(), libc::SIGTERM);
    holder.wait().unwrap();
}

/// `--wait 1s` waits a second (it gave up after 10 ms, its node timeout
/// taken off); without --wait and without a terminal, the wait says now
/// and then what it waits for.
#[test]
fn a_wait_lasts_as_long_as_told_and_says_what_it_waits_for() {
    let c = servers();
    let mut holder = run_sh(&c, &[], "r", "echo held; exec sleep 60")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut holder), "held");
    let started = Instant::now();
    let out = output(run_sh(&c, &["--wait", "1s"], "r", "echo ran"));
    let waited = started.elapsed();
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    println!("--wait 1s: gave up after {waited:?}");
    assert!(waited >= Duration::from_secs(1), "waited {waited:?}");
    assert!(waited < Duration::from_secs(6), "waited {waited:?}");
    let mut waiter = run_sh(&c, &[], "r", "echo ran")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(waiter.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(
        line.starts_with("redquorum: still waiting for the lock on \"r\" after 5s; held by token"),
        "{line}"
    );
    assert!(!line.contains('\x1b'), "{line:?}");
    signal(waiter.id(), libc::SIGTERM);
    assert_eq!(waiter.wait().unwrap().code(), Some(128 + libc::SIGTERM));
    signal(holder.id(), libc::SIGTERM);
    holder.wait().unwrap();
}

/// A node of five down from the start holds nothing of the run's: the run
/// takes no longer and says nothing about it (it waited 3 s for it and
/// warned that keys could not be removed).
#[test]
fn a_dead_minority_node_costs_a_run_nothing() {
    let mut c = servers();
    c.kill(4);
    let started = Instant::now();
    let out = output(run_sh(&c, &[], "r", "echo ran"));
    let took = started.elapsed();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(stdout(&out), "ran\n");
    assert_eq!(stderr(&out), "", "took {took:?}");
    println!("a run with one node of five dead took {took:?}");
    assert!(took < Duration::from_secs(2), "took {took:?}");
}

/// `status … | head -1` and `servers ls | head`: the reader gone, the
/// command ends by SIGPIPE (the shell's 141), as `cat` does; no panic.
#[test]
fn output_cut_short_ends_quietly() {
    let c = servers();
    let tmp = TempDir::new("pipe");
    let resources: Vec<String> = (0..200).map(|i| format!("r{i}")).collect();
    let mut status = vec!["status"];
    status.extend(resources.iter().map(String::as_str));
    let mut ls = Command::new(BIN);
    ls.args(["servers", "ls"]).env("TMPDIR", tmp.path());
    for mut command in [redquorum(&c, &status), ls] {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{out:?}");
        assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    }
}

/// Logs carry no colour off a terminal, nor with NO_COLOR on one.
#[test]
fn logs_are_coloured_only_on_a_terminal_without_no_color() {
    let c = servers();
    let mut command = run_sh(&c, &[], "r", "true");
    command.env("RUST_LOG", "redquorum=debug");
    let out = output(command);
    assert_eq!(code(&out), 0);
    assert!(stderr(&out).contains("DEBUG"), "{}", stderr(&out));
    assert!(!stderr(&out).contains('\x1b'), "{:?}", stderr(&out));
    // On a terminal (script(1) gives one, where it is installed).
    let on_terminal = |no_color: bool| {
        let line = format!("{BIN} run r -- true; exit 0",);
        let mut script = Command::new("script");
        script
            .args(["-qec", &line, "/dev/null"])
            .env("REDQUORUM_NODES", c.urls().join(","))
            .env("RUST_LOG", "redquorum=debug")
            .stdin(Stdio::null());
        if no_color {
            script.env("NO_COLOR", "1");
        } else {
            script.env_remove("NO_COLOR");
        }
        script.output().ok().filter(|o| o.status.success())
    };
    let Some(coloured) = on_terminal(false) else {
        println!("no script(1): the terminal case is not checked");
        return;
    };
    assert!(has_sgr(&stdout(&coloured)), "{:?}", stdout(&coloured));
    let plain = on_terminal(true).unwrap();
    assert!(stdout(&plain).contains("DEBUG"), "{}", stdout(&plain));
    assert!(!has_sgr(&stdout(&plain)), "{:?}", stdout(&plain));
}

/// Whether `text` holds a colour escape (SGR: ESC [ digits and ; … m).
fn has_sgr(text: &str) -> bool {
    text.split("\x1b[").skip(1).any(|rest| {
        rest.trim_start_matches(|c: char| c.is_ascii_digit() || c == ';')
            .starts_with('m')
    })
}

/// The help's example of a local set of servers is a line that copies as is:
/// the long `export` line, wrapped, set an unexported variable.
#[test]
fn the_help_example_copies_as_is() {
    for columns in ["80", "100", "200"] {
        let out = Command::new(BIN)
            .arg("--help")
            .env("COLUMNS", columns)
            .output()
            .unwrap();
        let help = stdout(&out);
        assert!(
            help.lines()
                .any(|l| l.trim() == "eval \"$(redquorum servers up | grep ^export)\""),
            "{help}"
        );
        assert!(
            !help
                .lines()
                .any(|l| !l.trim().starts_with('#') && l.trim_end().ends_with("export")),
            "{help}"
        );
    }
}

/// Two `servers up`s on two port sets keep a state each: `ls` and `down`
/// take --base-port (or act on every set), and `up` on a set that is up
/// restarts its dead nodes, which are not declared born empty.
#[test]
fn two_port_sets_keep_their_own_state_and_dead_nodes_come_back() {
    let tmp = TempDir::new("sets");
    let servers_cmd = |args: &[&str]| {
        let out = Command::new(BIN)
            .arg("servers")
            .args(args)
            .env("TMPDIR", tmp.path())
            .output()
            .unwrap();
        assert_eq!(code(&out), 0, "{args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let a = free_ports(2);
    let b = free_ports_from(a + 2, 2);
    let (a_s, b_s) = (a.to_string(), b.to_string());
    let export = |base: u16| {
        let urls: Vec<String> = (base..base + 2)
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect();
        format!("export REDQUORUM_NODES={}", urls.join(","))
    };
    servers_cmd(&["up", "--nodes", "2", "--base-port", &a_s]);
    servers_cmd(&["up", "--nodes", "2", "--base-port", &b_s]);
    let ls = servers_cmd(&["ls"]);
    assert!(ls.contains(&export(a)) && ls.contains(&export(b)), "{ls}");
    assert_eq!(ls.matches(" up").count(), 4, "{ls}");
    let ls_a = servers_cmd(&["ls", "--base-port", &a_s]);
    assert!(
        ls_a.contains(&export(a)) && !ls_a.contains(&export(b)),
        "{ls_a}"
    );
    // A dead node of set a comes back with `up`, empty, not born empty.
    let pid = answering_pid(a + 1).unwrap();
    signal(pid, libc::SIGKILL);
    wait_for("the node dies", Duration::from_secs(5), || {
        answering_pid(a + 1).is_none()
    });
    assert!(servers_cmd(&["ls", "--base-port", &a_s]).contains(" down"));
    let up = servers_cmd(&["up", "--nodes", "2", "--base-port", &a_s]);
    assert!(up.contains("restarted 1 of the 2 nodes"), "{up}");
    assert!(answering_pid(a + 1).is_some_and(|p| p != pid));
    let born = |port| command(port, &["SCARD", "redquorum-born-empty"]).unwrap();
    assert_eq!(born(a), Reply::Int(1));
    assert_eq!(
        born(a + 1),
        Reply::Int(0),
        "a restarted node is not born empty"
    );
    assert_eq!(servers_cmd(&["ls"]).matches(" up").count(), 4);
    // Down one set, then the rest.
    servers_cmd(&["down", "--base-port", &a_s]);
    assert!(command(a, &["PING"]).is_err() && command(a + 1, &["PING"]).is_err());
    assert!(command(b, &["PING"]).is_ok());
    let ls = servers_cmd(&["ls"]);
    assert!(!ls.contains(&export(a)) && ls.contains(&export(b)), "{ls}");
    servers_cmd(&["down"]);
    assert!(command(b, &["PING"]).is_err());
    assert!(servers_cmd(&["ls"]).contains("no local set of servers"));
}

/// `n` consecutive free ports from `from` on.
fn free_ports_from(from: u16, n: u16) -> u16 {
    'base: for base in from..32_000 {
        for port in base..base + n {
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_err() {
                continue 'base;
            }
        }
        return base;
    }
    panic!("no {n} consecutive free ports from {from}")
}

/// Who holds it: `status` (text and JSON) and a refused run name the
/// holding run's program, pid, host and label.
#[test]
fn status_and_a_refused_run_name_the_holder() {
    let c = servers();
    let mut holder = run_sh(&c, &["--label", "nightly"], "r", "echo held; exec sleep 30")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(first_line(&mut holder), "held");
    let pid = holder.id();
    let named = format!("redquorum[{pid}] on ");
    // The record is written beside the lock, in the background.
    let mut text = String::new();
    wait_for("status names the holder", Duration::from_secs(5), || {
        text = stdout(&output(redquorum(&c, &["status", "r"])));
        text.contains(&named)
    });
    assert!(text.contains("taken by redquorum["), "{text}");
    assert!(text.contains("(nightly) since "), "{text}");
    let json = stdout(&output(redquorum(&c, &["status", "--json", "r"])));
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let taker = &value[0]["taken_by"][0];
    assert_eq!(taker["process"]["pid"], pid, "{json}");
    assert_eq!(taker["process"]["program"], "redquorum", "{json}");
    assert_eq!(taker["process"]["label"], "nightly", "{json}");
    assert_eq!(taker["id"].as_str().unwrap().len(), 12, "{json}");
    assert!(taker["since_ms"].as_u64().unwrap() > 0, "{json}");
    let out = output(run_sh(&c, &["--no-wait"], "r", "echo ran"));
    assert_eq!(code(&out), 75, "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("held by {named}")),
        "{}",
        stderr(&out)
    );
    signal(pid, libc::SIGTERM);
    holder.wait().unwrap();
}
