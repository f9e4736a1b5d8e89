//! Validated settings of the gate: access, confirmations, audit, pins, embedded state, and the
//! per-call limits beyond [`super::Limits`].

use std::{path::PathBuf, time::Duration};

/// Who sees and may call what. `None` in [`super::Config::access`] means single-tenant mode:
/// every caller sees every server (the local CLI and a fresh install); once an `[access]`
/// section exists, everything not granted is hidden.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AccessConfig {
    /// Tenant → the servers it sees, by id. A tenant not listed sees nothing.
    pub tenants: Vec<TenantAccess>,
    /// Which users or roles of a tenant may use which tools; no matching grant → hidden.
    pub grants: Vec<Grant>,
    /// Who operates the gateway as a whole: reloads it, refreshes any server, reads every
    /// tenant's audit and metrics. The `admin` role alone administers only its own tenant.
    pub operators: Vec<Operator>,
}

/// Callers of `tenant` who operate the gateway: those among `users`, or with one of `roles`
/// (at least one of the two is non-empty). The tenant is part of the match, so a role a
/// tenant gives its own users opens nothing beyond that tenant.
#[derive(Debug, Clone, PartialEq)]
pub struct Operator {
    pub tenant: String,
    pub users: Vec<String>,
    pub roles: Vec<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TenantAccess {
    pub tenant: String,
    pub servers: Vec<super::ServerId>,
    /// The chat models this tenant may use, by name; `None`: every configured one.
    pub models: Option<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Grant {
    pub tenant: String,
    /// Matches when the caller is one of these users or has one of these roles; both empty
    /// matches everyone in the tenant.
    pub users: Vec<String>,
    pub roles: Vec<String>,
    /// Canonical tool ids (`server.tool`) or `server.*`.
    pub tools: Vec<String>,
}

/// Confirmation tokens for write tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfirmationConfig {
    /// Lifetime of an approved, single-use token.
    pub token_ttl: Duration,
    /// How long a pending confirmation waits to be approved or denied.
    pub pending_ttl: Duration,
}

impl Default for ConfirmationConfig {
    fn default() -> Self {
        ConfirmationConfig {
            token_ttl: Duration::from_secs(120),
            pending_ttl: Duration::from_secs(600),
        }
    }
}

/// Where durable state lives.
#[derive(Debug, Clone, PartialEq)]
pub enum StateConfig {
    /// Everything in memory: lost at exit (tests, throwaway runs).
    Memory,
    /// One SQLite file (WAL) for confirmations, audit and pins.
    Sqlite { path: PathBuf },
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig::Sqlite {
            path: PathBuf::from("mcpgate.db"),
        }
    }
}

/// State shared by several instances (`[state] redis`, `postgres`): what must be shared and
/// fast in Redis, what must be durable and queryable in PostgreSQL. Neither set: everything
/// stays embedded ([`StateConfig`]), as for a single instance.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedConfig {
    /// Redis URL template (`${REDIS_URL}`): confirmations, limits, MCP sessions, events.
    pub redis: Option<super::SecretTemplate>,
    /// PostgreSQL URL template (`${DATABASE_URL}`): audit log, consumed confirmations.
    pub postgres: Option<super::SecretTemplate>,
    /// Refuse to start unless both are configured and reachable.
    pub require_shared: bool,
    /// This instance's name in audit rows, leases and events.
    pub instance: String,
    /// Prefix of every Redis key and channel, so several deployments may share one Redis.
    pub key_prefix: String,
    /// Most PostgreSQL connections this instance holds.
    pub pool_size: u32,
    /// Deadline for opening a connection to either store.
    pub connect_timeout: Duration,
    /// Deadline for one store command (a Redis script, a PostgreSQL statement or pool wait).
    pub command_timeout: Duration,
    /// Lifetime of a concurrency lease that is not renewed: how long a crashed instance's
    /// permits stay taken.
    pub lease_ttl: Duration,
    /// Whether read calls go on without rate and concurrency limits while Redis is down.
    pub reads_when_redis_down: ReadsWhenDown,
}

/// What read calls do while Redis, which holds the shared limits, cannot be reached.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadsWhenDown {
    /// Refused with `store_unavailable`, like everything that grants.
    #[default]
    Refuse,
    /// Let through without rate or concurrency limits (writes are refused all the same).
    Unlimited,
}

impl SharedConfig {
    /// Whether any shared store is configured.
    pub fn any(&self) -> bool {
        self.redis.is_some() || self.postgres.is_some()
    }
}

impl Default for SharedConfig {
    fn default() -> Self {
        SharedConfig {
            redis: None,
            postgres: None,
            require_shared: false,
            instance: default_instance(),
            key_prefix: "mcpgate".to_owned(),
            pool_size: 8,
            connect_timeout: Duration::from_secs(5),
            command_timeout: Duration::from_secs(2),
            lease_ttl: Duration::from_secs(30),
            reads_when_redis_down: ReadsWhenDown::Refuse,
        }
    }
}

/// `<host name>-<process id>`: unique among instances running at once.
fn default_instance() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "mcpgate".to_owned());
    format!("{host}-{}", std::process::id())
}

/// What the audit log may keep beyond the always-recorded metadata.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditConfig {
    /// Canonical ids of read tools whose argument values may be recorded.
    pub log_arguments_for: Vec<String>,
    /// When the audit log's records reach the disk (SQLite or PostgreSQL).
    pub sync: AuditSync,
    /// Records older than this are deleted (SQLite and PostgreSQL alike); `None` keeps all.
    pub retention: Option<Duration>,
}

/// When committed audit records are synced to disk, in SQLite and in PostgreSQL alike.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuditSync {
    /// Commits are synced together at most 100 ms later: a power cut or OS crash can lose the
    /// last 100 ms of acknowledged records (a crash of the gateway loses none; in PostgreSQL
    /// neither does a crash of PostgreSQL, whose lost records the gateway writes again).
    #[default]
    Batched,
    /// Each group commit is synced before its calls are answered (SQLite's `synchronous =
    /// FULL`, PostgreSQL's `synchronous_commit = on`): no acknowledged record is lost, at the
    /// cost of one sync per commit.
    EveryCommit,
}

/// The pin file (fingerprint baselines, reviewed like a lock file).
#[derive(Debug, Clone, PartialEq)]
pub struct PinsConfig {
    /// An empty path means no pin file at all ([`PinsConfig::none`]).
    pub file: PathBuf,
}

impl PinsConfig {
    /// No pin file: every tool is unpinned (embedded tool sets pin through the API instead).
    pub fn none() -> PinsConfig {
        PinsConfig {
            file: PathBuf::new(),
        }
    }

    /// The pin file's path, if there is one.
    pub fn path(&self) -> Option<&std::path::Path> {
        (!self.file.as_os_str().is_empty()).then_some(self.file.as_path())
    }
}

impl Default for PinsConfig {
    fn default() -> Self {
        PinsConfig {
            file: PathBuf::from("mcpgate.lock"),
        }
    }
}

/// What happens to a result over `max_result_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResultOverflow {
    /// A typed `ResultTooLarge` error.
    #[default]
    Error,
    /// Text cut to fit and the result visibly marked `truncated`.
    Truncate,
}

/// Per-call limits enforced by the gate (per server overridable where noted).
#[derive(Debug, Clone, PartialEq)]
pub struct CallLimits {
    /// Largest arguments object, in bytes of JSON.
    pub max_argument_bytes: usize,
    /// Largest single binary part (image, audio, blob) passed on, in bytes of base64.
    pub max_binary_bytes: usize,
    pub result_overflow: ResultOverflow,
    /// Calls in flight per user × server.
    pub user_concurrency: u32,
    /// Calls in flight per server, all users together.
    pub server_concurrency: u32,
    /// How long a call may wait for a concurrency permit; zero refuses at once.
    pub concurrency_wait: Duration,
    /// Calls per minute per user (across servers); zero disables.
    pub user_calls_per_minute: u32,
    /// Calls per minute per server (all users); zero disables.
    pub server_calls_per_minute: u32,
    /// Extra attempts for read tools whose connection failed; writes are never retried once
    /// sent.
    pub retries: u32,
    /// How long the answer to a call sent with an `Idempotency-Key` is kept for its retries;
    /// zero: the header is ignored.
    pub idempotency_window: Duration,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits {
            max_argument_bytes: 256 * 1024,
            max_binary_bytes: 4 * 1024 * 1024,
            result_overflow: ResultOverflow::Error,
            user_concurrency: 8,
            server_concurrency: 64,
            concurrency_wait: Duration::ZERO,
            user_calls_per_minute: 600,
            server_calls_per_minute: 6000,
            retries: 1,
            idempotency_window: Duration::from_secs(24 * 3600),
        }
    }
}
