//! An MCP server that requires OAuth tokens, as a remote server behind an identity provider
//! does: RFC 9728 metadata naming the authorization server, 401 with `resource_metadata` for a
//! request without a valid token, and for every other request a JWT checked against the
//! authorization server's JWKS (signature, `exp`, `aud` = this resource, the scope). The
//! tools are the bench fixture's (`echo`, `big`) over rmcp's Streamable HTTP server. Who
//! called is recorded per request, so a test can see whose token reached it.

use std::sync::{Arc, Mutex};

use axum::{
    Json, Router,
    extract::{Request, State},
    http::{HeaderValue, StatusCode, header},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, jwk::JwkSet};
use mcpgate::fixtures::{Fixture, handler};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The scope `big` wants besides the server's, asked for with 403 `insufficient_scope` on a
/// 2026-07-28 call (which names its tool in `Mcp-Name`).
pub const BIG_SCOPE: &str = "notes:big";

/// What the server serves behind its checks.
pub enum Serves {
    Fixture(Fixture),
    /// The bench fixture's tools, and `alice_notes` listed (and callable) for alice's token
    /// alone, as servers whose tools depend on the account do.
    PerUser,
}

/// One request the server accepted: whose token, and the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub sub: String,
    pub token: String,
}

struct Checker {
    resource: String,
    issuer: String,
    scope: String,
    keys: JwkSet,
    seen: Mutex<Vec<Seen>>,
}

/// The running server; stopped on drop.
pub struct ProtectedUpstream {
    pub url: String,
    checker: Arc<Checker>,
    stop: CancellationToken,
}

impl Drop for ProtectedUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl ProtectedUpstream {
    /// Serves on `listener` (the resource is `http://{addr}/mcp`), trusting `issuer`'s JWKS.
    pub async fn start(
        listener: tokio::net::TcpListener,
        issuer: &str,
        scope: &str,
    ) -> ProtectedUpstream {
        ProtectedUpstream::serving(Serves::Fixture(Fixture::Bench), listener, issuer, scope).await
    }

    /// [`ProtectedUpstream::start`] serving `serves`.
    pub async fn serving(
        serves: Serves,
        listener: tokio::net::TcpListener,
        issuer: &str,
        scope: &str,
    ) -> ProtectedUpstream {
        match serves {
            Serves::Fixture(fixture) => {
                let fixture = handler(fixture).expect("a fixture with a handler");
                ProtectedUpstream::serving_handler(fixture, listener, issuer, scope).await
            }
            Serves::PerUser => {
                let fixture = handler(Fixture::Bench).expect("a fixture with a handler");
                ProtectedUpstream::serving_handler(PerUser(fixture), listener, issuer, scope).await
            }
        }
    }

    async fn serving_handler<H: rmcp::ServerHandler + Clone>(
        handler: H,
        listener: tokio::net::TcpListener,
        issuer: &str,
        scope: &str,
    ) -> ProtectedUpstream {
        let addr = listener.local_addr().expect("addr");
        let resource = format!("http://{addr}/mcp");
        let keys: JwkSet = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client")
            .get(format!("{issuer}/jwks"))
            .send()
            .await
            .expect("the JWKS answers")
            .json()
            .await
            .expect("a JWKS");
        let checker = Arc::new(Checker {
            resource: resource.clone(),
            issuer: issuer.to_owned(),
            scope: scope.to_owned(),
            keys,
            seen: Mutex::new(Vec::new()),
        });
        let stop = CancellationToken::new();
        let service: StreamableHttpService<_, LocalSessionManager> = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
        let app = Router::new()
            .route("/.well-known/oauth-protected-resource/mcp", get(metadata))
            .route("/.well-known/oauth-protected-resource", get(metadata))
            .route_service("/mcp", service)
            .layer(middleware::from_fn_with_state(checker.clone(), check))
            .with_state(checker.clone());
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
        });
        ProtectedUpstream {
            url: resource,
            checker,
            stop,
        }
    }

    /// Requests accepted so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.checker.seen.lock().expect("lock").clone()
    }
}

async fn metadata(State(checker): State<Arc<Checker>>) -> Json<Value> {
    Json(json!({
        "resource": checker.resource,
        "authorization_servers": [checker.issuer],
        "scopes_supported": [checker.scope],
        "bearer_methods_supported": ["header"],
    }))
}

async fn check(State(checker): State<Arc<Checker>>, request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/.well-known/") {
        return next.run(request).await;
    }
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);

    match token.as_deref().and_then(|t| checker.verify(t)) {
        Some((_, scopes))
            if request
                .headers()
                .get("mcp-name")
                .is_some_and(|name| name == "big")
                && !scopes.iter().any(|s| s == BIG_SCOPE) =>
        {
            // `big` wants a scope of its own (named, on 2026-07-28, by the `Mcp-Name` header).
            let mut response = StatusCode::FORBIDDEN.into_response();
            let challenge = format!(
                "Bearer error=\"insufficient_scope\", scope=\"{} {BIG_SCOPE}\", resource_metadata=\"{}\"",
                checker.scope,
                checker
                    .resource
                    .replace("/mcp", "/.well-known/oauth-protected-resource/mcp"),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge).expect("ascii"),
            );
            response
        }
        Some((sub, _)) => {
            let token = token.unwrap_or_default();
            checker.seen.lock().expect("lock").push(Seen {
                sub: sub.clone(),
                token,
            });
            let mut request = request;
            request.extensions_mut().insert(Subject(sub));
            next.run(request).await
        }
        None => {
            let mut response = StatusCode::UNAUTHORIZED.into_response();
            let challenge = format!(
                "Bearer error=\"invalid_token\", resource_metadata=\"{}\", scope=\"{}\"",
                checker
                    .resource
                    .replace("/mcp", "/.well-known/oauth-protected-resource/mcp"),
                checker.scope
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_str(&challenge).expect("ascii"),
            );
            response
        }
    }
}

impl Checker {
    /// The token's subject and scopes, if it is a valid token for this resource with the
    /// scope.
    fn verify(&self, token: &str) -> Option<(String, Vec<String>)> {
        let header = jsonwebtoken::decode_header(token).ok()?;
        let jwk = self.keys.find(header.kid.as_deref()?)?;
        let key = DecodingKey::from_jwk(jwk).ok()?;
        let mut validation = Validation::new(Algorithm::RS256);
        validation.set_audience(&[&self.resource]);
        validation.set_issuer(&[&self.issuer]);
        validation.leeway = 0;
        let claims = decode::<Value>(token, &key, &validation).ok()?.claims;
        let scopes: Vec<String> = claims["scope"]
            .as_str()
            .unwrap_or_default()
            .split(' ')
            .map(str::to_owned)
            .collect();
        if !scopes.contains(&self.scope) {
            return None;
        }
        Some((claims["sub"].as_str()?.to_owned(), scopes))
    }
}

/// Whose token a request carried, for the handler (through rmcp's request parts).
#[derive(Debug, Clone)]
struct Subject(String);

fn subject(context: &rmcp::service::RequestContext<rmcp::RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Subject>())
        .map(|s| s.0.clone())
}

/// The bench fixture, plus `alice_notes` for alice's token alone.
#[derive(Clone)]
struct PerUser(mcpgate::fixtures::FixtureHandler);

const ALICE_ONLY: &str = "alice_notes";

impl rmcp::ServerHandler for PerUser {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        self.0.get_info()
    }

    async fn list_tools(
        &self,
        request: Option<rmcp::model::PaginatedRequestParams>,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListToolsResult, rmcp::ErrorData> {
        let alice = subject(&context).as_deref() == Some("alice");
        let mut listed = self.0.list_tools(request, context).await?;
        if alice {
            let schema = json!({ "type": "object", "properties": {} });
            let schema = schema.as_object().cloned().unwrap_or_default();
            listed.tools.push(
                rmcp::model::Tool::new(ALICE_ONLY, "Alice's own notes.", Arc::new(schema))
                    .annotate(rmcp::model::ToolAnnotations::new().read_only(true)),
            );
        }
        Ok(listed)
    }

    async fn call_tool(
        &self,
        request: rmcp::model::CallToolRequestParams,
        context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::CallToolResponse, rmcp::ErrorData> {
        if request.name == ALICE_ONLY {
            return match subject(&context).as_deref() {
                Some("alice") => {
                    Ok(
                        rmcp::model::CallToolResult::success(vec![
                            rmcp::model::ContentBlock::text("alice's notes"),
                        ])
                        .into(),
                    )
                }
                _ => Err(rmcp::ErrorData::invalid_params("unknown tool", None)),
            };
        }
        self.0.call_tool(request, context).await
    }
}
