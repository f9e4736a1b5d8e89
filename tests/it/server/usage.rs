//! `GET /api/v1/usage` over real HTTP with two tenants: sums per user and tool with errors
//! and confirmations, each caller's scope (a tenant's admin, a user, an operator), refusals;
//! and `mcpgate usage` reading the binary's own SQLite file after it served calls.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{
    Service, jwt_auth,
    tenants::{token, two_tenants},
};
use crate::support::{ServedBinary, mcpgate_bin};

fn group<'a>(report: &'a Value, fields: &[(&str, &str)]) -> &'a Value {
    report["calls"]
        .as_array()
        .and_then(|groups| {
            groups
                .iter()
                .find(|g| fields.iter().all(|(k, v)| g[*k] == *v))
        })
        .unwrap_or_else(|| panic!("no group {fields:?} in {report}"))
}

#[tokio::test]
async fn usage_sums_calls_per_group_within_each_callers_scope() {
    let service = Service::start(two_tenants(), jwt_auth()).await;
    let ann = token("a", "ann", &[]);
    let bob = token("a", "bob", &[]);
    let admin = token("a", "root", &["admin"]);
    let other = token("b", "cy", &[]);
    let operator = token("ops", "op", &["operator"]);
    let call = |tool: &str, arguments: Value| json!({ "tool": tool, "arguments": arguments });
    for _ in 0..2 {
        let (status, body) = service
            .post_as(
                &ann,
                "/api/v1/mcp/tools/call",
                call("alpha.echo", json!({ "message": "hi" })),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (status, _) = service
        .post_as(
            &ann,
            "/api/v1/mcp/tools/call",
            call("alpha.add", json!({ "a": "x" })),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let id = service.ask_as(&bob, "alpha").await;
    let (status, _) = service
        .post_as(
            &bob,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) = service
        .post_as(
            &other,
            "/api/v1/mcp/tools/call",
            call("beta.echo", json!({ "message": "b" })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);

    // A tenant's admin: its tenant, by user and tool.
    let (status, report) = service
        .get_as(&admin, "/api/v1/usage?groupBy=user,tool&since=1d")
        .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "a duration is the CLI's: {report}"
    );
    let (status, report) = service
        .get_as(&admin, "/api/v1/usage?group_by=user,tool")
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let echo = group(&report, &[("user", "ann"), ("tool", "alpha.echo")]);
    assert_eq!((&echo["calls"], &echo["errors"]), (&json!(2), &json!(0)));
    assert!(echo["latencyMs"]["p50"].is_number(), "{echo}");
    let add = group(&report, &[("user", "ann"), ("tool", "alpha.add")]);
    assert_eq!((&add["calls"], &add["errors"]), (&json!(1), &json!(1)));
    assert_eq!(
        add["errorsByCode"],
        json!([{ "code": "invalid_arguments", "count": 1 }]),
        "{add}"
    );
    let note = group(&report, &[("user", "bob"), ("tool", "alpha.add_note")]);
    assert_eq!(
        note["confirmations"],
        json!({ "asked": 1, "approved": 1, "denied": 0 })
    );
    assert!(
        !report.to_string().contains("beta."),
        "another tenant's calls: {report}"
    );
    // Asking for another tenant gets nothing.
    let (_, report) = service
        .get_as(&admin, "/api/v1/usage?groupBy=tenant&tenant=b")
        .await;
    assert_eq!(report["totals"]["calls"], 0, "{report}");

    // A user: their own usage only.
    let (status, report) = service.get_as(&ann, "/api/v1/usage?groupBy=user").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        report["calls"].as_array().map(Vec::len),
        Some(1),
        "{report}"
    );
    assert_eq!(report["calls"][0]["user"], "ann");
    let (_, report) = service.get_as(&ann, "/api/v1/usage?user=bob").await;
    assert_eq!(report["totals"]["calls"], 0);

    // An operator: every tenant.
    let (_, report) = service
        .get_as(&operator, "/api/v1/usage?groupBy=tenant&interval=day")
        .await;
    assert_eq!(group(&report, &[("tenant", "a")])["calls"], 3, "{report}");
    assert_eq!(group(&report, &[("tenant", "b")])["calls"], 1);
    assert!(
        report["calls"][0]["time"]
            .as_str()
            .is_some_and(|t| t.ends_with("T00:00:00Z"))
    );

    for bad in [
        "groupBy=colour",
        "interval=week",
        "since=2026-01-01T00:00:00Z&until=2025-01-01T00:00:00Z",
        "since=2020-01-01T00:00:00Z",
        "interval=hour&since=2026-01-01T00:00:00Z&until=2026-03-01T00:00:00Z",
        "surprise=1",
    ] {
        let (status, body) = service
            .get_as(&operator, &format!("/api/v1/usage?{bad}"))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    service.stop().await;
}

/// The binary on its embedded defaults (SQLite in its folder) serves calls; `mcpgate usage`
/// then reads the same file, folding what the gateway had not yet.
#[tokio::test]
async fn the_cli_reads_usage_from_the_gateways_sqlite_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    let served = ServedBinary::start(dir.path(), None, &[]).await;
    served.wait_ready().await;
    let token = served.token.clone().expect("a dev token");
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    for arguments in [
        json!({ "message": "a" }),
        json!({ "message": "b" }),
        json!({ "nope": 1 }),
    ] {
        client
            .post(format!("{}/api/v1/mcp/tools/call", served.base))
            .bearer_auth(&token)
            .json(&json!({ "tool": "demo.echo", "arguments": arguments }))
            .send()
            .await
            .expect("call");
    }
    assert!(served.stop().await.success());
    let usage = |args: &[&str]| {
        let mut command = std::process::Command::new(mcpgate_bin());
        command.current_dir(dir.path()).arg("usage").args(args);
        command.output().expect("mcpgate usage runs")
    };
    let out = usage(&["--json", "--group-by", "tool"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let echo = group(&report, &[("tool", "demo.echo")]);
    assert_eq!(
        (&echo["calls"], &echo["errors"]),
        (&json!(3), &json!(1)),
        "{report}"
    );
    let out = usage(&["--group-by", "user,tool", "--since", "1h"]);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && table.contains("demo.echo"),
        "{table}"
    );
    assert!(table.contains("3 calls, 1 errors"), "{table}");
}
