//! The HTTP service behind `mcpgate serve`: authentication, the REST API, health and the error
//! mapping. `app(state)` is the whole router (testable without sockets); `serve` runs it on a
//! listener until a shutdown future resolves, and `serve_on` does so on [lanes](crate::lane).

mod apps;
pub mod auth;
pub mod chat;
mod connect;
mod errors;
mod guard;
pub mod idempotent;
pub mod markdown;
pub mod mcp;
mod me;
pub mod metrics;
mod oauth;
pub mod openapi;
pub mod reload;
pub mod rest;
pub mod sandbox;
pub mod ui;
pub mod usage;
pub mod webmcp;

use std::{
    future::Future,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, Request, State},
    http::{HeaderName, HeaderValue, StatusCode},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    routing::get,
};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower_layer::Layer;

pub use errors::ApiError;

use crate::{
    config::ServiceConfig,
    gateway::{Gateway, ServerState},
    lane::Lanes,
};
use auth::Authenticator;
use metrics::Metrics;
use reload::{LiveGateway, ReloadSource};

/// Response header: milliseconds spent in the gateway, excluding the upstream.
pub const OVERHEAD_HEADER: &str = "x-mcpgate-overhead-ms";
/// Request and response header correlating a request with logs and audit.
pub const REQUEST_ID_HEADER: &str = "x-request-id";
/// Longest client-supplied request id kept (anything else is replaced).
const MAX_REQUEST_ID: usize = 64;

/// What every handler shares, behind one `Arc`: axum clones the state several times per
/// request (each middleware and the handler take their own), and every clone and drop of a
/// shared count is a cache line passed between cores; one count instead of one per part.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

/// The parts of [`AppState`] (its `Deref` target).
#[derive(Clone)]
pub struct Shared {
    /// The gateway in service; a reload replaces it, so take [`LiveGateway::current`] once
    /// per request (or per call) and hold it until done, never for a session's life.
    pub gateway: Arc<LiveGateway>,
    pub auth: Arc<Authenticator>,
    pub service: Arc<ServiceConfig>,
    /// Cancelled when the service stops: closes MCP sessions and their open streams, which
    /// would otherwise hold graceful shutdown.
    pub shutdown: Arc<CancellationToken>,
    pub metrics: Arc<Metrics>,
    /// Where a reload reads the configuration again; `None`: reloading is unavailable.
    pub reload: Option<Arc<ReloadSource>>,
    /// Where the MCP Apps sandbox is served; `None`: the page renders no apps.
    pub sandbox: Option<sandbox::Sandbox>,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(
        gateway: Gateway,
        auth: Arc<Authenticator>,
        service: Arc<ServiceConfig>,
    ) -> AppState {
        AppState(Arc::new(Shared {
            gateway: Arc::new(LiveGateway::new(gateway)),
            auth,
            service,
            shutdown: Arc::new(CancellationToken::new()),
            metrics: Arc::new(Metrics::default()),
            reload: None,
            sandbox: None,
        }))
    }

    /// The page renders MCP Apps through the sandbox served as `sandbox` says.
    pub fn with_sandbox(self, sandbox: sandbox::Sandbox) -> AppState {
        self.with(|shared| shared.sandbox = Some(sandbox))
    }

    /// Enables `POST /api/v1/admin/reload` (and SIGHUP in `mcpgate serve`).
    pub fn with_reload(self, source: ReloadSource) -> AppState {
        self.with(|shared| shared.reload = Some(Arc::new(source)))
    }

    /// Stops with `shutdown` instead of a token of its own: cancelling it closes the MCP
    /// sessions and their streams.
    pub fn with_shutdown(self, shutdown: CancellationToken) -> AppState {
        self.with(|shared| shared.shutdown = Arc::new(shutdown))
    }

    /// The state with `change` made to its parts (before the state is shared).
    fn with(self, change: impl FnOnce(&mut Shared)) -> AppState {
        let mut shared = Arc::unwrap_or_clone(self.0);
        change(&mut shared);
        AppState(Arc::new(shared))
    }
}

/// Time a request spent waiting for upstreams, subtracted from its overhead.
#[derive(Debug, Clone, Default)]
pub struct Overhead(Arc<AtomicU64>);

impl Overhead {
    pub fn exclude(&self, spent: Duration) {
        let micros = u64::try_from(spent.as_micros()).unwrap_or(u64::MAX);
        self.0.fetch_add(micros, Ordering::Relaxed);
    }

    fn excluded(&self) -> Duration {
        Duration::from_micros(self.0.load(Ordering::Relaxed))
    }
}

/// The whole service as a router (for tests and embedding; `serve` runs [`service`]).
pub fn app(state: AppState) -> Router {
    Router::new().fallback_service(service(state))
}

/// The whole service: the request context (with the host and origin guard) and the body
/// limit around the routes. They wrap the routes once, around routing, rather than each route:
/// `Router::layer` wraps every route in every layer, and a request then clones and drops that
/// whole nested stack of boxed services.
fn service(
    state: AppState,
) -> impl tower_service::Service<
    Request,
    Response = Response,
    Error = std::convert::Infallible,
    Future: Send + 'static,
> + Clone
+ Send
+ Sync
+ 'static {
    let api = rest::routes()
        .merge(connect::routes())
        .merge(reload::routes())
        .merge(chat::routes())
        .merge(webmcp::routes())
        .merge(apps::routes())
        .merge(me::routes())
        .layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let metrics =
        metrics::routes().route_layer(middleware::from_fn_with_state(state.clone(), authenticate));
    let routes = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/api/v1/openapi.json", get(openapi::serve))
        .merge(metrics)
        .nest("/api/v1", api)
        .merge(mcp::mcp_router(state.clone(), (*state.shutdown).clone()))
        .merge(ui::routes())
        .merge(webmcp::public_routes())
        .merge(oauth::routes())
        .merge(connect::callback_routes())
        .with_state(state.clone());
    let around = middleware::from_fn_with_state(state.clone(), request_context).layer(routes);
    DefaultBodyLimit::max(state.service.max_body_bytes).layer(around)
}

/// Serves `app(state)` on `listener`, on the calling runtime, until `shutdown` resolves;
/// then lets in-flight requests finish for at most the configured grace.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let service = service(state.clone());
    let stop = CancellationToken::new();
    let timeout = state.service.header_read_timeout;
    let server = tokio::spawn(serve_one(listener, service, stop.clone(), timeout));
    until_stopped(&state, vec![server], stop, shutdown).await
}

/// Serves `app(state)` as [`serve`] does, on every lane of `lanes`, with the one service (one
/// state, one set of MCP sessions) they all share. The connections `listener` accepts are
/// dealt to the lanes in turn, and each lane answers every request of its connections.
pub async fn serve_on(
    lanes: &Lanes,
    listener: std::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let lanes: Vec<_> = lanes.handles().cloned().collect();
    let all = (0..lanes.len()).collect();
    serve_lanes(&lanes, vec![(listener, all)], state, shutdown).await
}

/// Serves on `lanes`, as [`serve_on`]: each listener's connections go to the lanes its
/// list names (by index), in turn.
async fn serve_lanes(
    lanes: &[tokio::runtime::Handle],
    listeners: Vec<(std::net::TcpListener, Vec<usize>)>,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let service = service(state.clone());
    let timeout = state.service.header_read_timeout;
    let stop = CancellationToken::new();
    // What started stops if anything later cannot.
    let stop_started = stop.clone().drop_guard();
    let local = listeners
        .first()
        .map(|(listener, _)| listener.local_addr())
        .transpose()?;
    let mut dealt = Vec::with_capacity(lanes.len());
    let mut servers = Vec::with_capacity(lanes.len());
    for lane in lanes {
        let (deal, connections) = tokio::sync::mpsc::channel(DEALT_BACKLOG);
        dealt.push(deal);
        let listener = Dealt { connections, local };
        let (service, stop) = (service.clone(), stop.clone());
        servers.push(lane.spawn(serve_one(listener, service, stop, timeout)));
    }
    for (listener, to) in listeners {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let to = to.iter().map(|&lane| dealt[lane].clone()).collect();
        tokio::spawn(deal(listener, to, stop.clone()));
    }
    stop_started.disarm();
    until_stopped(&state, servers, stop, shutdown).await
}

/// Connections accepted but not yet taken up by their lane (a lane takes them up at once
/// unless it is stalled; the listen queue holds the rest).
const DEALT_BACKLOG: usize = 128;

/// Accepts connections on `listener` until `stop`, handing each to the next of `lanes` in
/// turn: even counts of connections, which the kernel does not promise when several threads
/// accept on one socket (one quick to accept again can take nearly all).
async fn deal(
    mut listener: TcpListener,
    lanes: Vec<tokio::sync::mpsc::Sender<(std::net::TcpStream, SocketAddr)>>,
    stop: CancellationToken,
) {
    let mut next = 0;
    loop {
        let (stream, peer) = tokio::select! {
            // Accept errors are handled there (logged; a pause when out of descriptors).
            accepted = axum::serve::Listener::accept(&mut listener) => accepted,
            () = stop.cancelled() => return,
        };
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "an accepted connection could not be handed on");
                continue;
            }
        };
        let Some(lane) = lanes.get(next) else {
            // No lane to take it: there were none to deal to.
            return;
        };
        next = (next + 1) % lanes.len();
        if lane.send((stream, peer)).await.is_err() {
            // The lane stopped serving: so did every lane.
            return;
        }
    }
}

/// A lane's side of [`deal`]: the connections dealt to it, registered with the lane's own
/// runtime as it takes them up.
struct Dealt {
    connections: tokio::sync::mpsc::Receiver<(std::net::TcpStream, SocketAddr)>,
    /// Where they were accepted.
    local: Option<SocketAddr>,
}

impl axum::serve::Listener for Dealt {
    type Io = tokio::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Some((stream, peer)) = self.connections.recv().await else {
                // No more will come; serving ends with the shutdown.
                return std::future::pending().await;
            };
            match tokio::net::TcpStream::from_std(stream) {
                Ok(stream) => return (stream, peer),
                Err(error) => tracing::debug!(%error, "a dealt connection could not be taken up"),
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.local
            .ok_or_else(|| std::io::Error::other("this lane serves no listener"))
    }
}

/// Serves `service` on `listener` until `stop` is cancelled and its connections are done.
///
/// hyper serves each connection (HTTP/1.1, upgrades for the WebMCP bridge's WebSockets) with
/// a timer, so that its header read timeout applies: `axum::serve` gives it none, and a
/// client sending its headers a byte at a time would hold a connection for ever.
async fn serve_one<L, S>(
    mut listener: L,
    service: S,
    stop: CancellationToken,
    header_read_timeout: Duration,
) -> std::io::Result<()>
where
    L: axum::serve::Listener<Io = tokio::net::TcpStream>,
    S: tower_service::Service<
            Request,
            Response = Response,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static,
{
    let connections = tokio_util::task::TaskTracker::new();
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => accepted,
            () = stop.cancelled() => break,
        };
        // No Nagle delay: a response written in parts (headers, then an SSE event) would
        // otherwise wait for the client's delayed ACK, about 40 ms on Linux.
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%error, "cannot set TCP_NODELAY");
        }
        let service = service.clone();
        let hyper_service =
            hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                tower_service::Service::call(
                    &mut service.clone(),
                    request.map(axum::body::Body::new),
                )
            });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(header_read_timeout);
        let connection = builder
            .serve_connection(hyper_util::rt::TokioIo::new(stream), hyper_service)
            .with_upgrades();
        let stop = stop.clone();
        connections.spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                ended = connection.as_mut() => ended,
                () = stop.cancelled() => {
                    // The request in flight is answered; the connection then closes.
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = ended {
                tracing::debug!(%error, "a connection ended in error");
            }
        });
    }
    drop(listener);
    connections.close();
    connections.wait().await;
    Ok(())
}

/// Waits for `servers` until `shutdown` resolves; then closes the MCP sessions (whose open
/// streams would hold the servers), stops the servers and gives their in-flight requests
/// the configured grace. Any server failing stops the others.
async fn until_stopped(
    state: &AppState,
    servers: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
    stop: CancellationToken,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let _stop = stop.clone().drop_guard();
    let aborts: Vec<_> = servers.iter().map(|server| server.abort_handle()).collect();
    let servers = futures::future::try_join_all(
        servers
            .into_iter()
            .map(|server| async { server.await.map_err(std::io::Error::other)? }),
    );
    tokio::pin!(servers);
    tokio::select! {
        result = &mut servers => return result.map(drop),
        () = shutdown => {}
    }
    state.shutdown.cancel();
    stop.cancel();
    let grace = state.service.shutdown_grace;
    match tokio::time::timeout(grace, servers).await {
        Ok(result) => result.map(drop),
        Err(_) => {
            tracing::warn!("in-flight requests did not finish within {grace:?}; stopping anyway");
            aborts.iter().for_each(tokio::task::AbortHandle::abort);
            Ok(())
        }
    }
}

/// Request id, the host and origin guard, per-request deadline and the overhead header,
/// around everything.
async fn request_context(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let request_id = request
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|id| {
            !id.is_empty()
                && id.len() <= MAX_REQUEST_ID
                && id
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
        .map(str::to_owned)
        .unwrap_or_else(crate::policy::new_request_id);
    let overhead = Overhead::default();
    request
        .extensions_mut()
        .insert(RequestId(request_id.clone()));
    request.extensions_mut().insert(overhead.clone());
    let response = match guard::refusal(&state, &request) {
        Some(refusal) => refusal,
        None => {
            match tokio::time::timeout(state.service.request_timeout, next.run(request)).await {
                Ok(response) => response,
                Err(_) => ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "timeout",
                    "the request did not finish in time",
                )
                .into_response(),
            }
        }
    };
    let mut response = errors::typed_refusal(response).await;
    let spent = started.elapsed().saturating_sub(overhead.excluded());
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&millis(spent)) {
        headers.insert(HeaderName::from_static(OVERHEAD_HEADER), value);
    }
    if let Ok(value) = HeaderValue::from_str(&request_id) {
        headers.insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    response
}

/// `spent` in milliseconds with three decimals (to the nearest microsecond), written with
/// integers: formatting a float to a precision costs several times as much.
fn millis(spent: Duration) -> String {
    let micros = spent.as_nanos().saturating_add(500) / 1000;
    format!("{}.{:03}", micros / 1000, micros % 1000)
}

/// The request's id, for handlers and logs.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Authenticates the caller and hands the call context to the handlers.
async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .map(|r| r.0.clone())
        .unwrap_or_else(crate::policy::new_request_id);
    match state
        .auth
        .authenticate(request.headers(), request.uri(), &request_id)
    {
        Ok(ctx) => {
            // Shared: each handler's extractor clones what it takes from the extensions.
            request.extensions_mut().insert(Arc::new(ctx));
            next.run(request).await
        }
        Err(failure) => {
            let mut response = ApiError::new(
                failure.status(),
                failure.code().as_str(),
                failure.to_string(),
            )
            .into_response();
            if let Ok(value) = HeaderValue::from_str(&state.auth.challenge(&failure)) {
                response
                    .headers_mut()
                    .insert(axum::http::header::WWW_AUTHENTICATE, value);
            }
            response
        }
    }
}

async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "ok": true }))
}

/// Ready when the configuration is loaded and the stores answer; per-server states are shown
/// (a degraded upstream does not make the gateway unready: its other servers still work).
async fn readyz(State(state): State<AppState>) -> Response {
    let gateway = state.gateway.current();
    let store_ok = gateway
        .audit_store()
        .query(crate::store::AuditQuery {
            limit: 1,
            ..Default::default()
        })
        .await
        .is_ok();
    let servers: Vec<_> = gateway
        .servers()
        .iter()
        .map(|s| {
            let mut server = json!({ "id": s.id.as_str(), "state": s.state.as_str() });
            // How much of a sandbox the kernel enforces (`full`, `partial`, `none`), so a
            // kernel without Landlock shows here and not only in the log.
            if let Some(landlock) = s.sandbox.as_ref().and_then(|e| e.get("landlock")) {
                server["landlock"] = landlock.clone();
            }
            server
        })
        .collect();
    let settled = gateway
        .servers()
        .iter()
        .all(|s| s.state != ServerState::Connecting);
    // Each shared store by name, so an operator sees which one is down.
    let shared = gateway.shared_health().await;
    let shared_ok = shared.iter().all(|s| s.up);
    let shared: serde_json::Map<String, serde_json::Value> = shared
        .iter()
        .map(|s| (s.name.to_owned(), json!(if s.up { "up" } else { "down" })))
        .collect();
    let ready = store_ok && shared_ok && settled;
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({ "ok": ready, "stores": store_ok && shared_ok, "servers": servers });
    if !shared.is_empty() {
        body["shared"] = serde_json::Value::Object(shared);
    }
    (status, Json(body)).into_response()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::{TcpListener, TcpStream};
    use tokio_util::sync::CancellationToken;

    #[tokio::test]
    async fn connections_are_dealt_to_the_lanes_in_turn() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let (first, mut to_first) = tokio::sync::mpsc::channel(8);
        let (second, mut to_second) = tokio::sync::mpsc::channel(8);
        let stop = CancellationToken::new();
        let dealer = tokio::spawn(super::deal(listener, vec![first, second], stop.clone()));
        let mut clients = Vec::new();
        for _ in 0..4 {
            clients.push(TcpStream::connect(addr).await.expect("connect"));
        }
        let wait = Duration::from_secs(10);
        let mut dealt = Vec::new();
        for _ in 0..2 {
            for lane in [&mut to_first, &mut to_second] {
                let (stream, peer) = tokio::time::timeout(wait, lane.recv())
                    .await
                    .expect("dealt in time")
                    .expect("a connection");
                assert_eq!(stream.peer_addr().expect("peer"), peer);
                dealt.push(peer);
            }
        }
        let made: Vec<_> = clients
            .iter()
            .map(|c| c.local_addr().expect("address"))
            .collect();
        assert_eq!(dealt, made, "in the order accepted, alternating");
        stop.cancel();
        tokio::time::timeout(wait, dealer)
            .await
            .expect("the dealer stops")
            .expect("and does not panic");
    }

    #[test]
    fn overhead_is_written_in_milliseconds_to_the_microsecond() {
        for (spent, text) in [
            (Duration::ZERO, "0.000"),
            (Duration::from_nanos(499), "0.000"),
            (Duration::from_nanos(500), "0.001"),
            (Duration::from_micros(1_234), "1.234"),
            (Duration::from_nanos(1_234_567), "1.235"),
            (Duration::from_micros(999_999), "999.999"),
            (Duration::from_secs(12), "12000.000"),
        ] {
            assert_eq!(super::millis(spent), text, "{spent:?}");
        }
    }
}
