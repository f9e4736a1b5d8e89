//! The per-server view `/mcp/{server}`: upstream names in and out, calls through the gate as
//! canonical ids, 404 for unknown and hidden servers alike, and sessions kept to their view.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::support::{
    Endpoint, TestClient, WAIT, call, call_ok, http, in_process, initialize, jwt_auth, jwt_for,
    text,
};
use crate::{
    config::{AccessConfig, AuthConfig, Grant, ServerId, TenantAccess},
    fixtures::{Fixture, demo::DemoServer},
    store::AuditQuery,
};

/// The conformance fixture as `conf` and the demo server as `demo`.
async fn start(auth: AuthConfig, access: Option<AccessConfig>) -> Endpoint {
    let conformance = crate::fixtures::handler(Fixture::Conformance).expect("in-process fixture");
    let mut demo = in_process("demo", DemoServer::new());
    demo.read_only_tools = crate::fixtures::demo::READ_ONLY_TOOLS
        .iter()
        .map(|t| (*t).to_owned())
        .collect();
    let servers = vec![in_process("conf", conformance), demo];
    Endpoint::start_servers(auth, servers, access).await
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

/// Posts one JSON-RPC message to `path` as `token` (in `session`) and reads the whole answer.
async fn post(
    endpoint: &Endpoint,
    path: &str,
    token: &str,
    session: Option<&str>,
    body: Value,
) -> (StatusCode, reqwest::header::HeaderMap, String) {
    let mut request = http()
        .post(format!("{}{path}", endpoint.base))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .json(&body);
    if let Some(session) = session {
        request = super::support::in_session(request, session);
    }
    let response = request.send().await.expect("response");
    let (status, headers) = (response.status(), response.headers().clone());
    let text = tokio::time::timeout(WAIT, response.text())
        .await
        .expect("the answer ends")
        .expect("a body");
    (status, headers, text)
}

#[tokio::test]
async fn one_server_under_its_own_names_through_the_gate() {
    let endpoint = start(AuthConfig::Dev, None).await;
    let url = format!("{}/mcp/demo", endpoint.base);
    let client = endpoint
        .connect_to(url, TestClient::new(None), initialize(), &endpoint.token)
        .await;
    let info = client.peer_info().expect("server info");
    let instructions = info.instructions.as_deref().unwrap_or_default();
    assert!(instructions.contains("`demo`"), "{instructions}");
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert!(names.contains(&"echo"), "{names:?}");
    assert!(names.contains(&"add_note"), "{names:?}");
    assert!(
        !names
            .iter()
            .any(|n| n.starts_with("demo_") || n.starts_with("test_")),
        "only demo's tools, unprefixed: {names:?}"
    );

    let echoed = call_ok(&client, "echo", json!({ "message": "scoped" })).await;
    assert_eq!(echoed.is_error, Some(false), "{}", text(&echoed));
    assert!(text(&echoed).contains("Echo: scoped"), "{}", text(&echoed));
    let records = endpoint
        .gateway
        .audit_store()
        .query(AuditQuery {
            tool: Some("demo.echo".to_owned()),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    assert_eq!(records.len(), 1, "audited under the canonical id");

    // Names of the merged endpoint, or of another server, are unknown here.
    for name in ["demo_echo", "demo.echo", "test_simple_text"] {
        let refused = client
            .call_tool(call(name, json!({ "message": "x" })))
            .await;
        assert!(refused.is_err(), "{name}: {refused:?}");
    }
    // A write keeps its confirmation: the client has no elicitation, so it is told how.
    let note = json!({ "title": "t", "body": "b" });
    let write = call_ok(&client, "add_note", note).await;
    assert_eq!(write.is_error, Some(true), "{}", text(&write));
    assert!(text(&write).contains("confirmation"), "{}", text(&write));

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    assert!(
        prompts.is_empty(),
        "the demo server has no prompts: {prompts:?}"
    );
    let _ = client.cancel().await;

    let url = format!("{}/mcp/conf", endpoint.base);
    let conf = endpoint
        .connect_to(url, TestClient::new(None), initialize(), &endpoint.token)
        .await;
    let prompts = conf.list_all_prompts().await.expect("prompts/list");
    assert!(
        prompts.iter().any(|p| p.name == "test_simple_prompt"),
        "{prompts:?}"
    );
    let get = rmcp::model::GetPromptRequestParams::new("test_simple_prompt");
    assert!(conf.get_prompt(get).await.is_ok());
    let resources = conf.list_all_resources().await.expect("resources/list");
    assert!(resources.iter().any(|r| r.uri == "test://static-text"));
    let _ = conf.cancel().await;
    endpoint.stop().await;
}

#[tokio::test]
async fn unknown_and_hidden_servers_are_404_alike() {
    let server = |id: &str| ServerId::new(id).expect("valid id");
    let grant = |user: &str, tool: &str| Grant {
        tenant: "local".into(),
        users: vec![user.into()],
        roles: vec![],
        tools: vec![tool.into()],
    };
    let access = AccessConfig {
        tenants: vec![TenantAccess {
            tenant: "local".into(),
            servers: vec![server("conf"), server("demo")],
            models: None,
        }],
        grants: vec![grant("bob", "demo.echo")],
        operators: vec![],
    };
    let endpoint = start(jwt_auth(), Some(access)).await;
    let bob = jwt_for("bob");
    let mut bodies = Vec::new();
    for path in ["/mcp/nope", "/mcp/conf", "/mcp/Not_An_Id"] {
        let (status, headers, body) = post(&endpoint, path, &bob, None, initialize_body()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(!headers.contains_key("mcp-session-id"), "{path}");
        bodies.push(body);
    }
    assert_eq!(bodies[0], bodies[1], "hidden looks exactly like unknown");
    let (status, _, _) = post(&endpoint, "/mcp/demo", &bob, None, initialize_body()).await;
    assert_eq!(status, StatusCode::OK);
    let url = format!("{}/mcp/demo", endpoint.base);
    let client = endpoint
        .connect_to(url, TestClient::new(None), initialize(), &bob)
        .await;
    let tools = client.list_all_tools().await.expect("tools/list");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(names, ["echo"]);
    // A tool of the view that bob may not use is refused exactly like a missing one.
    let refusal = |name: &'static str| {
        let client = &client;
        async move {
            match client
                .call_tool(call(name, json!({ "a": 1, "b": 2 })))
                .await
            {
                Err(rmcp::ServiceError::McpError(error)) => {
                    (error.code, error.message.replace(name, "NAME"))
                }
                other => panic!("{name}: expected a JSON-RPC error, got {other:?}"),
            }
        }
    };
    assert_eq!(refusal("add").await, refusal("nope").await);
    let _ = client.cancel().await;
    let (status, _, _) = post(&endpoint, "/mcp/demo", "bad", None, initialize_body()).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "authentication comes first"
    );
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_stays_on_its_view() {
    let endpoint = start(AuthConfig::Dev, None).await;
    let token = endpoint.token.clone();
    let (status, headers, _) = post(&endpoint, "/mcp/demo", &token, None, initialize_body()).await;
    assert_eq!(status, StatusCode::OK);
    let session = headers["mcp-session-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
    let (status, _, _) = post(&endpoint, "/mcp/demo", &token, Some(&session), initialized).await;
    assert_eq!(status, StatusCode::ACCEPTED);

    let list = json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" });
    let (status, _, listed) =
        post(&endpoint, "/mcp/demo", &token, Some(&session), list.clone()).await;
    assert_eq!(status, StatusCode::OK);
    assert!(listed.contains("\"echo\""), "{listed}");
    for other in ["/mcp", "/mcp/conf"] {
        let (status, _, body) = post(&endpoint, other, &token, Some(&session), list.clone()).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{other}: {body}");
        assert!(!body.contains("echo"), "{other}: {body}");
    }
    endpoint.stop().await;
}
