//! `redquorum run`: acquire, run the command with the lock kept alive,
//! release when it exits, and exit with its status.
//!
//! Signals: from the start, SIGINT, SIGTERM and SIGHUP are caught. While
//! waiting for the lock they end the wait (what was taken is rolled back)
//! and redquorum exits as if killed by them (128 + N); while the command
//! runs they are passed on to it, and the lock is released once it exits.
//! A failing lock stops the command's whole group: SIGTERM once no more
//! than `--kill-after` of it is left, then SIGKILL when it ends; a lock
//! lost outright gets SIGKILL at once. SIGKILL is never due later than the
//! lock's validity, whatever the command does meanwhile: what its shell
//! leaves running after exiting on SIGTERM keeps the deadline the shell
//! had, and is not given a fresh grace. And if redquorum itself is killed,
//! so is the command (on Linux): nothing would keep its lock alive.

use std::future::IntoFuture;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use redquorum::{Error, Held, Holding, Lock, Redlock};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::args::Run;
use crate::{connect, exit, fail};

/// "Without limit": longer than any machine runs.
pub const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How long, at the end, the release and the rollbacks may take before
/// redquorum exits anyway (the keys then expire at their TTL).
pub const DRAIN: Duration = Duration::from_secs(3);

/// A `--kill-after` that cannot work with the `--ttl`: the usage error.
fn check_kill_after(kill_after: Option<Duration>, ttl: Duration) -> Result<(), u8> {
    match kill_after {
        Some(kill_after) if kill_after > ttl / 2 => Err(fail(
            exit::USAGE,
            format!(
                "--kill-after {} is more than half the --ttl {}: the command is stopped once no \
                 more than --kill-after of the lock is left, and the lock is renewed every third \
                 of the TTL; give a shorter --kill-after or a longer --ttl",
                humantime::format_duration(kill_after),
                humantime::format_duration(ttl)
            ),
        )),
        _ => Ok(()),
    }
}

/// What a supervising command needs first: its options checked, the lock
/// manager over `nodes`, and the signals caught; or the exit status.
pub fn start(
    nodes: &crate::args::Nodes,
    kill_after: Option<Duration>,
    ttl: Duration,
) -> Result<(Redlock, Signals), u8> {
    check_kill_after(kill_after, ttl)?;
    let redlock = connect(nodes)?;
    let signals =
        Signals::new().map_err(|e| fail(exit::FAILURE, format!("cannot catch signals: {e}")))?;
    Ok((redlock, signals))
}

pub async fn run(args: Run) -> u8 {
    let (redlock, mut signals) = match start(&args.nodes, args.kill_after, args.ttl) {
        Ok(started) => started,
        Err(code) => return code,
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
        request
            .retries(u32::MAX)
            .wait(full_wait(args.wait, args.nodes.node_timeout))
    };
    if args.fence {
        request = request.fenced();
    }
    if let Some(owner) = &args.reentrant_owner {
        request = request.reentrant(owner.clone());
    }
    if let Some(permits) = args.permits {
        request = request.permits(permits);
    }
    if args.shared {
        request = request.shared();
    }
    request = request.label(label(args));
    let acquiring = request.into_future();
    let watching = async {
        if args.no_wait {
            return std::future::pending().await;
        }
        let what = format!("the lock on {:?}", args.resource);
        watch(redlock, &args.resource, &what, terminal(args)).await
    };
    let outcome = tokio::select! {
        outcome = acquiring => outcome,
        signal = signals.recv() => {
            clear_progress(args);
            return Err(128 + signal as u8);
        }
        outage = watching => {
            clear_progress(args);
            return Err(fail(
                exit::UNAVAILABLE,
                format!("could not lock {:?}: {outage}", args.resource),
            ));
        }
    };
    clear_progress(args);
    outcome.map_err(|e| {
        not_acquired(
            e,
            args.conflict_exit_code,
            format!("could not lock {:?}", args.resource),
        )
    })
}

/// The exit status of an acquisition (or a campaign) that failed with `e`,
/// its message printed: 2 for a usage error, 69 (EX_UNAVAILABLE) when too
/// few nodes could be reached for a majority (an outage, whatever else they
/// answered), else `conflict` (75 unless told otherwise: held elsewhere).
pub fn not_acquired(e: Error, conflict: u8, what: String) -> u8 {
    match e {
        Error::Config(_) => fail(exit::USAGE, e),
        e if e.is_unavailable() => fail(
            exit::UNAVAILABLE,
            format!("{what}: too few nodes available for a majority: {e}"),
        ),
        e => fail(conflict, format!("{what}: {e}")),
    }
}

/// The wait the library is given for `--wait D`: attempts may start until
/// D has passed, and the last one may take a node timeout more. (The
/// library's wait is a deadline for the whole call: given D, it would give
/// up a node timeout before D, at once for `--wait 1s` and the default
/// node timeout.) Without `--wait`, for ever.
pub fn full_wait(wait: Option<Duration>, node_timeout: Duration) -> Duration {
    wait.map_or(FOREVER, |wait| wait.saturating_add(node_timeout))
        .min(FOREVER)
}

/// The first time a wait without a terminal says what it waits for; then
/// after twice as long each time, at least every [`LOG_EVERY_MAX`].
pub const LOG_FIRST: Duration = Duration::from_secs(5);
/// The longest gap between two lines of a wait without a terminal.
pub const LOG_EVERY_MAX: Duration = Duration::from_secs(600);

/// While a lock (or leadership) is waited for: every second on a terminal,
/// a line rewritten in place (how long, who holds `resource` on how many
/// nodes, which nodes do not answer); without one, a line now and then
/// (after 5 s, 10 s, 20 s, … at least every 10 minutes), so that a cron
/// job's log says what it waits for. Resolves, with the reason, only when
/// no node at all can be reached, each refusing the connection or failing
/// for a reason waiting does not mend ([`outage`]): an outage is then
/// reported, not waited out in silence.
pub async fn watch(redlock: &Redlock, resource: &str, what: &str, terminal: bool) -> String {
    let start = Instant::now();
    let mut next_log = LOG_FIRST;
    let mut next_status = start;
    let mut holder = String::new();
    loop {
        if Instant::now() >= next_status {
            let status = redlock.status(resource).await;
            if let Some(outage) = outage(&status) {
                return outage;
            }
            holder = describe_holder(&status);
            // Every other second in the first minute, then less often.
            let every = if start.elapsed() < Duration::from_secs(60) {
                Duration::from_secs(2)
            } else {
                Duration::from_secs(10)
            };
            next_status = Instant::now() + every;
        }
        let waited = start.elapsed();
        if terminal {
            say_part!(
                "\r\x1b[2Kredquorum: waiting for {what}: {}s; {holder}",
                waited.as_secs()
            );
        } else if waited >= next_log {
            say!(
                "redquorum: still waiting for {what} after {}s; {holder}",
                waited.as_secs()
            );
            next_log = (next_log * 2).min(next_log + LOG_EVERY_MAX);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Why no node at all can be reached, if so: every node refused the
/// connection (nothing listens: a set of servers that is not running, a wrong
/// port) or failed for a reason waiting does not mend (credentials, an
/// unknown master, a host name that does not resolve). A mix with any node
/// that answers, or merely times out, is waited out.
fn outage(status: &redquorum::Status) -> Option<String> {
    let mut reasons = Vec::new();
    for (node, answer) in status.nodes() {
        match answer {
            Err(failure) if failure.is_refused() || failure.is_lasting() => {
                reasons.push(format!("{node}: {failure}"));
            }
            _ => return None,
        }
    }
    (!reasons.is_empty()).then(|| format!("no node can be reached ({})", reasons.join("; ")))
}

/// Whether the wait's progress is drawn on a terminal.
fn terminal(args: &Run) -> bool {
    !args.no_wait && std::io::stderr().is_terminal()
}

fn describe_holder(status: &redquorum::Status) -> String {
    let n = status.nodes().len();
    let failed: Vec<String> = status
        .nodes()
        .iter()
        .filter_map(|(node, answer)| answer.as_ref().err().map(|f| format!("{node}: {f}")))
        .collect();
    let unanswered = match failed.len() {
        0 => String::new(),
        k => format!("; {k} of {n} nodes do not answer ({})", failed.join("; ")),
    };
    let Some(holder) = status.holder() else {
        return format!("no holder on a majority of {n} nodes{unanswered}");
    };
    let on = status.held_by(holder).count();
    let left = status
        .held_by(holder)
        .filter_map(|s| s.ttl)
        .max()
        .unwrap_or_default();
    let who = match holder {
        // The permits held on a majority, not on the node that answered.
        Holding::Permits { permits, .. } => {
            format!("{} of {permits} permits", status.permits().len())
        }
        holder => format!("{holder:#}"),
    };
    let mut line = format!(
        "held by {who} on {on}/{n} nodes, {:.1}s left{unanswered}",
        left.as_secs_f64()
    );
    // Who took it, when its token says (see `Who`).
    if let [taker, rest @ ..] = &status.taken_by()[..] {
        line += &format!("; taken by {taker}");
        if !rest.is_empty() {
            line += &format!(" and {} more", rest.len());
        }
    }
    line
}

/// What this run's lock is labelled with: `--label`, or the command's name.
fn label(args: &Run) -> String {
    if let Some(label) = &args.label {
        return label.clone();
    }
    let command = args.command.first().map(std::path::Path::new);
    command
        .and_then(|c| c.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default()
}

fn clear_progress(args: &Run) {
    if terminal(args) {
        say_part!("\r\x1b[2K");
    }
}

/// What runs under a lock or a leadership: the command and its
/// environment, and how it is stopped when the lock fails.
pub struct Job<'a> {
    /// What holds the command, for messages: `the lock on "name"`.
    pub what: String,
    pub command: &'a [std::ffi::OsString],
    pub env: Vec<(&'static str, String)>,
    pub ttl: Duration,
    pub kill_after: Option<Duration>,
}

/// How a job ended.
pub enum Ended {
    /// The command could not be started: the exit status and the message.
    NotStarted(u8, String),
    /// It ran: its status, and whether the lock was lost (or about to be)
    /// while it ran.
    Ran {
        status: std::io::Result<ExitStatus>,
        lost: bool,
    },
}

impl Ended {
    /// The exit status it makes, once the lock is released.
    pub fn code(self, job: &Job<'_>, lost_exit_code: u8) -> u8 {
        match self {
            Ended::NotStarted(code, message) => fail(code, message),
            Ended::Ran { status: Err(e), .. } => {
                fail(exit::FAILURE, format!("lost track of the command: {e}"))
            }
            Ended::Ran { lost: true, .. } => fail(
                lost_exit_code,
                format!(
                    "{} was lost, or about to be, while the command ran",
                    job.what
                ),
            ),
            Ended::Ran {
                status: Ok(status), ..
            } => status_code(status),
        }
    }
}

/// Runs the command under `lock` and releases it when the command exits.
async fn supervise(mut lock: Lock, args: &Run, signals: &mut Signals) -> u8 {
    let mut env = vec![
        ("REDQUORUM_RESOURCE", args.resource.clone()),
        ("REDQUORUM_TOKEN", lock.token().to_owned()),
    ];
    if let Some(fence) = lock.fence() {
        env.push(("REDQUORUM_FENCE", fence.to_string()));
    }
    if let Some(owner) = &args.reentrant_owner {
        env.push(("REDQUORUM_OWNER", owner.clone()));
    }
    if let Some(permits) = args.permits {
        env.push(("REDQUORUM_PERMITS", permits.to_string()));
    }
    if args.shared {
        env.push(("REDQUORUM_SHARED", "1".to_owned()));
    }
    let job = Job {
        what: format!("the lock on {:?}", args.resource),
        command: &args.command,
        env,
        ttl: args.ttl,
        kill_after: args.kill_after,
    };
    let held = lock.keep_alive();
    let ended = run_job(&held, &job, signals).await;
    release(lock).await;
    ended.code(&job, args.lost_exit_code)
}

/// Runs `job`'s command while `held` holds, stopping it when it fails;
/// the caller releases.
pub async fn run_job(held: &Held, job: &Job<'_>, signals: &mut Signals) -> Ended {
    let (program, rest) = job.command.split_first().expect("clap requires a command");
    let mut command = tokio::process::Command::new(program);
    command.args(rest).envs(job.env.iter().map(|(k, v)| (k, v)));
    let terminal = foreground_terminal();
    prepare(&mut command, terminal);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            return Ended::NotStarted(code, format!("cannot run {program:?}: {e}"));
        }
    };
    // The command leads a process group of its own: signals and stops go
    // to everything it started (a shell's children too), and a terminal's
    // Ctrl-C reaches it once, from the terminal.
    let group = child.id().map_or(0, |p| p as libc::pid_t);
    if terminal {
        hand_terminal_to(group);
    }
    let kill_after = job
        .kill_after
        .unwrap_or_else(|| default_kill_after(job.ttl));
    // Once the lock is failing: when the group's SIGKILL is due (never
    // later than the lock's validity), and whether it has gone out.
    let mut kill_at: Option<tokio::time::Instant> = None;
    let mut killed = false;
    let status = loop {
        tokio::select! {
            biased;
            status = child.wait() => break status,
            // Lost outright (its validity over, its keys gone, or renewals
            // given up on): nothing protects the command any more.
            () = held.lost(), if !killed => {
                if kill_at.is_none() {
                    say!("redquorum: {} was lost: killing the command (SIGKILL)", job.what);
                }
                signal_group(group, libc::SIGKILL);
                kill_at = Some(tokio::time::Instant::now());
                killed = true;
            }
            // Renewals have been failing: stop the command while the lock
            // still holds, so that it is gone when the lock ends.
            () = running_low(held, kill_after), if kill_at.is_none() => {
                let left = held.remaining().min(kill_after);
                say!(
                    "redquorum: {} has less than --kill-after left (renewals are failing): \
                     stopping the command (SIGTERM, SIGKILL in {})",
                    job.what,
                    humantime::format_duration(Duration::from_millis(left.as_millis() as u64))
                );
                signal_group(group, libc::SIGTERM);
                signal_group(group, libc::SIGCONT);
                kill_at = Some(after(left));
            }
            () = sleep_until(kill_at), if !killed => {
                signal_group(group, libc::SIGKILL);
                killed = true;
            }
            signal = signals.recv() => signal_group(group, signal),
        }
    };
    // What the command left running in its group ends before the lock
    // does: the lock covers all of it. A SIGKILL due already stays due.
    if end_group(group, held, kill_at.unwrap_or_else(|| after(kill_after))).await {
        say!("redquorum: the command left processes running; they were stopped before the release");
    }
    if terminal {
        // SAFETY: a plain query of our own process group.
        hand_terminal_to(unsafe { libc::getpgrp() });
    }
    // A lock that ran out while the command was finishing counts as lost:
    // the command may have run its last part unprotected.
    Ended::Ran {
        status,
        lost: kill_at.is_some() || held.is_lost(),
    }
}

/// The default grace: a third of the TTL, at most ten seconds.
pub fn default_kill_after(ttl: Duration) -> Duration {
    (ttl / 3).min(Duration::from_secs(10))
}

/// Resolves once the lock has no more than `left` of validity left.
async fn running_low(held: &Held, left: Duration) {
    loop {
        let remaining = held.remaining();
        if remaining <= left {
            return;
        }
        // Renewals move the deadline: look again at least every second.
        tokio::time::sleep((remaining - left).min(Duration::from_secs(1))).await;
    }
}

/// Whether stdin is a terminal whose foreground is our process group: the
/// command then gets the terminal while it runs.
fn foreground_terminal() -> bool {
    // SAFETY: plain queries about our own process and fd 0.
    unsafe { libc::isatty(0) == 1 && libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Makes `group` the terminal's foreground process group; SIGTTOU, which a
/// background process gets for trying, is ignored meanwhile.
fn hand_terminal_to(group: libc::pid_t) {
    // SAFETY: signal dispositions and the terminal of our own process.
    unsafe {
        let old = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(0, group);
        libc::signal(libc::SIGTTOU, old);
    }
}

/// The command in a process group of its own (given the terminal if we
/// have it), and killed with redquorum: should redquorum die (SIGKILL, the
/// OOM killer), nothing keeps the lock alive, and the command must not run
/// on unprotected (Linux's parent-death signal; it reaches the command's
/// own process, not what that started). Orphans the command leaves are
/// ours to reap, so that [`end_group`] can wait for them.
fn prepare(command: &mut tokio::process::Command, terminal: bool) {
    command.process_group(0);
    #[cfg(target_os = "linux")]
    // SAFETY: a flag of our own process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
    }
    // SAFETY: between fork and exec only async-signal-safe calls run.
    let parent = unsafe { libc::getpid() };
    unsafe {
        command.pre_exec(move || {
            if terminal {
                hand_terminal_to(libc::getpid());
            }
            #[cfg(target_os = "linux")]
            {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // We died before the signal was set up: do not run at all.
                if libc::getppid() != parent {
                    return Err(std::io::Error::other("redquorum exited"));
                }
            }
            let _ = parent;
            Ok(())
        });
    }
}

/// Sends `signal` to every process of the command's group.
fn signal_group(group: libc::pid_t, signal: libc::c_int) {
    if group > 0 {
        // SAFETY: a signal to the process group our command leads; its
        // leader is our child, not yet reaped while we send, or the group
        // is empty (ESRCH).
        unsafe {
            libc::kill(-group, signal);
        }
    }
}

/// Once the command has exited: stops what is left of its group (SIGTERM,
/// then SIGKILL at `kill_at`, or as soon as the lock is lost if that comes
/// first), reaping the orphans that came to us. Says whether anything was
/// left.
async fn end_group(group: libc::pid_t, held: &Held, kill_at: tokio::time::Instant) -> bool {
    let alive = || {
        reap_orphans();
        // SAFETY: signal 0 only asks whether the group has members.
        group > 0 && unsafe { libc::kill(-group, 0) } == 0
    };
    if !alive() {
        return false;
    }
    signal_group(group, libc::SIGTERM);
    signal_group(group, libc::SIGCONT);
    let mut killed: Option<tokio::time::Instant> = None;
    while alive() {
        let now = tokio::time::Instant::now();
        match killed {
            None if now >= kill_at || held.is_lost() => {
                signal_group(group, libc::SIGKILL);
                killed = Some(now);
            }
            // A member that is not ours to reap (it was reparented
            // elsewhere) may linger as a zombie: do not wait for it for
            // ever.
            Some(at) if now.duration_since(at) >= Duration::from_secs(5) => break,
            _ => {}
        }
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(20)) => {}
            () = tokio::time::sleep_until(kill_at), if killed.is_none() => {}
            () = held.lost(), if killed.is_none() => {}
        }
    }
    true
}

/// Reaps the exited processes that were reparented to us.
fn reap_orphans() {
    loop {
        // SAFETY: waitpid on any child, without blocking; the command
        // itself was reaped already.
        let pid = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
        if pid <= 0 {
            return;
        }
    }
}

/// The shell's way of reporting a status: the exit code, or 128 + the
/// signal that killed it.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.wrapping_add(signal as u8),
        (None, None) => exit::FAILURE,
    }
}

pub async fn release(lock: Lock) {
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

/// `d` from now (a century at most: no machine runs that long).
fn after(d: Duration) -> tokio::time::Instant {
    tokio::time::Instant::now() + d.min(FOREVER)
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught from the start.
pub struct Signals {
    interrupt: Signal,
    terminate: Signal,
    hangup: Signal,
}

impl Signals {
    pub fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    /// The next signal caught.
    pub async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.interrupt.recv() => libc::SIGINT,
            _ = self.terminate.recv() => libc::SIGTERM,
            _ = self.hangup.recv() => libc::SIGHUP,
        }
    }
}
