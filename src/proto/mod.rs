//! What the layers say to each other: the commands a lock kind asks the
//! nodes to run, and the answers it reads back as votes.
//!
//! A [`Command`] is built once per operation, made [`Prepared`] (a
//! script's `EVALSHA` encoded once) and shared by every node in an `Arc`:
//! a plain command or a Lua [`Script`], plus its
//! [`Effect`] on the node's keys, which is all a node needs to know of it
//! (the restart guard records how long a key it granted may live, and
//! refuses acquisitions while it may have forgotten keys). A node runs the
//! command and hands back the raw reply; the kind turns that into an
//! [`Answer`]: a vote, and what it saw of another holder.
//!
//! [`quorum`] counts the answers.

pub(crate) mod gate;
pub(crate) mod quorum;
pub(crate) mod state;

use std::sync::Arc;
use std::time::Duration;

use crate::error::NodeFailure;
pub(crate) use gate::{Gate, Pass};
pub(crate) use state::LockState;
use state::TOKEN_BYTES;

/// The Redis keys of one lock: one for most kinds, several (sorted, without
/// duplicates) for a multi-resource lock. Built once per call, shared by
/// its attempts and by every command about them.
pub(crate) type Keys = Arc<[Box<str>]>;

/// Which lock: its keys and the attempt's token, and its record (see
/// [`state`]) with the gate its acquisition and extensions pass until its
/// removal begins. LockState by every request about it. A held lock keeps only
/// the record, and makes a `LockId` of it for each of its rounds.
#[derive(Debug)]
pub(crate) struct LockId {
    pub(crate) keys: Keys,
    /// The token in hex, as the commands carry it.
    token: [u8; 2 * TOKEN_BYTES],
    state: LockState,
}

impl LockId {
    /// A lock on `keys` (at least one) with a token of 20 random bytes,
    /// for tests that need no taker.
    #[cfg(test)]
    pub(crate) fn new(keys: Keys) -> Arc<LockId> {
        debug_assert!(!keys.is_empty());
        let state = LockState::new(&crate::who::fresh_bytes(), keys.first().map_or("", |k| k));
        Arc::new(LockId::of(state, keys))
    }

    /// A lock on `keys` (at least one) taken by `who`, with a fresh token:
    /// who took it and when (see [`who`](crate::who)), then 8 bytes from
    /// the operating system's CSPRNG. Not from a user-space generator: one
    /// seeded once per thread would hand the same tokens to both sides of
    /// a `fork` or to two VMs restored from one snapshot.
    pub(crate) fn by(keys: Keys, who: &crate::who::Id) -> Arc<LockId> {
        debug_assert!(!keys.is_empty());
        let token = crate::who::token(who, &crate::who::fresh_bytes());
        let state = LockState::new(&token, keys.first().map_or("", |k| k));
        Arc::new(LockId::of(state, keys))
    }

    /// The lock of the record `state`, on `keys`: a held lock's, for one
    /// of its rounds.
    pub(crate) fn of(state: LockState, keys: Keys) -> LockId {
        let mut token = [0u8; 2 * TOKEN_BYTES];
        // Cannot fail: the output is exactly twice the input.
        let _ = hex::encode_to_slice(state.token(), &mut token);
        LockId { keys, token, state }
    }

    /// The first key (the only one, but for a multi-resource lock): for
    /// logs.
    pub(crate) fn key(&self) -> &str {
        self.keys.first().map_or("", |k| k)
    }

    /// The token, 40 hex digits.
    pub(crate) fn token(&self) -> &str {
        // Hex digits are ASCII.
        std::str::from_utf8(&self.token).unwrap_or_default()
    }

    /// The lock's record.
    pub(crate) fn state(&self) -> &LockState {
        &self.state
    }

    /// The lock's gate.
    pub(crate) fn gate(&self) -> &Gate {
        &self.state.gate
    }
}

/// A command for every node: built once, shared by all of them.
#[derive(Debug)]
pub(crate) struct Command {
    pub(crate) call: Call,
    pub(crate) effect: Effect,
}

/// How a command is sent.
#[derive(Debug)]
pub(crate) enum Call {
    /// One plain command; the reply is its reply.
    Command(redis::Cmd),
    /// A Lua script, by `EVALSHA`, reloaded by `EVAL` on `NOSCRIPT`.
    Script {
        script: &'static Script,
        keys: Keys,
        args: Vec<Vec<u8>>,
    },
}

/// What a command may do to the keys on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// It may create a key living up to `life` (the TTL plus the drift
    /// allowance, on our clock). A node that may have forgotten keys gets
    /// no say on these.
    Grant { life: Duration },
    /// It may prolong a key it finds (compare-and-pexpire), never create one.
    Refresh { life: Duration },
    /// It may delete a key it finds.
    Remove,
    /// It neither creates nor prolongs a lock key (the fenced kind's counter
    /// write, which reads whether our key is there).
    Count,
}

impl Effect {
    /// How long a key this command touches may live on the node.
    pub(crate) fn life(self) -> Option<Duration> {
        match self {
            Effect::Grant { life } | Effect::Refresh { life } => Some(life),
            Effect::Remove | Effect::Count => None,
        }
    }
}

/// A command ready for every node, made once per operation and shared:
/// the call to send (a plain command, or a script's `EVALSHA`, encoded
/// once rather than once per node), and for a script what a node that
/// does not know it (`NOSCRIPT`) gets by `EVAL` instead.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) first: redis::Cmd,
    pub(crate) script: Option<ScriptCall>,
    pub(crate) effect: Effect,
    /// This command as a cluster grant sends it instead, so that its reply
    /// also names the primary that ran it: the `EVALSHA` of its script's
    /// twin (`net::topology::cluster::watched_call`), made once for every
    /// node that needs it.
    #[cfg(feature = "cluster")]
    pub(crate) watched: std::sync::OnceLock<redis::Cmd>,
}

/// A script and what it is called with.
#[derive(Debug)]
pub(crate) struct ScriptCall {
    pub(crate) script: &'static Script,
    pub(crate) keys: Keys,
    pub(crate) args: Vec<Vec<u8>>,
}

impl ScriptCall {
    /// `VERB` (`EVALSHA` or `EVAL`, for a node that does not have the
    /// script cached) of `script`, this call's or its
    /// [`twin`](Script::twin), with this call's keys and arguments.
    pub(crate) fn call_of(&self, verb: &str, script: &Script) -> redis::Cmd {
        script_call(verb, script.body(verb), &self.keys, &self.args)
    }
}

impl Prepared {
    pub(crate) fn new(command: Command) -> Arc<Prepared> {
        let (first, script) = match command.call {
            Call::Command(cmd) => (cmd, None),
            Call::Script { script, keys, args } => (
                script_call("EVALSHA", &script.sha1, &keys, &args),
                Some(ScriptCall { script, keys, args }),
            ),
        };
        Arc::new(Prepared {
            first,
            script,
            effect: command.effect,
            #[cfg(feature = "cluster")]
            watched: std::sync::OnceLock::new(),
        })
    }
}

/// `VERB body numkeys keys… args…`: `EVALSHA sha1 …` or `EVAL source …`,
/// encoded into a buffer sized for it at once.
pub(crate) fn script_call(
    verb: &str,
    body: &str,
    keys: &[Box<str>],
    args: &[Vec<u8>],
) -> redis::Cmd {
    encode_call(
        verb,
        body,
        keys.iter().map(|k| k.as_bytes()),
        args.iter().map(Vec::as_slice),
    )
}

/// [`script_call`] of any keys and arguments given as bytes.
pub(crate) fn encode_call<'a>(
    verb: &str,
    body: &str,
    keys: impl Iterator<Item = &'a [u8]> + Clone,
    args: impl Iterator<Item = &'a [u8]> + Clone,
) -> redis::Cmd {
    let (nkeys, nargs) = (keys.clone().count(), args.clone().count());
    let size = verb.len()
        + body.len()
        + 4
        + keys.clone().map(<[u8]>::len).sum::<usize>()
        + args.clone().map(<[u8]>::len).sum::<usize>();
    let mut cmd = redis::Cmd::with_capacity(3 + nkeys + nargs, size);
    cmd.arg(verb).arg(body).arg(nkeys);
    for key in keys {
        cmd.arg(key);
    }
    for arg in args {
        cmd.arg(arg);
    }
    cmd
}

/// A Lua script and its SHA1 digest, for `EVALSHA`.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) source: std::borrow::Cow<'static, str>,
    pub(crate) sha1: String,
    /// This script as the node layer wraps it, made the first time it is
    /// asked for ([`twin`](Script::twin)).
    #[cfg(feature = "cluster")]
    twin: std::sync::OnceLock<Box<Script>>,
}

impl Script {
    pub(crate) fn new(source: impl Into<std::borrow::Cow<'static, str>>) -> Script {
        let source = source.into();
        Script {
            sha1: sha1_smol::Sha1::from(&*source).digest().to_string(),
            source,
            #[cfg(feature = "cluster")]
            twin: std::sync::OnceLock::new(),
        }
    }

    /// What `VERB` names it by: its source for `EVAL`, its digest for
    /// `EVALSHA`.
    pub(crate) fn body(&self, verb: &str) -> &str {
        if verb == "EVAL" {
            &self.source
        } else {
            &self.sha1
        }
    }

    /// `SCRIPT LOAD source`: caches the script on a node without running it.
    pub(crate) fn load(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(&*self.source);
        cmd
    }

    /// The script `wrap` makes of this one's source, made once: the same
    /// `wrap` every time (there is one twin per script, the cluster
    /// guard's; this layer knows nothing of what it adds).
    #[cfg(feature = "cluster")]
    pub(crate) fn twin(&self, wrap: fn(&str) -> String) -> &Script {
        self.twin
            .get_or_init(|| Box::new(Script::new(wrap(&self.source))))
    }
}

/// One node's vote: agreed, or why not.
pub(crate) type Vote = Result<(), NodeFailure>;

/// One node's answer, as its lock kind reads it.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) vote: Vote,
    /// Another owner of the key, where the command asked who holds it.
    pub(crate) holder: Option<Holder>,
    /// The node deleted the key but refused to announce it (an ACL without
    /// `PUBLISH`): worth a warning, not a different vote.
    pub(crate) unannounced: bool,
    /// A number the node's yes carries: the fenced kind's counter, as the
    /// acquisition left it.
    pub(crate) counter: Option<u64>,
    /// What the node's yes granted, where a kind grants one of several
    /// things (the semaphore: which permit slot). Yes votes count toward a
    /// majority only with the other yes votes for the same grant.
    pub(crate) grant: Option<u32>,
}

/// Another owner of a key, as one node sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holder {
    /// The value of the key: the owner's token.
    pub(crate) token: Box<str>,
    /// How long the key has left on that node; `None` if it has no expiry.
    pub(crate) ttl: Option<Duration>,
}

impl From<Vote> for Answer {
    fn from(vote: Vote) -> Answer {
        Answer {
            vote,
            holder: None,
            unannounced: false,
            counter: None,
            grant: None,
        }
    }
}

/// Keys from names, for tests.
#[cfg(test)]
pub(crate) fn keys(names: &[&str]) -> Keys {
    names.iter().map(|&n| Box::from(n)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One taker for all: tokens differ by their random bytes alone.
    const WHO: crate::who::Id = [crate::who::MARK, 1, 2, 3, 4, 5];

    #[test]
    fn tokens_are_40_hex_digits_and_fresh() {
        let (a, b) = (
            LockId::by(keys(&["k"]), &WHO),
            LockId::by(keys(&["k"]), &WHO),
        );
        assert_eq!(a.token().len(), 40);
        assert!(a.token().bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.token(), b.token());
    }

    /// Both sides of a `fork` draw different tokens. A generator seeded once
    /// per thread would be copied into the child and give both the same
    /// next token.
    #[cfg(target_os = "linux")]
    #[test]
    fn tokens_differ_across_fork() {
        // Warm any per-thread generator up before the fork.
        let _ = LockId::by(keys(&["k"]), &WHO);
        let mut fds = [0i32; 2];
        // SAFETY: a valid array of two ints for pipe(2).
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only draws a token, writes it and `_exit`s.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let id = LockId::by(keys(&["k"]), &WHO);
            // SAFETY: writing 40 bytes from a live buffer to our pipe, then
            // leaving without running any destructor or atexit handler.
            unsafe {
                libc::write(fds[1], id.token().as_ptr().cast(), 40);
                libc::_exit(0);
            }
        }
        let ours = LockId::by(keys(&["k"]), &WHO);
        let mut theirs = [0u8; 40];
        // SAFETY: reading into a live 40-byte buffer; waiting for our child.
        unsafe {
            libc::close(fds[1]);
            assert_eq!(libc::read(fds[0], theirs.as_mut_ptr().cast(), 40), 40);
            libc::close(fds[0]);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_ne!(
            ours.token().as_bytes(),
            &theirs[..],
            "same token on both sides of fork"
        );
    }

    #[test]
    fn digests_are_sha1_of_the_source() {
        // Known vector: SHA1("abc").
        assert_eq!(
            Script::new("abc").sha1,
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }
}
