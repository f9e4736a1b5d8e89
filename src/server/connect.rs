//! Users' own accounts on `auth = "oauth"` servers: `GET /api/v1/mcp/servers/{id}/connect`
//! starts a connection for the caller (the answer is the URL to send them to), `DELETE` on the
//! same route ends it, and `GET /api/v1/oauth/callback` is where the authorization server sends
//! the user back, on whichever instance: it carries no credential of ours, the stored
//! authorization says whose connection it completes.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    extract::{Path, Query, State},
    http::{HeaderValue, StatusCode, header},
    response::{Html, IntoResponse, Response},
    routing::get,
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppState, errors::ApiError};
use crate::{
    config::ServerId,
    gateway::{AccountChange, Gateway},
    oauth::{CALLBACK_PATH, ConnectionKey, Connections, OAuthError},
    policy::CallContext,
};

/// The authenticated routes (under `/api/v1`).
pub(super) fn routes() -> Router<AppState> {
    Router::new().route("/mcp/servers/{id}/connect", get(connect).delete(disconnect))
}

/// The callback, outside authentication.
pub(super) fn callback_routes() -> Router<AppState> {
    Router::new().route(CALLBACK_PATH, get(callback))
}

pub(super) fn api_error(err: &OAuthError) -> ApiError {
    let status = match err {
        OAuthError::NotOAuth { .. } => StatusCode::NOT_FOUND,
        OAuthError::AuthorizationRequired { .. }
        | OAuthError::ConnectionExpired { .. }
        | OAuthError::MoreScope { .. } => StatusCode::FORBIDDEN,
        OAuthError::UnknownState | OAuthError::Denied { .. } => StatusCode::BAD_REQUEST,
        OAuthError::Discovery { .. }
        | OAuthError::Registration { .. }
        | OAuthError::Exchange { .. }
        | OAuthError::Refresh { .. } => StatusCode::BAD_GATEWAY,
        OAuthError::Store(_) | OAuthError::Vault(_) => StatusCode::SERVICE_UNAVAILABLE,
    };
    ApiError::new(status, err.code(), err.to_string())
}

/// The caller's connection key for `id`, when the caller may see that server and it has
/// `auth = "oauth"`; another tenant's server is not found, like one that does not exist.
fn key_for<'g>(
    gateway: &'g Gateway,
    ctx: &CallContext,
    id: &str,
) -> Result<(&'g Arc<Connections>, ConnectionKey), ApiError> {
    let not_found = || ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such server");
    let id = ServerId::new(id)
        .filter(|id| gateway.tenant_sees(ctx, id))
        .ok_or_else(not_found)?;
    gateway.config().server(&id).ok_or_else(not_found)?;
    let connections = gateway
        .connections()
        .filter(|c| c.is_oauth(&id))
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_oauth",
                format!("server `{id}` does not use OAuth: there is nothing to connect"),
            )
        })?;
    Ok((
        connections,
        ConnectionKey {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            server: id.to_string(),
        },
    ))
}

async fn connect(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    let (connections, key) = key_for(&gateway, &ctx, &id)?;
    let url = connections.begin(&key).await.map_err(|err| {
        tracing::warn!(server = %key.server, code = err.code(), "starting an OAuth connection failed");
        api_error(&err)
    })?;
    Ok(Json(
        json!({ "server": key.server, "authorizationUrl": url }),
    ))
}

async fn disconnect(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    let (connections, key) = key_for(&gateway, &ctx, &id)?;
    let removed = connections
        .disconnect(&key)
        .await
        .map_err(|e| api_error(&e))?;
    if let Some(server) = ServerId::new(&key.server) {
        gateway.forget_listing(&ctx, &server);
    }
    if removed {
        tracing::info!(tenant = %key.tenant, user = %key.user, server = %key.server, "OAuth connection removed");
        gateway
            .audit_account(&key, &ctx.request_id, AccountChange::Disconnected)
            .await;
    }
    Ok(Json(
        json!({ "server": key.server, "disconnected": removed }),
    ))
}

/// What the authorization server sends back (RFC 6749 §4.1.2, RFC 9207 `iss`).
#[derive(Debug, Deserialize)]
struct CallbackParams {
    code: Option<String>,
    state: Option<String>,
    iss: Option<String>,
    error: Option<String>,
}

/// Longest value taken from the callback's query: codes and states are far shorter.
const MAX_PARAM_BYTES: usize = 2048;

async fn callback(State(state): State<AppState>, Query(params): Query<CallbackParams>) -> Response {
    let gateway = state.gateway.current();
    let Some(connections) = gateway.connections() else {
        return page(
            StatusCode::NOT_FOUND,
            "Nothing to connect",
            "This gateway has no OAuth servers.",
        );
    };
    let too_long = [&params.code, &params.state, &params.iss, &params.error]
        .into_iter()
        .flatten()
        .any(|v| v.len() > MAX_PARAM_BYTES);
    if too_long {
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            "The sign-in answer is malformed.",
        );
    }
    if let Some(error) = &params.error {
        // The pending authorization is spent either way.
        if let Some(s) = &params.state {
            let _ = connections.abandon(s).await;
        }
        let code: String = error
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            &format!(
                "The authorization server did not grant access ({code}). Start again from Connect."
            ),
        );
    }
    let (Some(code), Some(state_param)) = (&params.code, &params.state) else {
        return page(
            StatusCode::BAD_REQUEST,
            "Not connected",
            "The sign-in answer has no code or state.",
        );
    };
    match connections
        .complete(state_param, code, params.iss.as_deref())
        .await
    {
        Ok(key) => {
            tracing::info!(tenant = %key.tenant, user = %key.user, server = %key.server, "OAuth connection made");
            gateway
                .audit_account(
                    &key,
                    &crate::policy::new_request_id(),
                    AccountChange::Connected,
                )
                .await;
            if let Some(id) = ServerId::new(&key.server) {
                // A server nobody had connected can now be listed, on every instance.
                gateway.account_connected(&id).await;
            }
            page(
                StatusCode::OK,
                "Connected",
                &format!(
                    "Your account on {} is connected. You can close this window and go back.",
                    key.server
                ),
            )
        }
        Err(err) => {
            tracing::warn!(code = err.code(), "completing an OAuth connection failed");
            let status = api_error(&err).status;
            page(status, "Not connected", &err.to_string())
        }
    }
}

/// A small page for the user's browser: no script, nothing loaded.
fn page(status: StatusCode, title: &str, message: &str) -> Response {
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{title}</title>\
         </head><body><main><h1>{title}</h1><p id=\"message\">{message}</p>\
         <p><a href=\"/\">Back to mcpgate</a></p></main></body></html>",
        title = escape(title),
        message = escape(message),
    );
    let mut response = (status, Html(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; base-uri 'none'; form-action 'none'"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
