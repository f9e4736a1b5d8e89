//! Call limits through the gate: per-user concurrency (queued, or refused at once) and the
//! per-user call rate.

use std::time::{Duration, Instant};

use mcpgate::{gateway::GatewayError, store::AuditQuery};
use serde_json::json;
use tokio::task::JoinSet;

use super::{caller, demo, sleep_stats, slow};
use crate::support::{WAIT, config, gateway};

/// Calls one user fires at once, three times the cap below.
const CALLS: usize = 6;
/// Per-user cap on calls in flight on one server.
const CAP: u32 = 2;

/// Spawns [`CALLS`] sleeps of `ms` as `alice`; they finish in any order.
fn fire_sleeps(gw: &mcpgate::gateway::Gateway, ms: u64) -> JoinSet<Result<String, GatewayError>> {
    let mut calls = JoinSet::new();
    for _ in 0..CALLS {
        let (gw, alice) = (gw.clone(), caller("alice").next_request());
        calls.spawn(async move {
            gw.call_tool(&alice, "slow.sleep", json!({ "ms": ms }), None)
                .await
                .map(|out| out.text())
        });
    }
    calls
}

#[tokio::test]
async fn calls_over_the_user_cap_wait_their_turn() {
    let mut cfg = config(vec![slow()]);
    cfg.call_limits.user_concurrency = CAP;
    cfg.call_limits.concurrency_wait = WAIT;
    let gw = gateway(cfg).await;
    let mut calls = fire_sleeps(&gw, 300);

    // Bob has his own permits: his polls run while alice is at her cap.
    let bob = caller("bob");
    let start = Instant::now();
    let mut peak = 0;
    loop {
        let stats = sleep_stats(&gw, &bob).await;
        assert!(stats.in_flight <= u64::from(CAP), "over the cap: {stats:?}");
        peak = peak.max(stats.in_flight);
        if stats.completed == CALLS as u64 {
            assert_eq!(stats.started, CALLS as u64, "{stats:?}");
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "the sleeps did not finish: {stats:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The cap was used, not just respected: two ran side by side while bob's call passed.
    assert_eq!(peak, u64::from(CAP));
    while let Some(joined) = calls.join_next().await {
        let text = joined.expect("no panic").expect("every queued call runs");
        assert_eq!(text, "slept 300");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn without_a_wait_calls_over_the_cap_fail_at_once_and_others_pass() {
    let mut cfg = config(vec![slow()]);
    cfg.call_limits.user_concurrency = CAP;
    cfg.call_limits.concurrency_wait = Duration::ZERO;
    let gw = gateway(cfg).await;
    // Long enough that the two admitted sleeps are surely still running below.
    let mut calls = fire_sleeps(&gw, 3000);

    // The refusals come back first, while the admitted calls still run.
    for _ in 0..CALLS - CAP as usize {
        let result = calls.join_next().await.expect("a call").expect("no panic");
        match result {
            Err(GatewayError::LimitExceeded { retry_after, .. }) => {
                // Depends on other calls finishing: no time to promise.
                assert_eq!(retry_after, None);
            }
            other => panic!("a call over the cap should be refused, got {other:?}"),
        }
    }

    // Another user is not held by alice's cap.
    let bob = caller("bob");
    let out = gw
        .call_tool(&bob, "slow.sleep", json!({ "ms": 0 }), None)
        .await
        .expect("bob's call passes");
    assert_eq!(out.text(), "slept 0");
    let stats = sleep_stats(&gw, &bob).await;
    assert_eq!(
        stats.in_flight,
        u64::from(CAP),
        "alice's two still run: {stats:?}"
    );
    // Alice is still at her cap.
    let err = gw
        .call_tool(
            &caller("alice"),
            "slow.echo",
            json!({ "message": "x" }),
            None,
        )
        .await
        .expect_err("alice is at her cap");
    assert_eq!(err.code(), "limit_exceeded");

    while let Some(joined) = calls.join_next().await {
        let text = joined.expect("no panic").expect("admitted calls finish");
        assert_eq!(text, "slept 3000");
    }
    let refused = gw
        .audit_store()
        .query(AuditQuery {
            user: Some("alice".into()),
            outcome: Some("limit_exceeded".into()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    assert_eq!(refused.len(), CALLS - CAP as usize + 1);
    assert!(refused.iter().all(|(_, r)| r.decision == "denied"));
    gw.shutdown().await;
}

#[tokio::test]
async fn the_fourth_call_in_a_minute_is_refused_with_a_retry_after() {
    let mut cfg = config(vec![demo("demo")]);
    cfg.call_limits.user_calls_per_minute = 3;
    let gw = gateway(cfg).await;
    let alice = caller("alice");
    for i in 0..3 {
        let out = gw
            .call_tool(
                &alice,
                "demo.echo",
                json!({ "message": i.to_string() }),
                None,
            )
            .await
            .expect("within the rate");
        assert_eq!(out.text(), format!("Echo: {i}"));
    }
    let err = gw
        .call_tool(&alice, "demo.echo", json!({ "message": "3" }), None)
        .await
        .expect_err("the fourth call is over the rate");
    assert_eq!(err.code(), "limit_exceeded");
    let GatewayError::LimitExceeded {
        retry_after: Some(after),
        ..
    } = err
    else {
        panic!("a rate refusal says when to retry: {err:?}");
    };
    assert!(
        after > Duration::ZERO && after <= Duration::from_secs(60),
        "{after:?}"
    );
    // The rate is per user.
    gw.call_tool(&caller("bob"), "demo.echo", json!({ "message": "b" }), None)
        .await
        .expect("bob has his own budget");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_limit_refusal_says_limit_exceeded_once() {
    let mut cfg = config(vec![demo("demo")]);
    cfg.call_limits.user_calls_per_minute = 1;
    let gw = gateway(cfg).await;
    let alice = caller("alice");
    let call = || gw.call_tool(&alice, "demo.echo", json!({ "message": "m" }), None);
    call().await.expect("the first call passes");
    let message = call().await.expect_err("over the rate").to_string();
    assert_eq!(message.matches("limit exceeded").count(), 1, "{message}");
    assert!(message.contains("per minute"), "{message}");
    gw.shutdown().await;
}
