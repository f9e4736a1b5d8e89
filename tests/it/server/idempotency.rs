//! `Idempotency-Key` on the REST call route: a retry gets the first answer and the upstream is
//! called once (counted by the `slow` fixture), another request under the key is refused, a
//! concurrent duplicate is told to wait, a confirmation asked is not kept (so a confirmed write
//! retried runs once), a malformed key is refused, and a kept answer expires.

use std::{sync::Arc, time::Duration};

use mcpgate::config::{AuthConfig, Config};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Service, json_of};
use crate::support::{self, fixture, in_process};

fn config(window: Duration) -> Config {
    let mut slow = fixture("slow", "slow");
    slow.read_only_tools = ["sleep", "sleep_stats", "echo"].map(String::from).to_vec();
    let mut demo = in_process("demo", mcpgate::fixtures::demo::DemoServer::new());
    demo.read_only_tools = ["echo", "list_notes"].map(String::from).to_vec();
    let mut config = support::config(vec![slow, demo]);
    config.call_limits.idempotency_window = window;
    config
}

impl Service {
    async fn call_keyed(&self, key: Option<&str>, body: &Value) -> (StatusCode, Value, bool) {
        let mut request = self.post("/api/v1/mcp/tools/call", body);
        if let Some(key) = key {
            request = request.header("Idempotency-Key", key);
        }
        let response = request.send().await.expect("the call answers");
        let replayed = response
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let (status, body) = json_of(response).await;
        (status, body, replayed)
    }

    async fn sleeps_started(&self) -> u64 {
        let (_, body, _) = self
            .call_keyed(None, &json!({ "tool": "slow.sleep_stats" }))
            .await;
        body["data"]["structuredContent"]["started"]
            .as_u64()
            .or_else(|| {
                let text = body["data"]["content"][0]["text"].as_str()?;
                serde_json::from_str::<Value>(text).ok()?["started"].as_u64()
            })
            .unwrap_or_else(|| panic!("sleep_stats answers: {body}"))
    }
}

#[tokio::test]
async fn a_retry_gets_the_first_answer_and_the_upstream_is_called_once() {
    let service =
        Arc::new(Service::start(config(Duration::from_secs(3600)), AuthConfig::Dev).await);
    let sleep = |ms: u64| json!({ "tool": "slow.sleep", "arguments": { "ms": ms } });

    let (status, first, replayed) = service.call_keyed(Some("\"k-1\""), &sleep(10)).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{first}");
    let (status, again, replayed) = service.call_keyed(Some("\"k-1\""), &sleep(10)).await;
    assert_eq!((status, replayed), (StatusCode::OK, true), "{again}");
    assert_eq!(again, first, "the first answer, as it was");
    assert_eq!(service.sleeps_started().await, 1, "one call upstream");

    // The same key for another request: refused, nothing runs.
    let (status, refused, _) = service.call_keyed(Some("\"k-1\""), &sleep(11)).await;
    assert_eq!(
        (status, &refused["code"]),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!("idempotency_key_reused")
        )
    );
    // Without a key, or with a new one, each request runs.
    service.call_keyed(None, &sleep(10)).await;
    service.call_keyed(Some("k-2"), &sleep(10)).await;
    assert_eq!(service.sleeps_started().await, 3);

    // A duplicate while the first runs waits for it (409), then gets its answer.
    let long = sleep(1500);
    let first = {
        let service = service.clone();
        let long = long.clone();
        tokio::spawn(async move { service.call_keyed(Some("k-3"), &long).await })
    };
    support::wait_for_async("the long sleep to start", || {
        let service = service.clone();
        async move { (service.sleeps_started().await == 4).then_some(()) }
    })
    .await;
    let (status, busy, _) = service.call_keyed(Some("k-3"), &long).await;
    assert_eq!(
        (status, &busy["code"]),
        (StatusCode::CONFLICT, &json!("idempotency_key_in_use")),
        "{busy}"
    );
    let (status, ran, _) = first.await.expect("the first call ends");
    assert_eq!(status, StatusCode::OK, "{ran}");
    let (status, kept, replayed) = service.call_keyed(Some("k-3"), &long).await;
    assert_eq!((status, replayed), (StatusCode::OK, true));
    assert_eq!(kept, ran);
    assert_eq!(service.sleeps_started().await, 4, "the duplicate never ran");

    // A malformed key is refused before anything runs.
    let (status, bad, _) = service.call_keyed(Some("\"open"), &sleep(10)).await;
    assert_eq!(
        (status, &bad["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_idempotency_key"))
    );
    assert_eq!(service.sleeps_started().await, 4);
    Arc::into_inner(service).expect("one owner").stop().await;
}

/// A write asks for a confirmation: that answer is not kept, so the confirmed retry under the
/// same key runs, once, and its retries get its answer.
#[tokio::test]
async fn a_confirmed_write_retried_with_its_key_runs_once() {
    let service = Service::start(config(Duration::from_secs(3600)), AuthConfig::Dev).await;
    let note = json!({ "tool": "demo.add_note", "arguments": { "title": "once", "body": "b" } });
    let (status, held, _) = service.call_keyed(Some("w-1"), &note).await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{held}");
    let id = held["confirmationId"].as_str().expect("an id");
    let (status, approval) = json_of(
        service
            .post(
                &format!("/api/v1/mcp/confirmations/{id}/approve"),
                &json!({}),
            )
            .send()
            .await
            .expect("approve"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let mut confirmed = note.clone();
    confirmed["confirmationToken"] = approval["confirmationToken"].clone();
    let (status, done, replayed) = service.call_keyed(Some("w-1"), &confirmed).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{done}");
    // Its retry (the token is spent) gets the same answer, not `confirmation_invalid`.
    let (status, again, replayed) = service.call_keyed(Some("w-1"), &confirmed).await;
    assert_eq!((status, replayed), (StatusCode::OK, true), "{again}");
    assert_eq!(again, done);
    let (_, notes, _) = service
        .call_keyed(None, &json!({ "tool": "demo.list_notes" }))
        .await;
    assert_eq!(
        notes["data"]["structuredContent"]["notes"]
            .as_array()
            .map(Vec::len),
        Some(1),
        "the note was added once: {notes}"
    );
    service.stop().await;
}

/// A kept answer lasts the window; after it the key is new again. A zero window ignores the
/// header.
#[tokio::test]
async fn a_kept_answer_expires_with_its_window() {
    let service = Service::start(config(Duration::from_secs(1)), AuthConfig::Dev).await;
    let sleep = json!({ "tool": "slow.sleep", "arguments": { "ms": 1 } });
    service.call_keyed(Some("e-1"), &sleep).await;
    let (_, _, replayed) = service.call_keyed(Some("e-1"), &sleep).await;
    assert!(replayed);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, _, replayed) = service.call_keyed(Some("e-1"), &sleep).await;
    assert_eq!(
        (status, replayed),
        (StatusCode::OK, false),
        "expired: it ran again"
    );
    assert_eq!(service.sleeps_started().await, 2);
    service.stop().await;

    let off = Service::start(config(Duration::ZERO), AuthConfig::Dev).await;
    off.call_keyed(Some("z-1"), &sleep).await;
    let (_, _, replayed) = off.call_keyed(Some("z-1"), &sleep).await;
    assert!(!replayed, "a zero window ignores the header");
    assert_eq!(off.sleeps_started().await, 2);
    off.stop().await;
}
