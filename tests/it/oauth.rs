//! OAuth with a real authorization server (npm `oidc-provider`): `/mcp` as a protected
//! resource that an MCP client signs in to on its own (rmcp's OAuth client: discovery from the
//! 401, dynamic registration, PKCE, RFC 8707 `resource`), with no token pasted by hand.

mod provider;

use std::{sync::Arc, time::Duration};

use rmcp::{
    ServiceExt as _,
    transport::{
        StreamableHttpClientTransport,
        auth::{AuthClient, AuthorizationRequest, OAuthState},
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use self::provider::{AuthServer, form_body, sign_in_and_consent};
use crate::support::{ServedBinary, free_port, mcpgate_bin};

/// Where the client says its authorization codes go; never visited (the test reads the
/// code from the authorization server's last redirect).
const REDIRECT_URI: &str = "http://127.0.0.1:9/callback";
/// A service of the same organisation with tokens for another resource.
const OTHER_CLIENT: &str = "other-service";
const OTHER_SECRET: &str = "other-service-secret-for-tests-only";
const OTHER_RESOURCE: &str = "https://other.example/mcp";

/// The authorization server, and the gateway in front of the demo server with `/mcp` a
/// protected resource of it (requiring `scope`).
async fn protected_gateway(dir: &std::path::Path) -> (AuthServer, ServedBinary, String) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let issuer = AuthServer::start(
        &json!({
            resource.clone(): { "scope": "mcp", "ttl": 300 },
            OTHER_RESOURCE: { "scope": "mcp", "ttl": 300 },
        }),
        &json!([{
            "client_id": OTHER_CLIENT,
            "client_secret": OTHER_SECRET,
            "grant_types": ["client_credentials"],
            "redirect_uris": [],
            "response_types": [],
        }]),
    )
    .await;
    let sandbox = crate::support::sandbox_section(&[], &[]);
    let config = format!(
        r#"
{sandbox}
[server]
public_url = "{base}"
[server.auth]
mode = "jwt"
algorithms = ["RS256"]
issuer = "{issuer}"
jwks_url = "{issuer}/jwks"
scopes = ["mcp"]

[state]
database = "memory"

[servers.demo]
command = "{bin}"
args = ["demo-server"]
read_only_tools = ["echo", "add", "time_now", "list_notes"]
"#,
        issuer = issuer.issuer,
        bin = mcpgate_bin().display(),
    );
    let listen = format!("127.0.0.1:{port}");
    let served = ServedBinary::start(dir, Some(&config), &[("MCPGATE_LISTEN", &listen)]).await;
    assert_eq!(served.base, base);
    served.wait_ready().await;
    (issuer, served, resource)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

#[tokio::test]
async fn an_mcp_client_signs_in_through_the_gateways_401_and_lists_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (issuer, served, resource) = protected_gateway(dir.path()).await;

    // The 401 names the metadata; the metadata names the issuer and the resource.
    let refused = http()
        .post(&resource)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .send()
        .await
        .expect("answers");
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", served.base);
    assert_eq!(
        challenge,
        format!("Bearer realm=\"mcpgate\", resource_metadata=\"{metadata_url}\", scope=\"mcp\"")
    );
    for url in [
        metadata_url.clone(),
        format!("{}/.well-known/oauth-protected-resource", served.base),
        format!(
            "{}/.well-known/oauth-protected-resource/mcp/demo",
            served.base
        ),
    ] {
        let response = http()
            .get(&url)
            .header("origin", "https://client.example")
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "{url}");
        assert_eq!(response.headers()["access-control-allow-origin"], "*");
        let document: Value = response.json().await.expect("json");
        assert_eq!(document["resource"], resource.as_str());
        assert_eq!(document["authorization_servers"], json!([issuer.issuer]));
        assert_eq!(document["scopes_supported"], json!(["mcp"]));
    }

    // rmcp's client: discovery from the challenge, registration, PKCE, the resource.
    let mut state = OAuthState::new(resource.as_str(), None)
        .await
        .expect("an OAuth client");
    state
        .start_authorization(
            AuthorizationRequest::new(REDIRECT_URI)
                .with_client_name("mcpgate test client")
                .with_challenge(challenge),
        )
        .await
        .expect("discovery and registration");
    let authorization_url = state.get_authorization_url().await.expect("a URL");
    let authorization = url::Url::parse(&authorization_url).expect("url");
    let query: std::collections::HashMap<_, _> = authorization.query_pairs().collect();
    assert_eq!(
        query.get("resource").map(|r| r.as_ref()),
        Some(resource.as_str())
    );
    assert_eq!(
        query.get("code_challenge_method").map(|m| m.as_ref()),
        Some("S256")
    );
    let callback = sign_in_and_consent(&authorization_url, "alice").await;
    assert!(callback.starts_with(REDIRECT_URI), "{callback}");
    state
        .handle_callback_url(&callback)
        .await
        .expect("the code is exchanged");

    let manager = state
        .into_authorization_manager()
        .expect("an authorized manager");
    let token = manager.get_access_token().await.expect("a token");
    let transport = StreamableHttpClientTransport::with_client(
        AuthClient::new(reqwest::Client::new(), manager),
        StreamableHttpClientTransportConfig::with_uri(resource.as_str()),
    );
    let client = ().serve(transport).await.expect("initialized through the gateway");
    let tools = client.list_all_tools().await.expect("tools listed");
    assert!(
        tools.iter().any(|tool| tool.name == "demo_echo"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    client.cancel().await.expect("closed");

    // The same token works on the API: its audience is this gateway's resource.
    let listed = http()
        .get(format!("{}/api/v1/mcp/tools", served.base))
        .bearer_auth(&token)
        .send()
        .await
        .expect("answers");
    assert_eq!(listed.status(), 200);

    // A token the same authorization server issued for another resource is refused.
    let other: Value = http()
        .post(format!("{}/token", issuer.issuer))
        .basic_auth(OTHER_CLIENT, Some(OTHER_SECRET))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body([
            ("grant_type", "client_credentials"),
            ("resource", OTHER_RESOURCE),
            ("scope", "mcp"),
        ]))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    let other = other["access_token"]
        .as_str()
        .expect("a token for the other resource");
    for url in [
        resource.clone(),
        format!("{}/api/v1/mcp/tools", served.base),
    ] {
        let response = http()
            .post(&url)
            .bearer_auth(other)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 401, "{url}");
        let challenge = response.headers()["www-authenticate"]
            .to_str()
            .expect("ascii");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(
            challenge.contains("token audience does not name this gateway"),
            "{challenge}"
        );
    }
    drop(served);
}

mod upstream;

/// The HS256 key callers' tokens to the gateway are signed with (tests only).
const SECRET: &str = "oauth-tests-secret-0123456789abcdef";
/// The key that seals users' upstream tokens (tests only).
const OAUTH_KEY: &str = "8f1e2d3c4b5a69788796a5b4c3d2e1f00112233445566778899aabbccddeeff0";
/// The scope the upstream requires.
const SCOPE: &str = "notes";
/// Access token lifetime at the authorization server: short, so a test sees refreshes.
const TOKEN_TTL_SECS: u64 = 10;

/// Waits until a token issued at `issued_ms` (Unix milliseconds) is stale for the gateway:
/// less than half its lifetime left (its renewal margin), and a little more.
async fn wait_until_stale(issued_ms: u64) {
    let stale_at = issued_ms + TOKEN_TTL_SECS * 1000 / 2 + 200;
    loop {
        let now = u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_millis(),
        )
        .expect("ms");
        if now >= stale_at {
            return;
        }
        tokio::time::sleep(Duration::from_millis(stale_at - now)).await;
    }
}

fn caller_token(user: &str) -> String {
    token_with_roles(user, &[])
}

fn token_with_roles(user: &str, roles: &[&str]) -> String {
    use jsonwebtoken::{EncodingKey, Header, encode};
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 3600;
    encode(
        &Header::default(),
        &json!({ "iss": "https://idp.test", "aud": "mcpgate", "sub": user, "exp": exp, "roles": roles }),
        &EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

/// The authorization server, an upstream that requires its tokens, and the gateway in front
/// (state in SQLite in `dir`).
struct Outbound {
    issuer: AuthServer,
    upstream: upstream::ProtectedUpstream,
    gateway: ServedBinary,
}

async fn outbound(dir: &std::path::Path) -> Outbound {
    outbound_with(dir, "").await
}

/// [`outbound`] with `extra` appended to the gateway's configuration.
async fn outbound_with(dir: &std::path::Path, extra: &str) -> Outbound {
    outbound_serving(
        upstream::Serves::Fixture(mcpgate::fixtures::Fixture::Bench),
        dir,
        extra,
    )
    .await
}

/// [`outbound_with`], the upstream serving `fixture`.
async fn outbound_serving(
    serves: upstream::Serves,
    dir: &std::path::Path,
    extra: &str,
) -> Outbound {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let resource = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let issuer = AuthServer::start(
        &json!({ resource.clone(): { "scope": SCOPE, "ttl": TOKEN_TTL_SECS } }),
        &json!([]),
    )
    .await;
    let upstream =
        upstream::ProtectedUpstream::serving(serves, listener, &issuer.issuer, SCOPE).await;
    let port = free_port();
    let config = gateway_config(
        port,
        &upstream.url,
        "[state]\ndatabase = \"state.db\"",
        extra,
    );
    let listen = format!("127.0.0.1:{port}");
    let log = dir.join("gateway.log");
    let gateway = ServedBinary::start(
        dir,
        Some(&config),
        &[
            ("MCPGATE_LISTEN", &listen),
            ("MCPGATE_JWT_SECRET", SECRET),
            ("MCPGATE_OAUTH_KEY", OAUTH_KEY),
            // Everything the gateway logs, at its most talkative, is searched for secrets.
            ("MCPGATE_LOG", "debug"),
            (
                "MCPGATE_TEST_STDERR_FILE",
                log.to_str().expect("utf-8 path"),
            ),
        ],
    )
    .await;
    gateway.wait_ready().await;
    Outbound {
        issuer,
        upstream,
        gateway,
    }
}

/// A gateway's configuration: JWT callers, `[oauth]`, `state`, and the protected upstream at
/// `url` as `notes` with `auth = "oauth"`; `public_url` on `port`.
fn gateway_config(port: u16, url: &str, state: &str, extra: &str) -> String {
    format!(
        r#"
[server]
public_url = "http://127.0.0.1:{port}"
[server.auth]
mode = "jwt"
secret = "${{MCPGATE_JWT_SECRET}}"
issuer = "https://idp.test"
audience = "mcpgate"

[oauth]
keys = ["${{MCPGATE_OAUTH_KEY}}"]

[limits]
user_concurrency = 32

{state}

[servers.notes]
url = "{url}"
transport = "streamable-http"
allow_private = true
confirm = "none"
auth = "oauth"
{extra}
"#
    )
}

impl Outbound {
    async fn get(&self, user: &str, path: &str) -> (u16, Value) {
        let response = http()
            .get(format!("{}{path}", self.gateway.base))
            .bearer_auth(caller_token(user))
            .send()
            .await
            .expect("answers");
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(Value::Null),
        )
    }

    async fn call(&self, user: &str, message: &str) -> (u16, Value) {
        let response = http()
            .post(format!("{}/api/v1/mcp/tools/call", self.gateway.base))
            .bearer_auth(caller_token(user))
            .json(&json!({ "tool": "notes.echo", "arguments": { "message": message } }))
            .send()
            .await
            .expect("answers");
        (
            response.status().as_u16(),
            response.json().await.unwrap_or(Value::Null),
        )
    }

    async fn authorization(&self, user: &str) -> Value {
        let (status, servers) = self.get(user, "/api/v1/mcp/servers").await;
        assert_eq!(status, 200, "{servers}");
        servers["servers"]
            .as_array()
            .and_then(|list| list.iter().find(|s| s["id"] == "notes"))
            .map(|s| s["authorization"].clone())
            .unwrap_or_else(|| panic!("notes is listed: {servers}"))
    }

    /// Connects `user`: the connect route's URL, the authorization server's pages, and the
    /// redirect back to the gateway's callback, as the user's browser would go. The page the
    /// callback shows, and the authorization code the browser carried.
    async fn connect(&self, user: &str) -> (String, String) {
        let (status, started) = self.get(user, "/api/v1/mcp/servers/notes/connect").await;
        assert_eq!(status, 200, "{started}");
        let url = started["authorizationUrl"]
            .as_str()
            .expect("a URL")
            .to_owned();
        let back = sign_in_and_consent(&url, user).await;
        let callback = format!("{}/api/v1/oauth/callback", self.gateway.base);
        assert!(back.starts_with(&callback), "{back}");
        let code = url::Url::parse(&back)
            .expect("url")
            .query_pairs()
            .find(|(name, _)| name == "code")
            .map(|(_, value)| value.into_owned())
            .expect("a code");
        let page = http()
            .get(&back)
            .send()
            .await
            .expect("the callback answers");
        assert_eq!(page.status(), 200);
        (page.text().await.expect("a page"), code)
    }

    async fn stats(&self) -> Value {
        http()
            .get(format!("{}/test/stats", self.issuer.issuer))
            .send()
            .await
            .expect("answers")
            .json()
            .await
            .expect("json")
    }
}

#[tokio::test]
async fn each_user_connects_their_own_account_and_calls_carry_their_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound(dir.path()).await;

    // Before anyone connected: the server waits, and says how to connect.
    assert_eq!(o.authorization("alice").await["status"], "none");
    // No tool is known before anyone connects, yet a call naming one says to connect.
    let (status, refused) = o.call("bob", "hi").await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "authorization_required", "{refused}");
    assert_eq!(refused["connect"], "/api/v1/mcp/servers/notes/connect");
    let (status, refused) = o.get("bob", "/api/v1/mcp/tools").await;
    assert_eq!(status, 200, "{refused}");

    // Alice connects through the authorization server's pages.
    let (page, first_code) = o.connect("alice").await;
    assert!(page.contains("is connected"), "{page}");
    assert_eq!(o.authorization("alice").await["status"], "connected");
    assert_eq!(o.authorization("bob").await["status"], "none");
    crate::support::wait_for_async("the server's tools listed as alice", || async {
        let (_, tools) = o.get("alice", "/api/v1/mcp/tools").await;
        tools["tools"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t["name"] == "notes.echo"))
            .then_some(())
    })
    .await;

    // Alice's call reaches the upstream with alice's token.
    let before = o.upstream.seen().len();
    let (status, answer) = o.call("alice", "from alice").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ok"], true, "{answer}");
    let seen = o.upstream.seen();
    assert!(seen.len() > before);
    assert!(seen[before..].iter().all(|s| s.sub == "alice"), "{seen:?}");

    // Bob, who sees the same tools, has not connected: a typed error naming the route.
    let (status, refused) = o.call("bob", "from bob").await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "authorization_required");
    assert_eq!(refused["connect"], "/api/v1/mcp/servers/notes/connect");
    assert!(o.upstream.seen().iter().all(|s| s.sub == "alice"));

    // The token expires; twenty concurrent calls refresh it once.
    let refreshes = |stats: &Value| stats["grants"]["refresh_token"].as_u64().unwrap_or(0);
    let stats = o.stats().await;
    let (refreshed_before, issued) = (
        refreshes(&stats),
        stats["lastIssuedMs"].as_u64().expect("ms"),
    );
    // Stale once less than half its life is left (the gateway's refresh margin).
    wait_until_stale(issued).await;
    let calls = (0..20).map(|i| {
        let o = &o;
        async move { o.call("alice", &format!("concurrent {i}")).await }
    });
    for (status, answer) in futures::future::join_all(calls).await {
        assert_eq!((status, &answer["ok"]), (200, &json!(true)), "{answer}");
    }
    assert_eq!(
        refreshes(&o.stats().await),
        refreshed_before + 1,
        "one refresh"
    );
    let tokens: std::collections::HashSet<String> =
        o.upstream.seen().into_iter().map(|s| s.token).collect();
    assert!(
        tokens.len() >= 2,
        "the refreshed token reached the upstream"
    );

    // The refresh token is revoked at the authorization server: the next refresh is refused
    // and the connection is marked expired.
    let revoked = http()
        .post(format!("{}/test/revoke", o.issuer.issuer))
        .send()
        .await
        .expect("answers");
    assert!(revoked.status().is_success());
    let issued = o.stats().await["lastIssuedMs"].as_u64().expect("ms");
    wait_until_stale(issued).await;
    let (status, refused) = o.call("alice", "after revocation").await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "authorization_required");
    assert!(
        refused["message"]
            .as_str()
            .unwrap_or("")
            .contains("expired"),
        "{refused}"
    );
    assert_eq!(o.authorization("alice").await["status"], "expired");

    // Connecting again works, and disconnecting revokes at the server.
    let (_, second_code) = o.connect("alice").await;
    assert_eq!(o.authorization("alice").await["status"], "connected");
    o.call("alice", "reconnected").await;

    // No token, refresh token or code anywhere the gateway writes or answers: its database
    // and WAL, its log at debug, the audit log, the metrics, the servers list, an error.
    let mut canaries: Vec<String> = o.upstream.seen().into_iter().map(|s| s.token).collect();
    canaries.extend(
        o.stats().await["refreshTokens"]
            .as_array()
            .expect("refresh tokens")
            .iter()
            .map(|t| t.as_str().expect("text").to_owned()),
    );
    canaries.extend([first_code, second_code]);
    canaries.sort();
    canaries.dedup();
    assert!(canaries.len() >= 6, "{}", canaries.len());
    let admin = token_with_roles("root", &["admin"]);
    let mut texts: Vec<(String, Vec<u8>)> = Vec::new();
    for name in ["state.db", "state.db-wal", "gateway.log"] {
        if let Ok(bytes) = std::fs::read(dir.path().join(name)) {
            texts.push((name.to_owned(), bytes));
        }
    }
    assert!(
        texts.iter().any(|(name, _)| name == "state.db-wal"),
        "the WAL is searched too"
    );
    for path in ["/api/v1/audit?limit=500", "/metrics", "/api/v1/mcp/servers"] {
        let body = http()
            .get(format!("{}{path}", o.gateway.base))
            .bearer_auth(&admin)
            .send()
            .await
            .expect("answers")
            .bytes()
            .await
            .expect("body");
        texts.push((path.to_owned(), body.to_vec()));
    }
    let (_, refused) = o.call("bob", "still not connected").await;
    texts.push(("an error".to_owned(), refused.to_string().into_bytes()));
    let audit = String::from_utf8_lossy(
        &texts
            .iter()
            .find(|(n, _)| n.starts_with("/api/v1/audit"))
            .expect("audit")
            .1,
    )
    .into_owned();
    assert!(
        audit.contains("notes.echo"),
        "the audit holds the calls: {audit}"
    );
    let log = String::from_utf8_lossy(
        &texts
            .iter()
            .find(|(n, _)| n == "gateway.log")
            .expect("log")
            .1,
    )
    .into_owned();
    assert!(
        log.contains("OAuth token refreshed") && log.contains("DEBUG"),
        "the log searched is the gateway's, at debug"
    );
    for canary in &canaries {
        for (name, bytes) in &texts {
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
                "a secret ({} bytes) is in {name}",
                canary.len()
            );
        }
    }
    let revoked_before = o.stats().await["revoked"].as_u64().unwrap_or(0);
    let removed = http()
        .delete(format!(
            "{}/api/v1/mcp/servers/notes/connect",
            o.gateway.base
        ))
        .bearer_auth(caller_token("alice"))
        .send()
        .await
        .expect("answers");
    assert_eq!(removed.status(), 200);
    assert_eq!(o.authorization("alice").await["status"], "none");
    assert!(
        o.stats().await["revoked"].as_u64().unwrap_or(0) > revoked_before,
        "disconnecting revoked the grant at the authorization server (RFC 7009)"
    );
    let (status, _) = o.call("alice", "after disconnect").await;
    assert_eq!(status, 403);

    // Who connected and disconnected which account is in the audit log, as that user.
    let audit = http()
        .get(format!("{}/api/v1/audit?limit=500", o.gateway.base))
        .bearer_auth(&admin)
        .send()
        .await
        .expect("answers")
        .json::<Value>()
        .await
        .expect("json");
    let changes: Vec<(String, String)> = audit["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|r| {
            r["decision"]
                .as_str()
                .is_some_and(|d| d.starts_with("account_"))
        })
        .map(|r| {
            assert_eq!(r["server"], "notes", "{r}");
            assert_eq!(r["outcome"], "ok", "{r}");
            (
                r["user"].as_str().unwrap_or("").to_owned(),
                r["decision"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let count = |decision: &str| {
        changes
            .iter()
            .filter(|(user, d)| user == "alice" && d == decision)
            .count()
    };
    assert_eq!(count("account_connected"), 2, "{changes:?}");
    assert_eq!(count("account_disconnected"), 1, "{changes:?}");
    assert!(
        changes.iter().all(|(user, _)| user == "alice"),
        "{changes:?}"
    );
}

#[tokio::test]
async fn users_connect_from_the_page_and_from_a_chat_card_in_chromium() {
    use crate::scripted_llm::{Reply, ScriptedLlm};
    let llm = ScriptedLlm::start(vec![
        Reply::tool_calls(&[("notes_echo", json!({ "message": "hello" }))]),
        Reply::text("notes needs your account first."),
    ])
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound_with(
        dir.path(),
        &format!(
            "[llm]\nbase_url = \"{}\"\nmodel = \"scripted\"\n",
            llm.base_url()
        ),
    )
    .await;
    crate::page::run_script(
        "connect.mjs",
        &[
            ("MCPGATE_URL", &o.gateway.base),
            ("MCPGATE_TOKEN", &caller_token("alice")),
            ("MCPGATE_USER_TOKEN", &caller_token("bob")),
        ],
        &[
            "a server that wants the user's own account offers Connect",
            "Connect opens the sign-in, and the row says connected after it",
            "the page keeps no token of the server",
            "a chat tool that needs Bob's account shows Connect, not a bare error",
            "Connect from the card connects Bob",
        ],
    )
    .await;
    // Both connected as themselves, and each one's call carries their own token.
    for user in ["alice", "bob"] {
        assert_eq!(o.authorization(user).await["status"], "connected", "{user}");
        let before = o.upstream.seen().len();
        let (status, answer) = o.call(user, "after the page").await;
        assert_eq!(status, 200, "{answer}");
        assert!(o.upstream.seen()[before..].iter().all(|s| s.sub == user));
    }
}

/// Two instances sharing Redis and PostgreSQL: a user starts connecting on one and the
/// authorization server sends them back to the other, which completes it; both then call with
/// the user's token, and when it expires, calls on both renew it once.
#[tokio::test]
async fn a_connection_made_on_one_instance_is_used_and_renewed_once_on_all() {
    let root = tempfile::tempdir().expect("temp dir");
    let redis_dir = root.path().join("redis");
    std::fs::create_dir_all(&redis_dir).expect("dir");
    let redis = crate::cluster::RedisServer::start(&redis_dir).await;
    let postgres = crate::cluster::PostgresServer::start(root.path()).await;
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let resource = format!("http://{}/mcp", listener.local_addr().expect("addr"));
    let issuer = AuthServer::start(
        &json!({ resource.clone(): { "scope": SCOPE, "ttl": TOKEN_TTL_SECS } }),
        &json!([]),
    )
    .await;
    let upstream = upstream::ProtectedUpstream::start(listener, &issuer.issuer, SCOPE).await;
    // The load balancer's address is instance a's; the callback is sent to b by hand.
    let port = free_port();
    let mut instances = Vec::new();
    let mut dirs = Vec::new();
    for (i, name) in ["a", "b"].iter().enumerate() {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = format!(
            "[state]\ndatabase = \"memory\"\nredis = \"${{REDIS_URL}}\"\npostgres = \"${{DATABASE_URL}}\"\n\
             require_shared = true\ninstance = \"{name}\""
        );
        let config = gateway_config(port, &upstream.url, &state, "");
        let listen = format!("127.0.0.1:{}", if i == 0 { port } else { free_port() });
        let served = ServedBinary::start(
            dir.path(),
            Some(&config),
            &[
                ("MCPGATE_LISTEN", &listen),
                ("MCPGATE_JWT_SECRET", SECRET),
                ("MCPGATE_OAUTH_KEY", OAUTH_KEY),
                ("REDIS_URL", &redis_url),
                ("DATABASE_URL", &database_url),
            ],
        )
        .await;
        served.wait_ready().await;
        instances.push(served);
        dirs.push(dir);
    }
    let (a, b) = (&instances[0], &instances[1]);
    let get = |base: String, path: &'static str| async move {
        let response = http()
            .get(format!("{base}{path}"))
            .bearer_auth(caller_token("alice"))
            .send()
            .await
            .expect("answers");
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap_or(Value::Null),
        )
    };
    let call = |base: String| async move {
        let response = http()
            .post(format!("{base}/api/v1/mcp/tools/call"))
            .bearer_auth(caller_token("alice"))
            .json(&json!({ "tool": "notes.echo", "arguments": { "message": "hi" } }))
            .send()
            .await
            .expect("answers");
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap_or(Value::Null),
        )
    };

    let (status, started) = get(a.base.clone(), "/api/v1/mcp/servers/notes/connect").await;
    assert_eq!(status, 200, "{started}");
    let back =
        sign_in_and_consent(started["authorizationUrl"].as_str().expect("url"), "alice").await;
    let on_b = back.replacen(&a.base, &b.base, 1);
    assert_ne!(on_b, back);
    let page = http()
        .get(&on_b)
        .send()
        .await
        .expect("b answers the callback");
    assert_eq!(
        page.status(),
        200,
        "{}",
        page.text().await.unwrap_or_default()
    );
    // The state is spent wherever it was used.
    let again = http().get(&back).send().await.expect("a answers");
    assert_eq!(again.status(), 400);

    for served in [a, b] {
        crate::support::wait_for_async("notes listed with alice's account", || async {
            let (_, tools) = get(served.base.clone(), "/api/v1/mcp/tools").await;
            tools["tools"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t["name"] == "notes.echo"))
                .then_some(())
        })
        .await;
        let (status, answer) = call(served.base.clone()).await;
        assert_eq!(status, 200, "{answer}");
    }
    assert!(upstream.seen().iter().all(|s| s.sub == "alice"));

    let stats = || async {
        http()
            .get(format!("{}/test/stats", issuer.issuer))
            .send()
            .await
            .expect("answers")
            .json::<Value>()
            .await
            .expect("json")
    };
    let before = stats().await;
    let refreshed = |v: &Value| v["grants"]["refresh_token"].as_u64().unwrap_or(0);
    wait_until_stale(before["lastIssuedMs"].as_u64().expect("ms")).await;
    let calls = (0..16).map(|i| call(instances[i % 2].base.clone()));
    for (status, answer) in futures::future::join_all(calls).await {
        assert_eq!(status, 200, "{answer}");
    }
    assert_eq!(
        refreshed(&stats().await),
        refreshed(&before) + 1,
        "one renewal across instances"
    );

    // PostgreSQL holds no access token, refresh token or code: neither its rows, read back
    // as text, nor its files (heap and WAL) once the instances and the server have stopped.
    let code = url::Url::parse(&back)
        .expect("callback URL")
        .query_pairs()
        .find(|(k, _)| k == "code")
        .map(|(_, v)| v.into_owned())
        .expect("a code");
    let mut canaries: Vec<String> = upstream.seen().into_iter().map(|s| s.token).collect();
    canaries.extend(
        stats().await["refreshTokens"]
            .as_array()
            .expect("refresh tokens")
            .iter()
            .map(|t| t.as_str().expect("text").to_owned()),
    );
    canaries.push(code);
    canaries.sort();
    canaries.dedup();
    assert!(canaries.len() >= 4, "{}", canaries.len());
    let pool = postgres.pool().await;
    let mut rows: Vec<String> = Vec::new();
    for sql in [
        "SELECT t::text FROM mcpgate_oauth_connections t",
        "SELECT t::text FROM mcpgate_oauth_pending t",
        "SELECT t::text FROM mcpgate_oauth_clients t",
    ] {
        let texts: Vec<(String,)> = sqlx::query_as(sql).fetch_all(&pool).await.expect("rows");
        rows.extend(texts.into_iter().map(|(t,)| t));
    }
    assert!(
        rows.iter()
            .any(|r| r.contains("alice") && r.contains("notes")),
        "alice's connection is among the rows read: {rows:?}"
    );
    pool.close().await;
    drop(instances);
    postgres.stop().await;
    let files = crate::support::files_under(&postgres.data_dir());
    assert!(
        files.iter().any(|(_, bytes)| bytes
            .windows(b"mcpgate_oauth_connections".len())
            .any(|w| w == b"mcpgate_oauth_connections")),
        "the files searched are the database's"
    );
    for canary in &canaries {
        // bytea reads back as hex.
        let hex: String = canary.bytes().map(|b| format!("{b:02x}")).collect();
        assert!(
            !rows
                .iter()
                .any(|r| r.contains(canary.as_str()) || r.contains(&hex)),
            "a secret ({} bytes) is in a PostgreSQL row",
            canary.len()
        );
        for (path, bytes) in &files {
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
                "a secret ({} bytes) is in {}",
                canary.len(),
                path.display()
            );
        }
    }
    drop(postgres);
    drop(redis);
}

/// Resources, prompts and completions of such a server go with the caller's own token too;
/// a caller who has not connected is offered none of them.
#[tokio::test]
async fn resources_prompts_and_completions_go_with_the_callers_token() {
    use rmcp::model::{
        ArgumentInfo, CompleteRequestParams, GetPromptRequestParams, ReadResourceRequestParams,
        Reference,
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound_serving(
        upstream::Serves::Fixture(mcpgate::fixtures::Fixture::Conformance),
        dir.path(),
        "",
    )
    .await;
    o.connect("alice").await;
    crate::support::wait_for_async("the server's tools listed as alice", || async {
        let (_, tools) = o.get("alice", "/api/v1/mcp/tools").await;
        tools["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
            .then_some(())
    })
    .await;
    let client_of = |user: &str| {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", o.gateway.base))
                .auth_header(caller_token(user)),
        );
        ().serve(transport)
    };
    let alice = client_of("alice").await.expect("alice's session");
    let before = o.upstream.seen().len();
    let resources = alice.list_all_resources().await.expect("resources");
    assert!(
        resources.iter().any(|r| r.uri == "test://static-text"),
        "{resources:?}"
    );
    let read = alice
        .read_resource(ReadResourceRequestParams::new("test://static-text"))
        .await
        .expect("read");
    assert!(!read.contents.is_empty());
    let prompts = alice.list_all_prompts().await.expect("prompts");
    let prompt = prompts
        .iter()
        .find(|p| p.name.ends_with("test_simple_prompt"))
        .unwrap_or_else(|| panic!("{prompts:?}"));
    alice
        .get_prompt(GetPromptRequestParams::new(prompt.name.clone()))
        .await
        .expect("prompt");
    let with_args = prompts
        .iter()
        .find(|p| p.name.ends_with("test_prompt_with_arguments"))
        .expect("a prompt with arguments");
    alice
        .complete(CompleteRequestParams::new(
            Reference::for_prompt(with_args.name.clone()),
            ArgumentInfo::new("arg1", "a"),
        ))
        .await
        .expect("completion");
    let seen = o.upstream.seen();
    assert!(seen.len() > before, "the upstream was asked");
    assert!(seen[before..].iter().all(|s| s.sub == "alice"), "{seen:?}");
    alice.cancel().await.expect("closed");

    // alice's own subscription: made over her session with her token, its updates hers.
    let updates = Arc::new(tokio::sync::watch::channel(0usize).0);
    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", o.gateway.base))
            .auth_header(caller_token("alice")),
    );
    let watching = Updates(updates.clone())
        .serve(transport)
        .await
        .expect("alice's watching session");
    let before = o.upstream.seen().len();
    #[expect(
        deprecated,
        reason = "resources/subscribe, as 2025-11-25 clients send it"
    )]
    let subscribed = watching
        .subscribe(rmcp::model::SubscribeRequestParams::new(
            "test://watched-resource",
        ))
        .await;
    subscribed.expect("alice subscribes");
    let mut seen_updates = updates.subscribe();
    tokio::time::timeout(crate::support::WAIT, seen_updates.wait_for(|n| *n >= 1))
        .await
        .expect("an update reaches alice")
        .expect("open");
    let seen = o.upstream.seen();
    assert!(seen.len() > before, "the upstream was asked");
    assert!(seen[before..].iter().all(|s| s.sub == "alice"), "{seen:?}");
    watching.cancel().await.expect("closed");

    let bob = client_of("bob").await.expect("bob's session");
    let before = o.upstream.seen().len();
    assert!(
        bob.list_all_resources()
            .await
            .expect("resources")
            .is_empty()
    );
    assert!(bob.list_all_prompts().await.expect("prompts").is_empty());
    assert!(
        bob.read_resource(ReadResourceRequestParams::new("test://static-text"))
            .await
            .is_err()
    );
    #[expect(
        deprecated,
        reason = "resources/subscribe, as 2025-11-25 clients send it"
    )]
    let subscribed = bob
        .subscribe(rmcp::model::SubscribeRequestParams::new(
            "test://watched-resource",
        ))
        .await;
    assert!(subscribed.is_err(), "bob has no account to watch with");
    assert_eq!(
        o.upstream.seen().len(),
        before,
        "nothing was asked as anyone for bob"
    );
    bob.cancel().await.expect("closed");
}

/// Counts the `notifications/resources/updated` it hears.
#[derive(Clone)]
struct Updates(Arc<tokio::sync::watch::Sender<usize>>);

impl rmcp::ClientHandler for Updates {
    async fn on_resource_updated(
        &self,
        _params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: rmcp::service::NotificationContext<rmcp::RoleClient>,
    ) {
        self.0.send_modify(|n| *n += 1);
    }
}

/// A server that lists different tools for different accounts: each connected user sees,
/// and may call, what it lists for their own token; a user not connected sees what it lists
/// for the gateway's shared session and can call none of it.
#[tokio::test]
async fn each_connected_user_sees_and_calls_the_tools_listed_for_their_own_token() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound_serving(upstream::Serves::PerUser, dir.path(), "").await;
    // bob first: the shared session lists with bob's token, which lists no alice_notes.
    o.connect("bob").await;
    o.connect("alice").await;
    let names = |user: &'static str| {
        let o = &o;
        async move {
            let (status, listed) = o.get(user, "/api/v1/mcp/tools").await;
            assert_eq!(status, 200, "{listed}");
            let mut names: Vec<String> = listed["tools"]
                .as_array()
                .expect("tools")
                .iter()
                .filter_map(|t| t["name"].as_str().map(str::to_owned))
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(
        names("alice").await,
        ["notes.alice_notes", "notes.big", "notes.echo"]
    );
    assert_eq!(names("bob").await, ["notes.big", "notes.echo"]);

    let call = |user: &'static str, tool: &'static str| {
        let o = &o;
        async move {
            let response = http()
                .post(format!("{}/api/v1/mcp/tools/call", o.gateway.base))
                .bearer_auth(caller_token(user))
                .json(&json!({ "tool": tool, "arguments": {} }))
                .send()
                .await
                .expect("answers");
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, answer) = call("alice", "notes.alice_notes").await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.to_string().contains("alice's notes"), "{answer}");
    let (status, refused) = call("bob", "notes.alice_notes").await;
    assert_eq!(status, 404, "{refused}");
    assert_eq!(refused["code"], "not_found", "{refused}");
    assert!(o.upstream.seen().iter().filter(|s| s.sub == "bob").count() > 0);

    // carol has not connected: she sees the shared session's tools, and calling one tells
    // her to connect.
    let shared = crate::support::wait_for_async("the shared session's tools", || async {
        let carol = names("carol").await;
        carol.contains(&"notes.echo".to_owned()).then_some(carol)
    })
    .await;
    assert!(
        !shared.contains(&"notes.alice_notes".to_owned()),
        "{shared:?}"
    );
    let (status, refused) = o.call("carol", "hello").await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "authorization_required");

    let (_, bob_calls) = o.call("bob", "hello").await;
    assert_eq!(bob_calls["ok"], true, "{bob_calls}");

    // A 2026-07-28 call the server refuses for want of scope (403 insufficient_scope on the
    // call's own POST) tells the user to connect again for that scope, and the connection
    // keeps it for the next Connect.
    let response = http()
        .post(format!("{}/api/v1/mcp/tools/call", o.gateway.base))
        .bearer_auth(caller_token("bob"))
        .json(&json!({ "tool": "notes.big", "arguments": { "bytes": 3 } }))
        .send()
        .await
        .expect("answers");
    let status = response.status().as_u16();
    let refused: Value = response.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "authorization_required", "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .is_some_and(|m| m.contains(upstream::BIG_SCOPE)),
        "{refused}"
    );

    // On /mcp too, each is offered what their own token lists.
    for (user, expected) in [
        (
            "alice",
            vec!["notes_alice_notes", "notes_big", "notes_echo"],
        ),
        ("bob", vec!["notes_big", "notes_echo"]),
    ] {
        let transport = StreamableHttpClientTransport::from_config(
            StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", o.gateway.base))
                .auth_header(caller_token(user)),
        );
        let client = ().serve(transport).await.expect("a session");
        let mut offered: Vec<String> = client
            .list_all_tools()
            .await
            .expect("tools")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        offered.sort();
        assert_eq!(offered, expected, "{user}");
        client.cancel().await.expect("closed");
    }
}

/// A sign-in the user declines at the authorization server connects nothing and spends its
/// `state`; a callback without a code, or with an overlong one, is refused the same way.
#[tokio::test]
async fn a_declined_or_malformed_sign_in_connects_nothing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound(dir.path()).await;
    let (status, started) = o.get("alice", "/api/v1/mcp/servers/notes/connect").await;
    assert_eq!(status, 200, "{started}");
    let state = url::Url::parse(started["authorizationUrl"].as_str().expect("url"))
        .expect("a URL")
        .query_pairs()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v.into_owned())
        .expect("a state");
    let callback = |query: String| {
        let base = o.gateway.base.clone();
        async move {
            let response = http()
                .get(format!("{base}/api/v1/oauth/callback?{query}"))
                .send()
                .await
                .expect("answers");
            (
                response.status().as_u16(),
                response.text().await.unwrap_or_default(),
            )
        }
    };
    let (status, page) = callback(format!(
        "error=access_denied&error_description=no&state={state}"
    ))
    .await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("access_denied"), "{page}");
    // The state is spent: a code arriving for it now is refused.
    let (status, page) = callback(format!("code=abc&state={state}")).await;
    assert_eq!(status, 400, "{page}");
    assert_eq!(o.authorization("alice").await["status"], "none");
    let (status, _) = callback("state=abc".to_owned()).await;
    assert_eq!(status, 400);
    let (status, _) = callback(format!("code={}&state=abc", "c".repeat(5000))).await;
    assert_eq!(status, 400);
    // Markup in an error code is not echoed.
    let (status, page) = callback("error=%3Cscript%3E&state=abc".to_owned()).await;
    assert_eq!(status, 400);
    assert!(!page.contains("<script>"), "{page}");
    let (status, refused) = o.call("alice", "not connected").await;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(refused["code"], "authorization_required");
}

/// A user adds the protected server as a server of their own (`[user_servers]`) with
/// `auth = "oauth"`: nothing of it is listed until they connect their account on its own
/// route; then its tools are theirs and calls carry their token; another user cannot connect
/// to it; disconnecting asks them to connect again.
#[tokio::test]
async fn a_users_own_server_signs_them_in_with_its_authorization_server() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound_with(
        dir.path(),
        "\n[user_servers]\nenabled = true\nallow_loopback = true\n",
    )
    .await;
    let send = |user: &str, method: reqwest::Method, path: &str, body: Option<Value>| {
        let request = http()
            .request(method, format!("{}{path}", o.gateway.base))
            .bearer_auth(caller_token(user));
        let request = match body {
            Some(body) => request.json(&body),
            None => request,
        };
        async move {
            let response = request.send().await.expect("answers");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (status, added) = send(
        "alice",
        reqwest::Method::POST,
        "/api/v1/me/servers",
        Some(json!({ "name": "mine", "url": o.upstream.url, "auth": "oauth" })),
    )
    .await;
    assert_eq!(status, 201, "{added}");
    assert_eq!(added["server"]["auth"], "oauth");
    let (_, listed) = send("alice", reqwest::Method::GET, "/api/v1/me/servers", None).await;
    let mine = &listed["servers"][0];
    assert_eq!(mine["authorization"]["status"], "none", "{listed}");
    assert_eq!(
        mine["authorization"]["connect"],
        "/api/v1/me/servers/mine/connect"
    );
    assert!(
        mine["tools"].is_null(),
        "nothing listed before connecting: {mine}"
    );

    // Bob has no server of that name to connect to.
    let (status, _) = send(
        "bob",
        reqwest::Method::GET,
        "/api/v1/me/servers/mine/connect",
        None,
    )
    .await;
    assert_eq!(status, 404);

    let (status, started) = send(
        "alice",
        reqwest::Method::GET,
        "/api/v1/me/servers/mine/connect",
        None,
    )
    .await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["server"], "user-mine");
    let url = started["authorizationUrl"].as_str().expect("a URL");
    let back = sign_in_and_consent(url, "alice").await;
    let page = http()
        .get(&back)
        .send()
        .await
        .expect("the callback answers");
    assert_eq!(page.status(), 200);

    let (_, listed) = send("alice", reqwest::Method::GET, "/api/v1/me/servers", None).await;
    let mine = &listed["servers"][0];
    assert_eq!(mine["authorization"]["status"], "connected", "{listed}");
    assert_eq!(mine["tools"], 2, "{listed}");
    let (status, marked) = send(
        "alice",
        reqwest::Method::PUT,
        "/api/v1/me/servers/mine/read-only",
        Some(json!({ "tools": ["echo"] })),
    )
    .await;
    assert_eq!(status, 200, "{marked}");
    let seen_before = o.upstream.seen().len();
    let (status, done) = send(
        "alice",
        reqwest::Method::POST,
        "/api/v1/mcp/tools/call",
        Some(json!({ "tool": "user-mine.echo", "arguments": { "message": "mine" } })),
    )
    .await;
    assert_eq!((status, &done["ok"]), (200, &json!(true)), "{done}");
    let seen = o.upstream.seen();
    assert!(seen.len() > seen_before);
    assert!(
        seen[seen_before..].iter().all(|s| s.sub == "alice"),
        "every request carried alice's token"
    );

    let (status, gone) = send(
        "alice",
        reqwest::Method::DELETE,
        "/api/v1/me/servers/mine/connect",
        None,
    )
    .await;
    assert_eq!(
        (status, &gone["disconnected"]),
        (200, &json!(true)),
        "{gone}"
    );
    let (status, refused) = send(
        "alice",
        reqwest::Method::POST,
        "/api/v1/mcp/tools/call",
        Some(json!({ "tool": "user-mine.echo", "arguments": { "message": "again" } })),
    )
    .await;
    // Disconnected: the call says to connect again, on her server's own route.
    assert_eq!(
        (status, &refused["code"], &refused["connect"]),
        (
            403,
            &json!("authorization_required"),
            &json!("/api/v1/me/servers/mine/connect")
        ),
        "{refused}"
    );
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/api/v1/me/servers/mine/connect"),
        "{message}"
    );
    let (_, listed) = send("alice", reqwest::Method::GET, "/api/v1/me/servers", None).await;
    assert_eq!(listed["servers"][0]["authorization"]["status"], "none");

    // Her tokens are in no log line.
    o.gateway.stop().await;
    let log = std::fs::read_to_string(dir.path().join("gateway.log")).expect("the log");
    for s in &seen {
        assert!(!log.contains(&s.token), "the log holds a token");
    }
}

/// The page connects a user's own OAuth server (tests/browser/my_server_connect.mjs).
#[tokio::test]
async fn a_users_own_server_is_connected_from_the_page_in_chromium() {
    let dir = tempfile::tempdir().expect("temp dir");
    let o = outbound_with(
        dir.path(),
        "\n[user_servers]\nenabled = true\nallow_loopback = true\n",
    )
    .await;
    let added = http()
        .post(format!("{}/api/v1/me/servers", o.gateway.base))
        .bearer_auth(caller_token("alice"))
        .json(&json!({ "name": "mine", "url": o.upstream.url, "auth": "oauth" }))
        .send()
        .await
        .expect("answers");
    assert_eq!(added.status(), 201);
    crate::page::run_script(
        "my_server_connect.mjs",
        &[
            ("MCPGATE_URL", &o.gateway.base),
            ("MCPGATE_TOKEN", &caller_token("alice")),
        ],
        &[
            "the server waits for the user's account, with Connect",
            "Connect signs the user in, and the row says connected with its tools",
        ],
    )
    .await;
    let (status, done) = o.get("alice", "/api/v1/me/servers").await;
    assert_eq!(status, 200);
    assert_eq!(
        done["servers"][0]["authorization"]["status"], "connected",
        "{done}"
    );
}
