//! An MCP session across a reload: it hears `tools/list_changed`, sees and calls the new
//! gateway's tools, and does not keep the old gateway alive.

use std::sync::{Arc, atomic::Ordering};

use axum::http::{Method, StatusCode};
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
        ProtocolVersion,
    },
    service::{ClientLifecycleMode, ClientServiceExt as _, NotificationContext},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::{net::TcpListener, sync::watch};

use super::reload::{RELOAD, Reloadable, demo_server, file_with};
use crate::support::{WAIT, wait_for};

/// Counts the `tools/list_changed` notifications it hears.
#[derive(Clone)]
pub(crate) struct Watcher {
    pub(crate) changes: Arc<watch::Sender<usize>>,
}

impl ClientHandler for Watcher {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("watcher", "0"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.changes.send_modify(|n| *n += 1);
    }
}

#[tokio::test]
async fn an_mcp_session_follows_a_reload() {
    let service = Reloadable::start().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let state = service.harness.state.clone();
    let task = tokio::spawn(mcpgate::server::serve(listener, state, async {
        let _ = stopped.await;
    }));
    let watcher = Watcher {
        changes: Arc::new(watch::channel(0).0),
    };
    let mut changes = watcher.changes.subscribe();
    let token = service.harness.token.clone().expect("dev token");
    let config = StreamableHttpClientTransportConfig::with_uri(format!("http://{addr}/mcp"))
        .auth_header(token);
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let session = tokio::time::timeout(
        WAIT,
        watcher.serve_with_lifecycle(transport, ClientLifecycleMode::Initialize),
    )
    .await
    .expect("handshake in time")
    .expect("handshake");
    let names = async || -> Vec<String> {
        let tools = session.list_all_tools().await.expect("tools/list");
        tools.iter().map(|t| t.name.to_string()).collect()
    };
    assert_eq!(names().await, ["held_ping", "held_wait"]);

    service.write(&file_with(&demo_server("demo")));
    let reply = service.harness.send(Method::POST, RELOAD, None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    tokio::time::timeout(WAIT, changes.wait_for(|n| *n >= 1))
        .await
        .expect("the session hears of the reload")
        .expect("the client is alive");
    let tools = names().await;
    assert!(tools.contains(&"demo_echo".to_owned()), "{tools:?}");
    assert!(tools.iter().all(|t| t.starts_with("demo_")), "{tools:?}");
    let mut arguments = JsonObject::new();
    arguments.insert("message".into(), "after".into());
    let result = session
        .call_tool(CallToolRequestParams::new("demo_echo").with_arguments(arguments))
        .await
        .expect("tools/call");
    let text = result.content[0].as_text().expect("text").text.clone();
    assert_eq!(text, "Echo: after");
    // The session's follower looks the gateway up each time; it holds no old one open.
    wait_for("the old gateway to close its upstream", || {
        service.closed.load(Ordering::SeqCst).then_some(())
    })
    .await;

    let _ = session.cancel().await;
    let _ = stop.send(());
    let _ = tokio::time::timeout(WAIT, task).await;
    service.harness.stop().await;
}
