//! `redquorum`: flock(1) for a fleet. See `redquorum --help`, and the
//! README's "The redquorum command".
//!
//! * `args`: the command line, and the help that documents it;
//! * `run`: run a command under the lock;
//! * `inspect`: `status` and `release --token`, for operators;
//! * `cluster`: a local cluster of `redis-server` processes.

mod args;
mod cluster;
mod inspect;
mod run;

use std::process::ExitCode;

use clap::Parser;
use redquorum::{Error, Redlock};

use args::{Cli, Command, Nodes};

/// Exit statuses of redquorum's own (see `redquorum help run`).
pub mod exit {
    /// Any other failure of redquorum itself.
    pub const FAILURE: u8 = 1;
    /// A bad option, duration or URL, or no nodes given.
    pub const USAGE: u8 = 2;
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
    tracing_subscriber::fmt()
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
        Command::Cluster(cluster) => cluster::cluster(cluster),
    };
    ExitCode::from(code)
}

/// Prints `message` on stderr and returns `code`.
pub fn fail(code: u8, message: impl std::fmt::Display) -> u8 {
    eprintln!("redquorum: {message}");
    code
}

/// The lock manager over the nodes given, or the exit status of a usage
/// error (its message printed).
pub fn connect(nodes: &Nodes) -> Result<Redlock, u8> {
    let urls: Vec<&str> = nodes
        .nodes
        .iter()
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .collect();
    if urls.is_empty() {
        return Err(fail(
            exit::USAGE,
            "no nodes given: pass --nodes redis://host:port,… or set REDQUORUM_NODES",
        ));
    }
    Redlock::builder()
        .nodes(urls)
        .node_timeout(nodes.node_timeout)
        .build()
        .map_err(|e| usage_or_failure(&e))
}

/// Prints `e`; a configuration mistake is a usage error.
pub fn usage_or_failure(e: &Error) -> u8 {
    let code = match e {
        Error::Config(_) => exit::USAGE,
        _ => exit::FAILURE,
    };
    fail(code, e)
}
