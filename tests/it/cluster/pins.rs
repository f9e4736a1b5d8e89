//! Pins live in PostgreSQL: a tool pinned on one instance is pinned on all, and a definition
//! that changes afterwards is quarantined on all.

use reqwest::StatusCode;
use serde_json::json;

use super::{Cluster, token, token_with_roles};
use crate::support::wait_for_async;

/// Pins `tool`'s live definition on instance `i`, where nothing was pinned; its fingerprint.
async fn pin(cluster: &Cluster, i: usize, tool: &str, operator: &str) -> String {
    let path = format!("/api/v1/mcp/pins/{tool}");
    let (status, review) = cluster.get(i, &path, operator).await;
    assert_eq!(status, StatusCode::OK, "{review}");
    assert!(review["pinned"].is_null(), "nothing pinned yet: {review}");
    let fingerprint = review["live"]["fingerprint"]
        .as_str()
        .expect("fingerprint")
        .to_owned();
    let (status, body) = cluster
        .post(i, &path, operator, json!({ "fingerprint": fingerprint }))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    fingerprint
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pin_accepted_on_one_instance_holds_on_all() {
    let cluster = Cluster::start().await;
    let operator = token_with_roles("ops", "root", &["operator"]);
    let alice = token("acme", "alice");
    let fingerprint = pin(&cluster, 0, "changing.alpha", &operator).await;
    // The tool that changes the others, pinned on another instance (both pins are kept).
    pin(&cluster, 1, "changing.mutate", &operator).await;
    for i in 1..3 {
        wait_for_async("the pin to reach every instance", || async {
            let (_, review) = cluster
                .get(i, "/api/v1/mcp/pins/changing.alpha", &operator)
                .await;
            (review["pinned"]["fingerprint"] == fingerprint.as_str()).then_some(())
        })
        .await;
    }
    let pool = cluster.postgres.pool().await;
    let stored: String = sqlx::query_scalar("SELECT body FROM mcpgate_pins WHERE id = 1")
        .fetch_one(&pool)
        .await
        .expect("the pins row");
    pool.close().await;
    assert!(stored.contains(&fingerprint), "{stored}");

    // The definition changes quietly; a refresh on c makes every instance look again, and
    // each quarantines it against the shared pin.
    let (status, body) = cluster
        .call(
            1,
            &alice,
            "changing.mutate",
            json!({ "what": "description", "quiet": true }),
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = cluster
        .post(
            2,
            "/api/v1/mcp/servers/changing/refresh",
            &operator,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for i in 0..3 {
        wait_for_async("the changed tool to be quarantined everywhere", || async {
            let (status, _) = cluster
                .call(i, &alice, "changing.alpha", json!({}), None)
                .await;
            (status == StatusCode::LOCKED).then_some(())
        })
        .await;
    }
    cluster.stop().await;
}

/// After Redis restarts (forgetting every subscription), each instance subscribes again by
/// itself, and a pin accepted on one reaches the others as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pins_reach_every_instance_after_redis_restarts() {
    let mut cluster = Cluster::start().await;
    let operator = token_with_roles("ops", "root", &["operator"]);
    cluster.redis.kill().await;
    cluster.redis.run().await;
    wait_for_async("every instance to subscribe again", || async {
        let answer: Vec<redis::Value> = cluster
            .redis
            .command(&["PUBSUB", "NUMSUB", "mcpgate:events:all"])
            .await;
        (answer.get(1) == Some(&redis::Value::Int(3))).then_some(())
    })
    .await;
    let fingerprint = pin(&cluster, 2, "changing.alpha", &operator).await;
    for i in 0..2 {
        wait_for_async("the pin to reach the instance", || async {
            let (_, review) = cluster
                .get(i, "/api/v1/mcp/pins/changing.alpha", &operator)
                .await;
            (review["pinned"]["fingerprint"] == fingerprint.as_str()).then_some(())
        })
        .await;
    }
    cluster.stop().await;
}
