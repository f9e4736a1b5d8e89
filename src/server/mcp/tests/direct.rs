//! A session's `tools/call` that needs nothing of the client, answered on the request's own
//! task (JSON, or an event stream once progress comes); every other one goes through rmcp's
//! session; and a session used only by such calls stays open past its idle time.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{
    open, post, relay,
    support::{
        Endpoint, TestClient, WAIT, call, http, in_session, initialize, jwt_auth, jwt_for,
        sleep_stats_until, slow_server,
    },
};
use crate::store::AuditQuery;

/// `tools/call` of the demo's echo, with `meta` as its `_meta` if given.
fn echo(id: u64, message: &str, meta: Option<Value>) -> Value {
    let mut call = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": "demo_echo", "arguments": { "message": message } }
    });
    if let Some(meta) = meta {
        call["params"]["_meta"] = meta;
    }
    call
}

fn content_type(headers: &reqwest::header::HeaderMap) -> &str {
    headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_call_that_needs_nothing_of_the_client_is_answered_in_json() {
    let endpoint = Endpoint::start_with(jwt_auth()).await;
    let (alice, bob) = (jwt_for("alice"), jwt_for("bob"));
    let session = open(&endpoint, &alice, json!({})).await;

    let (status, headers, body) =
        post(&endpoint, &alice, Some(&session), echo(7, "hi", None)).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(content_type(&headers), "application/json", "{body}");
    let answer: Value = serde_json::from_str(&body).expect("one JSON-RPC message");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    // The session speaks 2025-06-18: nothing of 2026-07-28 in its answers.
    assert!(
        answer["result"].get("resultType").is_none(),
        "resultType is a 2026-07-28 field: {answer}"
    );
    let text = answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(text.contains("hi"), "{answer}");

    // Another caller cannot act in the session.
    let (status, _, as_bob) = post(&endpoint, &bob, Some(&session), echo(8, "hi", None)).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN, "{as_bob}");
    assert!(as_bob.contains("opened by another caller"), "{as_bob}");

    // And the same audit: the call is recorded as the session's.
    let records = endpoint
        .gateway
        .audit_store()
        .query(AuditQuery {
            tool: Some("demo.echo".into()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0].1;
    assert_eq!(
        (
            record.user.as_str(),
            record.session.as_str(),
            record.outcome.as_str()
        ),
        ("alice", session.as_str(), "ok")
    );
    endpoint.stop().await;
}

/// The JSON-RPC messages of an event stream, in order.
fn events(body: &str) -> Vec<Value> {
    body.split("\n\n")
        .filter_map(|event| {
            let data: String = event
                .lines()
                .filter_map(|line| line.strip_prefix("data:"))
                .map(str::trim_start)
                .collect();
            (!data.is_empty()).then(|| serde_json::from_str(&data).expect("a JSON event"))
        })
        .collect()
}

#[tokio::test]
async fn progress_turns_the_answer_into_an_event_stream() {
    progress_comes_before_the_answer(relay::endpoint(false).await).await;
}

/// The same from an upstream the gateway calls over its own HTTP link, which relays a call's
/// progress as it reads the call's stream.
#[tokio::test]
async fn progress_from_an_http_upstream_comes_before_the_answer() {
    let stop = CancellationToken::new();
    progress_comes_before_the_answer(relay::http_endpoint(&stop).await).await;
    stop.cancel();
}

/// Calls the conformance fixture's progress tool (server `conf`) in a session that cannot
/// be asked: an event stream of the three steps in order, then the answer; a call that
/// reports no progress, or reports it unasked, is answered in JSON.
async fn progress_comes_before_the_answer(endpoint: Endpoint) {
    let token = endpoint.token.clone();
    let session = open(&endpoint, &token, json!({})).await;

    let call = |id: u64, tool: &str| {
        json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": tool, "arguments": {}, "_meta": { "progressToken": "p1" } }
        })
    };
    let (status, headers, body) = post(
        &endpoint,
        &token,
        Some(&session),
        call(5, "conf_test_tool_with_progress"),
    )
    .await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(content_type(&headers), "text/event-stream", "{body}");
    // Not the session's stream, which starts with an event naming its retry interval.
    assert!(!body.contains("retry:"), "{body}");
    let events = events(&body);
    let (answer, progress) = events.split_last().expect("events");
    let steps: Vec<(&str, f64)> = progress
        .iter()
        .map(|p| {
            assert_eq!(p["method"], "notifications/progress", "{p}");
            let token = p["params"]["progressToken"].as_str().unwrap_or_default();
            (token, p["params"]["progress"].as_f64().unwrap_or(f64::NAN))
        })
        .collect();
    assert_eq!(steps, [("p1", 0.0), ("p1", 50.0), ("p1", 100.0)], "{body}");
    assert_eq!(answer["id"], 5, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    // A call that asks for progress and gets none is answered in JSON.
    let (_, headers, body) = post(
        &endpoint,
        &token,
        Some(&session),
        call(6, "conf_test_simple_text"),
    )
    .await;
    assert_eq!(content_type(&headers), "application/json", "{body}");
    let answer: Value = serde_json::from_str(&body).expect("one JSON-RPC message");
    assert_eq!(answer["id"], 6, "{answer}");

    // A call that reports progress but did not ask for it: its progress goes nowhere (it
    // has no token to name), and it is answered in JSON.
    let mut unasked = call(7, "conf_test_tool_with_progress");
    unasked["params"]
        .as_object_mut()
        .expect("params")
        .remove("_meta");
    let (status, headers, body) = post(&endpoint, &token, Some(&session), unasked).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(content_type(&headers), "application/json", "{body}");
    let answer: Value = serde_json::from_str(&body).expect("one JSON-RPC message");
    assert_eq!(answer["id"], 7, "{answer}");
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    endpoint.stop().await;
}

#[tokio::test]
async fn a_call_that_may_need_the_client_goes_through_the_session() {
    let endpoint = Endpoint::start().await;
    let token = endpoint.token.clone();

    // A client that can be asked (here, to confirm a write) is answered on an event stream.
    let asked = open(&endpoint, &token, json!({ "elicitation": {} })).await;
    let (status, headers, body) = post(&endpoint, &token, Some(&asked), echo(2, "a", None)).await;
    assert_eq!(status, reqwest::StatusCode::OK);
    assert_eq!(content_type(&headers), "text/event-stream", "{body}");
    assert!(body.contains("retry:"), "{body}");
    assert!(body.contains("\"id\":2"), "{body}");

    let plain = open(&endpoint, &token, json!({})).await;
    // A standard header that does not say what the body says is left to rmcp.
    let request = http()
        .post(endpoint.url())
        .bearer_auth(&token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-name", "demo_add")
        .json(&echo(4, "c", None));
    let response = in_session(request, &plain).send().await.expect("response");
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    assert_eq!(content_type(response.headers()), "text/event-stream");
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_used_only_by_direct_calls_stays_open() {
    let idle = Duration::from_secs(3);
    let endpoint = Endpoint::start_idling(idle).await;
    let token = endpoint.token.clone();
    let used = open(&endpoint, &token, json!({})).await;
    let unused = open(&endpoint, &token, json!({})).await;

    // Calls answered directly for more than twice the idle time.
    let started = Instant::now();
    let mut id = 10;
    while started.elapsed() < idle * 2 + idle / 3 {
        id += 1;
        let (status, headers, body) =
            post(&endpoint, &token, Some(&used), echo(id, "x", None)).await;
        assert_eq!(status, reqwest::StatusCode::OK, "{body}");
        assert_eq!(content_type(&headers), "application/json", "{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The unused session idled out; the used one is still open in rmcp's own path.
    let list = |id: u64| json!({ "jsonrpc": "2.0", "id": id, "method": "tools/list" });
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, _, _) = post(&endpoint, &token, Some(&unused), list(1)).await;
        if status == reqwest::StatusCode::NOT_FOUND {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the unused session never idled out"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, _, body) = post(&endpoint, &token, Some(&used), list(2)).await;
    assert_eq!(status, reqwest::StatusCode::OK, "{body}");
    assert!(body.contains("demo_echo"), "{body}");
    endpoint.stop().await;
}

/// A call the client cancels (`notifications/cancelled`) stops, whether it was answered on
/// the request's own task (a client that declares nothing) or through rmcp's session (one
/// that declares elicitation): the upstream is told, and the audit records it abandoned.
#[tokio::test]
async fn a_call_the_client_cancels_stops_upstream_and_is_audited() {
    use rmcp::model::{CallToolRequest, ClientRequest};
    use rmcp::service::PeerRequestOptions;

    for answers in [None, Some(true)] {
        let endpoint =
            Endpoint::start_servers(crate::config::AuthConfig::Dev, vec![slow_server()], None)
                .await;
        let client = endpoint
            .connect(TestClient::new(answers), initialize())
            .await;
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(
            "slow_sleep",
            json!({ "ms": 60_000 }),
        )));
        let handle = client
            .peer()
            .send_request_with_option(request, PeerRequestOptions::no_options())
            .await
            .expect("request sent");
        sleep_stats_until(&endpoint, |s| s["started"] == 1).await;

        handle
            .cancel(Some("stopped by the user".into()))
            .await
            .expect("cancellation sent");
        let stats =
            sleep_stats_until(&endpoint, |s| s["cancelled"] == 1 && s["in_flight"] == 0).await;
        assert_eq!(stats["completed"], 0, "{answers:?}: {stats}");
        let record = tokio::time::timeout(WAIT, async {
            loop {
                let records = endpoint
                    .gateway
                    .audit_store()
                    .query(AuditQuery {
                        tool: Some("slow.sleep".into()),
                        ..AuditQuery::default()
                    })
                    .await
                    .expect("audit query");
                if let Some((_, record)) = records.into_iter().next() {
                    return record;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the call's record within the bound");
        assert_eq!(
            (record.outcome.as_str(), record.decision.as_str()),
            ("abandoned", "allowed"),
            "{answers:?}: {record:?}"
        );
        let _ = client.cancel().await;
        endpoint.stop().await;
    }
}

/// Only the session's owner cancels a call answered here: another caller who learned the
/// session id is refused, and the call runs on.
#[tokio::test]
async fn only_the_sessions_owner_cancels_its_call() {
    let endpoint = Endpoint::start_servers(jwt_auth(), vec![slow_server()], None).await;
    let (alice, bob) = (jwt_for("alice"), jwt_for("bob"));
    let session = open(&endpoint, &alice, json!({})).await;
    let sleeping = {
        let (endpoint_url, alice, session) = (endpoint.url(), alice.clone(), session.clone());
        tokio::spawn(async move {
            let call = json!({
                "jsonrpc": "2.0", "id": 5, "method": "tools/call",
                "params": { "name": "slow_sleep", "arguments": { "ms": 60_000 } }
            });
            let request = http()
                .post(endpoint_url)
                .bearer_auth(alice)
                .header("accept", "application/json, text/event-stream")
                .json(&call);
            let response = in_session(request, &session)
                .send()
                .await
                .expect("response");
            response.text().await.expect("a body")
        })
    };
    sleep_stats_until(&endpoint, |s| s["started"] == 1).await;
    let cancel = json!({
        "jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": { "requestId": 5, "reason": "not yours" }
    });

    let (status, _, _) = post(&endpoint, &bob, Some(&session), cancel.clone()).await;
    assert_eq!(status, reqwest::StatusCode::FORBIDDEN);
    let stats = sleep_stats_until(&endpoint, |_| true).await;
    assert_eq!(
        (&stats["in_flight"], &stats["cancelled"]),
        (&json!(1), &json!(0)),
        "another caller's cancellation stopped the call: {stats}"
    );

    let (status, _, _) = post(&endpoint, &alice, Some(&session), cancel).await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    sleep_stats_until(&endpoint, |s| s["cancelled"] == 1 && s["in_flight"] == 0).await;
    let answer = tokio::time::timeout(WAIT, sleeping)
        .await
        .expect("the call answers once cancelled")
        .expect("task");
    assert!(answer.contains("-32800"), "{answer}");
    endpoint.stop().await;
}
