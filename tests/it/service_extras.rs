//! The service's extras: Prometheus metrics, the OpenAPI document (against the router, and
//! its snapshot) and configuration reload (API, SIGHUP, MCP sessions across a reload).
//! Requests go through `app()` without sockets, except where a real client needs them.

pub(crate) mod mcp_reload;
mod metrics;
mod openapi;
mod reload;

use std::{future::poll_fn, sync::Arc};

use axum::{
    Router,
    body::Body,
    http::{HeaderMap, Method, Request, StatusCode, header},
};
use mcpgate::{
    config::{AuthConfig, Config, Env, ServiceConfig},
    fixtures::demo::{DemoServer, READ_ONLY_TOOLS},
    gateway::Gateway,
    server::{AppState, app, auth::Authenticator},
};
use serde_json::Value;
use tower_service::Service;

use crate::support::{self, in_process};

/// Largest response body a test reads.
const MAX_RESPONSE_BYTES: usize = 4 * 1024 * 1024;

/// A response, its body as JSON when it is JSON.
struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
    json: Option<Value>,
}

/// The service as a router, and the token its callers send.
struct Harness {
    state: AppState,
    app: Router,
    token: Option<String>,
}

impl Harness {
    async fn start(gateway: Gateway, auth: AuthConfig, env: &Env) -> Harness {
        let service = ServiceConfig {
            auth: auth.clone(),
            ..ServiceConfig::default()
        };
        let authenticator = Authenticator::new(&auth, env, service.listen, false)
            .await
            .expect("auth");
        let token = authenticator.dev_token().map(str::to_owned);
        let state = AppState::new(gateway, Arc::new(authenticator), Arc::new(service));
        Harness::with_state(state, token)
    }

    fn with_state(state: AppState, token: Option<String>) -> Harness {
        Harness {
            app: app(state.clone()),
            state,
            token,
        }
    }

    /// `method path` as the dev caller (`token: None` sends no credential).
    async fn send(&self, method: Method, path: &str, body: Option<&Value>) -> Reply {
        self.send_as(self.token.as_deref(), method, path, body)
            .await
    }

    async fn send_as(
        &self,
        token: Option<&str>,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, "127.0.0.1");
        if let Some(token) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
        }
        let body = match body {
            Some(body) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(serde_json::to_vec(body).expect("JSON"))
            }
            None => Body::empty(),
        };
        let mut service = self.app.clone();
        poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut service, cx))
            .await
            .expect("ready");
        let response = service
            .call(request.body(body).expect("request"))
            .await
            .expect("infallible");
        let (parts, body) = response.into_parts();
        let bytes = axum::body::to_bytes(body, MAX_RESPONSE_BYTES)
            .await
            .expect("body");
        let text = String::from_utf8_lossy(&bytes).into_owned();
        Reply {
            status: parts.status,
            headers: parts.headers,
            json: serde_json::from_slice(&bytes).ok(),
            text,
        }
    }

    async fn stop(self) {
        self.state.gateway.shutdown().await;
    }
}

/// The demo server in process, its reads marked so only notes changes need confirming.
fn demo_config() -> Config {
    let mut demo = in_process("demo", DemoServer::new());
    demo.read_only_tools = READ_ONLY_TOOLS.iter().map(|t| (*t).to_owned()).collect();
    support::config(vec![demo])
}

/// The service on the in-process demo server with dev authentication (the caller is admin).
async fn demo_harness() -> Harness {
    let gateway = support::gateway(demo_config()).await;
    Harness::start(gateway, AuthConfig::Dev, &Env::default()).await
}
