//! Connections to upstream MCP servers and the manager that keeps them healthy.

mod announcing;
pub mod cache;
mod connect;
pub mod extensions;
mod http_link;
mod input;
pub(crate) mod line_transport;
pub mod listing;
mod manager;
pub mod oauth;
pub mod relay;
pub mod sandbox;
mod sessions;
pub mod sse;
pub mod stdio;
pub mod supervisor;
mod tool_call;
pub mod user_servers;
pub mod watch;

use std::{fmt, time::Duration};

pub use connect::{ConnectOptions, Connection, UpstreamClient, connect};
pub use input::{MAX_ROUNDS as MAX_INPUT_ROUNDS, elicits as covers_elicitation};
pub use manager::{Manager, ServerStatus};
pub use relay::{CallRelay, Owner, Resume};

/// Why an upstream operation failed. Distinct from request errors: these describe a backend
/// condition, never the caller's input.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// Connecting or initializing failed.
    #[error("connection failed: {0}")]
    Connect(String),
    /// Connecting did not finish within the deadline.
    #[error("connection did not complete within {after:?}")]
    ConnectTimeout { after: Duration },
    /// The session handshake got an answer it could not use.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The server broke the framing rules (e.g. an endless line on stdout).
    #[error("{0}")]
    Framing(String),
    /// The server is not connected right now.
    #[error("server is {state}{}", last_error.as_ref().map(|e| format!(": {e}")).unwrap_or_default())]
    Unavailable {
        state: ServerState,
        last_error: Option<String>,
    },
    /// The connection dropped while the request was in flight.
    #[error("connection lost during the request")]
    ConnectionLost,
    /// The request did not finish within the deadline (the upstream was told to cancel).
    #[error("no answer within {after:?}")]
    Timeout { after: Duration },
    /// The server answered with a JSON-RPC error.
    #[error("server error {code}: {message}")]
    Rpc { code: i32, message: String },
    /// The server (or a proxy in front of it) failed the request with an HTTP status and no
    /// JSON-RPC error: this request failed, the connection stays.
    #[error("the server answered HTTP {status}")]
    HttpStatus { status: u16 },
    /// Anything else the protocol layer reported.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server needs input from the caller first (an input round of protocol
    /// 2026-07-28), and the caller answers rounds itself: here is the round to hand back.
    #[error("the server asks the caller for input")]
    InputRequired(Box<rmcp::model::InputRequiredResult>),
    /// The server asked for input that was not given: the caller could not or would not
    /// answer, or the rounds ran out.
    #[error("the server's request for input went unanswered: {reason}")]
    InputUnanswered { reason: String },
    /// The server refused the user's own token (`auth = "oauth"`): no longer accepted (401),
    /// or short of a scope the operation needs (403 `insufficient_scope`).
    #[error("the server refused the user's token{}", match .0 {
        oauth::Refusal::InsufficientScope { scope: Some(scope) } => format!(": it needs scope {scope}"),
        oauth::Refusal::InsufficientScope { scope: None } => ": it needs more scope".to_owned(),
        oauth::Refusal::Unauthorized => String::new(),
    })]
    TokenRefused(oauth::Refusal),
    /// The server's list passed the gateway's bounds (`[limits] max_list_items`,
    /// `max_list_bytes`), or its pages loop.
    #[error(transparent)]
    ListRefused(listing::ListRefused),
}

impl UpstreamError {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            UpstreamError::Connect(_) => "upstream_connect_failed",
            UpstreamError::ConnectTimeout { .. } => "upstream_connect_timeout",
            UpstreamError::Handshake(_) => "upstream_handshake_failed",
            UpstreamError::Framing(_) => "upstream_framing",
            UpstreamError::Unavailable { .. } => "upstream_unavailable",
            UpstreamError::ConnectionLost => "upstream_connection_lost",
            UpstreamError::Timeout { .. } => "timeout",
            UpstreamError::Rpc { .. } => "upstream_error",
            UpstreamError::HttpStatus { .. } => "upstream_http_error",
            UpstreamError::Protocol(_) => "upstream_protocol_error",
            UpstreamError::InputRequired(_) => "input_required",
            UpstreamError::InputUnanswered { .. } => "upstream_input_unanswered",
            UpstreamError::TokenRefused(_) => "upstream_token_refused",
            UpstreamError::ListRefused(_) => "upstream_list_too_large",
        }
    }

    pub(crate) fn from_service(err: rmcp::service::ServiceError) -> UpstreamError {
        use rmcp::service::ServiceError;
        match err {
            ServiceError::McpError(e) => UpstreamError::Rpc {
                code: e.code.0,
                message: e.message.into_owned(),
            },
            ServiceError::TransportSend(err) => {
                request_failure(&err).unwrap_or(UpstreamError::ConnectionLost)
            }
            ServiceError::TransportClosed => UpstreamError::ConnectionLost,
            ServiceError::Timeout { timeout } => UpstreamError::Timeout { after: timeout },
            other => UpstreamError::Protocol(other.to_string()),
        }
    }
}

/// Whether an HTTP status without a JSON-RPC error fails that one request and leaves the
/// connection be: a server error (5xx, from the server or a proxy in front of it), a timeout
/// (408), a body too large (413), content it would not process (422), a rate limit (429),
/// headers too large (431: arguments promoted to headers). Any other refusal (400, 401, 403,
/// 404, 405, 406, 415...) says the server no longer takes what the connection negotiated: its
/// session forgotten (404, and 400 from SDK releases before they said 404), the credential
/// refused, the protocol version dropped after a restart. That ends the connection, and the
/// supervisor connects again; otherwise every later call would fail the same way for good.
pub(crate) fn fails_request_alone(status: u16) -> bool {
    status >= 500 || matches!(status, 408 | 413 | 422 | 429 | 431)
}

/// How a request failed at the HTTP level without the connection failing: a status that
/// [`fails_request_alone`] and no JSON-RPC error (Streamable HTTP, or the legacy transport's
/// message POST), an answer of another media type, or one past the bound of a body or an
/// event. `None`: the connection itself failed (network, another status, session expired,
/// the transport closed), which ends it.
///
/// Only that one request failed: over Streamable HTTP each request is a POST of its own, and
/// a 500 from the server or a proxy for one says nothing of the others in flight. Taking it
/// for a lost connection reset the shared session under every other caller.
fn request_failure(err: &rmcp::transport::DynamicTransportError) -> Option<UpstreamError> {
    use rmcp::transport::streamable_http_client::StreamableHttpError as E;
    let by_status =
        |status: u16| fails_request_alone(status).then_some(UpstreamError::HttpStatus { status });
    // The legacy transport's message POST.
    if let Some(sse::SseError::PostStatus { status }) = err.error.downcast_ref::<sse::SseError>() {
        return by_status(*status);
    }
    let err = err.error.downcast_ref::<E<reqwest::Error>>()?;
    Some(match err {
        E::HttpStatus(status) => return by_status(status.status),
        // rmcp's words for any other status: `HTTP {status}: {body}` (the body is the
        // server's, not repeated).
        E::UnexpectedServerResponse(message) => match message
            .strip_prefix("HTTP ")
            .and_then(|rest| rest.get(..3))
            .and_then(|status| status.parse().ok())
        {
            Some(status) => return by_status(status),
            None => UpstreamError::Protocol("the server's answer is no JSON-RPC message".into()),
        },
        E::Deserialize(_) => {
            UpstreamError::Protocol("the server's answer is no JSON-RPC message".into())
        }
        E::UnexpectedContentType(_) => UpstreamError::Protocol(
            "the server answered with neither JSON nor an event stream".into(),
        ),
        E::ResponseBodyTooLarge { max_size } => UpstreamError::Protocol(format!(
            "the server's answer passed the bound of {max_size} bytes"
        )),
        E::UnexpectedEndOfStream => {
            UpstreamError::Protocol("the server ended the call's stream before answering".into())
        }
        _ => return None,
    })
}

/// A server's connection state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerState {
    /// First connection attempt under way.
    Connecting,
    /// Connected, tool list current.
    Ready,
    /// Not usable right now (connection lost, listing failed, reconnecting); the last good
    /// tools are kept and shown as stale.
    Degraded,
    /// Gave up after the configured attempts; a manual refresh tries again.
    Failed,
    /// An `auth = "oauth"` server nobody has connected yet: its tools are listed once a user
    /// has.
    AwaitingAuthorization,
}

impl ServerState {
    pub fn as_str(self) -> &'static str {
        match self {
            ServerState::Connecting => "connecting",
            ServerState::Ready => "ready",
            ServerState::Degraded => "degraded",
            ServerState::Failed => "failed",
            ServerState::AwaitingAuthorization => "authorization_required",
        }
    }
}

impl fmt::Display for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
