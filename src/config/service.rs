//! Validated settings of `mcpgate serve`: where it listens, how callers authenticate, and the
//! HTTP layer's bounds.

use std::{net::SocketAddr, path::PathBuf, time::Duration};

use super::SecretTemplate;

/// The HTTP service.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceConfig {
    pub listen: SocketAddr,
    /// The origin clients reach the gateway at (`https://gateway.example.com`), behind any
    /// proxy: it names `/mcp` as an OAuth protected resource.
    pub public_url: Option<url::Url>,
    pub auth: AuthConfig,
    /// Refuse to start with dev mode, no auth, or a weak JWT secret.
    pub production: bool,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Deadline for one request (a tool call's own deadline is shorter or equal).
    pub request_timeout: Duration,
    /// Longest wait for a request's headers once a connection has started sending them: a
    /// client that sends them a byte at a time (slow loris) cannot hold a connection longer.
    pub header_read_timeout: Duration,
    /// How long shutdown waits for in-flight calls.
    pub shutdown_grace: Duration,
    /// An MCP session that receives nothing for this long is closed.
    pub mcp_session_idle: Duration,
    /// Host header values accepted (DNS-rebinding protection); empty: loopback names only.
    pub allowed_hosts: Vec<String>,
    /// Origin header values accepted on browser requests; empty: same origin only.
    pub allowed_origins: Vec<String>,
    /// Write logs as JSON lines.
    pub log_json: bool,
    /// Threads that serve HTTP, each with a runtime of its own ([lanes](crate::lane)).
    pub threads: usize,
    /// Where the MCP Apps sandbox listens: the page renders apps in frames of another origin
    /// than its own (the MCP Apps spec requires it of web hosts), served by this listener
    /// alone. `None`: the IP address of `listen` with a port the system picks.
    pub apps_listen: Option<SocketAddr>,
    /// The origin browsers reach the sandbox at (`https://apps.example.com`), when a proxy
    /// stands in front of it; `None`: the page's own host name with the sandbox's port.
    pub apps_origin: Option<String>,
}

/// [`ServiceConfig::header_read_timeout`] by default: hyper's own default, which serving
/// must turn on by giving hyper a timer.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            public_url: None,
            auth: AuthConfig::Dev,
            production: false,
            max_body_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(120),
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            shutdown_grace: Duration::from_secs(10),
            mcp_session_idle: Duration::from_secs(300),
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            log_json: false,
            threads: default_threads(),
            apps_listen: None,
            apps_origin: None,
        }
    }
}

/// One serving thread per core the process may use.
fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, crate::lane::MAX_LANES)
}

/// How callers prove who they are.
#[derive(Debug, Clone, PartialEq)]
pub enum AuthConfig {
    /// A random token generated at start and printed; loopback binds only.
    Dev,
    /// No authentication; loopback binds only, announced loudly (for local tools that send
    /// no credentials, like the conformance suite).
    None,
    /// Bearer JWTs.
    Jwt(Box<JwtConfig>),
}

/// JWT verification settings.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtConfig {
    /// Accepted algorithms, pinned: tokens signed otherwise are refused.
    pub algorithms: Vec<JwtAlgorithm>,
    /// HS256 secret, from the environment (`${MCPGATE_JWT_SECRET}`).
    pub secret: Option<SecretTemplate>,
    /// PEM public keys (RS256/ES256), by file path.
    pub public_keys: Vec<PathBuf>,
    /// A JWKS URL, fetched through the SSRF-safe client.
    pub jwks_url: Option<url::Url>,
    pub issuer: String,
    pub audience: String,
    /// Claim names mapped to the call context.
    pub tenant_claim: String,
    /// The tenant of a token without the tenant claim: single-tenant mode only (no
    /// `[access]`), where ordinary identity providers' tokens name no tenant; with `[access]`
    /// such a token is refused.
    pub default_tenant: Option<String>,
    pub user_claim: String,
    pub roles_claim: String,
    /// Clock skew tolerated on `exp` and `nbf` (at most 30 s).
    pub leeway: Duration,
    /// `/mcp` as an OAuth 2.1 protected resource (with `[server] public_url`).
    pub protected: Option<ProtectedResourceConfig>,
}

/// What `/.well-known/oauth-protected-resource` says (RFC 9728) and what `/mcp` requires.
#[derive(Debug, Clone, PartialEq)]
pub struct ProtectedResourceConfig {
    /// `{public_url}/mcp`: the resource identifier clients ask tokens for (RFC 8707), which
    /// the tokens' `aud` must name (besides `audience`). `/mcp/{server}` is under it.
    pub resource: url::Url,
    /// Issuers of the authorization servers clients are pointed at, as written (clients
    /// compare them exactly with each server's own `issuer`, trailing `/` included).
    pub authorization_servers: Vec<String>,
    /// Scopes advertised, and required of every token on `/mcp`.
    pub scopes: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlgorithm {
    Hs256,
    Rs256,
    Es256,
}
