//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): the parsers and checks
//! that are not public API, behind thin functions that run them as the gateway does. Nothing
//! else uses this module; the feature is off in every build but the fuzzers'.

use std::{
    path::{Path, PathBuf},
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::StreamExt as _;
use rmcp::transport::Transport as _;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

use crate::upstream::line_transport::{Decoded, LineTransport, decode, trim};

/// One decoded upstream line, as the stdio and Streamable HTTP clients decode it: the message
/// as JSON when it is one, `None` when it is skipped or answered as invalid.
pub fn decode_upstream_line(line: &[u8]) -> Option<Value> {
    match decode(trim(line)) {
        Decoded::Message(message) => serde_json::to_value(&message).ok(),
        Decoded::Skip | Decoded::Invalid => None,
    }
}

/// What a stdio upstream's line framer yields, as JSON, for `input` arriving in pieces of
/// the sizes `chunks` gives (cycled; a zero is one byte), with lines of at most `max_line`
/// bytes.
pub fn frame_upstream_lines(input: &[u8], chunks: &[u8], max_line: usize) -> Vec<Value> {
    let reader = Chunked {
        data: input.to_vec(),
        at: 0,
        sizes: chunks.iter().map(|&n| usize::from(n).max(1)).collect(),
        next: 0,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(_) => return Vec::new(),
    };
    runtime.block_on(async move {
        let mut transport = LineTransport::new(reader, tokio::io::sink(), max_line);
        let mut out = Vec::new();
        while let Some(message) = transport.receive().await {
            out.extend(serde_json::to_value(&message).ok());
        }
        out
    })
}

/// A reader that hands out its bytes in pieces of the given sizes.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    next: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let size = if this.sizes.is_empty() {
            this.data.len()
        } else {
            this.sizes[this.next % this.sizes.len()]
        };
        this.next = this.next.wrapping_add(1);
        let end = this
            .data
            .len()
            .min(this.at.saturating_add(size))
            .min(this.at.saturating_add(buf.remaining()));
        buf.put_slice(&this.data[this.at..end]);
        this.at = end;
        Poll::Ready(Ok(()))
    }
}

/// An SSE event as the upstream SSE reader yields it: its `event` and `data`, or the error
/// that ended the stream.
pub type SseItem = Result<(Option<String>, Option<String>), String>;

/// The events of an upstream SSE body arriving in `chunks`, each event bounded by `limit`
/// bytes on the wire, up to and including the first error.
pub fn upstream_sse_events(chunks: Vec<Vec<u8>>, limit: usize) -> Vec<SseItem> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<Bytes, sse_stream::Error>(Bytes::from(chunk))),
    );
    let mut events = crate::upstream::sse::bounded_events(bytes, limit);
    futures::executor::block_on(async move {
        let mut out = Vec::new();
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => out.push(Ok((event.event, event.data))),
                Err(error) => {
                    out.push(Err(error.to_string()));
                    break;
                }
            }
        }
        out
    })
}

/// The `data` of each event of a model's SSE stream arriving in `chunks`, the unfinished
/// last event included, or the parser's error.
pub fn model_sse_events(chunks: &[&[u8]]) -> Result<Vec<String>, String> {
    let mut parser = crate::agent::llm::sse::SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(parser.push(chunk).map_err(|e| e.to_string())?);
    }
    out.extend(parser.finish().map_err(|e| e.to_string())?);
    Ok(out)
}

/// Loads `text` as a configuration file named `name` (its extension says TOML or
/// `mcpServers` JSON) in `folder`, with an empty environment: a problem report or nothing.
pub fn load_config_text(folder: &Path, name: &str, text: &[u8]) -> Result<(), String> {
    let path: PathBuf = folder.join(name);
    std::fs::write(&path, text).map_err(|e| format!("writing the file: {e}"))?;
    let env = crate::config::Env::from_pairs(Vec::<(String, String)>::new());
    crate::config::load(Some(&path), folder, &env, Path::new("/nonexistent/mcpgate"))
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// One HTTP request of the whole-stack target.
#[derive(Debug, Clone)]
pub struct StackRequest {
    pub method: http::Method,
    /// Path and query, as sent (refused when it is no URI at all).
    pub path: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    /// Sends the dev token as a bearer.
    pub authorized: bool,
}

/// The whole service in this process, behind its router: dev authentication, state in
/// memory, the demo server in process. Made once and kept, as a gateway is (requests of
/// one input may leave sessions and confirmations for the next: so does any caller).
struct Stack {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
    token: String,
}

static STACK: std::sync::OnceLock<Option<Stack>> = std::sync::OnceLock::new();

fn stack() -> Option<&'static Stack> {
    STACK.get_or_init(start_stack).as_ref()
}

fn start_stack() -> Option<Stack> {
    use std::sync::Arc;

    use crate::{
        config::{
            AuthConfig, Config, Env, InProcess, PinsConfig, ServerConfig, ServerId, ServiceConfig,
            StateConfig, TransportConfig,
        },
        gateway::{Gateway, GatewayOptions},
        server::{AppState, auth::Authenticator},
    };

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    let (app, token) = runtime.block_on(async {
        let demo = move || {
            let (client, server) = tokio::io::duplex(64 * 1024);
            tokio::spawn(async move {
                if let Ok(running) =
                    rmcp::ServiceExt::serve(crate::demo::DemoServer::new(), server).await
                {
                    let _ = running.waiting().await;
                }
            });
            client
        };
        let mut config = Config {
            state: StateConfig::Memory,
            pins: PinsConfig::none(),
            ..Config::default()
        };
        config.servers = vec![ServerConfig::new(
            ServerId::new("demo")?,
            TransportConfig::InProcess(InProcess(Arc::new(demo))),
        )];
        let gateway = Gateway::start(config, GatewayOptions::default())
            .await
            .ok()?;
        gateway.wait_ready(std::time::Duration::from_secs(10)).await;
        let listen: std::net::SocketAddr = "127.0.0.1:8080".parse().ok()?;
        let env = Env::from_pairs(std::iter::empty::<(String, String)>());
        let auth = Authenticator::new(&AuthConfig::Dev, &env, listen, false)
            .await
            .ok()?;
        let token = auth.dev_token()?.to_owned();
        let service = Arc::new(ServiceConfig {
            listen,
            auth: AuthConfig::Dev,
            ..ServiceConfig::default()
        });
        let state = AppState::new(gateway, Arc::new(auth), service);
        Some((crate::server::app(state), token))
    })?;
    Some(Stack {
        runtime,
        app,
        token,
    })
}

/// Sends `requests` in turn to the whole service; checks that each answer is one the
/// service means to give: no 500 (an open event stream's and HEAD's included), and every
/// refusal typed ([`typed_error`], or an HTML page on the routes browsers open). An
/// answer's body is read to its end, bounded by 64 MiB.
pub fn serve_requests(requests: Vec<StackRequest>) -> Result<(), String> {
    let Some(stack) = stack() else {
        return Err("the service did not start".to_owned());
    };
    stack.runtime.block_on(async {
        for sent in requests {
            let mut request = http::Request::builder()
                .method(sent.method.clone())
                .uri(sent.path.as_str());
            for (name, value) in &sent.headers {
                request = request.header(name.as_str(), value.as_slice());
            }
            if sent.authorized {
                request = request.header("authorization", format!("Bearer {}", stack.token));
            }
            // A request http itself refuses to build (a bad method, URI or header) never
            // reaches a server: hyper refuses it on the wire.
            let Ok(request) = request.body(axum::body::Body::from(sent.body.clone())) else {
                continue;
            };
            // A router is always ready: `call` without `poll_ready` is how axum serves it.
            let response = match tower_service::Service::call(&mut stack.app.clone(), request).await
            {
                Ok(response) => response,
                Err(never) => match never {},
            };
            let status = response.status();
            let media = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let is_event_stream = media.starts_with("text/event-stream");
            // A page for people (the OAuth callback's, the web page's) says what went wrong
            // in HTML: typed for its readers.
            let is_page = media.starts_with("text/html");
            // An open stream (an MCP session's) is not read to its end; an answer to HEAD
            // has no body, by definition. Neither may be a 500.
            let unread = is_event_stream || sent.method == http::Method::HEAD;
            if unread && status != http::StatusCode::INTERNAL_SERVER_ERROR {
                continue;
            }
            let body = if unread {
                Bytes::new()
            } else {
                axum::body::to_bytes(response.into_body(), 64 << 20)
                    .await
                    .map_err(|e| format!("{} {}: the body failed: {e}", sent.method, sent.path))?
            };
            if status == http::StatusCode::INTERNAL_SERVER_ERROR {
                return Err(format!(
                    "{} {} answered 500: {}",
                    sent.method,
                    sent.path,
                    String::from_utf8_lossy(&body)
                ));
            }
            if (status.is_client_error() || status.is_server_error()) && !is_page {
                let typed = serde_json::from_slice::<Value>(&body)
                    .is_ok_and(|v| typed_error(&v, sent.path.starts_with("/mcp")));
                if !typed {
                    return Err(format!(
                        "{} {} answered {status} untyped: {}",
                        sent.method,
                        sent.path,
                        String::from_utf8_lossy(&body)
                    ));
                }
            }
        }
        Ok(())
    })
}

/// Whether an error body is one of the service's typed errors: the API's (`code`, a
/// string), OAuth's (`error`, a string, RFC 6749 §5.2), or on `/mcp` a JSON-RPC error (an
/// object with a numeric `code` and a `message`).
fn typed_error(body: &Value, mcp: bool) -> bool {
    let json_rpc = |error: &Value| {
        error.get("code").is_some_and(Value::is_i64)
            && error.get("message").is_some_and(Value::is_string)
    };
    body.get("code").is_some_and(Value::is_string)
        || body.get("error").is_some_and(Value::is_string)
        || (mcp && body.get("error").is_some_and(json_rpc))
}
