//! What a token is bound to: caller (tenant, user, session), tool, tool definition and the
//! canonical arguments; and what does not count as different arguments.

use mcpgate::{
    gateway::Gateway,
    policy::{ArgumentError, parse_arguments},
};
use serde_json::{Value, json};

use super::{
    SPENT, approved, ask, assert_last_audit, caller, changing, demo, invalid_reason, notes,
};
use crate::support;

async fn demo_and_changing() -> Gateway {
    support::gateway(support::config(vec![demo("demo"), changing("changing")])).await
}

#[tokio::test]
async fn a_token_works_only_for_the_caller_it_was_approved_for() {
    let gateway = demo_and_changing().await;
    let alice = caller("local", "alice", "s1");
    let args = json!({ "title": "t", "body": "b" });
    for other in [
        caller("local", "bob", "s1"),
        caller("acme", "alice", "s1"),
        caller("local", "alice", "s2"),
    ] {
        let (id, token) = approved(&gateway, &alice, "demo.add_note", args.clone()).await;
        let stolen = gateway
            .call_tool(&other, "demo.add_note", args.clone(), Some(&token))
            .await;
        assert_eq!(
            invalid_reason(stolen),
            "approved for another user or session",
            "{other:?}"
        );
        assert_last_audit(
            &gateway,
            &other,
            "demo.add_note",
            "denied",
            "confirmation_invalid",
            Some(&id),
        )
        .await;
        // Presented once, the token is spent: a leaked token tried by someone else is dead.
        let owner = gateway
            .call_tool(&alice, "demo.add_note", args.clone(), Some(&token))
            .await;
        assert_eq!(invalid_reason(owner), SPENT);
    }
    assert!(notes(&gateway, &alice, "demo").await.is_empty());
}

#[tokio::test]
async fn a_token_works_only_for_its_tool() {
    let gateway = demo_and_changing().await;
    let alice = caller("local", "alice", "s1");
    let add = json!({ "title": "t", "body": "b" });
    let (id, token) = approved(&gateway, &alice, "demo.add_note", add).await;
    let other_tool = gateway
        .call_tool(
            &alice,
            "demo.delete_note",
            json!({ "title": "t" }),
            Some(&token),
        )
        .await;
    assert_eq!(invalid_reason(other_tool), "approved for another tool");
    assert_last_audit(
        &gateway,
        &alice,
        "demo.delete_note",
        "denied",
        "confirmation_invalid",
        Some(&id),
    )
    .await;
}

#[tokio::test]
async fn a_token_works_only_for_the_definition_it_was_approved_for() {
    let gateway = demo_and_changing().await;
    let alice = caller("local", "alice", "s1");
    let fingerprint = |gateway: &Gateway| {
        let catalog = gateway.catalog();
        let alpha = catalog
            .by_canonical("changing.alpha")
            .expect("alpha listed");
        alpha.fingerprint.as_str().to_owned()
    };
    let before = fingerprint(&gateway);
    let (id, token) = approved(&gateway, &alice, "changing.alpha", json!({})).await;

    let mutated = gateway
        .call_tool(
            &alice,
            "changing.mutate",
            json!({ "what": "description" }),
            None,
        )
        .await
        .expect("mutate is configured read-only");
    assert_eq!(mutated.text(), "mutated: description");
    let after = support::wait_for("alpha's new definition in the catalog", || {
        Some(fingerprint(&gateway)).filter(|now| *now != before)
    })
    .await;

    let changed = gateway
        .call_tool(&alice, "changing.alpha", json!({}), Some(&token))
        .await;
    assert_eq!(
        invalid_reason(changed),
        "the tool's definition changed since approval"
    );
    assert_last_audit(
        &gateway,
        &alice,
        "changing.alpha",
        "denied",
        "confirmation_invalid",
        Some(&id),
    )
    .await;
    // A fresh confirmation binds the new definition and runs.
    let id = ask(&gateway, &alice, "changing.alpha", json!({})).await;
    let pending = gateway.pending_confirmations(&alice).await.expect("listed");
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (
            pending[0].id.as_str(),
            pending[0].binding.fingerprint.as_str()
        ),
        (id.as_str(), after.as_str())
    );
    let approval = gateway.approve(&alice, &id).await.expect("approved");
    let output = gateway
        .call_tool(&alice, "changing.alpha", json!({}), Some(&approval.token))
        .await
        .expect("approved against the current definition");
    assert_eq!(output.text(), "alpha called");
}

#[tokio::test]
async fn a_token_works_only_for_its_argument_values() {
    let gateway = demo_and_changing().await;
    let alice = caller("local", "alice", "s1");
    let cases = [
        (
            "demo.add_note",
            json!({ "title": "t", "body": "one" }),
            json!({ "title": "t", "body": "two" }),
        ),
        // `alpha` accepts any extra property, so the type change reaches the binding check.
        ("changing.alpha", json!({ "n": 1 }), json!({ "n": "1" })),
        ("changing.alpha", json!({ "n": "1" }), json!({ "n": 1 })),
        (
            "changing.alpha",
            json!({ "n": 1 }),
            json!({ "n": 1, "m": null }),
        ),
        (
            "changing.alpha",
            json!({ "n": [1, 2] }),
            json!({ "n": [2, 1] }),
        ),
    ];
    for (tool, approved_args, called_args) in cases {
        let (id, token) = approved(&gateway, &alice, tool, approved_args).await;
        let other = gateway
            .call_tool(&alice, tool, called_args.clone(), Some(&token))
            .await;
        assert_eq!(
            invalid_reason(other),
            "approved for other arguments",
            "{tool} called with {called_args}"
        );
        assert_last_audit(
            &gateway,
            &alice,
            tool,
            "denied",
            "confirmation_invalid",
            Some(&id),
        )
        .await;
    }
    assert!(notes(&gateway, &alice, "demo").await.is_empty());
}

/// Argument text as the CLI and REST callers parse it.
fn parsed(gateway: &Gateway, raw: &str) -> Value {
    let limit = gateway.config().call_limits.max_argument_bytes;
    Value::Object(parse_arguments(raw, limit).expect("valid argument text"))
}

#[tokio::test]
async fn reordered_keys_and_other_whitespace_are_the_same_arguments() {
    let gateway = demo_and_changing().await;
    let alice = caller("local", "alice", "s1");
    let cases = [
        (
            "demo.add_note",
            r#"{"title":"plan","body":"a b"}"#,
            "{\n  \"body\" : \"a b\",\t\"title\":\"plan\"\n}\n",
        ),
        (
            "changing.alpha",
            r#"{"options":{"mode":"fast"},"z":[{"b":2,"a":1}],"a":1.5}"#,
            r#" { "a" : 1.5 , "z" : [ { "a" : 1 , "b" : 2 } ] , "options" : { "mode" : "fast" } } "#,
        ),
    ];
    for (tool, approved_text, called_text) in cases {
        let (id, token) = approved(&gateway, &alice, tool, parsed(&gateway, approved_text)).await;
        let output = gateway
            .call_tool(&alice, tool, parsed(&gateway, called_text), Some(&token))
            .await;
        assert!(output.is_ok(), "{tool} with {called_text}: {output:?}");
        assert_last_audit(&gateway, &alice, tool, "allowed", "ok", Some(&id)).await;
    }
    assert_eq!(
        notes(&gateway, &alice, "demo").await,
        [("plan".to_owned(), "a b".to_owned())]
    );
}

#[test]
fn duplicate_keys_are_refused_by_the_argument_parser() {
    let limit = mcpgate::config::CallLimits::default().max_argument_bytes;
    let cases = [
        (r#"{"title":"a","body":"x","title":"b"}"#, "/title"),
        (r#"{"options":{"mode":"a","mode":"b"}}"#, "/options/mode"),
        (r#"{"list":[{"k":1,"k":1}]}"#, "/list/0/k"),
        // The same key spelled with an escape is still the same key.
        (r#"{"title":"a","ti\u0074le":"b","body":"x"}"#, "/title"),
    ];
    for (raw, at) in cases {
        match parse_arguments(raw, limit) {
            Err(ArgumentError::DuplicateKey { path }) => assert_eq!(path, at, "{raw}"),
            other => panic!("{raw}: expected a duplicate key error, got {other:?}"),
        }
    }
    let err = parse_arguments(r#"{"a":1,"a":1}"#, limit).expect_err("duplicate");
    assert_eq!(
        (err.code(), err.reason()),
        ("invalid_arguments", "duplicate_key")
    );
}
