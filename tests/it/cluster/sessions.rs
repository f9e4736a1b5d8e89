//! An MCP client's session spread over the instances without sticky routing: `initialize`
//! on one, the rest on others, bound to its caller, and a tool-list change made known on
//! another instance reaching the client's stream.

use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Cluster, token, token_with_roles};
use crate::support::WAIT;

const VERSION: &str = "2025-11-25";

/// One JSON-RPC message to `/mcp` on instance `i`: the status and the answer (from JSON or
/// the first SSE event carrying a `result` or `error`).
async fn rpc(
    cluster: &Cluster,
    i: usize,
    bearer: &str,
    session: Option<&str>,
    message: Value,
) -> (StatusCode, Option<String>, Value) {
    let mut request = cluster
        .client
        .post(format!("{}/mcp", cluster.base(i)))
        .bearer_auth(bearer)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", VERSION)
        .json(&message);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.expect("answered");
    let status = response.status();
    let id = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let text = response.text().await.unwrap_or_default();
    let answer = serde_json::from_str(&text).unwrap_or_else(|_| {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
            .find(|m| m.get("result").is_some() || m.get("error").is_some())
            .unwrap_or(Value::Null)
    });
    (status, id, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_opened_on_one_instance_is_served_by_all() {
    let cluster = Cluster::start().await;
    let alice = token_with_roles("acme", "alice", &["admin"]);
    let (status, session, answer) = rpc(
        &cluster,
        0,
        &alice,
        None,
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": {},
            "clientInfo": { "name": "cluster-test", "version": "1" } } }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    let session = session.expect("a session id");
    let (status, _, _) = rpc(
        &cluster,
        1,
        &alice,
        Some(&session),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::ACCEPTED,
        "initialized, on another instance"
    );

    let (status, _, listed) = rpc(
        &cluster,
        1,
        &alice,
        Some(&session),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/list" }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"reads_sleep"), "{names:?}");

    let (status, _, called) = rpc(
        &cluster,
        2,
        &alice,
        Some(&session),
        json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
                "params": { "name": "reads_sleep", "arguments": { "ms": 1 } } }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{called}");
    assert_eq!(called["result"]["isError"], false, "{called}");

    // Another caller naming the session, anywhere, is refused; a forged id is unknown.
    let bob = token("acme", "bob");
    for i in 0..3 {
        let (status, _, answer) = rpc(
            &cluster,
            i,
            &bob,
            Some(&session),
            json!({ "jsonrpc": "2.0", "id": 4, "method": "tools/list" }),
        )
        .await;
        assert_eq!(status, StatusCode::FORBIDDEN, "instance {i}: {answer}");
    }
    let (status, _, _) = rpc(
        &cluster,
        2,
        &alice,
        Some("forged-session-id"),
        json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/list" }),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The client listens on instance a; the tool list changes quietly upstream and an
    // operator refreshes on instance b: a hears of it from b and tells the client.
    let stream = cluster
        .client
        .get(format!("{}/mcp", cluster.base(0)))
        .bearer_auth(&alice)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", VERSION)
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("stream opened");
    assert_eq!(stream.status(), StatusCode::OK);
    let (status, body) = cluster
        .call(
            2,
            &alice,
            "changing.mutate",
            json!({ "what": "add_tool", "quiet": true }),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = cluster
        .post(1, "/api/v1/mcp/servers/changing/refresh", &alice, json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut events = stream.bytes_stream();
    let heard = tokio::time::timeout(WAIT, async {
        let mut seen = String::new();
        while let Some(Ok(chunk)) = events.next().await {
            seen.push_str(&String::from_utf8_lossy(&chunk));
            if seen.contains("notifications/tools/list_changed") {
                return true;
            }
        }
        false
    })
    .await;
    assert_eq!(
        heard,
        Ok(true),
        "list_changed reached the client on instance a"
    );

    // Ended on the third instance: gone everywhere.
    let response = cluster
        .client
        .delete(format!("{}/mcp", cluster.base(2)))
        .bearer_auth(&alice)
        .header("mcp-protocol-version", VERSION)
        .header("mcp-session-id", &session)
        .send()
        .await
        .expect("answered");
    assert!(response.status().is_success(), "{}", response.status());
    for i in 0..3 {
        crate::support::wait_for_async("the session to close everywhere", || async {
            let (status, _, _) = rpc(
                &cluster,
                i,
                &alice,
                Some(&session),
                json!({ "jsonrpc": "2.0", "id": 6, "method": "tools/list" }),
            )
            .await;
            (status == StatusCode::NOT_FOUND).then_some(())
        })
        .await;
    }
    cluster.stop().await;
}
