//! Rules for the gate's settings: confirmation lifetimes, where state and pins live, and which
//! tools' arguments the audit log may keep.

use std::{
    ops::RangeInclusive,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    AuditConfig, AuditSync, ConfirmationConfig, PinsConfig, ServerId, StateConfig,
    duration::RawDuration,
    raw::{RawAudit, RawConfirmations, RawPins, RawState},
    validate::{Known, Report, duration},
};

/// An approved token is used at once; a long-lived one is a credential left lying around.
const TOKEN_TTL_RANGE: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(600);
/// A request waits for a person, who may be away for a while, but not for days.
const PENDING_TTL_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(86_400);

/// The spellings of `[state] database` that keep everything in memory (`:memory:` is
/// SQLite's own).
const MEMORY_DATABASES: &[&str] = &["memory", ":memory:"];

pub(super) fn confirmations(raw: &RawConfirmations, report: &mut Report) -> ConfirmationConfig {
    let d = ConfirmationConfig::default();
    let mut ttl = |raw: &Option<RawDuration>, field: &str, range, default| {
        raw.as_ref()
            .and_then(|r| duration(r, range, &format!("confirmations.{field}"), report))
            .unwrap_or(default)
    };
    ConfirmationConfig {
        token_ttl: ttl(&raw.token_ttl, "token_ttl", &TOKEN_TTL_RANGE, d.token_ttl),
        pending_ttl: ttl(
            &raw.pending_ttl,
            "pending_ttl",
            &PENDING_TTL_RANGE,
            d.pending_ttl,
        ),
    }
}

/// `[state]`, a relative database path resolved against `base`.
pub(super) fn state(raw: &RawState, base: &Path, report: &mut Report) -> StateConfig {
    match raw.database.as_deref() {
        None => resolve_state(StateConfig::default(), base),
        Some(text) if MEMORY_DATABASES.contains(&text) => StateConfig::Memory,
        Some(text) => StateConfig::Sqlite {
            path: file_path(text, base, "state.database", report),
        },
    }
}

/// `state` with a relative database path resolved against `base`.
pub(super) fn resolve_state(state: StateConfig, base: &Path) -> StateConfig {
    match state {
        StateConfig::Memory => StateConfig::Memory,
        StateConfig::Sqlite { path } => StateConfig::Sqlite {
            path: base.join(path),
        },
    }
}

/// `[pins]`, a relative file resolved against `base`.
pub(super) fn pins(raw: &RawPins, base: &Path, report: &mut Report) -> PinsConfig {
    match raw.file.as_deref() {
        None => PinsConfig {
            file: base.join(PinsConfig::default().file),
        },
        Some(text) => PinsConfig {
            file: file_path(text, base, "pins.file", report),
        },
    }
}

/// A file path as written, relative ones resolved against `base`. `Path::join` keeps an
/// absolute path as it is.
fn file_path(text: &str, base: &Path, path: &str, report: &mut Report) -> PathBuf {
    if text.trim().is_empty() || text.contains('\0') {
        report.problem(path, "must be a file path (non-empty, no NUL)");
    }
    base.join(text)
}

/// `[audit]`: only read tools may have their argument values recorded, since a write tool's
/// arguments are what it writes (messages, documents, credentials).
pub(super) fn audit(raw: &RawAudit, known: &Known<'_>, report: &mut Report) -> AuditConfig {
    let mut log_arguments_for = Vec::new();
    for (i, id) in raw.log_arguments_for.iter().flatten().enumerate() {
        let at = format!("audit.log_arguments_for[{i}]");
        let Some((server, tool)) = id
            .split_once('.')
            .filter(|(_, t)| !t.is_empty() && *t != "*")
        else {
            report.problem(at, "must be one canonical tool id, `server.tool`");
            continue;
        };
        let Some(server_id) = ServerId::new(server).filter(|s| known.defined.contains_key(s))
        else {
            let server = server.escape_debug();
            report.problem(at, format!("`{server}` is not a configured server"));
            continue;
        };
        let Some(config) = known.servers.iter().find(|s| s.id == server_id) else {
            // Broken servers are already reported; a disabled one cannot be checked now.
            if known.disabled.contains(&server_id) {
                report.warn(&at, format!("ignored: server `{server}` is disabled"));
            }
            continue;
        };
        let listed = |list: &[String]| list.iter().any(|t| t == tool);
        // Only an explicit read_only_tools entry makes a tool a read for certain: `confirm =
        // "none"` says nothing about what a tool does, and annotations are not known yet.
        let reads = !listed(&config.write_tools) && listed(&config.read_only_tools);
        if reads {
            log_arguments_for.push(id.clone());
        } else {
            let (id, tool) = (id.escape_debug(), tool.escape_debug());
            report.problem(
                at,
                format!(
                    "`{id}` is not known to read: only read tools' arguments are recorded; \
                     list `{tool}` in the server's read_only_tools"
                ),
            );
        }
    }
    let sync = match raw.sync.as_deref() {
        None | Some("batched") => AuditSync::Batched,
        Some("every_commit") => AuditSync::EveryCommit,
        Some(other) => {
            let other = other.escape_debug();
            report.problem(
                "audit.sync",
                format!("`{other}` is not a sync mode: use \"batched\" or \"every_commit\""),
            );
            AuditSync::Batched
        }
    };
    AuditConfig {
        log_arguments_for,
        sync,
    }
}
