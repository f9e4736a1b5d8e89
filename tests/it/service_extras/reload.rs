//! Configuration reload: a bad file changes nothing and says every problem; a file that
//! needs a restart is refused; a good one swaps the gateway in once, and the old one closes
//! its upstreams only after the call still using it answered. And SIGHUP on the binary.

use std::{
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::http::{Method, StatusCode};
use mcpgate::{
    config::{AuthConfig, Env, InProcess, ServerConfig, StateConfig, TransportConfig},
    server::{AppState, auth::Authenticator, reload::ReloadSource},
};
use rmcp::{
    ErrorData, RoleServer, ServerHandler, ServiceExt as _,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, Tool, object,
    },
    service::RequestContext,
};
use serde_json::{Value, json};
use tempfile::TempDir;
use tokio::sync::{Notify, Semaphore};

use super::{Harness, Reply};
use crate::support::{self, WAIT, wait_for};

/// Byte buffer of the in-process pipe; one message rarely waits on it.
const PIPE_BUFFER: usize = 64 * 1024;

pub(super) const RELOAD: &str = "/api/v1/admin/reload";

/// `wait` answers only when the test releases it; `ping` at once.
#[derive(Clone)]
pub(super) struct HeldServer {
    started: Arc<Notify>,
    release: Arc<Semaphore>,
}

impl ServerHandler for HeldServer {
    fn get_info(&self) -> rmcp::model::ServerConfig {
        rmcp::model::ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("held", "0.1.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let no_args = Arc::new(object(json!({ "type": "object", "properties": {} })));
        Ok(ListToolsResult::with_all_items(vec![
            Tool::new("wait", "Answers when released.", no_args.clone()),
            Tool::new("ping", "Answers at once.", no_args),
        ]))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "wait" {
            self.started.notify_one();
            let _released = self.release.acquire().await;
        }
        let text = format!("{} answered", request.name);
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }
}

/// A service on the `held` server, reloadable from `mcpgate.toml` in a temporary folder.
pub(super) struct Reloadable {
    pub(super) harness: Harness,
    dir: TempDir,
    held: HeldServer,
    /// Set when the gateway closed its connection to `held`.
    pub(super) closed: Arc<AtomicBool>,
}

impl Reloadable {
    pub(super) async fn start() -> Reloadable {
        let held = HeldServer {
            started: Arc::new(Notify::new()),
            release: Arc::new(Semaphore::new(0)),
        };
        let closed = Arc::new(AtomicBool::new(false));
        let (handler, on_close) = (held.clone(), closed.clone());
        let factory = move || {
            let (client, server) = tokio::io::duplex(PIPE_BUFFER);
            let (handler, on_close) = (handler.clone(), on_close.clone());
            tokio::spawn(async move {
                if let Ok(running) = handler.serve(server).await {
                    let _ = running.waiting().await;
                }
                on_close.store(true, Ordering::SeqCst);
            });
            client
        };
        let mut server = ServerConfig::new(
            support::id("held"),
            TransportConfig::InProcess(InProcess(Arc::new(factory))),
        );
        server.read_only_tools = vec!["wait".into(), "ping".into()];
        let gateway = support::gateway(support::config(vec![server])).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let env = Env::default();
        let service = mcpgate::config::ServiceConfig::default();
        let auth = Authenticator::new(&AuthConfig::Dev, &env, service.listen, false)
            .await
            .expect("auth");
        let token = auth.dev_token().map(str::to_owned);
        let source = ReloadSource {
            explicit: Some(PathBuf::from("mcpgate.toml")),
            cwd: dir.path().to_owned(),
            exe: support::mcpgate_bin(),
            embedded_state: StateConfig::Memory,
            listen: None,
            options: support::options(),
        };
        let state = AppState::new(gateway, Arc::new(auth), Arc::new(service)).with_reload(source);
        Reloadable {
            harness: Harness::with_state(state, token),
            dir,
            held,
            closed,
        }
    }

    pub(super) fn write(&self, text: &str) {
        std::fs::write(self.dir.path().join("mcpgate.toml"), text).expect("config written");
    }

    async fn tool_names(&self) -> Vec<String> {
        let reply = self
            .harness
            .send(Method::GET, "/api/v1/mcp/tools", None)
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        reply.json.expect("JSON")["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("name").to_owned())
            .collect()
    }
}

/// A valid file: state in memory, `servers` as given (TOML tables).
pub(super) fn file_with(servers: &str) -> String {
    let sandbox = crate::support::sandbox_section(&[], &[]);
    format!("{sandbox}[state]\ndatabase = \"memory\"\n\n{servers}")
}

/// The demo server as `id`, run by the mcpgate binary; `echo` needs no confirmation.
pub(super) fn demo_server(id: &str) -> String {
    format!(
        "[servers.{id}]\ncommand = {:?}\nargs = [\"demo-server\"]\nread_only_tools = [\"echo\"]\n\n",
        support::mcpgate_bin().to_string_lossy()
    )
}

fn strings(reply: &Reply, field: &str) -> Vec<String> {
    let json = reply.json.as_ref().expect("JSON body");
    json[field]
        .as_array()
        .unwrap_or_else(|| panic!("{field} in {json}"))
        .iter()
        .map(|v| v.as_str().expect("string").to_owned())
        .collect()
}

#[tokio::test]
async fn a_bad_file_changes_nothing_and_every_problem_is_reported() {
    let service = Reloadable::start().await;
    service.write(
        "[limits]\ncall_timeout = \"soon\"\n\n[servers.Bad_Id]\ncommand = \"x\"\n\n\
         [servers.web]\nurl = \"not a url\"\n",
    );
    let reply = service.harness.send(Method::POST, RELOAD, None).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert_eq!(reply.json.as_ref().expect("JSON")["code"], "invalid_config");
    let problems = strings(&reply, "problems");
    for path in ["limits.call_timeout", "servers.Bad_Id", "servers.web.url"] {
        assert!(
            problems.iter().any(|p| p.starts_with(path)),
            "{path} in {problems:?}"
        );
    }
    assert_eq!(service.tool_names().await, ["held.ping", "held.wait"]);

    // Valid, but the service section changed: only a restart applies that.
    service.write(&(file_with(&demo_server("demo")) + "[server]\nmax_body_bytes = 1234\n"));
    let reply = service.harness.send(Method::POST, RELOAD, None).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text);
    assert_eq!(strings(&reply, "sections"), ["server"]);
    assert_eq!(service.tool_names().await, ["held.ping", "held.wait"]);
    // So does the audit log's sync level: the stores open once.
    service.write(&(file_with(&demo_server("demo")) + "[audit]\nsync = \"every_commit\"\n"));
    let reply = service.harness.send(Method::POST, RELOAD, None).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text);
    assert_eq!(strings(&reply, "sections"), ["audit.sync"]);
    let call = json!({ "tool": "held.ping" });
    let reply = service
        .harness
        .send(Method::POST, "/api/v1/mcp/tools/call", Some(&call))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::OK,
        "the old gateway still serves calls"
    );

    let metrics = service.harness.send(Method::GET, "/metrics", None).await;
    let rejected = "mcpgate_config_reloads_total{result=\"rejected\"} 3";
    assert!(metrics.text.contains(rejected), "{}", metrics.text);
    assert!(!service.closed.load(Ordering::SeqCst));
    service.harness.stop().await;
}

#[tokio::test]
async fn a_good_file_swaps_the_gateway_after_the_calls_in_flight_answer() {
    let service = Reloadable::start().await;
    let wait = json!({ "tool": "held.wait" });
    // Boxed, not pinned in place: dropped before the harness stops.
    let mut call = Box::pin(service.harness.send(
        Method::POST,
        "/api/v1/mcp/tools/call",
        Some(&wait),
    ));
    tokio::select! {
        reply = &mut call => panic!("answered before release: {}", reply.text),
        () = service.held.started.notified() => {}
        () = tokio::time::sleep(WAIT) => panic!("the call did not reach the server"),
    }

    service.write(&file_with(&demo_server("demo")));
    let reply = service.harness.send(Method::POST, RELOAD, None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(strings(&reply, "added"), ["demo"]);
    assert_eq!(strings(&reply, "removed"), ["held"]);
    assert!(strings(&reply, "kept").is_empty());
    let tools = service.tool_names().await;
    assert!(tools.contains(&"demo.echo".to_owned()), "{tools:?}");
    assert!(tools.iter().all(|t| t.starts_with("demo.")), "{tools:?}");

    // The old gateway still holds its connection for the call in flight.
    assert!(!service.closed.load(Ordering::SeqCst));
    let metrics = service.harness.send(Method::GET, "/metrics", None).await;
    assert!(
        metrics.text.contains("\nmcpgate_tool_calls_in_flight 1\n"),
        "{}",
        metrics.text
    );
    service.held.release.add_permits(1);
    let reply: Reply = tokio::time::timeout(WAIT, &mut call)
        .await
        .expect("the held call answers");
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let body: Value = reply.json.expect("JSON");
    assert_eq!(body["data"]["content"][0]["text"], "wait answered");
    wait_for("the old gateway to close its upstream", || {
        service.closed.load(Ordering::SeqCst).then_some(())
    })
    .await;

    let echo = json!({ "tool": "demo.echo", "arguments": { "message": "new" } });
    let reply = service
        .harness
        .send(Method::POST, "/api/v1/mcp/tools/call", Some(&echo))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    drop(call);
    service.harness.stop().await;
}

#[tokio::test]
async fn sighup_reloads_the_served_configuration() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("mcpgate.toml");
    std::fs::write(&file, file_with(&demo_server("demo"))).expect("config");
    let mut child = tokio::process::Command::new(support::mcpgate_bin())
        .current_dir(dir.path())
        .args([
            "--config",
            "mcpgate.toml",
            "serve",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let (mut base, mut token) = (None, None);
    while let Ok(Some(line)) = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("banner in time")
    {
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
    let (base, token) = (base.expect("address"), token.expect("token"));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let tools = || async {
        let body: Value = client
            .get(format!("{base}/api/v1/mcp/tools"))
            .bearer_auth(&token)
            .send()
            .await
            .expect("tools")
            .json()
            .await
            .expect("JSON");
        body["tools"].as_array().map_or(0, |tools| {
            tools.iter().filter(|t| t["server"] == "second").count()
        })
    };
    assert_eq!(tools().await, 0);

    std::fs::write(
        &file,
        file_with(&(demo_server("demo") + &demo_server("second"))),
    )
    .expect("config");
    let pid = nix::unistd::Pid::from_raw(child.id().expect("running") as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).expect("SIGHUP");
    let started = std::time::Instant::now();
    while tools().await == 0 {
        assert!(started.elapsed() < WAIT, "the second server did not appear");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(status.success(), "{status:?}");
}
