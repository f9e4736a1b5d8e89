//! Rate and concurrency limits hold across the instances, whatever an instance's clock says,
//! and a killed instance's permits free themselves within the lease lifetime.

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::{Cluster, token};
use crate::support::wait_for_async;

/// A per-user cap of 2 holds over the three instances: never 3 in flight at the upstream.
/// Then the instance holding both permits is killed, and they come free by their deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_cap_holds_across_instances_and_outlives_no_crash() {
    let cluster = Cluster::start_with(
        "\n[limits]\nuser_concurrency = 2\nserver_concurrency = 64\n",
        &[],
    )
    .await;
    let alice = token("acme", "alice");
    let calls = (0..9).map(|i| {
        let (cluster, alice) = (&cluster, &alice);
        async move {
            cluster
                .call(i % 3, alice, "reads.sleep", json!({ "ms": 3000 }), None)
                .await
        }
    });
    let outcomes = futures::future::join_all(calls).await;
    let ran = outcomes
        .iter()
        .filter(|(s, _)| *s == StatusCode::OK)
        .count();
    let refused: Vec<_> = outcomes
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .collect();
    assert!((1..=2).contains(&ran), "{outcomes:?}");
    assert_eq!(ran + refused.len(), 9, "{outcomes:?}");
    for (_, body) in &refused {
        assert_eq!(body["code"], "limit_exceeded", "{body}");
    }
    let observer = token("acme", "observer");
    let stats = cluster.stats(&observer).await;
    assert!(
        stats["peak_in_flight"].as_u64().expect("peak") <= 2,
        "never more than the cap at the upstream: {stats}"
    );

    // Instance c takes both permits and dies holding them.
    let mut cluster = cluster;
    let c = cluster.instances.remove(2);
    let base = c.base.clone();
    for _ in 0..2 {
        let (client, alice, base) = (cluster.client.clone(), alice.clone(), base.clone());
        tokio::spawn(async move {
            let _ = client
                .post(format!("{base}/api/v1/mcp/tools/call"))
                .bearer_auth(alice)
                .json(&json!({ "tool": "reads.sleep", "arguments": { "ms": 20000 } }))
                .send()
                .await;
        });
    }
    wait_for_async("both long calls to run", || async {
        let stats = cluster.stats(&observer).await;
        (stats["in_flight"] == 2).then_some(())
    })
    .await;
    let (status, body) = cluster
        .call(0, &alice, "reads.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "c holds both: {body}"
    );
    c.kill().await;
    // Its leases end by their deadlines: at most the lease lifetime (3 s) from now.
    let (secs, micros): (u64, u64) = {
        let time: Vec<String> = cluster.redis.command(&["TIME"]).await;
        (
            time[0].parse().expect("secs"),
            time[1].parse().expect("micros"),
        )
    };
    let now_ms = secs * 1000 + micros / 1000;
    let keys: Vec<String> = cluster.redis.command(&["KEYS", "mcpgate:leases:*"]).await;
    for key in &keys {
        let scores: Vec<String> = cluster
            .redis
            .command(&["ZRANGE", key, "0", "-1", "WITHSCORES"])
            .await;
        for deadline in scores.iter().skip(1).step_by(2) {
            let deadline: f64 = deadline.parse().expect("score");
            assert!(
                deadline <= (now_ms + 3000) as f64,
                "a lease outlives its lifetime: {deadline} vs now {now_ms}"
            );
        }
    }
    wait_for_async("the dead instance's permits to free themselves", || async {
        let (status, _) = cluster
            .call(1, &alice, "reads.sleep", json!({ "ms": 1 }), None)
            .await;
        if status != StatusCode::OK {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (status == StatusCode::OK).then_some(())
    })
    .await;
    cluster.stop().await;
}

/// A per-user rate holds across the instances, one of which has its clock an hour ahead; a
/// confirmation asked there is approved and redeemed elsewhere all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_across_instances_whatever_their_clocks() {
    let skewed: &[(&str, &str)] = &[("MCPGATE_TESTKIT_CLOCK_OFFSET_SECS", "3600")];
    let cluster = Cluster::start_with(
        "\n[limits]\nuser_calls_per_minute = 3\n",
        &[&[], skewed, &[]],
    )
    .await;
    let bob = token("acme", "bob");
    for i in 0..3 {
        let (status, body) = cluster
            .call(i, &bob, "reads.sleep", json!({ "ms": 1 }), None)
            .await;
        assert_eq!(status, StatusCode::OK, "call {i}: {body}");
    }
    for i in 0..3 {
        let (status, body) = cluster
            .call(i, &bob, "reads.sleep", json!({ "ms": 1 }), None)
            .await;
        assert_eq!(
            status,
            StatusCode::TOO_MANY_REQUESTS,
            "instance {i}: {body}"
        );
    }

    // Asked on the instance an hour ahead, approved and used on the others; then asked and
    // approved elsewhere, used on it.
    let carol = token("acme", "carol");
    let asked = ask_approve_use(&cluster, &carol, (1, 0, 2), 1).await;
    // The instance's clock is an hour ahead indeed: it says so in what it answers.
    let expires = asked["expiresAt"].as_str().expect("expiresAt");
    let expires = mcpgate::store::parse_instant(expires).expect("RFC 3339");
    let ahead = expires
        .duration_since(std::time::SystemTime::now())
        .expect("in the future");
    assert!(ahead > std::time::Duration::from_secs(3000), "{ahead:?}");
    ask_approve_use(&cluster, &carol, (2, 0, 1), 2).await;
    cluster.stop().await;
}

/// A confirmation of `slow.sleep` asked on `on.0`, approved on `on.1`, used on `on.2`; what
/// asking answered.
async fn ask_approve_use(
    cluster: &Cluster,
    bearer: &str,
    on: (usize, usize, usize),
    ms: u64,
) -> serde_json::Value {
    let (status, asked) = cluster
        .call(on.0, bearer, "slow.sleep", json!({ "ms": ms }), None)
        .await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{asked}");
    let id = asked["confirmationId"].as_str().expect("id");
    let (status, approval) = cluster
        .post(
            on.1,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            bearer,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    let grant = approval["confirmationToken"].as_str().expect("token");
    let (status, body) = cluster
        .call(on.2, bearer, "slow.sleep", json!({ "ms": ms }), Some(grant))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    asked
}

/// A call that runs longer than the lease lifetime (3 s here) keeps its permit: its
/// instance renews the lease meanwhile, so the cap still holds after the lifetime passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_is_renewed_while_its_call_runs() {
    let cluster = Cluster::start_with("\n[limits]\nuser_concurrency = 1\n", &[]).await;
    let dave = token("acme", "dave");
    let observer = token("acme", "observer");
    let long = {
        let (client, dave, base) = (
            cluster.client.clone(),
            dave.clone(),
            cluster.base(0).to_owned(),
        );
        tokio::spawn(async move {
            client
                .post(format!("{base}/api/v1/mcp/tools/call"))
                .bearer_auth(dave)
                .json(&json!({ "tool": "reads.sleep", "arguments": { "ms": 6000 } }))
                .send()
                .await
                .map(|r| r.status())
        })
    };
    wait_for_async("the long call to run", || async {
        (cluster.stats(&observer).await["in_flight"] == 1).then_some(())
    })
    .await;
    // Past the lease's lifetime (3 s), with the call still running.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    assert_eq!(
        cluster.stats(&observer).await["in_flight"],
        1,
        "still running"
    );
    let (status, body) = cluster
        .call(1, &dave, "reads.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(
        status,
        StatusCode::TOO_MANY_REQUESTS,
        "the renewed lease holds: {body}"
    );
    let status = long.await.expect("joined").expect("answered");
    assert_eq!(status, StatusCode::OK);
    cluster.stop().await;
}
