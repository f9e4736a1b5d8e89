//! The whole service, in the spirit of linkerd's inbound fuzzer: sequences of HTTP requests
//! (any method, a known route or any path, headers the service reads, bodies shaped like its
//! requests or raw) into the router, with the demo server behind it. No request panics,
//! none is answered 500, every refusal is typed; libFuzzer's memory limit bounds the rest.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::{StackRequest, serve_requests};
use serde_json::{Value, json};

const METHODS: [&str; 7] = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS", "HEAD"];

const ROUTES: [&str; 20] = [
    "/healthz",
    "/readyz",
    "/api/v1/openapi.json",
    "/api/v1/mcp/tools",
    "/api/v1/mcp/tools/call",
    "/api/v1/mcp/confirmations",
    "/api/v1/mcp/confirmations/",
    "/api/v1/mcp/servers",
    "/api/v1/mcp/servers/demo/refresh",
    "/api/v1/mcp/servers/demo/connect",
    "/api/v1/mcp/pins/demo.echo",
    "/api/v1/audit",
    "/api/v1/usage",
    "/api/v1/chat",
    "/api/v1/admin/reload",
    "/mcp",
    "/metrics",
    "/",
    "/.well-known/oauth-protected-resource/mcp",
    "/api/v1/oauth/callback",
];

const HEADERS: [&str; 10] = [
    "content-type",
    "accept",
    "mcp-session-id",
    "mcp-protocol-version",
    "idempotency-key",
    "x-mcpgate-session",
    "origin",
    "host",
    "last-event-id",
    "x-request-id",
];

const TOOLS: [&str; 8] = [
    "demo.echo",
    "demo.add",
    "demo.add_note",
    "demo.delete_note",
    "demo.list_notes",
    "demo.time_now",
    "demo_echo",
    "nope.nothing",
];

const RPC_METHODS: [&str; 10] = [
    "initialize",
    "notifications/initialized",
    "tools/list",
    "tools/call",
    "server/discover",
    "resources/list",
    "resources/read",
    "prompts/list",
    "ping",
    "subscriptions/listen",
];

#[derive(Arbitrary, Debug)]
enum Body {
    Empty,
    Raw(Vec<u8>),
    /// A REST call: `{ tool, arguments, confirmationToken? }`.
    Call {
        tool: u8,
        arguments: String,
        token: Option<String>,
    },
    /// A JSON-RPC message for `/mcp`.
    Rpc {
        method: u8,
        id: Option<i64>,
        params: String,
    },
}

#[derive(Arbitrary, Debug)]
struct Request {
    method: u8,
    /// A known route (below the routes' count), else `raw_path`.
    route: u8,
    tail: String,
    raw_path: String,
    headers: Vec<(u8, String)>,
    body: Body,
    authorized: bool,
}

/// Text as JSON when it is JSON, else as a JSON string.
fn json_or_string(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

impl Request {
    fn into_request(self) -> StackRequest {
        let path = match ROUTES.get(usize::from(self.route)) {
            Some(route) => format!("{route}{}", self.tail),
            None => self.raw_path,
        };
        let body = match self.body {
            Body::Empty => Vec::new(),
            Body::Raw(bytes) => bytes,
            Body::Call {
                tool,
                arguments,
                token,
            } => {
                let mut call = json!({
                    "tool": TOOLS[usize::from(tool) % TOOLS.len()],
                    "arguments": json_or_string(&arguments),
                });
                if let Some(token) = token {
                    call["confirmationToken"] = json!(token);
                }
                call.to_string().into_bytes()
            }
            Body::Rpc { method, id, params } => {
                let mut message = json!({
                    "jsonrpc": "2.0",
                    "method": RPC_METHODS[usize::from(method) % RPC_METHODS.len()],
                    "params": json_or_string(&params),
                });
                if let Some(id) = id {
                    message["id"] = json!(id);
                }
                message.to_string().into_bytes()
            }
        };
        StackRequest {
            method: http::Method::from_bytes(
                METHODS[usize::from(self.method) % METHODS.len()].as_bytes(),
            )
            .expect("a known method"),
            path,
            headers: self
                .headers
                .into_iter()
                .take(16)
                .map(|(name, value)| {
                    (
                        HEADERS[usize::from(name) % HEADERS.len()].to_owned(),
                        value.into_bytes(),
                    )
                })
                .collect(),
            body,
            authorized: self.authorized,
        }
    }
}

fuzz_target!(|requests: Vec<Request>| {
    let requests = requests
        .into_iter()
        .take(8)
        .map(Request::into_request)
        .collect();
    if let Err(problem) = serve_requests(requests) {
        panic!("{problem}");
    }
});
