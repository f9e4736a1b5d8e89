//! Raw serde types, exactly as written in `mcpgate.toml`, `mcpServers` JSON and
//! `EXTERNAL_MCP_SERVERS_JSON`; unknown fields are errors.
//!
//! # The `mcpgate.toml` file
//!
//! ```toml
//! # Every section and every field is optional. In [limits], [cache], [reconnect], [state],
//! # [confirmations] and [pins] the values shown are the defaults.
//! [limits]
//! connect_timeout = "30s"          # connect + initialize one upstream
//! call_timeout = "60s"             # one tool call
//! list_timeout = "10s"             # listing one upstream's tools during a refresh
//! max_list_items = 10000           # most tools (prompts, resources) one server lists (1 ..= 1 000 000)
//! max_list_bytes = 33554432        # most bytes of one server's listing (1 KiB ..= 256 MiB)
//! max_result_bytes = 1048576       # largest tool result passed on (1 KiB ..= 256 MiB)
//! max_view_bytes = 4194304         # largest MCP Apps view (ui://) read (1 KiB ..= 256 MiB)
//! max_line_bytes = 4194304         # longest line a stdio upstream may print (1 KiB ..= 256 MiB)
//! max_stderr_line_bytes = 4096     # stderr kept per line in the log (64 B ..= 64 KiB)
//! max_argument_bytes = 262144      # largest arguments object, JSON (1 KiB ..= 16 MiB)
//! max_binary_bytes = 4194304       # largest image/audio/blob part, base64 (1 KiB ..= 256 MiB)
//! result_overflow = "error"        # error | truncate: a result over max_result_bytes fails,
//!                                  # or its text is cut and the result marked truncated
//! user_concurrency = 8             # calls in flight per user and server (1 ..= 10000)
//! server_concurrency = 64          # calls in flight per server, all users (1 ..= 100000)
//! concurrency_wait = "0s"          # wait for a free slot (0 ..= 60s); 0 refuses at once
//! user_calls_per_minute = 600      # per user, all servers (0 = off ..= 1000000)
//! server_calls_per_minute = 6000   # per server, all users (0 = off ..= 1000000)
//! retries = 1                      # extra attempts of a read tool whose connection failed
//!                                  # (0 ..= 5); a write is never sent twice
//! idempotency_window = "24h"       # a call's answer kept for retries with the same
//!                                  # Idempotency-Key (0 ..= 7d; 0 ignores the header)
//!
//! [state]
//! database = "mcpgate.db"          # SQLite file for confirmations, audit and pins, relative
//!                                  # to this file's folder; "memory" (or ":memory:") keeps
//!                                  # everything in memory and loses it at exit
//!
//! [confirmations]                  # a write tool waits for its user's approval
//! token_ttl = "120s"               # an approved, single-use token (1s ..= 10m)
//! pending_ttl = "10m"              # a request waiting for approval (1s ..= 24h)
//!
//! [pins]
//! file = "mcpgate.lock"            # tool fingerprint baselines, relative to this file's folder
//!
//! [audit]                          # every call is recorded; argument values only for:
//! log_arguments_for = ["time.get_current_time"]  # canonical ids of read tools (listed in
//!                                  # their server's read_only_tools)
//! sync = "batched"                 # batched | every_commit: records reach the disk within
//!                                  # 100 ms, or before each call is answered (SQLite, and
//!                                  # PostgreSQL with several instances)
//!
//! [cache]                          # the tool-list cache
//! ttl = "60s"                      # 0 ..= 24h; 0 means every refresh asks the upstream
//! max_entries = 1000               # 1 ..= 100000
//!
//! [reconnect]                      # bounded exponential backoff after a failure
//! initial_delay = "500ms"
//! max_delay = "30s"
//! max_attempts = 8                 # 0 ..= 1000
//!
//! # A local server: a program started without a shell, with exactly this environment.
//! [servers.time]
//! command = "mcp-server-time"
//! args = ["--local-timezone", "UTC"]
//! env = { TZ = "UTC" }
//! cwd = "/srv/time"
//! read_only_tools = ["get_current_time", "convert_time"]
//!
//! # A remote server.
//! [servers.github]
//! url = "https://api.githubcopilot.com/mcp/"
//! transport = "auto"               # auto (default) | streamable-http (alias http) | sse
//! headers = { Authorization = "Bearer ${GITHUB_TOKEN}" }
//! allowed_hosts = ["api.githubcopilot.com"]   # default: the URL's own host
//! allow_private = false            # permit loopback/private addresses
//! allow_http = false               # permit plain http:// (loopback with allow_private: always)
//! enabled = true
//! # Options for every server:
//! allowed_tools = ["search_repositories", "create_issue"]  # default: all tools
//! denied_tools = []
//! confirm = "writes"               # all | writes | none: which calls need a confirmation
//! read_only_tools = ["search_repositories"]
//! write_tools = ["create_issue"]
//! trust_annotations = false        # believe upstream readOnlyHint/destructiveHint
//! on_change = "warn"               # warn | block: a pinned tool's definition changed
//! scan = "warn"                    # warn | block: a tool description looks like an injection
//! sessions = "per_caller"          # HTTP servers: an upstream session per caller (default),
//!                                  # or "shared": one for all (stdio: always shared)
//! connect_timeout = "10s"          # overrides [limits]
//! call_timeout = "30s"
//!
//! [servers.github.tool_timeouts]   # per tool, by upstream tool name
//! search_repositories = "2m"
//!
//! [servers.github.overrides.create_issue]  # what models and clients see instead of the
//! title = "Open an issue"                  # upstream's own title and description (pins and
//! description = "Opens an issue in a repository the user names."  # rug pulls still compare
//!                                          # the upstream's definition)
//!
//! # `mcpgate serve`. Besides auth, the values shown are the defaults.
//! [server]
//! listen = "127.0.0.1:8080"        # IP address and port; MCPGATE_LISTEN wins over it, and
//!                                  # the command line's --listen over both
//! production = false               # true refuses auth modes dev and none, and a JWT secret
//!                                  # under 32 bytes
//! max_body_bytes = 1048576         # largest request body (1 KiB ..= 64 MiB)
//! request_timeout = "120s"         # one request (1s ..= 1h)
//! header_read_timeout = "30s"      # a request's headers, once they start (1s ..= 5m): a
//!                                  # client sending them byte by byte is cut off
//! shutdown_grace = "10s"           # in-flight requests finish within it at exit (0 ..= 5m)
//! mcp_session_idle = "5m"          # an MCP session that hears nothing this long is closed
//!                                  # (1s ..= 24h)
//! allowed_hosts = []               # Host header values accepted (DNS-rebinding protection);
//!                                  # empty: loopback names only (localhost, 127.0.0.1, ::1)
//! allowed_origins = []             # browser Origin values accepted, e.g.
//!                                  # "https://app.example.com"; empty: same origin only
//! log_json = false                 # logs as JSON lines
//! threads = 2                      # threads that serve HTTP, each with its own runtime
//!                                  # (1 ..= 64); default: one per core
//!
//! [server.auth]                    # how callers prove who they are
//! mode = "jwt"                     # dev (default): a random token printed at start;
//!                                  # none: no authentication; both bind loopback only.
//!                                  # jwt: bearer JWTs, the fields below (only for jwt)
//! algorithms = ["HS256", "RS256"]  # default ["HS256"]; HS256 | RS256 | ES256, never "none"
//! secret = "${MCPGATE_JWT_SECRET}" # HS256 key: a ${VAR} reference, never the key itself
//! public_keys = ["keys/issuer.pem"]  # RS256/ES256 PEM keys, relative to this file's folder
//! jwks_url = "https://issuer.example.com/.well-known/jwks.json"  # https only; RS256/ES256
//! issuer = "https://issuer.example.com/"  # required; MCPGATE_JWT_ISSUER wins over it
//! audience = "mcpgate"             # required; MCPGATE_JWT_AUDIENCE wins over it
//! tenant_claim = "tenant"          # the claims read into the caller's context
//! # default_tenant = "default"     # without [access] only: the tenant of a token that has
//! #                                # no tenant claim (with [access] such a token is refused)
//! user_claim = "sub"
//! roles_claim = "roles"
//! leeway = "30s"                   # clock skew allowed on exp and nbf (0 ..= 30s)
//!
//! # The model of the chat loop: any OpenAI-compatible chat completions server. Configured
//! # by this section or by MCPGATE_MODEL; besides base_url, model and api_key, the values
//! # shown are the defaults.
//! [llm]
//! base_url = "http://127.0.0.1:8000/v1"  # up to the version; default OPENAI_BASE_URL, else
//!                                  # https://api.openai.com/v1; http or https, no user:password
//! model = "qwen2.5-7b-instruct"    # required; MCPGATE_MODEL wins over it
//! api_key = "${OPENAI_API_KEY}"    # a ${VAR} reference, never the key itself; without it,
//!                                  # OPENAI_API_KEY is sent only when base_url is not written
//! headers = { "X-Team" = "${TEAM_ID}" }  # extra request headers, as for servers
//! connect_timeout = "10s"          # 1s ..= 5m
//! request_timeout = "300s"         # one model request, stream included (1s ..= 1h)
//! idle_timeout = "60s"             # longest silence inside a response (1s ..= 1h)
//! stream = true                    # false asks for one JSON body per request
//! tools = true                     # false: the model has no function calling
//! max_response_bytes = 8388608     # largest response (1 KiB ..= 256 MiB)
//!
//! # Several models instead of one `model`: each inherits the fields above that it does not
//! # write, except that a model with its own base_url inherits no api_key and no headers.
//! # default = "small"              # the model a turn uses unless it names one; default: the first
//! # tools_model = "big"            # where a turn that offers tools goes when its model has
//! #                                # none; default: the first model with tools
//! # [[llm.models]]
//! # name = "small"                 # what clients choose it by: 1 to 64 of [A-Za-z0-9._:/-]
//! # model = "qwen2.5-1.5b-instruct" # default: the name
//! # tools = false
//! # max_running_turns = 8          # turns on this model at once (1 ..= 10000); default: no bound
//!
//! # A model's second opinion on the tool definitions the poisoning scan's rules pass (off by
//! # default; needs the model above). Asked in the background, once per definition, never on
//! # a call's path; what it flags is a `model_review` finding, medium (never quarantines)
//! # unless the rules found something too or `model_review_blocks` says so.
//! [scan]
//! model_review = false
//! model_review_blocks = false      # true: its flag alone quarantines under scan = "block"
//!
//! [agent]                          # the chat loop's bounds
//! max_rounds = 10                  # model requests with tools per turn (1 ..= 100)
//! max_tool_output_chars = 16000    # tool output the model reads per call (100 ..= 1000000)
//! max_repeats = 3                  # the same call and result again ends the turn (1 ..= 100)
//! max_argument_retries = 2         # rounds retried for invalid JSON arguments (0 ..= 5)
//! preprompt = "You are ..."        # the system preamble; default: the built-in one
//! max_running_turns = 64           # chat turns at once, whole process (1 ..= 10000)
//! max_messages = 200               # messages in one chat request (1 ..= 10000)
//!
//! # Every stdio server runs sandboxed (see README, Security): these are the defaults, and a
//! # server's own `[servers.ID.sandbox]` table overrides them field by field (its `read` and
//! # `write` add to these).
//! [sandbox]
//! mode = "on"                      # on: as far as the kernel allows | required | off
//! run_as = "nobody"                # user[:group]; unset: the gateway's user, never root
//!                                  # unless written `run_as = "root"`
//! memory = "4GiB"                  # address space (RLIMIT_AS); bytes or a size with a unit
//! cpu_seconds = 3600               # CPU time of the server's life (RLIMIT_CPU); unset: none
//! open_files = 1024                # RLIMIT_NOFILE
//! processes = 256                  # processes and threads of its user (RLIMIT_NPROC)
//! read = ["/srv"]                 # readable beyond the system folders and its program's
//! write = ["/var/tmp"]             # writable beyond its working folder
//! network = false                  # true, false, or TCP ports it may connect to: [443]
//!
//! # Users may add their own remote MCP servers (off by default; see docs/chat.md). On, it
//! # needs [oauth] keys: the headers users give are sealed under them.
//! [user_servers]
//! enabled = false
//! allowed_hosts = [".example.com"] # hosts, or `.suffix` for any host under it; [] = any
//! max_per_user = 5                 # servers one user keeps (1 ..= 100)
//! max_open_per_user = 3            # their connections open at once, per instance
//! idle_close = "5m"                # a connection unused this long is closed
//! connect_timeout = "10s"
//! call_timeout = "60s"
//! scan = "block"                   # block | warn: a poisoning-scan finding on their tools
//!
//! # Without an [access] section the gateway is single-tenant: every caller sees every
//! # server. With one, a caller sees only what a grant of its tenant gives it.
//! [access.tenants.acme]            # tenant, user and role names: 1 to 128 characters,
//! servers = ["github", "time"]     # no control characters; servers: ids, or ["*"] for all
//! # models = ["small"]             # chat models it may use, by name; absent: every one
//!
//! [[access.grants]]
//! tenant = "acme"                  # a tenant listed above
//! users = ["alice"]                # optional; a caller matches by user or by role, and a
//! roles = ["dev"]                  # grant with neither matches everyone in the tenant
//! tools = ["github.*", "time.get_current_time"]  # server.* or server.tool, servers of the
//!                                                # tenant
//!
//! # The `admin` role administers its own tenant: its audit records, its servers. Operating
//! # the whole gateway (reload, refresh any server, every tenant's audit, /metrics) is for
//! # the callers named here, by tenant and user or role; the tenant need not see any server.
//! [[access.operators]]
//! tenant = "ops"
//! roles = ["operator"]             # and/or users = ["root@example.com"]
//! ```
//!
//! Durations are a number of seconds (`30`, `0.5`) or a string with a unit: `"500ms"`,
//! `"30s"`, `"2m"`, `"1h"`. Header and `env` values may reference the gateway's environment
//! as `${NAME}`; secrets must be written that way, never literally. `transport` defaults to
//! `auto` because most servers speak Streamable HTTP and some still speak only the legacy
//! SSE transport: the user pastes a URL without knowing which, and the cost is one refused
//! request to an SSE-only server.
//!
//! # The environment of `mcpgate serve`
//!
//! `MCPGATE_LISTEN` (a socket address), `MCPGATE_JWT_ISSUER` and `MCPGATE_JWT_AUDIENCE` win
//! over `listen`, `issuer` and `audience`. `MCPGATE_JWT_SECRET`, when set and no `mode` is
//! written, selects `mode = "jwt"` with `algorithms = ["HS256"]` and `secret =
//! "${MCPGATE_JWT_SECRET}"` (fields written in `[server.auth]` still apply); the key itself
//! is never copied into the configuration. An empty variable counts as unset. Without a file,
//! the embedded default's settings are the defaults above (auth mode dev) with these
//! variables applied.

use std::{collections::BTreeMap, fmt, marker::PhantomData};

use serde::{
    Deserialize, Deserializer,
    de::{MapAccess, Visitor},
};

use super::duration::RawDuration;

mod agent;
mod service;

pub use agent::{RawAgent, RawLlm};
pub use service::{RawAuth, RawAuthMode, RawService};

/// The top level of `mcpgate.toml`. Servers stay untyped here so that each one is
/// deserialized on its own and every broken server is reported, not only the first.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub cache: RawCache,
    #[serde(default)]
    pub reconnect: RawReconnect,
    #[serde(default)]
    pub state: RawState,
    #[serde(default)]
    pub confirmations: RawConfirmations,
    #[serde(default)]
    pub pins: RawPins,
    #[serde(default)]
    pub audit: RawAudit,
    /// `mcpgate serve`; beside `servers`, which it is not.
    #[serde(default)]
    pub server: RawService,
    /// Kept apart from an empty section: present (or `MCPGATE_MODEL`) configures a model.
    pub llm: Option<RawLlm>,
    #[serde(default)]
    pub agent: RawAgent,
    /// Kept apart from an empty section: absent means single-tenant mode.
    pub access: Option<RawAccess>,
    /// Defaults for every stdio server's sandbox.
    #[serde(default)]
    pub sandbox: RawSandbox,
    #[serde(default)]
    pub oauth: RawOAuth,
    #[serde(default)]
    pub webmcp: RawWebMcp,
    #[serde(default)]
    pub user_servers: RawUserServers,
    #[serde(default)]
    pub scan: RawScan,
    #[serde(default)]
    pub servers: BTreeMap<String, toml::Value>,
}

/// `[scan]`: the model's second opinion on definitions.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScan {
    pub model_review: Option<bool>,
    pub model_review_blocks: Option<bool>,
}

/// `[sandbox]`, or one server's `sandbox` table (camelCase names in JSON sources).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSandbox {
    /// `on`, `required` or `off`; checked with its path during validation.
    pub mode: Option<String>,
    #[serde(alias = "runAs")]
    pub run_as: Option<String>,
    pub memory: Option<RawSize>,
    #[serde(alias = "cpuSeconds")]
    pub cpu_seconds: Option<u64>,
    #[serde(alias = "openFiles")]
    pub open_files: Option<u64>,
    pub processes: Option<u64>,
    pub read: Option<Vec<String>>,
    pub write: Option<Vec<String>>,
    pub network: Option<RawNetwork>,
}

/// A server's `sandbox`: a table of fields, or just its mode (`sandbox = "required"`).
#[derive(Debug, Clone)]
pub enum RawServerSandbox {
    Mode(String),
    Fields(RawSandbox),
}

/// By hand rather than `untagged`, so a mistake inside the table is reported as itself (an
/// unknown field, a wrong type) instead of as "matches no variant".
impl<'de> Deserialize<'de> for RawServerSandbox {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SandboxVisitor;

        impl<'de> Visitor<'de> for SandboxVisitor {
            type Value = RawServerSandbox;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mode (\"on\", \"required\", \"off\") or a table of sandbox fields")
            }

            fn visit_str<E: serde::de::Error>(self, mode: &str) -> Result<Self::Value, E> {
                Ok(RawServerSandbox::Mode(mode.to_owned()))
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                let fields =
                    RawSandbox::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(RawServerSandbox::Fields(fields))
            }
        }

        deserializer.deserialize_any(SandboxVisitor)
    }
}

impl RawServerSandbox {
    /// The fields it writes (a mode alone is a table with only `mode`).
    pub fn fields(&self) -> RawSandbox {
        match self {
            RawServerSandbox::Mode(mode) => RawSandbox {
                mode: Some(mode.clone()),
                ..RawSandbox::default()
            },
            RawServerSandbox::Fields(fields) => fields.clone(),
        }
    }
}

/// A size: bytes, or a string with a unit (`"512MiB"`, `"4GiB"`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawSize {
    Bytes(u64),
    Text(String),
}

/// `true`, `false`, or the TCP ports a server may connect to.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawNetwork {
    All(bool),
    Ports(Vec<i64>),
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub connect_timeout: Option<RawDuration>,
    pub call_timeout: Option<RawDuration>,
    pub list_timeout: Option<RawDuration>,
    pub max_list_items: Option<u64>,
    pub max_list_bytes: Option<u64>,
    pub max_result_bytes: Option<u64>,
    pub max_view_bytes: Option<u64>,
    pub max_line_bytes: Option<u64>,
    pub max_stderr_line_bytes: Option<u64>,
    pub max_argument_bytes: Option<u64>,
    pub max_binary_bytes: Option<u64>,
    pub result_overflow: Option<RawResultOverflow>,
    pub user_concurrency: Option<u64>,
    pub server_concurrency: Option<u64>,
    pub concurrency_wait: Option<RawDuration>,
    pub user_calls_per_minute: Option<u64>,
    pub server_calls_per_minute: Option<u64>,
    pub retries: Option<u64>,
    pub idempotency_window: Option<RawDuration>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawResultOverflow {
    Error,
    Truncate,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawState {
    pub database: Option<String>,
    /// A `${VAR}` reference to a `redis://` or `rediss://` URL.
    pub redis: Option<String>,
    /// A `${VAR}` reference to a `postgres://` URL.
    pub postgres: Option<String>,
    pub require_shared: Option<bool>,
    pub instance: Option<String>,
    pub key_prefix: Option<String>,
    pub pool_size: Option<u32>,
    pub connect_timeout: Option<RawDuration>,
    pub command_timeout: Option<RawDuration>,
    pub lease_ttl: Option<RawDuration>,
    /// `refuse` or `unlimited`.
    pub reads_when_redis_down: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfirmations {
    pub token_ttl: Option<RawDuration>,
    pub pending_ttl: Option<RawDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPins {
    pub file: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAudit {
    pub log_arguments_for: Option<Vec<String>>,
    /// `batched` or `every_commit`; checked with its path during validation.
    pub sync: Option<String>,
    pub retention: Option<RawDuration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAccess {
    #[serde(default)]
    pub tenants: BTreeMap<String, RawTenant>,
    #[serde(default)]
    pub grants: Vec<RawGrant>,
    #[serde(default)]
    pub operators: Vec<RawOperator>,
}

/// `{ tenant, users?, roles? }`: who operates the whole gateway.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOperator {
    pub tenant: Option<String>,
    pub users: Option<Vec<String>>,
    pub roles: Option<Vec<String>>,
}

/// Required fields are optional here so that a missing one is reported with its path.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTenant {
    pub servers: Option<Vec<String>>,
    /// The chat models (`[[llm.models]]` names) this tenant may use; absent: every one.
    pub models: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawGrant {
    pub tenant: Option<String>,
    pub users: Option<Vec<String>>,
    pub roles: Option<Vec<String>>,
    pub tools: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    pub ttl: Option<RawDuration>,
    pub max_entries: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReconnect {
    pub initial_delay: Option<RawDuration>,
    pub max_delay: Option<RawDuration>,
    pub max_attempts: Option<u64>,
}

/// `transport` of a server; `stdio` is accepted (with `command`) so that imported and
/// environment configurations can say it explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawTransport {
    Stdio,
    #[serde(alias = "http", alias = "streamableHttp")]
    StreamableHttp,
    Sse,
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawConfirm {
    All,
    Writes,
    None,
}

/// `on_change` and `scan`: what to do when something looks wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawReaction {
    Warn,
    Block,
}

/// `sessions` of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawSessions {
    Shared,
    PerCaller,
}

/// Declares the server fields once and derives both spellings from that one list: the TOML
/// file uses snake_case, `EXTERNAL_MCP_SERVERS_JSON` uses camelCase (and may carry `id` or
/// `name` when it is an array).
macro_rules! server_fields {
    ($($field:ident: $ty:ty,)*) => {
        /// One server as written, every field optional (validation decides what is required).
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawServer {
            $(pub $field: Option<$ty>,)*
        }

        /// One server of `EXTERNAL_MCP_SERVERS_JSON`.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        pub struct EnvServer {
            pub id: Option<String>,
            pub name: Option<String>,
            $(pub $field: Option<$ty>,)*
        }

        impl EnvServer {
            /// Splits off `id` and `name`, which only the array form uses.
            pub fn into_parts(self) -> (Option<String>, Option<String>, RawServer) {
                (self.id, self.name, RawServer { $($field: self.$field,)* })
            }
        }
    };
}

server_fields! {
    enabled: bool,
    transport: RawTransport,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: String,
    url: String,
    headers: BTreeMap<String, String>,
    allow_private: bool,
    allow_http: bool,
    allowed_hosts: Vec<String>,
    allowed_tools: Vec<String>,
    denied_tools: Vec<String>,
    read_only_tools: Vec<String>,
    write_tools: Vec<String>,
    confirm: RawConfirm,
    trust_annotations: bool,
    on_change: RawReaction,
    scan: RawReaction,
    connect_timeout: RawDuration,
    call_timeout: RawDuration,
    tool_timeouts: BTreeMap<String, RawDuration>,
    sandbox: RawServerSandbox,
    sessions: RawSessions,
    auth: RawUpstreamAuth,
    oauth: RawServerOAuth,
    overrides: BTreeMap<String, RawToolOverride>,
}

/// One tool's entry of a server's `overrides` table: what models and clients see instead of
/// the upstream's own title and description.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawToolOverride {
    pub title: Option<String>,
    pub description: Option<String>,
}

/// `auth` of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawUpstreamAuth {
    /// Only the configured headers (the default).
    None,
    /// Each user's own OAuth token.
    Oauth,
}

/// `oauth` of a server (with `auth = "oauth"`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServerOAuth {
    #[serde(alias = "clientId")]
    pub client_id: Option<String>,
    #[serde(alias = "clientSecret")]
    pub client_secret: Option<String>,
    pub scopes: Option<Vec<String>>,
}

/// `[oauth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth {
    pub keys: Option<Vec<String>>,
    pub authorization_timeout: Option<RawDuration>,
    pub client_metadata_url: Option<String>,
}

/// `[webmcp]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWebMcp {
    pub allowed_origins: Option<Vec<String>>,
    /// `owner` or `tenant`.
    pub visible_to: Option<String>,
    pub read_only_tools: Option<Vec<String>>,
    pub write_tools: Option<Vec<String>>,
    pub confirm: Option<RawConfirm>,
    pub scan: Option<RawReaction>,
    pub call_timeout: Option<RawDuration>,
    pub heartbeat: Option<RawDuration>,
    pub heartbeat_timeout: Option<RawDuration>,
    pub max_frame_bytes: Option<u64>,
    pub max_tools: Option<u64>,
    pub max_schema_bytes: Option<u64>,
    pub max_pages_per_user: Option<u64>,
    pub max_pages: Option<u64>,
    /// Client id → the name its page is listed under (`webmcp-<name>`).
    pub names: Option<std::collections::BTreeMap<String, String>>,
}

/// `[user_servers]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawUserServers {
    pub enabled: Option<bool>,
    pub allowed_hosts: Option<Vec<String>>,
    pub max_per_user: Option<u64>,
    pub max_open_per_user: Option<u64>,
    pub idle_close: Option<RawDuration>,
    pub connect_timeout: Option<RawDuration>,
    pub call_timeout: Option<RawDuration>,
    pub scan: Option<RawReaction>,
    pub allow_loopback: Option<bool>,
}

/// A JSON object kept in written order that rejects duplicate keys: `serde_json` would keep
/// the last one silently, and a server pasted twice under one name would vanish unnoticed.
#[derive(Debug)]
pub struct UniqueMap<V>(pub Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UniqueVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueVisitor<V> {
            type Value = UniqueMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(String, V)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, V>()? {
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
                    }
                    entries.push((key, value));
                }
                Ok(UniqueMap(entries))
            }
        }

        deserializer.deserialize_map(UniqueVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests;
