//! Real MCP Apps servers behind the gateway: npm `server-basic-vanillajs` (`get-time` and its
//! view) and `server-system-monitor` (a model's tool, an app-only poller and their view), over
//! stdio. An rmcp client declaring the extension sees through `/mcp/{server}` exactly what it
//! sees connected to the server itself (tools' `_meta`, visibility and output schema, the
//! view's listing and its read, byte for byte), and through `/mcp` the same under the merged
//! view's names and `ui://<server>/` URIs.

use std::{net::SocketAddr, process::Stdio, sync::Arc};

use mcpgate::{
    config::{AuthConfig, ServiceConfig},
    gateway::{Gateway, apps},
    server::{AppState, auth::Authenticator},
};
use rmcp::{
    ClientHandler, RoleClient, ServiceExt as _,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
        ReadResourceRequestParams, Resource, Tool,
    },
    service::RunningService,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, process::Command};

use crate::support::{self, WAIT};

/// A client that renders MCP Apps views, as Claude or VS Code declare it.
#[derive(Clone)]
struct AppHost;

impl ClientHandler for AppHost {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.extensions = Some(apps::client_extensions());
        ClientConfig::new(capabilities, Implementation::new("app-host", "0"))
    }
}

type Client = RunningService<RoleClient, AppHost>;

/// An app server's entry point.
pub(crate) fn server_js(package: &str) -> String {
    support::npm_package(&format!("@modelcontextprotocol/{package}"))
        .join("dist/index.js")
        .to_string_lossy()
        .into_owned()
}

/// The server itself, over its stdio, as an app host connects to it.
async fn direct(package: &str) -> Client {
    let mut child = Command::new("node")
        .args([server_js(package).as_str(), "--stdio"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let stdout = child.stdout.take().expect("stdout");
    let stdin = child.stdin.take().expect("stdin");
    // The child lives as long as the client's task: dropped with it.
    let client = tokio::time::timeout(WAIT, AppHost.serve((stdout, stdin)))
        .await
        .expect("handshake in time")
        .expect("handshake");
    tokio::spawn(async move {
        let _ = child.wait().await;
    });
    client
}

/// The gateway in front of both servers, served on 127.0.0.1:0 with dev authentication.
struct Service {
    addr: SocketAddr,
    token: String,
    gateway: Gateway,
    served: support::Served,
}

impl Service {
    async fn start() -> Service {
        let basic = server_js("server-basic-vanillajs");
        let monitor = server_js("server-system-monitor");
        let config = support::config(vec![
            support::stdio("basic", "node", &[&basic, "--stdio"]),
            support::stdio("monitor", "node", &[&monitor, "--stdio"]),
        ]);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let auth = AuthConfig::Dev;
        let authenticator = Authenticator::new(&auth, &Default::default(), addr, false)
            .await
            .expect("auth");
        let token = authenticator.dev_token().expect("a dev token").to_owned();
        let service = Arc::new(ServiceConfig {
            listen: addr,
            auth,
            ..ServiceConfig::default()
        });
        let gateway = support::gateway(config).await;
        let state = AppState::new(gateway.clone(), Arc::new(authenticator), service);
        let served = support::Served::spawn(listener, state);
        Service {
            addr,
            token,
            gateway,
            served,
        }
    }

    async fn connect(&self, path: &str) -> Client {
        let config =
            StreamableHttpClientTransportConfig::with_uri(format!("http://{}{path}", self.addr))
                .auth_header(self.token.clone());
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let transport = StreamableHttpClientTransport::with_client(http, config);
        tokio::time::timeout(WAIT, AppHost.serve(transport))
            .await
            .expect("handshake in time")
            .expect("handshake")
    }

    /// The merged view's name of `server`'s tool `name`.
    fn function_name(&self, server: &str, name: &str) -> String {
        self.gateway
            .catalog()
            .by_canonical(&format!("{server}.{name}"))
            .unwrap_or_else(|| panic!("{server}.{name} in the catalog"))
            .function_name
            .clone()
    }

    async fn stop(self) {
        self.served.stop().await;
        self.gateway.shutdown().await;
    }
}

fn wire<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

/// What an app host reads of a tool: all but the input schema, which the gateway repairs.
fn as_a_host_reads(tool: &Tool) -> Value {
    let mut value = wire(tool);
    value
        .as_object_mut()
        .expect("an object")
        .remove("inputSchema");
    value
}

/// `value` (a tool or a view) with its view URIs as the merged view names them.
fn merged(server: &str, mut value: Value) -> Value {
    let rewrite = |uri: &mut Value| {
        if let Some(rest) = uri.as_str().and_then(|u| u.strip_prefix("ui://")) {
            *uri = json!(format!("ui://{server}/{rest}"));
        }
    };
    if let Some(meta) = value.get_mut("_meta") {
        if let Some(uri) = meta.get_mut("ui").and_then(|ui| ui.get_mut("resourceUri")) {
            rewrite(uri);
        }
        if let Some(uri) = meta.get_mut("ui/resourceUri") {
            rewrite(uri);
        }
    }
    if let Some(uri) = value.get_mut("uri") {
        rewrite(uri);
    }
    value
}

async fn tools(client: &Client) -> Vec<Tool> {
    tokio::time::timeout(WAIT, client.list_all_tools())
        .await
        .expect("in time")
        .expect("tools/list")
}

async fn resources(client: &Client) -> Vec<Resource> {
    tokio::time::timeout(WAIT, client.list_all_resources())
        .await
        .expect("in time")
        .expect("resources/list")
}

async fn read(client: &Client, uri: &str) -> Value {
    let read = tokio::time::timeout(
        WAIT,
        client.read_resource(ReadResourceRequestParams::new(uri.to_owned())),
    )
    .await
    .expect("in time")
    .unwrap_or_else(|err| panic!("{uri}: {err}"));
    wire(&read.contents)
}

/// Compares a view's contents without printing hundreds of kilobytes of HTML.
fn same_view(got: &Value, want: &Value, what: &str) {
    if got != want {
        let shorten = |v: &Value| {
            let mut v = v.clone();
            for contents in v.as_array_mut().into_iter().flatten() {
                let length = contents["text"].as_str().map(str::len);
                contents["text"] = json!(length);
            }
            v
        };
        panic!("{what}: {} != {}", shorten(got), shorten(want));
    }
}

#[tokio::test]
async fn real_app_servers_look_the_same_through_both_views_as_directly() {
    let service = Service::start().await;
    let merged_view = service.connect("/mcp").await;
    let merged_tools = tools(&merged_view).await;
    let merged_resources = resources(&merged_view).await;
    for (server, package, expected_tools) in [
        ("basic", "server-basic-vanillajs", &["get-time"][..]),
        (
            "monitor",
            "server-system-monitor",
            &["get-system-info", "poll-system-stats"][..],
        ),
    ] {
        let upstream = direct(package).await;
        let scoped = service.connect(&format!("/mcp/{server}")).await;
        let direct_tools = tools(&upstream).await;
        let names: Vec<&str> = direct_tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, expected_tools, "{package}'s tools");
        let scoped_tools = tools(&scoped).await;
        for tool in &direct_tools {
            let what = format!("{server}.{}", tool.name);
            // The servers name their views and who may call them: nothing of it is lost.
            assert!(
                apps::view_uri(tool).is_some() || !apps::visible_to(tool, apps::Caller::Model),
                "{what}: {:?}",
                tool.meta
            );
            assert!(tool.output_schema.is_some(), "{what}");
            let through = scoped_tools
                .iter()
                .find(|t| t.name == tool.name)
                .unwrap_or_else(|| panic!("{what} on /mcp/{server}"));
            assert_eq!(
                as_a_host_reads(through),
                as_a_host_reads(tool),
                "{what} on /mcp/{server}"
            );
            let function = service.function_name(server, &tool.name);
            let through = merged_tools
                .iter()
                .find(|t| t.name == function)
                .unwrap_or_else(|| panic!("{what} as {function} on /mcp"));
            let mut want = merged(server, as_a_host_reads(tool));
            want["name"] = json!(function);
            assert_eq!(as_a_host_reads(through), want, "{what} on /mcp");
        }

        let direct_resources = resources(&upstream).await;
        let [view] = direct_resources.as_slice() else {
            panic!("{package}: one view in {direct_resources:?}");
        };
        assert_eq!(view.mime_type.as_deref(), Some(apps::APP_MIME));
        assert_eq!(wire(&resources(&scoped).await), wire(&direct_resources));
        let want_merged = merged(server, wire(view));
        assert!(
            merged_resources.iter().any(|r| wire(r) == want_merged),
            "{want_merged} in {merged_resources:?}"
        );

        let want = read(&upstream, &view.uri).await;
        assert!(
            want[0]["text"].as_str().is_some_and(|t| t.len() > 100_000),
            "{package}: a bundled page"
        );
        same_view(&read(&scoped, &view.uri).await, &want, "/mcp/{server}");
        let merged_uri = want_merged["uri"].as_str().expect("a URI");
        let mut want_merged_read = want.clone();
        want_merged_read[0]["uri"] = json!(merged_uri);
        same_view(
            &read(&merged_view, merged_uri).await,
            &want_merged_read,
            "/mcp",
        );
        // The upstream's own URI names nothing in the merged view.
        let unknown = merged_view
            .read_resource(ReadResourceRequestParams::new(view.uri.clone()))
            .await;
        assert!(unknown.is_err(), "{}: {unknown:?}", view.uri);

        // Each tool answers through the per-server view with its structured content, the
        // app-only poller too (an app host's apps call it).
        for name in expected_tools {
            let called = tokio::time::timeout(
                WAIT,
                scoped.call_tool(CallToolRequestParams::new((*name).to_owned())),
            )
            .await
            .expect("in time")
            .expect("called");
            assert_eq!(called.is_error, Some(false), "{server}.{name}: {called:?}");
            assert!(
                called
                    .structured_content
                    .as_ref()
                    .is_some_and(Value::is_object),
                "{server}.{name}: {called:?}"
            );
        }
        scoped.cancel().await.expect("closed");
        upstream.cancel().await.expect("closed");
    }
    merged_view.cancel().await.expect("closed");
    service.stop().await;
}
