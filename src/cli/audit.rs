//! `mcpgate audit`: who called what, with whose approval, from the audit log.

use std::{
    io::Write as _,
    process::ExitCode,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use mcpgate::{
    config::Config,
    gateway::Stores,
    store::{AuditQuery, parse_instant, rfc3339},
};

/// Filters of `mcpgate audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Only records newer than this: a duration (`30m`, `2h`, `7d`), an RFC 3339 time or seconds since the epoch.
    #[arg(long)]
    since: Option<String>,
    #[arg(long)]
    user: Option<String>,
    /// Canonical tool id (`server.tool`).
    #[arg(long)]
    tool: Option<String>,
    /// `ok` or an error code.
    #[arg(long)]
    outcome: Option<String>,
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Print JSON lines instead of a table.
    #[arg(long)]
    json: bool,
}

pub async fn run(config: &Config, args: AuditArgs) -> anyhow::Result<ExitCode> {
    let stores = Stores::open(config, &mcpgate::config::Env::from_process())
        .await
        .context("cannot open the audit log")?;
    let since = args.since.as_deref().map(parse_since).transpose()?;
    let query = AuditQuery {
        since,
        user: args.user,
        tool: args.tool,
        outcome: args.outcome,
        limit: args.limit,
        ..AuditQuery::default()
    };
    let records = stores.audit.query(query).await?;
    let mut out = std::io::stdout().lock();
    for (id, record) in &records {
        if args.json {
            writeln!(out, "{}", record.to_json(*id))?;
        } else {
            writeln!(
                out,
                "{:>6} {} {:<10} {:<12} {:<28} {:<9} {:<22} {:>6}ms{}",
                id,
                rfc3339(record.time),
                record.tenant,
                record.user,
                record.tool,
                record.decision,
                record.outcome,
                record.duration_ms,
                record
                    .confirmation_id
                    .as_ref()
                    .map(|c| format!(" confirmation={c}"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub(super) fn parse_since(text: &str) -> anyhow::Result<SystemTime> {
    if let Some(at) = parse_instant(text) {
        return Ok(at);
    }
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number
        .parse()
        .with_context(|| format!("`{text}` is not a duration like 30m"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => anyhow::bail!("`{text}`: use s, m, h or d, like 30m"),
    };
    SystemTime::now()
        .checked_sub(Duration::from_secs(seconds))
        .context("the duration reaches before the epoch")
}
