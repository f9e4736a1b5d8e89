//! A user's own remote servers (`[user_servers]`): `GET /api/v1/me/servers` lists them,
//! `POST` adds one, `DELETE /api/v1/me/servers/{name}` removes one, and
//! `PUT /api/v1/me/servers/{name}/read-only` marks tools that need no confirmation. Every
//! route answers `404 not_found` while the feature is off. Header values go in and never
//! come back out.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Path, State},
    http::StatusCode,
    routing::{delete, get, put},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{AppState, errors::ApiError};
use crate::{
    gateway::{NewUserServer, ReadOnlyEntry, ReadOnlyMark, UserServerError},
    policy::CallContext,
};

pub(super) fn routes() -> Router<AppState> {
    Router::new()
        .route("/me/servers", get(list).post(add))
        .route("/me/servers/{name}", delete(remove))
        .route("/me/servers/{name}/read-only", put(read_only))
        .route(
            "/me/servers/{name}/connect",
            get(connect).delete(disconnect),
        )
}

fn api_error(err: &UserServerError) -> ApiError {
    let status = match err {
        UserServerError::Disabled | UserServerError::NotFound(_) => StatusCode::NOT_FOUND,
        UserServerError::InvalidName
        | UserServerError::InvalidUrl(_)
        | UserServerError::Refused(_)
        | UserServerError::InvalidHeader(_)
        | UserServerError::UnknownTool { .. } => StatusCode::BAD_REQUEST,
        UserServerError::HostNotAllowed(_) => StatusCode::FORBIDDEN,
        UserServerError::NameTaken(_)
        | UserServerError::TooMany(_)
        | UserServerError::DefinitionChanged(_) => StatusCode::CONFLICT,
        UserServerError::Unreachable(_) => StatusCode::BAD_GATEWAY,
        UserServerError::InvalidAuth => StatusCode::BAD_REQUEST,
        UserServerError::NotOAuth(_) => StatusCode::NOT_FOUND,
        UserServerError::OAuthUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        UserServerError::OAuth(oauth) => return super::connect::api_error(oauth),
        UserServerError::Store(_) | UserServerError::Vault(_) => {
            tracing::error!(error = %err, "users' servers cannot be stored or opened");
            return ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                err.code(),
                "the store of your servers is unavailable; try again shortly",
            );
        }
    };
    ApiError::new(status, err.code(), err.to_string())
}

/// A body that does not parse: where, never what (it may hold a header's value).
fn unparsable(err: &serde_json::Error, shape: &str) -> ApiError {
    ApiError::bad_request(format!(
        "the body must be {shape} (line {}, column {})",
        err.line(),
        err.column()
    ))
}

async fn list(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    let servers = gateway.my_servers(&ctx).await.map_err(|e| api_error(&e))?;
    Ok(Json(json!({ "servers": servers })))
}

async fn add(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    body: Bytes,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let gateway = state.gateway.current();
    if !gateway.user_servers_enabled() {
        return Err(api_error(&UserServerError::Disabled));
    }
    let new: NewUserServer = serde_json::from_slice(&body).map_err(|e| {
        unparsable(
            &e,
            "{\"name\": \"...\", \"url\": \"https://...\", \"headers\": {\"Name\": \"value\"}}",
        )
    })?;
    let added = gateway
        .add_my_server(&ctx, new)
        .await
        .map_err(|e| api_error(&e))?;
    Ok((StatusCode::CREATED, Json(json!({ "server": added }))))
}

async fn remove(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    gateway
        .remove_my_server(&ctx, &name)
        .await
        .map_err(|e| api_error(&e))?;
    Ok(Json(json!({ "ok": true })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadOnlyBody {
    tools: Vec<ReadOnlyEntry>,
}

async fn read_only(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    if !gateway.user_servers_enabled() {
        return Err(api_error(&UserServerError::Disabled));
    }
    let body: ReadOnlyBody = serde_json::from_slice(&body).map_err(|e| {
        unparsable(
            &e,
            "{\"tools\": [\"tool name\" or {\"name\": \"...\", \"fingerprint\": \"...\"}, ...]}",
        )
    })?;
    let marks: Vec<ReadOnlyMark> = body.tools.into_iter().map(Into::into).collect();
    let server = gateway
        .mark_my_server_read_only(&ctx, &name, &marks)
        .await
        .map_err(|e| api_error(&e))?;
    Ok(Json(json!({ "server": server })))
}

/// `GET /me/servers/{name}/connect`: starts connecting the caller's account on their server
/// (`auth = "oauth"`); `{ server, authorizationUrl }` to send them to.
async fn connect(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    let url = gateway.connect_my_server(&ctx, &name).await.map_err(|e| {
        tracing::warn!(
            code = e.code(),
            "starting a connection to a user's server failed"
        );
        api_error(&e)
    })?;
    Ok(Json(json!({
        "server": format!("{}{name}", crate::config::USER_SERVER_PREFIX),
        "authorizationUrl": url,
    })))
}

/// `DELETE /me/servers/{name}/connect`: ends the caller's connection (tokens revoked where
/// the authorization server can).
async fn disconnect(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    let removed = gateway
        .disconnect_my_server(&ctx, &name)
        .await
        .map_err(|e| api_error(&e))?;
    Ok(Json(json!({
        "server": format!("{}{name}", crate::config::USER_SERVER_PREFIX),
        "disconnected": removed,
    })))
}
