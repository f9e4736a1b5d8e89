//! The WebMCP bridge over a real socket, the test speaking as a page (tokio-tungstenite): the
//! upgrade's refusals, a page's tools through the one gate (REST, the invoke route, `/mcp`),
//! confirmations of writes, the audit, other users, bad frames, a page that goes mid-call or
//! reloads, a page that falls silent, and the caps on pages.

use std::sync::Arc;

use futures::{SinkExt, StreamExt};
use mcpgate::config::{AccessConfig, Config, Grant, TenantAccess, WebMcpConfig};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::{net::TcpStream, sync::watch};
use tokio_tungstenite::{
    MaybeTlsStream, WebSocketStream,
    tungstenite::{self, Message, client::IntoClientRequest, handshake::client::Request},
};

use super::{Service, demo_config, jwt, jwt_auth, now};
use crate::support::{WAIT, id, wait_for_async};

/// The pages' origin, as a browser sends it.
pub(crate) const ORIGIN: &str = "http://editor.test:8000";
const SUBPROTOCOL: &str = "mcpgate.webmcp.v1";

/// The demo server and the bridge on for [`ORIGIN`], with `tune` applied to `[webmcp]`.
fn bridge_config(tune: impl FnOnce(&mut WebMcpConfig)) -> Config {
    let mut config = demo_config();
    config.webmcp.allowed_origins = vec![ORIGIN.into()];
    tune(&mut config.webmcp);
    config
}

/// A token for `user` of tenant `local` with `roles`.
fn token(user: &str, roles: &[&str]) -> String {
    jwt(json!({
        "iss": "https://issuer.test/", "aud": "mcpgate", "exp": now() + 300,
        "tenant": "local", "sub": user, "roles": roles,
    }))
}

/// The upgrade request a browser page sends: its origin, the bridge's subprotocol and the
/// token as a second offered subprotocol.
pub(crate) fn request(
    base: &str,
    client_id: &str,
    origin: Option<&str>,
    token: Option<&str>,
) -> Request {
    let url = format!(
        "{}/api/v1/webmcp/bridge/{client_id}",
        base.replacen("http", "ws", 1)
    );
    let mut request = url.into_client_request().expect("a WebSocket request");
    let headers = request.headers_mut();
    if let Some(origin) = origin {
        headers.insert("origin", origin.parse().expect("origin"));
    }
    let protocols = match token {
        Some(token) => format!("{SUBPROTOCOL}, mcpgate.bearer.{token}"),
        None => SUBPROTOCOL.to_owned(),
    };
    headers.insert(
        "sec-websocket-protocol",
        protocols.parse().expect("protocols"),
    );
    request
}

/// A page's end of the bridge.
pub(crate) struct TestPage {
    pub(crate) ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// Opens the bridge with `request`: the page, or the refusal's status and JSON body.
pub(crate) async fn upgrade(request: Request) -> Result<TestPage, (u16, Value)> {
    let connecting = tokio::time::timeout(WAIT, tokio_tungstenite::connect_async(request));
    match connecting.await.expect("the upgrade is answered in time") {
        Ok((ws, response)) => {
            // The token is never echoed back: the gateway selects the bridge's protocol alone.
            assert_eq!(response.headers()["sec-websocket-protocol"], SUBPROTOCOL);
            Ok(TestPage { ws })
        }
        Err(tungstenite::Error::Http(response)) => {
            let body = response.body().as_deref().unwrap_or_default();
            let body = serde_json::from_slice(body).unwrap_or(Value::Null);
            Err((response.status().as_u16(), body))
        }
        Err(other) => panic!("the upgrade failed: {other}"),
    }
}

/// The refusal of `request`'s upgrade, as `(status, code)`.
async fn refusal(request: Request) -> (u16, String) {
    match upgrade(request).await {
        Ok(_) => panic!("the upgrade was accepted"),
        Err((status, body)) => (status, body["code"].as_str().unwrap_or("").to_owned()),
    }
}

impl TestPage {
    /// A page of `user` connected as `client_id` that said `hello` and was accepted.
    async fn open(service: &Service, client_id: &str, user: &str) -> TestPage {
        let mut page = Self::connect(service, client_id, user).await;
        let accepted = page.hello().await;
        assert_eq!(accepted["type"], "accepted", "{accepted}");
        page
    }

    /// A page connected to the gateway at `base` as `client_id` with `token`, accepted.
    pub(crate) async fn open_at(base: &str, client_id: &str, token: &str) -> TestPage {
        let mut page = Self::connect_at(base, client_id, token).await;
        let accepted = page.hello().await;
        assert_eq!(accepted["type"], "accepted", "{accepted}");
        page
    }

    /// A page connected to the gateway at `base` as `client_id` with `token`, before `hello`.
    pub(crate) async fn connect_at(base: &str, client_id: &str, token: &str) -> TestPage {
        let request = request(base, client_id, Some(ORIGIN), Some(token));
        upgrade(request).await.expect("the page connects")
    }

    /// A page of `user` connected as `client_id`, before `hello`.
    async fn connect(service: &Service, client_id: &str, user: &str) -> TestPage {
        let token = token(user, &[]);
        let request = request(&service.base, client_id, Some(ORIGIN), Some(&token));
        upgrade(request).await.expect("the page connects")
    }

    pub(crate) async fn hello(&mut self) -> Value {
        self.send(json!({"type": "hello", "version": 1})).await;
        self.next().await
    }

    async fn send(&mut self, message: Value) {
        self.send_text(message.to_string()).await;
    }

    async fn send_text(&mut self, text: String) {
        self.ws
            .send(Message::Text(text.into()))
            .await
            .expect("the page sends");
    }

    /// The gateway's next message, the gateway's own heartbeat pings answered on the way;
    /// `{"closed": code}` when the gateway closed the socket.
    pub(crate) async fn next(&mut self) -> Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let message = tokio::time::timeout_at(deadline, self.ws.next())
                .await
                .expect("the gateway says something in time");
            let text = match message {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(frame))) => {
                    return json!({"closed": frame.map(|f| u16::from(f.code))});
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => return json!({"closed": null}),
            };
            let value: Value = serde_json::from_str(&text).expect("the gateway sends JSON");
            if value["type"] == "ping" {
                self.send(json!({"type": "pong"})).await;
                continue;
            }
            return value;
        }
    }

    /// Registers `tools` (the whole list).
    pub(crate) async fn register(&mut self, tools: Value) {
        self.send(json!({"type": "tools", "tools": tools})).await;
        let answer = self.next().await;
        assert_eq!(answer["type"], "tools_accepted", "{answer}");
    }

    /// Waits for the gateway to send an invoke; its call id, tool and arguments.
    pub(crate) async fn invoked(&mut self) -> (String, String, Value) {
        let invoke = self.next().await;
        assert_eq!(invoke["type"], "invoke", "{invoke}");
        let call_id = invoke["callId"].as_str().expect("a call id").to_owned();
        let tool = invoke["tool"].as_str().expect("a tool").to_owned();
        (call_id, tool, invoke["arguments"].clone())
    }

    pub(crate) async fn answer(&mut self, call_id: &str, result: Value) {
        self.send(json!({"type": "result", "callId": call_id, "result": result}))
            .await;
    }

    /// Whether nothing was sent to the page before the answer to a ping of its own: no
    /// invoke waits unseen on the socket.
    async fn nothing_waiting(&mut self) {
        self.send(json!({"type": "ping"})).await;
        let answer = self.next().await;
        assert_eq!(answer["type"], "pong", "{answer}");
    }
}

/// An editor's two tools: a read of its title and a write of it.
pub(crate) fn editor_tools() -> Value {
    json!([
        {"name": "get_title", "description": "The document's title.",
         "inputSchema": {"type": "object", "properties": {}},
         "annotations": {"readOnlyHint": true}},
        {"name": "set_title", "description": "Sets the document's title.",
         "inputSchema": {"type": "object", "properties": {"title": {"type": "string"}},
                         "required": ["title"]}},
    ])
}

/// A result as a page's `execute` would return it, normalized by `/webmcp.js`.
pub(crate) fn title_result(title: &str) -> Value {
    json!({"content": [{"type": "text", "text": title}], "structuredContent": {"title": title}})
}

impl Service {
    async fn call_as(&self, token: &str, tool: &str, arguments: Value) -> (StatusCode, Value) {
        let body = json!({"tool": tool, "arguments": arguments});
        self.post_as(token, "/api/v1/mcp/tools/call", body).await
    }

    /// The canonical names of the tools `token`'s caller sees.
    async fn tool_names(&self, token: &str) -> Vec<String> {
        let (status, body) = self.get_as(token, "/api/v1/mcp/tools").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect()
    }

    /// Waits until `token`'s caller sees `tool` listed (`present`) or not.
    async fn wait_listed(&self, token: &str, tool: &str, present: bool) {
        wait_for_async(&format!("{tool} listed: {present}"), || async {
            let names = self.tool_names(token).await;
            (names.iter().any(|n| n == tool) == present).then_some(())
        })
        .await;
    }
}

/// Runs `future` on its own task, so a page can answer what it sends.
fn spawn<T: Send + 'static>(
    future: impl Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    tokio::spawn(future)
}

/// `POST /api/v1/mcp/tools/call` of `tool` as `bearer`, on its own task.
fn spawn_call(
    service: &Arc<Service>,
    bearer: &str,
    tool: &'static str,
    arguments: Value,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let (service, bearer) = (service.clone(), bearer.to_owned());
    spawn(async move { service.call_as(&bearer, tool, arguments).await })
}

#[tokio::test]
async fn the_upgrade_refuses_what_the_api_would() {
    let off = Service::start(demo_config(), jwt_auth()).await;
    let alice = token("alice", &[]);
    let disabled = refusal(request(&off.base, "editor", Some(ORIGIN), Some(&alice))).await;
    assert_eq!(disabled, (403, "webmcp_disabled".to_owned()));
    off.stop().await;

    let mut config = bridge_config(|_| {});
    config.access = Some(AccessConfig {
        tenants: vec![TenantAccess {
            tenant: "local".into(),
            servers: vec![id("demo")],
            models: None,
        }],
        grants: vec![Grant {
            tenant: "local".into(),
            users: vec![],
            roles: vec![],
            tools: vec!["demo.*".into()],
        }],
        operators: vec![],
    });
    let service = Service::start(config, jwt_auth()).await;
    let base = service.base.clone();
    let with = |origin: Option<&str>, token: Option<&str>| request(&base, "editor", origin, token);
    let claims = json!({"iss": "https://issuer.test/", "aud": "mcpgate", "tenant": "local",
                        "sub": "alice", "exp": now() + 300});
    let forged = {
        let key =
            jsonwebtoken::EncodingKey::from_secret(b"not-the-gateway-secret-0123456789abcdef")
                .expect("key");
        jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key).expect("token")
    };
    let mut expired_claims = claims.clone();
    expired_claims["exp"] = json!(now() - 600);
    let expired = jwt(expired_claims);
    let mut other_tenant = claims.clone();
    other_tenant["tenant"] = json!("elsewhere");
    let other_tenant = jwt(other_tenant);

    let cases: Vec<(&str, Request, (u16, &str))> = vec![
        (
            "no Origin",
            with(None, Some(&alice)),
            (403, "origin_not_allowed"),
        ),
        (
            "another origin",
            with(Some("http://evil.test"), Some(&alice)),
            (403, "origin_not_allowed"),
        ),
        (
            "the origin on another port",
            with(Some("http://editor.test:8001"), Some(&alice)),
            (403, "origin_not_allowed"),
        ),
        ("no token", with(Some(ORIGIN), None), (401, "missing_token")),
        (
            "a forged token",
            with(Some(ORIGIN), Some(&forged)),
            (401, "invalid_token"),
        ),
        (
            "an expired token",
            with(Some(ORIGIN), Some(&expired)),
            (401, "expired_token"),
        ),
        (
            "another tenant's token",
            with(Some(ORIGIN), Some(&other_tenant)),
            (403, "unknown_tenant"),
        ),
        (
            "an invalid client id",
            request(&base, "no!such", Some(ORIGIN), Some(&alice)),
            (400, "invalid_client_id"),
        ),
    ];
    for (what, request, expected) in cases {
        let (status, code) = refusal(request).await;
        assert_eq!((status, code.as_str()), expected, "{what}");
    }
    // A token in the URL is refused, not read.
    let mut in_url = request(&base, "editor", Some(ORIGIN), None);
    *in_url.uri_mut() = format!(
        "{}/api/v1/webmcp/bridge/editor?access_token={alice}",
        base.replacen("http", "ws", 1)
    )
    .parse()
    .expect("uri");
    assert_eq!(refusal(in_url).await, (401, "token_in_query".to_owned()));
    // A client that does not offer the bridge's subprotocol (its token in a header).
    let mut bare = request(&base, "editor", Some(ORIGIN), None);
    bare.headers_mut().remove("sec-websocket-protocol");
    bare.headers_mut().insert(
        "authorization",
        format!("Bearer {alice}").parse().expect("header"),
    );
    assert_eq!(
        refusal(bare).await,
        (400, "subprotocol_required".to_owned())
    );
    // The same program offering it is accepted; so is the browser's form.
    let mut program = request(&base, "editor", Some(ORIGIN), None);
    program.headers_mut().insert(
        "authorization",
        format!("Bearer {alice}").parse().expect("header"),
    );
    let mut page = upgrade(program).await.expect("a program connects");
    assert_eq!(page.hello().await["server"], "webmcp-editor");
    drop(page);
    let mut page = upgrade(with(Some(ORIGIN), Some(&alice)))
        .await
        .expect("a page connects");
    assert_eq!(page.hello().await["type"], "accepted");
    // The gateway kept serving throughout.
    let (status, _) = service
        .call_as(&alice, "demo.echo", json!({"message": "hi"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    drop(page);
    service.stop().await;
}

#[tokio::test]
async fn a_pages_tools_pass_the_one_gate() {
    let service = Arc::new(Service::start(bridge_config(|_| {}), jwt_auth()).await);
    let (alice, bob) = (token("alice", &[]), token("bob", &[]));
    let admin = token("ann", &["admin"]);
    let mut page = TestPage::open(&service, "editor", "alice").await;
    page.register(editor_tools()).await;

    // Listed for its owner alone, as a WebMCP source; the write needs a confirmation.
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    let (_, listed) = service.get_as(&alice, "/api/v1/mcp/tools").await;
    let of = |name: &str| {
        listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .expect("listed")
    };
    let (read, write) = (of("webmcp-editor.get_title"), of("webmcp-editor.set_title"));
    assert_eq!(
        (
            &read["source"],
            &read["server"],
            &read["requiresConfirmation"]
        ),
        (&json!("webmcp"), &json!("webmcp-editor"), &json!(false)),
        "{read}"
    );
    assert_eq!(write["requiresConfirmation"], true, "{write}");
    assert!(read["fingerprint"].as_str().is_some_and(|f| !f.is_empty()));
    let names = service.tool_names(&bob).await;
    assert!(!names.iter().any(|n| n.starts_with("webmcp-")), "{names:?}");

    // A read over REST: the page computes the answer.
    let call = spawn_call(&service, &alice, "webmcp-editor.get_title", json!({}));
    let (call_id, tool, arguments) = page.invoked().await;
    assert_eq!((tool.as_str(), &arguments), ("get_title", &json!({})));
    page.answer(&call_id, title_result("Draft")).await;
    let (status, body) = call.await.expect("the call ends");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains("Draft"), "{body}");

    // The same read on the AX-compatible invoke route.
    let invoke = {
        let (service, alice) = (service.clone(), alice.clone());
        spawn(async move {
            let body = json!({"clientId": "editor", "tool": "get_title", "arguments": {}});
            service.post_as(&alice, "/api/v1/webmcp/invoke", body).await
        })
    };
    let (call_id, _, _) = page.invoked().await;
    page.answer(&call_id, title_result("Draft")).await;
    let (status, body) = invoke.await.expect("the invoke ends");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"code": 0, "data": {"result": {"ok": true, "data": {"title": "Draft"}, "error": null}}})
    );
    // The page's error is the tool's error, in the same shape.
    let invoke = {
        let (service, alice) = (service.clone(), alice.clone());
        spawn(async move {
            let body = json!({"clientId": "editor", "tool": "get_title"});
            service.post_as(&alice, "/api/v1/webmcp/invoke", body).await
        })
    };
    let (call_id, _, _) = page.invoked().await;
    let failed =
        json!({"content": [{"type": "text", "text": "no document is open"}], "isError": true});
    page.answer(&call_id, failed).await;
    let (status, body) = invoke.await.expect("the invoke ends");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["result"]["ok"], false, "{body}");
    assert!(body.to_string().contains("no document is open"), "{body}");

    // Another user: the page's tools do not exist for them; nothing reaches the page.
    let (status, body) = service
        .call_as(&bob, "webmcp-editor.get_title", json!({}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    let as_bob = json!({"clientId": "editor", "tool": "get_title"});
    let (status, body) = service.post_as(&bob, "/api/v1/webmcp/invoke", as_bob).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("client_not_connected"))
    );
    let unknown = json!({"clientId": "editor", "tool": "no_such_tool"});
    let (status, body) = service
        .post_as(&alice, "/api/v1/webmcp/invoke", unknown)
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("tool_not_found"))
    );
    // Arguments are validated against the page's schema before the page hears of them.
    let (status, body) = service
        .call_as(&alice, "webmcp-editor.set_title", json!({"title": 5}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("invalid_arguments"))
    );
    page.nothing_waiting().await;

    // A write: held for a confirmation, then run exactly once.
    let (status, held) = service
        .call_as(&alice, "webmcp-editor.set_title", json!({"title": "Final"}))
        .await;
    assert_eq!(
        (status, &held["code"]),
        (
            StatusCode::PRECONDITION_REQUIRED,
            &json!("confirmation_required")
        ),
        "{held}"
    );
    page.nothing_waiting().await;
    let confirmation = held["confirmationId"].as_str().expect("an id");
    let approve = format!("/api/v1/mcp/confirmations/{confirmation}/approve");
    let (status, approval) = service.post_as(&alice, &approve, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    let confirmed = json!({
        "tool": "webmcp-editor.set_title", "arguments": {"title": "Final"},
        "confirmationToken": approval["confirmationToken"],
    });
    let call = {
        let (service, alice, confirmed) = (service.clone(), alice.clone(), confirmed.clone());
        spawn(async move {
            service
                .post_as(&alice, "/api/v1/mcp/tools/call", confirmed)
                .await
        })
    };
    let (call_id, tool, arguments) = page.invoked().await;
    assert_eq!(
        (tool.as_str(), &arguments),
        ("set_title", &json!({"title": "Final"}))
    );
    page.answer(&call_id, title_result("Final")).await;
    let (status, body) = call.await.expect("the call ends");
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, replay) = service
        .post_as(&alice, "/api/v1/mcp/tools/call", confirmed)
        .await;
    assert_eq!(
        (status, &replay["code"]),
        (StatusCode::CONFLICT, &json!("confirmation_invalid"))
    );
    page.nothing_waiting().await;
    // The invoke route holds writes the same way.
    let write = json!({"clientId": "editor", "tool": "set_title", "arguments": {"title": "X"}});
    let (status, body) = service
        .post_as(&alice, "/api/v1/webmcp/invoke", write)
        .await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{body}");
    assert!(body["confirmationId"].is_string(), "{body}");
    page.nothing_waiting().await;

    // The audit has every call, with its outcome.
    let (status, audit) = service.get_as(&admin, "/api/v1/audit?user=alice").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let records = audit["records"].as_array().expect("records");
    let count = |tool: &str, decision: &str, outcome: &str| {
        records
            .iter()
            .filter(|r| r["tool"] == tool && r["decision"] == decision && r["outcome"] == outcome)
            .count()
    };
    let (read, write) = ("webmcp-editor.get_title", "webmcp-editor.set_title");
    assert_eq!(count(read, "allowed", "ok"), 2, "{audit}");
    assert_eq!(count(read, "allowed", "tool_error"), 1, "{audit}");
    assert_eq!(count(write, "denied", "invalid_arguments"), 1, "{audit}");
    assert_eq!(
        count(write, "pending", "confirmation_required"),
        2,
        "{audit}"
    );
    assert_eq!(count(write, "approved", "ok"), 1, "{audit}");
    assert_eq!(count(write, "allowed", "ok"), 1, "{audit}");
    assert_eq!(count(write, "denied", "confirmation_invalid"), 1, "{audit}");
    assert!(records.iter().all(|r| r["user"] == "alice"), "{audit}");
    drop(page);
    Arc::into_inner(service).expect("one owner").stop().await;
}

#[tokio::test]
async fn bad_frames_are_refused_and_the_bridge_keeps_serving() {
    let service = Arc::new(Service::start(bridge_config(|_| {}), jwt_auth()).await);
    let alice = token("alice", &[]);
    let mut page = TestPage::connect(&service, "editor", "alice").await;
    // Before `hello`, nothing is read or answered.
    page.send_text("not json".into()).await;
    page.send(json!({"type": "tools", "tools": editor_tools()}))
        .await;
    page.send(json!({"type": "result", "callId": "x", "result": {}}))
        .await;
    assert_eq!(page.hello().await["type"], "accepted");
    assert!(
        !service
            .tool_names(&alice)
            .await
            .iter()
            .any(|n| n.starts_with("webmcp-"))
    );
    page.register(editor_tools()).await;

    let error_of = async |page: &mut TestPage, frame: Message| -> String {
        page.ws.send(frame).await.expect("sent");
        let answer = page.next().await;
        assert_eq!(answer["type"], "error", "{answer}");
        answer["code"].as_str().expect("a code").to_owned()
    };
    let text = |value: String| Message::Text(value.into());
    let name_of_129 = "n".repeat(129);
    let big_schema = json!({"type": "object", "description": "x".repeat(100 * 1024)});
    let ten_thousand: Vec<Value> = (0..10_000)
        .map(|i| json!({"name": format!("t{i}"), "description": "d"}))
        .collect();
    let ten_mib = json!({"type": "object", "description": "x".repeat(10 * 1024 * 1024)});
    let cases: Vec<(&str, Message, &str)> = vec![
        ("malformed JSON", text("{\"type\":".into()), "malformed"),
        ("not an object", text("[1, 2]".into()), "malformed"),
        (
            "a binary frame",
            Message::Binary(vec![1, 2, 3].into()),
            "malformed",
        ),
        (
            "an unknown type",
            text(json!({"type": "launch"}).to_string()),
            "unknown_type",
        ),
        (
            "a result without a call id",
            text(json!({"type": "result"}).to_string()),
            "malformed",
        ),
        (
            "hello again",
            text(json!({"type": "hello"}).to_string()),
            "already_accepted",
        ),
        (
            "an empty name",
            text(json!({"type": "tools", "tools": [{"name": "", "description": "d"}]}).to_string()),
            "invalid_tool",
        ),
        (
            "a name with a space",
            text(
                json!({"type": "tools", "tools": [{"name": "a b", "description": "d"}]})
                    .to_string(),
            ),
            "invalid_tool",
        ),
        (
            "a name of 129 characters",
            text(
                json!({"type": "tools", "tools": [{"name": name_of_129, "description": "d"}]})
                    .to_string(),
            ),
            "invalid_tool",
        ),
        (
            "no description",
            text(
                json!({"type": "tools_changed", "tools": [{"name": "x", "description": " "}]})
                    .to_string(),
            ),
            "invalid_tool",
        ),
        (
            "10,000 tools",
            text(json!({"type": "tools_changed", "tools": ten_thousand}).to_string()),
            "too_many_tools",
        ),
        (
            "a 100 KiB schema",
            text(
                json!({"type": "tools", "tools": [{"name": "x", "description": "d",
                                                    "inputSchema": big_schema}]})
                .to_string(),
            ),
            "schema_too_large",
        ),
        (
            "a 10 MiB schema",
            text(
                json!({"type": "tools", "tools": [{"name": "x", "description": "d",
                                                    "inputSchema": ten_mib}]})
                .to_string(),
            ),
            "frame_too_large",
        ),
        (
            "a result for a call never sent",
            text(json!({"type": "result", "callId": "0123", "result": {}}).to_string()),
            "unknown_call",
        ),
    ];
    for (what, frame, code) in cases {
        assert_eq!(error_of(&mut page, frame).await, code, "{what}");
    }
    // Each refusal kept the connection and the last accepted list.
    page.nothing_waiting().await;
    let names = service.tool_names(&alice).await;
    let pages: Vec<_> = names.iter().filter(|n| n.starts_with("webmcp-")).collect();
    assert_eq!(
        pages,
        ["webmcp-editor.get_title", "webmcp-editor.set_title"]
    );

    // A result for another socket's call is refused there and changes nothing here.
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    let mut other = TestPage::open(&service, "notes", "alice").await;
    let call = spawn_call(&service, &alice, "webmcp-editor.get_title", json!({}));
    let (call_id, _, _) = page.invoked().await;
    other.answer(&call_id, title_result("forged")).await;
    let answer = other.next().await;
    assert_eq!(
        (&answer["type"], &answer["code"]),
        (&json!("error"), &json!("unknown_call"))
    );
    page.answer(&call_id, title_result("Draft")).await;
    let (status, body) = call.await.expect("the call ends");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.to_string().contains("Draft") && !body.to_string().contains("forged"));

    // Memory stays bounded: refused messages are dropped, not kept.
    let resident = || {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("VmRSS")
            * 1024
    };
    let big = json!({"type": "tools", "tools": [{"name": "x", "description": "d",
        "inputSchema": {"type": "object", "description": "x".repeat(10 * 1024 * 1024)}}]})
    .to_string();
    let many = json!({"type": "tools", "tools": (0..10_000)
        .map(|i| json!({"name": format!("t{i}"), "description": "d"}))
        .collect::<Vec<_>>()})
    .to_string();
    let before = resident();
    for _ in 0..16 {
        for frame in [&big, &many] {
            page.send_text(frame.clone()).await;
            assert_eq!(page.next().await["type"], "error");
        }
    }
    let grown = resident().saturating_sub(before);
    assert!(
        grown < 64 * 1024 * 1024,
        "32 refused messages (170 MiB) grew the process by {grown} bytes"
    );

    // A message over the hard limit closes that socket alone.
    let huge = "x".repeat(17 * 1024 * 1024);
    let _ = other.ws.send(Message::Text(huge.into())).await;
    assert!(other.next().await.get("closed").is_some());
    page.nothing_waiting().await;
    let (status, _) = service
        .call_as(&alice, "demo.echo", json!({"message": "hi"}))
        .await;
    assert_eq!(status, StatusCode::OK);
    drop((page, other));
    Arc::into_inner(service).expect("one owner").stop().await;
}

#[tokio::test]
async fn a_page_that_goes_or_reloads_ends_its_calls_at_once() {
    // A call timeout far beyond the test's own wait: only the page's going can end the call.
    let config = bridge_config(|webmcp| webmcp.call_timeout = std::time::Duration::from_secs(3600));
    let service = Arc::new(Service::start(config, jwt_auth()).await);
    let alice = token("alice", &[]);
    let call_title = || spawn_call(&service, &alice, "webmcp-editor.get_title", json!({}));
    let ended = async |call: tokio::task::JoinHandle<(StatusCode, Value)>| {
        tokio::time::timeout(WAIT, call)
            .await
            .expect("the call ends at once")
            .expect("the call's task")
    };

    // The page closes mid-call.
    let mut page = TestPage::open(&service, "editor", "alice").await;
    page.register(editor_tools()).await;
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    let call = call_title();
    let _ = page.invoked().await;
    page.ws.close(None).await.expect("closed");
    let (status, body) = ended(call).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_GATEWAY, &json!("outcome_unknown")),
        "{body}"
    );
    service
        .wait_listed(&alice, "webmcp-editor.get_title", false)
        .await;
    let (status, body) = service
        .call_as(&alice, "webmcp-editor.get_title", json!({}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );

    // The page reloads mid-call: the new connection replaces the old, whose call ends and
    // whose call id is dead on the new socket.
    let mut old = TestPage::open(&service, "editor", "alice").await;
    old.register(editor_tools()).await;
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    let call = call_title();
    let (old_id, _, _) = old.invoked().await;
    let mut new = TestPage::open(&service, "editor", "alice").await;
    assert_eq!(old.next().await, json!({"closed": 4000}));
    let (status, body) = ended(call).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_GATEWAY, &json!("outcome_unknown"))
    );
    new.answer(&old_id, title_result("stale")).await;
    assert_eq!(new.next().await["code"], "unknown_call");
    new.register(editor_tools()).await;
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    let call = call_title();
    let (call_id, _, _) = new.invoked().await;
    assert_ne!(call_id, old_id);
    new.answer(&call_id, title_result("Draft")).await;
    let (status, body) = ended(call).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    drop(new);
    Arc::into_inner(service).expect("one owner").stop().await;
}

#[tokio::test]
async fn pages_are_capped_and_a_client_id_is_its_owners() {
    let config = bridge_config(|webmcp| {
        webmcp.max_pages_per_user = 1;
        webmcp.max_pages = 2;
    });
    let service = Service::start(config, jwt_auth()).await;
    let rejected = async |client_id: &str, user: &str| {
        let mut page = TestPage::connect(&service, client_id, user).await;
        let answer = page.hello().await;
        assert_eq!(answer["type"], "rejected", "{answer}");
        assert_eq!(page.next().await, json!({"closed": 4003}));
        answer["reason"].as_str().expect("a reason").to_owned()
    };
    let alice = TestPage::open(&service, "one", "alice").await;
    assert_eq!(rejected("two", "alice").await, "too_many_pages");
    assert_eq!(rejected("one", "bob").await, "client_id_taken");
    let bob = TestPage::open(&service, "bobs", "bob").await;
    assert_eq!(rejected("carols", "carol").await, "too_many_pages");
    // A page that goes frees its place and its id.
    drop(alice);
    wait_for_async("alice's page to go", || async {
        let mut page = TestPage::connect(&service, "one", "carol").await;
        (page.hello().await["type"] == "accepted").then_some(page)
    })
    .await;
    drop(bob);
    service.stop().await;
}

#[tokio::test]
async fn mcp_clients_call_page_tools_and_hear_a_silent_page_leave() {
    use rmcp::{
        ServiceExt as _,
        transport::{
            StreamableHttpClientTransport,
            streamable_http_client::StreamableHttpClientTransportConfig,
        },
    };
    let config = bridge_config(|webmcp| {
        webmcp.heartbeat = std::time::Duration::from_millis(100);
        webmcp.heartbeat_timeout = std::time::Duration::from_millis(500);
    });
    let service = Service::start(config, jwt_auth()).await;
    let alice = token("alice", &[]);
    let watcher = crate::service_extras::mcp_reload::Watcher {
        changes: Arc::new(watch::channel(0).0),
    };
    let mut changes = watcher.changes.subscribe();
    let transport = StreamableHttpClientTransport::with_client(
        service.client.clone(),
        StreamableHttpClientTransportConfig::with_uri(service.url("/mcp")).auth_header(alice),
    );
    let session = tokio::time::timeout(WAIT, watcher.serve(transport))
        .await
        .expect("handshake in time")
        .expect("handshake");
    let names = async || -> Vec<String> {
        let tools = session.list_all_tools().await.expect("tools/list");
        tools.iter().map(|t| t.name.to_string()).collect()
    };
    let page_tools = |names: &[String]| names.iter().filter(|n| n.contains("webmcp")).count();
    assert_eq!(page_tools(&names().await), 0);

    let mut page = TestPage::open(&service, "editor", "alice").await;
    page.register(editor_tools()).await;
    tokio::time::timeout(WAIT, changes.wait_for(|n| *n >= 1))
        .await
        .expect("the session hears the page come")
        .expect("the client is alive");
    let listed = wait_for_async("the page's tools on /mcp", || async {
        let listed = names().await;
        (page_tools(&listed) == 2).then_some(listed)
    })
    .await;
    let get_title = listed
        .iter()
        .find(|n| n.contains("webmcp") && n.ends_with("get_title"))
        .expect("get_title listed")
        .clone();

    // A read over /mcp, answered by the page.
    let call = spawn({
        let peer = session.peer().clone();
        async move {
            peer.call_tool(rmcp::model::CallToolRequestParams::new(get_title))
                .await
        }
    });
    let (call_id, tool, _) = page.invoked().await;
    assert_eq!(tool, "get_title");
    page.answer(&call_id, title_result("Draft")).await;
    let result = call.await.expect("the call's task").expect("tools/call");
    assert_eq!(result.content[0].as_text().expect("text").text, "Draft");

    // The page falls silent (it reads nothing, answers no ping): the gateway drops it, its
    // tools leave, and the session hears of it.
    let heard = *changes.borrow();
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            match page.ws.next().await {
                Some(Ok(Message::Close(frame))) => break frame.map(|f| u16::from(f.code)),
                // The gateway's pings, unanswered.
                Some(Ok(_)) => continue,
                _ => break None,
            }
        }
    })
    .await
    .expect("the silent page is closed in time");
    assert_eq!(closed, Some(4408));
    tokio::time::timeout(WAIT, changes.wait_for(|n| *n > heard))
        .await
        .expect("the session hears the page go")
        .expect("the client is alive");
    wait_for_async("the page's tools to leave /mcp", || async {
        (page_tools(&names().await) == 0).then_some(())
    })
    .await;
    let _ = session.cancel().await;
    service.stop().await;
}

#[tokio::test]
async fn a_pages_socket_ends_with_its_token() {
    let mut auth = jwt_auth();
    if let mcpgate::config::AuthConfig::Jwt(jwt) = &mut auth {
        jwt.leeway = std::time::Duration::ZERO;
    }
    let service = Service::start(bridge_config(|_| {}), auth).await;
    let short = jwt(json!({
        "iss": "https://issuer.test/", "aud": "mcpgate", "exp": now() + 2,
        "tenant": "local", "sub": "alice",
    }));
    // `exp` may be fractional: the verifier accepts it, so the socket must end with it too.
    let fractional = jwt(json!({
        "iss": "https://issuer.test/", "aud": "mcpgate", "exp": now() as f64 + 2.5,
        "tenant": "local", "sub": "alice",
    }));
    let mut page = TestPage::open_at(&service.base, "editor", &short).await;
    let mut notes = TestPage::open_at(&service.base, "notes", &fractional).await;
    page.register(editor_tools()).await;
    // Closed when the token expires (the page reconnects with a fresh one); its tools leave.
    assert_eq!(page.next().await, json!({"closed": 4401}));
    assert_eq!(notes.next().await, json!({"closed": 4401}));
    let alice = token("alice", &[]);
    service
        .wait_listed(&alice, "webmcp-editor.get_title", false)
        .await;
    let mut fresh = TestPage::open_at(&service.base, "editor", &alice).await;
    fresh.register(editor_tools()).await;
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    drop(fresh);
    service.stop().await;
}

#[tokio::test]
async fn the_page_module_is_public_cacheable_and_importable_cross_origin() {
    let service = Service::start(bridge_config(|_| {}), jwt_auth()).await;
    let module = service
        .client
        .get(service.url("/webmcp.js"))
        .header("origin", ORIGIN)
        .send()
        .await
        .expect("module");
    assert_eq!(module.status(), StatusCode::OK);
    let headers = module.headers().clone();
    assert_eq!(headers["content-type"], "text/javascript; charset=utf-8");
    assert_eq!(headers["access-control-allow-origin"], "*");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["cache-control"], "no-cache");
    let source = module.text().await.expect("source");
    assert!(source.contains("export function connect("), "{source}");
    let again = service
        .client
        .get(service.url("/webmcp.js"))
        .header("if-none-match", headers["etag"].clone())
        .send()
        .await
        .expect("revalidated");
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(again.headers()["etag"], headers["etag"]);
    service.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_page_changes_is_few_catalog_rebuilds() {
    use std::time::Duration;
    let mut config = crate::support::config(vec![]);
    config.webmcp.allowed_origins = vec![ORIGIN.into()];
    let gateway = crate::support::gateway(config).await;
    let pages = gateway.pages().clone();
    let owner = mcpgate::webmcp::PageOwner {
        tenant: "local".into(),
        user: "alice".into(),
    };
    let (page, _outbox) = pages.attach("editor", owner).expect("attached");
    let tool = |name: String| {
        let schema = serde_json::Map::from_iter([("type".to_owned(), json!("object"))]);
        rmcp::model::Tool::new(name, "d", Arc::new(schema))
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut swaps = gateway.changes();
    let before = *swaps.borrow_and_update();
    // A page changing its tools every 10 ms for 200 ms.
    for i in 0..20 {
        pages.set_tools(&page, vec![tool(format!("t{i}"))]);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rebuilds = *swaps.borrow() - before;
    assert!(
        (1..=6).contains(&rebuilds),
        "20 changes in 200 ms made {rebuilds} rebuilds"
    );
    let catalog = gateway.catalog();
    assert!(catalog.by_canonical("webmcp-editor.t19").is_some());
    assert!(catalog.by_canonical("webmcp-editor.t18").is_none());
    gateway.shutdown().await;
}

#[tokio::test]
async fn an_operators_name_lists_a_client_id_under_it() {
    let config = bridge_config(|webmcp| {
        webmcp.names = vec![("com.example.editor.documents".into(), id("webmcp-editor"))];
    });
    let service = Service::start(config, jwt_auth()).await;
    let alice = token("alice", &[]);
    let mut page = TestPage::open_at(&service.base, "com.example.editor.documents", &alice).await;
    page.register(editor_tools()).await;
    service
        .wait_listed(&alice, "webmcp-editor.get_title", true)
        .await;
    // The name is that client id's alone: a page whose own id would take it is refused.
    let taking = request(&service.base, "editor", Some(ORIGIN), Some(&alice));
    assert_eq!(refusal(taking).await, (400, "invalid_client_id".to_owned()));
    let body = json!({"clientId": "com.example.editor.documents", "tool": "get_title"});
    let invoke = {
        let service = Arc::new(service);
        let (s, alice) = (service.clone(), alice.clone());
        let call = spawn(async move { s.post_as(&alice, "/api/v1/webmcp/invoke", body).await });
        let (call_id, _, _) = page.invoked().await;
        page.answer(&call_id, title_result("Draft")).await;
        let answer = call.await.expect("the invoke's task");
        drop(page);
        Arc::into_inner(service).expect("one owner").stop().await;
        answer
    };
    assert_eq!(invoke.0, StatusCode::OK, "{}", invoke.1);
    assert_eq!(
        invoke.1["data"]["result"]["data"],
        json!({"title": "Draft"})
    );
}

/// A conversation may name its user's page among its servers; to anyone else the page's
/// server does not exist.
#[tokio::test]
async fn a_conversation_selects_its_users_page_and_no_one_elses() {
    use mcpgate::{gateway::SelectionError, policy::CallContext};
    let service = Service::start(bridge_config(|_| {}), jwt_auth()).await;
    let mut page = TestPage::open(&service, "editor", "alice").await;
    page.register(editor_tools()).await;
    service
        .wait_listed(&token("alice", &[]), "webmcp-editor.get_title", true)
        .await;
    let caller = |user: &str| CallContext {
        tenant: "local".into(),
        user: user.into(),
        session: "s".into(),
        roles: vec![],
        request_id: "selection".into(),
    };
    let asked = vec!["webmcp-editor".to_owned(), "demo".to_owned()];
    let chosen = service
        .gateway
        .selectable_servers(&caller("alice"), &asked)
        .await
        .expect("alice's page and the demo");
    assert_eq!(chosen, [id("webmcp-editor"), id("demo")]);
    assert_eq!(
        service
            .gateway
            .selectable_servers(&caller("bob"), &asked)
            .await,
        Err(SelectionError::UnknownServer("webmcp-editor".into()))
    );
    drop(page);
    service.stop().await;
}
