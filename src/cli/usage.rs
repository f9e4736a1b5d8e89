//! `mcpgate usage`: calls, errors, latency, confirmations, tokens and cost per group, from the
//! configured store (the same sums as `GET /api/v1/usage`, for every tenant).

use std::{io::Write as _, process::ExitCode, time::SystemTime};

use anyhow::Context as _;
use mcpgate::{
    config::Config,
    gateway::Stores,
    store::usage::{Dim, Interval, UsageQuery, report},
};
use serde_json::Value;

use super::audit::parse_since;

/// Folds per run at most (each a chunk of records): a large backlog is read from the log.
const MAX_ROLLS: usize = 200;

#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    /// From: a duration back from now (`7d`, `12h`), an RFC 3339 time or seconds since the
    /// epoch. Rounded down to the hour.
    #[arg(long, default_value = "30d")]
    since: String,
    /// To (default: now); rounded up to the hour.
    #[arg(long)]
    until: Option<String>,
    /// Split by these, comma-separated: tenant, user, server, tool, model.
    #[arg(long, value_name = "DIMS", default_value = "tool")]
    group_by: String,
    /// Also split by time: `hour` or `day`.
    #[arg(long)]
    interval: Option<String>,
    #[arg(long)]
    tenant: Option<String>,
    #[arg(long)]
    user: Option<String>,
    /// Print the report as JSON (as the API answers) instead of tables.
    #[arg(long)]
    json: bool,
}

pub async fn run(config: &Config, args: UsageArgs) -> anyhow::Result<ExitCode> {
    let mut group_by = Vec::new();
    for name in args
        .group_by
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        let dim = Dim::parse(name)
            .with_context(|| format!("`{name}`: group by tenant, user, server, tool or model"))?;
        group_by.push(dim);
    }
    let interval = match args.interval.as_deref() {
        None => None,
        Some("hour") => Some(Interval::Hour),
        Some("day") => Some(Interval::Day),
        Some(other) => anyhow::bail!("`{other}`: the interval is hour or day"),
    };
    let query = UsageQuery {
        since: parse_since(&args.since)?,
        until: match &args.until {
            Some(text) => parse_since(text)?,
            None => SystemTime::now(),
        },
        group_by,
        interval,
        tenant: args.tenant,
        user: args.user,
    };
    let stores = Stores::open(config, &mcpgate::config::Env::from_process())
        .await
        .context("cannot open the state store")?;
    for _ in 0..MAX_ROLLS {
        if stores.usage.roll().await? == 0 {
            break;
        }
    }
    let rows = stores.usage.usage(&query).await?;
    let report = report(&rows, &query);
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{report}")?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut heads: Vec<String> = query
        .group_by
        .iter()
        .map(|d| d.as_str().to_owned())
        .collect();
    if query.interval.is_some() {
        heads.insert(0, "time".into());
    }
    let cell = |group: &Value, name: &str| match &group[name] {
        Value::Null => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let ms = |group: &Value, p: &str| match group["latencyMs"][p].as_f64() {
        Some(v) => format!("{v:.0}"),
        None => "-".to_owned(),
    };
    let calls = report["calls"].as_array().cloned().unwrap_or_default();
    if !calls.is_empty() {
        let mut table = vec![
            heads
                .iter()
                .cloned()
                .chain(
                    [
                        "calls", "errors", "p50 ms", "p90 ms", "p99 ms", "bytes", "asked",
                        "approved", "denied",
                    ]
                    .map(String::from),
                )
                .collect::<Vec<_>>(),
        ];
        for group in &calls {
            let mut row: Vec<String> = heads.iter().map(|h| cell(group, h)).collect();
            row.extend([
                cell(group, "calls"),
                cell(group, "errors"),
                ms(group, "p50"),
                ms(group, "p90"),
                ms(group, "p99"),
                cell(group, "resultBytes"),
                cell(&group["confirmations"], "asked"),
                cell(&group["confirmations"], "approved"),
                cell(&group["confirmations"], "denied"),
            ]);
            table.push(row);
        }
        print_table(&mut out, &table)?;
    }
    let models = report["models"].as_array().cloned().unwrap_or_default();
    if !models.is_empty() {
        writeln!(out)?;
        let mut table = vec![
            heads
                .iter()
                .cloned()
                .chain(
                    [
                        "turns",
                        "requests",
                        "prompt",
                        "completion",
                        "cached",
                        "cost",
                    ]
                    .map(String::from),
                )
                .collect::<Vec<_>>(),
        ];
        for group in &models {
            let mut row: Vec<String> = heads.iter().map(|h| cell(group, h)).collect();
            row.extend([
                cell(group, "turns"),
                cell(group, "requests"),
                cell(group, "promptTokens"),
                cell(group, "completionTokens"),
                cell(group, "cachedTokens"),
                format!("{:.4}", group["cost"].as_f64().unwrap_or(0.0)),
            ]);
            table.push(row);
        }
        print_table(&mut out, &table)?;
    }
    let totals = &report["totals"];
    writeln!(
        out,
        "\n{} to {}: {} calls, {} errors, {} chat turns, cost {:.4}",
        cell(&report, "since"),
        cell(&report, "until"),
        cell(totals, "calls"),
        cell(totals, "errors"),
        cell(totals, "turns"),
        totals["cost"].as_f64().unwrap_or(0.0)
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Columns padded to their widest cell; names left, numbers right.
fn print_table(out: &mut impl std::io::Write, rows: &[Vec<String>]) -> std::io::Result<()> {
    let columns = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &width)| {
                if cell.parse::<f64>().is_ok() || cell == "-" {
                    format!("{cell:>width$}")
                } else {
                    format!("{cell:<width$}")
                }
            })
            .collect();
        writeln!(out, "{}", cells.join("  ").trim_end())?;
    }
    Ok(())
}
