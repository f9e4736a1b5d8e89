//! `mcpgate serve` over real HTTP on 127.0.0.1:0: every route, the error statuses, JWT and dev
//! authentication, the Host guard, body limits; and the binary's banner and clean stop.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use jsonwebtoken::{EncodingKey, Header, encode};
use mcpgate::{
    config::{AuthConfig, Config, Env, JwtAlgorithm, JwtConfig, SecretTemplate, ServiceConfig},
    gateway::Gateway,
    server::{AppState, OVERHEAD_HEADER, auth::Authenticator},
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::{self, fixture, in_process, no_confirm};

mod idempotency;
mod tenants;
mod usage;
pub(crate) mod webmcp;

const SECRET: &str = "0123456789abcdef0123456789abcdef-test-secret";

/// A running service and what a test needs to talk to it.
struct Service {
    base: String,
    token: Option<String>,
    gateway: Gateway,
    served: support::Served,
    client: reqwest::Client,
}

impl Service {
    async fn start(config: Config, auth: AuthConfig) -> Service {
        let service = ServiceConfig {
            max_body_bytes: 64 * 1024,
            ..ServiceConfig::default()
        };
        Service::start_with(config, auth, service).await
    }

    /// With `service`'s settings (its address and authentication are the test's).
    async fn start_with(config: Config, auth: AuthConfig, service: ServiceConfig) -> Service {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let env = Env::from_pairs([("JWT_SECRET", SECRET)]);
        let authenticator = Authenticator::new(&auth, &env, addr, false)
            .await
            .expect("auth");
        let token = authenticator.dev_token().map(str::to_owned);
        let service = Arc::new(ServiceConfig {
            listen: addr,
            auth,
            ..service
        });
        let gateway = support::gateway(config).await;
        let state = AppState::new(gateway.clone(), Arc::new(authenticator), service);
        let served = support::Served::spawn(listener, state);
        Service {
            base: format!("http://{addr}"),
            token,
            gateway,
            served,
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.auth(self.client.get(self.url(path)))
    }

    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.auth(self.client.post(self.url(path))).json(body)
    }

    fn auth(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn stop(self) {
        self.served.stop().await;
        self.gateway.shutdown().await;
    }
}

async fn json_of(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    let body = response.json().await.expect("JSON body");
    (status, body)
}

fn demo_config() -> Config {
    demo_config_with(&["demo"])
}

/// The demo server in process under each of `ids`, its read tools marked.
fn demo_config_with(ids: &[&str]) -> Config {
    let servers = ids.iter().map(|id| {
        let mut demo = in_process(id, mcpgate::fixtures::demo::DemoServer::new());
        demo.read_only_tools = ["echo", "add", "time_now", "list_notes"]
            .map(String::from)
            .to_vec();
        demo
    });
    support::config(servers.collect())
}

#[tokio::test]
async fn health_tools_and_headers() {
    let service = Service::start(demo_config(), AuthConfig::Dev).await;
    let health = service
        .client
        .get(service.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    let (status, ready) = json_of(
        service
            .client
            .get(service.url("/readyz"))
            .send()
            .await
            .expect("readyz"),
    )
    .await;
    assert_eq!(
        (status, &ready["servers"][0]["state"]),
        (StatusCode::OK, &json!("ready"))
    );

    let response = service
        .get("/api/v1/mcp/tools")
        .header("x-request-id", "trace-me-1")
        .send()
        .await
        .expect("tools");
    let overhead = response
        .headers()
        .get(OVERHEAD_HEADER)
        .expect("overhead header");
    assert!(overhead.to_str().expect("ascii").parse::<f64>().is_ok());
    assert_eq!(response.headers()["x-request-id"], "trace-me-1");
    let (status, body) = json_of(response).await;
    assert_eq!(status, StatusCode::OK);
    let tools = body["tools"].as_array().expect("tools");
    let add_note = tools
        .iter()
        .find(|t| t["name"] == "demo.add_note")
        .expect("add_note");
    assert_eq!(add_note["functionName"], "demo_add_note");
    assert_eq!(add_note["requiresConfirmation"], true);
    assert_eq!(add_note["status"], "ok");
    let echo = tools
        .iter()
        .find(|t| t["name"] == "demo.echo")
        .expect("echo");
    assert_eq!(echo["requiresConfirmation"], false);

    let (status, servers) = json_of(
        service
            .get("/api/v1/mcp/servers")
            .send()
            .await
            .expect("servers"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(servers["servers"][0]["toolCount"], 6);
    let refresh = service
        .post("/api/v1/mcp/servers/demo/refresh", &json!({}))
        .send()
        .await
        .expect("refresh");
    assert_eq!(refresh.status(), StatusCode::OK);
    let missing = service
        .post("/api/v1/mcp/servers/nope/refresh", &json!({}))
        .send()
        .await
        .expect("refresh");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    service.stop().await;
}

#[tokio::test]
async fn calls_and_confirmations_over_rest() {
    let service = Service::start(demo_config(), AuthConfig::Dev).await;
    let call = |body: Value| service.post("/api/v1/mcp/tools/call", &body).send();

    let (status, body) = json_of(
        call(json!({"tool": "demo.echo", "arguments": {"message": "hi"}}))
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["ok"], true);
    assert_eq!(body["data"]["content"][0]["text"], "Echo: hi");

    let (status, body) = json_of(call(json!({"tool": "demo.nope"})).await.expect("call")).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    let (status, body) = json_of(
        call(json!({"tool": "demo.echo", "arguments": {"message": 5}}))
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_arguments"))
    );
    let (status, body) = json_of(
        call(json!({"tool": "demo.echo", "extra": 1}))
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("bad_request"))
    );
    // Duplicate keys anywhere in the body are refused.
    let raw = r#"{"tool":"demo.echo","arguments":{"message":"a","message":"b"}}"#;
    let response = service
        .auth(service.client.post(service.url("/api/v1/mcp/tools/call")))
        .header("content-type", "application/json")
        .body(raw)
        .send()
        .await
        .expect("call");
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);

    let note = json!({"tool": "demo.add_note", "arguments": {"title": "t", "body": "b"}});
    let (status, held) = json_of(call(note.clone()).await.expect("call")).await;
    assert_eq!(
        (status, &held["code"]),
        (
            StatusCode::PRECONDITION_REQUIRED,
            &json!("confirmation_required")
        )
    );
    let id = held["confirmationId"]
        .as_str()
        .expect("confirmation id")
        .to_owned();
    let (_, pending) = json_of(
        service
            .get("/api/v1/mcp/confirmations")
            .send()
            .await
            .expect("list"),
    )
    .await;
    assert_eq!(pending["confirmations"][0]["confirmationId"], id.as_str());
    let (status, approval) = json_of(
        service
            .post(
                &format!("/api/v1/mcp/confirmations/{id}/approve"),
                &json!({}),
            )
            .send()
            .await
            .expect("approve"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let token = approval["confirmationToken"]
        .as_str()
        .expect("token")
        .to_owned();
    let mut confirmed = note.clone();
    confirmed["confirmationToken"] = json!(token);
    let (status, done) = json_of(call(confirmed.clone()).await.expect("call")).await;
    assert_eq!((status, &done["ok"]), (StatusCode::OK, &json!(true)));
    let (status, replay) = json_of(call(confirmed).await.expect("call")).await;
    assert_eq!(
        (status, &replay["code"]),
        (StatusCode::CONFLICT, &json!("confirmation_invalid"))
    );

    let (_, held) = json_of(call(note).await.expect("call")).await;
    let id = held["confirmationId"].as_str().expect("id");
    let denied = service
        .post(&format!("/api/v1/mcp/confirmations/{id}/deny"), &json!({}))
        .send()
        .await
        .expect("deny");
    assert_eq!(denied.status(), StatusCode::OK);
    let again = service
        .post(
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            &json!({}),
        )
        .send()
        .await
        .expect("approve");
    assert_eq!(again.status(), StatusCode::NOT_FOUND);

    let (status, audit) = json_of(
        service
            .get("/api/v1/audit?tool=demo.add_note")
            .send()
            .await
            .expect("audit"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let outcomes: Vec<&str> = audit["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter_map(|r| r["outcome"].as_str())
        .collect();
    assert!(
        outcomes.contains(&"ok") && outcomes.contains(&"confirmation_required"),
        "{outcomes:?}"
    );
    // A query the audit does not take is a typed error, like every other refusal.
    let (status, refused) = json_of(
        service
            .get("/api/v1/audit?tool=demo.add_note&color=red")
            .send()
            .await
            .expect("audit"),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(refused["code"], "bad_request", "{refused}");
    service.stop().await;
}

/// Refusals that the extractors, the router and rmcp make in plain text or with no body (a
/// body over `max_body_bytes`, a query the route does not take, no MCP session, an unknown
/// route) are answered as every other refusal is: `{ok: false, code, message}`, as the
/// OpenAPI document says.
#[tokio::test]
async fn plain_refusals_are_typed() {
    let service = Service::start(demo_config(), AuthConfig::Dev).await;
    let big = json!({ "tool": "demo.echo", "arguments": { "message": "a".repeat(100 * 1024) } });
    let list = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" });
    let cases = [
        (
            service.post("/api/v1/mcp/tools/call", &big),
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
        ),
        (
            service.get("/api/v1/audit?color=red"),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            service.auth(service.client.delete(service.url("/mcp"))),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            service
                .post("/mcp", &list)
                .header("accept", "application/json, text/event-stream"),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            service.get("/api/v1/no-such-route"),
            StatusCode::NOT_FOUND,
            "route_not_found",
        ),
    ];
    for (request, status, code) in cases {
        let response = request.send().await.expect("a response");
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let (got, body) = json_of(response).await;
        assert_eq!((got, &body["code"]), (status, &json!(code)), "{body}");
        assert!(
            content_type.starts_with("application/json"),
            "{content_type}"
        );
        assert_eq!(body["ok"], false, "{body}");
        assert!(
            body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    service.stop().await;
}

/// A client that sends its request headers a byte at a time (slow loris) is cut off once
/// `header_read_timeout` has passed, while other clients are served.
#[tokio::test]
async fn slow_loris_headers_are_cut_off() {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let service = Service::start_with(
        demo_config(),
        AuthConfig::Dev,
        ServiceConfig {
            header_read_timeout: Duration::from_secs(1),
            ..ServiceConfig::default()
        },
    )
    .await;
    let addr = service.base.trim_start_matches("http://").to_owned();
    let mut slow = tokio::net::TcpStream::connect(&addr)
        .await
        .expect("connect");
    let started = std::time::Instant::now();
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ";
    // A byte every 200 ms, never the end of the headers: the server must close on us.
    let closed = tokio::time::timeout(Duration::from_secs(20), async {
        for byte in request.iter().chain(std::iter::repeat(&b'a')) {
            if slow.write_all(&[*byte]).await.is_err() {
                return;
            }
            let mut buf = [0u8; 256];
            match tokio::time::timeout(Duration::from_millis(200), slow.read(&mut buf)).await {
                Ok(Ok(0) | Err(_)) => return,
                // hyper answers 408 before it closes.
                Ok(Ok(_)) => {}
                Err(_) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the connection was still open after 20 s");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    let health = service.get("/healthz").send().await.expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    service.stop().await;
}

#[tokio::test]
async fn limits_timeouts_and_sizes_map_to_statuses() {
    let mut slow = no_confirm(fixture("slow", "slow"));
    slow.tool_timeouts = vec![("sleep".into(), Duration::from_millis(200))];
    let mut demo = in_process("demo", mcpgate::fixtures::demo::DemoServer::new());
    demo.read_only_tools = vec!["echo".into()];
    let mut config = support::config(vec![slow, demo]);
    config.call_limits.user_calls_per_minute = 3;
    config.limits.max_result_bytes = 1024;
    let service = Service::start(config, AuthConfig::Dev).await;
    let call = |body: Value| service.post("/api/v1/mcp/tools/call", &body).send();

    let (status, body) = json_of(
        call(json!({"tool": "slow.sleep", "arguments": {"ms": 5000}}))
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::GATEWAY_TIMEOUT, &json!("timeout"))
    );
    let big = "x".repeat(4096);
    let (status, body) = json_of(
        call(json!({"tool": "demo.echo", "arguments": {"message": big}}))
            .await
            .expect("call"),
    )
    .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::PAYLOAD_TOO_LARGE, &json!("result_too_large"))
    );
    let _ = call(json!({"tool": "demo.echo", "arguments": {"message": "3"}}))
        .await
        .expect("call");
    let response = call(json!({"tool": "demo.echo", "arguments": {"message": "4"}}))
        .await
        .expect("call");
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(response.headers().contains_key("retry-after"));

    let huge = json!({"tool": "demo.echo", "arguments": {"message": "y".repeat(100 * 1024)}});
    let response = call(huge).await.expect("call");
    assert_eq!(response.status(), StatusCode::PAYLOAD_TOO_LARGE);
    service.stop().await;
}

fn jwt_auth() -> AuthConfig {
    AuthConfig::Jwt(Box::new(JwtConfig {
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
    }))
}

fn jwt(claims: Value) -> String {
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
}

#[tokio::test]
async fn jwt_authentication_and_roles() {
    let service = Service::start(demo_config(), jwt_auth()).await;
    let claims = |extra: Value| {
        let mut c = json!({"iss": "https://issuer.test/", "aud": "mcpgate", "sub": "alice", "tenant": "local", "exp": now() + 300});
        if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
            c.extend(extra);
        }
        c
    };
    let tools = |token: Option<String>| {
        let request = service.client.get(service.url("/api/v1/mcp/tools"));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
        .send()
    };
    assert_eq!(
        tools(Some(jwt(claims(json!({})))))
            .await
            .expect("ok")
            .status(),
        StatusCode::OK
    );
    let missing = tools(None).await.expect("sent");
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    assert!(
        missing.headers()["www-authenticate"]
            .to_str()
            .expect("ascii")
            .starts_with("Bearer")
    );
    for bad in [
        claims(json!({"exp": now() - 600})),
        claims(json!({"aud": "someone-else"})),
        claims(json!({"iss": "https://evil.test/"})),
    ] {
        let response = tools(Some(jwt(bad.clone()))).await.expect("sent");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{bad}");
    }
    let mut no_sub = claims(json!({}));
    no_sub.as_object_mut().expect("object").remove("sub");
    assert_eq!(
        tools(Some(jwt(no_sub))).await.expect("sent").status(),
        StatusCode::UNAUTHORIZED
    );
    let unsigned = format!(
        "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{}.",
        base64_url(&claims(json!({})).to_string())
    );
    assert_eq!(
        tools(Some(unsigned)).await.expect("sent").status(),
        StatusCode::UNAUTHORIZED
    );
    let in_query = service
        .client
        .get(service.url(&format!(
            "/api/v1/mcp/tools?access_token={}",
            jwt(claims(json!({})))
        )))
        .send()
        .await
        .expect("sent");
    assert_eq!(in_query.status(), StatusCode::BAD_REQUEST);

    // A valid token without the admin role may not read the audit log.
    let audit = service
        .client
        .get(service.url("/api/v1/audit"))
        .bearer_auth(jwt(claims(json!({}))))
        .send()
        .await
        .expect("sent");
    assert_eq!(audit.status(), StatusCode::FORBIDDEN);
    let admin = service
        .client
        .get(service.url("/api/v1/audit"))
        .bearer_auth(jwt(claims(json!({"roles": ["admin"]}))))
        .send()
        .await
        .expect("sent");
    assert_eq!(admin.status(), StatusCode::OK);
    service.stop().await;
}

fn base64_url(text: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, b| (acc << 8) | u32::from(*b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[tokio::test]
async fn foreign_hosts_and_origins_are_refused() {
    let service = Service::start(demo_config(), AuthConfig::Dev).await;
    let rebinding = service
        .get("/api/v1/mcp/tools")
        .header("host", "evil.example:8080")
        .send()
        .await
        .expect("sent");
    assert_eq!(rebinding.status(), StatusCode::FORBIDDEN);
    let origin = service
        .get("/api/v1/mcp/tools")
        .header("origin", "http://evil.example")
        .send()
        .await
        .expect("sent");
    assert_eq!(origin.status(), StatusCode::FORBIDDEN);
    service.stop().await;
}

#[tokio::test]
async fn the_binary_prints_where_to_go_and_stops_cleanly() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = tokio::process::Command::new(support::mcpgate_bin())
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut base, mut token, mut servers) = (None, None, None);
    while let Ok(Some(line)) = tokio::time::timeout(support::WAIT, lines.next_line())
        .await
        .expect("banner in time")
    {
        if let Some(rest) = line.trim().strip_prefix("servers") {
            servers = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.strip_prefix("mcpgate is serving on ") {
            base = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.trim().strip_prefix("token") {
            token = Some(rest.trim().to_owned());
        }
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    let (base, token) = (
        base.expect("address printed"),
        token.expect("token printed"),
    );
    // Where each server came from: here, the embedded default's demo.
    assert_eq!(servers.as_deref(), Some("demo (from default)"));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let response = client
        .post(format!("{base}/api/v1/mcp/tools/call"))
        .bearer_auth(&token)
        .json(&json!({"tool": "demo.echo", "arguments": {"message": "served"}}))
        .send()
        .await
        .expect("call");
    assert_eq!(response.status(), StatusCode::OK);
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    let demo_pids = support::child_pids(child.id().expect("running") as i32);
    assert!(
        !demo_pids.is_empty(),
        "the demo server runs under the gateway"
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal");
    let status = tokio::time::timeout(support::WAIT, child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(status.success(), "{status:?}");
    support::wait_for("the demo server to be gone", || {
        demo_pids.iter().all(|p| !support::alive(*p)).then_some(())
    })
    .await;
}
