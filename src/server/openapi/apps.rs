//! The MCP Apps routes of the OpenAPI document (as `server/apps.rs` serves them) and their
//! schemas: what the page needs to host an app, and what an app asks of the gateway.

use serde_json::{Map, Value, json};

use super::{Access, Route, json_body, schema_ref};

const BAD_BODY: (u16, &str, &str) = (400, "The body is not acceptable (`bad_request`).", "Error");

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route {
            method: "get",
            path: "/api/v1/apps",
            id: "appsSandbox",
            access: Access::Caller,
            summary: "Where the page renders MCP Apps: the sandbox's origin, another than the \
                gateway's (null when apps are not hosted).",
            parameters: json!([]),
            body: None,
            ok: json_body("The sandbox.", schema_ref("AppsSandbox")),
            errors: &[],
        },
        Route {
            method: "get",
            path: "/api/v1/apps/view",
            id: "appView",
            access: Access::Caller,
            summary: "An app's view to render, read through the gate (a view is as visible as \
                the tools naming it), with the CSP and permissions it declared.",
            parameters: json!([{ "name": "uri", "in": "query", "required": true,
                "description": "The view, as the merged view names it: `ui://<server>/…`.",
                "schema": { "type": "string" } }]),
            body: None,
            ok: json_body("The view.", schema_ref("AppView")),
            errors: &[
                (
                    400,
                    "`uri` is missing or not a `ui://` view (`bad_request`).",
                    "Error",
                ),
                (
                    403,
                    "The server wants the caller's own account (`authorization_required`).",
                    "Error",
                ),
                (
                    404,
                    "No such view for this caller (`resource_not_found`).",
                    "Error",
                ),
                (
                    413,
                    "The view is over `max_view_bytes` (`result_too_large`).",
                    "Error",
                ),
                (
                    422,
                    "The resource is not an HTML view (`not_an_app_view`).",
                    "Error",
                ),
                (502, "The upstream failed the read.", "Error"),
                (503, "The upstream or a store is unavailable.", "Error"),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/apps/call",
            id: "appCall",
            access: Access::Caller,
            summary: "A tool call an app makes from inside its view: only the view's own \
                server's tools whose visibility includes `app`, through the gate as the \
                caller, audited as the app's. Answered with the MCP `CallToolResult`.",
            parameters: json!([]),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("AppCall") } } })),
            ok: json_body(
                "The tool's result, as MCP shapes it.",
                schema_ref("McpCallToolResult"),
            ),
            errors: &[
                (
                    400,
                    "The body is not acceptable (`bad_request`) or the arguments fail the \
                     tool's schema (`invalid_arguments`).",
                    "Error",
                ),
                (
                    404,
                    "No such tool for this app: another server's, one not meant for apps, or \
                     unknown (`not_found`).",
                    "Error",
                ),
                (
                    409,
                    "The confirmation token is unknown, used, expired or bound to another call \
                     (`confirmation_invalid`).",
                    "Error",
                ),
                (
                    413,
                    "The result is over the limit (`result_too_large`).",
                    "Error",
                ),
                (
                    423,
                    "The tool is quarantined or waits for review (`quarantined`, `pending_review`).",
                    "Error",
                ),
                (
                    428,
                    "A write needs the user's approval: approve `confirmationId`, then call \
                     again with the token (`confirmation_required`).",
                    "ConfirmationRequired",
                ),
                (
                    429,
                    "A rate or concurrency limit was hit (`limit_exceeded`).",
                    "Error",
                ),
                (502, "The upstream failed the call (`upstream_*`).", "Error"),
                (503, "The upstream or a store is unavailable.", "Error"),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/apps/read",
            id: "appRead",
            access: Access::Caller,
            summary: "A resource read an app makes from inside its view, from the view's own \
                server only, by the URI that server uses. Answered with the MCP \
                `ReadResourceResult`.",
            parameters: json!([]),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("AppRead") } } })),
            ok: json_body("The resource.", schema_ref("McpReadResourceResult")),
            errors: &[
                BAD_BODY,
                (
                    403,
                    "The server wants the caller's own account (`authorization_required`).",
                    "Error",
                ),
                (
                    404,
                    "No such resource for this caller (`resource_not_found`).",
                    "Error",
                ),
                (
                    413,
                    "The resource is over the limit (`result_too_large`).",
                    "Error",
                ),
                (502, "The upstream failed the read.", "Error"),
                (503, "The upstream or a store is unavailable.", "Error"),
            ],
        },
    ]
}

pub(super) fn schemas() -> Map<String, Value> {
    let string = || json!({ "type": "string" });
    let view = || {
        json!({ "type": "string",
                "description": "The app's view as the merged view names it (`ui://<server>/…`)." })
    };
    let schemas = json!({
        "AppsSandbox": {
            "type": "object",
            "required": ["sandbox"],
            "properties": { "sandbox": { "type": ["string", "null"],
                "description": "The sandbox's origin; the proxy page is `{sandbox}/sandbox`." } },
        },
        "AppView": {
            "type": "object",
            "required": ["uri", "mimeType"],
            "properties": {
                "uri": string(),
                "mimeType": string(),
                "html": { "type": ["string", "null"] },
                "blob": { "type": ["string", "null"], "description": "Base64, when the upstream sent a blob." },
                "csp": { "description": "The view's `_meta.ui.csp`, as declared." },
                "permissions": { "description": "The view's `_meta.ui.permissions`, as declared." },
                "prefersBorder": { "type": ["boolean", "null"] },
            },
        },
        "AppCall": {
            "type": "object",
            "required": ["view", "tool"],
            "additionalProperties": false,
            "properties": {
                "view": view(),
                "tool": { "type": "string", "description": "The tool's name as its server names it." },
                "arguments": { "type": ["object", "null"] },
                "confirmationToken": { "type": ["string", "null"] },
            },
        },
        "AppRead": {
            "type": "object",
            "required": ["view", "uri"],
            "additionalProperties": false,
            "properties": { "view": view(), "uri": string() },
        },
        "McpCallToolResult": {
            "type": "object",
            "required": ["content"],
            "description": "MCP's `CallToolResult`.",
            "properties": {
                "content": { "type": "array" },
                "structuredContent": {},
                "isError": { "type": "boolean" },
                "_meta": { "type": "object" },
            },
        },
        "McpReadResourceResult": {
            "type": "object",
            "required": ["contents"],
            "description": "MCP's `ReadResourceResult`.",
            "properties": { "contents": { "type": "array" } },
        },
    });
    match schemas {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}
