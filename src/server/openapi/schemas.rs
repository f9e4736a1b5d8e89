//! The JSON Schemas of the OpenAPI document: request and response bodies as the handlers in
//! `rest.rs`, `mod.rs` and `reload.rs` build them.

use serde_json::{Value, json};

fn string() -> Value {
    json!({ "type": "string" })
}

fn nullable_string() -> Value {
    json!({ "type": ["string", "null"] })
}

fn integer() -> Value {
    json!({ "type": "integer", "minimum": 0 })
}

fn instant(what: &str) -> Value {
    json!({ "type": "string", "format": "date-time", "description": format!("{what} (RFC 3339, UTC).") })
}

fn strings() -> Value {
    json!({ "type": "array", "items": { "type": "string" } })
}

fn list_of(name: &str) -> Value {
    json!({ "type": "array", "items": { "$ref": format!("#/components/schemas/{name}") } })
}

/// An object with every listed property required.
fn object(properties: Value) -> Value {
    let required: Vec<String> = properties
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    json!({ "type": "object", "required": required, "properties": properties })
}

/// A fingerprint and the fingerprinted definition (`name`, `title`, `description`,
/// `inputSchema`, `outputSchema`, `annotations`).
fn definition(what: &str) -> Value {
    json!({ "type": "object", "required": ["fingerprint", "definition"], "description": what,
            "properties": { "fingerprint": string(),
                            "definition": { "type": ["object", "null"] } } })
}

/// A server as listed; `sandbox` (a stdio server's, shown to its administrators) is optional.
fn server() -> Value {
    let mut server = object(json!({
        "id": string(),
        "state": { "$ref": "#/components/schemas/ServerState" },
        "lastError": nullable_string(),
        "transport": { "enum": ["stdio", "streamable-http", "sse", null] },
        "toolCount": integer(),
        "stale": { "type": "boolean" },
    }));
    server["properties"]["sandbox"] = json!({
        "type": "object",
        "description": "A stdio server's sandbox, to administrators: `mode`, `user`, \
            `memoryBytes`, `cpuSeconds`, `openFiles`, `processes`, `read`, `write`, `network`, \
            and `enforced` (`landlock`: `full`, `partial` or `none`; `uid`) once its process \
            reported.",
    });
    server
}

/// The error body with more required fields.
fn error_with(properties: Value) -> Value {
    json!({ "allOf": [{ "$ref": "#/components/schemas/Error" }, object(properties)] })
}

/// One content part, tagged by `type`.
fn part(kind: &str, properties: Value) -> Value {
    let mut part = object(properties);
    part["properties"]["type"] = json!({ "const": kind });
    if let Some(required) = part["required"].as_array_mut() {
        required.insert(0, json!("type"));
    }
    part
}

pub(super) fn schemas() -> Value {
    let mut all = core_schemas();
    if let (Some(all), Value::Object(pins)) = (all.as_object_mut(), pin_schemas()) {
        all.extend(pins);
    }
    all
}

fn core_schemas() -> Value {
    let mime = || json!({ "type": "string" });
    json!({
        "Error": {
            "type": "object",
            "required": ["ok", "code", "message"],
            "properties": {
                "ok": { "const": false },
                "code": { "type": "string", "description": "Stable and machine-readable: act on it." },
                "message": { "type": "string", "description": "For people; never holds internals." },
            },
        },
        "ConfirmationRequired": error_with(json!({
            "confirmationId": string(),
            "tool": string(),
            "argsHash": { "type": "string", "description": "SHA-256 of the canonical arguments." },
            "expiresAt": instant("When the pending confirmation lapses"),
        })),
        "ReloadProblems": error_with(json!({
            "problems": { "type": "array", "items": { "type": "string" },
                          "description": "Every problem, each as `field.path: message`." },
        })),
        "ReloadConflict": {
            "allOf": [{ "$ref": "#/components/schemas/Error" }, {
                "type": "object",
                "properties": { "sections": {
                    "type": "array", "items": { "type": "string" },
                    "description": "With `restart_required`: the sections that changed.",
                } },
            }],
        },
        "Health": object(json!({ "ok": { "const": true } })),
        "Ready": object(json!({
            "ok": { "type": "boolean" },
            "stores": { "type": "boolean" },
            "servers": { "type": "array", "items": object(json!({
                "id": string(), "state": { "$ref": "#/components/schemas/ServerState" },
            })) },
        })),
        "ServerState": { "enum": ["connecting", "ready", "degraded", "failed"] },
        "Ok": object(json!({ "ok": { "const": true } })),
        "Finding": object(json!({ "code": string(), "location": string(), "detail": string() })),
        "Tool": object(json!({
            "name": { "type": "string", "description": "Canonical id `server.tool`." },
            "functionName": { "type": "string", "description": "The name models and the MCP endpoint use." },
            "title": nullable_string(),
            "description": nullable_string(),
            "inputSchema": { "type": "object" },
            "source": { "enum": ["mcp", "webmcp"], "description": "`webmcp`: a browser page's tool, server `webmcp-<name>`." },
            "server": string(),
            "requiresConfirmation": { "type": "boolean" },
            "fingerprint": string(),
            "status": { "enum": ["ok", "stale", "quarantined", "pending"] },
            "statusReason": nullable_string(),
            "overridden": {
                "type": ["object", "null"],
                "description": "The upstream's own title and description, when the operator's override (`[servers.x.overrides.tool]`) replaced them in `title` and `description`.",
                "properties": { "title": nullable_string(), "description": nullable_string() },
            },
            "findings": list_of("Finding"),
        })),
        "ToolList": object(json!({ "tools": list_of("Tool") })),
        "CallRequest": {
            "type": "object",
            "required": ["tool"],
            "additionalProperties": false,
            "properties": {
                "tool": { "type": "string", "description": "Canonical id or function name." },
                "arguments": { "type": ["object", "null"] },
                "confirmationToken": nullable_string(),
            },
        },
        "WebMcpInvoke": {
            "type": "object",
            "required": ["clientId", "tool"],
            "additionalProperties": false,
            "properties": {
                "clientId": { "type": "string", "description": "The page's client id, as it connected." },
                "tool": { "type": "string", "description": "The tool's name as the page registered it." },
                "arguments": { "type": ["object", "null"] },
                "confirmationToken": nullable_string(),
            },
        },
        "WebMcpResult": object(json!({
            "code": { "const": 0 },
            "data": object(json!({ "result": object(json!({
                "ok": { "type": "boolean", "description": "`false`: the page's tool reported an error." },
                "data": { "description": "The tool's structured content, else its text; `null` when not ok." },
                "error": { "type": ["string", "null"] },
            })) })),
        })),
        "Part": { "oneOf": [
            part("text", json!({ "text": string() })),
            part("image", json!({ "mimeType": mime(), "data": string() })),
            part("audio", json!({ "mimeType": mime(), "data": string() })),
            {
                "type": "object",
                "required": ["type", "uri"],
                "properties": {
                    "type": { "const": "resource" }, "uri": string(), "mimeType": mime(),
                    "text": string(), "blob": string(),
                },
            },
            {
                "type": "object",
                "required": ["type", "uri", "name"],
                "properties": {
                    "type": { "const": "resource_link" }, "uri": string(), "name": string(),
                    "mimeType": mime(),
                },
            },
            {
                "type": "object",
                "required": ["type", "kind", "bytes", "reason"],
                "properties": {
                    "type": { "const": "omitted" }, "kind": string(), "mimeType": mime(),
                    "bytes": integer(), "reason": string(),
                },
            },
        ] },
        "ToolResult": object(json!({
            "ok": { "const": true },
            "tool": string(),
            "server": string(),
            "data": {
                "type": "object",
                "required": ["content", "truncated"],
                "properties": {
                    "content": list_of("Part"),
                    "truncated": { "type": "boolean" },
                    "structuredContent": {},
                },
            },
        })),
        "PendingConfirmation": object(json!({
            "confirmationId": string(),
            "tool": string(),
            "argsHash": string(),
            "createdAt": instant("When the call asked"),
            "expiresAt": instant("When it lapses"),
        })),
        "ConfirmationList": object(json!({ "confirmations": list_of("PendingConfirmation") })),
        "Approval": object(json!({
            "confirmationToken": { "type": "string", "description": "Send it with the same call, once." },
            "confirmationId": string(),
            "expiresAt": instant("When the token lapses"),
        })),
        "Server": server(),
        "ServerList": object(json!({ "servers": list_of("Server") })),
        "Refreshing": object(json!({ "ok": { "const": true }, "refreshing": string() })),
        "AuditRecord": object(json!({
            "id": { "type": "integer" },
            "time": { "type": "string", "format": "date-time", "description": "When the attempt started (RFC 3339, UTC)." },
            "requestId": string(),
            "tenant": string(),
            "user": string(),
            "session": string(),
            "server": string(),
            "tool": string(),
            "decision": string(),
            "confirmationId": nullable_string(),
            "outcome": { "type": "string", "description": "`ok` or an error code." },
            "durationMs": integer(),
            "argumentBytes": integer(),
            "resultBytes": integer(),
            "fingerprint": nullable_string(),
            "arguments": nullable_string(),
            "detail": nullable_string(),
        })),
        "AuditPage": object(json!({
            "records": list_of("AuditRecord"),
            "before": { "type": ["integer", "null"], "description": "Pass as `before` for the next page." },
        })),
        "Usage": usage_schema(),
        "ReloadOutcome": object(json!({
            "ok": { "const": true },
            "added": strings(),
            "removed": strings(),
            "kept": strings(),
            "tools": integer(),
            "warnings": strings(),
        })),
    })
}

/// `GET /api/v1/usage`'s answer.
fn usage_schema() -> Value {
    let bucket = instant("The start of the time bucket");
    let latency = json!({ "type": ["object", "null"],
        "description": "Percentiles of the calls that reached the upstream, read from a \
            histogram (within about 1.5x).",
        "properties": { "p50": { "type": "number" }, "p90": { "type": "number" },
                        "p99": { "type": "number" } } });
    let confirmations = json!({ "type": "object", "properties": {
        "asked": integer(), "approved": integer(), "denied": integer() } });
    let call = json!({ "type": "object", "properties": {
        "tenant": string(), "user": string(), "server": string(), "tool": string(),
        "time": bucket.clone(), "calls": integer(), "errors": integer(),
        "errorsByCode": { "type": "array", "items": { "type": "object",
            "properties": { "code": string(), "count": integer() } } },
        "latencyMs": latency, "resultBytes": integer(), "confirmations": confirmations } });
    let cost = json!({ "type": "number",
        "description": "From the model's configured prices, in their currency." });
    let model = json!({ "type": "object", "properties": {
        "tenant": string(), "user": string(), "model": string(), "time": bucket,
        "turns": integer(), "requests": integer(), "promptTokens": integer(),
        "completionTokens": integer(), "cachedTokens": integer(), "cost": cost } });
    let totals = json!({ "type": "object", "properties": {
        "calls": integer(), "errors": integer(), "turns": integer(), "requests": integer(),
        "promptTokens": integer(), "completionTokens": integer(), "cachedTokens": integer(),
        "cost": { "type": "number" } } });
    object(json!({
        "since": instant("From, rounded down to the hour"),
        "until": instant("To, rounded up to the hour"),
        "groupBy": strings(),
        "interval": { "type": ["string", "null"], "enum": ["hour", "day", null] },
        "calls": { "type": "array", "items": call,
            "description": "One group per key, most calls first: the fields of `groupBy` \
                that apply, and `time` with an interval." },
        "models": { "type": "array", "items": model,
            "description": "Chat turns per key, highest cost first." },
        "truncated": { "type": "boolean",
            "description": "More than 10,000 groups: the rest count in the totals only." },
        "totals": totals,
    }))
}

/// The pin review and release bodies.
fn pin_schemas() -> Value {
    json!({
        "PinReview": object(json!({
            "tool": string(),
            "server": string(),
            "status": { "enum": ["ok", "stale", "pending", "quarantined"] },
            "live": definition("The definition the upstream lists now."),
            "pinned": {
                "oneOf": [definition("The pinned fingerprint; `definition` is null when the \
                    pin file keeps none for it."), { "type": "null" }],
                "description": "Null when the tool has no pin.",
            },
        })),
        "PinAccept": object(json!({
            "fingerprint": { "type": "string", "description": "The live fingerprint reviewed." },
        })),
        "PinAccepted": object(json!({
            "ok": { "const": true },
            "tool": string(),
            "fingerprint": string(),
            "previous": nullable_string(),
        }))
    })
}
