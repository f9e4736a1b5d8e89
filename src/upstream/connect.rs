//! Opening one connection to an upstream server over the configured transport, with the
//! rmcp client lifecycle that tries the 2026-07-28 protocol and falls back to `initialize`.
#![expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577, but servers still send them \
              and the gateway relays them faithfully"
)]

use std::{collections::HashMap, path::PathBuf, sync::Arc, time::Duration};

use rmcp::{
    ClientHandler, ErrorData, RoleClient, ServiceExt,
    model::{
        ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
        ElicitRequestParams, ElicitResult, Implementation, LoggingMessageNotificationParam,
        ProgressNotificationParam, ProtocolVersion, ResourceUpdatedNotificationParam,
        ServerNotification, SubscriptionFilter,
    },
    service::{
        ClientInitializeError, ClientLifecycleMode, ClientServiceExt, InboundStreamOrigin,
        NotificationContext, RequestContext, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use tokio::sync::Notify;

use super::{
    UpstreamError,
    announcing::Announcing,
    http_link::{HttpLink, HttpLinkParts},
    line_transport::LineTransport,
    relay::{self, Announced, RelayRegistry},
    sse::{self, SseClientConfig},
    stdio::{self, ChildGuard, FramingError, StdioLaunch},
    tool_call::CallLink,
    watch::WatchRegistry,
};
use crate::{
    config::{Env, HttpConfig, HttpKind, Limits, ServerConfig, TransportConfig},
    net::{self, NetPolicy, PlainClient, SystemLookup},
};

/// The client side of one upstream connection: reports `tools/list_changed`, relays
/// progress, log messages, sampling and elicitation to the caller of the tool call they
/// belong to (see [`super::relay`]), and resource updates to the callers watching the
/// resource (see [`super::watch`]).
#[derive(Debug, Clone)]
pub struct UpstreamClient {
    tools_changed: Arc<Notify>,
    relays: Arc<RelayRegistry>,
    watches: Arc<WatchRegistry>,
    lifecycle: Lifecycle,
}

impl ClientHandler for UpstreamClient {
    fn get_info(&self) -> ClientConfig {
        // Sampling and elicitation are declared always: a request that no caller can answer
        // is refused with an error, which a server handles like a client saying no.
        // MCP Apps views are declared too (see `extensions::declared`).
        let mut capabilities = ClientCapabilities::builder()
            .enable_sampling()
            .enable_elicitation()
            .build();
        capabilities.extensions = Some(super::extensions::declared());
        // `initialize` carries the newest version that still has it; 2026-07-28 is reached
        // through `server/discover` instead.
        ClientConfig::new(
            capabilities,
            Implementation::new("mcpgate", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools_changed.notify_one();
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.watches.updated(&params.uri);
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.progress(params, context.extensions.get()).await;
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        context: NotificationContext<RoleClient>,
    ) {
        self.logged(params, context.extensions.get()).await;
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let route = self.route(&context, "sampling/createMessage")?;
        relay::ask(&route, route.relay.create_message(params)).await
    }

    async fn create_elicitation(
        &self,
        params: ElicitRequestParams,
        context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let route = self.route(&context, "elicitation/create")?;
        relay::ask(&route, route.relay.elicit(params)).await
    }
}

impl UpstreamClient {
    /// A notification the server sent on a call's own stream (see [`HttpLink`]), handled as
    /// rmcp hands it to this handler.
    pub(super) async fn notified(&self, notification: ServerNotification) {
        match notification {
            ServerNotification::ProgressNotification(n) => self.progress(n.params, None).await,
            ServerNotification::LoggingMessageNotification(n) => {
                self.logged(n.params, None).await;
            }
            ServerNotification::ToolListChangedNotification(_) => self.tools_changed.notify_one(),
            ServerNotification::ResourceUpdatedNotification(n) => {
                self.watches.updated(&n.params.uri);
            }
            _ => {}
        }
    }

    async fn progress(&self, params: ProgressNotificationParam, announced: Option<&Announced>) {
        if let Some(route) = self.relays.by_token_when_sent(&params.progress_token).await {
            relay::notify(&route, announced, |relay| relay.progress(params)).await;
        }
    }

    async fn logged(&self, params: LoggingMessageNotificationParam, announced: Option<&Announced>) {
        match self.relays.for_log() {
            Some(route) => relay::notify(&route, announced, |relay| relay.log(params)).await,
            None => relay::log_locally(&params),
        }
    }

    /// The call a request from the server belongs to: the one whose stream it came on
    /// (Streamable HTTP says), else the only one running; none is an error for the server.
    fn route(
        &self,
        context: &RequestContext<RoleClient>,
        method: &str,
    ) -> Result<relay::Routed, ErrorData> {
        let origin = match context.extensions.get::<InboundStreamOrigin>() {
            Some(InboundStreamOrigin::OutboundRequest(id)) => self.relays.by_request(id),
            _ => None,
        };
        origin
            .or_else(|| self.relays.sole(true))
            .ok_or_else(|| relay::unroutable(method))
    }
}

/// A live connection: the rmcp service, and for stdio the child process behind it.
pub struct Connection {
    pub service: RunningService<RoleClient, UpstreamClient>,
    pub child: Option<ChildGuard>,
    /// Which transport was used (`stdio`, `streamable-http`, `sse`).
    pub transport: &'static str,
    /// For stdio: why the stream was cut off, if it was.
    pub framing: Option<FramingError>,
    /// For a line connection (stdio, in-process) or a Streamable HTTP one at 2026-07-28:
    /// its shared side, for tool calls sent without rmcp's service loop.
    pub(crate) link: Option<CallLink>,
    /// For an `auth = "oauth"` server: where a refusal of the token is noted.
    pub(crate) refusals: Option<super::oauth::RefusalNote>,
}

/// What connecting needs besides the server's own config.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub env: Env,
    pub limits: Limits,
    pub supervisor: Option<PathBuf>,
    /// Tokens to list `auth = "oauth"` servers with; `None` without such servers.
    pub listing_tokens: Option<super::oauth::ListingTokensHandle>,
}

/// Connects `server`, bounded by its connect deadline. `tools_changed` is notified whenever
/// the server says its tool list changed; `relays` routes what the server sends during a
/// call to that call's caller; `watches` routes resource updates to their watchers.
pub async fn connect(
    server: &ServerConfig,
    options: &ConnectOptions,
    tools_changed: Arc<Notify>,
    relays: Arc<RelayRegistry>,
    watches: Arc<WatchRegistry>,
) -> Result<Connection, UpstreamError> {
    let client = UpstreamClient {
        tools_changed: tools_changed.clone(),
        relays,
        watches,
        lifecycle: Lifecycle::Auto,
    };
    let connection = negotiate(server, options, client).await?;
    listen_for_changes(&connection.service, tools_changed).await;
    Ok(connection)
}

/// Connects with `client`, discovering the server's newest revision (`server/discover`,
/// 2026-07-28) and falling back to `initialize`, bounded by the connect deadline.
async fn negotiate(
    server: &ServerConfig,
    options: &ConnectOptions,
    client: UpstreamClient,
) -> Result<Connection, UpstreamError> {
    let deadline = connect_deadline(server, options);
    let attempts = async {
        let with = |lifecycle| UpstreamClient {
            lifecycle,
            ..client.clone()
        };
        match connect_once(server, options, with(Lifecycle::Auto)).await {
            // Some servers answer the `server/discover` probe with a bogus success (`{}`)
            // instead of an error; rmcp then gives up rather than falling back. Try again
            // with `initialize` alone.
            Err(UpstreamError::Handshake(reason)) => {
                tracing::debug!(server = %server.id, %reason, "discovery failed; retrying with initialize");
                connect_once(server, options, with(Lifecycle::Initialize)).await
            }
            other => other,
        }
    };
    tokio::time::timeout(deadline, attempts)
        .await
        .map_err(|_| UpstreamError::ConnectTimeout { after: deadline })?
}

/// A user's own session on an `auth = "oauth"` server, opened with their token: the
/// revision negotiated as the shared session's is (a 2026-07-28 server is spoken to on
/// 2026-07-28), nothing of tool-list changes or resource updates followed on it.
pub(super) async fn connect_user_session(
    server: &ServerConfig,
    options: &ConnectOptions,
    relays: Arc<RelayRegistry>,
    watches: Arc<WatchRegistry>,
) -> Result<Connection, UpstreamError> {
    let client = UpstreamClient {
        tools_changed: Arc::new(Notify::new()),
        relays,
        watches,
        lifecycle: Lifecycle::Auto,
    };
    negotiate(server, options, client).await
}

/// Opens another session with a server already connected on a revision that has
/// `initialize` (a caller's own upstream session): straight to `initialize`, no discovery
/// probe, bounded by the connect deadline. Nothing of the server's tool-list changes or
/// resource updates is followed on it (the shared session does that).
pub(super) async fn connect_session(
    server: &ServerConfig,
    options: &ConnectOptions,
    relays: Arc<RelayRegistry>,
    watches: Arc<WatchRegistry>,
) -> Result<Connection, UpstreamError> {
    let deadline = connect_deadline(server, options);
    let client = UpstreamClient {
        tools_changed: Arc::new(Notify::new()),
        relays,
        watches,
        lifecycle: Lifecycle::Initialize,
    };
    tokio::time::timeout(deadline, connect_once(server, options, client))
        .await
        .map_err(|_| UpstreamError::ConnectTimeout { after: deadline })?
}

/// How long connecting `server` may take: its own `connect_timeout`, else `[limits]`'.
fn connect_deadline(server: &ServerConfig, options: &ConnectOptions) -> Duration {
    server
        .connect_timeout
        .unwrap_or(options.limits.connect_timeout)
}

/// How to open the MCP session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lifecycle {
    /// `server/discover` (2026-07-28), falling back to `initialize` when the server says it
    /// does not know the method.
    Auto,
    /// `initialize` only.
    Initialize,
}

async fn connect_once(
    server: &ServerConfig,
    options: &ConnectOptions,
    client: UpstreamClient,
) -> Result<Connection, UpstreamError> {
    match &server.transport {
        TransportConfig::Stdio(config) => {
            let launch = StdioLaunch {
                server: server.id.clone(),
                config: config.clone(),
                supervisor: options.supervisor.clone(),
                max_line_bytes: options.limits.max_line_bytes,
                max_stderr_line_bytes: options.limits.max_stderr_line_bytes,
            };
            connect_stdio(&launch, &options.env, client).await
        }
        TransportConfig::Http(http) => connect_http(server, http, options, client).await,
        TransportConfig::InProcess(factory) => {
            let (read, write) = tokio::io::split((factory.0)());
            let transport = LineTransport::new(read, write, options.limits.max_line_bytes)
                .announcing(client.relays.clone());
            let link = transport.link();
            let service = serve(client, transport).await?;
            Ok(Connection {
                service,
                child: None,
                transport: "in-process",
                framing: None,
                link: Some(CallLink::Line(link)),
                refusals: None,
            })
        }
    }
}

async fn connect_stdio(
    launch: &StdioLaunch,
    env: &Env,
    client: UpstreamClient,
) -> Result<Connection, UpstreamError> {
    let (stdout, stdin, child, framing) =
        stdio::spawn(launch, env).map_err(|e| UpstreamError::Connect(e.to_string()))?;
    // The transport's own bound sits just above ours so that ours, which fails the
    // connection with a clear reason, is the one that fires.
    let transport = LineTransport::new(stdout, stdin, launch.max_line_bytes.saturating_add(1))
        .announcing(client.relays.clone());
    let link = transport.link();
    match serve(client, transport).await {
        Ok(service) => Ok(Connection {
            service,
            child: Some(child),
            transport: "stdio",
            framing: Some(framing),
            link: Some(CallLink::Line(link)),
            refusals: None,
        }),
        Err(err) => match child.shutdown().await {
            // The process ending is the cause worth telling (a sandbox it could not enter, a
            // limit it hit before it answered).
            Some(how) if framing.get().is_none() => {
                Err(UpstreamError::Connect(format!("the server exited: {how}")))
            }
            _ => Err(framing_or(&framing, err)),
        },
    }
}

fn framing_or(framing: &FramingError, err: UpstreamError) -> UpstreamError {
    match framing.get() {
        Some(reason) => UpstreamError::Framing(reason),
        None => err,
    }
}

async fn connect_http(
    server: &ServerConfig,
    http: &HttpConfig,
    options: &ConnectOptions,
    client: UpstreamClient,
) -> Result<Connection, UpstreamError> {
    let policy = NetPolicy {
        allow_http: server.allow_http,
        allow_private: server.allow_private,
        allow_loopback: server.allow_loopback,
        allowed_hosts: server.allowed_hosts.clone(),
        connect_timeout: server
            .connect_timeout
            .unwrap_or(options.limits.connect_timeout),
        ..NetPolicy::default()
    };
    net::check_url(&http.url, &policy).map_err(|e| UpstreamError::Connect(e.to_string()))?;
    let reqwest = net::client(&policy).map_err(|e| UpstreamError::Connect(e.to_string()))?;
    let clients = HttpClients {
        plain: PlainClient::new(&policy, Arc::new(SystemLookup)),
        reqwest,
    };
    let headers = resolve_headers(http, &options.env)?;
    // A user's token may be refused (revoked, or short of a scope): noted for the call.
    let note = server
        .oauth
        .is_some()
        .then(super::oauth::RefusalNote::default);
    match http.kind {
        HttpKind::Streamable => connect_streamable(clients, http, headers, client, note).await,
        HttpKind::Sse => connect_sse(clients.reqwest, http, headers, options, client).await,
        HttpKind::Auto => {
            let reqwest = clients.reqwest.clone();
            match connect_streamable(clients, http, headers.clone(), client.clone(), note).await {
                Ok(connection) => Ok(connection),
                Err(streamable) => {
                    tracing::info!(server = %server.id, error = %streamable,
                        "Streamable HTTP failed; trying legacy SSE");
                    connect_sse(reqwest, http, headers, options, client)
                        .await
                        .map_err(|sse| UpstreamError::Connect(format!(
                            "neither transport worked: Streamable HTTP: {streamable}; SSE: {sse}"
                        )))
                }
            }
        }
    }
}

type Headers = Vec<(http::HeaderName, http::HeaderValue)>;

fn resolve_headers(http: &HttpConfig, env: &Env) -> Result<Headers, UpstreamError> {
    http.headers
        .iter()
        .map(|(name, template)| {
            let bad = |reason: String| UpstreamError::Connect(format!("header `{name}`: {reason}"));
            let value = template.resolve(env).map_err(bad)?;
            let name = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| bad("not a valid header name".to_owned()))?;
            let mut value = http::HeaderValue::from_str(value.expose())
                .map_err(|_| bad("value is not a valid header value".to_owned()))?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// POSTs in flight on one Streamable HTTP connection. The gate bounds calls per server
/// (`server_concurrency`); rmcp's own default (16) would queue calls the gate admitted, and
/// under load most of a call's time went to that queue.
const MAX_POSTS_IN_FLIGHT: usize = 1024;

/// The clients of one HTTP upstream, built from its policy: reqwest for everything, and
/// hyper alone for tool calls to a plain `http` endpoint (`HttpLink`).
struct HttpClients {
    reqwest: reqwest::Client,
    plain: Option<PlainClient>,
}

async fn connect_streamable(
    clients: HttpClients,
    http: &HttpConfig,
    headers: Headers,
    client: UpstreamClient,
    note: Option<super::oauth::RefusalNote>,
) -> Result<Connection, UpstreamError> {
    let mut config = StreamableHttpClientTransportConfig::with_uri(http.url.as_str());
    config.custom_headers = headers.into_iter().collect::<HashMap<_, _>>();
    config.max_concurrent_requests = MAX_POSTS_IN_FLIGHT;
    let uri: Arc<str> = http.url.as_str().into();
    let link_headers = config.custom_headers.clone();
    let HttpClients { reqwest, plain } = clients;
    // Every connection through `Noting`: it answers what rmcp would drop (see
    // `oauth::correlated`), and notes refusals of a user's token where there is one.
    let noting = super::oauth::Noting {
        inner: reqwest.clone(),
        note: note.clone(),
    };
    let transport = Announcing::new(
        StreamableHttpClientTransport::with_client(noting, config),
        client.relays.clone(),
    );
    let service = serve(client.clone(), transport).await?;
    let link = service.peer().peer_info().and_then(|info| {
        HttpLink::new(HttpLinkParts {
            client: reqwest,
            plain,
            uri,
            headers: link_headers,
            protocol: info.protocol_version.clone(),
            handler: client,
            refusals: note.clone(),
        })
    });
    Ok(Connection {
        service,
        child: None,
        transport: "streamable-http",
        framing: None,
        link: link.map(CallLink::Http),
        refusals: note,
    })
}

/// How long a legacy SSE server gets to send its `endpoint` event.
const SSE_ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

async fn connect_sse(
    reqwest: reqwest::Client,
    http: &HttpConfig,
    headers: Headers,
    options: &ConnectOptions,
    client: UpstreamClient,
) -> Result<Connection, UpstreamError> {
    let config = SseClientConfig {
        url: http.url.clone(),
        headers,
        endpoint_timeout: SSE_ENDPOINT_TIMEOUT.min(options.limits.connect_timeout),
        max_event_bytes: options.limits.max_line_bytes,
    };
    let transport = sse::connect(reqwest, config)
        .await
        .map_err(|e| UpstreamError::Connect(e.to_string()))?
        .announcing(client.relays.clone());
    // Legacy SSE servers speak 2024-11-05 only: no discovery probe.
    let service = client
        .serve(transport)
        .await
        .map_err(|e| UpstreamError::Connect(e.to_string()))?;
    Ok(Connection {
        service,
        child: None,
        transport: "sse",
        framing: None,
        link: None,
        refusals: None,
    })
}

/// Starts the rmcp client: `server/discover` first (2026-07-28), `initialize` as fallback.
async fn serve<T, E, A>(
    client: UpstreamClient,
    transport: T,
) -> Result<RunningService<RoleClient, UpstreamClient>, UpstreamError>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let lifecycle = match client.lifecycle {
        Lifecycle::Auto => ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: None,
        },
        Lifecycle::Initialize => ClientLifecycleMode::Initialize,
    };
    let auto = client.lifecycle == Lifecycle::Auto;
    client
        .serve_with_lifecycle(transport, lifecycle)
        .await
        .map_err(|e| match e {
            // A server that knows `server/discover` but speaks only older revisions still
            // speaks them through `initialize`.
            ClientInitializeError::ExpectedInitResult(_)
            | ClientInitializeError::ExpectedInitResponse(_)
            | ClientInitializeError::NoCompatibleProtocolVersion { .. }
                if auto =>
            {
                UpstreamError::Handshake(e.to_string())
            }
            e => UpstreamError::Connect(e.to_string()),
        })
}

/// On the 2026-07-28 protocol list changes arrive only on a `subscriptions/listen` stream;
/// older sessions deliver them to [`UpstreamClient::on_tool_list_changed`].
async fn listen_for_changes(
    service: &RunningService<RoleClient, UpstreamClient>,
    tools_changed: Arc<Notify>,
) {
    let Some(info) = service.peer_info() else {
        return;
    };
    let modern = info.protocol_version == ProtocolVersion::V_2026_07_28;
    let wants = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|t| t.list_changed)
        .unwrap_or(false);
    if !(modern && wants) {
        return;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    match service.peer().listen(filter).await {
        Ok(mut subscription) => {
            tokio::spawn(async move {
                while let Ok(Some(_)) = subscription.next().await {
                    tools_changed.notify_one();
                }
            });
        }
        Err(err) => tracing::warn!(error = %err, "cannot subscribe to tool list changes"),
    }
}
