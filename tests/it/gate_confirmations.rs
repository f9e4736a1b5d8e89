//! Acceptance tests of write confirmations through `Gateway::call_tool` against real rmcp
//! upstreams: asking, approving and denying, single use under concurrency, what a token is
//! bound to, expiry, which tools need one, the audit record every attempt leaves; the same
//! call repeated after an approval out of band, and an MCP client that cannot ask, over HTTP.

mod binding;
mod classification;
mod expiry;
mod flow;
mod plain_client;
mod repeat;

use mcpgate::{
    config::ServerConfig,
    fixtures::{Fixture, demo::DemoServer, demo::READ_ONLY_TOOLS, handler},
    gateway::{Gateway, GatewayError, ToolOutput},
    policy::CallContext,
    store::{AuditQuery, AuditRecord, MAX_AUDIT_QUERY_LIMIT},
};
use serde_json::Value;

use crate::support;

/// The demo server in process as a gate test wants it: writes need confirmation, its read
/// tools are named as such.
fn demo(id: &str) -> ServerConfig {
    let mut server = support::in_process(id, DemoServer::new());
    server.read_only_tools = names(READ_ONLY_TOOLS);
    server
}

/// The `changing` fixture in process: `alpha` is a write (the default), `mutate` and `beta`
/// are declared read-only so a test can change `alpha` without a confirmation of its own.
fn changing(id: &str) -> ServerConfig {
    let fixture = handler(Fixture::Changing).expect("changing runs in process");
    let mut server = support::in_process(id, fixture);
    server.read_only_tools = names(&["beta", "mutate"]);
    server
}

/// The `slow` fixture in process: `sleep` is a write, its counters and `echo` are reads.
fn slow(id: &str) -> ServerConfig {
    let fixture = handler(Fixture::Slow).expect("slow runs in process");
    let mut server = support::in_process(id, fixture);
    server.read_only_tools = names(&["echo", "sleep_stats"]);
    server
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|name| (*name).to_owned()).collect()
}

fn caller(tenant: &str, user: &str, session: &str) -> CallContext {
    CallContext {
        tenant: tenant.into(),
        user: user.into(),
        session: session.into(),
        roles: vec![],
        request_id: format!("req-{user}-{session}"),
    }
}

/// Calls `tool` as `ctx` without a token, expects to be asked, and returns the confirmation id.
async fn ask(gateway: &Gateway, ctx: &CallContext, tool: &str, args: Value) -> String {
    match gateway.call_tool(ctx, tool, args, None).await {
        Err(GatewayError::ConfirmationRequired {
            confirmation_id, ..
        }) => confirmation_id,
        other => panic!("expected {tool} to need confirmation, got {other:?}"),
    }
}

/// Asks for `tool` with `args` as `ctx` and approves it as `ctx`: (confirmation id, token).
async fn approved(
    gateway: &Gateway,
    ctx: &CallContext,
    tool: &str,
    args: Value,
) -> (String, String) {
    let id = ask(gateway, ctx, tool, args).await;
    let approval = gateway
        .approve(ctx, &id)
        .await
        .expect("the asking caller may approve");
    assert_eq!(approval.confirmation_id, id);
    (id, approval.token)
}

/// The reason of a `confirmation_invalid` error; fails the test on any other outcome.
fn invalid_reason(result: Result<ToolOutput, GatewayError>) -> &'static str {
    match result {
        Err(GatewayError::ConfirmationInvalid { reason }) => reason,
        other => panic!("expected confirmation_invalid, got {other:?}"),
    }
}

/// Reason given for a token that is unknown, already used or expired.
const SPENT: &str = "unknown, already used or expired";
/// Whether deciding a confirmation found none waiting for the caller (unknown, decided,
/// expired or another caller's: one answer).
fn not_found<T>(result: &Result<T, GatewayError>) -> bool {
    matches!(result, Err(GatewayError::ConfirmationNotFound))
}

/// Every audit record of `ctx`'s tenant and user, newest first.
async fn records(gateway: &Gateway, ctx: &CallContext) -> Vec<AuditRecord> {
    let query = AuditQuery {
        tenant: Some(ctx.tenant.clone()),
        user: Some(ctx.user.clone()),
        limit: MAX_AUDIT_QUERY_LIMIT,
        ..AuditQuery::default()
    };
    let found = gateway
        .audit_store()
        .query(query)
        .await
        .expect("the memory audit store answers");
    found.into_iter().map(|(_, record)| record).collect()
}

/// Asserts that the newest audit record of `ctx` is about `tool` (for a decision on a
/// confirmation: the tool it was asked for) with this decision, outcome and confirmation id.
async fn assert_last_audit(
    gateway: &Gateway,
    ctx: &CallContext,
    tool: &str,
    decision: &str,
    outcome: &str,
    confirmation_id: Option<&str>,
) {
    let all = records(gateway, ctx).await;
    let last = all.first().expect("the attempt left an audit record");
    let seen = (
        last.tool.as_str(),
        last.decision.as_str(),
        last.outcome.as_str(),
        last.confirmation_id.as_deref(),
        last.session.as_str(),
    );
    let expected = (
        tool,
        decision,
        outcome,
        confirmation_id,
        ctx.session.as_str(),
    );
    assert_eq!(seen, expected, "newest audit record of {}", ctx.user);
}

/// The demo notes `ctx` can list through the gate, as (title, body).
async fn notes(gateway: &Gateway, ctx: &CallContext, server: &str) -> Vec<(String, String)> {
    let tool = format!("{server}.list_notes");
    let output = gateway
        .call_tool(ctx, &tool, Value::Null, None)
        .await
        .expect("list_notes is a read and runs without confirmation");
    let structured = output.structured.expect("list_notes answers structured");
    structured["notes"]
        .as_array()
        .expect("notes is an array")
        .iter()
        .map(|note| {
            let field = |name: &str| note[name].as_str().unwrap_or_default().to_owned();
            (field("title"), field("body"))
        })
        .collect()
}
