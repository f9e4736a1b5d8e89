//! The gateway in front of a server built with the official TypeScript SDK over Streamable
//! HTTP (`tests/sdk/server.mjs`), which behaves as real servers do: progress and log messages
//! right before the result on the call's stream, sampling and elicitation asked on the
//! session's standalone stream with nothing linking them to the call. Nothing the server sends
//! is lost, reordered after the result, or refused.
#![expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577, but servers still send them \
              and the gateway relays them faithfully"
)]

use std::{
    process::Stdio,
    sync::{Arc, Mutex},
};

use futures::future::BoxFuture;
use mcpgate::{
    config::{HttpKind, Sessions},
    gateway::{CallRelay, Gateway, Owner},
    policy::CallContext,
    upstream::ServerState,
};
use rmcp::{
    ErrorData,
    model::{
        CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
        ElicitationAction, LoggingMessageNotificationParam, ProgressNotificationParam,
        SamplingMessage,
    },
};
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::support::{self, WAIT};

/// The SDK server, running until dropped.
struct SdkServer {
    /// `http://127.0.0.1:port`.
    base: String,
    /// Its MCP endpoint: `/mcp` (Streamable HTTP) or `/sse` (legacy HTTP+SSE).
    url: String,
    kind: HttpKind,
    _child: Child,
}

impl SdkServer {
    /// Sessions open on the server right now.
    async fn sessions(&self) -> u64 {
        self.count("open").await
    }

    /// One of the server's counts: `open` sessions, sessions `initialized` so far, calls
    /// `waiting` for [`SdkServer::release`].
    async fn count(&self, what: &str) -> u64 {
        let url = format!("{}/sessions", self.base);
        let answer: serde_json::Value = client()
            .get(url)
            .send()
            .await
            .expect("the SDK server answers")
            .json()
            .await
            .expect("JSON");
        answer[what].as_u64().expect("a count")
    }

    /// Lets every waiting `test_wait` call answer.
    async fn release(&self) {
        client()
            .post(format!("{}/release", self.base))
            .send()
            .await
            .expect("the SDK server answers")
            .error_for_status()
            .expect("released");
    }

    async fn start() -> SdkServer {
        SdkServer::start_as(HttpKind::Streamable).await
    }

    /// The server speaking `kind` (Streamable HTTP, or legacy HTTP+SSE).
    async fn start_as(kind: HttpKind) -> SdkServer {
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/server.mjs");
        let mut child = Command::new("node")
            .arg(script)
            .args(matches!(kind, HttpKind::Sse).then_some("--sse"))
            .env("MCPGATE_PEERS", support::peers())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let port = tokio::time::timeout(WAIT, async {
            while let Some(line) = lines.next_line().await.expect("reads") {
                if let Some(port) = line.strip_prefix("listening ") {
                    return port.trim().to_owned();
                }
            }
            panic!("the SDK server ended before it listened");
        })
        .await
        .expect("the SDK server listens in time");
        let base = format!("http://127.0.0.1:{port}");
        let path = if matches!(kind, HttpKind::Sse) {
            "sse"
        } else {
            "mcp"
        };
        SdkServer {
            url: format!("{base}/{path}"),
            base,
            kind,
            _child: child,
        }
    }

    async fn gateway(&self) -> Gateway {
        self.gateway_with(Sessions::PerCaller).await
    }

    async fn gateway_with(&self, sessions: Sessions) -> Gateway {
        let mut server = support::http("sdk", &self.url, self.kind);
        server.sessions = sessions;
        support::gateway(unlimited(vec![server])).await
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// What one call's caller received, in order, and how it answers the server's requests
/// (once `hold` lets it, when set).
#[derive(Default)]
struct Seen {
    events: Mutex<Vec<String>>,
    user: String,
    hold: Option<Arc<tokio::sync::Semaphore>>,
    asked: tokio::sync::Notify,
}

impl Seen {
    fn of(user: &str) -> Arc<Seen> {
        Arc::new(Seen {
            user: user.to_owned(),
            ..Seen::default()
        })
    }

    /// A caller that answers a request only once `hold` has a permit.
    fn holding(user: &str, hold: Arc<tokio::sync::Semaphore>) -> Arc<Seen> {
        Arc::new(Seen {
            user: user.to_owned(),
            hold: Some(hold),
            ..Seen::default()
        })
    }

    fn push(&self, event: String) {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(event);
    }

    fn events(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl CallRelay for Seen {
    fn progress(&self, params: ProgressNotificationParam) -> BoxFuture<'_, ()> {
        self.push(format!("progress {}", params.progress));
        Box::pin(async {})
    }

    fn log(&self, params: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        self.push(format!("log {}", params.data.as_str().unwrap_or_default()));
        Box::pin(async {})
    }

    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        self.push("asked to sample".to_owned());
        self.asked.notify_one();
        let answer = CreateMessageResult::new(
            SamplingMessage::assistant_text(format!("from {}", self.user)),
            "scripted".to_owned(),
        );
        Box::pin(async move {
            if let Some(hold) = &self.hold {
                let _permit = hold.acquire().await;
            }
            Ok(answer)
        })
    }

    fn elicit(
        &self,
        _params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        let answer = ElicitResult::new(ElicitationAction::Accept)
            .with_content(json!({ "username": self.user }));
        Box::pin(async move { Ok(answer) })
    }

    fn owner(&self) -> Owner {
        Owner::caller("local", &self.user)
    }
}

fn caller(user: &str) -> CallContext {
    CallContext {
        user: user.to_owned(),
        ..support::ctx()
    }
}

/// The two tools that send right before their result, and what each caller must see.
const BEFORE_THE_RESULT: [(&str, [&str; 3]); 2] = [
    (
        "sdk.test_tool_with_progress",
        ["progress 0", "progress 50", "progress 100"],
    ),
    (
        "sdk.test_tool_with_logging",
        [
            "log Tool execution started",
            "log Tool execution running",
            "log Tool execution completed",
        ],
    ),
];

/// `rounds` calls of each of [`BEFORE_THE_RESULT`] as `user`, back to back: everything the
/// server sent reached the caller before the call returned, in the order sent.
async fn each_arrives_before_its_result(gateway: Gateway, user: String, rounds: usize) {
    for round in 0..rounds {
        for (tool, expected) in BEFORE_THE_RESULT {
            let seen = Seen::of(&user);
            let relay: Arc<dyn CallRelay> = seen.clone();
            gateway
                .call_tool_relayed(&caller(&user), tool, json!({}), None, Some(relay))
                .await
                .unwrap_or_else(|e| panic!("{tool} ({user}, call {round}): {e}"));
            assert_eq!(seen.events(), expected, "{tool}, {user}'s call {round}");
        }
    }
}

/// Over Streamable HTTP: four callers at once, 1000 calls in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_progress_and_logs_sent_right_before_the_result_arrive_before_it() {
    four_callers_at_once(SdkServer::start().await).await;
}

/// Over legacy HTTP+SSE, where a call's notifications and result share the one event
/// stream: four callers at once, 1000 calls in all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_sse_progress_and_logs_sent_right_before_the_result_arrive_before_it() {
    four_callers_at_once(SdkServer::start_as(HttpKind::Sse).await).await;
}

async fn four_callers_at_once(server: SdkServer) {
    let gateway = server.gateway().await;
    let callers: Vec<_> = ["ada", "bob", "cy", "dee"]
        .into_iter()
        .map(|user| {
            tokio::spawn(each_arrives_before_its_result(
                gateway.clone(),
                user.to_owned(),
                125,
            ))
        })
        .collect();
    for caller in callers {
        caller.await.expect("every call as expected");
    }
    gateway.shutdown().await;
}

/// Over stdio (the same server, one process): 1000 calls back to back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_progress_and_logs_sent_right_before_the_result_arrive_before_it() {
    let node = which("node");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/server.mjs");
    let peers = support::peers();
    let server = support::stdio(
        "sdk",
        &node,
        &[
            &script.to_string_lossy(),
            "--stdio",
            "--peers",
            &peers.to_string_lossy(),
        ],
    );
    let gateway = support::gateway(unlimited(vec![server])).await;
    each_arrives_before_its_result(gateway.clone(), "ada".to_owned(), 500).await;
    gateway.shutdown().await;
}

/// A test configuration whose callers may call as fast as they can (the rate limits are
/// not what is measured here).
fn unlimited(servers: Vec<mcpgate::config::ServerConfig>) -> mcpgate::config::Config {
    let mut config = support::config(servers);
    config.call_limits.user_calls_per_minute = 1_000_000;
    config.call_limits.server_calls_per_minute = 1_000_000;
    config
}

/// `program`'s absolute path on this `PATH` (a stdio server's environment is cleared).
fn which(program: &str) -> String {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
        .unwrap_or_else(|| panic!("{program} is on PATH"))
        .to_string_lossy()
        .into_owned()
}

/// Alice's call waits on her answer to the server's unlinked sampling request while Bob
/// calls the same tool: on sessions of their own, Bob's request reaches Bob (and only Bob)
/// while Alice's is still open; each gets the answer of their own caller.
#[tokio::test]
async fn unlinked_requests_reach_the_caller_whose_session_they_came_on() {
    let server = SdkServer::start().await;
    let gateway = server.gateway().await;
    for round in 0..5 {
        let hold = Arc::new(tokio::sync::Semaphore::new(0));
        let alice = Seen::holding("alice", hold.clone());
        let bob = Seen::of("bob");
        let sample = |who: &Arc<Seen>| {
            let relay: Arc<dyn CallRelay> = who.clone();
            let gateway = gateway.clone();
            let user = who.user.clone();
            async move {
                gateway
                    .call_tool_relayed(
                        &caller(&user),
                        "sdk.test_sampling",
                        json!({ "prompt": format!("for {user}") }),
                        None,
                        Some(relay),
                    )
                    .await
            }
        };
        let alice_call = tokio::spawn(sample(&alice));
        tokio::time::timeout(WAIT, alice.asked.notified())
            .await
            .expect("alice is asked");
        let bobs = sample(&bob).await.expect("bob's call, while alice's waits");
        assert_eq!(bobs.text(), "sampled: from bob", "round {round}");
        assert_eq!(bob.events(), ["asked to sample"]);
        hold.add_permits(1);
        let alices = alice_call.await.expect("task").expect("alice's call");
        assert_eq!(alices.text(), "sampled: from alice", "round {round}");
        assert_eq!(alice.events(), ["asked to sample"]);
    }
    // One shared session, and one of each caller's.
    assert_eq!(server.sessions().await, 3);
    assert_eq!(gateway.caller_sessions(&support::id("sdk")), 2);
    gateway.shutdown().await;
    let start = std::time::Instant::now();
    while server.sessions().await > 0 {
        assert!(
            start.elapsed() < WAIT,
            "the gateway ended every upstream session it opened"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The same with one shared session: while two calls run, a request that names neither
/// cannot be attributed and is refused with the documented reason; it never reaches Alice.
#[tokio::test]
async fn on_a_shared_session_an_unattributable_request_is_refused() {
    let server = SdkServer::start().await;
    let gateway = server.gateway_with(Sessions::Shared).await;
    let hold = Arc::new(tokio::sync::Semaphore::new(0));
    let alice = Seen::holding("alice", hold.clone());
    let bob = Seen::of("bob");
    let relay: Arc<dyn CallRelay> = alice.clone();
    let alice_call = {
        let gateway = gateway.clone();
        tokio::spawn(async move {
            gateway
                .call_tool_relayed(
                    &caller("alice"),
                    "sdk.test_sampling",
                    json!({ "prompt": "for alice" }),
                    None,
                    Some(relay),
                )
                .await
        })
    };
    tokio::time::timeout(WAIT, alice.asked.notified())
        .await
        .expect("alice is asked: hers is the only call running");
    let relay: Arc<dyn CallRelay> = bob.clone();
    let bobs = gateway
        .call_tool_relayed(
            &caller("bob"),
            "sdk.test_sampling",
            json!({ "prompt": "for bob" }),
            None,
            Some(relay),
        )
        .await;
    let refused = format!("{bobs:?}");
    assert!(
        refused.contains("cannot tell which caller"),
        "the server was refused, and said so: {refused}"
    );
    assert!(bob.events().is_empty(), "{:?}", bob.events());
    hold.add_permits(1);
    let alices = alice_call.await.expect("task").expect("alice's call");
    assert_eq!(alices.text(), "sampled: from alice");
    assert_eq!(
        alice.events(),
        ["asked to sample"],
        "bob's request never reached alice"
    );
    assert_eq!(server.sessions().await, 1, "one shared session");
    gateway.shutdown().await;
}

/// A sampling MCP client of the gateway's own endpoint, answering as `answer`.
#[derive(Clone)]
struct SamplingClient;

impl rmcp::ClientHandler for SamplingClient {
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::builder()
                .enable_sampling()
                .build(),
            rmcp::model::Implementation::new("sampling-client", "0"),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::V_2025_11_25)
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: rmcp::service::RequestContext<rmcp::RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text("from the MCP client"),
            "client-model".to_owned(),
        ))
    }
}

/// Through `mcpgate serve`: an MCP client's unlinked sampling request comes back to it over
/// the upstream session opened for its MCP session, which ends when the client ends its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_sessions_upstream_session_ends_with_it() {
    use rmcp::{ServiceExt as _, transport::StreamableHttpClientTransport};
    let server = SdkServer::start().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = format!(
        "[state]\ndatabase = \"memory\"\n\n[server.auth]\nmode = \"none\"\n\n\
         [servers.sdk]\nurl = {url:?}\ntransport = \"streamable-http\"\nallow_private = true\n\
         confirm = \"none\"\n",
        url = server.url,
    );
    let gateway = support::ServedBinary::start(dir.path(), Some(&config), &[]).await;
    gateway.wait_ready().await;
    assert_eq!(server.sessions().await, 1, "the shared session");

    let transport = StreamableHttpClientTransport::with_client(
        reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client"),
        rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("{}/mcp/sdk", gateway.base),
        ),
    );
    let client = tokio::time::timeout(WAIT, SamplingClient.serve(transport))
        .await
        .expect("handshake in time")
        .expect("handshake");
    for _ in 0..3 {
        let answer = client
            .call_tool(
                rmcp::model::CallToolRequestParams::new("test_sampling").with_arguments(
                    json!({ "prompt": "hi" })
                        .as_object()
                        .expect("an object")
                        .clone(),
                ),
            )
            .await
            .expect("the call");
        let text = answer.content[0].as_text().map(|t| t.text.clone());
        assert_eq!(text.as_deref(), Some("sampled: from the MCP client"));
    }
    assert_eq!(server.sessions().await, 2, "and one for this MCP session");
    client
        .cancel()
        .await
        .expect("the client closes its session");
    let start = std::time::Instant::now();
    while server.sessions().await > 1 {
        assert!(
            start.elapsed() < WAIT,
            "the upstream session ends with the MCP session"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    gateway.stop().await;
}

/// A call the server (or a proxy in front of it) fails with an HTTP status and no JSON-RPC
/// error fails alone, typed: the shared session goes on, and so does a call in flight on it.
/// (Before, it was taken for the connection lost: the gateway ended the shared session under
/// every caller and opened another.) Over Streamable HTTP and over the legacy transport,
/// whose message POST fails the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_status_for_one_call_fails_that_call_alone() {
    for kind in [HttpKind::Streamable, HttpKind::Sse] {
        let server = SdkServer::start_as(kind).await;
        let gateway = server.gateway_with(Sessions::Shared).await;
        let in_flight = {
            let gateway = gateway.clone();
            tokio::spawn(async move {
                gateway
                    .call_tool(&caller("ada"), "sdk.test_wait", json!({}), None)
                    .await
            })
        };
        let start = std::time::Instant::now();
        while server.count("waiting").await == 0 {
            assert!(
                start.elapsed() < WAIT,
                "{kind:?}: the call reaches the server"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        for status in [500, 502, 503, 429, 413, 408] {
            let err = gateway
                .call_tool(
                    &caller("bob"),
                    "sdk.test_http_status",
                    json!({ "status": status }),
                    None,
                )
                .await
                .expect_err("the server failed it");
            assert_eq!(err.code(), "upstream_http_error", "{kind:?}: {err}");
            assert!(
                err.to_string().contains(&format!("HTTP {status}")),
                "{kind:?}: {err}"
            );
        }
        // A catch-all handler's 500 with a JSON-RPC error naming no request: the server's
        // answer to this call (rmcp would drop it, and the call wait for its deadline), not
        // the session gone.
        let err = gateway
            .call_tool(
                &caller("bob"),
                "sdk.test_http_status",
                json!({ "status": 500, "json": true }),
                None,
            )
            .await
            .expect_err("the server failed it");
        let expected = match kind {
            // The legacy transport's POST is answered by its status alone.
            HttpKind::Sse => "upstream_http_error",
            _ => "upstream_error",
        };
        assert_eq!(err.code(), expected, "{kind:?}: {err}");
        let status = gateway.servers().into_iter().next().expect("one server");
        assert_eq!(status.state, ServerState::Ready, "{kind:?}: {status:?}");
        let logged = gateway
            .call_tool(&caller("cy"), "sdk.test_tool_with_logging", json!({}), None)
            .await
            .expect("another call meanwhile");
        assert!(logged.text().contains("logging done"), "{kind:?}");
        server.release().await;
        let released = tokio::time::timeout(WAIT, in_flight)
            .await
            .expect("the call in flight ends in time")
            .expect("task")
            .expect("the call in flight was not cut");
        assert!(released.text().contains("released"), "{kind:?}");
        assert_eq!(
            server.count("initialized").await,
            1,
            "{kind:?}: the one shared session was kept"
        );
        gateway.shutdown().await;
    }
}

/// A server that forgot the gateway's session (restarted) and says so with 400 and a text
/// body, as older servers and proxies do, with 404, or with 400 and a JSON-RPC error naming
/// no request, as the SDKs' servers did before they said 404 (rmcp drops such an error as
/// an answer to nothing, and the call waited for its deadline): the gateway opens a new
/// session and calls go on (a 400 is not one request's failure but the session's, unlike a
/// 5xx).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_server_forgot_is_opened_again_on_400_as_on_404() {
    for (status, body) in [(400, "text"), (404, "text"), (400, "json")] {
        let server = SdkServer::start().await;
        let gateway = server.gateway_with(Sessions::Shared).await;
        let ada = caller("ada");
        let call = || gateway.call_tool(&ada, "sdk.test_tool_with_logging", json!({}), None);
        call().await.expect("a call on the first session");
        client()
            .post(format!(
                "{}/forget?status={status}&body={body}",
                server.base
            ))
            .send()
            .await
            .expect("the SDK server answers")
            .error_for_status()
            .expect("forgotten");
        let start = std::time::Instant::now();
        loop {
            if let Ok(answer) = call().await {
                assert!(answer.text().contains("logging done"));
                break;
            }
            assert!(
                start.elapsed() < WAIT,
                "{status} {body}: the gateway never opened a new session"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(server.count("initialized").await, 2, "{status} {body}");
        gateway.shutdown().await;
    }
}
