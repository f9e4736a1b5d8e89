//! The service as `mcpgate serve` runs it, on two lanes: every lane sees the same MCP
//! sessions, whichever lane opened them, and serving stops with a session's stream open, or
//! after the grace with a call still running.

use std::time::Duration;

use serde_json::json;

use super::{
    open, post,
    support::{Endpoint, WAIT, http, in_session, sleep_stats_until, slow_server, without_body},
};

#[tokio::test]
async fn a_session_opened_on_one_lane_is_served_on_the_other() {
    let mut endpoint = Endpoint::start_on_lanes().await;
    let token = endpoint.token.clone();
    let lanes = endpoint.lane_bases.clone();
    assert_eq!(lanes.len(), 2);

    endpoint.base = lanes[0].clone();
    let session = open(&endpoint, &token, json!({})).await;

    // The other lane answers in that session: a call answered directly, and rmcp's own path.
    endpoint.base = lanes[1].clone();
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "demo_echo", "arguments": { "message": "across" } }
    });
    let (status, _, body) = post(&endpoint, &token, Some(&session), call).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert!(body.contains("across"), "{body}");
    let list = json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/list" });
    let (status, _, body) = post(&endpoint, &token, Some(&session), list.clone()).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert!(body.contains("demo_echo"), "{body}");

    // Ended on the second lane, it is gone on the first.
    let ended = without_body(&endpoint, &token, &session, reqwest::Method::DELETE).await;
    assert!(ended.status().is_success(), "{}", ended.status());
    endpoint.base = lanes[0].clone();
    let (status, _, body) = post(&endpoint, &token, Some(&session), list).await;
    assert_eq!(status, reqwest::StatusCode::NOT_FOUND, "{body}");
    endpoint.stop().await;
}

#[tokio::test]
async fn serving_on_lanes_stops_with_a_sessions_stream_open() {
    let mut endpoint = Endpoint::start_on_lanes().await;
    let token = endpoint.token.clone();
    endpoint.base = endpoint.lane_bases[1].clone();
    let session = open(&endpoint, &token, json!({})).await;
    let stream = without_body(&endpoint, &token, &session, reqwest::Method::GET).await;
    assert_eq!(stream.status(), reqwest::StatusCode::OK);
    endpoint.stop_serving().await.expect("served to the end");
    drop(stream);
    endpoint.stop().await;
}

#[tokio::test]
async fn serving_on_lanes_stops_after_the_grace_with_a_call_still_running() {
    let grace = Duration::from_secs(1);
    let mut endpoint = Endpoint::start_on_lanes_with(vec![slow_server()], grace).await;
    let token = endpoint.token.clone();
    endpoint.base = endpoint.lane_bases[1].clone();
    let session = open(&endpoint, &token, json!({})).await;
    let call = json!({
        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": { "name": "slow_sleep", "arguments": { "ms": 60_000 } }
    });
    let request = http()
        .post(endpoint.url())
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .json(&call);
    let request = in_session(request, &session).send();
    let calling = tokio::spawn(async move { request.await?.text().await });
    sleep_stats_until(&endpoint, |s| s["started"] == 1).await;

    // Serving ends after the grace (the call would take a minute), the call still running.
    endpoint.stop_serving().await.expect("served to the end");
    assert!(!calling.is_finished(), "the call is still in flight");
    // The lanes end with the gateway, and the call's connection with them: the caller is
    // not left waiting (whether it heard an error or the connection close).
    endpoint.stop().await;
    let _answer_or_error = tokio::time::timeout(WAIT, calling)
        .await
        .expect("the caller hears the end")
        .expect("the calling task does not panic");
}
