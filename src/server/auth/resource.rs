//! `/mcp` as an OAuth 2.1 protected resource: the RFC 9728 metadata document that tells an MCP
//! client which authorization server to sign in with and for which resource, the
//! `resource_metadata` pointer every challenge carries, and the scopes `/mcp` requires.

use serde_json::{Value, json};

use super::{AuthCode, AuthFailure};
use crate::config::ProtectedResourceConfig;

/// Where RFC 9728 metadata lives, before the resource's path.
pub const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource";

/// The protected resource, ready to serve.
#[derive(Debug)]
pub struct ProtectedResource {
    /// `{public_url}/.well-known/oauth-protected-resource/mcp`.
    metadata_url: String,
    document: Value,
    scopes: Vec<String>,
}

impl ProtectedResource {
    pub(super) fn new(config: &ProtectedResourceConfig) -> ProtectedResource {
        let resource = &config.resource;
        let mut origin = resource.clone();
        origin.set_path("");
        let metadata_url = format!(
            "{}{METADATA_PREFIX}{}",
            origin.as_str().trim_end_matches('/'),
            resource.path()
        );
        let mut document = json!({
            "resource": resource.as_str(),
            "authorization_servers": config.authorization_servers,
            "bearer_methods_supported": ["header"],
            "resource_name": "mcpgate",
        });
        if !config.scopes.is_empty() {
            document["scopes_supported"] = json!(config.scopes);
        }
        ProtectedResource {
            metadata_url,
            document,
            scopes: config.scopes.clone(),
        }
    }

    /// The metadata document (RFC 9728 §2).
    pub fn document(&self) -> &Value {
        &self.document
    }

    /// Whether `path` (after [`METADATA_PREFIX`]) names metadata this gateway serves: the
    /// root form, `/mcp` and `/mcp/{server}` all get the one document, whose resource covers
    /// every path under `/mcp` (clients accept a resource that is a path prefix of theirs).
    pub fn serves(&self, rest: &str) -> bool {
        rest.is_empty()
            || rest == "/"
            || rest == "/mcp"
            || rest
                .strip_prefix("/mcp/")
                .is_some_and(|server| !server.is_empty() && !server.contains('/'))
    }

    /// What a challenge adds: where the metadata is, and the scopes `/mcp` requires.
    pub(super) fn challenge_params(&self) -> String {
        let mut params = format!(", resource_metadata=\"{}\"", self.metadata_url);
        if !self.scopes.is_empty() {
            params.push_str(&format!(", scope=\"{}\"", self.scopes.join(" ")));
        }
        params
    }

    /// A token on `/mcp` must carry every configured scope.
    pub(super) fn check_scopes(&self, granted: &[String]) -> Result<(), AuthFailure> {
        let missing: Vec<&str> = self
            .scopes
            .iter()
            .filter(|scope| !granted.contains(scope))
            .map(String::as_str)
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        Err(AuthFailure::new(
            AuthCode::InsufficientScope,
            format!(
                "the token lacks the scope{} this endpoint requires: {}",
                if missing.len() == 1 { "" } else { "s" },
                missing.join(" ")
            ),
        ))
    }
}

/// Whether a request path is served by the MCP endpoint.
pub(super) fn is_mcp_path(path: &str) -> bool {
    path == "/mcp" || path.starts_with("/mcp/")
}
