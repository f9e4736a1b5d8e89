//! Tool calls on a Streamable HTTP connection at 2026-07-28 or later, sent by the calling task
//! itself rather than through rmcp's transport worker and service loop.
//!
//! From 2026-07-28 a Streamable HTTP connection has no session: every request is one POST
//! that carries its own `_meta` (protocol version, client info, capabilities) and the
//! standard `Mcp-Method` / `Mcp-Name` headers, and is answered on that POST alone (as JSON,
//! or as an event stream that may resume with `GET` and `Last-Event-ID`). rmcp's path hands
//! each call across three tasks, parses the endpoint's URL and serializes the request twice
//! per call; here the calling task posts the request, serialized once, and reads the answer
//! as rmcp's client would (status, media type, bounds; `posted`). The rare ways (resuming
//! a stream, answering the server) use rmcp's client functions. Abandoning the call closes
//! its stream, which is how 2026-07-28 cancels a request over HTTP (rmcp sends no notice
//! either).
//!
//! To a plain `http` endpoint (a local or sidecar server) the POST goes through hyper alone
//! ([`PlainClient`], under the same guards as reqwest's client); reqwest's layers above hyper
//! cost about a fifth of a call's CPU in the gateway. `https` endpoints are posted to with
//! reqwest and its TLS stack.
//!
//! Tools whose input schema promotes arguments to headers (`x-mcp-header`) are left to rmcp,
//! which builds those headers.

use std::{
    collections::{HashMap, HashSet},
    sync::{
        Arc, RwLock,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures::{FutureExt, StreamExt, TryStreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body::Body;
use http_body_util::{BodyDataStream, Full};
use rmcp::{
    RoleClient, Service,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientJsonRpcMessage, JsonRpcMessage,
        ProgressToken, ProtocolVersion, RequestId, RequestMetaObject, ServerJsonRpcMessage,
        ServerRequest, Tool,
    },
    service::{InboundStreamOrigin, Peer, RequestContext, ServiceError},
    transport::{
        DynamicTransportError, StreamableHttpClientTransport,
        streamable_http_client::{HttpStatusError, StreamableHttpClient, StreamableHttpError},
    },
};
use sse_stream::{Error as SseError, Sse};

use super::{
    connect::UpstreamClient,
    line_transport::{CallMeta, Decoded, decode, direct_id, request_json},
    sse,
};
use crate::net::{self, NetError, PlainClient};

/// Reconnects in a row that may fail before a call's stream is given up.
const MAX_RESUMES: usize = 5;
/// How long the rest of a call's stream is read after its answer (rmcp's bound).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(50);
/// Events after the answer read at once before the rest is left to a task.
const DRAIN_READY: usize = 4;
/// Wait before resuming a stream when the server named none (`retry:`), doubled per failure.
const RESUME_DELAY: Duration = Duration::from_secs(1);

type SseStream = BoxStream<'static, Result<Sse, SseError>>;

/// The shared side of one Streamable HTTP connection at 2026-07-28 or later.
#[derive(Clone)]
pub(crate) struct HttpLink {
    inner: Arc<Inner>,
}

struct Inner {
    /// For rmcp's client functions (resuming a stream, answering the server).
    client: reqwest::Client,
    /// The endpoint, for rmcp's client functions.
    uri: Arc<str>,
    /// What posts the calls.
    poster: Poster,
    /// The configured headers and the protocol version, for rmcp's client functions.
    headers: HashMap<HeaderName, HeaderValue>,
    /// Every header of a `tools/call` POST but `Mcp-Name`: the accepted and sent media
    /// types, the configured headers, the protocol version and `Mcp-Method`.
    post_headers: HeaderMap,
    /// What every call's `_meta` names, as rmcp sets it: the protocol version, the client
    /// and its capabilities (unless the call brings its own), and the progress token.
    meta: CallMeta,
    handler: UpstreamClient,
    refusals: Option<super::oauth::RefusalNote>,
    next: AtomicU64,
    /// Tools sent here: listed, named without header encoding, and promoting no argument
    /// to a header.
    plain: RwLock<Arc<HashSet<String>>>,
}

impl std::fmt::Debug for HttpLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the endpoint: its query may carry a credential.
        f.debug_struct("HttpLink").finish_non_exhaustive()
    }
}

/// What posts a call: hyper alone for a plain `http` endpoint, else reqwest.
enum Poster {
    Plain {
        /// Boxed: hyper's client is about 450 bytes, reqwest's one pointer.
        client: Box<PlainClient>,
        uri: http::Uri,
    },
    Reqwest {
        client: reqwest::Client,
        url: reqwest::Url,
    },
}

/// What a direct HTTP call needs from its connection.
pub(super) struct HttpLinkParts {
    pub client: reqwest::Client,
    /// The client for a plain `http` endpoint, when the connection's policy allows one.
    pub plain: Option<PlainClient>,
    pub uri: Arc<str>,
    pub headers: HashMap<HeaderName, HeaderValue>,
    pub protocol: ProtocolVersion,
    pub handler: UpstreamClient,
    /// Where a refusal of a user's token is noted (`auth = "oauth"`).
    pub refusals: Option<super::oauth::RefusalNote>,
}

impl HttpLink {
    /// The link for a connection that speaks `parts.protocol`; `None` before 2026-07-28,
    /// where requests belong to a session rmcp keeps.
    pub(super) fn new(parts: HttpLinkParts) -> Option<HttpLink> {
        let HttpLinkParts {
            client,
            plain,
            uri,
            mut headers,
            protocol,
            handler,
            refusals,
        } = parts;
        if protocol.has_initialize() {
            return None;
        }
        let url = reqwest::Url::parse(&uri).ok()?;
        // A URL that `http::Uri` cannot hold (reqwest's parser is more lenient) is posted
        // with reqwest.
        let plain_uri = match url.scheme() {
            "http" => uri.parse::<http::Uri>().ok(),
            _ => None,
        };
        let poster = match (plain, plain_uri) {
            (Some(plain), Some(uri)) => Poster::Plain {
                client: Box::new(plain),
                uri,
            },
            _ => Poster::Reqwest {
                client: client.clone(),
                url,
            },
        };
        headers.insert(
            HeaderName::from_static("mcp-protocol-version"),
            HeaderValue::from_str(protocol.as_str()).ok()?,
        );
        let mut post_headers: HeaderMap = headers
            .iter()
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        post_headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static("text/event-stream, application/json"),
        );
        post_headers.insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        post_headers.insert(
            HeaderName::from_static("mcp-method"),
            HeaderValue::from_static("tools/call"),
        );
        let info = rmcp::ClientHandler::get_info(&handler);
        let mut meta = RequestMetaObject::new();
        meta.set_protocol_version(protocol);
        meta.set_client_info(info.client_info);
        meta.set_client_capabilities(info.capabilities);
        let meta = CallMeta::new(&meta);
        Some(HttpLink {
            inner: Arc::new(Inner {
                client,
                uri,
                poster,
                headers,
                post_headers,
                meta,
                handler,
                refusals,
                next: AtomicU64::new(0),
                plain: RwLock::new(Arc::default()),
            }),
        })
    }

    /// Whether calls are posted by hyper alone (a plain `http` endpoint).
    #[cfg(test)]
    pub(super) fn posts_plain(&self) -> bool {
        matches!(self.inner.poster, Poster::Plain { .. })
    }

    /// This link posting with reqwest, as for an `https` endpoint.
    #[cfg(test)]
    pub(super) fn posting_with_reqwest(&self) -> HttpLink {
        let inner = &*self.inner;
        HttpLink {
            inner: Arc::new(Inner {
                client: inner.client.clone(),
                uri: inner.uri.clone(),
                poster: Poster::Reqwest {
                    client: inner.client.clone(),
                    url: reqwest::Url::parse(&inner.uri).expect("a parsed endpoint"),
                },
                headers: inner.headers.clone(),
                post_headers: inner.post_headers.clone(),
                meta: inner.meta.clone(),
                handler: inner.handler.clone(),
                refusals: inner.refusals.clone(),
                next: AtomicU64::new(inner.next.load(Ordering::Relaxed)),
                plain: RwLock::new(
                    inner
                        .plain
                        .read()
                        .unwrap_or_else(|poisoned| poisoned.into_inner())
                        .clone(),
                ),
            }),
        }
    }

    /// Learns the server's tools (after each `tools/list`).
    pub(super) fn listed(&self, tools: &[Tool]) {
        let plain = tools
            .iter()
            .filter(|tool| plain_header_value(&tool.name) && !promotes_headers(&tool.input_schema))
            .map(|tool| tool.name.to_string())
            .collect();
        *self
            .inner
            .plain
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(plain);
    }

    /// Whether a call to `tool` is sent here rather than through rmcp.
    pub(super) fn sends(&self, tool: &str) -> bool {
        self.inner
            .plain
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .contains(tool)
    }

    /// Sends a `tools/call` with `params` as rmcp would: `_meta` names the protocol version,
    /// the client and `capabilities` (the connection's when `None`), and the progress token,
    /// which is the request's id. `sent` learns id and token before the request leaves.
    /// Returns the answer: a response or an error.
    pub(super) async fn call(
        &self,
        peer: &Peer<RoleClient>,
        params: &mut CallToolRequestParams,
        capabilities: Option<&ClientCapabilities>,
        sent: impl FnOnce(RequestId, ProgressToken),
    ) -> Result<ServerJsonRpcMessage, ServiceError> {
        let inner = &*self.inner;
        let key = inner.next.fetch_add(1, Ordering::Relaxed);
        let id = direct_id(key);
        let body = request_json(&id, params, &inner.meta, capabilities).map_err(|err| {
            tracing::debug!(error = %err, "a tool call could not be serialized");
            ServiceError::UnexpectedResponse
        })?;
        // Room for `Mcp-Name` and what hyper adds (`Host`, `Content-Length`): a clone of the
        // map, exactly as full as the original, grew twice per call.
        let mut headers = HeaderMap::with_capacity(inner.post_headers.len() + 3);
        for (name, value) in &inner.post_headers {
            headers.append(name.clone(), value.clone());
        }
        if let Ok(name) = HeaderValue::from_str(&params.name) {
            headers.insert(HeaderName::from_static("mcp-name"), name);
        }
        sent(id.clone(), ProgressToken(id.clone()));
        let posted = match &inner.poster {
            Poster::Plain { client, uri } => {
                let mut request = http::Request::new(Full::new(Bytes::from(body)));
                *request.method_mut() = http::Method::POST;
                *request.uri_mut() = uri.clone();
                *request.headers_mut() = headers;
                let response = client.send(request).await.map_err(failed)?;
                posted(response, inner.refusals.as_ref(), &inner.uri).await?
            }
            Poster::Reqwest { client, url } => {
                let response = client
                    .post(url.clone())
                    .headers(headers)
                    .body(body)
                    .send()
                    .await
                    .map_err(|err| failed(NetError::from(err)))?;
                posted(
                    http::Response::from(response),
                    inner.refusals.as_ref(),
                    &inner.uri,
                )
                .await?
            }
        };
        match posted {
            Posted::Answer(message) => Ok(message),
            Posted::Stream(stream) => self.read_stream(peer, &id, stream).await,
        }
    }

    /// Reads the call's event stream up to its answer, handing what the server sends on the
    /// way to the connection's handler, and resuming the stream with `GET` when it breaks
    /// after the server named an event id (as rmcp does).
    async fn read_stream(
        &self,
        peer: &Peer<RoleClient>,
        id: &RequestId,
        mut stream: SseStream,
    ) -> Result<ServerJsonRpcMessage, ServiceError> {
        let inner = &*self.inner;
        let mut last_event: Option<String> = None;
        let mut retry: Option<Duration> = None;
        let mut failures = 0usize;
        loop {
            // Whether the stream broke (rather than ended).
            let mut broke = false;
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(event) => event,
                    Err(err) => match sse::SseError::from(err) {
                        // Resuming would only bring the same event again.
                        sse::SseError::EventTooLarge { limit } => {
                            return Err(request_failed(
                                StreamableHttpError::ResponseBodyTooLarge { max_size: limit },
                            ));
                        }
                        err => {
                            // Not the error itself: reqwest's name the endpoint.
                            let body = matches!(err, sse::SseError::Malformed(SseError::Body(_)));
                            tracing::debug!(body, "an upstream call's event stream failed");
                            broke = true;
                            break;
                        }
                    },
                };
                failures = 0;
                if let Some(ms) = event.retry {
                    retry = Some(Duration::from_millis(ms));
                }
                if let Some(event_id) = event.id {
                    last_event = Some(event_id);
                }
                if event.event.as_deref().is_some_and(|kind| kind != "message") {
                    continue;
                }
                let Some(data) = event.data.filter(|data| !data.is_empty()) else {
                    continue;
                };
                let message = match decode(data.as_bytes()) {
                    Decoded::Message(message) => message,
                    Decoded::Skip | Decoded::Invalid => {
                        tracing::debug!("skipping an upstream event that is no message");
                        continue;
                    }
                };
                match message {
                    JsonRpcMessage::Response(ref answer) if answer.id == *id => {
                        finish(stream);
                        return Ok(message);
                    }
                    JsonRpcMessage::Error(ref error) if error.id.as_ref() == Some(id) => {
                        finish(stream);
                        return Ok(message);
                    }
                    // Boxed, as the resume below: these futures are large and rare, and
                    // every call's future would otherwise carry (and move) their room.
                    JsonRpcMessage::Notification(notification) => {
                        Box::pin(inner.handler.notified(notification.notification)).await;
                    }
                    JsonRpcMessage::Request(request) => {
                        Box::pin(self.answer(peer, id, request.id, request.request)).await;
                    }
                    // An answer to some other request has no one waiting here.
                    JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
                }
            }
            // The stream ended before the answer: resumable only once it named an event.
            // Otherwise a stream that broke is the connection failing; one the server ended
            // fails this call alone.
            let Some(resume_from) = last_event.clone() else {
                return Err(if broke {
                    ServiceError::TransportClosed
                } else {
                    request_failed(StreamableHttpError::UnexpectedEndOfStream)
                });
            };
            loop {
                if failures >= MAX_RESUMES {
                    return Err(ServiceError::TransportClosed);
                }
                let delay = retry.unwrap_or(RESUME_DELAY.saturating_mul(1 << failures.min(4)));
                failures += 1;
                tokio::time::sleep(delay).await;
                let headers = inner.headers.clone();
                match Box::pin(inner.client.get_stream(
                    inner.uri.clone(),
                    None,
                    Some(resume_from.clone()),
                    None,
                    headers,
                ))
                .await
                {
                    Ok(resumed) => {
                        stream = resumed;
                        break;
                    }
                    Err(
                        StreamableHttpError::ServerDoesNotSupportSse
                        | StreamableHttpError::AuthRequired(_)
                        | StreamableHttpError::InsufficientScope(_),
                    ) => return Err(ServiceError::TransportClosed),
                    Err(err) => {
                        tracing::debug!(error = %quiet(err), "resuming an upstream call's stream failed");
                    }
                }
            }
        }
    }

    /// Answers a request the server sent on call `call`'s stream, with the connection's
    /// handler, as rmcp's service would (the request belongs to that call), and posts the
    /// answer back.
    async fn answer(
        &self,
        peer: &Peer<RoleClient>,
        call: &RequestId,
        id: RequestId,
        request: ServerRequest,
    ) {
        let inner = &*self.inner;
        let mut context = RequestContext::new(id.clone(), peer.clone());
        context
            .extensions
            .insert(InboundStreamOrigin::OutboundRequest(call.clone()));
        let message = match inner.handler.handle_request(request, context).await {
            Ok(result) => ClientJsonRpcMessage::response(result, id),
            Err(error) => ClientJsonRpcMessage::error(error, Some(id)),
        };
        let headers = inner.headers.clone();
        if let Err(err) = inner
            .client
            .post_message(inner.uri.clone(), message, None, None, headers)
            .await
        {
            tracing::debug!(error = %quiet(err), "posting an answer to the upstream failed");
        }
    }
}

/// Reads a call's stream to its end after the answer, so that its connection goes back to
/// the pool, ready for the next call, rather than being closed. The end comes with the
/// answer or just after it (2026-07-28 servers close the stream once they answered): what
/// already came is read at once, and the rest in a task of its own, bounded by
/// [`DRAIN_TIMEOUT`] (rmcp's bound), so that the answer goes back without waiting for it.
/// Waiting in the call cost a wake-up per call for the end's write and, for its deadline
/// (the earliest of all timers), one of the thread that waits for the timers.
fn finish(mut stream: SseStream) {
    // Bounded, as a server may keep sending.
    for _ in 0..DRAIN_READY {
        match stream.next().now_or_never() {
            Some(Some(_)) => {}
            Some(None) => return,
            None => break,
        }
    }
    tokio::spawn(async move {
        let drain = async move { while stream.next().await.is_some() {} };
        let _ = tokio::time::timeout(DRAIN_TIMEOUT, drain).await;
    });
}

/// What the POST of a call brought.
#[expect(
    clippy::large_enum_variant,
    reason = "made and taken apart at once; boxing would add an allocation per call"
)]
enum Posted {
    /// The answer, in a JSON body.
    Answer(ServerJsonRpcMessage),
    /// The call's event stream.
    Stream(SseStream),
}

/// Reads a call's POST response as rmcp's client does. A JSON-RPC error in a JSON body is the
/// server's answer whatever the status (but 401, 403 and 429); a status that
/// [`super::fails_request_alone`] (5xx, 408, 413, 429), another media type, a body past its
/// bound fail this request alone, reported as rmcp reports them ([`request_failed`]); any
/// other status ends the connection. 202 or 204 means no answer will come: from 2026-07-28
/// a request is answered on its own POST.
/// A refusal of the user's token by the server at `endpoint` is noted in `refusals`
/// (RFC 6750 §3.1: 401, or 403 with `insufficient_scope`), for the call to report it.
async fn posted<B>(
    response: http::Response<B>,
    refusals: Option<&super::oauth::RefusalNote>,
    endpoint: &str,
) -> Result<Posted, ServiceError>
where
    B: Body<Data = Bytes> + Send + 'static,
    NetError: From<B::Error>,
{
    let status = response.status();
    if matches!(status, StatusCode::ACCEPTED | StatusCode::NO_CONTENT) {
        return Err(ServiceError::UnexpectedResponse);
    }
    let media = media_type(response.headers());
    let is = |expected: &str| {
        media
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case(expected))
    };
    let (json, events) = (is("application/json"), is("text/event-stream"));
    if !status.is_success() {
        if let Some(note) = refusals
            && let Ok(endpoint) = url::Url::parse(endpoint)
        {
            note.challenged(status, response.headers(), &endpoint);
        }
        let refused = matches!(
            status,
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN | StatusCode::TOO_MANY_REQUESTS
        );
        if json
            && !refused
            && let Ok(body) = read_body(response).await
            && let Decoded::Message(error @ JsonRpcMessage::Error(_)) = decode(&body)
        {
            return Ok(Posted::Answer(error));
        }
        tracing::debug!(%status, "an upstream refused a tool call's POST");
        if !super::fails_request_alone(status.as_u16()) {
            return Err(ServiceError::TransportClosed);
        }
        // No `Retry-After`: `UpstreamError::HttpStatus` keeps the status alone.
        return Err(request_failed(StreamableHttpError::HttpStatus(
            HttpStatusError::new(status.as_u16(), None),
        )));
    }
    if events {
        let bytes = BodyDataStream::new(response.into_body()).map_err(NetError::from);
        return Ok(Posted::Stream(sse::bounded_events(
            bytes,
            sse::DEFAULT_MAX_EVENT_BYTES,
        )));
    }
    if json {
        let body = read_body(response).await?;
        if let Decoded::Message(message) = decode(&body) {
            return Ok(Posted::Answer(message));
        }
        tracing::debug!("an upstream answered a tool call with JSON that is no message");
        return Err(request_failed(
            StreamableHttpError::UnexpectedServerResponse("JSON that is no message".into()),
        ));
    }
    tracing::debug!(media = ?media, "an upstream answered a tool call with an unexpected type");
    Err(request_failed(StreamableHttpError::UnexpectedContentType(
        media,
    )))
}

/// The media type of a response (`Content-Type` without parameters).
fn media_type(headers: &HeaderMap) -> Option<String> {
    let value = headers.get(http::header::CONTENT_TYPE)?.to_str().ok()?;
    Some(
        value
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_owned(),
    )
}

/// A JSON body, bounded as rmcp bounds one (the same bound as an event).
async fn read_body<B>(response: http::Response<B>) -> Result<Bytes, ServiceError>
where
    B: Body<Data = Bytes>,
    NetError: From<B::Error>,
{
    net::read_capped_body(response.into_body(), sse::DEFAULT_MAX_EVENT_BYTES)
        .await
        .map_err(|err| {
            tracing::debug!(error = %err, "reading an upstream's JSON answer failed");
            match err {
                NetError::TooLarge { limit } => {
                    request_failed(StreamableHttpError::ResponseBodyTooLarge { max_size: limit })
                }
                _ => ServiceError::TransportClosed,
            }
        })
}

/// A failure of one request that leaves the connection as it is, as rmcp's client reports it
/// (`UpstreamError::from_service` tells the two apart).
fn request_failed(err: StreamableHttpError<reqwest::Error>) -> ServiceError {
    ServiceError::TransportSend(DynamicTransportError::new::<
        StreamableHttpClientTransport<reqwest::Client>,
        RoleClient,
    >(err))
}

/// How rmcp reports a failed POST to a request's caller: the transport failed.
fn failed(err: NetError) -> ServiceError {
    // `NetError` keeps the causes but not the URL, whose query may carry a credential.
    tracing::debug!(error = %err, "posting a tool call to the upstream failed");
    ServiceError::TransportClosed
}

/// An error of rmcp's client as logged: without the endpoint, which reqwest's errors name
/// and whose query may carry a credential.
fn quiet(err: StreamableHttpError<reqwest::Error>) -> String {
    match err {
        StreamableHttpError::Client(err) => NetError::from(err).to_string(),
        StreamableHttpError::Sse(_) => "the event stream failed".to_owned(),
        other => other.to_string(),
    }
}

/// A tool name rmcp sends in `Mcp-Name` as it is (it Base64-encodes others).
fn plain_header_value(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| (0x21..=0x7E).contains(&b)) && !name.starts_with("=?")
}

/// Whether an input schema marks any property `x-mcp-header`, at any depth.
fn promotes_headers(schema: &serde_json::Map<String, serde_json::Value>) -> bool {
    fn value(v: &serde_json::Value) -> bool {
        match v {
            serde_json::Value::Object(map) => promotes_headers(map),
            serde_json::Value::Array(items) => items.iter().any(value),
            _ => false,
        }
    }
    schema.contains_key("x-mcp-header") || schema.values().any(value)
}

#[cfg(test)]
#[path = "http_link_tests.rs"]
mod tests;
