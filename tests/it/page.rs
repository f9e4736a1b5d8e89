//! The web page in real Chromium (Debian `chromium` driven by npm `playwright-core`): each
//! test starts a service on 127.0.0.1:0, runs one script of tests/browser/ with the address
//! and tokens in its environment, and checks that the script passed every step. Screenshots
//! land in target/screenshots/.

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use jsonwebtoken::{EncodingKey, Header, encode};
use mcpgate::{
    catalog::{Pins, ToolStatus},
    config::{
        AuthConfig, Env, JwtAlgorithm, JwtConfig, OnChange, SecretTemplate, ServerConfig,
        ServiceConfig,
    },
    fixtures::{
        Fixture,
        demo::{DemoServer, READ_ONLY_TOOLS},
        handler,
    },
    gateway::Gateway,
    server::{AppState, auth::Authenticator, sandbox::Sandbox, ui::CONTENT_SECURITY_POLICY},
};
use reqwest::StatusCode;
use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    net::TcpListener,
    process::Command,
};

use crate::support::{self, in_process};

mod apps;
mod chat;
mod my_servers;
mod poisoned;
mod review;
mod usage;
mod webmcp;

/// One browser script: Chromium's start plus every step, on a busy 2-core machine.
const SCRIPT_WAIT: Duration = Duration::from_secs(180);

const SECRET: &str = "page-tests-0123456789abcdef0123456789abcdef";
const ISSUER: &str = "https://issuer.test/";

/// A service on loopback and how the browser reaches it.
struct PageService {
    base: String,
    gateway: Gateway,
    served: support::Served,
    /// The MCP Apps sandbox's address (`http://127.0.0.1:port`).
    sandbox_base: String,
    /// The MCP Apps sandbox, on a listener of its own.
    sandbox: (
        tokio_util::sync::CancellationToken,
        tokio::task::JoinHandle<std::io::Result<()>>,
    ),
}

impl PageService {
    /// Serves `gateway` with JWT authentication (tokens from [`jwt`]).
    async fn start(gateway: Gateway) -> PageService {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let auth = jwt_auth();
        let env = Env::from_pairs([("JWT_SECRET", SECRET)]);
        let authenticator = Authenticator::new(&auth, &env, addr, false)
            .await
            .expect("JWT authentication sets up");
        let service = Arc::new(ServiceConfig {
            listen: addr,
            auth,
            ..ServiceConfig::default()
        });
        let sandbox_listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let sandbox = Sandbox {
            port: sandbox_listener.local_addr().expect("addr").port(),
            origin: None,
        };
        let sandbox_base = format!("http://127.0.0.1:{}", sandbox.port);
        let stop_sandbox = tokio_util::sync::CancellationToken::new();
        let sandbox_task = tokio::spawn(mcpgate::server::sandbox::serve(
            sandbox_listener,
            stop_sandbox.clone(),
        ));
        let state =
            AppState::new(gateway.clone(), Arc::new(authenticator), service).with_sandbox(sandbox);
        let served = support::Served::spawn(listener, state);
        PageService {
            base: format!("http://{addr}"),
            gateway,
            served,
            sandbox_base,
            sandbox: (stop_sandbox, sandbox_task),
        }
    }

    async fn stop(self) {
        let (stop_sandbox, sandbox_task) = self.sandbox;
        stop_sandbox.cancel();
        let _ = tokio::time::timeout(support::WAIT, sandbox_task).await;
        self.served.stop().await;
        self.gateway.shutdown().await;
    }
}

fn jwt_auth() -> AuthConfig {
    AuthConfig::Jwt(Box::new(JwtConfig {
        algorithms: vec![JwtAlgorithm::Hs256],
        secret: Some(SecretTemplate::new("${JWT_SECRET}")),
        public_keys: vec![],
        jwks_url: None,
        issuer: ISSUER.into(),
        audience: "mcpgate".into(),
        tenant_claim: "tenant".into(),
        user_claim: "sub".into(),
        roles_claim: "roles".into(),
        default_tenant: None,
        leeway: Duration::from_secs(5),
        protected: None,
    }))
}

/// A token for `user` with `roles`, valid for an hour.
fn jwt(user: &str, roles: &[&str]) -> String {
    let exp = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 3600;
    let claims = json!({
        "iss": ISSUER, "aud": "mcpgate", "sub": user, "tenant": "local", "roles": roles, "exp": exp,
    });
    encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The demo server (pins enforced), the slow and conformance fixtures, and a server with a
/// poisoned tool, all in process.
fn servers() -> Vec<ServerConfig> {
    let mut demo = in_process("demo", DemoServer::new());
    demo.read_only_tools = names(READ_ONLY_TOOLS);
    demo.on_change = OnChange::Block;
    let mut slow = in_process(
        "slow",
        handler(Fixture::Slow).expect("slow runs in process"),
    );
    slow.read_only_tools = names(&["sleep", "sleep_stats", "echo"]);
    let mut conf = in_process(
        "conf",
        handler(Fixture::Conformance).expect("conformance runs in process"),
    );
    conf.read_only_tools = names(&["test_image_content", "test_simple_text"]);
    let mut odd = in_process("odd", poisoned::PoisonedServer);
    odd.read_only_tools = names(&["weather"]);
    vec![demo, slow, conf, odd]
}

/// Pins the catalog as it is, except `canonical`, pinned at another tool's fingerprint: the
/// definition no longer matches its pin, and under `on_change = "block"` it is quarantined.
async fn quarantine(gateway: &Gateway, canonical: &str) {
    let catalog = gateway.catalog();
    let target = catalog.by_canonical(canonical).expect("the tool is listed");
    let other = catalog
        .tools()
        .iter()
        .find(|t| t.canonical != canonical)
        .expect("another tool");
    let mut pins = Pins::from_catalog(&catalog);
    pins.set(
        target.server.clone(),
        &target.upstream.name,
        &other.fingerprint,
    );
    gateway.set_pins(Some(pins)).await;
    let status = gateway
        .catalog()
        .by_canonical(canonical)
        .map(|t| t.status.clone());
    assert!(
        matches!(status, Some(ToolStatus::Quarantined { .. })),
        "{status:?}"
    );
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `node tests/browser/<script>` with `vars`; fails the test, with the script's output,
/// unless it exits 0 having printed every step in `steps`.
pub(crate) async fn run_script(script: &str, vars: &[(&str, &str)], steps: &[&str]) -> String {
    let chromium = Path::new("/usr/bin/chromium");
    assert!(
        chromium.exists(),
        "Debian's chromium is missing: run scripts/install-peers.sh as root (it installs it)"
    );
    let peers = support::peers();
    assert!(
        peers.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run scripts/install-peers.sh"
    );
    let mut command = Command::new("node");
    command
        .arg(root().join("tests/browser").join(script))
        .current_dir(root())
        .env("MCPGATE_PEERS", &peers)
        .env("MCPGATE_SCREENSHOTS", root().join("target/screenshots"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = tokio::time::timeout(SCRIPT_WAIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish within {SCRIPT_WAIT:?}"))
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    for step in steps {
        assert!(
            stdout.contains(&format!("ok - {step}")),
            "{script} did not report `{step}`:\n{stdout}\n{stderr}"
        );
    }
    stdout
}

#[tokio::test]
async fn assets_are_public_and_carry_security_headers() {
    let gateway = support::gateway(support::config(servers())).await;
    let service = PageService::start(gateway).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let get = |path: &str| client.get(format!("{}{path}", service.base)).send();

    let page = get("/").await.expect("page");
    assert_eq!(page.status(), StatusCode::OK);
    let headers = page.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    // The page's own policy, and the one origin it may frame: the apps sandbox's.
    let port = service.base.rsplit(':').next().expect("a port");
    let policy = headers["content-security-policy"].to_str().expect("text");
    let (own, frames) = policy
        .split_once("; frame-src ")
        .expect("the page may frame the sandbox");
    assert_eq!(own, CONTENT_SECURITY_POLICY);
    assert!(
        frames.starts_with("http://127.0.0.1:") && !frames.ends_with(&format!(":{port}")),
        "{frames}"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["referrer-policy"], "no-referrer");
    assert_eq!(headers["cache-control"], "no-cache");
    let html = page.text().await.expect("body");
    assert!(html.contains("<script type=\"module\" src=\"/ui/app.js\"></script>"));

    for (path, kind) in [
        ("/ui/app.js", "text/javascript; charset=utf-8"),
        ("/ui/chat.js", "text/javascript; charset=utf-8"),
        ("/ui/app.css", "text/css; charset=utf-8"),
        ("/ui/icon.svg", "image/svg+xml"),
    ] {
        let response = get(path).await.expect("asset");
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert_eq!(response.headers()["content-type"], kind, "{path}");
        let etag = response.headers()["etag"].clone();
        let again = client
            .get(format!("{}{path}", service.base))
            .header("if-none-match", etag)
            .send()
            .await
            .expect("revalidate");
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED, "{path}");
    }
    let missing = get("/ui/secrets.txt").await.expect("missing");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(missing.headers().contains_key("content-security-policy"));
    // The data behind the page still needs a token.
    let api = get("/api/v1/mcp/tools").await.expect("api");
    assert_eq!(api.status(), StatusCode::UNAUTHORIZED);
    service.stop().await;
}

/// `mcpgate serve` on its embedded defaults, as the README runs it: the banner names the page
/// and the dev token, and the browser signs in with it.
#[tokio::test]
async fn sign_in_with_the_dev_token_of_the_binary() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(support::mcpgate_bin())
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .env_remove("MCPGATE_MODEL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut page, mut token) = (None, None);
    while let Some(line) = tokio::time::timeout(support::WAIT, lines.next_line())
        .await
        .expect("banner in time")
        .expect("stdout reads")
    {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("page") {
            page = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.strip_prefix("token") {
            token = Some(rest.trim().to_owned());
        }
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    let page = page.expect("the banner names the page");
    let token = token.expect("the banner prints the dev token");
    assert!(
        page.starts_with("http://127.0.0.1:") && page.ends_with('/'),
        "{page}"
    );
    let base = page.trim_end_matches('/');
    run_script(
        "signin.mjs",
        &[("MCPGATE_URL", base), ("MCPGATE_TOKEN", &token)],
        &[
            "the page is served with its security headers",
            "a bad token shows a clear message with the reason",
            "the dev token signs in; it is kept in session storage only",
            "with no model the chat says so before the first question, and how to set one up",
            "the catalog of the built-in demo server shows",
            "a reload keeps the session",
            "sign-out forgets the token",
            "no URL the page ever requested holds the token",
        ],
    )
    .await;
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal");
    let status = tokio::time::timeout(support::WAIT, child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn catalog_forms_and_audit_in_the_browser() {
    let gateway = support::gateway(support::config(servers())).await;
    quarantine(&gateway, "demo.time_now").await;
    let service = PageService::start(gateway.clone()).await;
    let admin = jwt("ada", &["admin"]);
    let user = jwt("bob", &[]);
    run_script(
        "catalog.mjs",
        &[
            ("MCPGATE_URL", &service.base),
            ("MCPGATE_TOKEN", &admin),
            ("MCPGATE_USER_TOKEN", &user),
        ],
        &[
            "servers show with their state and tool count",
            "a quarantined tool is marked, explained, and offers no call",
            "scan findings are listed and a poisoned description stays text",
            "write tools are marked and not called from the catalog",
            "the form checks required fields",
            "a read tool called from its form shows text and structured data",
            "markup in a tool result stays text",
            "an image result is shown from its data",
            "the tool filter narrows the list",
            "the audit log lists the calls and filters them",
            "a user without the admin role sees that the audit log is admin only",
        ],
    )
    .await;
    // The calls the browser made went through the gate as the signed-in user.
    let records = gateway
        .audit_store()
        .query(mcpgate::store::AuditQuery {
            tool: Some("demo.add".into()),
            ..Default::default()
        })
        .await
        .expect("audit");
    let outcomes: Vec<(&str, &str)> = records
        .iter()
        .map(|(_, r)| (r.user.as_str(), r.outcome.as_str()))
        .collect();
    assert_eq!(outcomes, [("ada", "ok")], "{records:?}");
    service.stop().await;
}
