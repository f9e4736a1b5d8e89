//! Who sees what: tenants and grants (by role, by user, for everyone) hide tools exactly like
//! tools that do not exist, and the allow/deny lists take tools out of the catalog.

use mcpgate::{
    config::{AccessConfig, Grant, TenantAccess},
    gateway::Gateway,
    policy::CallContext,
    store::AuditQuery,
};
use serde_json::json;

use super::{caller, canonical_ids, demo, names};
use crate::support::{config, gateway, id};

fn member(tenant: &str, user: &str, roles: &[&str]) -> CallContext {
    CallContext {
        tenant: tenant.to_owned(),
        roles: names(roles),
        ..caller(user)
    }
}

fn grant(tenant: &str, users: &[&str], roles: &[&str], tools: &[&str]) -> Grant {
    Grant {
        tenant: tenant.to_owned(),
        users: names(users),
        roles: names(roles),
        tools: names(tools),
    }
}

/// `acme` sees both servers: everyone gets two demo tools and `extra.echo`, analysts also
/// `demo.add`, alice all of `demo`. `beta` sees only `demo`; its grant on `extra` is void.
fn access() -> AccessConfig {
    AccessConfig {
        tenants: vec![
            TenantAccess {
                tenant: "acme".into(),
                servers: vec![id("demo"), id("extra")],
                models: None,
            },
            TenantAccess {
                tenant: "beta".into(),
                servers: vec![id("demo")],
                models: None,
            },
        ],
        grants: vec![
            grant(
                "acme",
                &[],
                &[],
                &["demo.echo", "demo.time_now", "extra.echo"],
            ),
            grant("acme", &[], &["analyst"], &["demo.add"]),
            grant("acme", &["alice"], &[], &["demo.*"]),
            grant("beta", &[], &[], &["demo.list_notes", "extra.*"]),
        ],
        operators: vec![],
    }
}

async fn access_gateway() -> Gateway {
    let mut cfg = config(vec![demo("demo"), demo("extra")]);
    cfg.access = Some(access());
    gateway(cfg).await
}

/// What `who` sees, for people and for models (the same here: every tool is usable).
async fn visible(gw: &Gateway, who: &CallContext) -> Vec<String> {
    let listed = gw.list_tools(who).await;
    let offered = gw.model_tools(who).await;
    assert_eq!(canonical_ids(&listed), canonical_ids(&offered));
    listed.into_iter().map(|t| t.canonical).collect()
}

#[tokio::test]
async fn grants_by_everyone_role_and_user() {
    let gw = access_gateway().await;
    let bob = member("acme", "bob", &[]);
    let carol = member("acme", "carol", &["analyst"]);
    let alice = member("acme", "alice", &[]);
    let dave = member("beta", "dave", &["analyst"]);
    assert_eq!(
        visible(&gw, &bob).await,
        ["demo.echo", "demo.time_now", "extra.echo"]
    );
    assert_eq!(
        visible(&gw, &carol).await,
        ["demo.add", "demo.echo", "demo.time_now", "extra.echo"]
    );
    assert_eq!(
        visible(&gw, &alice).await,
        [
            "demo.add",
            "demo.add_note",
            "demo.delete_note",
            "demo.echo",
            "demo.list_notes",
            "demo.time_now",
            "extra.echo"
        ]
    );
    assert_eq!(visible(&gw, &dave).await, ["demo.list_notes"]);

    let sum = gw
        .call_tool(&carol, "demo.add", json!({ "a": 2, "b": 3 }), None)
        .await
        .expect("analysts may add");
    assert_eq!(sum.text(), "5");
    gw.call_tool(&alice, "demo.list_notes", json!({}), None)
        .await
        .expect("alice may use all of demo");
    let err = gw
        .call_tool(&dave, "extra.echo", json!({ "message": "m" }), None)
        .await
        .expect_err("beta does not see extra");
    assert_eq!(err.code(), "not_found");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_hidden_tool_is_refused_exactly_like_a_missing_one() {
    let gw = access_gateway().await;
    let bob = member("acme", "bob", &[]);
    let args = json!({ "a": 1, "b": 2 });
    let hidden = gw
        .call_tool(&bob, "demo.add", args.clone(), None)
        .await
        .expect_err("hidden from bob");
    let missing = gw
        .call_tool(&bob, "demo.subtract", args.clone(), None)
        .await
        .expect_err("no such tool");
    assert_eq!(hidden.code(), "not_found");
    assert_eq!(missing.code(), "not_found");
    assert_eq!(
        hidden.to_string().replace("demo.add", "NAME"),
        missing.to_string().replace("demo.subtract", "NAME")
    );
    // By function name too.
    let by_function = gw
        .call_tool(&bob, "demo_add", args, None)
        .await
        .expect_err("hidden by either name");
    assert_eq!(by_function.code(), "not_found");

    // The audit trail does not tell them apart either: no server, no fingerprint.
    let records = gw
        .audit_store()
        .query(AuditQuery {
            user: Some("bob".into()),
            outcome: Some("not_found".into()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    assert_eq!(records.len(), 3);
    for (_, record) in &records {
        assert_eq!(record.server, "", "{record:?}");
        assert_eq!(record.fingerprint, None, "{record:?}");
        assert_eq!(record.decision, "denied");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn an_unknown_tenant_sees_and_calls_nothing() {
    let gw = access_gateway().await;
    let stranger = member("nobody", "alice", &["analyst"]);
    assert!(gw.list_tools(&stranger).await.is_empty());
    assert!(gw.model_tools(&stranger).await.is_empty());
    let err = gw
        .call_tool(&stranger, "demo.echo", json!({ "message": "m" }), None)
        .await
        .expect_err("an unknown tenant is refused");
    assert_eq!(err.code(), "not_found");
    // The tool exists for others.
    assert_eq!(gw.catalog().len(), 12);
    gw.shutdown().await;
}

#[tokio::test]
async fn allow_and_deny_lists_hide_tools_from_the_catalog() {
    let mut listed = demo("listed");
    listed.allowed_tools = Some(names(&["echo", "add", "add_note"]));
    // Deny wins over allow.
    listed.denied_tools = names(&["add_note"]);
    let mut denied = demo("denied");
    denied.denied_tools = names(&["echo", "delete_note"]);
    let gw = gateway(config(vec![listed, denied])).await;
    let who = caller("bob");
    assert_eq!(
        canonical_ids(gw.catalog().tools()),
        [
            "denied.add",
            "denied.add_note",
            "denied.list_notes",
            "denied.time_now",
            "listed.add",
            "listed.echo",
        ]
    );
    assert_eq!(
        canonical_ids(&gw.model_tools(&who).await),
        canonical_ids(gw.catalog().tools())
    );
    for hidden in ["listed.time_now", "listed.add_note", "denied.echo"] {
        let err = gw
            .call_tool(&who, hidden, json!({ "message": "m" }), None)
            .await
            .expect_err("not exposed");
        assert_eq!(err.code(), "not_found", "{hidden}");
    }
    let out = gw
        .call_tool(&who, "listed.echo", json!({ "message": "m" }), None)
        .await
        .expect("allowed");
    assert_eq!(out.text(), "Echo: m");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_conversation_selects_only_servers_its_caller_may_use() {
    use mcpgate::gateway::SelectionError;
    let gw = access_gateway().await;
    let ids = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let acme = member("acme", "bob", &[]);
    let beta = member("beta", "carol", &[]);
    let chosen = gw
        .selectable_servers(&acme, &ids(&["extra", "demo", "extra"]))
        .await
        .expect("acme sees both");
    assert_eq!(chosen, [id("extra"), id("demo")], "in order, once each");
    assert_eq!(
        gw.selectable_servers(&beta, &ids(&["demo"])).await,
        Ok(vec![id("demo")])
    );
    // Hidden, unknown and malformed ids are refused alike, naming the id (cut, printable).
    for (asked, shown) in [
        ("extra", "extra"),
        ("nope", "nope"),
        ("Bad Id\n", "Bad?Id?"),
    ] {
        assert_eq!(
            gw.selectable_servers(&beta, &ids(&["demo", asked])).await,
            Err(SelectionError::UnknownServer(shown.to_owned())),
            "{asked:?}"
        );
    }
    let many = vec!["demo".to_owned(); mcpgate::gateway::MAX_SELECTED_SERVERS + 1];
    assert_eq!(
        gw.selectable_servers(&acme, &many).await,
        Err(SelectionError::TooMany)
    );
    gw.shutdown().await;
}
