//! The report: the printed table (each row against rslock's row and the
//! floor's of its scenario, and redquorum's other kinds against its plain
//! lock) and the JSON written to `target/bench-report.json`.

use std::fmt::Write as _;

use crate::measure::Row;
use crate::uncontended::Cycle;

pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{cores} cores, {cpu}, Linux {}", kernel.trim())
}

fn fmt_num(x: f64, decimals: usize) -> String {
    if x.is_finite() {
        format!("{x:.decimals$}")
    } else {
        "-".into()
    }
}

/// Each row's ratios to its peer measured in the same run: to rslock's row
/// of its scenario (`*_vs_rslock`: the client's CPU, p50, ops/s, the
/// nodes' CPU; the burst's phases), and a cluster row of `scaleout*` to
/// the three plain servers' (`*_vs_servers3`). What the goals are read
/// against: a ratio, never a figure alone.
pub fn ratios(rows: &[Row], r: &Row) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut against = |peer: &Row, suffix: &str, keys: &[&str]| {
        let pairs = [
            ("cpu", r.cpu_us_per_op, peer.cpu_us_per_op),
            ("p50", r.p50_us, peer.p50_us),
            ("ops", r.ops_per_s, peer.ops_per_s),
        ];
        for (name, a, b) in pairs {
            if a.is_finite() && b.is_finite() && b > 0.0 {
                out.push((format!("{name}_vs_{suffix}"), a / b));
            }
        }
        for key in keys {
            if let (Some(a), Some(b)) = (r.extra.get(key), peer.extra.get(key))
                && *b > 0.0
            {
                let short = key.trim_end_matches("_us_per_op");
                out.push((format!("{short}_vs_{suffix}"), a / b));
            }
        }
    };
    if r.imp != "rslock"
        && let Some(peer) = rows
            .iter()
            .find(|p| p.scenario == r.scenario && p.imp == "rslock")
    {
        against(
            peer,
            "rslock",
            &["server_cpu_us_per_op", "lock_s", "release_s"],
        );
    }
    if r.scenario.starts_with("scaleout")
        && r.imp.starts_with("cluster")
        && let Some(peer) = rows
            .iter()
            .find(|p| p.scenario == r.scenario && p.imp == "servers3")
    {
        against(peer, "servers3", &[]);
    }
    out
}

pub fn print_table(rows: &[Row]) {
    let find =
        |scenario: &str, imp: &str| rows.iter().find(|r| r.scenario == scenario && r.imp == imp);
    println!(
        "\n{:<16} {:<14} {:>9} {:>9} {:>10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  extra",
        "scenario",
        "impl",
        "p50 µs",
        "p99 µs",
        "ops/s",
        "errors",
        "p50/rslock",
        "ops/rslock",
        "p50/floor",
        "ops/floor",
        "cpu µs/op",
        "cpu/rslock",
        "allocs/op"
    );
    for r in rows {
        let peer = find(r.scenario, "rslock");
        let floor = match r.scenario {
            "throughput64" => find("floor64", "floor"),
            "handoff" | "handoff_many" | "burst" | "keep_alive_many" | "ceiling" | "failover" => {
                None
            }
            _ => find("floor", "floor"),
        };
        let ratio = |a: f64, b: Option<f64>| b.map_or(f64::NAN, |b| a / b);
        let mut extra: String = r
            .extra
            .iter()
            .map(|(k, v)| format!("{k}={v:.3} "))
            .collect();
        if r.scenario.starts_with("scaleout") || r.scenario == "burst" {
            for (k, v) in ratios(rows, r) {
                if k.ends_with("servers3") || k.starts_with("lock_s") || k.starts_with("release_s")
                {
                    let _ = write!(extra, "{k}={v:.2} ");
                }
            }
        }
        // redquorum's other kinds: against its own plain lock, in the
        // printed table only; rslock has nothing to compare with.
        if let Some(kind) = Cycle::KINDS.iter().find(|c| c.scenario() == r.scenario) {
            let plain = find("uncontended", "redquorum").map(|p| p.p50_us);
            let _ = write!(
                extra,
                "p50/uncontended={} rslock: no {} lock",
                fmt_num(ratio(r.p50_us, plain), 2),
                kind.lock_kind()
            );
        }
        let imp = match r.mode {
            Some(mode) if r.imp == "redquorum" => format!("{}/{mode}", r.imp),
            _ => r.imp.to_owned(),
        };
        println!(
            "{:<16} {:<14} {:>9} {:>9} {:>10} {:>7} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10}  {}",
            r.scenario,
            imp,
            fmt_num(r.p50_us, 0),
            fmt_num(r.p99_us, 0),
            fmt_num(r.ops_per_s, 0),
            r.errors,
            fmt_num(ratio(r.p50_us, peer.map(|p| p.p50_us)), 2),
            fmt_num(ratio(r.ops_per_s, peer.map(|p| p.ops_per_s)), 2),
            fmt_num(ratio(r.p50_us, floor.map(|p| p.p50_us)), 2),
            fmt_num(ratio(r.ops_per_s, floor.map(|p| p.ops_per_s)), 2),
            fmt_num(r.cpu_us_per_op, 1),
            fmt_num(ratio(r.cpu_us_per_op, peer.map(|p| p.cpu_us_per_op)), 2),
            fmt_num(r.allocs_per_op, 1),
            extra.trim_end()
        );
    }
}

pub fn json(machine: &str, rows: &[Row], memory: &[(String, f64, f64, f64)]) -> String {
    let num = |x: f64| {
        if x.is_finite() {
            format!("{x:.3}")
        } else {
            "null".into()
        }
    };
    let mut s = format!("{{\"machine\": {machine:?}, \"scenarios\": [");
    for (i, r) in rows.iter().enumerate() {
        let _ = write!(
            s,
            "{}\n  {{\"name\": {:?}, \"impl\": {:?}, \"p50_us\": {}, \"p99_us\": {}, \"ops_per_s\": {}, \"errors\": {}, \"cpu_us_per_op\": {}, \"allocs_per_op\": {}",
            if i == 0 { "" } else { "," },
            r.scenario,
            r.imp,
            num(r.p50_us),
            num(r.p99_us),
            num(r.ops_per_s),
            r.errors,
            num(r.cpu_us_per_op),
            num(r.allocs_per_op)
        );
        if let Some(mode) = r.mode {
            let _ = write!(s, ", \"mode\": {mode:?}");
        }
        for (k, v) in &r.extra {
            let _ = write!(s, ", {k:?}: {}", num(*v));
        }
        for (k, v) in ratios(rows, r) {
            let _ = write!(s, ", {k:?}: {}", num(v));
        }
        s.push('}');
    }
    s.push_str("\n], \"memory\": [");
    for (i, (imp, peak, per_lock, heap_per_lock)) in memory.iter().enumerate() {
        let _ = write!(
            s,
            "{}\n  {{\"impl\": {imp:?}, \"peak_rss_bytes\": {}, \"bytes_per_lock\": {}, \"heap_bytes_per_lock\": {}}}",
            if i == 0 { "" } else { "," },
            num(*peak),
            num(*per_lock),
            num(*heap_per_lock)
        );
    }
    s.push_str("\n]}\n");
    s
}
