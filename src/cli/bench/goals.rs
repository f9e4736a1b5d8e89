//! The targets, checked against what a run measured.

use std::time::Duration;

use super::{
    catalog::{LIST_DEADLINE, ListResult},
    memory::MemoryResult,
    report::{Check, Row, added, baseline},
};

/// Added latency over the direct call at concurrency 1, REST with the policy path on.
const ADDED_P50_MS: f64 = 0.15;
const ADDED_P99_MS: f64 = 1.0;
/// REST throughput at concurrency 64 against each peer gateway's.
const PEER_FACTOR: f64 = 10.0;
/// Gateway CPU per call at concurrency 64.
const CPU_PER_CALL: Duration = Duration::from_micros(60);
/// Idle resident set with 10 stdio upstreams.
const IDLE_RSS: u64 = 30 * 1024 * 1024;
/// Growth of the resident set between the first and the last reading of the long run that
/// still counts as none: allocator arenas settle by a few hundred KiB.
pub const GROWTH_TOLERANCE: i64 = 1024 * 1024;

const HTTP_GROUP: &str = "rmcp echo, Streamable HTTP";
const STDIO_GROUP: &str = "server-everything echo, stdio";

fn find<'a>(rows: &'a [Row], group: &str, target: &str, concurrency: usize) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.group == group && r.target == target && r.concurrency == concurrency)
}

/// Added p50 through one of three instances on Redis and PostgreSQL, over the embedded one.
const CLUSTER_ADDED_P50_MS: f64 = 0.25;
/// Throughput at concurrency 64 through one of the three, against the embedded one's.
const CLUSTER_FACTOR: f64 = 0.8;

/// Checks of the call matrix.
pub fn call_checks(rows: &[Row]) -> Vec<Check> {
    let mut checks = Vec::new();
    let cluster = super::calls::CLUSTER_TARGET;
    if let (Some(ours), Some(embedded)) = (
        find(rows, HTTP_GROUP, cluster, 1),
        find(rows, HTTP_GROUP, "mcpgate REST", 1),
    ) {
        let added = super::report::ms(ours.summary.p50) - super::report::ms(embedded.summary.p50);
        checks.push(Check {
            what: "added p50 at concurrency 1, 3 instances on Redis + PostgreSQL against the \
                   embedded instance"
                .into(),
            target: format!("≤ {CLUSTER_ADDED_P50_MS} ms"),
            measured: format!("{added:+.3} ms"),
            met: added <= CLUSTER_ADDED_P50_MS,
        });
    }
    if let (Some(ours), Some(embedded)) = (
        find(rows, HTTP_GROUP, cluster, 64),
        find(rows, HTTP_GROUP, "mcpgate REST", 64),
    ) {
        let factor = ours.summary.per_sec / embedded.summary.per_sec.max(f64::MIN_POSITIVE);
        checks.push(Check {
            what: "throughput at concurrency 64 through 1 of 3 instances against the embedded \
                   instance"
                .into(),
            target: format!("≥ {CLUSTER_FACTOR}×"),
            measured: format!(
                "{factor:.2}× ({:.0} against {:.0} calls/s)",
                ours.summary.per_sec, embedded.summary.per_sec
            ),
            met: factor >= CLUSTER_FACTOR,
        });
    }
    for target in ["mcpgate REST", "mcpgate /mcp"] {
        if let Some(row) = find(rows, HTTP_GROUP, target, 1)
            && let Some((p50, p99)) = added(rows, row)
        {
            checks.push(Check {
                what: format!("added latency at concurrency 1, {target} (policy path on)"),
                target: format!("p50 ≤ {ADDED_P50_MS} ms, p99 ≤ {ADDED_P99_MS} ms"),
                measured: format!("p50 {p50:+.3} ms, p99 {p99:+.3} ms"),
                met: p50 <= ADDED_P50_MS && p99 <= ADDED_P99_MS,
            });
        }
    }
    if let Some(ours) = find(rows, STDIO_GROUP, "mcpgate REST", 64) {
        for peer in ["mcp-proxy (MCP)", "mcpo (REST)"] {
            if let Some(theirs) = find(rows, STDIO_GROUP, peer, 64) {
                let factor = ours.summary.per_sec / theirs.summary.per_sec.max(f64::MIN_POSITIVE);
                checks.push(Check {
                    what: format!("REST throughput at concurrency 64 against {peer}"),
                    target: format!("≥ {PEER_FACTOR}×"),
                    measured: format!(
                        "{factor:.1}× ({:.0} against {:.0} calls/s)",
                        ours.summary.per_sec, theirs.summary.per_sec
                    ),
                    met: factor >= PEER_FACTOR,
                });
            }
        }
    }
    for group in [HTTP_GROUP, STDIO_GROUP] {
        if let Some(row) = find(rows, group, "mcpgate REST", 64)
            && let Some(cpu) = row.cpu_per_call
        {
            let direct = baseline(rows, row)
                .map(|b| {
                    format!(
                        "; throughput {:.2}× the direct call's",
                        row.summary.per_sec / b.summary.per_sec.max(f64::MIN_POSITIVE)
                    )
                })
                .unwrap_or_default();
            checks.push(Check {
                what: format!("gateway CPU per call, REST, concurrency 64 ({group})"),
                target: format!("≤ {} µs", CPU_PER_CALL.as_micros()),
                measured: format!("{:.1} µs{direct}", cpu.as_secs_f64() * 1e6),
                met: cpu <= CPU_PER_CALL,
            });
        }
    }
    checks
}

pub fn list_check(result: &ListResult) -> Check {
    Check {
        what: "tools/list over 50 upstreams, one frozen".into(),
        target: format!(
            "answered within the per-upstream deadline ({} s), from the last good catalog",
            LIST_DEADLINE.as_secs()
        ),
        measured: format!(
            "slowest answer {:.3} ms; every answer listed the frozen upstream's tools: {}",
            result.slowest().as_secs_f64() * 1000.0,
            if result.rows.iter().all(|r| r.dead_listed) {
                "yes"
            } else {
                "no"
            }
        ),
        met: result.met(),
    }
}

pub fn memory_checks(result: &MemoryResult) -> Vec<Check> {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let calls = result.after.last().map_or(0, |(n, _)| *n);
    vec![
        Check {
            what: "idle resident set, 10 stdio upstreams (gateway process)".into(),
            target: format!("< {:.0} MiB", mib(IDLE_RSS)),
            measured: format!("{:.1} MiB", mib(result.idle)),
            met: result.idle < IDLE_RSS,
        },
        Check {
            what: format!("resident set growth over {calls} calls"),
            target: format!(
                "none (≤ {:.0} MiB from the first tenth to the end)",
                mib(GROWTH_TOLERANCE.unsigned_abs())
            ),
            measured: format!("{:+.2} MiB", result.growth() as f64 / (1024.0 * 1024.0)),
            met: result.growth() <= GROWTH_TOLERANCE && result.errors == 0,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::super::stats::Summary;
    use super::*;

    fn row(group: &str, target: &str, concurrency: usize, p50_us: u64, per_sec: f64) -> Row {
        let d = Duration::from_micros(p50_us);
        Row {
            group: group.into(),
            target: target.into(),
            direct: target == "direct",
            concurrency,
            summary: Summary {
                calls: 10,
                errors: 0,
                p50: d,
                p95: d,
                p99: d * 2,
                max: d * 2,
                per_sec,
            },
            cpu_per_call: (target != "direct").then(|| Duration::from_micros(50)),
        }
    }

    #[test]
    fn call_checks_compare_with_direct_and_peers() {
        let rows = [
            row(HTTP_GROUP, "direct", 1, 100, 1000.0),
            row(HTTP_GROUP, "mcpgate REST", 1, 200, 900.0),
            row(HTTP_GROUP, "mcpgate /mcp", 1, 400, 800.0),
            row(STDIO_GROUP, "direct", 64, 100, 20000.0),
            row(STDIO_GROUP, "mcpgate REST", 64, 300, 10000.0),
            row(STDIO_GROUP, "mcp-proxy (MCP)", 64, 3000, 500.0),
            row(STDIO_GROUP, "mcpo (REST)", 64, 3000, 2000.0),
        ];
        let checks = call_checks(&rows);
        let met: Vec<(String, bool)> = checks.iter().map(|c| (c.what.clone(), c.met)).collect();
        assert_eq!(met.len(), 5, "{met:?}");
        // REST adds 0.1 ms at p50 and 0.2 ms at p99; /mcp adds 0.3 ms at p50.
        assert!(met[0].1 && !met[1].1, "{met:?}");
        // 20× mcp-proxy, 5× mcpo.
        assert!(met[2].1 && !met[3].1, "{met:?}");
        assert!(checks[4].met && checks[4].measured.contains("0.50× the direct"));
    }

    #[test]
    fn memory_checks_bound_idle_and_growth() {
        let result = MemoryResult {
            idle: 20 * 1024 * 1024,
            after: vec![(10, 25 * 1024 * 1024), (20, 25 * 1024 * 1024 + 4096)],
            errors: 0,
        };
        let checks = memory_checks(&result);
        assert!(checks.iter().all(|c| c.met), "{checks:?}");
        let grown = MemoryResult {
            after: vec![(10, 25 * 1024 * 1024), (20, 40 * 1024 * 1024)],
            ..result
        };
        assert!(!memory_checks(&grown)[1].met);
    }
}
