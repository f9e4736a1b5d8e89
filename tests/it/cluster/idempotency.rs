//! `Idempotency-Key` across instances (kept in PostgreSQL): a retry that reaches another
//! instance gets the first answer and the upstream runs once; the key reused for another
//! request is refused on any instance; duplicates racing on all three run once.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Cluster, token};

/// `POST /api/v1/mcp/tools/call` on instance `i` with `key`: status, body, replayed.
async fn call_keyed(
    cluster: &Cluster,
    i: usize,
    user: &str,
    key: &str,
    body: &Value,
) -> (StatusCode, Value, bool) {
    let response = cluster
        .client
        .post(format!("{}/api/v1/mcp/tools/call", cluster.base(i)))
        .bearer_auth(user)
        .header("Idempotency-Key", key)
        .json(body)
        .send()
        .await
        .expect("the call answers");
    let replayed = response
        .headers()
        .get("idempotent-replayed")
        .is_some_and(|v| v == "true");
    let status = response.status();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body, replayed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_on_another_instance_gets_the_first_answer() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let sleep = |ms: u64| json!({ "tool": "reads.sleep", "arguments": { "ms": ms } });
    let started = |stats: Value| stats["started"].as_u64().expect("started");
    let before = started(cluster.stats(&alice).await);

    let (status, first, replayed) = call_keyed(&cluster, 0, &alice, "k-1", &sleep(5)).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{first}");
    for i in [1, 2] {
        let (status, again, replayed) = call_keyed(&cluster, i, &alice, "k-1", &sleep(5)).await;
        assert_eq!((status, replayed), (StatusCode::OK, true), "{again}");
        assert_eq!(again, first, "instance {i} answers as the first did");
    }
    assert_eq!(started(cluster.stats(&alice).await), before + 1);

    // Another request under the key, on another instance: refused, nothing runs.
    let (status, refused, _) = call_keyed(&cluster, 2, &alice, "k-1", &sleep(6)).await;
    assert_eq!(
        (status, &refused["code"]),
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            &json!("idempotency_key_reused")
        )
    );
    // Another user's key of the same text is theirs alone.
    let bob = token("acme", "bob");
    let (status, _, replayed) = call_keyed(&cluster, 1, &bob, "k-1", &sleep(5)).await;
    assert_eq!((status, replayed), (StatusCode::OK, false));
    assert_eq!(started(cluster.stats(&alice).await), before + 2);

    // 30 duplicates racing over the three instances: the upstream runs one; every other
    // is told to wait (409) or, once the first is done, replays its answer.
    let racing = (0..30).map(|i| {
        let (cluster, alice) = (&cluster, &alice);
        async move { call_keyed(cluster, i % 3, alice, "k-2", &sleep(300)).await }
    });
    let outcomes = futures::future::join_all(racing).await;
    let ran = outcomes
        .iter()
        .filter(|(status, _, replayed)| *status == StatusCode::OK && !replayed)
        .count();
    assert_eq!(ran, 1, "{outcomes:?}");
    for (status, body, replayed) in &outcomes {
        assert!(
            *status == StatusCode::OK
                || (*status == StatusCode::CONFLICT
                    && body["code"] == "idempotency_key_in_use"
                    && !replayed),
            "{status} {body}"
        );
    }
    assert_eq!(started(cluster.stats(&alice).await), before + 3);
    cluster.stop().await;
}

/// A write held for a confirmation on one instance, confirmed on a second under the same key,
/// retried on the third: it ran once and the retry gets its answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_write_retried_on_another_instance_runs_once() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let write = json!({ "tool": "slow.sleep", "arguments": { "ms": 1 } });
    let before = cluster.stats(&alice).await["started"]
        .as_u64()
        .expect("started");
    let (status, held, _) = call_keyed(&cluster, 0, &alice, "w-1", &write).await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{held}");
    let id = held["confirmationId"].as_str().expect("an id");
    let (status, approval) = cluster
        .post(
            1,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    let mut confirmed = write.clone();
    confirmed["confirmationToken"] = approval["confirmationToken"].clone();
    let (status, done, replayed) = call_keyed(&cluster, 1, &alice, "w-1", &confirmed).await;
    assert_eq!((status, replayed), (StatusCode::OK, false), "{done}");
    let (status, again, replayed) = call_keyed(&cluster, 2, &alice, "w-1", &confirmed).await;
    assert_eq!((status, replayed), (StatusCode::OK, true), "{again}");
    assert_eq!(again, done);
    assert_eq!(
        cluster.stats(&alice).await["started"].as_u64(),
        Some(before + 1),
        "the write ran once"
    );
    cluster.stop().await;
}
