//! An approval taken by repeating the call: a client that cannot carry tokens repeats the
//! very call after its user approved out of band, and the gate takes the grant by what it is
//! bound to (tenant, user, session, tool, definition, arguments). Once, even raced; never by
//! another user, session or set of arguments; not after it expires; and a grant taken one
//! way is gone the other.

use std::{sync::Arc, time::Duration};

use mcpgate::{
    config::{Config, StateConfig},
    gateway::{Gateway, GatewayError, GatewayOptions},
    policy::{Clock, ManualClock},
};
use serde_json::{Value, json};
use tokio::{sync::Barrier, task::JoinSet};

use super::{SPENT, approved, ask, assert_last_audit, caller, demo, invalid_reason, notes, slow};
use crate::support;

fn note(title: &str) -> Value {
    json!({ "title": title, "body": "b" })
}

/// Whether `result` is a request for confirmation (the call did not run).
fn asked(result: &Result<mcpgate::gateway::ToolOutput, GatewayError>) -> bool {
    matches!(result, Err(GatewayError::ConfirmationRequired { .. }))
}

#[tokio::test]
async fn the_same_call_repeated_after_approval_runs_once_without_the_token() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let (id, _token) = approved(&gateway, &alice, "demo.add_note", note("n1")).await;

    let ran = gateway
        .call_tool(&alice, "demo.add_note", note("n1"), None)
        .await
        .expect("the approved call runs when repeated");
    assert!(ran.text().contains("Saved note `n1`"), "{}", ran.text());
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "allowed",
        "ok",
        Some(&id),
    )
    .await;

    let again = gateway
        .call_tool(&alice, "demo.add_note", note("n1"), None)
        .await;
    assert!(asked(&again), "a second repeat asks again: {again:?}");
    assert_eq!(notes(&gateway, &alice, "demo").await.len(), 1);
}

#[tokio::test]
async fn another_user_session_or_arguments_cannot_take_the_approval() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let bob = caller("local", "bob", "s1");
    let other_session = caller("local", "alice", "s2");
    let other_tenant = caller("acme", "alice", "s1");
    approved(&gateway, &alice, "demo.add_note", note("mine")).await;

    for ctx in [&bob, &other_session, &other_tenant] {
        let stolen = gateway
            .call_tool(ctx, "demo.add_note", note("mine"), None)
            .await;
        assert!(asked(&stolen), "{} {}: {stolen:?}", ctx.user, ctx.session);
    }
    let other_args = gateway
        .call_tool(&alice, "demo.add_note", note("other"), None)
        .await;
    assert!(asked(&other_args), "{other_args:?}");
    assert!(notes(&gateway, &alice, "demo").await.is_empty());

    // Still there for its own call.
    gateway
        .call_tool(&alice, "demo.add_note", note("mine"), None)
        .await
        .expect("the approval waited for its own call");
    assert_eq!(
        notes(&gateway, &alice, "demo").await,
        [("mine".to_owned(), "b".to_owned())]
    );
}

#[tokio::test]
async fn a_grant_is_taken_once_whichever_way() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");

    // Taken by the repeat: the token is spent.
    let (_, token) = approved(&gateway, &alice, "demo.add_note", note("a")).await;
    gateway
        .call_tool(&alice, "demo.add_note", note("a"), None)
        .await
        .expect("the repeat runs");
    let late = gateway
        .call_tool(&alice, "demo.add_note", note("a"), Some(&token))
        .await;
    assert_eq!(invalid_reason(late), SPENT);

    // Taken by the token: the repeat asks again.
    let (_, token) = approved(&gateway, &alice, "demo.add_note", note("b")).await;
    gateway
        .call_tool(&alice, "demo.add_note", note("b"), Some(&token))
        .await
        .expect("the token runs");
    let repeat = gateway
        .call_tool(&alice, "demo.add_note", note("b"), None)
        .await;
    assert!(asked(&repeat), "{repeat:?}");
    assert_eq!(notes(&gateway, &alice, "demo").await.len(), 2);
}

/// Repeats racing one approval, released at once on a multi-thread runtime.
const RACERS: usize = 40;

/// How long the winning call holds the upstream, so the others overlap with it.
const WINNER_SLEEP_MS: u64 = 100;

async fn repeats_raced_by_many(config: Config) {
    let gateway = support::gateway(config).await;
    let alice = caller("local", "alice", "s1");
    let args = json!({ "ms": WINNER_SLEEP_MS });
    approved(&gateway, &alice, "slow.sleep", args.clone()).await;

    let start = Arc::new(Barrier::new(RACERS));
    let mut racers = JoinSet::new();
    for _ in 0..RACERS {
        let (gateway, alice, args, start) =
            (gateway.clone(), alice.clone(), args.clone(), start.clone());
        racers.spawn(async move {
            start.wait().await;
            gateway.call_tool(&alice, "slow.sleep", args, None).await
        });
    }
    let (mut ran, mut asked_again) = (0, 0);
    while let Some(joined) = racers.join_next().await {
        match joined.expect("a racer does not panic") {
            Ok(output) => {
                assert_eq!(output.text(), format!("slept {WINNER_SLEEP_MS}"));
                ran += 1;
            }
            Err(GatewayError::ConfirmationRequired { .. }) => asked_again += 1,
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!((ran, asked_again), (1, RACERS - 1));
    let stats = gateway
        .call_tool(&alice, "slow.sleep_stats", json!({}), None)
        .await
        .expect("sleep_stats is a read");
    let stats = stats.structured.expect("structured counters");
    assert_eq!(
        (&stats["started"], &stats["completed"]),
        (&json!(1), &json!(1)),
        "the upstream ran the write exactly once: {stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raced_repeats_run_once_in_memory() {
    repeats_raced_by_many(support::config(vec![slow("slow")])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn raced_repeats_run_once_in_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut config = support::config(vec![slow("slow")]);
    config.state = StateConfig::Sqlite {
        path: dir.path().join("state.db"),
    };
    repeats_raced_by_many(config).await;
}

/// The store keeps times to the microsecond.
const TICK: Duration = Duration::from_micros(1);

async fn gateway_with_manual_clock() -> (Gateway, ManualClock) {
    let start = std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let (clock, hand) = Clock::manual(start);
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

#[tokio::test]
async fn an_approval_taken_by_repeat_expires_with_its_token() {
    let (gateway, hand) = gateway_with_manual_clock().await;
    let alice = caller("local", "alice", "s1");

    let id = ask(&gateway, &alice, "demo.add_note", note("late")).await;
    let approval = gateway.approve(&alice, &id).await.expect("approved");
    hand.set(approval.expires_at);
    let late = gateway
        .call_tool(&alice, "demo.add_note", note("late"), None)
        .await;
    assert!(asked(&late), "expired at expires_at: {late:?}");

    let id = ask(&gateway, &alice, "demo.add_note", note("in time")).await;
    let approval = gateway.approve(&alice, &id).await.expect("approved");
    hand.set(approval.expires_at - TICK);
    gateway
        .call_tool(&alice, "demo.add_note", note("in time"), None)
        .await
        .expect("a microsecond before expiry the repeat runs");
    assert_eq!(
        notes(&gateway, &alice, "demo").await,
        [("in time".to_owned(), "b".to_owned())]
    );
}
