//! The MCP endpoint `/mcp` (Streamable HTTP): the caller's merged catalog served through the
//! gate, for session clients (`initialize`) and 2026-07-28 clients (`server/discover`) alike.
//!
//! - `handler`: the [`rmcp::ServerHandler`]: who is calling, `tools/list`, `tools/call`,
//!   resources, prompts and completion.
//! - `content`: resource, prompt and completion errors as JSON-RPC errors.
//! - `confirm`: write tools the user must confirm: elicitation in a session, input rounds on
//!   2026-07-28, or an out-of-band approval named in the tool error.
//! - `convert`: catalog tools, shaped results and gateway errors into MCP types.
//! - `changes`: `notifications/tools/list_changed` when the caller's tools change.
//! - `sessions`: rmcp's in-memory sessions, capped.

mod changes;
mod confirm;
mod content;
mod convert;
mod handler;
mod sessions;

use std::sync::Arc;

use axum::{Router, middleware};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::AppState;
use handler::GatewayServer;
use sessions::CappedSessions;

/// Where the endpoint is served.
pub const MCP_PATH: &str = "/mcp";

/// Host names accepted when none are configured (the same as the REST API's guard).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The MCP endpoint as a router serving [`MCP_PATH`]: bearer authentication (401 before any
/// MCP processing), then rmcp's Streamable HTTP service. Cancelling `shutdown` closes every
/// session and open stream, so a graceful shutdown is not held up by idle SSE streams.
pub fn mcp_router<S>(state: AppState, shutdown: CancellationToken) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let hosts: Vec<String> = if state.service.allowed_hosts.is_empty() {
        LOOPBACK_HOSTS.map(String::from).to_vec()
    } else {
        state.service.allowed_hosts.clone()
    };
    // Origins are checked by the service's own guard around every route (same origin or
    // configured); rmcp's check knows no "same origin" and would refuse the gateway's page.
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_max_request_body_bytes(state.service.max_body_bytes)
        .with_cancellation_token(shutdown.clone());
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(GatewayServer::new(
                handler_state.clone(),
                shutdown.child_token(),
            ))
        },
        Arc::new(CappedSessions::new(sessions::MAX_SESSIONS)),
        config,
    );
    Router::new()
        .route_service(MCP_PATH, service)
        .route_layer(middleware::from_fn_with_state(state, super::authenticate))
}

#[cfg(test)]
mod tests;
