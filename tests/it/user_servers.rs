//! Remote servers users add for themselves (`[user_servers]`), against `mcpgate serve` from
//! the binary: off by default; the strict SSRF guard's refusals whatever the server-wide
//! settings; a user adding a server (an rmcp Streamable HTTP server on loopback that wants an
//! API key header, reachable only under the tests' loopback override), using it through the
//! gate with confirmations, marking a tool read-only; another user neither seeing nor calling
//! it; removal; and the header's value (a canary) in no log line, audit record, response,
//! page or stored byte.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

use axum::{
    extract::{Request, State},
    http::StatusCode as AxumStatus,
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use mcpgate::fixtures::Fixture;
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{self, ServedBinary};

use crate::cluster::{ISSUER, SECRET};

/// A token for `user` of tenant `local`, valid for ten minutes.
fn token(user: &str, roles: &[&str]) -> String {
    crate::cluster::token_with_roles("local", user, roles)
}

/// The gateway's configuration (no server of the operator's): JWT auth, and `user_servers` as
/// the `[user_servers]` section's body (none: no section).
fn config(user_servers: Option<&str>) -> String {
    let section = user_servers.map_or(String::new(), |body| {
        format!("[user_servers]\n{body}\n[oauth]\nkeys = [\"${{MCPGATE_OAUTH_KEY}}\"]\n")
    });
    format!(
        r#"[state]
database = "state.db"

[server.auth]
mode = "jwt"
algorithms = ["HS256"]
secret = "${{MCPGATE_JWT_SECRET}}"
issuer = "{ISSUER}"
audience = "mcpgate"

{section}"#
    )
}

/// A remote server as a user would add: the bench fixture's tools over rmcp's Streamable
/// HTTP server, answering only requests that carry `X-Api-Key: <key>`.
pub(crate) struct KeyedUpstream {
    pub(crate) url: String,
    accepted: Arc<AtomicUsize>,
    stop: CancellationToken,
}

impl Drop for KeyedUpstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone)]
struct Keyed {
    key: String,
    accepted: Arc<AtomicUsize>,
}

async fn check_key(State(keyed): State<Keyed>, request: Request, next: Next) -> Response {
    let sent = request
        .headers()
        .get("x-api-key")
        .and_then(|v| v.to_str().ok());
    if sent != Some(keyed.key.as_str()) {
        return AxumStatus::UNAUTHORIZED.into_response();
    }
    keyed.accepted.fetch_add(1, Ordering::SeqCst);
    next.run(request).await
}

impl KeyedUpstream {
    /// Requests that carried the key.
    pub(crate) fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    pub(crate) async fn start(key: &str) -> KeyedUpstream {
        let stop = CancellationToken::new();
        let keyed = Keyed {
            key: key.to_owned(),
            accepted: Arc::new(AtomicUsize::new(0)),
        };
        let accepted = keyed.accepted.clone();
        let url = support::serve_fixture_behind(
            Fixture::Bench,
            |app| app.layer(middleware::from_fn_with_state(keyed, check_key)),
            &stop,
        )
        .await;
        KeyedUpstream {
            url,
            accepted,
            stop,
        }
    }
}

/// A client of the served gateway that keeps every body it was sent, for the canary check.
struct Client {
    base: String,
    http: reqwest::Client,
    seen: std::sync::Mutex<Vec<String>>,
}

impl Client {
    fn new(base: &str) -> Client {
        Client {
            base: base.to_owned(),
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            seen: std::sync::Mutex::new(Vec::new()),
        }
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        user: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(token(user, &["admin"]));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("the gateway answers");
        let status = response.status();
        let text = response.text().await.expect("a body");
        self.seen.lock().expect("lock").push(text.clone());
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str, user: &str) -> (StatusCode, Value) {
        self.send(reqwest::Method::GET, path, user, None).await
    }

    async fn post(&self, path: &str, user: &str, body: Value) -> (StatusCode, Value) {
        self.send(reqwest::Method::POST, path, user, Some(body))
            .await
    }

    async fn call(
        &self,
        user: &str,
        tool: &str,
        confirmation: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut body = json!({ "tool": tool, "arguments": { "message": "hi" } });
        if let Some(token) = confirmation {
            body["confirmationToken"] = json!(token);
        }
        self.post("/api/v1/mcp/tools/call", user, body).await
    }

    /// The canonical names of the tools `user` is listed.
    async fn tool_names(&self, user: &str) -> Vec<String> {
        let (status, body) = self.get("/api/v1/mcp/tools", user).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    }
}

async fn serve(dir: &std::path::Path, user_servers: Option<&str>) -> ServedBinary {
    let log = dir.join("gateway.log");
    let log = log.to_string_lossy().into_owned();
    let served = ServedBinary::start(
        dir,
        Some(&config(user_servers)),
        &[
            ("MCPGATE_JWT_SECRET", SECRET),
            ("MCPGATE_OAUTH_KEY", crate::support::TEST_OAUTH_KEY),
            ("MCPGATE_LOG", "trace"),
            ("MCPGATE_TEST_STDERR_FILE", &log),
        ],
    )
    .await;
    served.wait_ready().await;
    served
}

#[tokio::test]
async fn without_the_section_the_routes_are_not_found() {
    let dir = tempfile::tempdir().expect("temp dir");
    let served = serve(dir.path(), None).await;
    let client = Client::new(&served.base);
    let add = json!({ "name": "notes", "url": "https://mcp.example.com/mcp" });
    for (method, path, body) in [
        (reqwest::Method::GET, "/api/v1/me/servers", None),
        (reqwest::Method::POST, "/api/v1/me/servers", Some(add)),
        (reqwest::Method::DELETE, "/api/v1/me/servers/notes", None),
        (
            reqwest::Method::PUT,
            "/api/v1/me/servers/notes/read-only",
            Some(json!({ "tools": [] })),
        ),
        (
            reqwest::Method::GET,
            "/api/v1/me/servers/notes/connect",
            None,
        ),
        (
            reqwest::Method::DELETE,
            "/api/v1/me/servers/notes/connect",
            None,
        ),
    ] {
        let (status, body) = client.send(method.clone(), path, "alice", body).await;
        assert_eq!(
            (status, &body["code"]),
            (StatusCode::NOT_FOUND, &json!("not_found")),
            "{method} {path}: {body}"
        );
    }
    served.stop().await;
}

#[tokio::test]
async fn the_strict_guard_refuses_what_a_user_may_not_reach() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The server-wide settings do not loosen it: nothing of `allow_private` applies here.
    let served = serve(dir.path(), Some("enabled = true")).await;
    let client = Client::new(&served.base);
    let upstream = KeyedUpstream::start("k").await;
    let port = upstream.url.split(':').nth(2).expect("a port");
    let refused = [
        (upstream.url.clone(), "scheme `http`"),
        (format!("https://127.0.0.1:{port}"), "loopback"),
        ("https://[::1]/mcp".to_owned(), "loopback"),
        ("https://localhost/mcp".to_owned(), "loopback"),
        ("https://10.1.2.3/mcp".to_owned(), "private"),
        ("https://192.168.0.10/mcp".to_owned(), "private"),
        (
            "https://169.254.169.254/latest".to_owned(),
            "cloud-metadata",
        ),
        ("https://[fd00::1]/mcp".to_owned(), "unique-local"),
        ("https://0x7f.1/mcp".to_owned(), "loopback"),
        (
            "https://user:pw@mcp.example.com/mcp".to_owned(),
            "user name",
        ),
        ("ftp://mcp.example.com/mcp".to_owned(), "scheme `ftp`"),
    ];
    for (url, reason) in refused {
        let (status, body) = client
            .post(
                "/api/v1/me/servers",
                "alice",
                json!({ "name": "notes", "url": url }),
            )
            .await;
        assert_eq!(
            (status, &body["code"]),
            (StatusCode::BAD_REQUEST, &json!("url_refused")),
            "{url}: {body}"
        );
        let message = body["message"].as_str().expect("message");
        assert!(message.contains(reason), "{url}: {message}");
    }
    let (status, body) = client.get("/api/v1/me/servers", "alice").await;
    assert_eq!((status, &body["servers"]), (StatusCode::OK, &json!([])));
    assert_eq!(upstream.accepted(), 0, "nothing reached it");
    served.stop().await;
}

#[tokio::test]
async fn the_operators_host_allowlist_holds_even_under_the_test_override() {
    let dir = tempfile::tempdir().expect("temp dir");
    let served = serve(
        dir.path(),
        Some("enabled = true\nallow_loopback = true\nallowed_hosts = [\".example.com\"]"),
    )
    .await;
    let client = Client::new(&served.base);
    let upstream = KeyedUpstream::start("k").await;
    for (url, status, code) in [
        (
            "https://mcp.example.org/mcp".to_owned(),
            StatusCode::FORBIDDEN,
            "host_not_allowed",
        ),
        (
            "https://example.com.evil.test/mcp".to_owned(),
            StatusCode::FORBIDDEN,
            "host_not_allowed",
        ),
        // Loopback is not on the list either: the override lifts the address rule alone.
        (
            upstream.url.clone(),
            StatusCode::FORBIDDEN,
            "host_not_allowed",
        ),
        // The override covers loopback and nothing else.
        (
            "http://10.1.2.3/mcp".to_owned(),
            StatusCode::BAD_REQUEST,
            "url_refused",
        ),
        (
            "https://169.254.169.254/mcp".to_owned(),
            StatusCode::BAD_REQUEST,
            "url_refused",
        ),
    ] {
        let (got, body) = client
            .post(
                "/api/v1/me/servers",
                "alice",
                json!({ "name": "notes", "url": url }),
            )
            .await;
        assert_eq!(
            (got, &body["code"]),
            (status, &json!(code)),
            "{url}: {body}"
        );
    }
    served.stop().await;
}

#[tokio::test]
async fn a_user_adds_a_server_uses_it_alone_and_its_secret_goes_nowhere() {
    let dir = tempfile::tempdir().expect("temp dir");
    let canary = format!("canary-{}", mcpgate::digest::random_hex(12));
    let served = serve(
        dir.path(),
        Some("enabled = true\nallow_loopback = true\nmax_per_user = 2"),
    )
    .await;
    let client = Client::new(&served.base);
    let upstream = KeyedUpstream::start(&canary).await;

    // A wrong key: the server refuses it, so nothing is added.
    let (status, body) = client
        .post(
            "/api/v1/me/servers",
            "alice",
            json!({ "name": "notes", "url": upstream.url, "headers": { "X-Api-Key": "wrong" } }),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_GATEWAY, &json!("server_unreachable")),
        "{body}"
    );
    // The right key: added, its tools listed, the header named and its value not shown.
    let (status, body) = client
        .post(
            "/api/v1/me/servers",
            "alice",
            json!({ "name": "notes", "url": upstream.url, "headers": { "X-Api-Key": canary } }),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["server"]["server"], "user-notes");
    assert_eq!(body["server"]["headers"], json!(["X-Api-Key"]));
    assert_eq!(body["server"]["tools"], 2);
    let (status, body) = client
        .post(
            "/api/v1/me/servers",
            "alice",
            json!({ "name": "notes", "url": upstream.url }),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("name_taken"))
    );

    // Alice sees its tools; Bob does not, and cannot call them by either name.
    let alice = client.tool_names("alice").await;
    assert!(alice.iter().any(|t| t == "user-notes.echo"), "{alice:?}");
    let bob = client.tool_names("bob").await;
    assert!(!bob.iter().any(|t| t.starts_with("user-")), "{bob:?}");
    for name in ["user-notes.echo", "user-notes_echo"] {
        let (status, body) = client.call("bob", name, None).await;
        assert_eq!(
            (status, &body["code"]),
            (StatusCode::NOT_FOUND, &json!("not_found")),
            "{name}: {body}"
        );
    }
    let (_, bobs) = client.get("/api/v1/me/servers", "bob").await;
    assert_eq!(bobs["servers"], json!([]));

    // Every tool of a user's server is a write until its owner says otherwise.
    let (status, held) = client.call("alice", "user-notes.echo", None).await;
    assert_eq!(
        (status, &held["code"]),
        (
            StatusCode::PRECONDITION_REQUIRED,
            &json!("confirmation_required")
        ),
        "{held}"
    );
    let id = held["confirmationId"].as_str().expect("an id").to_owned();
    let (status, approval) = client
        .post(
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            "alice",
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    let confirmation = approval["confirmationToken"].as_str().expect("a token");
    let (status, done) = client
        .call("alice", "user-notes.echo", Some(confirmation))
        .await;
    assert_eq!(
        (status, &done["ok"]),
        (StatusCode::OK, &json!(true)),
        "{done}"
    );
    assert!(done.to_string().contains("hi"), "{done}");

    // Marked read-only, its definition as it is now needs no confirmation.
    let (status, body) = client
        .send(
            reqwest::Method::PUT,
            "/api/v1/me/servers/notes/read-only",
            "alice",
            Some(json!({ "tools": ["echo"] })),
        )
        .await;
    assert_eq!(
        (status, &body["server"]["readOnly"]),
        (StatusCode::OK, &json!(["echo"]))
    );
    let (status, done) = client.call("alice", "user-notes_echo", None).await;
    assert_eq!(
        (status, &done["ok"]),
        (StatusCode::OK, &json!(true)),
        "{done}"
    );
    let (status, body) = client
        .send(
            reqwest::Method::PUT,
            "/api/v1/me/servers/notes/read-only",
            "alice",
            Some(json!({ "tools": ["nope"] })),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_REQUEST, &json!("unknown_tool"))
    );
    // Marked as seen: the definition the user looked at, or refused.
    let (_, listed) = client.get("/api/v1/mcp/tools", "alice").await;
    let seen = listed["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "user-notes.big")
        .and_then(|t| t["fingerprint"].as_str())
        .expect("big is listed")
        .to_owned();
    let (status, body) = client
        .send(
            reqwest::Method::PUT,
            "/api/v1/me/servers/notes/read-only",
            "alice",
            Some(json!({ "tools": ["echo", { "name": "big", "fingerprint": "0".repeat(64) }] })),
        )
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("definition_changed")),
        "{body}"
    );
    let (status, body) = client
        .send(
            reqwest::Method::PUT,
            "/api/v1/me/servers/notes/read-only",
            "alice",
            Some(json!({ "tools": ["echo", { "name": "big", "fingerprint": seen }] })),
        )
        .await;
    let mut marked: Vec<&str> = body["server"]["readOnly"]
        .as_array()
        .map(|list| list.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    marked.sort_unstable();
    assert_eq!(
        (status, marked),
        (StatusCode::OK, vec!["big", "echo"]),
        "{body}"
    );
    assert!(upstream.accepted() > 0);

    // Bob cannot remove it; Alice can, and then it is gone.
    let (status, _) = client
        .send(
            reqwest::Method::DELETE,
            "/api/v1/me/servers/notes",
            "bob",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = client
        .send(
            reqwest::Method::DELETE,
            "/api/v1/me/servers/notes",
            "alice",
            None,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let alice = client.tool_names("alice").await;
    assert!(!alice.iter().any(|t| t.starts_with("user-")), "{alice:?}");
    let (status, _) = client.call("alice", "user-notes.echo", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // The audit has Alice's records of it; nothing anywhere holds the header's value.
    let (status, audit) = client.get("/api/v1/audit?limit=200", "alice").await;
    assert_eq!(status, StatusCode::OK, "{audit}");
    let records = audit["records"].as_array().expect("records");
    let decisions: Vec<(&str, &str)> = records
        .iter()
        .filter(|r| r["server"] == "user-notes")
        .map(|r| {
            (
                r["user"].as_str().unwrap_or(""),
                r["decision"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(
        decisions.contains(&("alice", "user_server_added")),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("alice", "user_server_removed")),
        "{decisions:?}"
    );
    assert!(
        decisions.iter().any(|(_, d)| *d == "allowed"),
        "{decisions:?}"
    );
    for page in ["/", "/ui/app.js", "/ui/chat.js"] {
        let text = reqwest::get(format!("{}{page}", served.base))
            .await
            .expect("the page")
            .text()
            .await
            .expect("text");
        client.seen.lock().expect("lock").push(text);
    }
    for body in client.seen.lock().expect("lock").iter() {
        assert!(
            !body.contains(&canary),
            "a response held the secret: {body}"
        );
    }
    served.stop().await;
    let logs = std::fs::read_to_string(dir.path().join("gateway.log")).expect("the log");
    assert!(logs.lines().count() > 10, "trace logging is on");
    assert!(!logs.contains(&canary), "the log holds the secret");
    for entry in std::fs::read_dir(dir.path()).expect("dir") {
        let path = entry.expect("entry").path();
        let bytes = std::fs::read(&path).expect("readable");
        assert!(
            !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
            "{} holds the secret",
            path.display()
        );
    }
    drop(upstream);
}

/// The gateway as a library, with `[user_servers]` on under the loopback override.
async fn library_gateway(max_per_user: usize) -> mcpgate::gateway::Gateway {
    let mut config = crate::support::config(vec![crate::support::no_confirm(
        crate::support::in_process("demo", mcpgate::fixtures::demo::DemoServer::new()),
    )]);
    crate::support::with_user_servers(&mut config);
    config.user_servers.max_per_user = max_per_user;
    config.user_servers.connect_timeout = std::time::Duration::from_secs(2);
    crate::support::gateway(config).await
}

fn caller(user: &str) -> mcpgate::policy::CallContext {
    mcpgate::policy::CallContext {
        tenant: "local".into(),
        user: user.into(),
        session: format!("{user}-session"),
        roles: vec![],
        request_id: "user-servers".into(),
    }
}

fn new_server(name: &str, url: &str, key: &str) -> mcpgate::gateway::NewUserServer {
    mcpgate::gateway::NewUserServer {
        name: name.into(),
        url: url.into(),
        headers: [("X-Api-Key".to_owned(), key.to_owned())].into(),
        auth: None,
    }
}

#[tokio::test]
async fn a_conversation_may_select_its_users_own_server_and_a_dead_one_holds_no_one_else() {
    use mcpgate::gateway::SelectionError;
    let gateway = library_gateway(2).await;
    let (alice, bob) = (caller("alice"), caller("bob"));
    let live = KeyedUpstream::start("k1").await;
    let dying = KeyedUpstream::start("k2").await;
    gateway
        .add_my_server(&alice, new_server("live", &live.url, "k1"))
        .await
        .expect("added");
    gateway
        .add_my_server(&alice, new_server("dying", &dying.url, "k2"))
        .await
        .expect("added");
    let err = gateway
        .add_my_server(&alice, new_server("third", &live.url, "k1"))
        .await
        .expect_err("over the cap");
    assert_eq!(err.code(), "too_many_servers");

    // Selecting: Alice's own server is hers to name; to Bob it does not exist.
    let ids = |list: &[&str]| list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let chosen = gateway
        .selectable_servers(&alice, &ids(&["user-live", "demo"]))
        .await
        .expect("alice's own and the demo");
    assert_eq!(
        chosen.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        ["user-live", "demo"]
    );
    assert_eq!(
        gateway.selectable_servers(&bob, &ids(&["user-live"])).await,
        Err(SelectionError::UnknownServer("user-live".into()))
    );
    let offered: Vec<String> = gateway
        .model_tools(&alice)
        .await
        .into_iter()
        .map(|t| t.function_name)
        .collect();
    assert!(offered.iter().any(|n| n == "user-live_echo"), "{offered:?}");
    assert!(
        offered.iter().any(|n| n == "user-dying_echo"),
        "{offered:?}"
    );

    // One of Alice's servers dies: her other server still answers, her listing still comes
    // (from the last list), and Bob's calls never touch either.
    drop(dying);
    let reads = tokio::time::timeout(crate::support::WAIT, async {
        let tools = gateway.list_tools(&alice).await;
        let bobs = gateway.list_tools(&bob).await;
        (tools, bobs)
    })
    .await
    .expect("listings answer in time");
    assert!(reads.0.iter().any(|t| t.canonical == "user-live.echo"));
    assert!(
        !reads
            .1
            .iter()
            .any(|t| t.server.as_str().starts_with("user-"))
    );
    let demo = gateway
        .call_tool(&bob, "demo.echo", json!({ "message": "bob" }), None)
        .await
        .expect("bob's call runs");
    assert!(demo.text().contains("bob"));
    let servers = gateway.my_servers(&alice).await.expect("listed");
    assert_eq!(servers.len(), 2);
    gateway.shutdown().await;
}

/// The rules hold at every use, not only when a server is added: an instance whose operator
/// no longer allows the host (here a second gateway on the same state file) neither lists nor
/// calls a server added before.
#[tokio::test]
async fn a_host_taken_off_the_list_stops_servers_added_before() {
    let dir = tempfile::tempdir().expect("temp dir");
    let upstream = KeyedUpstream::start("k").await;
    let with_hosts = |hosts: &[&str]| {
        let mut config = crate::support::config(vec![crate::support::no_confirm(
            crate::support::in_process("demo", mcpgate::fixtures::demo::DemoServer::new()),
        )]);
        crate::support::with_user_servers(&mut config);
        config.user_servers.allowed_hosts = hosts.iter().map(|h| (*h).to_owned()).collect();
        config.state = mcpgate::config::StateConfig::Sqlite {
            path: dir.path().join("state.db"),
        };
        config
    };
    let alice = caller("alice");
    let first = crate::support::gateway(with_hosts(&["127.0.0.1"])).await;
    first
        .add_my_server(&alice, new_server("notes", &upstream.url, "k"))
        .await
        .expect("added while its host is allowed");
    first.shutdown().await;

    let narrowed = crate::support::gateway(with_hosts(&[".example.com"])).await;
    let tools = narrowed.list_tools(&alice).await;
    assert!(
        !tools.iter().any(|t| t.server.as_str() == "user-notes"),
        "not listed once its host is off the list"
    );
    let err = narrowed
        .call_tool(&alice, "user-notes.echo", json!({ "message": "x" }), None)
        .await
        .expect_err("not callable");
    assert_eq!(err.code(), "not_found", "{err}");
    narrowed.shutdown().await;
}
