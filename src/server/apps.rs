//! The page's side of MCP Apps, under `/api/v1/apps`: where the sandbox is, a view to render
//! (read through the gate like any resource), and the calls and reads an app makes from
//! inside its view, as the signed-in user, bound to the view's server, through
//! `Gateway::call_tool_from_app`.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Query, State, rejection::QueryRejection},
    http::{HeaderMap, StatusCode, header},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    AppState, Overhead,
    errors::ApiError,
    mcp::{call_failure, call_result},
    rest::call_body,
};
use crate::{
    gateway::{GatewayError, apps, resources::ContentError},
    policy::CallContext,
};

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/apps", get(sandbox))
        .route("/apps/view", get(view))
        .route("/apps/call", post(call))
        .route("/apps/read", post(read))
}

/// `{ sandbox }`: the origin the page frames apps from, or `null` when it renders none.
async fn sandbox(State(state): State<AppState>, headers: HeaderMap) -> Json<Value> {
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    let origin = state.sandbox.as_ref().and_then(|s| s.origin_for(host));
    Json(json!({ "sandbox": origin }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ViewQuery {
    uri: String,
}

/// A view to render: `{ uri, mimeType, html | blob, csp, permissions, prefersBorder }`, read
/// through the gate (a view is as visible as the tools that name it), its `_meta.ui` taken
/// from the content item as the spec says hosts read it.
async fn view(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    query: Result<Query<ViewQuery>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(ViewQuery { uri }) =
        query.map_err(|_| ApiError::bad_request("`uri` (a ui:// view) is required"))?;
    if !apps::is_view(&uri) {
        return Err(ApiError::bad_request("`uri` must be an app's view (ui://)"));
    }
    let result = state
        .gateway
        .current()
        .read_resource(&ctx, None, &uri)
        .await
        .map_err(content_error)?;
    let item = result
        .contents
        .first()
        .map(serde_json::to_value)
        .and_then(Result::ok)
        .unwrap_or(Value::Null);
    let mime = item.get("mimeType").and_then(Value::as_str).unwrap_or("");
    if !mime.starts_with("text/html") {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not_an_app_view",
            "the resource is not an app's HTML view",
        ));
    }
    let ui = item.pointer("/_meta/ui").cloned().unwrap_or(Value::Null);
    Ok(Json(json!({
        "uri": uri,
        "mimeType": mime,
        "html": item.get("text"),
        "blob": item.get("blob"),
        "csp": ui.get("csp"),
        "permissions": ui.get("permissions"),
        "prefersBorder": ui.get("prefersBorder"),
    })))
}

/// An app's `tools/call`: `{ view, tool, arguments?, confirmationToken? }`, `tool` by its
/// upstream name; answered with the MCP `CallToolResult`, or the gate's typed error (a
/// write answers `confirmation_required` until the user approves it in the page).
async fn call(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Extension(overhead): Extension<Overhead>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let ([view, tool], arguments, token) = call_body(&state, &body, ["view", "tool"])?;
    let (server, _) = apps::from_merged(&view)
        .ok_or_else(|| ApiError::bad_request("`view` must be a view `ui://<server>/…`"))?;
    let gateway = state.gateway.current();
    let timer = state
        .metrics
        .start_call(&gateway, &format!("{server}.{tool}"));
    let (output, upstream) = gateway
        .call_tool_from_app(&ctx, (&server, &view), &tool, arguments, token.as_deref())
        .await;
    timer.finish(&output);
    overhead.exclude(upstream);
    let result = match output {
        Ok(output) => call_result(output),
        // The tool itself reported the failure: the app reads it as MCP says, `isError`.
        Err(err @ GatewayError::ToolError { .. }) => call_failure(&err),
        Err(err) => return Err(err.into()),
    };
    serde_json::to_value(result)
        .map(Json)
        .map_err(|_| ApiError::bad_request("the result cannot be encoded"))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadBody {
    view: String,
    uri: String,
}

/// An app's `resources/read`: `{ view, uri }`, `uri` as the view's server names it, read
/// from that server alone.
async fn read(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let ReadBody { view, uri } = serde_json::from_slice(&body)
        .map_err(|_| ApiError::bad_request("the body must be { view, uri }, both strings"))?;
    let (server, _) = apps::from_merged(&view).ok_or_else(|| {
        ApiError::new(StatusCode::NOT_FOUND, "resource_not_found", "unknown view")
    })?;
    let result = state
        .gateway
        .current()
        .read_resource(&ctx, Some(&server), &uri)
        .await
        .map_err(content_error)?;
    serde_json::to_value(result)
        .map(Json)
        .map_err(|_| ApiError::bad_request("the result cannot be encoded"))
}

/// A read's failure as the API answers it.
fn content_error(err: ContentError) -> ApiError {
    let status = match &err {
        ContentError::ResourceNotFound { .. } | ContentError::PromptNotFound { .. } => {
            StatusCode::NOT_FOUND
        }
        ContentError::Ambiguous { .. } => StatusCode::CONFLICT,
        ContentError::InvalidParams { .. } => StatusCode::BAD_REQUEST,
        ContentError::ResultTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        ContentError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        ContentError::Upstream { .. } => StatusCode::BAD_GATEWAY,
        ContentError::StoreUnavailable { .. } => StatusCode::SERVICE_UNAVAILABLE,
        ContentError::AuthorizationRequired { .. } => StatusCode::FORBIDDEN,
    };
    ApiError::new(status, err.code(), err.to_string())
}
