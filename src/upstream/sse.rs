//! The legacy HTTP+SSE client transport (MCP 2024-11-05) on rmcp's `Transport` trait.
//!
//! rmcp removed its own SSE client, so this one speaks the old protocol: one long `GET` whose
//! first event names the endpoint that every client message is `POST`ed to, and whose later
//! events carry the server's messages.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{Stream, StreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use rmcp::{
    RoleClient,
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
    transport::Transport,
};
use sse_stream::{Sse, SseStream};
use tokio::{sync::Semaphore, task::JoinHandle};
use tokio_util::sync::{CancellationToken, DropGuard};
use url::Url;

use super::relay::RelayRegistry;
use crate::net::NetError;

/// Largest SSE event accepted, in bytes on the wire. sse-stream 0.2 buffers an event without
/// limit, so a server that never ends an event would otherwise grow our memory without bound;
/// 16 MiB matches the cap rmcp puts on its own Streamable HTTP events.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// How long `connect` waits for the response and its `endpoint` event. Short, because a server
/// that speaks Streamable HTTP instead must fail here quickly so the caller can fall back.
pub const DEFAULT_ENDPOINT_TIMEOUT: Duration = Duration::from_secs(10);

/// Server messages parsed ahead of `receive`. When full, the reader stops reading the stream,
/// so a flooding server is slowed by TCP backpressure instead of filling our memory.
const INBOUND_QUEUE: usize = 64;

/// POSTs in flight at once. rmcp runs every send as its own task, so without this bound a burst
/// of calls would open as many connections as there are calls.
const MAX_CONCURRENT_POSTS: usize = 16;

/// Bound on one POST. The server answers 202 at once and the reply comes on the stream, so a
/// POST that takes longer is stuck; the call's own deadline is enforced above the transport.
const POST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where and how to open the SSE stream.
#[derive(Clone)]
pub struct SseClientConfig {
    /// The SSE URL (the `GET`). The endpoint must be on the same origin.
    pub url: Url,
    /// Sent on the `GET` and on every `POST` (e.g. `Authorization`). Never logged.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Bound on the wait for the response headers and the `endpoint` event.
    pub endpoint_timeout: Duration,
    /// Bound on the size of one SSE event, in bytes on the wire.
    pub max_event_bytes: usize,
}

impl SseClientConfig {
    /// A config with no extra headers and the default bounds.
    pub fn new(url: Url) -> Self {
        Self {
            url,
            headers: Vec::new(),
            endpoint_timeout: DEFAULT_ENDPOINT_TIMEOUT,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

impl std::fmt::Debug for SseClientConfig {
    /// Header names only: values are credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("SseClientConfig")
            .field("url", &redacted(&self.url))
            .field("headers", &names)
            .field("endpoint_timeout", &self.endpoint_timeout)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

/// A URL without its credentials and query, which may hold tokens or a session id.
fn redacted(url: &Url) -> String {
    format!("{}{}", url.origin().ascii_serialization(), url.path())
}

/// Why the SSE transport failed. Messages carry no header values and no URLs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    #[error("SSE request answered HTTP {status}")]
    Status { status: u16 },
    #[error("SSE request answered with content type {content_type:?}, not text/event-stream")]
    NotEventStream { content_type: String },
    #[error("SSE stream ended before the endpoint event")]
    NoEndpoint,
    #[error("no endpoint event within {after:?}")]
    EndpointTimeout { after: Duration },
    #[error("endpoint event does not hold a valid URL")]
    InvalidEndpoint,
    #[error("endpoint is on another origin ({endpoint_origin}) than the SSE URL")]
    CrossOriginEndpoint { endpoint_origin: String },
    #[error("SSE event larger than {limit} bytes")]
    EventTooLarge { limit: usize },
    #[error("malformed SSE stream: {0}")]
    Malformed(sse_stream::Error),
    #[error("message POST answered HTTP {status}")]
    PostStatus { status: u16 },
    #[error("could not encode message: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("SSE transport closed")]
    Closed,
    /// The request failed or was refused (`NetError` names no URL: the endpoint's session
    /// id lets anyone post into the session).
    #[error(transparent)]
    Net(#[from] NetError),
}

impl From<reqwest::Error> for SseError {
    fn from(error: reqwest::Error) -> Self {
        Self::Net(NetError::from(error))
    }
}

impl From<sse_stream::Error> for SseError {
    fn from(error: sse_stream::Error) -> Self {
        match error {
            // Our own byte-stream errors come back boxed by sse-stream; unwrap them.
            sse_stream::Error::Body(inner) => match inner.downcast::<SseError>() {
                Ok(ours) => *ours,
                Err(other) => Self::Malformed(sse_stream::Error::Body(other)),
            },
            other => Self::Malformed(other),
        }
    }
}

pub(crate) type Events = BoxStream<'static, Result<Sse, sse_stream::Error>>;

/// An open legacy SSE session; implements `Transport<RoleClient>`.
pub struct SseTransport {
    client: reqwest::Client,
    endpoint: Url,
    post_headers: HeaderMap,
    inbound: tokio::sync::mpsc::Receiver<ServerJsonRpcMessage>,
    posts: Arc<Semaphore>,
    cancel: CancellationToken,
    reader: Option<JoinHandle<()>>,
    /// Where notifications are counted as they are received
    /// ([`super::relay::RelayRegistry::announce`]).
    relays: Option<Arc<RelayRegistry>>,
    // Stops the reader and in-flight POSTs when the transport is dropped without `close`.
    _cancel_on_drop: DropGuard,
}

impl std::fmt::Debug for SseTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseTransport")
            .field("endpoint", &redacted(&self.endpoint))
            .finish()
    }
}

/// Opens the SSE stream with the caller's (SSRF-safe) client and waits for the endpoint event.
pub async fn connect(
    client: reqwest::Client,
    config: SseClientConfig,
) -> Result<SseTransport, SseError> {
    let after = config.endpoint_timeout;
    let (events, endpoint) = tokio::time::timeout(after, open(&client, &config))
        .await
        .map_err(|_| SseError::EndpointTimeout { after })??;

    let cancel = CancellationToken::new();
    let (tx, inbound) = tokio::sync::mpsc::channel(INBOUND_QUEUE);
    let reader = tokio::spawn(read_messages(events, tx, cancel.clone()));
    let mut post_headers = header_map(&config.headers);
    post_headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(SseTransport {
        client,
        endpoint,
        post_headers,
        inbound,
        posts: Arc::new(Semaphore::new(MAX_CONCURRENT_POSTS)),
        _cancel_on_drop: cancel.clone().drop_guard(),
        cancel,
        reader: Some(reader),
        relays: None,
    })
}

impl SseTransport {
    /// Counts each notification as being relayed from when it is received, for the call it
    /// belongs to in `relays`, so that the call's answer received after it waits for it.
    pub(super) fn announcing(mut self, relays: Arc<RelayRegistry>) -> SseTransport {
        self.relays = Some(relays);
        self
    }
}

/// Sends the GET, checks it is an event stream and reads up to the endpoint event.
async fn open(
    client: &reqwest::Client,
    config: &SseClientConfig,
) -> Result<(Events, Url), SseError> {
    let mut headers = header_map(&config.headers);
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    let response = client
        .get(config.url.clone())
        .headers(headers)
        .send()
        .await?;
    if response.status() != StatusCode::OK {
        return Err(SseError::Status {
            status: response.status().as_u16(),
        });
    }
    let content_type = response
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if !essence.eq_ignore_ascii_case("text/event-stream") {
        return Err(SseError::NotEventStream { content_type });
    }

    let mut events = bounded_events(response.bytes_stream(), config.max_event_bytes);
    while let Some(event) = events.next().await {
        let event = event?;
        if event.event.as_deref() != Some("endpoint") {
            tracing::debug!("ignoring SSE event before the endpoint event");
            continue;
        }
        let data = event.data.unwrap_or_default();
        let endpoint = config
            .url
            .join(data.trim())
            .map_err(|_| SseError::InvalidEndpoint)?;
        // A malicious or compromised server could name any URL here and make us POST our
        // messages (with the configured credentials) to a host it chooses: stay on our origin.
        if endpoint.origin() != config.url.origin() {
            return Err(SseError::CrossOriginEndpoint {
                endpoint_origin: endpoint.origin().ascii_serialization(),
            });
        }
        return Ok((events, endpoint));
    }
    Err(SseError::NoEndpoint)
}

/// A response body's `bytes` as SSE events, each refused once it passes `limit` bytes on the
/// wire.
pub(crate) fn bounded_events<S, E>(bytes: S, limit: usize) -> Events
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    SseError: From<E>,
{
    let mut budget = EventBudget::new(limit);
    let bytes = bytes.flat_map(move |chunk| {
        // Events before the oversized one in the same chunk still go through.
        let items = match chunk.map(|chunk| (budget.admit(&chunk), chunk)) {
            Err(error) => vec![Err(SseError::from(error))],
            Ok((Ok(()), chunk)) => vec![Ok(chunk)],
            Ok((Err(admitted), chunk)) => {
                vec![
                    Ok(chunk.slice(..admitted)),
                    Err(SseError::EventTooLarge { limit }),
                ]
            }
        };
        futures::stream::iter(items)
    });
    SseStream::from_bytes_stream(bytes).boxed()
}

/// Forwards server messages to `receive` until the stream ends, fails or is cancelled.
async fn read_messages(
    mut events: Events,
    tx: tokio::sync::mpsc::Sender<ServerJsonRpcMessage>,
    cancel: CancellationToken,
) {
    loop {
        let next = tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            next = events.next() => next,
        };
        let event = match next {
            None => return,
            Some(Ok(event)) => event,
            Some(Err(error)) => {
                tracing::warn!(error = %SseError::from(error), "SSE stream failed; closing");
                return;
            }
        };
        if !matches!(event.event.as_deref(), None | Some("message")) {
            tracing::debug!("ignoring SSE event that is not a message");
            continue;
        }
        let Some(data) = event.data else { continue };
        let message = match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
            Ok(message) => message,
            Err(error) => {
                tracing::warn!(%error, "ignoring SSE message that is not JSON-RPC");
                continue;
            }
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => return,
            sent = tx.send(message) => if sent.is_err() { return },
        }
    }
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let body = serde_json::to_vec(&item);
        let request = self
            .client
            .post(self.endpoint.clone())
            .headers(self.post_headers.clone())
            .timeout(POST_TIMEOUT);
        let posts = Arc::clone(&self.posts);
        let cancel = self.cancel.clone();
        async move {
            let request = request.body(body?);
            let post = async {
                let _permit = posts.acquire_owned().await.map_err(|_| SseError::Closed)?;
                let response = request.send().await?;
                match response.status() {
                    StatusCode::OK | StatusCode::ACCEPTED => Ok(()),
                    status => Err(SseError::PostStatus {
                        status: status.as_u16(),
                    }),
                }
            };
            tokio::select! {
                biased;
                () = cancel.cancelled() => Err(SseError::Closed),
                result = post => result,
            }
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        let mut message = self.inbound.recv().await?;
        if let Some(relays) = &self.relays {
            relays.announce_in(&mut message);
        }
        Some(message)
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.cancel.cancel();
        self.inbound.close();
        if let Some(reader) = self.reader.take() {
            // The reader only ends by returning (it never panics on input), so a join error
            // here can only be a panic elsewhere in it; nothing is left to clean up either way.
            if let Err(error) = reader.await {
                tracing::warn!(%error, "SSE reader task failed");
            }
        }
        Ok(())
    }
}

fn header_map(headers: &[(HeaderName, HeaderValue)]) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(headers.len() + 1);
    for (name, value) in headers {
        map.append(name.clone(), value.clone());
    }
    map
}

/// Counts the bytes of the event being received, so an event is refused before sse-stream
/// buffers more than the limit. An event ends at a blank line (`\n`, `\r` or `\r\n` twice).
struct EventBudget {
    limit: usize,
    used: usize,
    at_line_start: bool,
    after_cr: bool,
}

impl EventBudget {
    fn new(limit: usize) -> Self {
        Self {
            limit,
            used: 0,
            at_line_start: true,
            after_cr: false,
        }
    }

    /// Takes in a chunk; on overflow, returns how many of its bytes fit.
    fn admit(&mut self, chunk: &[u8]) -> Result<(), usize> {
        for (index, &byte) in chunk.iter().enumerate() {
            match byte {
                // The `\n` of a `\r\n`: the line already ended at the `\r`.
                b'\n' if self.after_cr => self.after_cr = false,
                b'\r' | b'\n' => {
                    if self.at_line_start {
                        self.used = 0;
                    } else {
                        self.at_line_start = true;
                        self.used += 1;
                    }
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.at_line_start = false;
                    self.after_cr = false;
                    self.used += 1;
                }
            }
            if self.used > self.limit {
                return Err(index);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
