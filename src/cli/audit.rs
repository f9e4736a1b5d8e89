//! `mcpgate audit`: who called what, with whose approval, from the audit log.

use std::{
    io::Write as _,
    process::ExitCode,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;
use mcpgate::{
    config::Config,
    gateway::Stores,
    store::{AuditQuery, AuditRecord},
};
use serde_json::json;

/// Filters of `mcpgate audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// Only records newer than this: a duration (`30m`, `2h`, `7d`) or seconds since the epoch.
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
    let stores = Stores::open(&config.state)
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
            writeln!(out, "{}", to_json(*id, record))?;
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

fn secs(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `YYYY-MM-DDTHH:MM:SSZ` in UTC (civil-from-days, proleptic Gregorian).
fn rfc3339(time: SystemTime) -> String {
    let secs = secs(time);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

fn to_json(id: i64, r: &AuditRecord) -> serde_json::Value {
    json!({
        "id": id,
        "time": rfc3339(r.time),
        "requestId": r.request_id,
        "tenant": r.tenant,
        "user": r.user,
        "session": r.session,
        "server": r.server,
        "tool": r.tool,
        "decision": r.decision,
        "confirmationId": r.confirmation_id,
        "outcome": r.outcome,
        "durationMs": r.duration_ms,
        "argumentBytes": r.argument_bytes,
        "resultBytes": r.result_bytes,
        "fingerprint": r.fingerprint,
        "arguments": r.arguments,
        "detail": r.detail,
    })
}

fn parse_since(text: &str) -> anyhow::Result<SystemTime> {
    if let Ok(epoch) = text.parse::<u64>() {
        return Ok(UNIX_EPOCH + Duration::from_secs(epoch));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_796_008_496)),
            "2026-11-30T03:14:56Z"
        );
    }
}
