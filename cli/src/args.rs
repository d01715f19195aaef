//! The command line: what `redquorum --help` and each command's `--help`
//! say, read like a man page.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::exit;

/// flock(1) for a fleet: run a command on one machine at a time, with a
/// lock held on a majority of independent Redis (or Valkey) nodes.
#[derive(Debug, Parser)]
#[command(
    name = "redquorum",
    version,
    after_long_help = AFTER_HELP,
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

const AFTER_HELP: &str = "\
NODES:
  Every command but `servers` talks to the nodes given by --nodes (once per
  URL, or once with a comma-separated list), else by the REDQUORUM_NODES
  environment variable (a comma-separated list): URLs
  redis://[user:password@]host:port[/db], rediss:// for TLS,
  redis+unix:///path/to.sock, or a Sentinel-managed primary,
  redis+sentinel://[user:password@]host1:port1,host2:port2/<master-name>
  (its password the data nodes', ?sentinel_password=... the sentinels').
  A list is split only at a comma followed by a
  URL's scheme (redis://, rediss://, unix://, ...): a comma in a password is
  kept in it, and every URL of a list needs its scheme. No password is ever
  printed, in any message. Use three or five independent nodes (not replicas
  of one another).

EXAMPLES:
  # Once a night, on whichever machine gets there first; the others skip it.
  redquorum run --no-wait nightly-backup -- /usr/local/bin/backup.sh

  # A migration that must never run twice at once, waiting up to 5 minutes.
  redquorum run --wait 5m --ttl 1m schema-migration -- ./migrate up

  # Who holds it, and what each node says.
  redquorum status nightly-backup

  # One scheduler across the fleet: the others wait to take over; each
  # leader's writes carry $REDQUORUM_TERM.
  redquorum elect --id \"$(hostname)\" --again scheduler -- ./scheduler
  redquorum leader --watch scheduler

  # Try it locally: five redis-server processes on ports 7001-7005, their
  # URLs exported for the commands above (`servers up` prints the line to
  # export; `servers ls` prints it again).
  eval \"$(redquorum servers up | grep ^export)\"

LOGS:
  Warnings go to stderr, coloured only on a terminal and without NO_COLOR;
  RUST_LOG=redquorum=debug shows every vote. Output cut short by its reader
  (`redquorum status ... | head -1`) ends the command quietly, by SIGPIPE
  (the shell's status 141), as it does `cat`.

See `redquorum help run` for the exit statuses.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding the lock on a resource.
    #[command(long_about = RUN_ABOUT, after_long_help = RUN_AFTER)]
    Run(Run),
    /// Show what every node holds for resources, and whether a majority
    /// agrees.
    #[command(long_about = STATUS_ABOUT)]
    Status(Status),
    /// Clear a stale lock by its token (compare-and-delete, never a blind
    /// delete).
    #[command(long_about = RELEASE_ABOUT)]
    Release(Release),
    /// Run a command while this process leads an election.
    #[command(long_about = ELECT_ABOUT, after_long_help = ELECT_AFTER)]
    Elect(Elect),
    /// Show who leads an election, as a majority of nodes agrees, or watch
    /// it change.
    #[command(long_about = LEADER_ABOUT)]
    Leader(LeaderArgs),
    /// Start, stop or list a local set of redis-server processes, for
    /// trying things out.
    #[command(subcommand, long_about = SERVERS_ABOUT, alias = "cluster")]
    Servers(Servers),
}

/// Where the nodes are.
#[derive(Debug, Args)]
pub struct Nodes {
    /// The nodes: redis://, rediss:// or redis+sentinel:// URLs, comma-separated, or --nodes
    /// once per URL. A list is split only at a comma followed by a URL's
    /// scheme, so a comma in a password is kept.
    #[arg(
        long,
        value_name = "URLS",
        env = "REDQUORUM_NODES",
        hide_env_values = true
    )]
    pub nodes: Vec<String>,
    /// The per-node timeout of each request: a node slower than this counts
    /// as a no for that request. A command makes its first requests from a
    /// fresh process, so connecting to the node (TCP, TLS, AUTH) counts
    /// against it.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration)]
    pub node_timeout: Duration,
}

const RUN_ABOUT: &str = "\
Run a command while holding the lock on RESOURCE.

redquorum acquires the lock (waiting while another holder has it), starts the
command with stdin, stdout and stderr passed through, keeps the lock alive for
as long as the command runs, releases it when the command exits, and exits
with the command's own status.

The command gets these environment variables:
  REDQUORUM_RESOURCE  the resource
  REDQUORUM_TOKEN     the lock's token (what `redquorum status` shows, and
                      what `redquorum release --token` takes)
  REDQUORUM_FENCE     with --fence: the fencing token, a number greater than
                      that of every earlier holder of the resource. Pass it
                      to the storage you write to, and have it refuse a
                      smaller one than it has seen.
  REDQUORUM_OWNER     with --reentrant-owner: the owner id
  REDQUORUM_PERMITS   with --permits: K
  REDQUORUM_SHARED    with --shared: 1

The command runs in a process group of its own (given the terminal, if
redquorum has it). If renewing the lock keeps failing until no more than
--kill-after of it is left (a majority of nodes unreachable), or the lock is
lost outright (its keys deleted, or this process paused past its TTL), the
whole group is stopped and redquorum exits with 76: SIGTERM, then SIGKILL
when the lock's validity ends (--kill-after later at most), or SIGKILL at
once for a lock lost outright. SIGINT, SIGTERM and SIGHUP sent to redquorum
are passed on to the group. When the command exits, whatever it left running
in its group is stopped before the lock is released: SIGTERM, then SIGKILL
after --kill-after, or sooner, when the lock's validity ends (what outlives a
command stopped for a failing lock gets no fresh grace). If redquorum itself is
killed, the kernel kills the command's own process with it (Linux), though
not what that started: nothing would keep the lock alive.

A lock is only as good as its assumptions: clocks that drift little, and
nodes that do not restart empty within a TTL. A command paused past its TTL
can still act after the lock moved on; where that matters, use --fence and
have the storage check the token.";

const RUN_AFTER: &str = "\
EXIT STATUS:
  N     the command's own exit status
  128+N the command was killed by signal N; or redquorum got signal N while
        waiting for the lock, and gave up
  2     usage: a bad option, duration or URL, or no nodes given
  69    the nodes are unavailable (EX_UNAVAILABLE): too few could be reached
        for a majority (down, frozen, refusing the connection or the
        password, an unknown Sentinel master, a host name that does not
        resolve), whatever the others answered. Reasons waiting does not
        mend (credentials, ACL, an unknown master, DNS; or no node
        listening at all) end the wait at once; others end it at --wait
  75    the lock is held elsewhere (EX_TEMPFAIL): past --wait, or at all
        with --no-wait (--conflict-exit-code)
  76    the lock was lost, or about to be, while the command ran; the
        command was stopped (--lost-exit-code)
  126   the command could not be executed
  127   the command was not found
  1     any other failure of redquorum itself";

#[derive(Debug, Args)]
pub struct Run {
    #[command(flatten)]
    pub nodes: Nodes,
    /// How long the lock lives without being renewed. It is renewed every
    /// third of it while the command runs, so it only matters when this
    /// process dies or is cut off from the nodes: then the lock is free
    /// again after at most this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    pub ttl: Duration,
    /// How long to wait for the lock while another holder has it (or the
    /// nodes are unavailable): no attempt starts after it; the last one,
    /// and its rollback, may take up to twice --node-timeout more. Waits without limit if not
    /// given; without a terminal, says now and then what it waits for.
    #[arg(long, value_name = "DURATION", value_parser = duration, conflicts_with = "no_wait")]
    pub wait: Option<Duration>,
    /// Try once, and give up at once if the lock is held.
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// Take a fenced lock: the command gets REDQUORUM_FENCE.
    #[arg(long, conflicts_with = "reentrant_owner")]
    pub fence: bool,
    /// Take a reentrant hold for this owner id: another run with the same
    /// owner (a nested step of the same job) gets the lock while this one
    /// holds it.
    #[arg(long, value_name = "ID")]
    pub reentrant_owner: Option<String>,
    /// Take one of K permits of a semaphore: up to K runs on RESOURCE hold
    /// it at once (every run must give the same K).
    #[arg(long, value_name = "K", conflicts_with_all = ["fence", "reentrant_owner"])]
    pub permits: Option<u32>,
    /// Take a reader's share of a read-write lock: any number of --shared
    /// runs on RESOURCE hold it at once; a run without it is the writer,
    /// which excludes them (and turns new readers away while it waits).
    #[arg(long, conflicts_with_all = ["fence", "reentrant_owner", "permits"])]
    pub shared: bool,
    /// How long the command has to exit after SIGTERM before it gets
    /// SIGKILL, when the lock is failing: SIGTERM goes out once renewals
    /// have failed until no more than this is left of the lock, and SIGKILL
    /// when the lock ends, so that the command's whole group is gone before
    /// the lock is. Also the grace of what the command leaves running when
    /// it exits [default: a third of --ttl, at most 10s; at most half of
    /// --ttl].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub kill_after: Option<Duration>,
    /// What `status`, and a run that waits, show beside this run's host,
    /// pid and program as the lock's taker [default: the command's name].
    #[arg(long, value_name = "TEXT")]
    pub label: Option<String>,
    /// The exit status when the lock could not be acquired.
    #[arg(long, value_name = "N", default_value_t = exit::NOT_ACQUIRED)]
    pub conflict_exit_code: u8,
    /// The exit status when the lock was lost while the command ran.
    #[arg(long, value_name = "N", default_value_t = exit::LOST)]
    pub lost_exit_code: u8,
    /// The resource to lock: any name the fleet agrees on.
    pub resource: String,
    /// The command to run, and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

const STATUS_ABOUT: &str = "\
Show what every node holds for each RESOURCE: whether it holds a lock, whose
(the token; for reentrant holds the owner and each hold), who took it (the
program, pid, host and label of a redquorum client, and since when), how long
the key has left, and the resource's fencing counter; then whether a majority of
nodes agrees on one holder (held), on no lock (free), or on neither (split:
a lock being taken or lost, or a node that restarted empty), or unknown
when fewer than a majority of nodes answered.

Exit status: 0, or 1 if fewer than a majority of nodes answered for some
resource; 2 for usage errors.";

#[derive(Debug, Args)]
pub struct Status {
    #[command(flatten)]
    pub nodes: Nodes,
    /// Print JSON (an array, one object per resource) instead of text.
    #[arg(long)]
    pub json: bool,
    /// The resources to look at.
    #[arg(required = true)]
    pub resources: Vec<String>,
}

const RELEASE_ABOUT: &str = "\
Clear the lock on RESOURCE that holds TOKEN, on every node: for an operator
who knows that lock is stale (its holder died, and waiting out its TTL is not
an option). Compare-and-delete: a key holding another token is left alone, so
a lock taken since is never touched. For reentrant holds TOKEN names one
hold, and the lock goes with the last one. Waiters are woken.

Clearing a live holder's lock takes it away from that holder: it finds out at
its next renewal, and may act meanwhile.

Exit status: 0 if the lock was cleared on at least one node; 1 if it was
cleared on none (TOKEN held it on no node that answered); 2 for usage
errors.";

#[derive(Debug, Args)]
pub struct Release {
    #[command(flatten)]
    pub nodes: Nodes,
    /// The token of the lock to clear, as `redquorum status` shows it.
    #[arg(long, required = true)]
    pub token: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// The resource.
    pub resource: String,
}

const ELECT_ABOUT: &str = "\
Campaign for leadership of the election NAME as the candidate --id, run the
command while leading, and resign when it exits (exiting with its status).

Candidates wait in a queue: a resignation hands leadership on at once, and a
leader that dies without resigning is replaced once its key expires (at most
--ttl after its last renewal). Every leader has a term, greater than every
earlier leader's; `redquorum leader NAME` shows who leads.

The command gets these environment variables:
  REDQUORUM_ELECTION  the election's name
  REDQUORUM_ID        the candidate's id
  REDQUORUM_TERM      the term. Pass it with every write the leader makes,
                      and have the storage refuse a smaller one than it has
                      seen: a leader paused past its TTL may still write
                      after the next one was elected.

The command is stopped when leadership fails, as `redquorum run` stops a
command whose lock fails (see `redquorum help run`): SIGTERM once renewals
have failed until no more than --kill-after is left, SIGKILL when leadership
ends. With --again, redquorum then campaigns again and starts the command
anew when it leads again; without it, it exits with 76.";

const ELECT_AFTER: &str = "\
EXIT STATUS:
  N     the command's own exit status
  128+N the command was killed by signal N; or redquorum got signal N while
        campaigning, and gave up
  2     usage: a bad option, duration or URL, or no nodes given
  69    the nodes are unavailable: too few could be reached for a majority
        (as for `redquorum run`)
  75    not elected within --wait (--conflict-exit-code)
  76    leadership was lost, or about to be, while the command ran, and
        --again was not given (--lost-exit-code)
  126   the command could not be executed
  127   the command was not found
  1     any other failure of redquorum itself";

#[derive(Debug, Args)]
pub struct Elect {
    #[command(flatten)]
    pub nodes: Nodes,
    /// This candidate's id, shown to everyone as the leader's (a host or pod
    /// name).
    #[arg(long, value_name = "ID", env = "REDQUORUM_ID")]
    pub id: String,
    /// A value to publish with the leadership (an address, say), shown by
    /// `redquorum leader`.
    #[arg(long, value_name = "VALUE")]
    pub value: Option<String>,
    /// How long leadership lives without being renewed (renewed every third
    /// of it): when this process dies or is cut off, another candidate
    /// leads after at most this long.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = duration)]
    pub ttl: Duration,
    /// How long to campaign at most; without limit if not given.
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub wait: Option<Duration>,
    /// When leadership is lost while the command runs: campaign again, and
    /// start the command anew when leading again.
    #[arg(long)]
    pub again: bool,
    /// As for `redquorum run`: the command's grace after SIGTERM when
    /// leadership is failing [default: a third of --ttl, at most 10s; at
    /// most half of --ttl].
    #[arg(long, value_name = "DURATION", value_parser = duration)]
    pub kill_after: Option<Duration>,
    /// The exit status when not elected within --wait.
    #[arg(long, value_name = "N", default_value_t = exit::NOT_ACQUIRED)]
    pub conflict_exit_code: u8,
    /// The exit status when leadership was lost while the command ran.
    #[arg(long, value_name = "N", default_value_t = exit::LOST)]
    pub lost_exit_code: u8,
    /// The election: any name the candidates agree on.
    pub name: String,
    /// The command to run while leading, and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "COMMAND")]
    pub command: Vec<std::ffi::OsString>,
}

const LEADER_ABOUT: &str = "\
Show who leads the election NAME, as a majority of nodes agrees: its id, term,
published value, and how long its leadership lasts unless renewed; or that
there is no leader. With --watch, print a line at every change (every new
leadership, in term order, even one that began and ended between two reads; a
new value; no leader), pushed by the nodes and polled every --every, until
interrupted; and a line that says so where leaderships between two terms may
have been missed (nodes down, or the nodes' history of them dropped): with
--json, {\"name\": ..., \"skipped\": {\"after\": A, \"before\": B}}.

Exit status: 0; 1 if no majority of nodes agrees either way (nodes down, a
campaign half-way); 2 for usage errors.";

#[derive(Debug, Args)]
pub struct LeaderArgs {
    #[command(flatten)]
    pub nodes: Nodes,
    /// Print JSON (one object per line) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print every change until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: how often to read the election when no change is heard.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = duration)]
    pub every: Duration,
    /// The election.
    pub name: String,
}

const SERVERS_ABOUT: &str = "\
Start, list and stop a local set of redis-server processes on 127.0.0.1,
for trying redquorum out (the launcher the tests use). Each node runs without
persistence, in a directory of its own under the system's temp dir, until
`servers down`. redis-server must be installed (or named by
REDQUORUM_REDIS_SERVER).

Each `servers up --base-port P` is a set of its own, named by P: `ls` and
`down` act on the set given by --base-port, or on every set. `servers up` on
a set that is up already restarts its nodes that are down, on their ports;
a restarted node is empty, so clients' restart guard gives it no vote on
acquisitions for a TTL, as it would a production node that restarted.";

#[derive(Debug, Subcommand)]
pub enum Servers {
    /// Start nodes on consecutive ports and print their URLs.
    Up(ServersUp),
    /// Stop the nodes `servers up` started: one set's, or every set's.
    Down(ServersSet),
    /// List the nodes `servers up` started, and whether each answers: one
    /// set's, or every set's.
    Ls(ServersSet),
}

#[derive(Debug, Args)]
pub struct ServersSet {
    /// The set started with this --base-port; every set if not given.
    #[arg(long)]
    pub base_port: Option<u16>,
}

#[derive(Debug, Args)]
pub struct ServersUp {
    /// How many nodes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..=99))]
    pub nodes: u16,
    /// The first node's port; the others follow it. Names the set.
    #[arg(long, default_value_t = 7001)]
    pub base_port: u16,
}

/// Parses `30s`, `5m`, `250ms`, `1h 30m`.
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}: write a duration like 30s, 5m, 250ms or 1h30m"))
}
