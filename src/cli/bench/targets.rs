//! The callers the load generator drives: JSON over HTTP (mcpgate's REST API, mcpo) with
//! reqwest, and MCP sessions (the upstreams directly, mcpgate's `/mcp`, mcp-proxy) with
//! rmcp's client. One call each, checked, nothing more.

use std::{process::Stdio, sync::Arc};

use anyhow::Context as _;
use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
        ProtocolVersion,
    },
    service::{ClientLifecycleMode, ClientServiceExt as _, Peer, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use super::load::Caller;

/// How much of a response body is searched for the expected text: enough for any answer's
/// head, and a large result is not scanned whole.
const CHECKED_PREFIX: usize = 256;

/// A JSON POST of a fixed body (worker `w` sends `bodies[w % bodies.len()]`); the answer
/// must be 2xx and hold `expect` near its start.
pub struct PostCaller {
    pub client: reqwest::Client,
    pub url: String,
    pub authorization: Option<HeaderValue>,
    pub bodies: Vec<Bytes>,
    pub expect: &'static str,
}

impl Caller for PostCaller {
    fn call(&self, worker: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let body = self.bodies[worker % self.bodies.len()].clone();
            let mut request = self
                .client
                .post(&self.url)
                .header(CONTENT_TYPE, "application/json")
                .body(body);
            if let Some(value) = &self.authorization {
                request = request.header(AUTHORIZATION, value.clone());
            }
            let response = request.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = response.bytes().await.map_err(|e| e.to_string())?;
            let head = &body[..body.len().min(CHECKED_PREFIX)];
            if !status.is_success() {
                return Err(format!("HTTP {status}: {}", String::from_utf8_lossy(head)));
            }
            let found = head
                .windows(self.expect.len())
                .any(|w| w == self.expect.as_bytes());
            if !found {
                return Err(format!(
                    "unexpected answer: {}",
                    String::from_utf8_lossy(head)
                ));
            }
            Ok(())
        })
    }
}

/// `tools/call` of one tool over MCP sessions, worker `w` on session `w % sessions`.
pub struct McpCaller {
    pub peers: Vec<Peer<RoleClient>>,
    pub tool: String,
    pub arguments: JsonObject,
}

impl Caller for McpCaller {
    fn call(&self, worker: usize) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let peer = &self.peers[worker % self.peers.len()];
            let params = CallToolRequestParams::new(self.tool.clone())
                .with_arguments(self.arguments.clone());
            let result = peer.call_tool(params).await.map_err(|e| e.to_string())?;
            if result.is_error == Some(true) {
                let text = result
                    .content
                    .first()
                    .and_then(|c| c.as_text())
                    .map(|t| t.text.chars().take(200).collect::<String>())
                    .unwrap_or_default();
                return Err(format!("tool error: {text}"));
            }
            Ok(())
        })
    }
}

/// The benchmark's MCP client: no capabilities, the `initialize` handshake.
#[derive(Debug, Clone, Copy)]
pub struct BenchClient;

impl ClientHandler for BenchClient {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("mcpgate-bench", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

pub type Session = RunningService<RoleClient, BenchClient>;

/// MCP sessions over Streamable HTTP to `url`, all through one HTTP client.
pub async fn http_sessions(
    url: &str,
    token: Option<&str>,
    count: usize,
) -> anyhow::Result<Vec<Session>> {
    let client = http_client()?;
    let mut sessions = Vec::with_capacity(count);
    for _ in 0..count {
        let mut config = StreamableHttpClientTransportConfig::with_uri(url);
        if let Some(token) = token {
            config = config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(client.clone(), config);
        let session = BenchClient
            .serve_with_lifecycle(transport, ClientLifecycleMode::Initialize)
            .await
            .with_context(|| format!("MCP handshake with {url}"))?;
        sessions.push(session);
    }
    Ok(sessions)
}

/// One MCP session over the stdio of a child process started from `command`.
pub async fn stdio_session(command: &[String]) -> anyhow::Result<(Session, tokio::process::Child)> {
    let (program, args) = command.split_first().context("an empty command")?;
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let stdout = child.stdout.take().context("child stdout")?;
    let stdin = child.stdin.take().context("child stdin")?;
    let session = BenchClient
        .serve_with_lifecycle((stdout, stdin), ClientLifecycleMode::Initialize)
        .await
        .with_context(|| format!("MCP handshake with {program} over stdio"))?;
    Ok((session, child))
}

/// The peers of `sessions`, for callers.
pub fn peers(sessions: &[Session]) -> Vec<Peer<RoleClient>> {
    sessions.iter().map(|s| s.peer().clone()).collect()
}

/// Ends every session (a DELETE for HTTP sessions).
pub async fn close(sessions: Vec<Session>) {
    for session in sessions {
        let _ = session.cancel().await;
    }
}

/// The load generator's HTTP client: loopback, no proxy, keep-alive, enough idle connections
/// for 64 workers.
pub fn http_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        .build()
        .context("HTTP client")
}

/// A bearer header value.
pub fn bearer(token: &str) -> anyhow::Result<HeaderValue> {
    HeaderValue::from_str(&format!("Bearer {token}")).context("token is not a header value")
}

/// Boxes a caller for [`super::load::drive`].
pub fn boxed(caller: impl Caller) -> Arc<dyn Caller> {
    Arc::new(caller)
}
