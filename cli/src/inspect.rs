//! `redquorum status` and `redquorum release --token`: for an operator
//! looking at a stuck job.

use std::time::{SystemTime, UNIX_EPOCH};

use redquorum::{Holding, NodeFailure, Status, Who};
use serde_json::{Value, json};

use crate::args;
use crate::{connect, exit, fail, usage_or_failure};

pub async fn status(args: args::Status) -> u8 {
    let redlock = match connect(&args.nodes) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let mut code = 0;
    let mut all = Vec::new();
    for resource in &args.resources {
        let status = redlock.status(resource).await;
        if answered(&status) < status.quorum() {
            code = exit::FAILURE;
        }
        if args.json {
            all.push(status_json(&status));
        } else {
            print_status(&status);
        }
    }
    if args.json {
        println!("{}", Value::Array(all));
    }
    code
}

/// held, free or split, as a majority of nodes says; unknown when fewer
/// than a majority answered.
fn verdict(status: &Status) -> &'static str {
    if status.holder().is_some() {
        "held"
    } else if status.is_free() {
        "free"
    } else if answered(status) < status.quorum() {
        "unknown"
    } else {
        "split"
    }
}

fn answered(status: &Status) -> usize {
    status.nodes().iter().filter(|(_, s)| s.is_ok()).count()
}

fn print_status(status: &Status) {
    let n = status.nodes().len();
    let headline = match status.holder() {
        Some(holder) => format!(
            "held by {} on {}/{n} nodes",
            holder,
            status.held_by(holder).count()
        ),
        None if status.is_free() => format!("free (no lock on a majority of {n} nodes)"),
        None if answered(status) < status.quorum() => {
            format!("unknown: only {} of {n} nodes answered", answered(status))
        }
        None => format!("split: no holder and no free majority of {n} nodes"),
    };
    println!(
        "{}: {headline} (a majority is {})",
        status.resource(),
        status.quorum()
    );
    for (node, state) in status.nodes() {
        let line = match state {
            Err(failure) => format!("no answer: {failure}"),
            Ok(state) => {
                let mut line = match &state.lock {
                    None => "free".to_owned(),
                    Some(holder) => format!("held by {holder}"),
                };
                if state.lock.is_some() {
                    match state.ttl {
                        Some(ttl) => line += &format!(", {:.1}s left", ttl.as_secs_f64()),
                        None => line += ", no expiry",
                    }
                }
                if let Some(fence) = state.fence {
                    line += &format!(", fencing counter {fence}");
                }
                line
            }
        };
        println!("  {node:<22} {line}");
    }
    // Who took it, when its tokens say; after the nodes' lines.
    for who in status.taken_by() {
        println!("  taken by {who}");
    }
}

fn holder_json(holder: &Holding) -> Value {
    match holder {
        Holding::Token(token) => json!({"kind": "lock", "token": token}),
        Holding::Reentrant { owner, holds } => {
            json!({"kind": "reentrant", "owner": owner, "holds": holds})
        }
        Holding::Permits { permits, holders } => {
            let held: Vec<Value> = holders
                .iter()
                .map(|(slot, token)| json!({"slot": slot, "token": token}))
                .collect();
            json!({"kind": "semaphore", "permits": permits, "holders": held})
        }
        Holding::Readers { readers } => json!({"kind": "readers", "readers": readers}),
        Holding::Other(kind) => json!({"kind": "other", "type": kind}),
        _ => json!({"kind": "unknown"}),
    }
}

fn status_json(status: &Status) -> Value {
    let nodes: Vec<Value> = status
        .nodes()
        .iter()
        .map(|(node, state)| match state {
            Err(failure) => json!({"node": node, "state": "error", "error": failure.to_string()}),
            Ok(state) => json!({
                "node": node,
                "state": if state.lock.is_some() { "held" } else { "free" },
                "holder": state.lock.as_ref().map(holder_json),
                "ttl_ms": state.ttl.map(|t| t.as_millis() as u64),
                "fence": state.fence,
            }),
        })
        .collect();
    json!({
        "resource": status.resource(),
        "quorum": status.quorum(),
        "verdict": verdict(status),
        "holder": status.holder().map(holder_json),
        "taken_by": status.taken_by().iter().map(who_json).collect::<Vec<_>>(),
        "nodes": nodes,
    })
}

/// A lock's taker (see `redquorum::Who`): `process` is null when no node
/// had its record.
fn who_json(who: &Who) -> Value {
    let ms = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    };
    let process = who.process.as_ref().map(|p| {
        json!({
            "host": p.host,
            "pid": p.pid,
            "program": p.program,
            "label": p.label,
            "started_ms": ms(p.started),
        })
    });
    json!({
        "id": who.id,
        "since_ms": ms(who.since),
        "text": who.to_string(),
        "process": process,
    })
}

pub async fn release(args: args::Release) -> u8 {
    let redlock = match connect(&args.nodes) {
        Ok(redlock) => redlock,
        Err(code) => return code,
    };
    let report = match redlock.release_token(&args.resource, &args.token).await {
        Ok(report) => report,
        Err(e) => return usage_or_failure(&e),
    };
    let cleared = report.agreed();
    let n = cleared + report.failures().len();
    if args.json {
        let failures: Vec<Value> = report
            .failures()
            .iter()
            .map(|(node, failure)| json!({"node": node, "error": failure.to_string()}))
            .collect();
        println!(
            "{}",
            json!({"resource": args.resource, "cleared": cleared, "nodes": n, "failures": failures})
        );
    } else if cleared > 0 {
        println!(
            "{}: cleared the lock of token {} on {cleared}/{n} nodes",
            args.resource, args.token
        );
        for (node, failure) in report.failures() {
            println!("  {node:<22} not cleared: {failure}");
        }
    }
    if cleared == 0 {
        let silent = report
            .failures()
            .iter()
            .filter(|(_, f)| !matches!(f, NodeFailure::Missing | NodeFailure::Contended))
            .count();
        let message = if silent == 0 {
            format!(
                "token {} holds {:?} on no node: nothing was changed ({report})",
                args.token, args.resource
            )
        } else {
            format!(
                "not cleared on any node; {silent} of {n} did not answer, and may still hold it \
                 ({report})"
            )
        };
        return fail(exit::FAILURE, message);
    }
    0
}
