//! `redquorum run`: acquire, run the command with the lock kept alive,
//! release when it exits, and exit with its status.
//!
//! Signals: from the start, SIGINT, SIGTERM and SIGHUP are caught. While
//! waiting for the lock they end the wait (what was taken is rolled back)
//! and redquorum exits as if killed by them (128 + N); while the command
//! runs they are passed on to it, and the lock is released once it exits.
//! A lost lock stops the command: SIGTERM, then SIGKILL after
//! `--kill-after`. And if redquorum itself is killed, so is the command
//! (on Linux): nothing would keep its lock alive.

use std::future::IntoFuture;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use redquorum::{Error, Holding, Lock, Redlock};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::Run;
use crate::{connect, exit, fail};

/// "Without limit": longer than any machine runs.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How long, at the end, the release and the rollbacks may take before
/// redquorum exits anyway (the keys then expire at their TTL).
const DRAIN: Duration = Duration::from_secs(3);

pub async fn run(args: Run) -> u8 {
    let redlock = match connect(&args.nodes) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => return fail(exit::FAILURE, format!("cannot catch signals: {e}")),
    };
    let code = match acquire(&redlock, &args, &mut signals).await {
        Ok(lock) => supervise(lock, &args, &mut signals).await,
        Err(code) => code,
    };
    if !redlock.drain(DRAIN).await {
        tracing::warn!("some lock keys could not be removed now and will expire at their TTL");
    }
    code
}

/// Takes the lock, waiting as the options say; on a terminal, shows who
/// holds it meanwhile.
async fn acquire(redlock: &Redlock, args: &Run, signals: &mut Signals) -> Result<Lock, u8> {
    let mut request = redlock.lock(&args.resource, args.ttl);
    request = if args.no_wait {
        request.retries(0)
    } else {
        request.retries(u32::MAX).wait(args.wait.unwrap_or(FOREVER))
    };
    if args.fence {
        request = request.fenced();
    }
    if let Some(owner) = &args.reentrant_owner {
        request = request.reentrant(owner.clone());
    }
    let acquiring = request.into_future();
    let progress = async {
        if args.no_wait || !std::io::stderr().is_terminal() {
            return std::future::pending().await;
        }
        show_progress(redlock, &args.resource).await
    };
    let outcome = tokio::select! {
        outcome = acquiring => outcome,
        signal = signals.recv() => {
            clear_progress(args);
            return Err(128 + signal as u8);
        }
        never = progress => match never {},
    };
    clear_progress(args);
    outcome.map_err(|e| match e {
        Error::Config(_) => fail(exit::USAGE, e),
        e => fail(
            args.conflict_exit_code,
            format!("could not lock {:?}: {e}", args.resource),
        ),
    })
}

/// A line on stderr, rewritten every second while waiting: how long, and
/// who holds the lock on how many nodes.
async fn show_progress(redlock: &Redlock, resource: &str) -> std::convert::Infallible {
    let start = Instant::now();
    let mut holder = String::new();
    for tick in 0u64.. {
        if tick % 2 == 0 {
            holder = describe_holder(&redlock.status(resource).await);
        }
        eprint!(
            "\r\x1b[2Kredquorum: waiting for {resource:?}: {}s; {holder}",
            start.elapsed().as_secs()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    unreachable!("the ticks do not run out")
}

fn describe_holder(status: &redquorum::Status) -> String {
    let n = status.nodes().len();
    let Some(holder) = status.holder() else {
        return format!("no holder on a majority of {n} nodes");
    };
    let on = status
        .nodes()
        .iter()
        .filter_map(|(_, s)| s.as_ref().ok())
        .filter(|s| s.lock.as_ref().is_some_and(|h| h.same_holder(holder)))
        .collect::<Vec<_>>();
    let left = on.iter().filter_map(|s| s.ttl).max().unwrap_or_default();
    let who = match holder {
        Holding::Token(token) => format!("token {}…", &token[..token.len().min(8)]),
        Holding::Reentrant { owner, .. } => format!("owner {owner:?}"),
        Holding::Other(kind) => format!("a {kind} key (not a lock)"),
        _ => "another holder".to_owned(),
    };
    format!(
        "held by {who} on {}/{n} nodes, {:.1}s left",
        on.len(),
        left.as_secs_f64()
    )
}

fn clear_progress(args: &Run) {
    if !args.no_wait && std::io::stderr().is_terminal() {
        eprint!("\r\x1b[2K");
    }
}

/// Runs the command under `lock` and releases it when the command exits.
async fn supervise(mut lock: Lock, args: &Run, signals: &mut Signals) -> u8 {
    let (program, rest) = args.command.split_first().expect("clap requires a command");
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .env("REDQUORUM_RESOURCE", &args.resource)
        .env("REDQUORUM_TOKEN", lock.token());
    if let Some(fence) = lock.fence() {
        command.env("REDQUORUM_FENCE", fence.to_string());
    }
    if let Some(owner) = &args.reentrant_owner {
        command.env("REDQUORUM_OWNER", owner);
    }
    die_with_us(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            release(lock).await;
            return fail(code, format!("cannot run {program:?}: {e}"));
        }
    };
    let pid = child.id().map(|p| p as libc::pid_t);
    let held = lock.keep_alive();
    let mut lost = false;
    let mut kill_at: Option<tokio::time::Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            () = held.lost(), if !lost => {
                lost = true;
                eprintln!(
                    "redquorum: the lock on {:?} was lost: stopping the command (SIGTERM, SIGKILL in {})",
                    args.resource,
                    humantime::format_duration(args.kill_after)
                );
                send(pid, libc::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + args.kill_after);
            }
            () = sleep_until(kill_at) => {
                send(pid, libc::SIGKILL);
                kill_at = None;
            }
            signal = signals.recv() => send(pid, signal),
        }
    };
    // A lock that ran out while the command was finishing counts as lost:
    // the command may have run its last part unprotected.
    lost |= lock.is_lost();
    release(lock).await;
    match status {
        Err(e) => fail(exit::FAILURE, format!("lost track of the command: {e}")),
        Ok(_) if lost => fail(
            args.lost_exit_code,
            format!(
                "the lock on {:?} was lost while the command ran",
                args.resource
            ),
        ),
        Ok(status) => status_code(status),
    }
}

/// Should redquorum die (SIGKILL, the OOM killer), nothing keeps the lock
/// alive and it soon moves on: the command must not run on unprotected, so
/// the kernel kills it with us (Linux's parent-death signal).
#[cfg(target_os = "linux")]
fn die_with_us(command: &mut tokio::process::Command) {
    // SAFETY: between fork and exec only async-signal-safe system calls run.
    let parent = unsafe { libc::getpid() };
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // We died before the signal was set up: do not run at all.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("redquorum exited"));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_us(_: &mut tokio::process::Command) {}

/// The shell's way of reporting a status: the exit code, or 128 + the
/// signal that killed it.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => exit::FAILURE,
    }
}

async fn release(lock: Lock) {
    let resource = lock.resource().to_owned();
    // A lost lock has been reported already.
    if let Err(e) = lock.release().await
        && !matches!(
            e,
            Error::Expired { .. } | Error::Taken { .. } | Error::ReleasedLate { .. }
        )
    {
        tracing::warn!(%resource, error = %e, "release failed: the lock expires at its TTL");
    }
}

fn send(pid: Option<libc::pid_t>, signal: libc::c_int) {
    if let Some(pid) = pid {
        // SAFETY: a signal to our own child, which has not been reaped (we
        // are still waiting for it), so the pid is still its.
        unsafe {
            libc::kill(pid, signal);
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught from the start.
struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal caught.
    async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}
