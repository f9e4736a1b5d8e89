//! An MCP client's session spread over the instances without sticky routing: `initialize`
//! on one, the rest on others, bound to its caller, a tool-list change made known on
//! another instance reaching the client's stream, and the client's answer to a confirmation
//! reaching the call that asked, wherever it is posted.

use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Cluster, token, token_with_roles};
use crate::support::WAIT;

const VERSION: &str = "2025-11-25";

/// One JSON-RPC message to `/mcp` on instance `i`: the response as it starts.
async fn post(
    cluster: &Cluster,
    i: usize,
    bearer: &str,
    session: Option<&str>,
    message: Value,
) -> reqwest::Response {
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
    request.send().await.expect("answered")
}

/// One JSON-RPC message to `/mcp` on instance `i`: the status and the answer (from JSON or
/// the first SSE event carrying a `result` or `error`).
async fn rpc(
    cluster: &Cluster,
    i: usize,
    bearer: &str,
    session: Option<&str>,
    message: Value,
) -> (StatusCode, Option<String>, Value) {
    let response = post(cluster, i, bearer, session, message).await;
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

/// The JSON-RPC messages of an SSE response, one by one.
struct Messages {
    events: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    seen: String,
}

impl Messages {
    fn of(response: reqwest::Response) -> Messages {
        Messages {
            events: response.bytes_stream().boxed(),
            seen: String::new(),
        }
    }

    /// The next message, within [`WAIT`].
    async fn next(&mut self) -> Value {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(end) = self.seen.find("\n\n") {
                    let event: String = self.seen.drain(..end + 2).collect();
                    let data: String = event
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(str::trim)
                        .collect();
                    if let Ok(message) = serde_json::from_str::<Value>(&data) {
                        return message;
                    }
                    continue;
                }
                match self.events.next().await {
                    Some(Ok(chunk)) => self.seen.push_str(&String::from_utf8_lossy(&chunk)),
                    other => panic!("the stream ended: {other:?}"),
                }
            }
        })
        .await
        .expect("a message within the wait")
    }
}

/// A session opened on instance 0 by a client that can answer elicitations.
async fn eliciting_session(cluster: &Cluster, bearer: &str) -> String {
    let (status, session, answer) = rpc(
        cluster,
        0,
        bearer,
        None,
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": VERSION, "capabilities": { "elicitation": {} },
            "clientInfo": { "name": "cluster-test", "version": "1" } } }),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    session.expect("a session id")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_asked_on_one_instance_is_answered_from_any() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let session = eliciting_session(&cluster, &alice).await;
    let completed = || async { cluster.stats(&alice).await["completed"].as_u64() };
    let before = completed().await;

    // Each call runs on instance 1 and asks there, on the call's own stream (the client
    // listens on no other); the answer is posted to instance 2, 1 itself, then 0.
    for (call_id, answered_on, approve) in [(10, 2, true), (11, 1, false), (12, 0, true)] {
        let call = post(
            &cluster,
            1,
            &alice,
            Some(&session),
            json!({ "jsonrpc": "2.0", "id": call_id, "method": "tools/call",
                    "params": { "name": "slow_sleep", "arguments": { "ms": 1 } } }),
        )
        .await;
        assert_eq!(call.status(), StatusCode::OK);
        let mut messages = Messages::of(call);
        let asked = messages.next().await;
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        let id = asked["id"].clone();

        // Not the session's caller: refused on any instance, and the call still waits.
        let bob = token("acme", "bob");
        let answer = json!({ "jsonrpc": "2.0", "id": id,
            "result": { "action": "accept", "content": { "approve": approve } } });
        let refused = post(&cluster, 2, &bob, Some(&session), answer.clone()).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);

        let answered = post(&cluster, answered_on, &alice, Some(&session), answer).await;
        assert_eq!(
            answered.status(),
            StatusCode::ACCEPTED,
            "answer {call_id} on instance {answered_on}"
        );
        let result = messages.next().await;
        assert_eq!(result["id"], call_id, "{result}");
        assert_eq!(result["result"]["isError"], !approve, "{result}");
    }
    assert_eq!(
        completed().await,
        before.map(|n| n + 2),
        "the two approved calls ran once each, the declined one not at all"
    );

    // An upstream's own elicitation, relayed during a call on instance 2, answered on 0.
    let call = post(
        &cluster,
        2,
        &alice,
        Some(&session),
        json!({ "jsonrpc": "2.0", "id": 20, "method": "tools/call", "params": {
            "name": "conf_test_elicitation", "arguments": { "message": "who?" } } }),
    )
    .await;
    assert_eq!(call.status(), StatusCode::OK);
    let mut messages = Messages::of(call);
    let asked = messages.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "who?", "{asked}");
    let answer = json!({ "jsonrpc": "2.0", "id": asked["id"], "result": { "action": "accept",
        "content": { "username": "alice-from-a", "email": "alice@example.test" } } });
    let answered = post(&cluster, 0, &alice, Some(&session), answer).await;
    assert_eq!(answered.status(), StatusCode::ACCEPTED);
    let result = messages.next().await;
    assert_eq!(result["id"], 20, "{result}");
    assert_eq!(result["result"]["isError"], false, "{result}");
    assert!(result.to_string().contains("alice-from-a"), "{result}");
    cluster.stop().await;
}
