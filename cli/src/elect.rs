//! `redquorum elect`: campaign, run the command while leading, resign when
//! it exits; and `redquorum leader`: who leads, once or as it changes.
//!
//! The command runs under the leadership exactly as `run` runs one under a
//! lock (`run::run_job`): stopped when leadership fails, SIGKILL no later
//! than its validity. With `--again`, a leadership lost while the command
//! ran is campaigned for anew, and the command started again when this
//! process leads again.

use std::future::IntoFuture;
use std::time::Duration;

use redquorum::{Error, Leader, Leadership, Observed, Redlock};
use serde_json::{Value, json};

use crate::args::{Elect, LeaderArgs};
use crate::run::{self, Ended, Job, Signals};
use crate::{connect, exit, fail};

pub async fn elect(args: Elect) -> u8 {
    let (redlock, mut signals) = match run::start(&args.nodes, args.kill_after, args.ttl) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let code = loop {
        let leadership = match campaign(&redlock, &args, &mut signals).await {
            Ok(leadership) => leadership,
            Err(code) => break code,
        };
        say!(
            "redquorum: leading {:?} as {:?}, term {}",
            args.name,
            args.id,
            leadership.term()
        );
        let job = Job {
            what: format!("the leadership of {:?}", args.name),
            command: &args.command,
            env: vec![
                ("REDQUORUM_ELECTION", args.name.clone()),
                ("REDQUORUM_ID", args.id.clone()),
                ("REDQUORUM_TERM", leadership.term().to_string()),
            ],
            ttl: args.ttl,
            kill_after: args.kill_after,
        };
        let ended = run::run_job(&leadership.held(), &job, &mut signals).await;
        let lost = matches!(ended, Ended::Ran { lost: true, .. });
        resign(leadership).await;
        let code = ended.code(&job, args.lost_exit_code);
        if !(lost && args.again) {
            break code;
        }
        say!("redquorum: campaigning for {:?} again", args.name);
    };
    if !redlock.drain(run::DRAIN).await {
        tracing::warn!("some keys could not be removed now and will expire at their TTL");
    }
    code
}

/// Campaigns until this process leads, the wait runs out, or a signal.
async fn campaign(
    redlock: &Redlock,
    args: &Elect,
    signals: &mut Signals,
) -> Result<Leadership, u8> {
    let mut campaign = redlock
        .campaign(&args.name, args.id.clone(), args.ttl)
        .value(args.value.clone().unwrap_or_default());
    if let Some(wait) = args.wait {
        campaign = campaign.wait(run::full_wait(Some(wait), args.nodes.node_timeout));
    }
    let what = format!("the leadership of {:?}", args.name);
    let outcome = tokio::select! {
        outcome = campaign.into_future() => outcome,
        signal = signals.recv() => return Err(128 + signal as u8),
        outage = run::watch(redlock, &args.name, &what, false) => {
            return Err(fail(
                exit::UNAVAILABLE,
                format!("not elected for {:?}: {outage}", args.name),
            ));
        }
    };
    outcome.map_err(|e| {
        run::not_acquired(
            e,
            args.conflict_exit_code,
            format!("not elected for {:?}", args.name),
        )
    })
}

async fn resign(leadership: Leadership) {
    let name = leadership.name().to_owned();
    if let Err(e) = leadership.resign().await
        && !matches!(
            e,
            Error::Expired { .. } | Error::Taken { .. } | Error::ReleasedLate { .. }
        )
    {
        tracing::warn!(election = %name, error = %e, "resigning failed: the leadership expires at its TTL");
    }
}

pub async fn leader(args: LeaderArgs) -> u8 {
    let redlock = match connect(&args.nodes) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    if !args.watch {
        return match redlock.leader(&args.name).await {
            Ok(leader) => {
                show(&args, leader.as_ref());
                0
            }
            Err(e) => {
                if args.json {
                    println!(
                        "{}",
                        json!({"name": args.name, "leader": Value::Null, "unknown": e.to_string()})
                    );
                }
                fail(
                    exit::FAILURE,
                    format!("{:?}: no majority agrees: {e}", args.name),
                )
            }
        };
    }
    let mut signals = match Signals::new() {
        Ok(signals) => signals,
        Err(e) => return fail(exit::FAILURE, format!("cannot catch signals: {e}")),
    };
    let mut observer = redlock.observe(&args.name).every(args.every);
    loop {
        tokio::select! {
            change = observer.next() => match change {
                Some(Observed::Skipped { after, before }) => skipped(&args, after, before),
                Some(item) => show(&args, item.leader()),
                None => return fail(exit::FAILURE, "the observer stopped"),
            },
            _ = signals.recv() => return 0,
        }
    }
}

/// One line for leaderships that may have been missed between the terms
/// `after` and `before`: text, or a JSON object.
fn skipped(args: &LeaderArgs, after: u64, before: u64) {
    if args.json {
        println!(
            "{}",
            json!({"name": args.name, "skipped": {"after": after, "before": before}})
        );
    } else {
        println!(
            "{}: leaderships between terms {after} and {before} may have been missed (their history could not be read)",
            args.name
        );
    }
}

/// One line: text, or a JSON object.
fn show(args: &LeaderArgs, leader: Option<&Leader>) {
    if args.json {
        let leader = leader.map_or(Value::Null, |l| {
            json!({
                "identity": l.identity,
                "value": l.value,
                "term": l.term,
                "proclamation": l.proclamation,
                "expires_in_ms": l.expires_in.as_millis() as u64,
            })
        });
        println!("{}", json!({"name": args.name, "leader": leader}));
        return;
    }
    match leader {
        None => println!("{}: no leader", args.name),
        Some(l) => println!(
            "{}: led by {:?}, term {}{}, expires in {}",
            args.name,
            l.identity,
            l.term,
            if l.value.is_empty() {
                String::new()
            } else {
                format!(", value {:?}", l.value)
            },
            humantime::format_duration(Duration::from_millis(l.expires_in.as_millis() as u64))
        ),
    }
}
