//! The embedding API: connect one MCP server, get its tool set, call its tools.
//!
//! A [`ToolSet`] is a one-server [`Gateway`]: the same SSRF-checked connections, catalog
//! (names, repaired schemas, fingerprints) and call path the `mcpgate` binary uses.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use mcpgate::toolset::{ServerSpec, ToolSet};
//!
//! let spec = ServerSpec::url("https://mcp.example.com/mcp")?
//!     .allowed_hosts(["mcp.example.com"])
//!     .allowed_tools(["search"])
//!     .header("Authorization", "Bearer ${EXAMPLE_TOKEN}");
//! let tools = ToolSet::connect(spec).await?;
//! for tool in tools.catalog().tools() {
//!     println!("{} ({}) {}", tool.canonical, tool.function_name, tool.fingerprint);
//! }
//! let result = tools.call("search", serde_json::json!({ "q": "rust" })).await?;
//! println!("{}", result.text());
//! tools.close().await;
//! # Ok(()) }
//! ```
//!
//! A server written with rmcp runs in the same process without any network, which suits
//! tests of your own servers:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use mcpgate::{demo::DemoServer, toolset::{ServerSpec, ToolSet}};
//!
//! let tools = ToolSet::connect(ServerSpec::in_process(DemoServer::new()).id("demo")?).await?;
//! assert!(tools.catalog().by_canonical("demo.echo").is_some());
//! let reply = tools.call("echo", serde_json::json!({ "message": "hi" })).await?;
//! assert_eq!(reply.text(), "Echo: hi");
//! tools.close().await;
//! # Ok(()) }
//! ```

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use rmcp::{ServerHandler, ServiceExt};
use serde_json::Value;

use crate::{
    catalog::Catalog,
    config::{
        Config, Confirm, Env, HttpConfig, HttpKind, InProcess, Limits, PinsConfig, Sandbox,
        SecretTemplate, ServerConfig, ServerId, StateConfig, StdioConfig, TransportConfig,
    },
    gateway::{Gateway, GatewayError, GatewayOptions, ToolOutput},
    policy::CallContext,
    upstream::ServerState,
};

/// Byte buffer of the in-process pipe; large enough that one message rarely waits.
const IN_PROCESS_BUFFER: usize = 64 * 1024;

/// What to connect and how; built with chained options.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    server: ServerConfig,
    known_fingerprints: BTreeMap<String, String>,
    limits: Limits,
    env: Option<Env>,
}

impl ServerSpec {
    /// An HTTP server (Streamable HTTP, with legacy SSE as fallback). HTTPS only and public
    /// addresses only unless [`ServerSpec::allow_http`] / [`ServerSpec::allow_private`].
    pub fn url(url: &str) -> Result<ServerSpec, ToolSetError> {
        let url = url::Url::parse(url).map_err(|e| ToolSetError::InvalidUrl(e.to_string()))?;
        Ok(ServerSpec::new(TransportConfig::Http(HttpConfig {
            url,
            kind: HttpKind::Auto,
            headers: Vec::new(),
        })))
    }

    /// A stdio server started from `program` and `args` (no shell). It runs unsandboxed:
    /// the sandbox is applied by the `mcpgate` binary's supervisor, which an embedding
    /// program does not have (run servers you do not trust through `mcpgate serve`).
    pub fn command<I, S>(program: &str, args: I) -> ServerSpec
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ServerSpec::new(TransportConfig::Stdio(StdioConfig {
            command: program.to_owned(),
            args: args.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            cwd: None,
            sandbox: Sandbox::off(),
        }))
    }

    /// An rmcp server handler run in this process, reached without any network: for tests
    /// of your own servers and for tools you implement in Rust.
    pub fn in_process<H>(handler: H) -> ServerSpec
    where
        H: ServerHandler + Clone,
    {
        let factory = move || {
            let (client, server) = tokio::io::duplex(IN_PROCESS_BUFFER);
            let handler = handler.clone();
            // The server task ends when the client closes its end of the pipe.
            tokio::spawn(async move {
                if let Ok(running) = handler.serve(server).await {
                    let _ = running.waiting().await;
                }
            });
            client
        };
        ServerSpec::new(TransportConfig::InProcess(InProcess(Arc::new(factory))))
    }

    fn new(transport: TransportConfig) -> ServerSpec {
        let id = ServerId::new("server").expect("static id is valid");
        let mut server = ServerConfig::new(id, transport);
        server.confirm = Confirm::None;
        ServerSpec {
            server,
            known_fingerprints: BTreeMap::new(),
            limits: Limits::default(),
            env: None,
        }
    }

    /// The server id used in canonical names (`id.tool`); default `server`.
    pub fn id(mut self, id: &str) -> Result<ServerSpec, ToolSetError> {
        self.server.id = ServerId::new(id).ok_or_else(|| ToolSetError::InvalidId(id.to_owned()))?;
        Ok(self)
    }

    /// Exact host names the server may be reached at (redirects included).
    pub fn allowed_hosts<I: IntoIterator<Item = S>, S: Into<String>>(mut self, hosts: I) -> Self {
        self.server.allowed_hosts = hosts.into_iter().map(Into::into).collect();
        self
    }

    /// Permit loopback and private addresses (local servers).
    pub fn allow_private(mut self, allow: bool) -> Self {
        self.server.allow_private = allow;
        self
    }

    /// Permit plain `http://`.
    pub fn allow_http(mut self, allow: bool) -> Self {
        self.server.allow_http = allow;
        self
    }

    /// Expose only these tools (upstream names).
    pub fn allowed_tools<I: IntoIterator<Item = S>, S: Into<String>>(mut self, tools: I) -> Self {
        self.server.allowed_tools = Some(tools.into_iter().map(Into::into).collect());
        self
    }

    /// Require confirmation for every tool: [`ToolSet::call`] refuses them and
    /// [`ToolSet::call_confirmed`] must be used once your user has approved.
    pub fn confirm_all(mut self, confirm: bool) -> Self {
        self.server.confirm = if confirm {
            Confirm::All
        } else {
            Confirm::Writes
        };
        self
    }

    /// Fingerprints you recorded earlier (tool name → fingerprint); a tool whose definition
    /// changed since is logged as a warning and listed by [`ToolSet::changed_tools`].
    pub fn known_fingerprints<I, K, V>(mut self, known: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.known_fingerprints = known
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self
    }

    /// A header for HTTP servers; `${VAR}` references are read from the environment.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        if let TransportConfig::Http(http) = &mut self.server.transport {
            http.headers
                .push((name.to_owned(), SecretTemplate::new(value)));
        }
        self
    }

    /// An environment variable for stdio servers; `${VAR}` references are read from the
    /// environment.
    pub fn env(mut self, name: &str, value: &str) -> Self {
        if let TransportConfig::Stdio(stdio) = &mut self.server.transport {
            stdio
                .env
                .push((name.to_owned(), SecretTemplate::new(value)));
        }
        self
    }

    /// Deadlines for connecting and for each call.
    pub fn timeouts(mut self, connect: Duration, call: Duration) -> Self {
        self.limits.connect_timeout = connect;
        self.limits.call_timeout = call;
        self
    }

    /// The environment `${VAR}` references are resolved from (default: the process's).
    pub fn with_env(mut self, env: Env) -> Self {
        self.env = Some(env);
        self
    }
}

/// A connected server's tools.
pub struct ToolSet {
    gateway: Gateway,
    /// The embedding application acts as one local caller.
    ctx: CallContext,
    url: Option<url::Url>,
    changed: Vec<String>,
}

impl ToolSet {
    /// Connects and lists the tools; fails if the server cannot be reached within the
    /// connect deadline.
    pub async fn connect(spec: ServerSpec) -> Result<ToolSet, ToolSetError> {
        let url = match &spec.server.transport {
            TransportConfig::Http(http) => Some(http.url.clone()),
            _ => None,
        };
        let config = Config {
            servers: vec![spec.server],
            limits: spec.limits,
            // An embedded tool set keeps no files: confirmations and audit live in memory.
            state: StateConfig::Memory,
            // No pin file is read: `known_fingerprints` is the embedding's way to pin.
            pins: PinsConfig::none(),
            ..Config::default()
        };
        let options = GatewayOptions {
            env: spec.env.unwrap_or_else(Env::from_process),
            ..GatewayOptions::default()
        };
        let settle = config.settle_deadline();
        let gateway = Gateway::start(config, options)
            .await
            .map_err(|e| ToolSetError::Connect(e.to_string()))?;
        gateway.wait_ready(settle).await;
        let status = gateway.servers().into_iter().next();
        match status {
            Some(s) if s.state == ServerState::Ready => {}
            other => {
                let reason = other
                    .and_then(|s| s.last_error)
                    .unwrap_or_else(|| "not ready".to_owned());
                gateway.shutdown().await;
                return Err(ToolSetError::Connect(reason));
            }
        }
        let changed = changed_tools(&gateway.catalog(), &spec.known_fingerprints);
        for name in &changed {
            tracing::warn!(tool = %name, "tool definition changed since its fingerprint was recorded");
        }
        Ok(ToolSet {
            gateway,
            url,
            changed,
            ctx: CallContext::local(),
        })
    }

    /// The current catalog: iterate with `.tools()`; names, schemas, fingerprints.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.gateway.catalog()
    }

    /// The gate behind this tool set (one server, one local caller): build an
    /// [`crate::agent::Agent`] over it, or call through it with another [`CallContext`].
    pub fn gateway(&self) -> &Gateway {
        &self.gateway
    }

    /// The local caller this tool set calls as.
    pub fn context(&self) -> &CallContext {
        &self.ctx
    }

    pub fn len(&self) -> usize {
        self.catalog().len()
    }

    pub fn is_empty(&self) -> bool {
        self.catalog().is_empty()
    }

    /// Upstream tool name → fingerprint, for recording and passing back to
    /// [`ServerSpec::known_fingerprints`] next time.
    pub fn fingerprints(&self) -> BTreeMap<String, String> {
        self.catalog()
            .tools()
            .iter()
            .map(|t| {
                (
                    t.upstream.name.to_string(),
                    t.fingerprint.as_str().to_owned(),
                )
            })
            .collect()
    }

    /// Tools whose definitions differ from the known fingerprints given at connect time.
    pub fn changed_tools(&self) -> &[String] {
        &self.changed
    }

    /// The server's URL, for HTTP servers.
    pub fn server_url(&self) -> Option<&url::Url> {
        self.url.as_ref()
    }

    /// Whether calling `tool` needs your user's confirmation first.
    pub fn requires_confirmation(&self, tool: &str) -> bool {
        self.gateway
            .config()
            .servers
            .iter()
            .any(|s| s.confirm == Confirm::All)
            && self.resolve(tool).is_some()
    }

    /// Calls a tool by its upstream name, canonical id or function name, through the gate.
    /// Tools that require confirmation are refused with
    /// [`ToolSetError::ConfirmationRequired`].
    pub async fn call(&self, tool: &str, arguments: Value) -> Result<ToolOutput, ToolSetError> {
        let name = self.resolve(tool).unwrap_or_else(|| tool.to_owned());
        let ctx = self.ctx.next_request();
        match self.gateway.call_tool(&ctx, &name, arguments, None).await {
            Err(GatewayError::ConfirmationRequired { .. }) => {
                Err(ToolSetError::ConfirmationRequired(tool.to_owned()))
            }
            other => Ok(other?),
        }
    }

    /// Calls a tool your user has approved: asks the gate for a confirmation, approves it as
    /// this tool set's caller, and makes the call with the single-use token.
    pub async fn call_confirmed(
        &self,
        tool: &str,
        arguments: Value,
    ) -> Result<ToolOutput, ToolSetError> {
        let name = self.resolve(tool).unwrap_or_else(|| tool.to_owned());
        let ctx = self.ctx.next_request();
        match self
            .gateway
            .call_tool(&ctx, &name, arguments.clone(), None)
            .await
        {
            Err(GatewayError::ConfirmationRequired {
                confirmation_id, ..
            }) => {
                let approval = self.gateway.approve(&ctx, &confirmation_id).await?;
                let ctx = ctx.next_request();
                Ok(self
                    .gateway
                    .call_tool(&ctx, &name, arguments, Some(&approval.token))
                    .await?)
            }
            other => Ok(other?),
        }
    }

    fn resolve(&self, tool: &str) -> Option<String> {
        let catalog = self.catalog();
        catalog
            .tools()
            .iter()
            .find(|t| t.upstream.name == tool || t.canonical == tool || t.function_name == tool)
            .map(|t| t.canonical.clone())
    }

    /// Closes the connection (and the child process, for stdio servers).
    pub async fn close(self) {
        self.gateway.shutdown().await;
    }
}

fn changed_tools(catalog: &Catalog, known: &BTreeMap<String, String>) -> Vec<String> {
    catalog
        .tools()
        .iter()
        .filter(|t| {
            known
                .get(t.upstream.name.as_ref())
                .is_some_and(|fp| fp != t.fingerprint.as_str())
        })
        .map(|t| t.upstream.name.to_string())
        .collect()
}

/// Why a tool set could not be built or used.
#[derive(Debug, thiserror::Error)]
pub enum ToolSetError {
    #[error("invalid URL: {0}")]
    InvalidUrl(String),
    #[error(
        "invalid server id `{0}`: use lowercase letters, digits and `-`, starting with a letter"
    )]
    InvalidId(String),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("`{0}` requires confirmation: call it with call_confirmed once the user approved")]
    ConfirmationRequired(String),
    #[error(transparent)]
    Call(#[from] GatewayError),
}
