//! The embedding API: in-process, stdio and HTTP servers through `ToolSet`.

use mcpgate::{
    fixtures::demo::DemoServer,
    toolset::{ServerSpec, ToolSet, ToolSetError},
};
use serde_json::json;

use crate::support::{everything_http, mcpgate_bin};

fn demo() -> ServerSpec {
    ServerSpec::in_process(DemoServer::new())
        .id("demo")
        .expect("valid id")
}

#[tokio::test]
async fn in_process_server_lists_and_calls() {
    let tools = ToolSet::connect(demo()).await.expect("connects");
    assert_eq!(tools.len(), 6);
    assert!(tools.server_url().is_none());
    let fingerprints = tools.fingerprints();
    assert_eq!(fingerprints.len(), 6);
    assert!(fingerprints.values().all(|fp| fp.len() == 64));
    let sum = tools
        .call("demo_add", json!({ "a": 2, "b": 3 }))
        .await
        .expect("add");
    assert!(sum.text().contains('5'), "{}", sum.text());
    tools.close().await;
}

#[tokio::test]
async fn allowlist_and_confirm_all_apply() {
    let spec = demo().allowed_tools(["echo", "add_note"]).confirm_all(true);
    let tools = ToolSet::connect(spec).await.expect("connects");
    assert_eq!(tools.len(), 2);
    assert!(tools.requires_confirmation("add_note"));
    let refused = tools
        .call("add_note", json!({ "title": "t", "body": "b" }))
        .await;
    assert!(
        matches!(refused, Err(ToolSetError::ConfirmationRequired(_))),
        "{refused:?}"
    );
    tools
        .call_confirmed("add_note", json!({ "title": "t", "body": "b" }))
        .await
        .expect("confirmed call runs");
    let hidden = tools.call_confirmed("list_notes", json!({})).await;
    assert!(
        matches!(hidden, Err(ToolSetError::Call(ref e)) if e.code() == "not_found"),
        "{hidden:?}"
    );
    tools.close().await;
}

#[tokio::test]
async fn known_fingerprints_flag_changed_definitions() {
    let first = ToolSet::connect(demo()).await.expect("connects");
    let mut known = first.fingerprints();
    first.close().await;
    known.insert("echo".to_owned(), "0".repeat(64));
    let again = ToolSet::connect(demo().known_fingerprints(known))
        .await
        .expect("connects");
    assert_eq!(again.changed_tools(), ["echo".to_owned()]);
    again.close().await;
}

#[tokio::test]
async fn stdio_server_by_command() {
    let bin = mcpgate_bin();
    let spec = ServerSpec::command(&bin.to_string_lossy(), ["demo-server"])
        .id("demo")
        .expect("id");
    let tools = ToolSet::connect(spec).await.expect("connects");
    let reply = tools
        .call("echo", json!({ "message": "stdio" }))
        .await
        .expect("echo");
    assert_eq!(reply.text(), "Echo: stdio");
    tools.close().await;
}

#[tokio::test]
async fn private_addresses_need_allow_private() {
    let peer = everything_http("streamableHttp").await;
    let url = format!("http://127.0.0.1:{}/mcp", peer.port);
    let refused = ToolSet::connect(ServerSpec::url(&url).expect("url").allow_http(true)).await;
    let Err(ToolSetError::Connect(reason)) = refused else {
        panic!("a loopback server must be refused without allow_private");
    };
    assert!(reason.contains("loopback"), "{reason}");

    let spec = ServerSpec::url(&url)
        .expect("url")
        .allow_http(true)
        .allow_private(true);
    let tools = ToolSet::connect(spec).await.expect("connects");
    assert_eq!(tools.server_url().map(|u| u.as_str()), Some(url.as_str()));
    assert_eq!(tools.len(), crate::peers::EVERYTHING_TOOLS);
    tools.close().await;
}
