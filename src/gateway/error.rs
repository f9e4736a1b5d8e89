//! The gateway's typed errors, each with a stable machine-readable code.

use std::time::{Duration, SystemTime};

use crate::upstream::UpstreamError;

/// Why a gateway operation did not succeed. Denials, limits, timeouts and upstream failures
/// are distinct kinds, so a program (or a model) can act on them.
#[derive(Debug, Clone, thiserror::Error)]
pub enum GatewayError {
    /// No such tool (or not visible to the caller: the two are indistinguishable on purpose).
    #[error("unknown tool `{name}`")]
    NotFound { name: String },
    /// The arguments are not acceptable.
    #[error("invalid arguments: {reason}")]
    InvalidArguments { reason: String },
    /// The tool's definition changed since it was pinned, or it failed the poisoning scan,
    /// under a blocking policy.
    #[error("`{tool}` is quarantined: {reason}")]
    Quarantined { tool: String, reason: String },
    /// A new tool not yet pinned, under a blocking policy.
    #[error("`{tool}` is new and waits for review (run `mcpgate pin` after reviewing it)")]
    PendingReview { tool: String },
    /// The call needs the user's confirmation: approve `confirmation_id`, then call again with
    /// the token.
    #[error(
        "`{tool}` needs confirmation: approve confirmation {confirmation_id}, then call again with the token"
    )]
    ConfirmationRequired {
        confirmation_id: String,
        tool: String,
        args_hash: String,
        expires_at: SystemTime,
    },
    /// The confirmation token is unknown, used, expired, or bound to another call.
    #[error("the confirmation token is not valid for this call: {reason}")]
    ConfirmationInvalid { reason: &'static str },
    /// No confirmation with that id waits for this caller: unknown, expired, already decided,
    /// or another caller's. The four are one answer on purpose, so ids cannot be probed.
    #[error(
        "no such confirmation waits for you (unknown, expired, already decided, or another caller's)"
    )]
    ConfirmationNotFound,
    /// A rate or concurrency limit was hit.
    #[error("limit exceeded: {limit}")]
    LimitExceeded {
        limit: String,
        retry_after: Option<Duration>,
    },
    /// The tool ran and reported an error (`isError`).
    #[error("the tool reported an error: {message}")]
    ToolError { message: String },
    /// The result is larger than `max_result_bytes`.
    #[error("the result is {size} bytes, over the {limit}-byte limit")]
    ResultTooLarge { size: usize, limit: usize },
    /// The call did not finish in time.
    #[error("the tool did not answer within {after:?}")]
    Timeout { after: Duration },
    /// The upstream could not serve the call.
    #[error("upstream `{server}`: {source}")]
    Upstream {
        server: String,
        source: UpstreamError,
    },
    /// A browser page could not serve the call (WebMCP).
    #[error("page `{server}`: {source}")]
    Page {
        server: String,
        source: crate::webmcp::PageError,
    },
    /// A store the decision depends on could not be reached: the call is refused (fail closed).
    #[error("{what} is unavailable; the call was refused")]
    StoreUnavailable { what: &'static str },
    /// The server wants the caller's own account (`auth = "oauth"`), which the caller has not
    /// connected, or whose connection expired; `connect` is the route that starts one.
    #[error("{message}")]
    AuthorizationRequired {
        server: String,
        connect: String,
        message: String,
    },
    /// The caller's OAuth connection could not be used right now (its authorization server
    /// did not answer a refresh, or the token store failed).
    #[error("{message}")]
    OAuthUnavailable { server: String, message: String },
}

impl GatewayError {
    /// A stable, machine-readable code (listed in the README).
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::NotFound { .. } => "not_found",
            GatewayError::InvalidArguments { .. } => "invalid_arguments",
            GatewayError::Quarantined { .. } => "quarantined",
            GatewayError::PendingReview { .. } => "pending_review",
            GatewayError::ConfirmationRequired { .. } => "confirmation_required",
            GatewayError::ConfirmationInvalid { .. } => "confirmation_invalid",
            GatewayError::ConfirmationNotFound => "not_found",
            GatewayError::LimitExceeded { .. } => "limit_exceeded",
            GatewayError::ToolError { .. } => "tool_error",
            GatewayError::ResultTooLarge { .. } => "result_too_large",
            GatewayError::Timeout { .. } => "timeout",
            GatewayError::Upstream { source, .. } => source.code(),
            GatewayError::Page { source, .. } => source.code(),
            GatewayError::StoreUnavailable { .. } => "store_unavailable",
            GatewayError::AuthorizationRequired { .. } => "authorization_required",
            GatewayError::OAuthUnavailable { .. } => "oauth_unavailable",
        }
    }

    /// Whether the call was refused by policy before reaching the upstream.
    pub fn is_denial(&self) -> bool {
        matches!(
            self,
            GatewayError::NotFound { .. }
                | GatewayError::InvalidArguments { .. }
                | GatewayError::Quarantined { .. }
                | GatewayError::PendingReview { .. }
                | GatewayError::ConfirmationRequired { .. }
                | GatewayError::ConfirmationInvalid { .. }
                | GatewayError::ConfirmationNotFound
                | GatewayError::LimitExceeded { .. }
                | GatewayError::StoreUnavailable { .. }
                | GatewayError::AuthorizationRequired { .. }
        )
    }

    /// The gateway error of an OAuth failure on the way to `server`.
    /// [`GatewayError::from_oauth`] for a user's own server `user-<name>`, which is connected
    /// on `/api/v1/me/servers/<name>/connect`.
    pub fn from_user_server_oauth(server: &str, err: crate::oauth::OAuthError) -> GatewayError {
        GatewayError::from_oauth(server, err).with_own_connect_route()
    }

    /// An `authorization_required` of a user's own server `user-<name>` names its own
    /// connect route, `/api/v1/me/servers/<name>/connect`.
    pub(crate) fn with_own_connect_route(self) -> GatewayError {
        match self {
            GatewayError::AuthorizationRequired {
                server,
                connect,
                message,
            } => {
                let name = server
                    .strip_prefix(crate::config::USER_SERVER_PREFIX)
                    .unwrap_or(&server);
                let own = format!("/api/v1/me/servers/{name}/connect");
                GatewayError::AuthorizationRequired {
                    message: message.replace(&connect, &own),
                    connect: own,
                    server,
                }
            }
            other => other,
        }
    }

    pub fn from_oauth(server: &str, err: crate::oauth::OAuthError) -> GatewayError {
        use crate::oauth::OAuthError;
        match err {
            OAuthError::AuthorizationRequired { .. }
            | OAuthError::ConnectionExpired { .. }
            | OAuthError::MoreScope { .. } => GatewayError::AuthorizationRequired {
                server: server.to_owned(),
                connect: format!("/api/v1/mcp/servers/{server}/connect"),
                message: err.to_string(),
            },
            other => GatewayError::OAuthUnavailable {
                server: server.to_owned(),
                message: other.to_string(),
            },
        }
    }
}
