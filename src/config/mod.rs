//! Configuration: raw serde types from TOML, `mcpServers` JSON and the environment, validated
//! into [`Config`]. Everything downstream sees only the validated types.

mod access_rules;
mod agent;
mod agent_rules;
mod duration;
mod env;
mod external_env;
mod gate;
mod gate_rules;
mod host;
pub mod import;
mod limit_rules;
mod load;
mod mcp_servers;
mod raw;
mod sandbox;
mod sandbox_rules;
mod secret;
mod secret_rules;
mod server_rules;
mod service;
mod user_servers;
mod validate;
mod webmcp;

use std::{fmt, path::PathBuf, time::Duration};

pub use agent::{AgentConfig, LlmConfig, ModelsConfig, NamedModel, Price};
pub use env::Env;
pub use gate::{
    AccessConfig, AuditConfig, AuditSync, CallLimits, ConfirmationConfig, Grant, Operator,
    PinsConfig, ReadsWhenDown, ResultOverflow, SharedConfig, StateConfig, TenantAccess,
};
pub use host::normal_host;
pub use load::{ConfigSource, Loaded, load, load_with_embedded_state};
pub use sandbox::{
    DEFAULT_MEMORY_BYTES, DEFAULT_OPEN_FILES, DEFAULT_PROCESSES, Network, RunAs, Sandbox,
    SandboxMode,
};
pub use secret::{Secret, SecretTemplate};
pub use service::{AuthConfig, JwtAlgorithm, JwtConfig, ProtectedResourceConfig, ServiceConfig};
pub use user_servers::{USER_SERVER_PREFIX, UserServersConfig, user_host_allowed};
pub use validate::{ConfigError, Problem};
pub use webmcp::{PageVisibility, WEBMCP_PREFIX, WebMcpConfig};

/// A validated server id: `^[a-z][a-z0-9-]{0,31}$` (no `_`, no `.`, so `server.tool` and
/// `server_tool` split unambiguously).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServerId(String);

impl ServerId {
    /// Checks the id rule; `None` when `raw` breaks it.
    pub fn new(raw: &str) -> Option<ServerId> {
        let mut chars = raw.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        (first_ok && rest_ok && raw.len() <= 32).then(|| ServerId(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

/// The whole validated configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// Servers in id order (deterministic catalog order follows from it).
    pub servers: Vec<ServerConfig>,
    pub limits: Limits,
    pub cache: CacheConfig,
    pub reconnect: ReconnectConfig,
    /// `None`: single-tenant mode, every caller sees every server.
    pub access: Option<AccessConfig>,
    pub call_limits: CallLimits,
    pub confirmations: ConfirmationConfig,
    pub state: StateConfig,
    /// Redis and PostgreSQL shared by several instances; none by default.
    pub shared: SharedConfig,
    pub audit: AuditConfig,
    pub pins: PinsConfig,
    /// `mcpgate serve`.
    pub service: ServiceConfig,
    /// The model for the agent loop; `None` when none is configured (chat is then refused).
    /// With `[[llm.models]]`, the default one of `models`.
    pub llm: Option<LlmConfig>,
    /// Several models, routed (`[[llm.models]]`); empty when `[llm]` names one.
    pub models: ModelsConfig,
    pub agent: AgentConfig,
    /// How users' upstream OAuth tokens are kept (servers with `auth = "oauth"`).
    pub oauth: OAuthConfig,
    /// Tools of browser pages (the WebMCP bridge).
    pub webmcp: WebMcpConfig,
    /// Remote servers users add for themselves (off by default).
    pub user_servers: UserServersConfig,
    /// `[scan]`: the model's second opinion on tool definitions (off by default).
    pub scan_review: ScanReviewConfig,
}

/// `[scan]`: a model's second opinion on the definitions the poisoning scan's rules pass,
/// asked of the default `[llm]` model in the background (see `catalog::review`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanReviewConfig {
    /// `model_review`: ask it at all.
    pub enabled: bool,
    /// `model_review_blocks`: its flag alone is high (quarantines under `scan = "block"`).
    pub blocks: bool,
}

/// `[oauth]`: users' own accounts on upstream servers.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuthConfig {
    /// Keys that seal tokens at rest, each a `${VAR}` reference: the first seals, every one
    /// opens (rotation). Required when a server has `auth = "oauth"`.
    pub keys: Vec<SecretTemplate>,
    /// How long a user has to finish signing in at the authorization server.
    pub authorization_timeout: Duration,
    /// Where the gateway's Client ID Metadata Document is published (an https URL with a
    /// path), used as its client id where an authorization server supports that; `None`:
    /// `{public_url}/oauth/client-metadata.json` when `public_url` is https.
    pub client_metadata_url: Option<url::Url>,
}

impl Default for OAuthConfig {
    fn default() -> Self {
        OAuthConfig {
            keys: Vec::new(),
            authorization_timeout: Duration::from_secs(600),
            client_metadata_url: None,
        }
    }
}

/// `auth = "oauth"` on an HTTP server: each user connects their own account.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UpstreamOAuth {
    /// A client registered with the server's authorization server beforehand; without it the
    /// gateway registers itself (RFC 7591) where the server allows.
    pub client_id: Option<SecretTemplate>,
    /// Its secret, a `${VAR}` reference (confidential clients).
    pub client_secret: Option<SecretTemplate>,
    /// Scopes asked for; empty: those the server's challenge or metadata names.
    pub scopes: Vec<String>,
}

/// Gateway-wide bounds; each has a safe default and can be overridden per server where noted.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Deadline for connecting and initializing one upstream (per server overridable).
    pub connect_timeout: Duration,
    /// Deadline for one tool call (per server overridable).
    pub call_timeout: Duration,
    /// Largest tool result passed on, in bytes of serialized JSON.
    pub max_result_bytes: usize,
    /// Largest MCP Apps view (`ui://` resource) read, in bytes of serialized JSON: a view
    /// goes to a host to render, not to a model, and bundled single-file apps are large.
    pub max_view_bytes: usize,
    /// Longest line a stdio upstream may print; a child that writes without newlines is cut
    /// off instead of growing our memory.
    pub max_line_bytes: usize,
    /// How much of a child's stderr is kept per line in the log.
    pub max_stderr_line_bytes: usize,
    /// Deadline for listing one upstream's tools during a refresh.
    pub list_timeout: Duration,
    /// Most tools (prompts, resources, resource templates) one server's listing may hold,
    /// over all its pages.
    pub max_list_items: usize,
    /// Most bytes of JSON one server's listing may hold, over all its pages.
    pub max_list_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(60),
            max_result_bytes: 1024 * 1024,
            max_view_bytes: 4 * 1024 * 1024,
            max_line_bytes: 4 * 1024 * 1024,
            max_stderr_line_bytes: 4096,
            list_timeout: Duration::from_secs(10),
            max_list_items: 10_000,
            max_list_bytes: 32 * 1024 * 1024,
        }
    }
}

/// Tool-list cache bounds.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheConfig {
    pub ttl: Duration,
    pub max_entries: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            ttl: Duration::from_secs(60),
            max_entries: 1000,
        }
    }
}

/// Bounded exponential backoff for reconnecting a failed upstream.
#[derive(Debug, Clone, PartialEq)]
pub struct ReconnectConfig {
    pub initial_delay: Duration,
    pub max_delay: Duration,
    /// Attempts after a failure before the server stays `failed` (until a manual refresh).
    pub max_attempts: u32,
}

impl Default for ReconnectConfig {
    fn default() -> Self {
        ReconnectConfig {
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
            max_attempts: 8,
        }
    }
}

/// One validated upstream server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub id: ServerId,
    pub transport: TransportConfig,
    /// Permit loopback/private addresses for this server (local experiments).
    pub allow_private: bool,
    /// Permit loopback addresses alone (a user's own server under the tests' override).
    pub allow_loopback: bool,
    /// Permit plain `http://` for this server: as validated, `allow_http` or a loopback URL
    /// with `allow_private` (the network layer applies it as it stands).
    pub allow_http: bool,
    /// Exact-match host allowlist for HTTP servers; empty means "the URL's own host".
    pub allowed_hosts: Vec<String>,
    /// If set, only these upstream tool names are exposed.
    pub allowed_tools: Option<Vec<String>>,
    /// Upstream tool names never exposed.
    pub denied_tools: Vec<String>,
    pub confirm: Confirm,
    pub read_only_tools: Vec<String>,
    pub write_tools: Vec<String>,
    /// Count upstream `readOnlyHint`/`destructiveHint` (untrusted otherwise).
    pub trust_annotations: bool,
    /// Whose upstream session a call goes over (HTTP servers; a stdio server is one shared
    /// process).
    pub sessions: Sessions,
    pub on_change: OnChange,
    pub scan: ScanMode,
    pub connect_timeout: Option<Duration>,
    pub call_timeout: Option<Duration>,
    /// Per-tool call timeouts, by upstream tool name.
    pub tool_timeouts: Vec<(String, Duration)>,
    /// Where the server was configured.
    pub source: ServerSource,
    /// `auth = "oauth"`: calls carry each user's own token (HTTP servers).
    pub oauth: Option<UpstreamOAuth>,
    /// By upstream tool name, in name order: what models and clients see instead of the
    /// upstream's own title and description.
    pub overrides: Vec<(String, ToolOverride)>,
}

/// An operator's replacement for a tool's title and description (`[servers.x.overrides.tool]`).
/// Applied after discovery: the tool's fingerprint, its pin and rug-pull detection are of the
/// upstream's own definition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolOverride {
    pub title: Option<String>,
    pub description: Option<String>,
}

impl ToolOverride {
    /// `tool` as models and clients see it with this override.
    pub fn apply(&self, tool: &rmcp::model::Tool) -> rmcp::model::Tool {
        let mut shown = tool.clone();
        if let Some(title) = &self.title {
            shown.title = Some(title.clone());
        }
        if let Some(description) = &self.description {
            shown.description = Some(description.clone().into());
        }
        shown
    }
}

/// Whose upstream session a relayed tool call goes over.
///
/// What an upstream sends that names no call (a sampling or elicitation request on its
/// standalone stream, a log message) can be attributed only when the session it arrives on
/// belongs to one caller. `PerCaller` opens an upstream session for each caller (tenant, user
/// and session) on its first relayed call, closed when idle and bounded in number, so all
/// that arrives on it is that caller's; listing, resources and calls nobody relays stay on the
/// server's shared session. `Shared` sends every call over the one session: cheaper (no
/// session opened per caller), and a request that names no call reaches a caller only when
/// exactly one call is running, else it is refused with a reason. Only HTTP servers have
/// sessions to spare: a stdio server is one process, always shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sessions {
    Shared,
    PerCaller,
}

/// Where a server was configured, as `mcpgate tools` and the banner show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerSource {
    /// A configuration file (TOML, or `mcpServers` JSON).
    File,
    /// `EXTERNAL_MCP_SERVERS_JSON`.
    Environment,
    /// The embedded default (the built-in demo server, when nothing else is configured).
    Default,
    /// Added by a user for themselves (`[user_servers]`), never in a configuration.
    User,
    /// Built by a program embedding the library.
    Code,
}

impl ServerSource {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerSource::File => "file",
            ServerSource::Environment => "environment",
            ServerSource::Default => "default",
            ServerSource::Code => "code",
            ServerSource::User => "user",
        }
    }
}

impl ServerConfig {
    /// A server with every option at its default, for `transport`.
    pub fn new(id: ServerId, transport: TransportConfig) -> ServerConfig {
        ServerConfig {
            id,
            transport,
            allow_private: false,
            allow_loopback: false,
            allow_http: false,
            allowed_hosts: Vec::new(),
            allowed_tools: None,
            denied_tools: Vec::new(),
            confirm: Confirm::Writes,
            read_only_tools: Vec::new(),
            write_tools: Vec::new(),
            trust_annotations: false,
            sessions: Sessions::PerCaller,
            on_change: OnChange::Warn,
            scan: ScanMode::Warn,
            connect_timeout: None,
            call_timeout: None,
            tool_timeouts: Vec::new(),
            source: ServerSource::Code,
            oauth: None,
            overrides: Vec::new(),
        }
    }

    /// The override of upstream tool `name`, if any.
    pub fn override_of(&self, name: &str) -> Option<&ToolOverride> {
        self.overrides
            .binary_search_by(|(tool, _)| tool.as_str().cmp(name))
            .ok()
            .map(|i| &self.overrides[i].1)
    }

    /// Whether the tool allow/deny lists let `tool` (an upstream name) through.
    pub fn exposes(&self, tool: &str) -> bool {
        let allowed = self
            .allowed_tools
            .as_ref()
            .is_none_or(|list| list.iter().any(|t| t == tool));
        allowed && !self.denied_tools.iter().any(|t| t == tool)
    }
}

/// How to reach a server.
#[derive(Debug, Clone)]
pub enum TransportConfig {
    Stdio(StdioConfig),
    Http(HttpConfig),
    /// A server in this process (library use and tests); never produced from a file.
    InProcess(InProcess),
}

/// Makes a fresh in-process server for each (re)connection and returns the client's end of
/// the byte stream it serves.
#[derive(Clone)]
pub struct InProcess(pub std::sync::Arc<dyn Fn() -> tokio::io::DuplexStream + Send + Sync>);

impl fmt::Debug for InProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InProcess")
    }
}

#[derive(Debug, Clone)]
pub struct StdioConfig {
    /// Program to run (no shell); resolved on `PATH` of the configured environment.
    pub command: String,
    pub args: Vec<String>,
    /// The child's whole environment (nothing is inherited), values possibly `${VAR}` references.
    pub env: Vec<(String, SecretTemplate)>,
    pub cwd: Option<PathBuf>,
    /// Who it runs as and what it may touch; [`Sandbox::default`] is on, as the gateway's
    /// user (refused for root), with no network.
    pub sandbox: Sandbox,
}

#[derive(Debug, Clone)]
pub struct HttpConfig {
    pub url: url::Url,
    pub kind: HttpKind,
    pub headers: Vec<(String, SecretTemplate)>,
}

/// Which HTTP transport to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpKind {
    /// Streamable HTTP (2025-03-26 and later).
    Streamable,
    /// Legacy HTTP+SSE (2024-11-05).
    Sse,
    /// Streamable HTTP first, legacy SSE as fallback.
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirm {
    All,
    Writes,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnChange {
    Warn,
    Block,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanMode {
    Warn,
    Block,
}

impl Config {
    /// The configuration used when no file is given and none is found: the built-in demo
    /// server, started from this very binary.
    pub fn embedded_default(exe: PathBuf) -> Config {
        let id = ServerId::new("demo").expect("static id is valid");
        let mut demo = ServerConfig::new(
            id,
            TransportConfig::Stdio(StdioConfig {
                command: exe.to_string_lossy().into_owned(),
                args: vec!["demo-server".to_owned()],
                env: Vec::new(),
                cwd: None,
                // Our own code: sandboxed, but as the gateway's user even when that is root,
                // so a fresh checkout anywhere runs it.
                sandbox: Sandbox {
                    run_as: RunAs::User {
                        name: "the gateway's user".to_owned(),
                        uid: nix::unistd::geteuid().as_raw(),
                        gid: nix::unistd::getegid().as_raw(),
                    },
                    ..Sandbox::default()
                },
            }),
        );
        demo.source = ServerSource::Default;
        demo.read_only_tools = crate::demo::READ_ONLY_TOOLS
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        Config {
            servers: vec![demo],
            ..Config::default()
        }
    }

    /// How long every server's first connection attempt may take: the slowest connect
    /// deadline, one tool listing, and a second of slack. Waiting this long for a new gateway
    /// to settle is always bounded.
    pub fn settle_deadline(&self) -> Duration {
        let limits = &self.limits;
        let longest_connect = self
            .servers
            .iter()
            .filter_map(|s| s.connect_timeout)
            .fold(limits.connect_timeout, Duration::max);
        longest_connect + limits.list_timeout + Duration::from_secs(1)
    }

    /// The stdio servers a gateway running as `gateway_uid` would refuse to start, by their
    /// sandbox's `run_as` (see [`Sandbox::refusal`]).
    pub fn sandbox_problems(&self, gateway_uid: u32) -> Vec<Problem> {
        self.servers
            .iter()
            .filter_map(|server| match &server.transport {
                TransportConfig::Stdio(stdio) => {
                    stdio.sandbox.refusal(gateway_uid).map(|why| Problem {
                        path: format!("servers.{}.sandbox.run_as", server.id),
                        message: why.to_owned(),
                    })
                }
                _ => None,
            })
            .collect()
    }

    pub fn server(&self, id: &ServerId) -> Option<&ServerConfig> {
        self.servers.iter().find(|s| &s.id == id)
    }
}
