//! The confirmation round trip: ask, list, approve, run once, replay, deny, approvals by the
//! wrong caller, and one token raced by many callers.

use std::{sync::Arc, time::SystemTime};

use mcpgate::{
    catalog::args_hash,
    config::{Config, StateConfig},
    gateway::GatewayError,
};
use serde_json::json;
use tokio::{sync::Barrier, task::JoinSet};

use super::{
    SPENT, approved, ask, assert_last_audit, caller, demo, invalid_reason, not_found, notes,
    records, slow,
};
use crate::support;

#[tokio::test]
async fn a_write_without_token_is_held_and_listed_for_its_caller_only() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let args = json!({ "title": "groceries", "body": "milk" });
    let asked_at = SystemTime::now();

    let result = gateway
        .call_tool(&alice, "demo.add_note", args.clone(), None)
        .await;
    let Err(GatewayError::ConfirmationRequired {
        confirmation_id,
        tool,
        args_hash: hash,
        expires_at,
    }) = result
    else {
        panic!("expected confirmation_required, got {result:?}");
    };
    assert_eq!(tool, "demo.add_note");
    assert_eq!(
        hash,
        args_hash(&args),
        "the hash of the canonical arguments"
    );
    let pending_ttl = gateway.config().confirmations.pending_ttl;
    assert!(expires_at > asked_at, "expires in the future");
    assert!(expires_at <= SystemTime::now() + pending_ttl);
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "pending",
        "confirmation_required",
        Some(&confirmation_id),
    )
    .await;

    let pending = gateway.pending_confirmations(&alice).await.expect("listed");
    assert_eq!(pending.len(), 1);
    let held = &pending[0];
    assert_eq!(held.id, confirmation_id);
    assert_eq!(held.expires_at, expires_at);
    let b = &held.binding;
    assert_eq!((b.tenant.as_str(), b.user.as_str()), ("local", "alice"));
    assert_eq!(
        (b.session.as_str(), b.tool.as_str()),
        ("s1", "demo.add_note")
    );
    assert_eq!(b.args_hash, hash);

    for other in [
        caller("local", "bob", "s1"),
        caller("local", "alice", "s2"),
        caller("acme", "alice", "s1"),
    ] {
        let theirs = gateway.pending_confirmations(&other).await.expect("listed");
        assert!(theirs.is_empty(), "{other:?} sees {theirs:?}");
    }
    assert!(
        notes(&gateway, &alice, "demo").await.is_empty(),
        "a held write did not run"
    );
}

#[tokio::test]
async fn an_approved_token_runs_the_write_once() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let args = json!({ "title": "groceries", "body": "milk" });
    let id = ask(&gateway, &alice, "demo.add_note", args.clone()).await;

    let approval = gateway.approve(&alice, &id).await.expect("approved");
    assert_eq!(approval.confirmation_id, id);
    let token_ttl = gateway.config().confirmations.token_ttl;
    assert!(approval.expires_at <= SystemTime::now() + token_ttl);
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "approved",
        "ok",
        Some(&id),
    )
    .await;
    let pending = gateway.pending_confirmations(&alice).await.expect("listed");
    assert!(
        pending.is_empty(),
        "an approved confirmation is no longer pending"
    );

    let token = Some(approval.token.as_str());
    let output = gateway
        .call_tool(&alice, "demo.add_note", args.clone(), token)
        .await
        .expect("the confirmed write runs");
    assert_eq!(output.text(), "Saved note `groceries`.");
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "allowed",
        "ok",
        Some(&id),
    )
    .await;

    let replay = gateway
        .call_tool(&alice, "demo.add_note", args, token)
        .await;
    assert_eq!(invalid_reason(replay), SPENT);
    // A spent token is gone from the store, so nothing links the replay to its confirmation.
    assert_last_audit(
        &gateway,
        &alice,
        "demo.add_note",
        "denied",
        "confirmation_invalid",
        None,
    )
    .await;
    assert_eq!(
        notes(&gateway, &alice, "demo").await,
        [("groceries".to_owned(), "milk".to_owned())]
    );
}

#[tokio::test]
async fn a_denied_confirmation_is_gone() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let args = json!({ "title": "t", "body": "b" });
    let id = ask(&gateway, &alice, "demo.add_note", args).await;

    gateway.deny(&alice, &id).await.expect("the owner may deny");
    assert_last_audit(&gateway, &alice, "demo.add_note", "denied", "ok", Some(&id)).await;
    let pending = gateway.pending_confirmations(&alice).await.expect("listed");
    assert!(pending.is_empty());
    let later = gateway.approve(&alice, &id).await;
    assert!(not_found(&later), "{later:?}");
    let again = gateway.deny(&alice, &id).await;
    assert_eq!(again.map_err(|e| e.code()), Err("not_found"));
    assert!(notes(&gateway, &alice, "demo").await.is_empty());
}

#[tokio::test]
async fn deciding_another_callers_confirmation_is_not_found_and_final() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let intruders = [
        caller("local", "mallory", "s1"),
        caller("local", "alice", "s2"),
        caller("acme", "alice", "s1"),
    ];
    for intruder in &intruders {
        for approve in [true, false] {
            let id = ask(
                &gateway,
                &alice,
                "demo.add_note",
                json!({ "title": "t", "body": "b" }),
            )
            .await;
            let refused = if approve {
                gateway.approve(intruder, &id).await.map(|_| ())
            } else {
                gateway.deny(intruder, &id).await
            };
            // Not found, as an unknown id is: ids cannot be probed.
            assert!(
                not_found(&refused),
                "{intruder:?} approve={approve}: {refused:?}"
            );
            // The intruder's tenant reads its own audit: within alice's tenant the record
            // names her tool; from another tenant it reads as an unknown id.
            let (tool, outcome) = if intruder.tenant == alice.tenant {
                ("demo.add_note", "forbidden")
            } else {
                ("", "not_found")
            };
            assert_last_audit(&gateway, intruder, tool, "refused", outcome, Some(&id)).await;
            let pending = gateway.pending_confirmations(&alice).await.expect("listed");
            assert!(pending.is_empty(), "a refused decision still ends it");
            let owner = gateway.approve(&alice, &id).await;
            assert!(not_found(&owner), "{owner:?}");
        }
    }
    assert!(notes(&gateway, &alice, "demo").await.is_empty());
}

/// Callers racing one token, all released at once by a barrier on a multi-thread runtime.
const RACERS: usize = 50;

/// How long the winning call holds its upstream call open, so losers overlap with it.
const WINNER_SLEEP_MS: u64 = 100;

async fn one_token_raced_by_many(config: Config) {
    let gateway = support::gateway(config).await;
    let alice = caller("local", "alice", "s1");
    let args = json!({ "ms": WINNER_SLEEP_MS });
    let (id, token) = approved(&gateway, &alice, "slow.sleep", args.clone()).await;

    let start = Arc::new(Barrier::new(RACERS));
    let mut racers = JoinSet::new();
    for _ in 0..RACERS {
        let (gateway, alice, args, token) =
            (gateway.clone(), alice.clone(), args.clone(), token.clone());
        let start = start.clone();
        racers.spawn(async move {
            start.wait().await;
            gateway
                .call_tool(&alice, "slow.sleep", args, Some(&token))
                .await
        });
    }
    let mut won = 0;
    let mut lost = 0;
    while let Some(joined) = racers.join_next().await {
        match joined.expect("a racer does not panic") {
            Ok(output) => {
                assert_eq!(output.text(), format!("slept {WINNER_SLEEP_MS}"));
                won += 1;
            }
            other => {
                assert_eq!(invalid_reason(other), SPENT);
                lost += 1;
            }
        }
    }
    assert_eq!((won, lost), (1, RACERS - 1));

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

    let sleeps: Vec<_> = records(&gateway, &alice)
        .await
        .into_iter()
        .filter(|r| r.tool == "slow.sleep")
        .map(|r| (r.decision, r.outcome, r.confirmation_id))
        .collect();
    let count = |decision: &str, outcome: &str, with_id: Option<&str>| {
        sleeps
            .iter()
            .filter(|(d, o, c)| d == decision && o == outcome && c.as_deref() == with_id)
            .count()
    };
    assert_eq!(count("pending", "confirmation_required", Some(&id)), 1);
    assert_eq!(count("approved", "ok", Some(&id)), 1);
    assert_eq!(count("allowed", "ok", Some(&id)), 1);
    assert_eq!(count("denied", "confirmation_invalid", None), RACERS - 1);
    assert_eq!(
        sleeps.len(),
        RACERS + 2,
        "one per attempt, and the approval"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_token_raced_by_fifty_callers_runs_once_in_memory() {
    one_token_raced_by_many(support::config(vec![slow("slow")])).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_token_raced_by_fifty_callers_runs_once_in_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut config = support::config(vec![slow("slow")]);
    config.state = StateConfig::Sqlite {
        path: dir.path().join("state.db"),
    };
    one_token_raced_by_many(config).await;
}

/// One user holding as many confirmations as the store keeps for a user (100) is refused
/// the next one as a limit they can act on (429 `limit_exceeded`), not as the store failing
/// (it was `store_unavailable`, 503); another user still asks, and a decision frees room.
#[tokio::test]
async fn past_the_confirmations_a_user_may_hold_a_write_is_a_limit() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let mut first = None;
    for i in 0..mcpgate::store::MAX_PER_USER {
        let id = ask(
            &gateway,
            &alice,
            "demo.add_note",
            json!({ "title": format!("n{i}"), "body": "b" }),
        )
        .await;
        first.get_or_insert(id);
    }
    let refused = gateway
        .call_tool(
            &alice,
            "demo.add_note",
            json!({ "title": "one more", "body": "b" }),
            None,
        )
        .await
        .expect_err("past the bound");
    assert_eq!(refused.code(), "limit_exceeded", "{refused}");
    assert!(refused.to_string().contains("per user"), "{refused}");
    let bob = caller("local", "bob", "s1");
    ask(
        &gateway,
        &bob,
        "demo.add_note",
        json!({ "title": "b", "body": "b" }),
    )
    .await;
    gateway
        .deny(&alice, first.as_deref().expect("asked"))
        .await
        .expect("denied");
    ask(
        &gateway,
        &alice,
        "demo.add_note",
        json!({ "title": "after a decision", "body": "b" }),
    )
    .await;
}

/// Approving with as many approved tokens held as a user may hold (100) is refused as a
/// limit, and the confirmation is not lost: it is listed again, and approved once a token
/// is used.
#[tokio::test]
async fn approving_past_the_tokens_a_user_may_hold_keeps_the_confirmation() {
    let gateway = support::gateway(support::config(vec![demo("demo")])).await;
    let alice = caller("local", "alice", "s1");
    let mut tokens = Vec::new();
    for i in 0..mcpgate::store::MAX_PER_USER {
        let args = json!({ "title": format!("n{i}"), "body": "b" });
        let (_, token) = approved(&gateway, &alice, "demo.add_note", args.clone()).await;
        tokens.push((args, token));
    }
    let id = ask(
        &gateway,
        &alice,
        "demo.add_note",
        json!({ "title": "one more", "body": "b" }),
    )
    .await;
    let refused = gateway
        .approve(&alice, &id)
        .await
        .expect_err("past the bound");
    assert_eq!(refused.code(), "limit_exceeded", "{refused}");
    let listed = gateway.pending_confirmations(&alice).await.expect("listed");
    assert!(
        listed.iter().any(|p| p.id == id),
        "the confirmation was lost"
    );
    // A token used frees room: the same confirmation is approved now.
    let (args, token) = tokens.pop().expect("a token");
    gateway
        .call_tool(&alice, "demo.add_note", args, Some(token.as_str()))
        .await
        .expect("the write runs with its token");
    gateway
        .approve(&alice, &id)
        .await
        .expect("approved once there is room");
}
