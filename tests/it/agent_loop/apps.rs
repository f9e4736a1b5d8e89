//! An MCP App's own tools (`_meta.ui.visibility` without `model`) are never offered to the
//! model, nor run when it names one; the App's other tools are.

use std::sync::Arc;

use mcpgate::config::{Confirm, InProcess, ServerConfig, ServerId, TransportConfig};
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt as _,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ListToolsResult,
        MetaObject, PaginatedRequestParams, ServerCapabilities, Tool,
    },
    service::RequestContext,
};
use serde_json::{Value, json};

use super::{Harness, call_id, offered, tool_error};
use crate::scripted_llm::Reply;

fn tool(name: &'static str, visibility: Value) -> Tool {
    let schema = json!({ "type": "object" })
        .as_object()
        .cloned()
        .expect("object");
    let mut tool = Tool::new_with_raw(name, Some("Part of an app.".into()), Arc::new(schema));
    let meta = json!({ "ui": { "resourceUri": "ui://apps/view.html", "visibility": visibility } });
    tool.meta = Some(MetaObject(meta.as_object().cloned().expect("object")));
    tool
}

#[derive(Clone)]
struct App;

impl ServerHandler for App {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _: Option<PaginatedRequestParams>,
        _: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(vec![
            tool("get_time", json!(["model", "app"])),
            tool("poll_stats", json!(["app"])),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = format!("{} ran", request.name);
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

fn app_server() -> ServerConfig {
    let factory = || {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            if let Ok(running) = App.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        client
    };
    let mut server = ServerConfig::new(
        ServerId::new("apps").expect("an id"),
        TransportConfig::InProcess(InProcess(Arc::new(factory))),
    );
    server.confirm = Confirm::None;
    server
}

#[tokio::test]
async fn an_apps_own_tools_are_never_offered_to_the_model() {
    let harness = Harness::with(
        vec![
            Reply::tool_calls(&[("apps_poll_stats", json!({}))]),
            Reply::text("done"),
        ],
        |config| config.servers.insert(0, app_server()),
    )
    .await;
    let events = harness.turn("what time is it?").await;
    let first = harness.request(0);
    let offered = offered(&first);
    assert!(offered.contains(&"apps_get_time"), "{offered:?}");
    assert!(!offered.contains(&"apps_poll_stats"), "{offered:?}");
    let preamble = first["messages"][0]["content"].as_str().expect("text");
    assert!(!preamble.contains("poll_stats"), "{preamble}");
    // Named anyway, it does not run: to the model it is no tool at all.
    let named = call_id(&events, "apps_poll_stats");
    assert_eq!(tool_error(&events, &named).0, "not_found");
    // Through the gate (as an App host's call would come) it runs.
    assert_eq!(
        harness.call("apps.poll_stats", json!({})).await,
        json!("poll_stats ran")
    );
    harness.stop().await;
}
