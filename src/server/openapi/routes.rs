//! The route table of the OpenAPI document: one entry per operation the router serves.

use serde_json::{Value, json};

use super::{Access, Route, json_body, schema_ref};
use crate::{
    server::mcp::MCP_PATH,
    store::{DEFAULT_AUDIT_QUERY_LIMIT, MAX_AUDIT_QUERY_LIMIT},
};

fn path_id(description: &str) -> Value {
    json!([{ "name": "id", "in": "path", "required": true, "description": description,
             "schema": { "type": "string" } }])
}

fn tool_param() -> Value {
    json!([{ "name": "tool", "in": "path", "required": true,
             "description": "The canonical tool id, `server.tool` (URL-encoded).",
             "schema": { "type": "string" } }])
}

pub(super) fn routes() -> Vec<Route> {
    let none = || json!([]);
    let query = |name: &str, kind: &str, description: &str| {
        json!({ "name": name, "in": "query", "required": false, "description": description,
                "schema": { "type": kind } })
    };
    vec![
        Route {
            method: "get",
            path: "/healthz",
            id: "healthz",
            access: Access::Public,
            summary: "Liveness: the process answers.",
            parameters: none(),
            body: None,
            ok: json_body("Alive.", schema_ref("Health")),
            errors: &[],
        },
        Route {
            method: "get",
            path: "/readyz",
            id: "readyz",
            access: Access::Public,
            summary: "Readiness: stores answer and every server had its first connection attempt.",
            parameters: none(),
            body: None,
            ok: json_body("Ready.", schema_ref("Ready")),
            errors: &[(
                503,
                "Not ready: a store does not answer or a server is still connecting.",
                "Ready",
            )],
        },
        Route {
            method: "get",
            path: "/metrics",
            id: "metrics",
            access: Access::Scraper,
            summary: "Prometheus metrics (text exposition format 0.0.4).",
            parameters: none(),
            body: None,
            ok: json!({ "description": "The metrics.", "content": {
                "text/plain; version=0.0.4": { "schema": { "type": "string" } } } }),
            errors: &[(
                403,
                "The caller is neither a gateway operator nor has the metrics role (`forbidden`).",
                "Error",
            )],
        },
        Route {
            method: "get",
            path: "/api/v1/openapi.json",
            id: "openapi",
            access: Access::Public,
            summary: "This document.",
            parameters: none(),
            body: None,
            ok: json_body("The OpenAPI document.", json!({ "type": "object" })),
            errors: &[],
        },
        Route {
            method: "get",
            path: "/api/v1/mcp/tools",
            id: "listTools",
            access: Access::Caller,
            summary: "The tools the caller may see, with their status.",
            parameters: none(),
            body: None,
            ok: json_body("The caller's tools.", schema_ref("ToolList")),
            errors: &[],
        },
        Route {
            method: "post",
            path: "/api/v1/mcp/tools/call",
            id: "callTool",
            access: Access::Caller,
            summary: "Calls a tool through the gate.",
            parameters: json!([{ "name": "Idempotency-Key", "in": "header", "required": false,
                "description": "A retry of the same request with the same key (`\"...\"`, 1 to 255 characters) gets the first answer again, marked `Idempotent-Replayed: true`, without a second call; kept for `[limits] idempotency_window`. Answers 428, 429 and 503 are not kept.",
                "schema": { "type": "string" } }]),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("CallRequest") } } })),
            ok: json_body(
                "The tool ran: its shaped result, or the error it reported (`tool_error`).",
                json!({ "oneOf": [schema_ref("ToolResult"), schema_ref("Error")] }),
            ),
            errors: &[
                (
                    400,
                    "The body is not acceptable (`bad_request`), the `Idempotency-Key` is malformed (`invalid_idempotency_key`), or the arguments fail the tool's schema or limits (`invalid_arguments`).",
                    "Error",
                ),
                (
                    404,
                    "No such tool, or not visible to the caller (`not_found`).",
                    "Error",
                ),
                (
                    409,
                    "The confirmation token is unknown, used, expired or bound to another call (`confirmation_invalid`), or the first request with this `Idempotency-Key` is still running (`idempotency_key_in_use`; see `Retry-After`).",
                    "Error",
                ),
                (
                    422,
                    "This `Idempotency-Key` was used for another request (`idempotency_key_reused`).",
                    "Error",
                ),
                (
                    413,
                    "The result is over the size limit (`result_too_large`), or the request body is over `max_body_bytes` (plain text).",
                    "Error",
                ),
                (
                    423,
                    "The tool is quarantined (`quarantined`) or waits for review (`pending_review`).",
                    "Error",
                ),
                (
                    428,
                    "The call needs confirmation: approve `confirmationId`, then call again with the token (`confirmation_required`).",
                    "ConfirmationRequired",
                ),
                (
                    429,
                    "A rate or concurrency limit was hit (`limit_exceeded`); see `Retry-After`.",
                    "Error",
                ),
                (502, "The upstream failed the call (`upstream_*`).", "Error"),
                (
                    503,
                    "The upstream is not connected (`upstream_unavailable`) or a store is unreachable (`store_unavailable`).",
                    "Error",
                ),
                (
                    504,
                    "The tool did not answer within its deadline (`timeout`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/webmcp/invoke",
            id: "webmcpInvoke",
            access: Access::Caller,
            summary: "Calls a tool of one of the caller's connected browser pages through the gate, answered in the AX editor's shape.",
            parameters: none(),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("WebMcpInvoke") } } })),
            ok: json_body(
                "The page's tool ran (or reported an error: `ok: false`).",
                schema_ref("WebMcpResult"),
            ),
            errors: &[
                (
                    400,
                    "The body is not acceptable (`bad_request`, `invalid_client_id`) or the arguments fail the tool's schema (`invalid_arguments`).",
                    "Error",
                ),
                (
                    404,
                    "No page of the caller is connected under this id (`client_not_connected`), or it has no such tool (`tool_not_found`).",
                    "Error",
                ),
                (
                    409,
                    "The confirmation token is unknown, used, expired or bound to another call (`confirmation_invalid`).",
                    "Error",
                ),
                (
                    428,
                    "The call needs confirmation: approve `confirmationId`, then call again with the token (`confirmation_required`).",
                    "ConfirmationRequired",
                ),
                (
                    429,
                    "A rate or concurrency limit was hit (`limit_exceeded`); see `Retry-After`.",
                    "Error",
                ),
                (
                    502,
                    "The page went away after the call was sent: it may have run (`outcome_unknown`), or its answer is not a tool result (`invalid_result`).",
                    "Error",
                ),
                (
                    503,
                    "The page left before the call was sent (`client_not_connected`) or a store is unreachable (`store_unavailable`).",
                    "Error",
                ),
                (
                    504,
                    "The page did not answer within `call_timeout` (`timeout`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "get",
            path: "/api/v1/webmcp/bridge/{clientId}",
            id: "webmcpBridge",
            access: Access::Public,
            summary: "A browser page's WebSocket (subprotocol `mcpgate.webmcp.v1`; its token as the subprotocol `mcpgate.bearer.<jwt>`). Answers 101 Switching Protocols; see docs/webmcp.md.",
            parameters: json!([{ "name": "clientId", "in": "path", "required": true,
                                 "description": "The page's client id: 1 to 64 of A-Z, a-z, 0-9, `_`, `.`, `-`.",
                                 "schema": { "type": "string" } }]),
            body: None,
            ok: json_body("Never: the upgrade answers 101.", schema_ref("Error")),
            errors: &[
                (
                    400,
                    "Not a WebSocket upgrade, an invalid client id (`invalid_client_id`), or the bridge's subprotocol not offered (`subprotocol_required`).",
                    "Error",
                ),
                (
                    401,
                    "No token, or one the API would refuse (`missing_token`, `invalid_token`, `expired_token`, `token_in_query`, ...).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "get",
            path: "/api/v1/mcp/confirmations",
            id: "listConfirmations",
            access: Access::Caller,
            summary: "The caller's pending confirmations in this session, oldest first.",
            parameters: none(),
            body: None,
            ok: json_body("Pending confirmations.", schema_ref("ConfirmationList")),
            errors: &[(
                503,
                "The confirmation store is unreachable (`store_unavailable`).",
                "Error",
            )],
        },
        Route {
            method: "post",
            path: "/api/v1/mcp/confirmations/{id}/approve",
            id: "approve",
            access: Access::Caller,
            summary: "Approves a pending confirmation; the token lets exactly that call run once.",
            parameters: path_id("The confirmation id."),
            body: None,
            ok: json_body("Approved.", schema_ref("Approval")),
            errors: &[
                (
                    404,
                    "No such confirmation waits for the caller: unknown, expired, already decided, or another caller's (`not_found`).",
                    "Error",
                ),
                (
                    503,
                    "The confirmation store is unreachable (`store_unavailable`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/mcp/confirmations/{id}/deny",
            id: "deny",
            access: Access::Caller,
            summary: "Denies a pending confirmation for good.",
            parameters: path_id("The confirmation id."),
            body: None,
            ok: json_body("Denied.", schema_ref("Ok")),
            errors: &[
                (
                    404,
                    "No such confirmation waits for the caller: unknown, expired, already decided, or another caller's (`not_found`).",
                    "Error",
                ),
                (
                    503,
                    "The confirmation store is unreachable (`store_unavailable`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "get",
            path: "/api/v1/mcp/servers",
            id: "listServers",
            access: Access::Caller,
            summary: "Servers whose tools the caller may see (a tenant's admin: its tenant's; an operator: all), with their state.",
            parameters: none(),
            body: None,
            ok: json_body("Servers.", schema_ref("ServerList")),
            errors: &[],
        },
        Route {
            method: "post",
            path: "/api/v1/mcp/servers/{id}/refresh",
            id: "refreshServer",
            access: Access::Admin,
            summary: "Asks a server to re-list its tools, or to reconnect now.",
            parameters: path_id("The server id."),
            body: None,
            ok: json_body("Refresh started.", schema_ref("Refreshing")),
            errors: &[(
                404,
                "No such server, or (for a tenant's admin) not one of the tenant's (`not_found`).",
                "Error",
            )],
        },
        Route {
            method: "get",
            path: "/api/v1/mcp/pins/{tool}",
            id: "reviewPin",
            access: Access::Operator,
            summary: "A tool's live definition beside the pinned one (what a quarantined or \
                pending tool would be released as).",
            parameters: tool_param(),
            body: None,
            ok: json_body("The two definitions.", schema_ref("PinReview")),
            errors: &[(
                404,
                "No such tool in the live catalog (`not_found`).",
                "Error",
            )],
        },
        Route {
            method: "post",
            path: "/api/v1/mcp/pins/{tool}",
            id: "acceptPin",
            access: Access::Operator,
            summary: "Accepts the reviewed live definition as the tool's pin: only its pin is \
                rewritten in the pin file, the tool is released, and the release is audited.",
            parameters: tool_param(),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("PinAccept") } } })),
            ok: json_body("Pinned.", schema_ref("PinAccepted")),
            errors: &[
                (
                    404,
                    "No such tool in the live catalog (`not_found`).",
                    "Error",
                ),
                (
                    409,
                    "The live definition is no longer the reviewed one (`definition_changed`), \
                     or no pin file is configured (`no_pin_file`).",
                    "Error",
                ),
                (
                    500,
                    "The pin file could not be read or written (`pin_file_error`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "get",
            path: "/api/v1/audit",
            id: "audit",
            access: Access::Admin,
            summary: "Audit records, newest first; page with `before`.",
            parameters: json!([
                query("since", "string", "Records at or after this time: RFC 3339 (`2026-12-01T18:14:45Z`) or seconds since the epoch."),
                query("until", "string", "Records before this time: RFC 3339 or seconds since the epoch."),
                query("tenant", "string", "Only this tenant (a tenant's admin reads its own tenant only: another gives no records)."),
                query("user", "string", "Only this user."),
                query("tool", "string", "Only this canonical tool id."),
                query("outcome", "string", "Only this outcome (`ok` or an error code)."),
                { "name": "limit", "in": "query", "required": false,
                  "description": "At most this many records.",
                  "schema": { "type": "integer", "minimum": 0,
                              "maximum": MAX_AUDIT_QUERY_LIMIT,
                              "default": DEFAULT_AUDIT_QUERY_LIMIT } },
                query("before", "integer", "Records older than this id (the previous page's `before`)."),
            ]),
            body: None,
            ok: json_body("A page of records.", schema_ref("AuditPage")),
            errors: &[
                (
                    400,
                    "An unknown or malformed query parameter (`bad_request`).",
                    "Error",
                ),
                (
                    503,
                    "The audit log is unreachable (`store_unavailable`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "get",
            path: "/api/v1/usage",
            id: "usage",
            access: Access::Caller,
            summary: "Usage per group over a time range: calls, errors by code, latency percentiles, result bytes, confirmations; chat turns' model requests, tokens and cost. An operator reads every tenant, a tenant's admin its tenant, anyone else their own usage (naming another's gives nothing). Times are whole UTC hours.",
            parameters: json!([
                query(
                    "since",
                    "string",
                    "From (rounded down to the hour): RFC 3339 or seconds since the epoch; default 30 days before `until`."
                ),
                query(
                    "until",
                    "string",
                    "To (rounded up to the hour); default now. At most 400 days after `since`."
                ),
                query(
                    "groupBy",
                    "string",
                    "Split by, comma-separated: `tenant`, `user`, `server`, `tool`, `model` (`model` splits chat turns only; `server` and `tool` calls only). Also accepted as `group_by`."
                ),
                query(
                    "interval",
                    "string",
                    "`day` or `hour` (at most 31 days): also split by time."
                ),
                query(
                    "tenant",
                    "string",
                    "Only this tenant (an operator's choice)."
                ),
                query(
                    "user",
                    "string",
                    "Only this user (an administrator's choice)."
                ),
            ]),
            body: None,
            ok: json_body("The sums.", schema_ref("Usage")),
            errors: &[
                (
                    400,
                    "A malformed or unknown parameter, a range the wrong way round or too long (`bad_request`).",
                    "Error",
                ),
                (
                    503,
                    "The store is unreachable (`store_unavailable`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/admin/reload",
            id: "reload",
            access: Access::Operator,
            summary: "Reads the configuration file again; a valid one replaces the running gateway.",
            parameters: none(),
            body: None,
            ok: json_body("Reloaded.", schema_ref("ReloadOutcome")),
            errors: &[
                (
                    400,
                    "The configuration has problems; the running one is kept (`invalid_config`).",
                    "ReloadProblems",
                ),
                (
                    409,
                    "Settings that need a restart changed (`restart_required`), or the service was not started from a file (`reload_unavailable`).",
                    "ReloadConflict",
                ),
                (
                    500,
                    "The reload failed unexpectedly; the running configuration is kept (`reload_failed`).",
                    "Error",
                ),
                (
                    503,
                    "The service is shutting down (`shutting_down`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "post",
            path: MCP_PATH,
            id: "mcpPost",
            access: Access::Caller,
            summary: "The MCP endpoint (Streamable HTTP): one JSON-RPC message in, its answer out.",
            parameters: none(),
            body: Some(
                json!({ "required": true, "content": { "application/json": { "schema": {
                "type": "object",
                "description": "One JSON-RPC 2.0 message (MCP specification, Streamable HTTP)." } } } }),
            ),
            ok: json!({ "description": "The JSON-RPC response, as JSON or as an event stream.",
                "content": {
                    "application/json": { "schema": { "type": "object" } },
                    "text/event-stream": { "schema": { "type": "string" } } } }),
            errors: &[
                (202, "A notification or response was accepted; no body.", ""),
                (
                    400,
                    "Not a JSON-RPC message, or a session or protocol-version header problem.",
                    "",
                ),
                (
                    404,
                    "Unknown or expired MCP session, or an unknown JSON-RPC method.",
                    "",
                ),
                (
                    406,
                    "The `Accept` header must allow `application/json` and `text/event-stream`.",
                    "",
                ),
                (413, "The body is over `max_body_bytes`.", ""),
                (415, "The body must be `application/json`.", ""),
            ],
        },
        Route {
            method: "get",
            path: MCP_PATH,
            id: "mcpStream",
            access: Access::Caller,
            summary: "The MCP session's server-to-client event stream.",
            parameters: none(),
            body: None,
            ok: json!({ "description": "Server messages as they come.", "content": {
                "text/event-stream": { "schema": { "type": "string" } } } }),
            errors: &[
                (400, "No or a malformed `mcp-session-id` header.", ""),
                (404, "Unknown or expired MCP session.", ""),
                (
                    405,
                    "The request's protocol version has no stream (2026-07-28).",
                    "",
                ),
                (
                    406,
                    "The `Accept` header must allow `text/event-stream`.",
                    "",
                ),
            ],
        },
        Route {
            method: "delete",
            path: MCP_PATH,
            id: "mcpEnd",
            access: Access::Caller,
            summary: "Ends the MCP session named by `mcp-session-id`.",
            parameters: none(),
            body: None,
            ok: json!({ "description": "Ended." }),
            errors: &[
                (202, "Ended.", ""),
                (400, "No or a malformed `mcp-session-id` header.", ""),
                (404, "Unknown or expired MCP session.", ""),
                (
                    405,
                    "The request's protocol version has no sessions (2026-07-28).",
                    "",
                ),
            ],
        },
    ]
}
