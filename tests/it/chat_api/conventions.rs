//! One convention for every JSON the gateway writes: names in camelCase, times in RFC 3339
//! (UTC, whole seconds). Checked on what the service really sends over HTTP, route by route
//! and event by event, and on the OpenAPI document that describes it.

use std::collections::BTreeSet;

use futures::StreamExt as _;
use mcpgate::server::openapi::document;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Chat, Events, find, user};
use crate::{scripted_llm::Reply, support};

/// Fields whose contents are not the gateway's own words: a tool's arguments, schemas and
/// structured results as the upstream or the model wrote them, MCP `_meta`.
/// The chat request's `options`, OpenAI sampling names passed to the model as given.
const PASSED_THROUGH: [&str; 7] = [
    "arguments",
    "options",
    "inputSchema",
    "outputSchema",
    "structuredContent",
    "_meta",
    "annotations",
];

fn camel_case(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase()) && chars.all(|c| c.is_ascii_alphanumeric())
}

/// A time field by its name: `time`, or a name ending in `At` (`expiresAt`, `createdAt`).
fn names_a_time(name: &str) -> bool {
    name == "time" || (name.len() > 2 && name.ends_with("At"))
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339_utc(value: &Value) -> bool {
    let Some(text) = value.as_str() else {
        return false;
    };
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| bytes[range].iter().all(u8::is_ascii_digit);
    bytes.len() == 20
        && digits(0..4)
        && bytes[4] == b'-'
        && digits(5..7)
        && bytes[7] == b'-'
        && digits(8..10)
        && bytes[10] == b'T'
        && digits(11..13)
        && bytes[13] == b':'
        && digits(14..16)
        && bytes[16] == b':'
        && digits(17..19)
        && bytes[19] == b'Z'
}

/// Every departure from the convention in `value`, as `where: what`.
fn departures(place: &str, value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (name, inner) in map {
                let here = format!("{place}.{name}");
                if !camel_case(name) && name != "_meta" {
                    out.push(format!("{here}: the name is not camelCase"));
                }
                if names_a_time(name) && !rfc3339_utc(inner) {
                    out.push(format!("{here}: {inner} is not an RFC 3339 UTC time"));
                }
                if !PASSED_THROUGH.contains(&name.as_str()) {
                    departures(&here, inner, out);
                }
            }
        }
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                departures(&format!("{place}[{index}]"), item, out);
            }
        }
        _ => {}
    }
}

#[test]
fn the_checker_catches_what_it_must() {
    let mut found = Vec::new();
    departures(
        "x",
        &json!({ "call_id": "a", "expiresAt": 1_796_149_485, "time": "2026-12-01T18:14:45Z",
                 "arguments": { "snake_case": 1 }, "items": [{ "createdAt": "yesterday" }] }),
        &mut found,
    );
    assert_eq!(
        found,
        [
            "x.call_id: the name is not camelCase",
            "x.expiresAt: 1796149485 is not an RFC 3339 UTC time",
            "x.items[0].createdAt: \"yesterday\" is not an RFC 3339 UTC time",
        ]
    );
}

/// What the service answered to one request: the route, its status and JSON body.
struct Seen {
    route: String,
    status: StatusCode,
    body: Value,
}

impl Chat {
    /// `http://127.0.0.1:port`, without `/api/v1`.
    fn root(&self) -> &str {
        self.base.trim_end_matches("/api/v1")
    }

    /// `method path` (from the root) with the dev token; the answer must be JSON.
    async fn json(&self, method: Method, path: &str, body: Option<&Value>) -> Seen {
        let mut request = self
            .client
            .request(method.clone(), format!("{}{path}", self.root()))
            .bearer_auth(&self.token);
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.expect("the service answers");
        let status = response.status();
        let body = response.json().await.expect("a JSON body");
        Seen {
            route: format!("{method} {path}"),
            status,
            body,
        }
    }
}

#[tokio::test]
async fn every_route_and_event_writes_camel_case_names_and_rfc3339_times() {
    let chat = Chat::start(
        vec![
            Reply::tool_calls(&[
                ("slow_echo", json!({ "message": "one" })),
                ("slow_sleep", json!({ "ms": 250 })),
                ("nope_nothing", json!({})),
            ]),
            Reply::tool_calls(&[
                ("demo_add_note", json!({ "title": "t", "body": "b" })),
                ("slow_sleep", json!({ "ms": 150 })),
            ]),
            Reply::text("All done."),
        ],
        // Users' own servers on, so their route is read too.
        support::with_user_servers,
    )
    .await;

    // A chat turn with every kind of event: calls, progress, an ETA, an error, an approval.
    let mut body = user("do it all");
    body["session"] = json!("conventions");
    let response = chat.post("/chat", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Events::new(response.bytes_stream().boxed());
    let mut seen_events = events.until("approval_required").await;
    let call_id = find(&seen_events, "approval_required")["callId"]
        .as_str()
        .expect("the approval names its call")
        .to_owned();
    let decided = chat
        .post(
            &format!("/chat/conventions/approvals/{call_id}"),
            &json!({ "decision": "approve" }),
        )
        .await;
    assert_eq!(decided.status(), StatusCode::OK);
    seen_events.extend(events.rest().await);
    let kinds: BTreeSet<&str> = seen_events.iter().map(|(n, _)| n.as_str()).collect();
    for kind in [
        "session",
        "round_start",
        "tool_call",
        "tool_eta",
        "tool_progress",
        "tool_result",
        "tool_error",
        "approval_required",
        "final",
        "done",
    ] {
        assert!(kinds.contains(kind), "no `{kind}` event in {kinds:?}");
    }
    assert!(
        find(&seen_events, "final")["usage"]["totalTokens"].is_u64(),
        "usage is reported"
    );

    // The REST routes, the write flow included: refused, listed, approved, run, denied.
    let note = json!({ "tool": "demo.add_note", "arguments": { "title": "r", "body": "b" } });
    // Every route the document lists that is read with a plain GET (the document itself is
    // checked on its own below: its keys are OpenAPI's).
    let mut seen = Vec::new();
    for (path, item) in document()["paths"].as_object().expect("paths") {
        let required = item["get"]["parameters"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["required"] == true));
        let plain = item.get("get").is_some() && !path.contains('{') && !required;
        if plain && !["/metrics", "/mcp", "/api/v1/openapi.json"].contains(&path.as_str()) {
            let reply = chat.json(Method::GET, path, None).await;
            assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.body);
            seen.push(reply);
        }
    }
    assert!(seen.len() >= 6, "the plain reads were found");
    seen.push(
        chat.json(
            Method::POST,
            "/api/v1/mcp/tools/call",
            Some(&json!({ "tool": "slow.echo", "arguments": { "message": "m" } })),
        )
        .await,
    );
    let asked = chat
        .json(Method::POST, "/api/v1/mcp/tools/call", Some(&note))
        .await;
    assert_eq!(
        asked.status,
        StatusCode::PRECONDITION_REQUIRED,
        "{}",
        asked.body
    );
    let id = asked.body["confirmationId"]
        .as_str()
        .expect("a confirmation id")
        .to_owned();
    seen.push(asked);
    seen.push(
        chat.json(Method::GET, "/api/v1/mcp/confirmations", None)
            .await,
    );
    let approved = chat
        .json(
            Method::POST,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            Some(&json!({})),
        )
        .await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.body);
    let mut with_token = note.clone();
    with_token["confirmationToken"] = approved.body["confirmationToken"].clone();
    seen.push(approved);
    seen.push(
        chat.json(Method::POST, "/api/v1/mcp/tools/call", Some(&with_token))
            .await,
    );
    let again = chat
        .json(Method::POST, "/api/v1/mcp/tools/call", Some(&note))
        .await;
    let other = again.body["confirmationId"]
        .as_str()
        .expect("a second confirmation")
        .to_owned();
    seen.push(again);
    seen.push(
        chat.json(
            Method::POST,
            &format!("/api/v1/mcp/confirmations/{other}/deny"),
            Some(&json!({})),
        )
        .await,
    );
    seen.push(
        chat.json(
            Method::POST,
            "/api/v1/mcp/servers/demo/refresh",
            Some(&json!({})),
        )
        .await,
    );
    let review = chat
        .json(Method::GET, "/api/v1/mcp/pins/demo.echo", None)
        .await;
    assert_eq!(review.status, StatusCode::OK, "{}", review.body);
    let fingerprint = review.body["live"]["fingerprint"].clone();
    seen.push(review);
    let no_file = chat
        .json(
            Method::POST,
            "/api/v1/mcp/pins/demo.echo",
            Some(&json!({ "fingerprint": fingerprint })),
        )
        .await;
    assert_eq!(no_file.status, StatusCode::CONFLICT, "{}", no_file.body);
    seen.push(no_file);
    seen.push(
        chat.json(
            Method::POST,
            "/api/v1/chat/conventions/cancel",
            Some(&json!({})),
        )
        .await,
    );
    let audit = chat.json(Method::GET, "/api/v1/audit?limit=50", None).await;
    let first_time = audit.body["records"][0]["time"].clone();
    assert!(rfc3339_utc(&first_time), "{}", audit.body);
    seen.push(audit);
    // What the gateway writes, it reads back: an RFC 3339 `since` finds the records.
    let since = chat
        .json(
            Method::GET,
            &format!(
                "/api/v1/audit?since={}",
                first_time.as_str().expect("a time").replace(':', "%3A")
            ),
            None,
        )
        .await;
    assert!(
        since.body["records"]
            .as_array()
            .is_some_and(|r| !r.is_empty()),
        "{}",
        since.body
    );
    seen.push(since);
    let bad_since = chat
        .json(Method::GET, "/api/v1/audit?since=yesterday", None)
        .await;
    assert_eq!(
        bad_since.status,
        StatusCode::BAD_REQUEST,
        "{}",
        bad_since.body
    );
    seen.push(bad_since);
    seen.push(
        chat.json(
            Method::POST,
            "/api/v1/mcp/tools/call",
            Some(&json!({ "tool": 1 })),
        )
        .await,
    );

    let mut found = Vec::new();
    for (name, data) in &seen_events {
        departures(&format!("event {name}"), data, &mut found);
    }
    for reply in &seen {
        departures(
            &format!("{} ({})", reply.route, reply.status),
            &reply.body,
            &mut found,
        );
    }
    assert!(found.is_empty(), "{found:#?}");
    chat.stop().await;
}

/// The document's own schemas follow it too: every property camelCase, every time a
/// `date-time` string.
#[test]
fn the_openapi_document_describes_the_same_convention() {
    fn walk(place: &str, value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::Object(properties)) = map.get("properties") {
                    for (name, schema) in properties {
                        if !camel_case(name) && name != "_meta" {
                            out.push(format!("{place}.{name}: not camelCase"));
                        }
                        if names_a_time(name) && schema["format"] != "date-time" {
                            out.push(format!("{place}.{name}: not a date-time"));
                        }
                    }
                }
                if let Some(Value::Array(parameters)) = map.get("parameters") {
                    // Header names are HTTP's (`Idempotency-Key`), not ours to spell.
                    for parameter in parameters.iter().filter(|p| p["in"] != "header") {
                        let name = parameter["name"].as_str().unwrap_or_default();
                        if !camel_case(name) {
                            out.push(format!("{place}: parameter {name} is not camelCase"));
                        }
                    }
                }
                for (name, inner) in map {
                    if !PASSED_THROUGH.contains(&name.as_str()) {
                        walk(&format!("{place}/{name}"), inner, out);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|v| walk(place, v, out)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    walk("#", &document(), &mut found);
    assert!(found.is_empty(), "{found:#?}");
}
