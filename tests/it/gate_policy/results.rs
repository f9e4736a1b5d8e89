//! What comes back, and what never goes out: oversized results (typed error or marked
//! truncation), argument size and schema checks before the upstream, per-tool timeouts that
//! cancel the upstream call, and `isError` results.

use std::time::Duration;

use mcpgate::{
    config::{Config, Confirm, ResultOverflow, ServerConfig},
    gateway::{Gateway, GatewayError},
    store::{AuditQuery, AuditRecord},
};
use serde_json::json;

use super::{call_confirmed, caller, demo, eventually, names, sleep_stats, slow};
use crate::support::{CallExt as _, config, ctx, everything_js, gateway, in_process, stdio};

/// The result limit under test: small, and at least the 1 KiB config allows.
const RESULT_LIMIT: usize = 1024;

/// server-everything over stdio, gated like a real deployment: `echo` marked read-only.
fn everything() -> ServerConfig {
    let js = everything_js();
    let mut server = stdio("everything", "node", &[&js, "stdio"]);
    server.confirm = Confirm::Writes;
    server.read_only_tools = names(&["echo"]);
    server
}

/// A message several times the limit, with multi-byte characters so a cut must respect
/// character boundaries.
fn long_message() -> String {
    "héllo wörld ✓ ".repeat(300)
}

fn oversize_config(overflow: ResultOverflow) -> Config {
    let mut cfg = config(vec![demo("demo"), everything()]);
    cfg.limits.max_result_bytes = RESULT_LIMIT;
    cfg.call_limits.result_overflow = overflow;
    cfg
}

#[tokio::test]
async fn an_oversized_result_is_a_typed_error() {
    let gw = gateway(oversize_config(ResultOverflow::Error)).await;
    for tool in ["demo.echo", "everything.echo"] {
        let err = gw
            .call(tool, json!({ "message": long_message() }))
            .await
            .expect_err("over the result limit");
        assert_eq!(err.code(), "result_too_large", "{tool}: {err}");
        let GatewayError::ResultTooLarge { size, limit } = err else {
            panic!("{tool}: {err:?}");
        };
        assert_eq!(limit, RESULT_LIMIT);
        assert!(size > RESULT_LIMIT, "{tool}: {size}");
        // A result within the limit is untouched.
        let out = gw
            .call(tool, json!({ "message": "short" }))
            .await
            .expect("within the limit");
        assert_eq!(out.text(), "Echo: short");
        assert!(!out.truncated);
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn an_oversized_result_is_cut_and_marked_under_truncate() {
    let gw = gateway(oversize_config(ResultOverflow::Truncate)).await;
    let full = format!("Echo: {}", long_message());
    for tool in ["demo.echo", "everything.echo"] {
        let out = gw
            .call(tool, json!({ "message": long_message() }))
            .await
            .expect("cut, not refused");
        assert!(out.truncated, "{tool}");
        assert!(out.size() <= RESULT_LIMIT, "{tool}: {} bytes", out.size());
        let text = out.text();
        assert!(!text.is_empty(), "{tool}: something is kept");
        assert!(full.starts_with(&text), "{tool}: not a prefix: {text}");
        assert_eq!(out.to_json()["data"]["truncated"], true, "{tool}");
    }
    gw.shutdown().await;
}

#[tokio::test]
async fn oversized_arguments_are_refused_before_the_upstream() {
    let mut cfg = config(vec![demo("demo")]);
    cfg.call_limits.max_argument_bytes = 1024;
    let gw = gateway(cfg).await;
    let err = gw
        .call(
            "demo.add_note",
            json!({ "title": "big", "body": "x".repeat(2000) }),
        )
        .await
        .expect_err("over the argument limit");
    assert_eq!(err.code(), "invalid_arguments", "{err}");
    assert!(err.to_string().contains("limit of 1024"), "{err}");
    // Refused before the confirmation step: nobody is asked to approve it.
    let pending = gw.pending_confirmations(&ctx()).await.expect("pending");
    assert!(pending.is_empty(), "{pending:?}");
    // A note that fits goes through, and only it reached the server.
    call_confirmed(
        &gw,
        &ctx(),
        "demo.add_note",
        json!({ "title": "small", "body": "fits" }),
    )
    .await;
    let notes = gw.call("demo.list_notes", json!({})).await.expect("list");
    assert_eq!(
        notes.structured.expect("structured")["notes"],
        json!([{ "title": "small", "body": "fits" }])
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn schema_violations_name_the_field_and_never_reach_the_upstream() {
    let gw = gateway(config(vec![slow()])).await;
    let cases = [
        (json!({}), "\"ms\" is a required property"),
        (json!({ "ms": "soon" }), "/ms"),
        (json!({ "ms": 1.5 }), "/ms"),
        (json!({ "ms": 5, "extra": true }), "'extra'"),
        (json!(["ms", 5]), "not an array"),
    ];
    for (args, field) in cases {
        let err = gw
            .call("slow.sleep", args.clone())
            .await
            .expect_err("invalid arguments");
        assert_eq!(err.code(), "invalid_arguments", "{args}: {err}");
        assert!(err.to_string().contains(field), "{args}: {err}");
    }
    let stats = sleep_stats(&gw, &ctx()).await;
    assert_eq!(
        stats.started, 0,
        "the upstream saw a refused call: {stats:?}"
    );
    // The same tool with valid arguments does reach it.
    let out = gw
        .call("slow.sleep", json!({ "ms": 0 }))
        .await
        .expect("valid");
    assert_eq!(out.text(), "slept 0");
    assert_eq!(sleep_stats(&gw, &ctx()).await.started, 1);
    gw.shutdown().await;
}

/// Aborts `task`, as a caller going away does (an HTTP client disconnecting drops the
/// handler's future), then waits for the one record of what it had asked, `abandoned`.
async fn abandon<T>(gw: &Gateway, task: tokio::task::JoinHandle<T>) -> AuditRecord {
    task.abort();
    assert!(task.await.is_err_and(|e| e.is_cancelled()));
    let records = eventually("the abandoned request's record", || async {
        let records = gw
            .audit_store()
            .query(AuditQuery {
                outcome: Some("abandoned".into()),
                ..AuditQuery::default()
            })
            .await
            .expect("audit query");
        (!records.is_empty()).then_some(records)
    })
    .await;
    assert_eq!(records.len(), 1, "{records:?}");
    records
        .into_iter()
        .next()
        .map(|(_, record)| record)
        .expect("one record")
}

#[tokio::test]
async fn a_call_whose_caller_goes_away_is_still_audited() {
    let gw = gateway(config(vec![slow()])).await;
    let sleeper = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.call("slow.sleep", json!({ "ms": 10_000 })).await })
    };
    eventually("the upstream to start the sleep", || async {
        (sleep_stats(&gw, &caller("bob")).await.started == 1).then_some(())
    })
    .await;
    let record = abandon(&gw, sleeper).await;
    assert_eq!(
        (record.tool.as_str(), record.decision.as_str()),
        ("slow.sleep", "allowed"),
        "{record:?}"
    );
    assert_eq!(
        (record.user.as_str(), record.server.as_str()),
        (ctx().user.as_str(), "slow")
    );
    assert!(record.fingerprint.is_some(), "{record:?}");
    let stats = eventually("the upstream to see the cancellation", || async {
        let stats = sleep_stats(&gw, &caller("bob")).await;
        (stats.cancelled == 1).then_some(stats)
    })
    .await;
    assert_eq!((stats.completed, stats.in_flight), (0, 0), "{stats:?}");
    gw.shutdown().await;
}

#[tokio::test]
async fn a_per_tool_timeout_cancels_the_upstream_call_and_spares_the_server() {
    let mut server = slow();
    let deadline = Duration::from_millis(300);
    server.tool_timeouts = vec![("sleep".to_owned(), deadline)];
    let gw = gateway(config(vec![server])).await;

    let sleeper = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.call("slow.sleep", json!({ "ms": 10_000 })).await })
    };
    // Another call on the same connection answers while the sleep is pending.
    let out = gw
        .call_tool(
            &caller("bob"),
            "slow.echo",
            json!({ "message": "hi" }),
            None,
        )
        .await
        .expect("echo answers");
    assert_eq!(out.text(), "Echo: hi");
    assert!(
        !sleeper.is_finished(),
        "echo should answer before the sleep's deadline"
    );

    let err = sleeper
        .await
        .expect("no panic")
        .expect_err("the sleep times out");
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(matches!(err, GatewayError::Timeout { after } if after == deadline));
    let stats = eventually("the upstream to see the cancellation", || async {
        let stats = sleep_stats(&gw, &ctx()).await;
        (stats.cancelled == 1).then_some(stats)
    })
    .await;
    assert_eq!(
        (stats.started, stats.completed, stats.in_flight),
        (1, 0, 0),
        "{stats:?}"
    );
    let timeouts = gw
        .audit_store()
        .query(AuditQuery {
            tool: Some("slow.sleep".into()),
            outcome: Some("timeout".into()),
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    assert_eq!(timeouts.len(), 1);
    assert_eq!(timeouts[0].1.decision, "allowed");
    gw.shutdown().await;
}

#[tokio::test]
async fn an_is_error_result_is_a_tool_error() {
    let gw = gateway(config(vec![demo("demo")])).await;
    let err = gw
        .call("demo.time_now", json!({ "timezone": "Europe/Paris" }))
        .await
        .expect_err("only UTC is supported");
    assert_eq!(err.code(), "tool_error");
    let GatewayError::ToolError { message } = &err else {
        panic!("{err:?}");
    };
    assert!(message.contains("Europe/Paris"), "{message}");
    assert!(message.contains("not supported"), "{message}");
    // The same tool succeeds when asked for what it supports.
    let out = gw
        .call("demo.time_now", json!({ "timezone": "UTC" }))
        .await
        .expect("UTC works");
    assert!(out.text().ends_with('Z'), "{}", out.text());
    gw.shutdown().await;
}

/// A server whose one resource is never answered; counts the reads it got.
#[derive(Clone, Default)]
struct Stuck {
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl rmcp::ServerHandler for Stuck {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(
            rmcp::model::ServerCapabilities::builder()
                .enable_resources()
                .build(),
        )
    }

    async fn list_resources(
        &self,
        _request: Option<rmcp::model::PaginatedRequestParams>,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ListResourcesResult, rmcp::ErrorData> {
        let resource = rmcp::model::Resource::new("stuck://r", "r");
        Ok(rmcp::model::ListResourcesResult::with_all_items(vec![
            resource,
        ]))
    }

    async fn read_resource(
        &self,
        _request: rmcp::model::ReadResourceRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleServer>,
    ) -> Result<rmcp::model::ReadResourceResponse, rmcp::ErrorData> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_resource_read_whose_caller_goes_away_is_still_audited() {
    let stuck = Stuck::default();
    let gw = gateway(config(vec![in_process("stuck", stuck.clone())])).await;
    let reader = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.read_resource(&ctx(), None, "stuck://r").await })
    };
    eventually("the upstream to get the read", || async {
        (stuck.reads.load(std::sync::atomic::Ordering::SeqCst) == 1).then_some(())
    })
    .await;
    let record = abandon(&gw, reader).await;
    assert_eq!(
        (record.server.as_str(), record.decision.as_str()),
        ("stuck", "allowed"),
        "{record:?}"
    );
    assert!(record.tool.contains("stuck://r"), "{record:?}");
    gw.shutdown().await;
}
