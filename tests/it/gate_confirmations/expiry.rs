//! Expiry on a manual clock: tokens and pending confirmations stop working exactly at their
//! `expires_at`, and still work a microsecond before.

use std::time::{Duration, SystemTime};

use mcpgate::{
    gateway::{Gateway, GatewayError, GatewayOptions},
    policy::{CallContext, Clock, ManualClock},
};
use serde_json::json;

use super::{
    SPENT, ask, assert_last_audit, caller, demo, invalid_reason, not_found, notes, records,
};
use crate::support;

/// The store keeps times to the microsecond; this is the smallest step that must still count.
const TICK: Duration = Duration::from_micros(1);

/// A whole second, so the boundary arithmetic below is exact in every store.
fn start() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)
}

async fn gateway_with_manual_clock() -> (Gateway, ManualClock) {
    let (clock, hand) = Clock::manual(start());
    let options = GatewayOptions {
        clock,
        ..support::options()
    };
    let gateway = Gateway::start(support::config(vec![demo("demo")]), options)
        .await
        .expect("the gateway starts");
    gateway.wait_ready(support::WAIT).await;
    (gateway, hand)
}

fn note(title: &str) -> serde_json::Value {
    json!({ "title": title, "body": "b" })
}

#[tokio::test]
async fn a_token_expires_exactly_at_its_expiry() {
    let (gateway, hand) = gateway_with_manual_clock().await;
    let token_ttl = gateway.config().confirmations.token_ttl;
    let alice = caller("local", "alice", "s1");

    let id = ask(&gateway, &alice, "demo.add_note", note("late")).await;
    let approval = gateway.approve(&alice, &id).await.expect("approved");
    assert_eq!(approval.expires_at, start() + token_ttl);
    hand.set(approval.expires_at);
    let late = gateway
        .call_tool(&alice, "demo.add_note", note("late"), Some(&approval.token))
        .await;
    assert_eq!(invalid_reason(late), SPENT);
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "denied",
        "confirmation_invalid",
        None,
    )
    .await;

    let id = ask(&gateway, &alice, "demo.add_note", note("in time")).await;
    let approval = gateway.approve(&alice, &id).await.expect("approved");
    assert_eq!(approval.expires_at, start() + token_ttl * 2);
    hand.set(approval.expires_at - TICK);
    gateway
        .call_tool(
            &alice,
            "demo.add_note",
            note("in time"),
            Some(&approval.token),
        )
        .await
        .expect("a microsecond before expiry the token still works");
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "allowed",
        "ok",
        Some(&id),
    )
    .await;
    assert_eq!(
        notes(&gateway, &alice, "demo").await,
        [("in time".to_owned(), "b".to_owned())]
    );
}

/// Asks as `alice` and returns the confirmation id and its expiry.
async fn ask_with_expiry(
    gateway: &Gateway,
    alice: &CallContext,
    title: &str,
) -> (String, SystemTime) {
    match gateway
        .call_tool(alice, "demo.add_note", note(title), None)
        .await
    {
        Err(GatewayError::ConfirmationRequired {
            confirmation_id,
            expires_at,
            ..
        }) => (confirmation_id, expires_at),
        other => panic!("expected confirmation_required, got {other:?}"),
    }
}

#[tokio::test]
async fn a_pending_confirmation_expires_exactly_at_pending_ttl() {
    let (gateway, hand) = gateway_with_manual_clock().await;
    let pending_ttl = gateway.config().confirmations.pending_ttl;
    let alice = caller("local", "alice", "s1");

    let (id, expires_at) = ask_with_expiry(&gateway, &alice, "late").await;
    assert_eq!(expires_at, start() + pending_ttl);
    hand.set(expires_at - TICK);
    let listed = gateway.pending_confirmations(&alice).await.expect("listed");
    assert_eq!(listed.len(), 1, "still pending a microsecond before expiry");
    hand.set(expires_at);
    let listed = gateway.pending_confirmations(&alice).await.expect("listed");
    assert!(listed.is_empty(), "expired at expires_at: {listed:?}");
    let late = gateway.approve(&alice, &id).await;
    assert!(not_found(&late), "{late:?}");

    let (id, expires_at) = ask_with_expiry(&gateway, &alice, "in time").await;
    hand.set(expires_at - TICK);
    let approval = gateway
        .approve(&alice, &id)
        .await
        .expect("a microsecond before expiry it can be approved");
    gateway
        .call_tool(
            &alice,
            "demo.add_note",
            note("in time"),
            Some(&approval.token),
        )
        .await
        .expect("the approved write runs");
    assert_eq!(
        notes(&gateway, &alice, "demo").await,
        [("in time".to_owned(), "b".to_owned())]
    );
}

#[tokio::test]
async fn failed_approvals_are_audited() {
    let (gateway, hand) = gateway_with_manual_clock().await;
    let alice = caller("local", "alice", "s1");

    let denied = ask(&gateway, &alice, "demo.add_note", note("denied")).await;
    gateway.deny(&alice, &denied).await.expect("denied");
    let (expired, expires_at) = ask_with_expiry(&gateway, &alice, "expired").await;
    hand.set(expires_at);
    for id in [&denied, &expired] {
        let result = gateway.approve(&alice, id).await;
        assert_eq!(result.map(|_| ()).map_err(|e| e.code()), Err("not_found"));
        let all = records(&gateway, &alice).await;
        let newest = all.first().expect("records");
        assert_eq!(
            (newest.confirmation_id.as_deref(), newest.outcome.as_str()),
            (Some(id.as_str()), "not_found"),
            "the failed approval of {id} is on record: {newest:?}"
        );
    }
}
