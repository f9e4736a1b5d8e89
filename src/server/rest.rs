//! The REST API under `/api/v1`: tools, calls, confirmations, servers and the audit log. Every
//! handler acts as the authenticated caller, through the gateway.

use std::sync::Arc;

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Path, Query, State, rejection::QueryRejection},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{get, post},
};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{AppState, Overhead, errors::ApiError, metrics::Decision};
use crate::{
    config::ServerId,
    gateway::{Gateway, GatewayError, PinError},
    policy::{Admin, CallContext, parse_arguments},
    store::{AuditQuery, parse_instant, rfc3339},
};

/// The role that refreshes servers and reads the audit log: of the whole gateway without
/// `[access]`, of the caller's own tenant with it.
pub use crate::policy::ADMIN_ROLE;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/mcp/tools", get(list_tools))
        .route("/mcp/tools/call", post(call_tool))
        .route("/mcp/confirmations", get(list_confirmations))
        .route("/mcp/confirmations/{id}/approve", post(approve))
        .route("/mcp/confirmations/{id}/deny", post(deny))
        .route("/mcp/pins/{tool}", get(review_pin).post(accept_pin))
        .route("/mcp/servers", get(list_servers))
        .route("/mcp/servers/{id}/refresh", post(refresh_server))
        .route("/audit", get(audit))
        .route("/usage", get(super::usage::usage))
}

async fn list_tools(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
) -> Json<Value> {
    let gateway = state.gateway.current();
    let tools: Vec<Value> = gateway
        .list_tools(&ctx)
        .await
        .iter()
        .map(|t| gateway.tool_json(t))
        .collect();
    Json(json!({ "tools": tools }))
}

/// `{ tool, arguments, confirmationToken? }`. The body is parsed by the gate's own argument
/// parser, so duplicate keys anywhere in it are refused.
///
/// With an `Idempotency-Key` header (`[limits] idempotency_window` above zero), see
/// [`super::idempotent`]: a retry of the same request gets the first answer.
async fn call_tool(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Extension(overhead): Extension<Overhead>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let ([tool], arguments, token) = call_body(&state, &body, ["tool"])?;
    let gateway = state.gateway.current();
    let request = json!({ "tool": tool, "arguments": arguments, "confirmationToken": token });
    let claim = match super::idempotent::claim(&state, &gateway, &ctx, &headers, &request).await {
        Ok(Some(claim)) => claim,
        Ok(None) => {
            return call_once(
                &state,
                &gateway,
                (&ctx, &overhead),
                (tool, arguments, token),
            )
            .await;
        }
        Err(answer) => return Ok(answer),
    };
    let answer = call_once(
        &state,
        &gateway,
        (&ctx, &overhead),
        (tool, arguments, token),
    )
    .await
    .unwrap_or_else(IntoResponse::into_response);
    Ok(claim.finish(&gateway, answer).await)
}

/// One call through the gate, answered.
async fn call_once(
    state: &AppState,
    gateway: &Gateway,
    (ctx, overhead): (&CallContext, &Overhead),
    (tool, arguments, token): (String, Value, Option<String>),
) -> Result<Response, ApiError> {
    let timer = state.metrics.start_call(gateway, &tool);
    let (outcome, upstream) = gateway
        .call_tool_measured(ctx, &tool, arguments, token.as_deref())
        .await;
    timer.finish(&outcome);
    overhead.exclude(upstream);
    match outcome {
        Ok(output) => Ok(Json(output.json_view()).into_response()),
        Err(err) => Err(err.into()),
    }
}

/// A call's body: the string fields `names` (each required), `arguments` (an object, absent
/// as `{}`) and `confirmationToken` (optional), nothing else. Parsed by the gate's own argument
/// parser, so duplicate keys anywhere in it are refused.
pub(super) fn call_body<const N: usize>(
    state: &AppState,
    body: &[u8],
    names: [&str; N],
) -> Result<([String; N], Value, Option<String>), ApiError> {
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the body is not UTF-8"))?;
    let mut fields = parse_arguments(text, state.service.max_body_bytes)
        .map_err(|e| ApiError::bad_request(format!("the body is not acceptable: {e}")))?;
    let mut strings = Vec::with_capacity(N);
    for name in names {
        match fields.remove(name) {
            Some(Value::String(value)) => strings.push(value),
            _ => {
                return Err(ApiError::bad_request(format!(
                    "`{name}` (a string) is required"
                )));
            }
        }
    }
    let arguments = match fields.remove("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(arguments @ Value::Object(_)) => arguments,
        Some(_) => return Err(ApiError::bad_request("`arguments` must be an object")),
    };
    let token = match fields.remove("confirmationToken") {
        None | Some(Value::Null) => None,
        Some(Value::String(token)) => Some(token),
        Some(_) => {
            return Err(ApiError::bad_request(
                "`confirmationToken` must be a string",
            ));
        }
    };
    if let Some(unknown) = fields.keys().next() {
        return Err(ApiError::bad_request(format!(
            "unknown field `{}`",
            shown(unknown)
        )));
    }
    let strings = strings
        .try_into()
        .map_err(|_| ApiError::bad_request("the body is not acceptable"))?;
    Ok((strings, arguments, token))
}

async fn list_confirmations(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
) -> Result<Json<Value>, ApiError> {
    let pending = state.gateway.current().pending_confirmations(&ctx).await?;
    let list: Vec<Value> = pending
        .iter()
        .map(|p| {
            json!({
                "confirmationId": p.id,
                "tool": p.binding.tool,
                "argsHash": p.binding.args_hash,
                "createdAt": rfc3339(p.created_at),
                "expiresAt": rfc3339(p.expires_at),
            })
        })
        .collect();
    Ok(Json(json!({ "confirmations": list })))
}

async fn approve(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let approval = state.gateway.current().approve(&ctx, &id).await;
    state.metrics.decided(Decision::Approved, &approval);
    let approval = approval?;
    Ok(Json(json!({
        "confirmationToken": approval.token,
        "confirmationId": approval.confirmation_id,
        "expiresAt": rfc3339(approval.expires_at),
    })))
}

async fn deny(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let denied = state.gateway.current().deny(&ctx, &id).await;
    state.metrics.decided(Decision::Denied, &denied);
    denied?;
    Ok(Json(json!({ "ok": true })))
}

async fn list_servers(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
) -> Json<Value> {
    let gateway = state.gateway.current();
    let visible = gateway.list_tools(&ctx).await;
    let admin = gateway.administers(&ctx);
    let connections = gateway.connections();
    let is_oauth = |id: &ServerId| connections.is_some_and(|c| c.is_oauth(id));
    let mut servers: Vec<Value> = Vec::new();
    for s in gateway.servers() {
        // A caller sees the servers whose tools they may see (and those that want the
        // caller's own account, which they may connect); a tenant's admin every server of the
        // tenant, an operator every server.
        let shown = match admin {
            Admin::Operator => true,
            Admin::Tenant => gateway.tenant_sees(&ctx, &s.id),
            Admin::None => {
                visible.iter().any(|t| t.server == s.id)
                    || (is_oauth(&s.id) && gateway.tenant_sees(&ctx, &s.id))
            }
        };
        if !shown {
            continue;
        }
        let mut server = json!({
            "id": s.id.as_str(),
            "state": s.state.as_str(),
            "lastError": s.last_error,
            "transport": s.transport,
            "toolCount": visible.iter().filter(|t| t.server == s.id).count(),
            "stale": s.stale,
        });
        // Its user, paths and limits are the operator's business, shown to those who
        // administer the server.
        if admin != Admin::None
            && let Some(sandbox) = gateway.sandbox_of(&s)
        {
            server["sandbox"] = sandbox;
        }
        if let Some(connections) = connections.filter(|c| c.is_oauth(&s.id)) {
            server["authorization"] = authorization(connections, &ctx, &s.id).await;
        }
        servers.push(server);
    }
    Json(json!({ "servers": servers }))
}

/// The caller's connection to an `auth = "oauth"` server: `status` is `connected`, `expired`
/// or `none`, with the route that connects (again).
async fn authorization(
    connections: &crate::oauth::Connections,
    ctx: &CallContext,
    id: &ServerId,
) -> Value {
    let key = crate::oauth::ConnectionKey {
        tenant: ctx.tenant.clone(),
        user: ctx.user.clone(),
        server: id.to_string(),
    };
    let connect = format!("/api/v1/mcp/servers/{id}/connect");
    match connections.status(&key).await {
        Ok(Some(info)) => json!({
            "status": info.status,
            "scopes": info.scopes,
            "issuer": info.issuer,
            "connectedAt": info.connected_at,
            "connect": connect,
        }),
        Ok(None) => json!({ "status": "none", "connect": connect }),
        Err(err) => json!({ "status": "unknown", "error": err.code(), "connect": connect }),
    }
}

/// `GET /mcp/pins/{tool}`: the tool's live definition beside its pinned one. Pins are the
/// whole gateway's, so this is an operator's.
async fn review_pin(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(tool): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    require_operator(&gateway, &ctx)?;
    let review = gateway
        .pin_review(&tool)
        .ok_or_else(|| GatewayError::NotFound { name: tool })?;
    Ok(Json(review.to_json()))
}

/// `{ fingerprint }`: the live fingerprint the operator reviewed.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AcceptBody {
    fingerprint: String,
}

/// `POST /mcp/pins/{tool}`: accepts the reviewed live definition as the tool's pin.
async fn accept_pin(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(tool): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    require_operator(&gateway, &ctx)?;
    let body: AcceptBody = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body must be {{\"fingerprint\": \"<the reviewed live fingerprint>\"}}: {e}"
        ))
    })?;
    let accepted = gateway
        .accept_pin(&ctx, &tool, Some(&body.fingerprint))
        .await
        .map_err(|err| match err {
            PinError::UnknownTool(name) => GatewayError::NotFound { name }.into(),
            PinError::Changed { .. } => {
                ApiError::new(StatusCode::CONFLICT, "definition_changed", err.to_string())
            }
            PinError::NoPinFile => {
                ApiError::new(StatusCode::CONFLICT, "no_pin_file", err.to_string())
            }
            PinError::Store(err) => {
                tracing::error!(error = %err, "the shared pins could not be written");
                GatewayError::StoreUnavailable {
                    what: "the shared pins",
                }
                .into()
            }
            PinError::File(file) => {
                tracing::error!(error = %file, "the pin file could not be written");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "pin_file_error",
                    "the pin file could not be read or written; see the gateway's log",
                )
            }
        })?;
    Ok(Json(json!({
        "ok": true,
        "tool": accepted.tool,
        "fingerprint": accepted.fingerprint,
        "previous": accepted.previous,
    })))
}

/// What `ctx` administers; refused when nothing.
fn require_admin(gateway: &Gateway, ctx: &CallContext) -> Result<Admin, ApiError> {
    match gateway.administers(ctx) {
        Admin::None => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this needs the admin role (or, with [access], an operator)",
        )),
        admin => Ok(admin),
    }
}

/// Refused unless `ctx` operates the whole gateway.
pub(super) fn require_operator(gateway: &Gateway, ctx: &CallContext) -> Result<(), ApiError> {
    match gateway.administers(ctx) {
        Admin::Operator => Ok(()),
        _ => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this needs a gateway operator (the admin role without [access])",
        )),
    }
}

async fn refresh_server(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let gateway = state.gateway.current();
    let admin = require_admin(&gateway, &ctx)?;
    // Another tenant's server is not found, like one that does not exist.
    let found = ServerId::new(&id)
        .filter(|id| admin == Admin::Operator || gateway.tenant_sees(&ctx, id))
        .is_some_and(|id| gateway.refresh(&id));
    if !found {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such server",
        ));
    }
    Ok(Json(json!({ "ok": true, "refreshing": id })))
}

/// Filters of `GET /audit`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AuditParams {
    /// RFC 3339 (or whole seconds since the epoch).
    since: Option<String>,
    until: Option<String>,
    tenant: Option<String>,
    user: Option<String>,
    tool: Option<String>,
    outcome: Option<String>,
    limit: Option<usize>,
    /// Paging: records older than this id.
    before: Option<i64>,
}

async fn audit(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    params: Result<Query<AuditParams>, QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(params) = params.map_err(|_| {
        ApiError::bad_request(
            "the audit takes since, until, tenant, user, tool, outcome, limit and before, each once",
        )
    })?;
    let gateway = state.gateway.current();
    // A tenant's admin reads its own tenant's records, whatever the query names.
    let tenant = match require_admin(&gateway, &ctx)? {
        Admin::Operator => params.tenant,
        _ => match params.tenant {
            Some(tenant) if tenant != ctx.tenant => {
                return Ok(Json(json!({ "records": [], "before": null })));
            }
            _ => Some(ctx.tenant.clone()),
        },
    };
    let at = |name: &str, text: Option<String>| {
        text.map(|text| {
            parse_instant(&text).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "`{name}` must be an RFC 3339 time like 2026-12-01T18:14:45Z \
                     (or seconds since the epoch), not {}",
                    shown(&text)
                ))
            })
        })
        .transpose()
    };
    let query = AuditQuery {
        since: at("since", params.since)?,
        until: at("until", params.until)?,
        tenant,
        user: params.user,
        tool: params.tool,
        outcome: params.outcome,
        limit: params
            .limit
            .unwrap_or(crate::store::DEFAULT_AUDIT_QUERY_LIMIT),
        before_id: params.before,
    };
    let records = gateway.audit_store().query(query).await.map_err(|err| {
        tracing::error!(error = %err, "audit query failed");
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            "the audit log is unavailable",
        )
    })?;
    let list: Vec<Value> = records.iter().map(|(id, r)| r.to_json(*id)).collect();
    let next = records.last().map(|(id, _)| *id);
    Ok(Json(json!({ "records": list, "before": next })))
}

/// A caller-supplied name quoted in an error: escaped and cut.
fn shown(name: &str) -> String {
    let cut: String = name.chars().take(64).collect();
    format!("{cut:?}")
}
