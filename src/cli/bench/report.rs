//! The benchmark's results as markdown: the latency table with ratios to the direct call,
//! the targets met or missed, and the splice that keeps hand-written notes in BENCHMARKS.md.

use std::{fmt::Write as _, time::Duration};

use super::stats::Summary;

/// Where the generated part of BENCHMARKS.md starts and ends; text outside is kept.
pub const BEGIN_MARKER: &str = "<!-- bench:begin (written by scripts/bench) -->";
pub const END_MARKER: &str = "<!-- bench:end -->";

/// One target at one concurrency.
#[derive(Debug, Clone)]
pub struct Row {
    /// The upstream and transport all rows of a group call.
    pub group: String,
    pub target: String,
    /// The row the others of its group and concurrency are compared with.
    pub direct: bool,
    pub concurrency: usize,
    pub summary: Summary,
    /// User + system CPU per call of the gateway process (of the upstream for a direct call).
    pub cpu_per_call: Option<Duration>,
}

/// A target of the issue, as measured.
#[derive(Debug, Clone)]
pub struct Check {
    pub what: String,
    pub target: String,
    pub measured: String,
    pub met: bool,
}

/// The direct row `row` is compared with (same group and concurrency), if any.
pub fn baseline<'a>(rows: &'a [Row], row: &Row) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.direct && r.group == row.group && r.concurrency == row.concurrency)
}

/// `row`'s p50 and p99 minus its direct call's.
pub fn added(rows: &[Row], row: &Row) -> Option<(f64, f64)> {
    let base = baseline(rows, row)?;
    Some((
        ms(row.summary.p50) - ms(base.summary.p50),
        ms(row.summary.p99) - ms(base.summary.p99),
    ))
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The latency table: one line per row, in the order given.
pub fn latency_table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| upstream | target | conc. | calls | p50 ms | p95 ms | p99 ms | calls/s | \
         added p50 ms | added p99 ms | p50 / direct | calls/s / direct | CPU µs/call \
         | errors |\n\
         | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | \
         ---: | ---: |\n",
    );
    for row in rows {
        let s = &row.summary;
        let (added_p50, added_p99, p50_ratio, rate_ratio) = match baseline(rows, row) {
            Some(base) if !row.direct => (
                format!("{:+.3}", ms(s.p50) - ms(base.summary.p50)),
                format!("{:+.3}", ms(s.p99) - ms(base.summary.p99)),
                ratio(ms(s.p50), ms(base.summary.p50)),
                ratio(s.per_sec, base.summary.per_sec),
            ),
            _ => ("".into(), "".into(), "".into(), "".into()),
        };
        let cpu = row
            .cpu_per_call
            .map(|d| format!("{:.1}", d.as_secs_f64() * 1e6))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.0} | {} | {} | {} | {} | {} | {} |",
            row.group,
            row.target,
            row.concurrency,
            s.calls,
            ms(s.p50),
            ms(s.p95),
            ms(s.p99),
            s.per_sec,
            added_p50,
            added_p99,
            p50_ratio,
            rate_ratio,
            cpu,
            s.errors,
        );
    }
    out
}

fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.2}×", value / base)
    } else {
        String::new()
    }
}

/// The targets, met or not.
pub fn checks_table(checks: &[Check]) -> String {
    let mut out = String::from("| | target | goal | measured |\n| --- | --- | --- | --- |\n");
    for check in checks {
        let mark = if check.met { "met" } else { "**missed**" };
        let _ = writeln!(
            out,
            "| {mark} | {} | {} | {} |",
            check.what, check.target, check.measured
        );
    }
    out
}

/// `existing` with the text between the markers replaced by `generated` (markers kept); when
/// the markers are missing, the generated part is appended.
pub fn splice(existing: &str, generated: &str) -> String {
    let block = format!("{BEGIN_MARKER}\n{}\n{END_MARKER}", generated.trim_end());
    match (existing.find(BEGIN_MARKER), existing.find(END_MARKER)) {
        (Some(begin), Some(end)) if begin < end => format!(
            "{}{block}{}",
            &existing[..begin],
            &existing[end + END_MARKER.len()..]
        ),
        _ => {
            let mut out = existing.trim_end().to_owned();
            if !out.is_empty() {
                out.push_str("\n\n");
            }
            out.push_str(&block);
            out.push('\n');
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(target: &str, direct: bool, p50_us: u64, per_sec: f64) -> Row {
        let d = Duration::from_micros(p50_us);
        Row {
            group: "echo".into(),
            target: target.into(),
            direct,
            concurrency: 1,
            summary: Summary {
                calls: 100,
                errors: 0,
                p50: d,
                p95: d,
                p99: d * 2,
                max: d * 3,
                per_sec,
            },
            cpu_per_call: (!direct).then(|| Duration::from_micros(42)),
        }
    }

    #[test]
    fn rows_are_compared_with_their_direct_call() {
        let rows = [
            row("direct", true, 100, 1000.0),
            row("gateway", false, 250, 500.0),
        ];
        let table = latency_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert_eq!(
            lines[2],
            "| echo | direct | 1 | 100 | 0.100 | 0.100 | 0.200 | 1000 |  |  |  |  |  | 0 |"
        );
        assert_eq!(
            lines[3],
            "| echo | gateway | 1 | 100 | 0.250 | 0.250 | 0.500 | 500 | +0.150 | +0.300 | 2.50× \
             | 0.50× | 42.0 | 0 |"
        );
        let (p50, p99) = added(&rows, &rows[1]).expect("a direct row");
        assert!((p50 - 0.15).abs() < 1e-9 && (p99 - 0.3).abs() < 1e-9);
    }

    #[test]
    fn a_row_without_a_direct_call_has_no_ratios() {
        let mut other = row("gateway", false, 250, 500.0);
        other.group = "elsewhere".into();
        let rows = [row("direct", true, 100, 1000.0), other];
        assert!(added(&rows, &rows[1]).is_none());
        assert!(
            latency_table(&rows)
                .lines()
                .nth(3)
                .expect("row")
                .contains("| 500 |  |  |")
        );
    }

    #[test]
    fn checks_say_met_or_missed() {
        let table = checks_table(&[
            Check {
                what: "a".into(),
                target: "≤ 1".into(),
                measured: "0.5".into(),
                met: true,
            },
            Check {
                what: "b".into(),
                target: "≤ 1".into(),
                measured: "2".into(),
                met: false,
            },
        ]);
        assert!(table.contains("| met | a | ≤ 1 | 0.5 |"));
        assert!(table.contains("| **missed** | b | ≤ 1 | 2 |"));
    }

    #[test]
    fn splice_replaces_between_markers_and_keeps_the_rest() {
        let existing = format!("# Title\n\n{BEGIN_MARKER}\nold\n{END_MARKER}\n\n## Notes\nkept\n");
        let spliced = splice(&existing, "new table\n");
        assert_eq!(
            spliced,
            format!("# Title\n\n{BEGIN_MARKER}\nnew table\n{END_MARKER}\n\n## Notes\nkept\n")
        );
        // Idempotent on its own output.
        assert_eq!(splice(&spliced, "new table"), spliced);
    }

    #[test]
    fn splice_appends_when_markers_are_missing() {
        assert_eq!(
            splice("# Title\n", "t"),
            format!("# Title\n\n{BEGIN_MARKER}\nt\n{END_MARKER}\n")
        );
        assert_eq!(
            splice("", "t"),
            format!("{BEGIN_MARKER}\nt\n{END_MARKER}\n")
        );
    }
}
