//! The WebMCP bridge's HTTP side: the page's WebSocket (`/api/v1/webmcp/bridge/{clientId}`),
//! the invoke API other sites call (`POST /api/v1/webmcp/invoke`) and the page's module
//! (`/webmcp.js`). What a page registers is kept in [`crate::webmcp::Pages`]; every call of
//! its tools goes through the gateway's one gate.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{
        Path, State,
        ws::{
            CloseFrame, Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
        },
    },
    http::{HeaderMap, HeaderValue, StatusCode, Uri, header},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{AppState, errors::ApiError};
use crate::{
    gateway::GatewayError,
    policy::CallContext,
    webmcp::{
        Outgoing, Page, PageError, PageOwner, Pages,
        protocol::{self, FromPage, SUBPROTOCOL, TOKEN_SUBPROTOCOL_PREFIX},
    },
};

/// Where pages connect (the client id follows).
pub const BRIDGE_PREFIX: &str = "/api/v1/webmcp/bridge/";

/// Most bytes one WebSocket message may have at all: a message over `max_frame_bytes` but
/// under this is read and refused with a typed error, the connection kept; one over this
/// closes the connection (it is not buffered).
const HARD_MESSAGE_LIMIT: usize = 16 * 1024 * 1024;

/// Why a client id is refused.
const INVALID_CLIENT_ID: &str = "a client id is 1 to 64 of A-Z, a-z, 0-9, `_`, `.`, `-`, and not \
     a name [webmcp.names] gives another client id";

/// The page's module, served as is.
const MODULE: &[u8] = include_bytes!("webmcp/webmcp.js");

/// Routes served without the API's authentication: the bridge authenticates the upgrade
/// itself (a browser cannot send an `Authorization` header on a WebSocket), and the module
/// holds no data.
pub fn public_routes() -> Router<AppState> {
    Router::new()
        .route("/api/v1/webmcp/bridge/{client_id}", get(bridge))
        .route("/webmcp.js", get(module))
}

/// Routes under `/api/v1`, behind its authentication.
pub fn routes() -> Router<AppState> {
    Router::new().route("/webmcp/invoke", post(invoke))
}

async fn module(headers: HeaderMap) -> Response {
    static ETAG: std::sync::LazyLock<String> =
        std::sync::LazyLock::new(|| super::ui::etag_of(MODULE));
    let mut response = super::ui::cached(MODULE, "text/javascript; charset=utf-8", &ETAG, &headers);
    // Imported by pages of the allowed origins, from their own origin.
    response.headers_mut().insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    response
}

fn refused(status: StatusCode, code: &'static str, message: &str) -> Response {
    ApiError::new(status, code, message).into_response()
}

/// The upgrade: the bridge on, an allowed `Origin`, a valid client id, the page's token
/// (in the `mcpgate.bearer.<token>` subprotocol, or an `Authorization` header from a
/// program) accepted by the same rules as the API's, and a known tenant.
async fn bridge(
    State(state): State<AppState>,
    Path(client_id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
    Extension(request_id): Extension<super::RequestId>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let gateway = state.gateway.current();
    let pages = gateway.pages().clone();
    let config = pages.config();
    if !config.enabled() {
        return refused(
            StatusCode::FORBIDDEN,
            "webmcp_disabled",
            "the WebMCP bridge is off: list the pages' origins in [webmcp] allowed_origins",
        );
    }
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .and_then(|o| url::Url::parse(o).ok())
        .map(|o| o.origin().ascii_serialization());
    if !origin.is_some_and(|o| config.allowed_origins.contains(&o)) {
        return refused(
            StatusCode::FORBIDDEN,
            "origin_not_allowed",
            "pages from this Origin may not connect (see [webmcp] allowed_origins)",
        );
    }
    if pages.server_for(&client_id).is_none() {
        return refused(
            StatusCode::BAD_REQUEST,
            "invalid_client_id",
            INVALID_CLIENT_ID,
        );
    }
    let offered: Vec<&str> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let mut credentials = HeaderMap::new();
    if let Some(value) = headers.get(header::AUTHORIZATION) {
        credentials.insert(header::AUTHORIZATION, value.clone());
    } else if let Some(token) = offered
        .iter()
        .find_map(|p| p.strip_prefix(TOKEN_SUBPROTOCOL_PREFIX))
        && let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}"))
    {
        credentials.insert(header::AUTHORIZATION, value);
    }
    let ctx = match state.auth.authenticate(&credentials, &uri, &request_id.0) {
        Ok(ctx) => ctx,
        Err(failure) => {
            return refused(
                StatusCode::UNAUTHORIZED,
                failure.code().as_str(),
                failure.message(),
            );
        }
    };
    if !gateway.knows_tenant(&ctx) {
        return refused(
            StatusCode::FORBIDDEN,
            "unknown_tenant",
            "the token's tenant is not one this gateway serves",
        );
    }
    if !offered.contains(&SUBPROTOCOL) {
        return refused(
            StatusCode::BAD_REQUEST,
            "subprotocol_required",
            "offer the `mcpgate.webmcp.v1` WebSocket subprotocol",
        );
    }
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let owner = PageOwner {
        tenant: ctx.tenant.clone(),
        user: ctx.user.clone(),
    };
    // The socket lives no longer than the token that opened it: the page reconnects with a
    // fresh one.
    let expires = state.auth.expires_at(&credentials).and_then(|exp| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // An `exp` beyond what a clock can hold is as good as never.
        tokio::time::Instant::now().checked_add(Duration::from_secs(exp.saturating_sub(now)))
    });
    let shutdown = (*state.shutdown).clone();
    upgrade
        .protocols([SUBPROTOCOL])
        .max_message_size(HARD_MESSAGE_LIMIT)
        .max_frame_size(HARD_MESSAGE_LIMIT)
        .on_upgrade(move |socket| async move {
            Connection {
                pages,
                client_id,
                owner,
                expires,
                page: None,
            }
            .run(socket, shutdown)
            .await;
        })
}

/// One page's socket, from the upgrade until it closes.
struct Connection {
    pages: Arc<Pages>,
    client_id: String,
    owner: PageOwner,
    /// When the page's token expires: the socket closes then (4401).
    expires: Option<tokio::time::Instant>,
    /// Set by `hello`: the registered page and what to write to it.
    page: Option<(Arc<Page>, tokio::sync::mpsc::Receiver<Outgoing>)>,
}

/// What handling a message asks of the socket.
enum Next {
    /// The page said `hello`: register it.
    Hello,
    Reply(String),
    Nothing,
    Close(u16, &'static str),
    ReplyAndClose(String, u16, &'static str),
}

impl Connection {
    async fn run(mut self, socket: WebSocket, shutdown: CancellationToken) {
        let (mut sink, mut stream) = socket.split();
        let heartbeat = self.pages.config().heartbeat;
        let quiet_limit = self.pages.config().heartbeat_timeout;
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
        let mut heard = Instant::now();
        let close = |code: u16, reason: &'static str| {
            Message::Close(Some(CloseFrame {
                code,
                reason: reason.into(),
            }))
        };
        loop {
            // The page replaced or moved elsewhere, even if its outbox was too full to say.
            let gone = self.page.as_ref().map(|(page, _)| page.gone().clone());
            let gone = async {
                match gone {
                    Some(gone) => gone.cancelled_owned().await,
                    None => std::future::pending().await,
                }
            };
            let outgoing = async {
                match &mut self.page {
                    Some((_, rx)) => rx.recv().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                message = stream.next() => match message {
                    Some(Ok(Message::Text(text))) => {
                        heard = Instant::now();
                        self.handle(text.as_str())
                    }
                    Some(Ok(Message::Binary(_))) => Next::Reply(
                        json!({"type": "error", "code": "malformed",
                               "message": "messages are JSON text frames"})
                        .to_string(),
                    ),
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {
                        heard = Instant::now();
                        Next::Nothing
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => break,
                },
                out = outgoing => match out {
                    Some(Outgoing::Text(text)) => Next::Reply(text),
                    Some(Outgoing::Close(code, reason)) => Next::Close(code, reason),
                    None => break,
                },
                _ = tick.tick() => {
                    if heard.elapsed() >= quiet_limit {
                        Next::Close(4408, "no heartbeat")
                    } else {
                        Next::Reply(json!({"type": "ping"}).to_string())
                    }
                }
                () = shutdown.cancelled() => Next::Close(1001, "the gateway is stopping"),
                () = expiry(self.expires) => Next::Close(4401, "the token expired"),
                () = gone => Next::Close(4000, "replaced by a new connection"),
            };
            let next = match next {
                Next::Hello => self.hello().await,
                next => next,
            };
            match next {
                Next::Hello | Next::Nothing => {}
                Next::Reply(text) => {
                    if sink.send(Message::Text(text.into())).await.is_err() {
                        break;
                    }
                }
                Next::Close(code, reason) => {
                    let _ = sink.send(close(code, reason)).await;
                    break;
                }
                Next::ReplyAndClose(text, code, reason) => {
                    let _ = sink.send(Message::Text(text.into())).await;
                    let _ = sink.send(close(code, reason)).await;
                    break;
                }
            }
        }
        if let Some((page, _)) = &self.page {
            tracing::info!(server = %page.server, "a WebMCP page disconnected");
            self.pages.detach(page);
        }
    }

    async fn hello(&mut self) -> Next {
        match self.pages.hello(&self.client_id, self.owner.clone()).await {
            Ok((page, rx)) => {
                tracing::info!(server = %page.server, "a WebMCP page connected");
                let accepted = json!({
                    "type": "accepted",
                    "version": protocol::VERSION,
                    "clientId": page.client_id,
                    "server": page.server.as_str(),
                    "heartbeatMs": millis(self.pages.config().heartbeat),
                    "maxFrameBytes": self.pages.config().max_frame_bytes,
                });
                self.page = Some((page, rx));
                Next::Reply(accepted.to_string())
            }
            Err(rejected) => {
                // Told, then closed: a page can read the reason before the close.
                let frame = json!({"type": "rejected", "reason": rejected.code(),
                                   "message": rejected.to_string()});
                Next::ReplyAndClose(frame.to_string(), 4003, "rejected")
            }
        }
    }

    fn handle(&mut self, text: &str) -> Next {
        let message = match protocol::read(text, self.pages.config()) {
            Ok(message) => message,
            // Before `hello` nothing is answered.
            Err(_) if self.page.is_none() => return Next::Nothing,
            Err(refused) => return Next::Reply(refused.frame()),
        };
        let Some((page, _)) = &self.page else {
            if !matches!(message, FromPage::Hello) {
                return Next::Nothing;
            }
            return Next::Hello;
        };
        match message {
            FromPage::Hello => Next::Reply(
                json!({"type": "error", "code": "already_accepted",
                       "message": "this connection already said hello"})
                .to_string(),
            ),
            FromPage::Tools(tools) => {
                let count = tools.len();
                self.pages.set_tools(page, tools);
                Next::Reply(json!({"type": "tools_accepted", "count": count}).to_string())
            }
            FromPage::Result { call_id, result } => {
                if page.answer(&call_id, result) {
                    Next::Nothing
                } else {
                    Next::Reply(
                        json!({"type": "error", "code": "unknown_call", "callId": call_id,
                               "message": "no call of this connection waits under this id"})
                        .to_string(),
                    )
                }
            }
            FromPage::Ping => Next::Reply(json!({"type": "pong"}).to_string()),
            FromPage::Pong => Next::Nothing,
        }
    }
}

/// Ready at `at`; never without one.
async fn expiry(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `POST /api/v1/webmcp/invoke` `{ clientId, tool, arguments, confirmationToken? }`: a call of
/// a page's tool through the gate, answered in the AX editor's shape
/// (`{ code: 0, data: { result: { ok, data, error } } }`), typed errors otherwise.
async fn invoke(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let ([client_id, tool], arguments, token) =
        super::rest::call_body(&state, &body, ["clientId", "tool"])?;
    let gateway = state.gateway.current();
    let server = gateway.pages().server_for(&client_id).ok_or_else(|| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_client_id",
            INVALID_CLIENT_ID,
        )
    })?;
    let not_connected = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "client_not_connected",
            format!("no page of yours is connected as `{client_id}`"),
        )
    };
    if !gateway.pages().visible(&ctx, &server) {
        return Err(not_connected());
    }
    let canonical = format!("{server}.{tool}");
    let timer = state.metrics.start_call(&gateway, &canonical);
    let outcome = gateway
        .call_tool(&ctx, &canonical, arguments, token.as_deref())
        .await;
    timer.finish(&outcome);
    let result = match outcome {
        Ok(output) => {
            let data = output
                .structured
                .clone()
                .unwrap_or_else(|| Value::String(output.text()));
            json!({ "ok": true, "data": data, "error": null })
        }
        Err(GatewayError::ToolError { message }) => {
            json!({ "ok": false, "data": null, "error": message })
        }
        Err(GatewayError::NotFound { .. }) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "tool_not_found",
                format!(
                    "the page `{client_id}` has no tool `{}`",
                    tool.chars().take(128).collect::<String>()
                ),
            ));
        }
        Err(GatewayError::Page {
            source: PageError::NotConnected { .. },
            ..
        }) => return Err(not_connected()),
        Err(err) => return Err(err.into()),
    };
    Ok(Json(json!({ "code": 0, "data": { "result": result } })).into_response())
}
