//! The chat routes of the OpenAPI document and their schemas, the event stream included
//! (as `server/chat.rs` and `agent/events.rs` build them).

use serde_json::{Map, Value, json};

use super::{Access, Route, json_body, schema_ref};

fn path(names: &[(&'static str, &'static str)]) -> Value {
    Value::Array(
        names
            .iter()
            .map(|(name, description)| {
                json!({ "name": name, "in": "path", "required": true,
                        "description": description, "schema": { "type": "string" } })
            })
            .collect(),
    )
}

const SESSION: (&str, &str) = (
    "session",
    "The chat session id (from the `session` event or `x-mcpgate-session`).",
);

pub(super) fn routes() -> Vec<Route> {
    vec![
        Route {
            method: "get",
            path: "/api/v1/chat",
            id: "chatModel",
            access: Access::Caller,
            summary: "Lists the models the caller may choose and names the default (null when \
                none is configured), so a client can offer a choice, or say before the first \
                question that there is none.",
            parameters: json!([]),
            body: None,
            ok: json_body("The model.", schema_ref("ChatModel")),
            errors: &[],
        },
        Route {
            method: "post",
            path: "/api/v1/chat",
            id: "chat",
            access: Access::Caller,
            summary: "Runs one chat turn of the agent loop as the caller; its events stream back.",
            parameters: json!([]),
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("ChatRequest") } } })),
            ok: json!({
                "description": "The turn's events as server-sent events: `event: <type>` and \
                    `data: <ChatEvent JSON>`. The first is `session`; the last is `done`. The \
                    `x-mcpgate-session` header names the session. Closing the stream cancels \
                    the turn.",
                "headers": { "x-mcpgate-session": {
                    "description": "The chat session id.", "schema": { "type": "string" } } },
                "content": { "text/event-stream": { "schema": schema_ref("ChatEvent") } },
            }),
            errors: &[
                (
                    400,
                    "The body is not acceptable: messages, session id, time zone or model options (`bad_request`), or the model named is not one the caller may use (`model_not_available`).",
                    "Error",
                ),
                (
                    429,
                    "Too many turns are running (`too_many_turns`); see `Retry-After`.",
                    "Error",
                ),
                (
                    503,
                    "No model is configured (`no_model`), or its client cannot be built (`llm_config`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/chat/{session}/approvals/{callId}",
            id: "chatDecide",
            access: Access::Caller,
            summary: "Approves or denies a write tool call waiting in a running turn (same user and session).",
            parameters: {
                let mut parameters = path(&[
                    SESSION,
                    ("callId", "The `callId` of the `approval_required` event."),
                ]);
                if let Value::Array(list) = &mut parameters {
                    list.push(json!({ "name": "Idempotency-Key", "in": "header", "required": false,
                        "description": "A retry of the same decision with the same key gets the first answer again (`Idempotent-Replayed: true`), as on the call route.",
                        "schema": { "type": "string" } }));
                }
                parameters
            },
            body: Some(json!({ "required": true, "content": {
                "application/json": { "schema": schema_ref("ChatDecision") } } })),
            ok: json_body("Decided.", schema_ref("ChatDecided")),
            errors: &[
                (
                    400,
                    "The body or the session id is not acceptable (`bad_request`), or the `Idempotency-Key` is malformed (`invalid_idempotency_key`).",
                    "Error",
                ),
                (
                    404,
                    "No approval of that call waits for this user in this session (`not_found`).",
                    "Error",
                ),
                (
                    409,
                    "The first decision with this `Idempotency-Key` is still being made (`idempotency_key_in_use`).",
                    "Error",
                ),
                (
                    422,
                    "This `Idempotency-Key` was used for another request (`idempotency_key_reused`).",
                    "Error",
                ),
            ],
        },
        Route {
            method: "post",
            path: "/api/v1/chat/{session}/cancel",
            id: "chatCancel",
            access: Access::Caller,
            summary: "Cancels the caller's running turns in the session; their tool calls are cancelled upstream.",
            parameters: path(&[SESSION]),
            body: None,
            ok: json_body("Cancelled.", schema_ref("ChatCancelled")),
            errors: &[(
                400,
                "The session id is not acceptable (`bad_request`).",
                "Error",
            )],
        },
    ]
}

/// An object whose listed properties are all required.
fn object(required: &[&str], properties: Value) -> Value {
    json!({ "type": "object", "required": required, "properties": properties })
}

/// One event of the stream, tagged by `type`.
fn event(kind: &str, required: &[&str], properties: Value) -> Value {
    let mut required: Vec<&str> = required.to_vec();
    required.insert(0, "type");
    let mut schema = object(&required, properties);
    schema["properties"]["type"] = json!({ "const": kind });
    schema
}

pub(super) fn schemas() -> Map<String, Value> {
    let string = || json!({ "type": "string" });
    let integer = || json!({ "type": "integer", "minimum": 0 });
    let number = || json!({ "type": "number" });
    let call = |extra: &[&'static str], mut properties: Value| -> (Vec<&'static str>, Value) {
        properties["callId"] = string();
        let mut required = vec!["callId"];
        required.extend_from_slice(extra);
        (required, properties)
    };
    let mut events = Vec::new();
    events.push(event(
        "session",
        &["session", "model"],
        json!({ "session": string(),
                "model": { "type": "string", "description": "The name of the model answering." },
                "routedFrom": { "type": "string",
                    "description": "The model asked for (or the default) when it has no tools, \
                        the turn offers some, and a model with tools answers instead." } }),
    ));
    events.push(event(
        "round_start",
        &["round"],
        json!({ "round": integer() }),
    ));
    events.push(event("text_delta", &["text"], json!({ "text": string() })));
    events.push(event(
        "reasoning_delta",
        &["text"],
        json!({ "text": string() }),
    ));
    let (required, properties) = call(
        &["tool", "server", "arguments"],
        json!({ "tool": string(), "server": { "type": ["string", "null"] }, "arguments": {},
                "view": { "type": "string",
                          "description": "The tool's MCP Apps view (`ui://<server>/…`), when it has one." } }),
    );
    events.push(event("tool_call", &required, properties));
    let (required, properties) = call(&["expectedMs"], json!({ "expectedMs": integer() }));
    events.push(event("tool_eta", &required, properties));
    let (required, properties) = call(
        &["progress"],
        json!({ "progress": number(), "total": number(), "message": string() }),
    );
    events.push(event("tool_progress", &required, properties));
    let (required, properties) = call(
        &["confirmationId", "tool", "server", "arguments", "expiresAt"],
        json!({ "confirmationId": string(), "tool": string(), "server": string(),
                "arguments": {}, "expiresAt": { "type": "string", "format": "date-time" } }),
    );
    events.push(event("approval_required", &required, properties));
    let (required, properties) = call(
        &["tool", "result", "elapsedMs"],
        json!({ "tool": string(), "elapsedMs": integer(), "result": {
            "type": "object", "required": ["content", "truncated"], "properties": {
                "content": { "type": "array", "items": schema_ref("Part") },
                "truncated": { "type": "boolean" }, "structuredContent": {} } } }),
    );
    events.push(event("tool_result", &required, properties));
    let (required, properties) = call(
        &["tool", "code", "message", "elapsedMs"],
        json!({ "tool": string(), "code": string(), "message": string(),
                "elapsedMs": integer() }),
    );
    events.push(event("tool_error", &required, properties));
    let usage = object(
        &["promptTokens", "completionTokens", "totalTokens"],
        json!({ "promptTokens": integer(), "completionTokens": integer(),
                "totalTokens": integer() }),
    );
    events.push(event(
        "final",
        &["message", "html"],
        json!({ "message": string(), "usage": usage,
                "html": { "type": "string",
                          "description": "The message rendered from Markdown and sanitized." } }),
    ));
    events.push(event(
        "error",
        &["code", "message"],
        json!({ "code": string(), "message": string() }),
    ));
    events.push(event("done", &[], json!({})));

    let mut schemas = Map::new();
    schemas.insert(
        "ChatRequest".into(),
        json!({
            "type": "object",
            "required": ["messages"],
            "additionalProperties": false,
            "properties": {
                "messages": { "type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["role", "content"],
                    "additionalProperties": false,
                    "properties": {
                        "role": { "enum": ["user", "assistant", "system"] },
                        "content": string(),
                    } },
                    "description": "The conversation so far; the last message is the user's." },
                "session": { "type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$",
                             "description": "Absent: the server starts a session." },
                "timeZone": { "type": "string",
                              "description": "IANA name (`Europe/Paris`) or offset (`+02:00`); default UTC." },
                "options": { "type": "object", "additionalProperties": false,
                             "description": "Sampling options passed to the model.",
                             "properties": crate::server::chat::SAMPLING_OPTIONS.iter()
                                 .map(|o| ((*o).to_owned(), json!({})))
                                 .collect::<Map<String, Value>>() },
                "model": { "type": "string",
                    "description": "The model's name (`GET /api/v1/chat` lists them); absent: \
                        the default. A turn that offers tools on a model without them is \
                        answered by a model with tools (the `session` event says which)." },
                "servers": { "type": "array", "maxItems": crate::gateway::MAX_SELECTED_SERVERS,
                    "items": { "type": "string" },
                    "description": "Only these servers' tools are offered to the model (ids \
                        the caller may use; an unknown or hidden one is 400 `unknown_server`). \
                        Absent: every tool the caller may use." },
                "appContext": { "type": "array", "maxItems": 8,
                    "description": "What the MCP Apps in view asked to tell the model \
                        (`ui/update-model-context`): each becomes data the model reads, fenced, \
                        before the user's message.",
                    "items": { "type": "object", "required": ["tool", "text"],
                               "additionalProperties": false,
                               "properties": {
                                   "tool": { "type": "string", "pattern": "^[A-Za-z0-9._/:-]{1,200}$" },
                                   "text": { "type": "string", "maxLength": 8000 } } } },
            },
        }),
    );
    schemas.insert(
        "ChatEvent".into(),
        json!({ "oneOf": events, "description": "One event of a chat turn (`data` of the stream)." }),
    );
    schemas.insert(
        "ChatDecision".into(),
        json!({ "type": "object", "required": ["decision"], "additionalProperties": false,
                "properties": { "decision": { "enum": ["approve", "deny"] } } }),
    );
    schemas.insert(
        "ChatModel".into(),
        object(
            &["model", "tools", "models", "toolsModel"],
            json!({ "model": { "type": ["string", "null"],
                               "description": "The default model's name; null: no model." },
                    "tools": { "type": "boolean",
                               "description": "Whether the default model is offered the tools." },
                    "models": { "type": "array",
                        "description": "Every model the caller may choose, in configuration order.",
                        "items": object(&["name", "tools"], json!({
                            "name": string(),
                            "tools": { "type": "boolean" } })) },
                    "toolsModel": { "type": ["string", "null"],
                        "description": "Where a turn that offers tools goes when its model has \
                            none (`[llm] tools_model`, when the caller may use it)." } }),
        ),
    );
    schemas.insert(
        "ChatDecided".into(),
        object(
            &["ok", "decision"],
            json!({ "ok": { "const": true }, "decision": { "enum": ["approve", "deny"] } }),
        ),
    );
    schemas.insert(
        "ChatCancelled".into(),
        object(
            &["ok", "cancelled"],
            json!({ "ok": { "const": true }, "cancelled": {
                "type": "integer", "minimum": 0, "description": "Running turns cancelled." } }),
        ),
    );
    schemas
}
