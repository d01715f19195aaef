//! `ceiling`: redis-benchmark driving all the nodes at once, pipelined
//! `SET`s: the most commands a second the machine serves, and the lock +
//! unlock pairs that allows (no lock can beat N nodes × 2 commands).

use std::collections::BTreeMap;
use std::process::Command;

use crate::Scale;
use crate::measure::Row;

/// redis-benchmark on all nodes at once, pipelined: the most commands per
/// second the machine serves, and the lock+unlock pairs that allows (each
/// pair costs two commands on every node).
pub fn ceiling(ports: &[u16], scale: Scale) -> Option<Row> {
    let handles: Vec<_> = ports
        .iter()
        .map(|&p| std::thread::spawn(move || commands_per_s(p, scale)))
        .collect();
    let mut commands = 0.0;
    for h in handles {
        commands += h.join().ok()??;
    }
    let mut extra = BTreeMap::new();
    extra.insert("commands_per_s", commands);
    Some(Row {
        scenario: "ceiling",
        imp: "ceiling",
        mode: None,
        p50_us: f64::NAN,
        p99_us: f64::NAN,
        ops_per_s: commands / (2.0 * ports.len() as f64),
        errors: 0,
        cpu_us_per_op: f64::NAN,
        allocs_per_op: f64::NAN,
        extra,
    })
}

/// `SET`s per second that redis-benchmark gets from one node, pipelined.
fn commands_per_s(port: u16, scale: Scale) -> Option<f64> {
    let out = Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "set",
            "-P",
            "16",
            "-c",
            "8",
        ])
        .args(["-n", &scale.ceiling_requests.to_string(), "-q", "--csv"])
        .output()
        .ok()?;
    // "SET","123456.79",…
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with("\"SET\""))?
        .split(',')
        .nth(1)?
        .trim_matches('"')
        .parse()
        .ok()
}
