//! `redquorum`: flock(1) for a fleet. See `redquorum --help`, and the
//! README's "The redquorum command".
//!
//! * `args`: the command line, and the help that documents it;
//! * `run`: run a command under the lock;
//! * `inspect`: `status` and `release --token`, for operators;
//! * `elect`: run a command while leading an election, and `leader`;
//! * `servers`: a local set of `redis-server` processes.

/// `eprintln!` that never panics: a closed stderr (`redquorum run … 2>&1 |
/// head`) must not kill the process that supervises a command and keeps
/// its lock; what cannot be written is dropped.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// `eprint!` that never panics (see [`say!`]).
macro_rules! say_part {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

mod args;
mod elect;
mod inspect;
mod run;
mod servers;

use std::process::ExitCode;

use clap::Parser;
use redquorum::{ConfigError, Error, Redlock};

use args::{Cli, Command, Nodes};

/// Exit statuses of redquorum's own (see `redquorum help run`).
pub mod exit {
    /// Any other failure of redquorum itself.
    pub const FAILURE: u8 = 1;
    /// A bad option, duration or URL, or no nodes given.
    pub const USAGE: u8 = 2;
    /// Too few nodes could be reached for a majority (EX_UNAVAILABLE): an
    /// outage, not contention.
    pub const UNAVAILABLE: u8 = 69;
    /// The lock could not be acquired (EX_TEMPFAIL: try again later).
    pub const NOT_ACQUIRED: u8 = 75;
    /// The lock was lost while the command ran.
    pub const LOST: u8 = 76;
    /// The command could not be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The commands that print for a reader (`status … | head -1`) end
    // quietly when the reader has gone, killed by SIGPIPE as `cat` is
    // (the shell reports 141), instead of panicking on the closed pipe.
    // Not `run` and `elect`: they supervise a command and a lock, which a
    // closed stderr must not cut short.
    if !matches!(cli.command, Command::Run(_) | Command::Elect(_)) {
        // SAFETY: restores the default disposition, before any thread.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    tracing_subscriber::fmt()
        .with_ansi(colour())
        .with_env_filter(
            tracing_subscriber::EnvFilter::builder()
                .with_default_directive(tracing_subscriber::filter::LevelFilter::WARN.into())
                .from_env_lossy(),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return ExitCode::from(fail(exit::FAILURE, format!("cannot start: {e}"))),
    };
    let code = match cli.command {
        Command::Run(run) => runtime.block_on(run::run(run)),
        Command::Status(status) => runtime.block_on(inspect::status(status)),
        Command::Release(release) => runtime.block_on(inspect::release(release)),
        Command::Elect(args) => runtime.block_on(elect::elect(args)),
        Command::Leader(args) => runtime.block_on(elect::leader(args)),
        Command::Servers(servers) => servers::servers(servers),
    };
    ExitCode::from(code)
}

/// Whether logs are coloured: only on a terminal, and not when `NO_COLOR`
/// is set to anything but the empty string (<https://no-color.org>).
fn colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Prints `message` on stderr and returns `code`.
pub fn fail(code: u8, message: impl std::fmt::Display) -> u8 {
    say!("redquorum: {message}");
    code
}

/// The lock manager over the nodes given, or the exit status of a usage
/// error (its message printed). No URL is printed here: the library's
/// errors show them with their passwords taken out.
pub fn connect(nodes: &Nodes) -> Result<Redlock, u8> {
    let urls: Vec<&str> = nodes.nodes.iter().flat_map(|v| node_urls(v)).collect();
    if urls.is_empty() {
        return Err(fail(
            exit::USAGE,
            "no nodes given: pass --nodes redis://host:port,… or set REDQUORUM_NODES",
        ));
    }
    Redlock::builder()
        .nodes(&urls)
        .node_timeout(nodes.node_timeout)
        .build()
        .map_err(|e| {
            let code = usage_or_failure(&e);
            // A comma where the host is: a list of URLs some of which lack
            // their scheme, taken for one URL.
            let in_host = |u: &&str| {
                let rest = u.split_once("://").map_or(*u, |(_, rest)| rest);
                let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
                let host = authority
                    .rsplit_once('@')
                    .map_or(authority, |(_, host)| host);
                host.contains(',')
            };
            if matches!(e, Error::Config(ConfigError::InvalidUrl { .. }))
                && urls.iter().any(in_host)
            {
                say!(
                    "redquorum: a list of nodes is split only at a comma followed by a URL's \
                     scheme: give every URL its redis:// (or rediss://, unix://), or pass \
                     --nodes once per URL"
                );
            }
            code
        })
}

/// The node URLs in one value of `--nodes` (or `REDQUORUM_NODES`): a list
/// split at each comma that is followed by the next URL's scheme
/// (`redis://`, `rediss://`, `redis+unix://`, `unix://`, …) or ends the
/// list, and only there. A password may hold a comma
/// (`redis://:a,b@host:6379` is one URL): split at every comma, a list
/// would cut it in two and the message about the bad first half would show
/// half the password. None of a password's commas is followed by a scheme,
/// as a URL's password cannot hold `//` (a `/` in it is written `%2F`).
fn node_urls(value: &str) -> Vec<&str> {
    let mut urls = Vec::new();
    let mut start = 0;
    for (comma, _) in value.match_indices(',') {
        if next_url(&value[comma + 1..]) {
            urls.push(&value[start..comma]);
            start = comma + 1;
        }
    }
    urls.push(&value[start..]);
    urls.into_iter()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect()
}

/// Whether `rest`, what follows a comma, starts the next URL: a scheme
/// (a letter, then letters, digits, `+`, `-` or `.`) and `://`; or nothing
/// but blanks and more commas.
fn next_url(rest: &str) -> bool {
    let rest = rest.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
    let Some((scheme, _)) = rest.split_once("://") else {
        return rest.is_empty();
    };
    let mut chars = scheme.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// Prints `e`; a configuration mistake is a usage error.
pub fn usage_or_failure(e: &Error) -> u8 {
    let code = match e {
        Error::Config(_) => exit::USAGE,
        _ => exit::FAILURE,
    };
    fail(code, e)
}
