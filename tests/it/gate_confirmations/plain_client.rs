//! An MCP client that can neither ask its user (no elicitation) nor carry a token, over real
//! HTTP: the tool error names the confirmation and the route that approves it; the user
//! approves with the REST API as the same caller and session; the client repeats the call
//! and it runs once. Another user or session repeating it, a second repeat, or a repeat
//! after the approval expired is asked again and does not run.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use jsonwebtoken::{EncodingKey, Header, encode};
use mcpgate::{
    config::{AuthConfig, Config, Env, JwtAlgorithm, JwtConfig, SecretTemplate, ServiceConfig},
    gateway::{Gateway, GatewayOptions},
    policy::{Clock, ManualClock},
    server::{AppState, auth::Authenticator},
};
use reqwest::StatusCode;
use rmcp::{
    ClientHandler, RoleClient,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, Implementation,
        JsonObject, ProtocolVersion,
    },
    service::{ClientLifecycleMode, ClientServiceExt as _, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use super::{demo, notes};
use crate::support::{self, WAIT};

const SECRET: &str = "0123456789abcdef0123456789abcdef-plain-client";

/// A client that declares nothing: it cannot be asked anything.
#[derive(Clone)]
struct Plain;

impl ClientHandler for Plain {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("plain", "0"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }
}

/// `mcpgate`'s service on 127.0.0.1:0 with JWT authentication and a gateway on `clock`.
struct Service {
    addr: SocketAddr,
    gateway: Gateway,
    served: support::Served,
    http: reqwest::Client,
}

impl Service {
    async fn start(config: Config, clock: Clock) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let auth = AuthConfig::Jwt(Box::new(JwtConfig {
            algorithms: vec![JwtAlgorithm::Hs256],
            secret: Some(SecretTemplate::new("${JWT_SECRET}")),
            public_keys: vec![],
            jwks_url: None,
            issuer: "https://issuer.test/".into(),
            audience: "mcpgate".into(),
            tenant_claim: "tenant".into(),
            user_claim: "sub".into(),
            roles_claim: "roles".into(),
            default_tenant: None,
            leeway: Duration::from_secs(5),
            protected: None,
        }));
        let env = Env::from_pairs([("JWT_SECRET", SECRET)]);
        let authenticator = Authenticator::new(&auth, &env, addr, false)
            .await
            .expect("auth");
        let service = Arc::new(ServiceConfig {
            listen: addr,
            auth,
            ..ServiceConfig::default()
        });
        let options = GatewayOptions {
            clock,
            ..support::options()
        };
        let gateway = Gateway::start(config, options)
            .await
            .expect("the gateway starts");
        gateway.wait_ready(WAIT).await;
        let state = AppState::new(gateway.clone(), Arc::new(authenticator), service);
        let served = support::Served::spawn(listener, state);
        let http = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        Service {
            addr,
            gateway,
            served,
            http,
        }
    }

    /// An MCP session of `user` (tenant `local`).
    async fn connect(&self, user: &str) -> RunningService<RoleClient, Plain> {
        let config =
            StreamableHttpClientTransportConfig::with_uri(format!("http://{}/mcp", self.addr))
                .auth_header(token(user));
        let transport = StreamableHttpClientTransport::with_client(self.http.clone(), config);
        tokio::time::timeout(
            WAIT,
            Plain.serve_with_lifecycle(transport, ClientLifecycleMode::Initialize),
        )
        .await
        .expect("handshake in time")
        .expect("handshake")
    }

    /// `POST /api/v1/mcp/confirmations/{id}/approve` as `user` in `session`.
    async fn approve(&self, user: &str, session: &str, id: &str) -> StatusCode {
        let url = format!("http://{}/api/v1/mcp/confirmations/{id}/approve", self.addr);
        self.http
            .post(url)
            .bearer_auth(token(user))
            .header("x-mcpgate-session", session)
            .send()
            .await
            .expect("the approval request is answered")
            .status()
    }

    async fn stop(self) {
        self.served.stop().await;
        self.gateway.shutdown().await;
    }
}

fn token(user: &str) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    let claims = json!({
        "iss": "https://issuer.test/", "aud": "mcpgate", "sub": user, "tenant": "local",
        "exp": now + 600,
    });
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

fn args(title: &str) -> JsonObject {
    let Value::Object(map) = json!({ "title": title, "body": "b" }) else {
        unreachable!("a literal object")
    };
    map
}

async fn add_note(client: &RunningService<RoleClient, Plain>, title: &str) -> CallToolResult {
    let params = CallToolRequestParams::new("demo_add_note").with_arguments(args(title));
    tokio::time::timeout(WAIT, client.call_tool(params))
        .await
        .expect("answered in time")
        .expect("tools/call")
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

/// The text between `before` and the next character in `stop`.
fn field<'a>(text: &'a str, before: &str, stop: &[char]) -> &'a str {
    let start = text.find(before).expect("the field is named") + before.len();
    let rest = &text[start..];
    &rest[..rest.find(stop).unwrap_or(rest.len())]
}

/// Calls, expects the out-of-band confirmation error, and reads the confirmation id and the
/// session to approve in from it.
async fn asked(client: &RunningService<RoleClient, Plain>, title: &str) -> (String, String) {
    let result = add_note(client, title).await;
    assert_eq!(result.is_error, Some(true), "{}", text(&result));
    let said = text(&result);
    assert!(said.starts_with("[confirmation_required]"), "{said}");
    assert!(
        said.contains("call this tool again with exactly the same"),
        "{said}"
    );
    let id = field(&said, "Approve confirmation ", &[' ']).to_owned();
    assert!(
        said.contains(&format!("POST /api/v1/mcp/confirmations/{id}/approve")),
        "{said}"
    );
    let session = field(&said, "x-mcpgate-session: ", &['`']).to_owned();
    (id, session)
}

/// Repeats of one approved call sent at once over one session.
const RACERS: usize = 8;

fn manual_clock() -> (Clock, ManualClock) {
    Clock::manual(std::time::SystemTime::now())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_repeats_the_call_after_approval_and_it_runs_once() {
    let (clock, _hand) = manual_clock();
    let service = Service::start(support::config(vec![demo("demo")]), clock).await;
    let alice = service.connect("alice").await;
    let (id, session) = asked(&alice, "n1").await;
    assert_eq!(
        service.approve("alice", &session, &id).await,
        StatusCode::OK
    );

    // Repeats racing in the session: one runs, the others are asked again.
    let repeats = (0..RACERS).map(|_| add_note(&alice, "n1"));
    let results = futures::future::join_all(repeats).await;
    let ran: Vec<&CallToolResult> = results
        .iter()
        .filter(|r| r.is_error == Some(false))
        .collect();
    assert_eq!(
        ran.len(),
        1,
        "{:?}",
        results.iter().map(text).collect::<Vec<_>>()
    );
    assert!(text(ran[0]).contains("Saved note `n1`"), "{}", text(ran[0]));
    for result in results.iter().filter(|r| r.is_error != Some(false)) {
        assert!(
            text(result).starts_with("[confirmation_required]"),
            "{}",
            text(result)
        );
    }
    // Once: the next repeat is asked again.
    asked(&alice, "n1").await;

    let ctx = mcpgate::policy::CallContext {
        tenant: "local".into(),
        user: "alice".into(),
        session,
        roles: vec![],
        request_id: "check".into(),
    };
    assert_eq!(notes(&service.gateway, &ctx, "demo").await.len(), 1);
    let _ = alice.cancel().await;
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_user_or_session_repeating_the_call_is_asked_again() {
    let (clock, _hand) = manual_clock();
    let service = Service::start(support::config(vec![demo("demo")]), clock).await;
    let alice = service.connect("alice").await;
    let (id, session) = asked(&alice, "mine").await;

    // Approving needs the asking user and session; another's is not found.
    assert_eq!(
        service.approve("bob", &session, &id).await,
        StatusCode::NOT_FOUND
    );
    // A refused decision ends the confirmation; ask again and approve properly.
    let (id, session) = asked(&alice, "mine").await;
    assert_eq!(
        service.approve("alice", &session, &id).await,
        StatusCode::OK
    );

    let bob = service.connect("bob").await;
    let (_, bob_session) = asked(&bob, "mine").await;
    assert_ne!(bob_session, session);
    let alice_elsewhere = service.connect("alice").await;
    let (_, other_session) = asked(&alice_elsewhere, "mine").await;
    assert_ne!(other_session, session);

    // Still there for its own caller and session.
    let ran = add_note(&alice, "mine").await;
    assert_eq!(ran.is_error, Some(false), "{}", text(&ran));
    for client in [alice, bob, alice_elsewhere] {
        let _ = client.cancel().await;
    }
    service.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeat_after_the_approval_expired_is_asked_again() {
    let (clock, hand) = manual_clock();
    let service = Service::start(support::config(vec![demo("demo")]), clock).await;
    let token_ttl = service.gateway.config().confirmations.token_ttl;
    let alice = service.connect("alice").await;
    let (id, session) = asked(&alice, "late").await;
    assert_eq!(
        service.approve("alice", &session, &id).await,
        StatusCode::OK
    );
    hand.advance(token_ttl);
    asked(&alice, "late").await;
    let _ = alice.cancel().await;
    service.stop().await;
}
