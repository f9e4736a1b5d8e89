//! The endpoint on 127.0.0.1:0 in front of a gateway with in-process upstreams (the demo
//! server, whose notes are writes, and the `changing` fixture), and an rmcp test client.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use axum::{Router, middleware};
use rmcp::{
    ClientHandler, ErrorData, RoleClient, ServerHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
        ElicitRequestParams, ElicitResult, ElicitationAction, Implementation, JsonObject,
        ProtocolVersion,
    },
    service::{
        ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::watch, task::JoinHandle};
use tokio_util::sync::CancellationToken;

use super::super::mcp_router;
use crate::{
    config::{
        AccessConfig, AuthConfig, Config, Confirm, Env, InProcess, JwtAlgorithm, JwtConfig,
        PinsConfig, SecretTemplate, ServerConfig, ServerId, ServiceConfig, StateConfig,
        TransportConfig,
    },
    fixtures::{Fixture, demo::DemoServer},
    gateway::{Gateway, GatewayOptions, Stores},
    lane::Lanes,
    server::{AppState, auth::Authenticator, rest},
};

/// How long any one condition may take before the test fails (a busy 2-core machine).
pub const WAIT: Duration = Duration::from_secs(30);

/// The HS256 secret of test JWTs.
pub const JWT_SECRET: &str = "0123456789abcdef0123456789abcdef-mcp-test-secret";
/// The issuer of test JWTs.
pub const JWT_ISSUER: &str = "https://issuer.test/";

/// JWT authentication with [`JWT_SECRET`].
pub fn jwt_auth() -> AuthConfig {
    AuthConfig::Jwt(Box::new(JwtConfig {
        algorithms: vec![JwtAlgorithm::Hs256],
        secret: Some(SecretTemplate::new("${JWT_SECRET}")),
        public_keys: vec![],
        jwks_url: None,
        issuer: JWT_ISSUER.into(),
        audience: "mcpgate".into(),
        tenant_claim: "tenant".into(),
        user_claim: "sub".into(),
        roles_claim: "roles".into(),
        default_tenant: None,
        leeway: Duration::from_secs(5),
        protected: None,
    }))
}

/// A token for `user` of tenant `local`, valid for five minutes.
pub fn jwt_for(user: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    let claims = json!({
        "iss": JWT_ISSUER, "aud": "mcpgate", "sub": user, "tenant": "local", "exp": now + 300
    });
    let key = jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("key");
    jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).expect("token")
}

/// Bytes buffered each way between the gateway and an in-process upstream.
const PIPE_BYTES: usize = 64 * 1024;

pub fn in_process<H: ServerHandler + Clone>(id: &str, handler: H) -> ServerConfig {
    let factory = move || {
        let (client, server) = tokio::io::duplex(PIPE_BYTES);
        let handler = handler.clone();
        // Ends when the gateway closes its end of the pipe.
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        client
    };
    ServerConfig::new(
        ServerId::new(id).expect("test ids are valid"),
        TransportConfig::InProcess(InProcess(Arc::new(factory))),
    )
}

/// A running endpoint (and the REST API beside it, as `app()` mounts both).
pub struct Endpoint {
    /// Where requests go: set it to one of `lane_bases` to reach another lane.
    pub base: String,
    pub token: String,
    pub gateway: Gateway,
    /// Each lane's own address, when served on lanes ([`Endpoint::start_on_lanes`]).
    pub lane_bases: Vec<String>,
    lanes: Option<Lanes>,
    shutdown: CancellationToken,
    /// The server; `None` once it was waited for.
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Endpoint {
    pub async fn start() -> Endpoint {
        Endpoint::start_with(AuthConfig::Dev).await
    }

    /// With the given authentication; JWTs are HS256 with [`JWT_SECRET`], issuer
    /// [`JWT_ISSUER`], audience `mcpgate`.
    pub async fn start_with(auth: AuthConfig) -> Endpoint {
        Endpoint::start_servers(auth, Endpoint::default_servers(), None).await
    }

    /// The demo server (notes are writes) and the `changing` fixture.
    fn default_servers() -> Vec<ServerConfig> {
        let mut demo = in_process("demo", DemoServer::new());
        demo.read_only_tools = crate::fixtures::demo::READ_ONLY_TOOLS
            .iter()
            .map(|t| (*t).to_owned())
            .collect();
        let changing = crate::fixtures::handler(Fixture::Changing).expect("in-process fixture");
        let mut changing = in_process("changing", changing);
        changing.confirm = Confirm::None;
        vec![changing, demo]
    }

    /// In front of `servers`, with `access` rules (`None`: single-tenant).
    pub async fn start_servers(
        auth: AuthConfig,
        servers: Vec<ServerConfig>,
        access: Option<AccessConfig>,
    ) -> Endpoint {
        let service = ServiceConfig::default();
        Endpoint::start_service(auth, servers, access, service).await
    }

    /// With dev auth and MCP sessions closed after `idle` without a message.
    pub async fn start_idling(idle: Duration) -> Endpoint {
        let service = ServiceConfig {
            mcp_session_idle: idle,
            ..ServiceConfig::default()
        };
        Endpoint::start_service(AuthConfig::Dev, Endpoint::default_servers(), None, service).await
    }

    /// The whole service (as `mcpgate serve` runs it) on two lanes, each accepting on an
    /// address of its own, so that a test chooses the lane of every request. Its shutdown
    /// grace outlasts [`WAIT`]: serving that does not stop by itself fails the test.
    pub async fn start_on_lanes() -> Endpoint {
        Endpoint::start_on_lanes_with(Endpoint::default_servers(), WAIT * 2).await
    }

    /// As [`Endpoint::start_on_lanes`], in front of `servers`, with `grace` to stop in.
    pub async fn start_on_lanes_with(servers: Vec<ServerConfig>, grace: Duration) -> Endpoint {
        let gateway = Endpoint::gateway(servers, None).await;
        let mut listeners = Vec::new();
        for _ in 0..2 {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listeners.push(listener);
        }
        let addr = listeners[0].local_addr().expect("address");
        let (auth, token) = Endpoint::auth(&AuthConfig::Dev, addr).await;
        let shutdown = CancellationToken::new();
        let service = Arc::new(ServiceConfig {
            listen: addr,
            shutdown_grace: grace,
            ..ServiceConfig::default()
        });
        // The sessions' own token, as `mcpgate serve` has it: serving closes them itself.
        let state = AppState::new(gateway.clone(), Arc::new(auth), service);
        let lanes = Lanes::start(2).expect("lanes start");
        let lane_bases: Vec<String> = listeners
            .iter()
            .map(|l| format!("http://{}", l.local_addr().expect("address")))
            .collect();
        // Each lane its own listener.
        let listeners = listeners.into_iter().zip(0..).map(|(l, i)| (l, vec![i]));
        let (handles, listeners): (Vec<_>, _) =
            (lanes.handles().cloned().collect(), listeners.collect());
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            crate::server::serve_lanes(&handles, listeners, state, stop.cancelled_owned()).await
        });
        Endpoint {
            base: lane_bases[0].clone(),
            token,
            gateway,
            lane_bases,
            lanes: Some(lanes),
            shutdown,
            task: Some(task),
        }
    }

    /// A gateway in front of `servers`, with `access` rules, its first connections made.
    async fn gateway(servers: Vec<ServerConfig>, access: Option<AccessConfig>) -> Gateway {
        let config = Config {
            servers,
            access,
            state: StateConfig::Memory,
            pins: PinsConfig::none(),
            ..Config::default()
        };
        let stores = Stores::memory();
        let gateway = Gateway::start_with_stores(config, GatewayOptions::default(), stores)
            .expect("the gateway starts");
        gateway.wait_ready(WAIT).await;
        gateway
    }

    /// `auth` set up for a service on `addr`, and its dev token (empty if none).
    async fn auth(auth: &AuthConfig, addr: SocketAddr) -> (Authenticator, String) {
        let env = Env::from_pairs([("JWT_SECRET", JWT_SECRET)]);
        let auth = Authenticator::new(auth, &env, addr, false)
            .await
            .expect("authentication is set up");
        let token = auth.dev_token().unwrap_or_default().to_owned();
        (auth, token)
    }

    /// In front of `servers`, with `access` rules and `service`'s settings but its address.
    async fn start_service(
        auth: AuthConfig,
        servers: Vec<ServerConfig>,
        access: Option<AccessConfig>,
        service: ServiceConfig,
    ) -> Endpoint {
        let gateway = Endpoint::gateway(servers, access).await;
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("address");
        let (auth, token) = Endpoint::auth(&auth, addr).await;
        let shutdown = CancellationToken::new();
        let service = Arc::new(ServiceConfig {
            listen: addr,
            ..service
        });
        let state =
            AppState::new(gateway.clone(), Arc::new(auth), service).with_shutdown(shutdown.clone());
        let api = rest::routes().layer(middleware::from_fn_with_state(
            state.clone(),
            super::super::super::authenticate,
        ));
        let app = Router::new()
            .merge(mcp_router(state.clone(), shutdown.clone()))
            .nest("/api/v1", api)
            .with_state(state);
        let stop = shutdown.clone();
        let task = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop.cancelled_owned())
                .await
        });
        Endpoint {
            base: format!("http://{addr}"),
            token,
            gateway,
            lane_bases: Vec::new(),
            lanes: None,
            shutdown,
            task: Some(task),
        }
    }

    pub fn url(&self) -> String {
        format!("{}/mcp", self.base)
    }

    /// Connects an rmcp client over Streamable HTTP with the bearer token.
    pub async fn connect(
        &self,
        client: TestClient,
        lifecycle: ClientLifecycleMode,
    ) -> RunningService<RoleClient, TestClient> {
        self.connect_as(client, lifecycle, &self.token).await
    }

    /// Connects an rmcp client with `token` as its bearer token.
    pub async fn connect_as(
        &self,
        client: TestClient,
        lifecycle: ClientLifecycleMode,
        token: &str,
    ) -> RunningService<RoleClient, TestClient> {
        self.connect_to(self.url(), client, lifecycle, token).await
    }

    /// Connects an rmcp client to `url` (an endpoint path of this service) as `token`.
    pub async fn connect_to(
        &self,
        url: String,
        client: TestClient,
        lifecycle: ClientLifecycleMode,
        token: &str,
    ) -> RunningService<RoleClient, TestClient> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(url).auth_header(token.to_owned());
        let transport = StreamableHttpClientTransport::with_client(http(), config);
        tokio::time::timeout(WAIT, client.serve_with_lifecycle(transport, lifecycle))
            .await
            .expect("handshake within the deadline")
            .expect("handshake succeeds")
    }

    /// Stops serving as `mcpgate serve` does at a signal: what the server returned, within
    /// [`WAIT`].
    pub async fn stop_serving(&mut self) -> std::io::Result<()> {
        self.shutdown.cancel();
        let task = self.task.take().expect("still serving");
        tokio::time::timeout(WAIT, task)
            .await
            .expect("the server stops within the deadline")
            .expect("the server's task ends by itself")
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        if let Some(task) = self.task {
            let _ = tokio::time::timeout(WAIT, task).await;
        }
        self.gateway.shutdown().await;
        if let Some(lanes) = self.lanes {
            lanes.stop().await;
        }
    }
}

pub fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
}

/// `request` made in `session`: its id and the protocol version it was opened with.
pub fn in_session(request: reqwest::RequestBuilder, session: &str) -> reqwest::RequestBuilder {
    request
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", "2025-06-18")
}

/// A bodiless `method` request (`GET` opens the session's stream, `DELETE` ends it) as
/// `token` in `session`.
pub async fn without_body(
    endpoint: &Endpoint,
    token: &str,
    session: &str,
    method: reqwest::Method,
) -> reqwest::Response {
    let request = http()
        .request(method, endpoint.url())
        .bearer_auth(token)
        .header("accept", "text/event-stream");
    in_session(request, session)
        .send()
        .await
        .expect("a response")
}

/// The `slow` fixture in process, as server `slow`, its calls needing no confirmation.
pub fn slow_server() -> ServerConfig {
    let handler = crate::fixtures::handler(Fixture::Slow).expect("in-process fixture");
    let mut slow = in_process("slow", handler);
    slow.confirm = Confirm::None;
    slow
}

/// The `initialize` handshake: a session.
pub fn initialize() -> ClientLifecycleMode {
    ClientLifecycleMode::Initialize
}

/// `server/discover` first, as a 2026-07-28 client does.
pub fn discover() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: None,
    }
}

/// A client that may declare elicitation (answering yes or no) and records what it saw.
#[derive(Clone)]
pub struct TestClient {
    /// `None`: no elicitation capability; `Some(yes)`: answers every form with `yes`.
    answer: Option<bool>,
    pub prompts: Arc<Mutex<Vec<String>>>,
    pub list_changes: Arc<watch::Sender<usize>>,
}

impl TestClient {
    pub fn new(answer: Option<bool>) -> TestClient {
        TestClient {
            answer,
            prompts: Arc::new(Mutex::new(Vec::new())),
            list_changes: Arc::new(watch::channel(0).0),
        }
    }

    pub fn prompts(&self) -> Vec<String> {
        self.prompts
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let capabilities = match self.answer {
            Some(_) => ClientCapabilities::builder().enable_elicitation().build(),
            None => ClientCapabilities::default(),
        };
        ClientConfig::new(capabilities, Implementation::new("mcp-test", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = request {
            self.prompts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(message);
        }
        Ok(match self.answer {
            Some(true) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(json!({ "approve": true })),
            _ => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.list_changes.send_modify(|n| *n += 1);
    }
}

/// A `tools/call` with JSON object arguments.
pub fn call(name: &'static str, args: Value) -> CallToolRequestParams {
    let arguments: JsonObject = match args {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    };
    CallToolRequestParams::new(name).with_arguments(arguments)
}

/// Every text block of a result, joined.
pub fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `name` and returns the result, failing the test on a protocol error.
pub async fn call_ok(
    client: &RunningService<RoleClient, TestClient>,
    name: &'static str,
    args: Value,
) -> CallToolResult {
    tokio::time::timeout(WAIT, client.call_tool(call(name, args)))
        .await
        .expect("the call ends within the deadline")
        .expect("no protocol error")
}

/// The slow fixture's call counts (`sleep_stats`), once `done` holds of them (bounded).
pub async fn sleep_stats_until(endpoint: &Endpoint, done: impl Fn(&Value) -> bool) -> Value {
    let ctx = crate::policy::CallContext::local();
    tokio::time::timeout(WAIT, async {
        loop {
            let stats = endpoint
                .gateway
                .call_tool(&ctx, "slow.sleep_stats", json!({}), None)
                .await
                .expect("stats");
            let stats: Value = serde_json::from_str(&stats.text()).expect("JSON stats");
            if done(&stats) {
                return stats;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the upstream's counts within the bound")
}
