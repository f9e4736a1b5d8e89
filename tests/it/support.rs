//! Shared test support: where the installed peers live, building configs, starting gateways
//! and peer processes on loopback, and bounded waits.

use std::{
    net::TcpListener,
    path::PathBuf,
    process::Stdio,
    sync::Arc,
    time::{Duration, Instant},
};

use mcpgate::{
    config::{
        Config, Confirm, Env, HttpConfig, HttpKind, PinsConfig, ReconnectConfig, ServerConfig,
        ServerId, StateConfig, StdioConfig, TransportConfig,
    },
    gateway::{Gateway, GatewayError, GatewayOptions, ToolOutput},
    policy::CallContext,
};
use serde_json::Value;
use tokio::process::{Child, Command};

/// How long any single condition in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(30);

pub fn peers() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/peers");
    assert!(
        dir.join(".npm-installed").exists(),
        "test peers are missing: run scripts/install-peers.sh (the README's test command does)"
    );
    dir
}

pub fn npm_package(name: &str) -> PathBuf {
    peers().join("node_modules").join(name)
}

pub fn everything_js() -> String {
    npm_package("@modelcontextprotocol/server-everything")
        .join("dist/index.js")
        .to_string_lossy()
        .into_owned()
}

/// A `[sandbox]` section for test configurations: stdio servers run as the user running the
/// tests (root included, and named, since the sandbox refuses to start a server as an unnamed
/// root), reading `read` and writing `write` beyond the defaults.
pub fn sandbox_section(read: &[&std::path::Path], write: &[&std::path::Path]) -> String {
    let paths = |paths: &[&std::path::Path]| {
        let quoted: Vec<String> = paths
            .iter()
            .map(|p| toml::Value::String(p.to_string_lossy().into_owned()).to_string())
            .collect();
        quoted.join(", ")
    };
    format!(
        "[sandbox]\nrun_as = \"{}:{}\"\nread = [{}]\nwrite = [{}]\n\n",
        nix::unistd::geteuid(),
        nix::unistd::getegid(),
        paths(read),
        paths(write)
    )
}

pub fn mcpgate_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_mcpgate"))
}

pub fn id(raw: &str) -> ServerId {
    ServerId::new(raw).expect("test server ids are valid")
}

/// A stdio server; transport tests call tools without a confirmation step.
pub fn stdio(id_: &str, command: &str, args: &[&str]) -> ServerConfig {
    no_confirm(ServerConfig::new(
        id(id_),
        TransportConfig::Stdio(StdioConfig {
            command: command.to_owned(),
            args: args.iter().map(|s| (*s).to_owned()).collect(),
            env: Vec::new(),
            cwd: None,
            // The sandbox has tests of its own (`sandbox`); these test transports.
            sandbox: mcpgate::config::Sandbox::off(),
        }),
    ))
}

pub fn no_confirm(mut server: ServerConfig) -> ServerConfig {
    server.confirm = Confirm::None;
    server
}

/// A server from one of our fixtures, run by the mcpgate binary.
pub fn fixture(id_: &str, name: &str) -> ServerConfig {
    stdio(id_, &mcpgate_bin().to_string_lossy(), &["fixture", name])
}

pub fn http(id_: &str, url: &str, kind: HttpKind) -> ServerConfig {
    let mut server = ServerConfig::new(
        id(id_),
        TransportConfig::Http(HttpConfig {
            url: url.parse().expect("test URLs are valid"),
            kind,
            headers: Vec::new(),
        }),
    );
    // Test upstreams listen on loopback over plain HTTP.
    server.allow_private = true;
    server.allow_http = true;
    no_confirm(server)
}

pub fn config(servers: Vec<ServerConfig>) -> Config {
    let mut servers = servers;
    servers.sort_by(|a, b| a.id.cmp(&b.id));
    Config {
        servers,
        reconnect: ReconnectConfig {
            initial_delay: Duration::from_millis(50),
            max_delay: Duration::from_millis(500),
            max_attempts: 20,
        },
        // Tests leave nothing on disk and read no pin file.
        state: StateConfig::Memory,
        pins: PinsConfig::none(),
        ..Config::default()
    }
}

/// Starts a gateway (stdio servers supervised by the mcpgate binary, state in memory) and
/// waits until every server had its first try.
pub async fn gateway(config: Config) -> Gateway {
    let gateway = Gateway::start(config, options())
        .await
        .expect("the gateway starts");
    gateway.wait_ready(WAIT).await;
    gateway
}

/// The `[oauth]` key tests seal users' secrets with, in every test gateway's environment as
/// `MCPGATE_TEST_OAUTH_KEY`.
pub const TEST_OAUTH_KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

/// Turns users' own servers on in `config`, under the tests' loopback override, with the
/// tests' key.
pub fn with_user_servers(config: &mut Config) {
    config.user_servers = mcpgate::config::UserServersConfig {
        enabled: true,
        allow_loopback: true,
        ..mcpgate::config::UserServersConfig::default()
    };
    config.oauth.keys = vec![mcpgate::config::SecretTemplate::new(
        "${MCPGATE_TEST_OAUTH_KEY}",
    )];
}

pub fn options() -> GatewayOptions {
    let process = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    GatewayOptions {
        env: Env::from_pairs(process.chain([(
            "MCPGATE_TEST_OAUTH_KEY".to_owned(),
            TEST_OAUTH_KEY.to_owned(),
        )])),
        supervisor: Some(mcpgate_bin()),
        ..GatewayOptions::default()
    }
}

/// A caller for tests: tenant `local`, one session.
pub fn ctx() -> CallContext {
    CallContext {
        tenant: "local".into(),
        user: "tester".into(),
        session: "session-1".into(),
        roles: vec![],
        request_id: "req".into(),
    }
}

/// Calls through the gate as [`ctx`] without a confirmation token.
pub trait CallExt {
    async fn call(&self, name: &str, arguments: Value) -> Result<ToolOutput, GatewayError>;
}

impl CallExt for Gateway {
    async fn call(&self, name: &str, arguments: Value) -> Result<ToolOutput, GatewayError> {
        self.call_tool(&ctx(), name, arguments, None).await
    }
}

/// Polls `check` until it returns `Some`, failing the test after [`WAIT`].
pub async fn wait_for<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A free loopback port for a peer that takes its port from the environment.
/// The highest resident set size this process reached, in KiB (`VmHWM`).
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in kB")
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// server-everything over HTTP (`streamableHttp` or `sse`) on a loopback port; killed on drop.
pub struct NodePeer {
    pub port: u16,
    _child: Child,
}

pub async fn everything_http(mode: &str) -> NodePeer {
    let port = free_port();
    let child = Command::new("node")
        .arg(everything_js())
        .arg(mode)
        .env("PORT", port.to_string())
        .env(
            "NODE_OPTIONS",
            format!("--require {}", peers().join("loopback.cjs").display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    wait_listening(port).await;
    NodePeer {
        port,
        _child: child,
    }
}

pub async fn wait_listening(port: u16) {
    let start = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(start.elapsed() < WAIT, "peer did not listen on {port}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Whether a process with this PID still exists (zombies count as gone).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Bytes buffered by an in-process server's pipe; one message rarely waits at this size.
const IN_PROCESS_BUFFER: usize = 64 * 1024;

/// A server run in this process by `handler` over a duplex pipe: a fresh session for each
/// connection, and clones of `handler` share its state (the demo's notes, fixture counters).
/// Unlike [`stdio`], `confirm` stays at its default (`writes`): gate tests set it themselves.
pub fn in_process<H>(id_: &str, handler: H) -> ServerConfig
where
    H: rmcp::ServerHandler + Clone,
{
    let factory = move || {
        let (client, server) = tokio::io::duplex(IN_PROCESS_BUFFER);
        let handler = handler.clone();
        // The server task ends when the gateway closes its end of the pipe.
        tokio::spawn(async move {
            if let Ok(running) = rmcp::ServiceExt::serve(handler, server).await {
                let _ = running.waiting().await;
            }
        });
        client
    };
    ServerConfig::new(
        id(id_),
        TransportConfig::InProcess(mcpgate::config::InProcess(std::sync::Arc::new(factory))),
    )
}

/// Every live descendant of `pid` (children, grandchildren, ...), from /proc.
pub fn child_pids(pid: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .map(|dir| {
            dir.flatten()
                .filter_map(|entry| {
                    let child: i32 = entry.file_name().to_str()?.parse().ok()?;
                    let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
                    let ppid = stat
                        .rsplit_once(')')?
                        .1
                        .split_whitespace()
                        .nth(1)?
                        .parse()
                        .ok()?;
                    Some((child, ppid))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut found = vec![];
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for (child, ppid) in &parents {
            if *ppid == parent && !found.contains(child) {
                found.push(*child);
                frontier.push(*child);
            }
        }
    }
    found
}

/// `mcpgate::server::serve` running on a listener until [`Served::stop`].
pub struct Served {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Served {
    pub fn spawn(listener: tokio::net::TcpListener, state: mcpgate::server::AppState) -> Served {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(mcpgate::server::serve(listener, state, async {
            let _ = stopped.await;
        }));
        Served {
            stop: Some(stop),
            task,
        }
    }

    /// Asks the service to stop and waits (bounded by [`WAIT`]) until it has.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(WAIT, self.task).await;
    }
}

/// `mcpgate serve` run from the binary in `dir`, whose `mcpgate.toml` it writes from
/// `config` (none: the embedded defaults), with `env` added to its environment; listening on
/// a loopback port. `token` is the dev token its banner printed, in dev mode.
pub struct ServedBinary {
    child: Child,
    pub base: String,
    pub token: Option<String>,
}

impl ServedBinary {
    pub async fn start(
        dir: &std::path::Path,
        config: Option<&str>,
        env: &[(&str, &str)],
    ) -> ServedBinary {
        use tokio::io::{AsyncBufReadExt as _, BufReader};
        if let Some(config) = config {
            std::fs::write(dir.join("mcpgate.toml"), config).expect("config written");
        }
        // A test that must know the address before the start names it as MCPGATE_LISTEN.
        let listen = env
            .iter()
            .find(|(name, _)| *name == "MCPGATE_LISTEN")
            .map_or("127.0.0.1:0", |(_, value)| *value);
        let mut child = Command::new(mcpgate_bin())
            .current_dir(dir)
            .args(["serve", "--listen", listen])
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr_for(env))
            .kill_on_drop(true)
            .spawn()
            .expect("serve starts");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let (mut base, mut token) = (None, None);
        while let Some(line) = tokio::time::timeout(WAIT, lines.next_line())
            .await
            .expect("banner in time")
            .expect("stdout readable")
        {
            if let Some(rest) = line.strip_prefix("mcpgate is serving on ") {
                base = Some(rest.trim().to_owned());
            }
            if let Some(rest) = line.trim().strip_prefix("token ") {
                token = Some(rest.trim().to_owned());
            }
            if line.starts_with("Press Ctrl-C") {
                break;
            }
        }
        // Whatever the gateway prints later must never fill the pipe and stall it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        ServedBinary {
            child,
            base: base.expect("address printed"),
            token,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id().expect("the gateway is running")
    }

    /// Waits until `/readyz` says every upstream settled.
    pub async fn wait_ready(&self) {
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .expect("client");
        let ready = async {
            loop {
                let response = client.get(format!("{}/readyz", self.base)).send().await;
                if response.is_ok_and(|r| r.status().is_success()) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        };
        tokio::time::timeout(WAIT, ready)
            .await
            .expect("the gateway gets ready");
    }

    /// Kills it with SIGKILL: nothing is cleaned up, as when its machine dies.
    pub async fn kill(mut self) {
        let _ = self.child.kill().await;
    }

    /// Stops it with SIGTERM, so it reaps its stdio children; how it exited.
    pub async fn stop(mut self) -> std::process::ExitStatus {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.pid()).expect("a Linux pid"));
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal sent");
        tokio::time::timeout(WAIT, self.child.wait())
            .await
            .expect("the gateway exits in time")
            .expect("the gateway is reaped")
    }
}

/// Where a served binary's stderr goes: the file `MCPGATE_TEST_STDERR_FILE` names in its
/// environment (a test that reads the log), the terminal with `MCPGATE_TEST_STDERR`, else
/// nowhere.
fn stderr_for(env: &[(&str, &str)]) -> Stdio {
    if let Some((_, path)) = env
        .iter()
        .find(|(name, _)| *name == "MCPGATE_TEST_STDERR_FILE")
    {
        return std::fs::File::create(path).expect("log file").into();
    }
    if std::env::var_os("MCPGATE_TEST_STDERR").is_some() {
        Stdio::inherit()
    } else {
        Stdio::null()
    }
}

/// [`wait_for`] with an async check.
pub async fn wait_for_async<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every regular file under `dir`, with its bytes, for tests that search what was written.
pub fn files_under(dir: &std::path::Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder)
            .expect("readable folder")
            .flatten()
        {
            let path = entry.path();
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => folders.push(path),
                Ok(kind) if kind.is_file() => {
                    if let Ok(bytes) = std::fs::read(&path) {
                        found.push((path, bytes));
                    }
                }
                _ => {}
            }
        }
    }
    found
}

/// Fixture `fixture` served by rmcp's Streamable HTTP server at `/mcp` on 127.0.0.1:0, with
/// `front` (middleware layers, say) added to its router, until `stop` is cancelled. Returns
/// the endpoint's URL.
pub async fn serve_fixture_behind(
    fixture: mcpgate::fixtures::Fixture,
    front: impl FnOnce(axum::Router) -> axum::Router,
    stop: &tokio_util::sync::CancellationToken,
) -> String {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let handler = mcpgate::fixtures::handler(fixture).expect("the fixture has a handler");
    let service: StreamableHttpService<_, LocalSessionManager> = StreamableHttpService::new(
        move || Ok(handler.clone()),
        Arc::new(LocalSessionManager::default()),
        StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
    );
    let app = front(axum::Router::new().route_service("/mcp", service));
    let shutdown = stop.clone();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    });
    format!("http://{addr}/mcp")
}
