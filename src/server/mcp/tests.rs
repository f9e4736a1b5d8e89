//! The endpoint over real HTTP on 127.0.0.1:0 with rmcp's own client: both lifecycles,
//! tools through the gate, confirmations (elicitation, input rounds, out of band), bearer
//! authentication, the Host check, list changes; and the session guards. Resources, prompts
//! and completion are in `content`; log levels and resource subscriptions in `watch`.

mod apps;
mod content;
mod direct;
mod lanes;
mod relay;
mod rounds;
mod scoped;
mod support;
mod watch;

use rmcp::{
    ServiceError,
    model::{
        ErrorCode, MetaObject, ProtocolVersion, RequestMetaObject, ServerNotification,
        SubscriptionFilter,
    },
};
use serde_json::{Value, json};

use super::{confirm::TOKEN_META_KEY, sessions::CappedSessions};
use crate::store::AuditQuery;
use support::{
    Endpoint, TestClient, WAIT, call, call_ok, discover, http, in_session, initialize, jwt_auth,
    jwt_for, text, without_body,
};

/// How many times `tool` reached its upstream (audited as allowed and ok).
async fn runs(endpoint: &Endpoint, tool: &str) -> usize {
    let records = endpoint
        .gateway
        .audit_store()
        .query(AuditQuery {
            tool: Some(tool.to_owned()),
            limit: 100,
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    records
        .iter()
        .filter(|(_, r)| r.decision == "allowed" && r.outcome == "ok")
        .count()
}

/// The text between `before` and the next character in `stop`.
fn field<'a>(text: &'a str, before: &str, stop: &[char]) -> &'a str {
    let start = text.find(before).expect("the field is named") + before.len();
    let rest = &text[start..];
    &rest[..rest.find(stop).unwrap_or(rest.len())]
}

async fn lists_and_calls(lifecycle: rmcp::service::ClientLifecycleMode, version: ProtocolVersion) {
    let endpoint = Endpoint::start().await;
    let client = endpoint.connect(TestClient::new(None), lifecycle).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.protocol_version, version);
    let name = info.server_info.as_ref().map(|i| i.name.as_str());
    assert_eq!(name, Some("mcpgate"));

    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in ["changing_alpha", "demo_add", "demo_add_note", "demo_echo"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let add = tools
        .iter()
        .find(|t| t.name == "demo_add")
        .expect("demo_add");
    assert!(add.input_schema["properties"]["a"].is_object());
    // The upstream's output schema comes through (a result it would not fit is refused,
    // never cut: see `gateway::shape_sized`).
    let output = serde_json::to_string(&add.output_schema).expect("serializes");
    assert!(output.contains("\"sum\""), "{output}");
    let read_only = add.annotations.as_ref().and_then(|a| a.read_only_hint);
    assert_eq!(read_only, Some(true));

    let sum = call_ok(&client, "demo_add", json!({ "a": 2, "b": 3 })).await;
    assert_eq!(sum.is_error, Some(false), "{}", text(&sum));
    let structured = sum.structured_content.as_ref().expect("structured content");
    assert_eq!(structured["sum"].as_f64(), Some(5.0));
    assert_eq!(runs(&endpoint, "demo.add").await, 1);

    let invalid = call_ok(&client, "demo_add", json!({ "a": "two" })).await;
    assert_eq!(invalid.is_error, Some(true));
    assert!(
        text(&invalid).starts_with("[invalid_arguments]"),
        "{}",
        text(&invalid)
    );

    match client.call_tool(call("demo_missing", json!({}))).await {
        Err(ServiceError::McpError(error)) => assert_eq!(error.code, ErrorCode::INVALID_PARAMS),
        other => panic!("unknown tool: {other:?}"),
    }
    let _ = client.cancel().await;
    endpoint.stop().await;
}

#[tokio::test]
async fn an_initialize_client_lists_and_calls_tools() {
    lists_and_calls(initialize(), ProtocolVersion::LATEST_WITH_INITIALIZE).await;
}

#[tokio::test]
async fn a_discover_client_lists_and_calls_tools() {
    lists_and_calls(discover(), ProtocolVersion::V_2026_07_28).await;
}

#[tokio::test]
async fn servers_without_resources_or_prompts_list_none() {
    let endpoint = Endpoint::start().await;
    let client = endpoint.connect(TestClient::new(None), initialize()).await;
    let prompts = client.list_prompts(None).await.expect("prompts/list");
    assert!(prompts.prompts.is_empty());
    let resources = client.list_resources(None).await.expect("resources/list");
    assert!(resources.resources.is_empty());
    let _ = client.cancel().await;
    endpoint.stop().await;
}

/// A write confirmed by the client's user: asked once, with tool and arguments, runs once;
/// declined: a tool error, never run.
async fn elicitation(lifecycle: fn() -> rmcp::service::ClientLifecycleMode) {
    let endpoint = Endpoint::start().await;
    let yes = TestClient::new(Some(true));
    let client = endpoint.connect(yes.clone(), lifecycle()).await;
    let saved = call_ok(
        &client,
        "demo_add_note",
        json!({ "title": "t1", "body": "b" }),
    )
    .await;
    assert_eq!(saved.is_error, Some(false), "{}", text(&saved));
    assert!(text(&saved).contains("Saved note `t1`"));
    let prompts = yes.prompts();
    assert_eq!(prompts.len(), 1, "{prompts:?}");
    assert!(prompts[0].contains("`demo.add_note`"), "{}", prompts[0]);
    assert!(prompts[0].contains("\"title\": \"t1\""), "{}", prompts[0]);
    assert_eq!(runs(&endpoint, "demo.add_note").await, 1);

    let no = TestClient::new(Some(false));
    let client = endpoint.connect(no.clone(), lifecycle()).await;
    let declined = call_ok(
        &client,
        "demo_add_note",
        json!({ "title": "t2", "body": "b" }),
    )
    .await;
    assert_eq!(declined.is_error, Some(true));
    assert!(
        text(&declined).contains("the user declined"),
        "{}",
        text(&declined)
    );
    assert_eq!(no.prompts().len(), 1);
    assert_eq!(runs(&endpoint, "demo.add_note").await, 1);
    let notes = call_ok(&client, "demo_list_notes", json!({})).await;
    assert!(text(&notes).contains("t1") && !text(&notes).contains("t2"));
    let _ = client.cancel().await;
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_client_confirms_writes_by_elicitation() {
    elicitation(initialize).await;
}

#[tokio::test]
async fn a_discover_client_confirms_writes_in_an_input_round() {
    elicitation(discover).await;
}

/// Without elicitation: a tool error naming the confirmation; approved over the REST API
/// as the same caller and session, the retry with the token in `_meta` runs once.
async fn out_of_band(lifecycle: fn() -> rmcp::service::ClientLifecycleMode) {
    let endpoint = Endpoint::start().await;
    let client = endpoint.connect(TestClient::new(None), lifecycle()).await;
    let args = json!({ "title": "t", "body": "b" });
    let asked = call_ok(&client, "demo_add_note", args.clone()).await;
    assert_eq!(asked.is_error, Some(true));
    let message = text(&asked);
    assert!(message.starts_with("[confirmation_required]"), "{message}");
    let id = field(&message, "Approve confirmation ", &[' ']);
    let session = field(&message, "x-mcpgate-session: ", &['`']);
    assert!(message.contains(&format!("/api/v1/mcp/confirmations/{id}/approve")));
    assert_eq!(runs(&endpoint, "demo.add_note").await, 0);

    let approved: Value = http()
        .post(format!(
            "{}/api/v1/mcp/confirmations/{id}/approve",
            endpoint.base
        ))
        .bearer_auth(&endpoint.token)
        .header("x-mcpgate-session", session)
        .send()
        .await
        .expect("approve")
        .json()
        .await
        .expect("JSON");
    let token = approved["confirmationToken"].as_str().expect("a token");

    let mut retry = call("demo_add_note", args);
    let meta = json!({ TOKEN_META_KEY: token });
    let meta = meta.as_object().cloned().expect("an object");
    retry.meta = Some(RequestMetaObject(MetaObject(meta)));
    let done = tokio::time::timeout(WAIT, client.call_tool(retry))
        .await
        .expect("in time")
        .expect("no protocol error");
    assert_eq!(done.is_error, Some(false), "{}", text(&done));
    assert_eq!(runs(&endpoint, "demo.add_note").await, 1);
    let _ = client.cancel().await;
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_client_without_elicitation_is_told_how_to_approve() {
    out_of_band(initialize).await;
}

#[tokio::test]
async fn a_discover_client_without_elicitation_is_told_how_to_approve() {
    out_of_band(discover).await;
}

fn initialize_body() -> Value {
    json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": { "name": "raw", "version": "0" }
        }
    })
}

#[tokio::test]
async fn bad_tokens_get_401_before_any_mcp() {
    let endpoint = Endpoint::start().await;
    let post = || {
        http()
            .post(endpoint.url())
            .header("accept", "application/json, text/event-stream")
            .json(&initialize_body())
    };
    for (request, code) in [
        (post().bearer_auth("not-the-token"), "invalid_token"),
        (post(), "missing_token"),
    ] {
        let response = request.send().await.expect("response");
        assert_eq!(response.status(), reqwest::StatusCode::UNAUTHORIZED);
        assert!(response.headers().contains_key("www-authenticate"));
        assert!(!response.headers().contains_key("mcp-session-id"));
        let body: Value = response.json().await.expect("JSON error");
        assert_eq!(body["code"], code);
    }
    endpoint.stop().await;
}

#[tokio::test]
async fn a_foreign_host_is_refused() {
    let endpoint = Endpoint::start().await;
    let send = |host: &'static str| {
        http()
            .post(endpoint.url())
            .bearer_auth(&endpoint.token)
            .header("host", host)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize_body())
            .send()
    };
    let foreign = send("rebound.example").await.expect("response");
    assert_eq!(foreign.status(), reqwest::StatusCode::FORBIDDEN);
    let local = send("localhost").await.expect("response");
    assert_eq!(local.status(), reqwest::StatusCode::OK);
    endpoint.stop().await;
}

#[tokio::test]
async fn tool_list_changes_reach_sessions_and_subscriptions() {
    let endpoint = Endpoint::start().await;
    let watcher = TestClient::new(None);
    let session = endpoint.connect(watcher.clone(), initialize()).await;
    let modern = endpoint.connect(TestClient::new(None), discover()).await;
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    let mut subscription = tokio::time::timeout(WAIT, modern.peer().listen(filter))
        .await
        .expect("in time")
        .expect("subscribed");

    let mutated = call_ok(&session, "changing_mutate", json!({ "what": "add_tool" })).await;
    assert!(text(&mutated).contains("mutated"), "{}", text(&mutated));

    let mut changes = watcher.list_changes.subscribe();
    tokio::time::timeout(WAIT, changes.wait_for(|n| *n >= 1))
        .await
        .expect("the session hears of the change")
        .expect("the client is alive");
    let heard = tokio::time::timeout(WAIT, subscription.next())
        .await
        .expect("the subscription hears of the change")
        .expect("the subscription is open");
    assert!(matches!(
        heard,
        Some(ServerNotification::ToolListChangedNotification(_))
    ));
    let tools = session.list_all_tools().await.expect("tools/list");
    assert!(tools.iter().any(|t| t.name == "changing_gamma"));
    let _ = session.cancel().await;
    let _ = modern.cancel().await;
    endpoint.stop().await;
}

/// Posts one JSON-RPC message as `token` (in session `session`) and reads the whole answer.
async fn post(
    endpoint: &Endpoint,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, String) {
    let mut request = http()
        .post(endpoint.url())
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(session) = session {
        request = in_session(request, session);
    }
    let response = request.send().await.expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let text = tokio::time::timeout(WAIT, response.text())
        .await
        .expect("the answer ends")
        .expect("a body");
    (status, headers, text)
}

/// Opens a session as `token` declaring `capabilities`; its id.
async fn open(endpoint: &Endpoint, token: &str, capabilities: Value) -> String {
    let session = begin(endpoint, token, capabilities).await;
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let (status, _, _) = post(endpoint, token, Some(&session), initialized).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    session
}

/// Sends `initialize` as `token` declaring `capabilities`; the new session's id.
async fn begin(endpoint: &Endpoint, token: &str, capabilities: Value) -> String {
    let mut initialize = initialize_body();
    initialize["params"]["capabilities"] = capabilities;
    let (status, headers, _) = post(endpoint, token, None, initialize).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    headers["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_owned()
}

/// Asserts that `session` refuses `token`'s caller: a request, its stream and its end (which
/// rmcp would grant without asking).
async fn refuses(endpoint: &Endpoint, token: &str, session: &str) {
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    let (status, _, answer) = post(endpoint, token, Some(session), list).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{answer}");
    assert!(answer.contains("opened by another caller"), "{answer}");
    assert!(!answer.contains("demo_echo"), "{answer}");
    for method in [reqwest::Method::GET, reqwest::Method::DELETE] {
        let response = without_body(endpoint, token, session, method.clone()).await;
        assert_eq!(
            response.status(),
            reqwest::StatusCode::FORBIDDEN,
            "{method}"
        );
    }
}

#[tokio::test]
async fn a_session_serves_only_the_caller_who_opened_it() {
    let endpoint = Endpoint::start_with(jwt_auth()).await;
    let (alice, bob) = (jwt_for("alice"), jwt_for("bob"));
    let session = open(&endpoint, &alice, json!({})).await;

    refuses(&endpoint, &bob, &session).await;
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    let (_, _, as_alice) = post(&endpoint, &alice, Some(&session), list).await;
    assert!(as_alice.contains("demo_echo"), "{as_alice}");
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_serves_only_its_opener_from_its_first_answer() {
    let endpoint = Endpoint::start_with(jwt_auth()).await;
    let (alice, bob) = (jwt_for("alice"), jwt_for("bob"));
    let session = begin(&endpoint, &alice, json!({})).await;
    // Alice has not sent `notifications/initialized` yet: nobody else may, nor use, stream
    // or end the session meanwhile.
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let (status, _, as_bob) = post(&endpoint, &bob, Some(&session), initialized.clone()).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{as_bob}");
    refuses(&endpoint, &bob, &session).await;
    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    // The session is whole, and Alice's.
    let (status, _, _) = post(&endpoint, &alice, Some(&session), initialized).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    let (_, _, as_alice) = post(&endpoint, &alice, Some(&session), list.clone()).await;
    assert!(as_alice.contains("demo_echo"), "{as_alice}");
    // Once she ends it, its id names no session for anyone: its opener is forgotten.
    let ended = without_body(&endpoint, &alice, &session, reqwest::Method::DELETE).await;
    assert!(ended.status().is_success(), "{}", ended.status());
    let (status, _, as_bob) = post(&endpoint, &bob, Some(&session), list).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{as_bob}");
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_that_fails_to_initialize_keeps_no_opener() {
    use rmcp::{
        model::{ClientJsonRpcMessage, GetExtensions as _, JsonRpcMessage},
        transport::streamable_http_server::SessionManager,
    };
    let sessions = CappedSessions::new(4, std::time::Duration::from_secs(300));
    let mut initialize: ClientJsonRpcMessage =
        serde_json::from_value(initialize_body()).expect("an initialize request");
    let (mut parts, ()) = http::Request::new(()).into_parts();
    let alice = crate::policy::CallContext {
        user: "alice".to_owned(),
        ..crate::policy::CallContext::local()
    };
    parts.extensions.insert(std::sync::Arc::new(alice));
    let JsonRpcMessage::Request(request) = &mut initialize else {
        panic!("a request");
    };
    request.request.extensions_mut().insert(parts);
    // No such session: rmcp refuses it, and the opener noted for it goes with it.
    let id: rmcp::transport::streamable_http_server::SessionId = "no-such-session".into();
    assert!(sessions.initialize_session(&id, initialize).await.is_err());
    let bob = crate::policy::CallContext {
        user: "bob".to_owned(),
        ..crate::policy::CallContext::local()
    };
    assert!(!sessions.opened_by_another(&id, &bob));
}

#[tokio::test]
async fn sessions_are_capped() {
    use rmcp::transport::streamable_http_server::SessionManager;
    let sessions = CappedSessions::new(1, std::time::Duration::from_secs(300));
    let (id, _transport) = sessions.create_session().await.expect("the first session");
    assert!(matches!(
        sessions.create_session().await,
        Err(super::sessions::SessionsError::Full { max: 1 })
    ));
    sessions.close_session(&id).await.expect("closed");
    assert!(sessions.create_session().await.is_ok());
}
