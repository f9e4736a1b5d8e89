//! The MCP endpoint `/mcp` (Streamable HTTP): the caller's merged catalog served through the
//! gate, for session clients (`initialize`) and 2026-07-28 clients (`server/discover`) alike;
//! and `/mcp/{server}`, one server's view under its upstream names, through the same gate.
//!
//! - `handler`: the [`rmcp::ServerHandler`]: who is calling, `tools/list`, `tools/call`,
//!   resources, prompts and completion.
//! - `scope`: the per-server view: its tools under upstream names, mapped back to canonical ids.
//! - `content`: resource, prompt and completion errors as JSON-RPC errors.
//! - `call`: one `tools/call` through the gate: relay, confirmation, input rounds.
//! - `confirm`: write tools the user must confirm: elicitation in a session, input rounds on
//!   2026-07-28, or an out-of-band approval named in the tool error.
//! - `rounds`: upstream input rounds handed back to 2026-07-28 clients, until their retry.
//! - `convert`: catalog tools, shaped results and gateway errors into MCP types.
//! - `changes`: `notifications/tools/list_changed` when the caller's tools change.
//! - `relay`: what an upstream sends during a call (progress, logs, sampling, elicitation)
//!   relayed to the calling client.
//! - `sessions`: rmcp's in-memory sessions, capped.
//! - `direct`: a session's `tools/call` that needs nothing of the client during the call,
//!   answered on the request's own task rather than through rmcp's session loop.
//! - `watches`: a session's resource subscriptions and the updates relayed to it.

mod answers;
mod call;
mod changes;
mod confirm;
mod content;
mod convert;

/// A gateway result as an MCP `CallToolResult` (an App's calls from the page get this form).
pub(super) use convert::{failure as call_failure, success as call_result};
mod direct;
mod handler;
mod relay;
mod rounds;
mod scope;
mod sessions;
mod watches;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use axum::{
    Router,
    extract::{Path, Request},
    http::StatusCode,
    middleware,
    response::{IntoResponse, Response},
    routing::any,
};
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::{ApiError, AppState};
use crate::{config::ServerId, policy::CallContext};
use direct::Direct;
use handler::GatewayServer;
use rounds::Rounds;
use sessions::{CappedSessions, SharedSessions};

/// Where the endpoint is served.
pub const MCP_PATH: &str = "/mcp";

/// Where one server's view is served, `{server}` its id.
pub const SCOPED_MCP_PATH: &str = "/mcp/{server}";

/// Host names accepted when none are configured (the same as the REST API's guard).
const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Most per-server views kept at once. Each is made on first use for a configured server,
/// so the map holds at most the servers configured since start; past this many (reloads
/// adding and removing servers), views of servers no longer configured are dropped first.
const MAX_SCOPES: usize = 256;

/// Most MCP sessions open at once on one per-server view. Views have their own session
/// managers (a session must not cross views), so all of them together hold at most
/// `MAX_SCOPES` times this; a view is one client's connection to one server, so fewer than
/// the merged endpoint's cap suffice.
const MAX_SCOPE_SESSIONS: usize = 256;

type McpService = StreamableHttpService<GatewayServer, CappedSessions>;

/// One endpoint (`/mcp`, or one server's view): rmcp's service, and the calls answered
/// without it. Shared, not cloned, per request: rmcp's service clones its whole
/// configuration with itself.
struct Endpoint {
    rmcp: McpService,
    direct: Arc<Direct>,
    /// The sessions rmcp keeps (for a refusal at their cap).
    sessions: Arc<CappedSessions>,
    /// Sessions shared with the other instances, when Redis is configured.
    shared: Option<Arc<SharedSessions>>,
}

impl Endpoint {
    async fn serve(&self, request: Request) -> Response {
        let Some(shared) = &self.shared else {
            return self.serve_here(request).await;
        };
        let Some(id) = request
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
        else {
            return self.serve_here(request).await;
        };
        let caller = request.extensions().get::<Arc<CallContext>>().cloned();
        if let Some(refusal) = shared.refusal(&id, caller.as_deref()).await {
            return refusal;
        }
        let request = match shared.forward_answer(&id, request).await {
            Ok(forwarded) => return forwarded,
            Err(request) => request,
        };
        let ending = request.method() == http::Method::DELETE;
        let response = self.serve_here(request).await;
        if ending && response.status().is_success() {
            shared.ended(&id).await;
        }
        response
    }

    async fn serve_here(&self, request: Request) -> Response {
        let request = match self.direct.answer(request).await {
            Ok(answer) => return answer,
            Err(request) => request,
        };
        // A request that may make a session: one without a session id, or (shared) one
        // naming a session another instance opened, which rmcp restores here.
        let may_open = self.shared.is_some() || !request.headers().contains_key("mcp-session-id");
        // Boxed: a call answered directly does not carry the room of rmcp's handling.
        let response = Box::pin(self.rmcp.handle(request)).await.into_response();
        // rmcp answers a session it could not make (or restore) with a bare 500.
        if may_open
            && response.status() == http::StatusCode::INTERNAL_SERVER_ERROR
            && self.sessions.full().await
        {
            return sessions_full(self.sessions.max());
        }
        response
    }
}

/// How long a client refused at the cap of sessions is told to wait: sessions end when their
/// clients delete them or idle out.
const SESSIONS_FULL_RETRY_SECS: u64 = 5;

/// The refusal of a new session at the cap: typed, 503, with `Retry-After`.
fn sessions_full(max: usize) -> Response {
    let mut refused = ApiError::new(
        http::StatusCode::SERVICE_UNAVAILABLE,
        "too_many_sessions",
        format!("too many open MCP sessions (at most {max}); close one or retry later"),
    );
    refused.retry_after = Some(SESSIONS_FULL_RETRY_SECS);
    refused.into_response()
}

/// The endpoint serving `scope` (`None`: the merged catalog), with its own sessions.
fn mcp_service(
    state: &AppState,
    scope: Option<ServerId>,
    mut config: StreamableHttpServerConfig,
    max_sessions: usize,
    shutdown: &CancellationToken,
    rounds: &Arc<Rounds>,
) -> Arc<Endpoint> {
    let stores = state.gateway.current().stores().shared;
    let sessions = CappedSessions::new(max_sessions, state.service.mcp_session_idle);
    let sessions = Arc::new(if stores.redis.is_some() {
        sessions.shared()
    } else {
        sessions
    });
    let shared = stores.redis.map(|redis| {
        let view = scope.as_ref().map_or("merged", ServerId::as_str);
        let records = crate::store::redis::RedisSessions::new(redis, view);
        Arc::new(SharedSessions::new(
            records,
            sessions.clone(),
            stores.events,
            view,
            state.service.max_body_bytes,
            shutdown,
        ))
    });
    if let Some(shared) = &shared {
        config.session_store = Some(shared.clone());
    }
    let direct = Arc::new(Direct::new(sessions.clone(), state.service.max_body_bytes));
    let factory = {
        let (state, direct) = (state.clone(), direct.clone());
        let shutdown = shutdown.clone();
        let rounds = rounds.clone();
        move || {
            Ok(GatewayServer::new(
                state.clone(),
                scope.clone(),
                rounds.clone(),
                direct.clone(),
                shutdown.child_token(),
            ))
        }
    };
    Arc::new(Endpoint {
        rmcp: StreamableHttpService::new(factory, sessions.clone(), config),
        direct,
        sessions,
        shared,
    })
}

/// The per-server views, each made when first asked for.
struct Scopes {
    state: AppState,
    config: StreamableHttpServerConfig,
    shutdown: CancellationToken,
    rounds: Arc<Rounds>,
    services: Mutex<HashMap<ServerId, Arc<Endpoint>>>,
}

impl Scopes {
    /// The view of `server`, made now if new; `None` when [`MAX_SCOPES`] views of configured
    /// servers already exist.
    fn service(&self, server: &ServerId) -> Option<Arc<Endpoint>> {
        let mut services = self.services.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(service) = services.get(server) {
            return Some(service.clone());
        }
        if services.len() >= MAX_SCOPES {
            let gateway = self.state.gateway.current();
            services.retain(|id, _| gateway.config().server(id).is_some());
            if services.len() >= MAX_SCOPES {
                return None;
            }
        }
        let service = mcp_service(
            &self.state,
            Some(server.clone()),
            self.config.clone(),
            MAX_SCOPE_SESSIONS,
            &self.shutdown,
            &self.rounds,
        );
        services.insert(server.clone(), service.clone());
        Some(service)
    }

    /// Serves a request on `/mcp/{server}`: a server the caller may not see answers exactly
    /// as an unknown one, before rmcp sees the request.
    async fn serve(&self, server: &str, request: Request) -> Response {
        let not_found = || {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such MCP server").into_response()
        };
        let Some(id) = ServerId::new(server) else {
            return not_found();
        };
        let visible = request
            .extensions()
            .get::<Arc<CallContext>>()
            .is_some_and(|ctx| self.state.gateway.current().sees_server(ctx, &id));
        if !visible {
            return not_found();
        }
        let Some(service) = self.service(&id) else {
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "unavailable",
                "too many per-server MCP endpoints are open",
            )
            .into_response();
        };
        service.serve(request).await
    }
}

/// The MCP endpoint as a router serving [`MCP_PATH`] and [`SCOPED_MCP_PATH`]: bearer
/// authentication (401 before any MCP processing), then rmcp's Streamable HTTP service.
/// Cancelling `shutdown` closes every session and open stream, so a graceful shutdown is not
/// held up by idle SSE streams.
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
    let rounds = Arc::new(match state.gateway.current().stores().shared.redis {
        Some(redis) => Rounds::shared(crate::store::redis::RedisRounds::new(redis)),
        None => Rounds::new(),
    });
    let merged = mcp_service(
        &state,
        None,
        config.clone(),
        sessions::MAX_SESSIONS,
        &shutdown,
        &rounds,
    );
    let scopes = Arc::new(Scopes {
        state: state.clone(),
        config,
        shutdown,
        rounds,
        services: Mutex::new(HashMap::new()),
    });
    let scoped = any(
        move |Path(server): Path<String>, request: Request| async move {
            scopes.serve(&server, request).await
        },
    );
    let merged = any(move |request: Request| {
        let merged = merged.clone();
        async move { merged.serve(request).await }
    });
    Router::new()
        .route(MCP_PATH, merged)
        .route(SCOPED_MCP_PATH, scoped)
        .route_layer(middleware::from_fn_with_state(state, super::authenticate))
}

#[cfg(test)]
mod tests;
