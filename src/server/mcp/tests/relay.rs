//! What an upstream sends during a tool call reaches the MCP client that made the call:
//! progress under the client's own token, log messages, sampling and elicitation requests
//! (answered by the client, the answer back in the tool result), and a refusal, not a hang,
//! when the client cannot answer. The conformance fixture is the upstream, in process or
//! over Streamable HTTP.
#![expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577, but the conformance fixture \
              still uses them and the gateway relays them"
)]

use std::{
    borrow::Cow,
    sync::{Arc, Mutex, PoisonError},
};

use rmcp::{
    ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
        ClientCapabilities, ClientConfig, ClientRequest, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
        ListToolsResult, LoggingMessageNotificationParam, PaginatedRequestParams,
        ProgressNotificationParam, ProgressToken, ProtocolVersion, SamplingMessage, ServerConfig,
        ServerResult,
    },
    service::{
        ClientServiceExt, NotificationContext, PeerRequestOptions, RequestContext, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_client::StreamableHttpClientTransportConfig,
        streamable_http_server::session::local::LocalSessionManager,
    },
};
use serde_json::{Value, json};
use tokio::{
    net::TcpListener,
    sync::{Barrier, watch},
};
use tokio_util::sync::CancellationToken;

use super::support::{Endpoint, WAIT, call, http, in_process, initialize, sleep_stats_until, text};
use crate::config::{AuthConfig, Confirm, HttpConfig, HttpKind, ServerId, TransportConfig};
use crate::fixtures::{Fixture, FixtureHandler, handler};

/// What the relaying client saw.
#[derive(Default)]
struct Seen {
    progress: Vec<(ProgressToken, f64)>,
    logs: Vec<String>,
    sampled: Vec<String>,
    elicited: Vec<String>,
}

/// A client declaring elicitation and, when `sampling`, sampling; it records what reaches it.
#[derive(Clone)]
struct RelayClient {
    sampling: bool,
    /// What the client's "model" answers a sampling request with.
    reply: &'static str,
    /// When set, a sampling request is answered only once every client sharing it is being
    /// asked: proof that the calls were in flight together.
    together: Option<Arc<Barrier>>,
    seen: Arc<Mutex<Seen>>,
    /// Bumped on every notification, so tests wait on a condition instead of sleeping.
    changed: Arc<watch::Sender<usize>>,
}

impl RelayClient {
    fn new(sampling: bool) -> RelayClient {
        RelayClient {
            sampling,
            reply: "four, says the client's model",
            together: None,
            seen: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        }
    }

    fn record(&self, update: impl FnOnce(&mut Seen)) {
        update(&mut self.seen.lock().unwrap_or_else(PoisonError::into_inner));
        self.changed.send_modify(|n| *n += 1);
    }

    fn seen<T>(&self, read: impl FnOnce(&Seen) -> T) -> T {
        read(&self.seen.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Waits (bounded) until `done` holds of what was seen.
    async fn wait_for(&self, done: impl Fn(&Seen) -> bool) {
        let mut changed = self.changed.subscribe();
        let waited = tokio::time::timeout(WAIT, async {
            while !self.seen(&done) {
                if changed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
        assert!(waited.is_ok(), "the expected notifications did not arrive");
    }
}

impl ClientHandler for RelayClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities = if self.sampling {
            ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build()
        } else {
            ClientCapabilities::builder().enable_elicitation().build()
        };
        ClientConfig::new(capabilities, Implementation::new("relay-test", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.record(|s| s.progress.push((params.progress_token, params.progress)));
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = params.data.as_str().unwrap_or_default().to_owned();
        self.record(|s| s.logs.push(text));
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let prompt = params
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect::<Vec<_>>()
            .join(" ");
        self.record(|s| s.sampled.push(prompt));
        if let Some(together) = &self.together {
            let met = tokio::time::timeout(WAIT, together.wait()).await;
            assert!(
                met.is_ok(),
                "the other call's sampling request never arrived"
            );
        }
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(self.reply),
            "test-model".to_owned(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.record(|s| s.elicited.push(message));
        }
        Ok(ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ "username": "ada", "email": "ada@example.test" })))
    }
}

/// The conformance fixture limited to protocol 2025-11-25: on 2026-07-28 a server may not
/// send requests to its client (sampling and elicitation become input rounds), so the
/// relayed requests need an upstream on an older revision, as most servers still are. It
/// answers `server/discover` with no common version; the gateway then uses `initialize`.
#[derive(Clone)]
struct UpTo2025(FixtureHandler);

impl ServerHandler for UpTo2025 {
    fn get_info(&self) -> ServerConfig {
        self.0.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.0.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.0.call_tool(request, context).await
    }
}

/// The endpoint in front of the conformance fixture (server id `conf`, no confirmations),
/// on the newest protocol, or limited to 2025-11-25 when `legacy`.
pub(super) async fn endpoint(legacy: bool) -> Endpoint {
    let fixture = handler(Fixture::Conformance).expect("in-process fixture");
    let mut server = if legacy {
        in_process("conf", UpTo2025(fixture))
    } else {
        in_process("conf", fixture)
    };
    server.confirm = Confirm::None;
    Endpoint::start_servers(AuthConfig::Dev, vec![server], None).await
}

async fn connect(
    endpoint: &Endpoint,
    client: RelayClient,
) -> RunningService<RoleClient, RelayClient> {
    let config = StreamableHttpClientTransportConfig::with_uri(endpoint.url())
        .auth_header(endpoint.token.clone());
    let transport = StreamableHttpClientTransport::with_client(http(), config);
    tokio::time::timeout(WAIT, client.serve_with_lifecycle(transport, initialize()))
        .await
        .expect("handshake within the deadline")
        .expect("handshake succeeds")
}

/// Calls `name` and returns the progress token the client sent with it and the result.
async fn call_with_token(
    client: &RunningService<RoleClient, RelayClient>,
    name: &'static str,
    args: Value,
) -> (ProgressToken, CallToolResult) {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(call(name, args)));
    let handle = client
        .peer()
        .send_request_with_option(request, PeerRequestOptions::with_timeout(WAIT))
        .await
        .expect("request sent");
    let token = handle.progress_token.clone();
    match handle.await_response().await.expect("no protocol error") {
        ServerResult::CallToolResult(result) => (token, result),
        other => panic!("not a tool result: {other:?}"),
    }
}

/// The config of server `id` over Streamable HTTP at `url` (loopback allowed, no
/// confirmations).
fn http_server(id: &str, url: &str) -> crate::config::ServerConfig {
    let mut server = crate::config::ServerConfig::new(
        ServerId::new(id).expect("valid id"),
        TransportConfig::Http(HttpConfig {
            url: url.parse().expect("url"),
            kind: HttpKind::Streamable,
            headers: Vec::new(),
        }),
    );
    server.allow_http = true;
    server.allow_private = true;
    server.confirm = Confirm::None;
    server
}

/// Fixture `f` over Streamable HTTP on 127.0.0.1:0 on the newest protocol, which the gateway
/// calls by posting each call itself (`upstream::http_link`), until `stop`; returns its URL.
async fn modern_http_upstream(f: Fixture, stop: &CancellationToken) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    tokio::spawn(crate::fixtures::serve_http(f, listener, stop.clone()));
    url
}

/// The endpoint in front of the conformance fixture (server id `conf`) over Streamable HTTP
/// on the newest protocol.
pub(super) async fn http_endpoint(stop: &CancellationToken) -> Endpoint {
    let url = modern_http_upstream(Fixture::Conformance, stop).await;
    Endpoint::start_servers(AuthConfig::Dev, vec![http_server("conf", &url)], None).await
}

#[tokio::test]
async fn progress_reaches_the_client_under_its_own_token() {
    progress_reaches_the_client(endpoint(false).await).await;
}

/// From an upstream on an older revision the gateway writes the call itself, under a
/// progress token of its own (`upstream::line_transport`): the client still sees its own.
#[tokio::test]
async fn progress_from_an_older_upstream_reaches_the_client_under_its_own_token() {
    progress_reaches_the_client(endpoint(true).await).await;
}

/// To a Streamable HTTP upstream on the newest protocol the gateway posts the call itself,
/// under a progress token of its own, and reads the progress off the call's own stream.
#[tokio::test]
async fn progress_from_an_http_upstream_reaches_the_client_under_its_own_token() {
    let stop = CancellationToken::new();
    progress_reaches_the_client(http_endpoint(&stop).await).await;
    stop.cancel();
}

async fn progress_reaches_the_client(endpoint: Endpoint) {
    let client = RelayClient::new(true);
    let service = connect(&endpoint, client.clone()).await;
    let (token, result) =
        call_with_token(&service, "conf_test_tool_with_progress", json!({})).await;
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    client.wait_for(|s| s.progress.len() == 3).await;
    let progress = client.seen(|s| s.progress.clone());
    assert!(progress.iter().all(|(t, _)| *t == token), "{progress:?}");
    let steps: Vec<f64> = progress.iter().map(|(_, p)| *p).collect();
    assert_eq!(steps, [0.0, 50.0, 100.0]);
    drop(service);
    endpoint.stop().await;
}

/// A call the gateway wrote itself and then abandoned (its deadline passed) is cancelled
/// upstream, as rmcp cancels its own.
#[tokio::test]
async fn an_abandoned_call_to_an_older_upstream_is_cancelled_there() {
    let slow = handler(Fixture::Slow).expect("in-process fixture");
    let mut server = in_process("slow", UpTo2025(slow));
    server.confirm = Confirm::None;
    abandoned_call_is_cancelled_there(server).await;
}

/// A call the gateway posted itself to a Streamable HTTP upstream on the newest protocol
/// and then abandoned is cancelled there: its stream is closed, which is how that revision
/// cancels a request over HTTP.
#[tokio::test]
async fn an_abandoned_call_to_an_http_upstream_is_cancelled_there() {
    let stop = CancellationToken::new();
    let url = modern_http_upstream(Fixture::Slow, &stop).await;
    abandoned_call_is_cancelled_there(http_server("slow", &url)).await;
    stop.cancel();
}

/// Calls `slow.sleep` on `server` (id `slow`) past its deadline, then waits for the
/// upstream to count the call cancelled and none completed.
async fn abandoned_call_is_cancelled_there(mut server: crate::config::ServerConfig) {
    server.call_timeout = Some(std::time::Duration::from_millis(200));
    let endpoint = Endpoint::start_servers(AuthConfig::Dev, vec![server], None).await;
    let ctx = crate::policy::CallContext::local();
    let outcome = endpoint
        .gateway
        .call_tool(&ctx, "slow.sleep", json!({ "ms": 60_000 }), None)
        .await;
    assert!(
        matches!(outcome, Err(crate::gateway::GatewayError::Timeout { .. })),
        "{outcome:?}"
    );
    let stats = sleep_stats_until(&endpoint, |s| s["cancelled"] == 1 && s["in_flight"] == 0).await;
    assert_eq!(stats["completed"], 0, "{stats}");
    endpoint.stop().await;
}

#[tokio::test]
async fn log_messages_reach_the_client() {
    log_messages_reach(endpoint(false).await).await;
}

/// Log messages on a call's own stream from a Streamable HTTP upstream on the newest
/// protocol, which the gateway reads itself.
#[tokio::test]
async fn log_messages_from_an_http_upstream_reach_the_client() {
    let stop = CancellationToken::new();
    log_messages_reach(http_endpoint(&stop).await).await;
    stop.cancel();
}

async fn log_messages_reach(endpoint: Endpoint) {
    let client = RelayClient::new(true);
    let service = connect(&endpoint, client.clone()).await;
    let (_, result) = call_with_token(&service, "conf_test_tool_with_logging", json!({})).await;
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    client.wait_for(|s| s.logs.len() == 3).await;
    let logs = client.seen(|s| s.logs.clone());
    assert_eq!(
        logs,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ]
    );
    drop(service);
    endpoint.stop().await;
}

#[tokio::test]
async fn sampling_is_answered_by_the_calling_client() {
    let endpoint = endpoint(true).await;
    let client = RelayClient::new(true);
    let service = connect(&endpoint, client.clone()).await;
    let args = json!({ "prompt": "What is 2+2?" });
    let (_, result) = call_with_token(&service, "conf_test_sampling", args).await;
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    assert_eq!(text(&result), "LLM response: four, says the client's model");
    assert_eq!(client.seen(|s| s.sampled.clone()), ["What is 2+2?"]);
    drop(service);
    endpoint.stop().await;
}

#[tokio::test]
async fn elicitation_is_answered_by_the_calling_client() {
    let endpoint = endpoint(true).await;
    let client = RelayClient::new(true);
    let service = connect(&endpoint, client.clone()).await;
    let args = json!({ "message": "Who are you?" });
    let (_, result) = call_with_token(&service, "conf_test_elicitation", args).await;
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    let answer = text(&result);
    assert!(
        answer.starts_with("User response: action=accept"),
        "{answer}"
    );
    assert!(answer.contains("ada@example.test"), "{answer}");
    assert_eq!(client.seen(|s| s.elicited.clone()), ["Who are you?"]);
    drop(service);
    endpoint.stop().await;
}

#[tokio::test]
async fn sampling_without_the_capability_is_refused_not_hung() {
    let endpoint = endpoint(true).await;
    let client = RelayClient::new(false);
    let service = connect(&endpoint, client.clone()).await;
    let args = json!({ "prompt": "What is 2+2?" });
    let (_, result) = call_with_token(&service, "conf_test_sampling", args).await;
    assert_eq!(result.is_error, Some(true), "{}", text(&result));
    let answer = text(&result);
    assert!(answer.contains("sampling failed"), "{answer}");
    assert!(
        answer.contains("did not declare the sampling capability"),
        "{answer}"
    );
    assert!(client.seen(|s| s.sampled.is_empty()));
    drop(service);
    endpoint.stop().await;
}

/// [`UpTo2025`] over Streamable HTTP on 127.0.0.1:0, until `stop`; returns its URL.
async fn http_upstream(stop: CancellationToken) -> String {
    let fixture = handler(Fixture::Conformance).expect("in-process fixture");
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.clone());
    let service = StreamableHttpService::new(
        move || Ok(UpTo2025(fixture.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let app = axum::Router::new().nest_service("/mcp", service);
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(stop.cancelled_owned())
            .await
    });
    format!("http://{addr}/mcp")
}

#[tokio::test]
async fn concurrent_calls_get_their_own_sampling_requests_over_http() {
    let stop = CancellationToken::new();
    let url = http_upstream(stop.clone()).await;
    let server = http_server("conf", &url);
    let endpoint = Endpoint::start_servers(AuthConfig::Dev, vec![server], None).await;

    // Two callers whose sampling requests are answered only once both are asked: the
    // gateway cannot fall back to "the only call", it must follow each request's stream.
    let together = Arc::new(Barrier::new(2));
    let mut ada = RelayClient::new(true);
    ada.reply = "ada's model";
    ada.together = Some(together.clone());
    let mut bob = RelayClient::new(true);
    bob.reply = "bob's model";
    bob.together = Some(together);
    let ada_service = connect(&endpoint, ada.clone()).await;
    let bob_service = connect(&endpoint, bob.clone()).await;
    let ((_, for_ada), (_, for_bob)) = tokio::join!(
        call_with_token(
            &ada_service,
            "conf_test_sampling",
            json!({ "prompt": "ada asks" })
        ),
        call_with_token(
            &bob_service,
            "conf_test_sampling",
            json!({ "prompt": "bob asks" })
        ),
    );
    assert_eq!(text(&for_ada), "LLM response: ada's model");
    assert_eq!(text(&for_bob), "LLM response: bob's model");
    assert_eq!(ada.seen(|s| s.sampled.clone()), ["ada asks"]);
    assert_eq!(bob.seen(|s| s.sampled.clone()), ["bob asks"]);
    drop((ada_service, bob_service));
    endpoint.stop().await;
    stop.cancel();
}
