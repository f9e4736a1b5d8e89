//! The gateway against real peers: npm server-everything over stdio, Streamable HTTP and
//! legacy SSE (and `auto` falling back to SSE), server-memory and PyPI mcp-server-time.

use mcpgate::{config::HttpKind, gateway::Gateway, upstream::ServerState};
use serde_json::json;

use crate::support::{
    self, CallExt as _, config, everything_http, everything_js, gateway, http, stdio,
};

/// server-everything's tool count (2026.8.31): its 13 tools, plus the sampling and
/// elicitation tools it offers to clients that declare those capabilities, as the gateway
/// does (it relays such requests to the calling MCP client).
pub const EVERYTHING_TOOLS: usize = 15;

async fn assert_everything(gateway: &Gateway, server: &str, transport: &str) {
    let status = gateway.servers().into_iter().next().expect("one server");
    assert_eq!(status.state, ServerState::Ready, "{:?}", status.last_error);
    assert_eq!(status.transport, Some(transport));
    let catalog = gateway.catalog();
    assert_eq!(catalog.len(), EVERYTHING_TOOLS);
    let echo = format!("{server}.echo");
    assert!(catalog.by_canonical(&echo).is_some());
    let output = gateway
        .call(&echo, json!({ "message": "hi" }))
        .await
        .expect("echo works");
    assert_eq!(output.text(), "Echo: hi");
    // The function name reaches the same tool.
    let output = gateway
        .call(&format!("{server}_echo"), json!({ "message": "again" }))
        .await
        .expect("echo by function name");
    assert_eq!(output.text(), "Echo: again");
}

#[tokio::test]
async fn everything_over_stdio() {
    let js = everything_js();
    let gw = gateway(config(vec![stdio("everything", "node", &[&js, "stdio"])])).await;
    assert_everything(&gw, "everything", "stdio").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn everything_over_streamable_http() {
    let peer = everything_http("streamableHttp").await;
    let url = format!("http://127.0.0.1:{}/mcp", peer.port);
    let gw = gateway(config(vec![http("everything", &url, HttpKind::Streamable)])).await;
    assert_everything(&gw, "everything", "streamable-http").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn everything_over_legacy_sse() {
    let peer = everything_http("sse").await;
    let url = format!("http://127.0.0.1:{}/sse", peer.port);
    let gw = gateway(config(vec![http("everything", &url, HttpKind::Sse)])).await;
    assert_everything(&gw, "everything", "sse").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn auto_falls_back_to_sse() {
    let peer = everything_http("sse").await;
    let url = format!("http://127.0.0.1:{}/sse", peer.port);
    let gw = gateway(config(vec![http("everything", &url, HttpKind::Auto)])).await;
    assert_everything(&gw, "everything", "sse").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn auto_prefers_streamable_http() {
    let peer = everything_http("streamableHttp").await;
    let url = format!("http://127.0.0.1:{}/mcp", peer.port);
    let gw = gateway(config(vec![http("everything", &url, HttpKind::Auto)])).await;
    assert_everything(&gw, "everything", "streamable-http").await;
    gw.shutdown().await;
}

#[tokio::test]
async fn server_memory_over_stdio() {
    let js = support::npm_package("@modelcontextprotocol/server-memory").join("dist/index.js");
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = stdio("memory", "node", &[&js.to_string_lossy()]);
    if let mcpgate::config::TransportConfig::Stdio(s) = &mut server.transport {
        let file = dir
            .path()
            .join("memory.jsonl")
            .to_string_lossy()
            .into_owned();
        s.env.push((
            "MEMORY_FILE_PATH".into(),
            mcpgate::config::SecretTemplate::new(file),
        ));
    }
    let gw = gateway(config(vec![server])).await;
    let catalog = gw.catalog();
    assert_eq!(catalog.len(), 9, "server-memory has 9 tools");
    gw.call(
        "memory.create_entities",
        json!({ "entities": [{ "name": "mcpgate", "entityType": "project", "observations": ["gateway"] }] }),
    )
    .await
    .expect("create_entities");
    let graph = gw
        .call("memory.read_graph", json!({}))
        .await
        .expect("read_graph");
    assert!(graph.text().contains("mcpgate"), "{}", graph.text());
    gw.shutdown().await;
}

#[tokio::test]
async fn mcp_server_time_over_stdio() {
    let bin = support::peers().join("venv/bin/mcp-server-time");
    let gw = gateway(config(vec![stdio(
        "time",
        &bin.to_string_lossy(),
        &["--local-timezone", "UTC"],
    )]))
    .await;
    assert!(gw.catalog().by_canonical("time.get_current_time").is_some());
    let now = gw
        .call("time.get_current_time", json!({ "timezone": "UTC" }))
        .await
        .expect("get_current_time");
    assert!(now.text().contains("UTC"), "{}", now.text());
    gw.shutdown().await;
}
