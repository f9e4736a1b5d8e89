//! Raw `[server]` and `[server.auth]` sections: the settings of `mcpgate serve` as written.

use serde::Deserialize;

use crate::config::duration::RawDuration;

/// `[server]`. Every field optional: an absent one takes its default, or the environment's
/// value where one exists.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawService {
    /// A socket address as text, so that a bad one is reported with its path.
    pub listen: Option<String>,
    pub public_url: Option<String>,
    pub production: Option<bool>,
    pub max_body_bytes: Option<u64>,
    pub request_timeout: Option<RawDuration>,
    pub header_read_timeout: Option<RawDuration>,
    pub shutdown_grace: Option<RawDuration>,
    pub mcp_session_idle: Option<RawDuration>,
    pub allowed_hosts: Option<Vec<String>>,
    pub allowed_origins: Option<Vec<String>>,
    pub log_json: Option<bool>,
    pub threads: Option<u64>,
    /// The MCP Apps sandbox's own listener, as text (see `listen`).
    pub apps_listen: Option<String>,
    /// The origin browsers reach that listener at, behind any proxy.
    pub apps_origin: Option<String>,
    /// Kept apart from an empty section, although both mean the same: only `mode` selects.
    pub auth: Option<RawAuth>,
}

/// `[server.auth]`. The JWT fields are valid only with `mode = "jwt"`; validation says so
/// instead of ignoring them, since a JWT setup silently left in dev mode is a surprise.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAuth {
    pub mode: Option<RawAuthMode>,
    /// Algorithm names as text, so that `"none"` and unknown names get their own message
    /// with their index.
    pub algorithms: Option<Vec<String>>,
    pub secret: Option<String>,
    pub public_keys: Option<Vec<String>>,
    pub jwks_url: Option<String>,
    pub issuer: Option<String>,
    pub audience: Option<String>,
    pub tenant_claim: Option<String>,
    pub default_tenant: Option<String>,
    pub user_claim: Option<String>,
    pub roles_claim: Option<String>,
    pub leeway: Option<RawDuration>,
    pub authorization_servers: Option<Vec<String>>,
    pub scopes: Option<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawAuthMode {
    Dev,
    None,
    Jwt,
}
