//! Rules for the gate's settings: confirmation lifetimes, where state and pins live, and which
//! tools' arguments the audit log may keep.

use std::{
    ops::RangeInclusive,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    AuditConfig, AuditSync, ConfirmationConfig, PinsConfig, ReadsWhenDown, SecretTemplate,
    ServerId, SharedConfig, StateConfig,
    duration::RawDuration,
    raw::{RawAudit, RawConfirmations, RawPins, RawState},
    validate::{Known, Report, duration},
};

/// An approved token is used at once; a long-lived one is a credential left lying around.
const TOKEN_TTL_RANGE: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(600);
/// A request waits for a person, who may be away for a while, but not for days.
const PENDING_TTL_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(86_400);

/// An hour at least (a shorter log answers no question), ten years at most.
const RETENTION_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(3600)..=Duration::from_secs(10 * 366 * 86_400);
/// Store deadlines: long enough for a loaded store, short enough that a call waits little.
const STORE_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(50)..=Duration::from_secs(60);
/// A lease outlives a stalled renewal by far, and frees a crashed instance's permits soon.
const LEASE_TTL_RANGE: RangeInclusive<Duration> = Duration::from_secs(3)..=Duration::from_secs(600);
/// PostgreSQL connections one instance may hold.
const POOL_SIZE_RANGE: RangeInclusive<u32> = 1..=256;

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

/// `[state]`'s shared stores: URLs only as `${VAR}` references (a URL holds its password),
/// bounds within range, a usable instance name and key prefix.
pub(super) fn shared(raw: &RawState, report: &mut Report) -> SharedConfig {
    let d = SharedConfig::default();
    let url = |value: &Option<String>, field: &str, example: &str, report: &mut Report| {
        let text = value.as_deref()?;
        let at = format!("state.{field}");
        let template = SecretTemplate::new(text);
        if let Err(message) = template.check_syntax() {
            report.problem(&at, message);
            return None;
        }
        if !template.has_reference() {
            report.problem(
                &at,
                format!(
                    "must be a `${{VAR}}` reference (e.g. `\"${{{example}}}\"`): the URL \
                     holds the store's password, which does not belong in the file"
                ),
            );
            return None;
        }
        Some(template)
    };
    let redis = url(&raw.redis, "redis", "REDIS_URL", report);
    let postgres = url(&raw.postgres, "postgres", "DATABASE_URL", report);
    let require_shared = raw.require_shared.unwrap_or(false);
    if require_shared && (raw.redis.is_none() || raw.postgres.is_none()) {
        report.problem(
            "state.require_shared",
            "needs both `redis` and `postgres`: an instance meant to be one of many must not \
             run on private state",
        );
    }
    let name = |value: &Option<String>, field: &str, default: &str, report: &mut Report| {
        let Some(text) = value.as_deref() else {
            return default.to_owned();
        };
        let fine = !text.is_empty()
            && text.len() <= 64
            && text
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !fine {
            report.problem(
                format!("state.{field}"),
                "must be 1 to 64 ASCII letters, digits, `-`, `_` or `.`",
            );
        }
        text.to_owned()
    };
    let mut time = |raw: &Option<RawDuration>, field: &str, range, default| {
        raw.as_ref()
            .and_then(|r| duration(r, range, &format!("state.{field}"), report))
            .unwrap_or(default)
    };
    let connect_timeout = time(
        &raw.connect_timeout,
        "connect_timeout",
        &STORE_TIMEOUT_RANGE,
        d.connect_timeout,
    );
    let command_timeout = time(
        &raw.command_timeout,
        "command_timeout",
        &STORE_TIMEOUT_RANGE,
        d.command_timeout,
    );
    let lease_ttl = time(&raw.lease_ttl, "lease_ttl", &LEASE_TTL_RANGE, d.lease_ttl);
    let pool_size = match raw.pool_size {
        None => d.pool_size,
        Some(n) if POOL_SIZE_RANGE.contains(&n) => n,
        Some(_) => {
            report.problem("state.pool_size", "must be between 1 and 256");
            d.pool_size
        }
    };
    let reads_when_redis_down = match raw.reads_when_redis_down.as_deref() {
        None | Some("refuse") => ReadsWhenDown::Refuse,
        Some("unlimited") => ReadsWhenDown::Unlimited,
        Some(other) => {
            let other = other.escape_debug();
            report.problem(
                "state.reads_when_redis_down",
                format!("`{other}` is not a choice: use \"refuse\" or \"unlimited\""),
            );
            ReadsWhenDown::Refuse
        }
    };
    SharedConfig {
        redis,
        postgres,
        require_shared,
        instance: name(&raw.instance, "instance", &d.instance, report),
        key_prefix: name(&raw.key_prefix, "key_prefix", &d.key_prefix, report),
        pool_size,
        connect_timeout,
        command_timeout,
        lease_ttl,
        reads_when_redis_down,
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
    let retention = raw
        .retention
        .as_ref()
        .and_then(|r| duration(r, &RETENTION_RANGE, "audit.retention", report));
    AuditConfig {
        log_arguments_for,
        sync,
        retention,
    }
}
