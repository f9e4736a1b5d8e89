//! Which calls need a confirmation: `confirm` modes, `read_only_tools`, `write_tools` and
//! `trust_annotations`, as src/policy/classify.rs documents them, seen through the gate.

use mcpgate::{
    config::Confirm,
    fixtures::demo::DemoServer,
    gateway::{Gateway, GatewayError},
    policy::CallContext,
};
use serde_json::{Value, json};

use super::{approved, assert_last_audit, caller, demo, names, notes};
use crate::support;

/// One demo server per policy under test; each keeps its own notes.
async fn policies() -> Gateway {
    // No lists, annotations untrusted: everything is a write.
    let plain = support::in_process("plain", DemoServer::new());
    // The demo's read tools named read-only.
    let listed = demo("listed");
    // The demo's own annotations count: readOnlyHint tools read, the rest write.
    let mut trusting = support::in_process("trusting", DemoServer::new());
    trusting.trust_annotations = true;
    // Explicit lists win over trusted annotations, both ways.
    let mut overridden = support::in_process("overridden", DemoServer::new());
    overridden.trust_annotations = true;
    overridden.write_tools = names(&["echo"]);
    overridden.read_only_tools = names(&["delete_note", "list_notes"]);
    let mut all = demo("all");
    all.confirm = Confirm::All;
    let mut none = support::in_process("none", DemoServer::new());
    none.confirm = Confirm::None;
    support::gateway(support::config(vec![
        plain, listed, trusting, overridden, all, none,
    ]))
    .await
}

/// Calls `tool` without a token; `true` if it ran, `false` if it was held for confirmation
/// (and then the hold is on record).
async fn runs_without_token(gateway: &Gateway, ctx: &CallContext, tool: &str, args: Value) -> bool {
    match gateway.call_tool(ctx, tool, args, None).await {
        Ok(_) => {
            assert_last_audit(gateway, ctx, tool, "allowed", "ok", None).await;
            true
        }
        Err(GatewayError::ConfirmationRequired {
            confirmation_id, ..
        }) => {
            let id = Some(confirmation_id.as_str());
            assert_last_audit(gateway, ctx, tool, "pending", "confirmation_required", id).await;
            false
        }
        Err(other) => panic!("{tool}: neither ran nor held: {other:?}"),
    }
}

#[tokio::test]
async fn each_policy_holds_exactly_the_calls_it_documents() {
    let gateway = policies().await;
    let alice = caller("local", "alice", "s1");
    let echo = json!({ "message": "hi" });
    let note = json!({ "title": "t", "body": "b" });
    let nothing = json!({});
    let cases = [
        ("plain.echo", &echo, false),
        ("plain.list_notes", &nothing, false),
        ("plain.add_note", &note, false),
        ("listed.echo", &echo, true),
        ("listed.list_notes", &nothing, true),
        ("listed.add_note", &note, false),
        ("trusting.echo", &echo, true),
        ("trusting.list_notes", &nothing, true),
        ("trusting.add_note", &note, false),
        ("trusting.delete_note", &json!({ "title": "t" }), false),
        ("overridden.echo", &echo, false),
        ("overridden.list_notes", &nothing, true),
        ("all.echo", &echo, false),
        ("all.list_notes", &nothing, false),
        ("all.add_note", &note, false),
        ("none.add_note", &note, true),
    ];
    for (tool, args, runs) in cases {
        assert_eq!(
            runs_without_token(&gateway, &alice, tool, args.clone()).await,
            runs,
            "{tool} runs without a token"
        );
    }
    // Held writes did not run; the unconfirmed one did.
    assert!(notes(&gateway, &alice, "listed").await.is_empty());
    assert!(notes(&gateway, &alice, "trusting").await.is_empty());
    assert_eq!(
        notes(&gateway, &alice, "none").await,
        [("t".to_owned(), "b".to_owned())]
    );
}

#[tokio::test]
async fn a_read_only_listing_beats_a_destructive_annotation() {
    let gateway = policies().await;
    let alice = caller("local", "alice", "s1");
    // delete_note is annotated destructive; the operator's list says it reads. It runs without
    // a token and the upstream answers (no such note: a tool error, not a hold).
    let result = gateway
        .call_tool(
            &alice,
            "overridden.delete_note",
            json!({ "title": "x" }),
            None,
        )
        .await;
    assert!(
        matches!(&result, Err(GatewayError::ToolError { message }) if message.contains("no note titled")),
        "{result:?}"
    );
    assert_last_audit(
        &gateway,
        &alice,
        "overridden.delete_note",
        "allowed",
        "tool_error",
        None,
    )
    .await;
}

#[tokio::test]
async fn confirm_all_holds_a_read_until_it_is_approved() {
    let gateway = policies().await;
    let alice = caller("local", "alice", "s1");
    let (id, token) = approved(&gateway, &alice, "all.echo", json!({ "message": "hi" })).await;
    let output = gateway
        .call_tool(&alice, "all.echo", json!({ "message": "hi" }), Some(&token))
        .await
        .expect("the approved read runs");
    assert_eq!(output.text(), "Echo: hi");
    assert_last_audit(&gateway, &alice, "all.echo", "allowed", "ok", Some(&id)).await;
}
