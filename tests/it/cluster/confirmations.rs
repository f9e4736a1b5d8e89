//! Confirmations across instances: asked on one, approved on another, consumed on a third,
//! exactly once however many redemptions race, and still consumed after Redis forgets.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Cluster, token};

/// Asks on instance `ask` for `slow.sleep`, approves on `approve`; the single-use token.
async fn approved(cluster: &Cluster, user: &str, ask: usize, approve: usize) -> String {
    let alice = token("acme", user);
    let (status, asked) = cluster
        .call(ask, &alice, "slow.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{asked}");
    let id = asked["confirmationId"].as_str().expect("confirmation id");
    let (status, listed) = cluster
        .get(approve, "/api/v1/mcp/confirmations", &alice)
        .await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    assert!(
        listed.to_string().contains(id),
        "another instance lists the pending confirmation: {listed}"
    );
    let (status, approval) = cluster
        .post(
            approve,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    approval["confirmationToken"]
        .as_str()
        .expect("a token")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asked_on_one_approved_on_another_consumed_once_on_any() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let grant = approved(&cluster, "alice", 0, 1).await;

    // 100 redemptions at once, spread over the three instances: one runs.
    let redemptions = (0..100).map(|i| {
        let (cluster, alice, grant) = (&cluster, &alice, &grant);
        async move {
            cluster
                .call(i % 3, alice, "slow.sleep", json!({ "ms": 1 }), Some(grant))
                .await
        }
    });
    let outcomes = futures::future::join_all(redemptions).await;
    let ran: Vec<&(StatusCode, Value)> = outcomes
        .iter()
        .filter(|(status, _)| *status == StatusCode::OK)
        .collect();
    assert_eq!(ran.len(), 1, "exactly one redemption runs: {outcomes:?}");
    for (status, body) in &outcomes {
        if *status != StatusCode::OK {
            assert_eq!(*status, StatusCode::CONFLICT, "{body}");
        }
    }
    let stats = cluster.stats(&alice).await;
    assert_eq!(stats["started"], 1, "the upstream ran it once: {stats}");

    // A replay, anywhere, is refused.
    for i in 0..3 {
        let (status, body) = cluster
            .call(i, &alice, "slow.sleep", json!({ "ms": 1 }), Some(&grant))
            .await;
        assert_eq!(status, StatusCode::CONFLICT, "instance {i}: {body}");
    }
    assert_eq!(cluster.stats(&alice).await["started"], 1);
    cluster.assert_each_call_audited_once().await;
    cluster.stop().await;
}

/// Redis restored from a snapshot taken before the token was used holds the token again;
/// PostgreSQL's record of its use still refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumed_token_stays_consumed_when_redis_forgets() {
    let mut cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let grant = approved(&cluster, "alice", 0, 2).await;
    let saved: String = cluster.redis.command(&["SAVE"]).await;
    assert_eq!(saved, "OK");
    let (status, body) = cluster
        .call(1, &alice, "slow.sleep", json!({ "ms": 1 }), Some(&grant))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // Back to the snapshot: the token is in Redis again.
    cluster.redis.kill().await;
    cluster.redis.run().await;
    let keys: Vec<String> = cluster.redis.command(&["KEYS", "mcpgate:token:*"]).await;
    assert_eq!(keys.len(), 1, "the snapshot holds the token again");
    super::wait_readyz(&cluster, 2, StatusCode::OK).await;
    let (status, body) = cluster
        .call(2, &alice, "slow.sleep", json!({ "ms": 1 }), Some(&grant))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "still consumed: {body}");

    // And after a FLUSHALL nothing of it is left to use.
    let flushed: String = cluster.redis.command(&["FLUSHALL"]).await;
    assert_eq!(flushed, "OK");
    let (status, body) = cluster
        .call(0, &alice, "slow.sleep", json!({ "ms": 1 }), Some(&grant))
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(cluster.stats(&alice).await["started"], 1);
    cluster.stop().await;
}

/// Tenant B sees nothing of tenant A on any instance: not its servers, not its
/// confirmations, not its approvals, not its audit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_stay_apart_across_instances() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let mallory = token("globex", "alice");
    let (status, asked) = cluster
        .call(0, &alice, "slow.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{asked}");
    let id = asked["confirmationId"].as_str().expect("id").to_owned();
    for i in 0..3 {
        let (status, listed) = cluster.get(i, "/api/v1/mcp/confirmations", &mallory).await;
        assert_eq!(status, StatusCode::OK);
        assert!(!listed.to_string().contains(&id), "{listed}");
        let (status, audit) = cluster.get(i, "/api/v1/audit", &mallory).await;
        assert!(
            !audit.to_string().contains("acme"),
            "instance {i} ({status}): {audit}"
        );
    }
    let (status, body) = cluster
        .post(
            1,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            &mallory,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    cluster.stop().await;
}
