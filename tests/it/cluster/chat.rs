//! A chat turn runs where its stream is; its approval and its cancel may reach any instance.

use futures::StreamExt as _;
use reqwest::StatusCode;
use serde_json::json;

use super::{Cluster, token};
use crate::{
    chat_api::Events,
    scripted_llm::{Reply, ScriptedLlm},
};

/// Starts a turn on instance `i` whose model calls the write `slow.sleep`; its events up to
/// `approval_required`, and the call id.
async fn turn_waiting(
    cluster: &Cluster,
    i: usize,
    bearer: &str,
    session: &str,
) -> (Events, String) {
    let response = cluster
        .client
        .post(format!("{}/api/v1/chat", cluster.base(i)))
        .bearer_auth(bearer)
        .json(&json!({
            "session": session,
            "messages": [{ "role": "user", "content": "sleep a little" }],
        }))
        .send()
        .await
        .expect("turn started");
    assert_eq!(response.status(), StatusCode::OK);
    let mut events = Events::new(response.bytes_stream().boxed());
    let seen = events.until("approval_required").await;
    let call_id = seen
        .last()
        .and_then(|(_, data)| data["callId"].as_str())
        .expect("a call id")
        .to_owned();
    (events, call_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_and_cancels_reach_the_instance_running_the_turn() {
    let llm = ScriptedLlm::start(vec![
        Reply::tool_calls(&[("slow_sleep", json!({ "ms": 1 }))]),
        Reply::text("slept"),
        Reply::tool_calls(&[("slow_sleep", json!({ "ms": 1 }))]),
    ])
    .await;
    let extra = format!(
        "\n[llm]\nbase_url = \"{}\"\nmodel = \"scripted\"\n",
        llm.base_url()
    );
    let cluster = Cluster::start_with(&extra, &[]).await;
    let alice = token("acme", "alice");

    // Running on a, approved on b.
    let (mut events, call_id) = turn_waiting(&cluster, 0, &alice, "chat-one").await;
    let (status, body) = cluster
        .post(
            1,
            &format!("/api/v1/chat/chat-one/approvals/{call_id}"),
            &alice,
            json!({ "decision": "approve" }),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let rest = events.rest().await;
    let names: Vec<&str> = rest.iter().map(|(name, _)| name.as_str()).collect();
    assert!(names.contains(&"tool_result"), "{names:?}");
    assert!(names.contains(&"final"), "{names:?}");

    // Another user of the tenant cannot decide it from anywhere.
    let (mut events, call_id) = turn_waiting(&cluster, 2, &alice, "chat-two").await;
    let bob = token("acme", "bob");
    let (status, body) = cluster
        .post(
            0,
            &format!("/api/v1/chat/chat-two/approvals/{call_id}"),
            &bob,
            json!({ "decision": "approve" }),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");

    // Running on c, cancelled on a.
    let (status, body) = cluster
        .post(0, "/api/v1/chat/chat-two/cancel", &alice, json!({}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["cancelled"], 1, "{body}");
    let rest = events.rest().await;
    assert!(
        !rest.iter().any(|(name, _)| name == "tool_result"),
        "the cancelled turn ran nothing: {rest:?}"
    );
    cluster.stop().await;
}
