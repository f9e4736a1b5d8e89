//! [`LlmClient`]: one chat completions request over a plain `reqwest` client (the base URL is
//! operator configuration, typically a local model server, so not the SSRF-guarded client),
//! with no redirects, connect/request/idle deadlines and a byte cap on the response.

use std::{collections::VecDeque, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt, stream::BoxStream};
use http::{HeaderMap, HeaderName, HeaderValue, header};
use serde_json::Value;
use tokio::time::Instant;

use super::{
    ChatRequest, Completion, LlmError, LlmEvent, TimeoutPhase, accumulate::Accumulator,
    error::redact, sse::SseParser, wire,
};
use crate::config::LlmConfig;

/// How much of an error body is read, and how much of its message is kept.
const ERROR_BODY_BYTES: usize = 8 * 1024;
const ERROR_MESSAGE_CHARS: usize = 400;

/// A chat completions client; cheap to clone (one connection pool shared by the clones).
#[derive(Clone)]
pub struct LlmClient {
    inner: Arc<Inner>,
}

struct Inner {
    config: LlmConfig,
    http: reqwest::Client,
    endpoint: url::Url,
    headers: HeaderMap,
    /// Values never to show in an error: the API key and configured header values.
    secrets: Vec<String>,
}

impl std::fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmClient")
            .field("endpoint", &self.inner.endpoint.as_str())
            .field("model", &self.inner.config.model)
            .finish_non_exhaustive()
    }
}

impl LlmClient {
    /// Builds the client; fails on a header that is not valid HTTP.
    pub fn new(config: LlmConfig) -> Result<LlmClient, LlmError> {
        let config_error = |detail: String| LlmError::Config { detail };
        let endpoint = format!(
            "{}/chat/completions",
            config.base_url.as_str().trim_end_matches('/')
        )
        .parse::<url::Url>()
        .map_err(|e| config_error(format!("base URL: {e}")))?;
        let mut headers = HeaderMap::new();
        let mut secrets = Vec::new();
        for (name, secret) in &config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| config_error(format!("header `{name}` is not a valid name")))?;
            let mut value = HeaderValue::from_str(secret.expose())
                .map_err(|_| config_error(format!("header `{name}` has an invalid value")))?;
            value.set_sensitive(true);
            headers.insert(name, value);
            secrets.push(secret.expose().to_owned());
        }
        if let Some(key) = &config.api_key {
            let mut value = HeaderValue::from_str(&format!("Bearer {}", key.expose()))
                .map_err(|_| config_error("the API key is not a valid header value".into()))?;
            value.set_sensitive(true);
            headers.insert(header::AUTHORIZATION, value);
            secrets.push(key.expose().to_owned());
        }
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(config.connect_timeout);
        // System proxies serve remote APIs; a model server on this machine is reached directly.
        if is_loopback(&config.base_url) {
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|e| config_error(format!("HTTP client: {e}")))?;
        Ok(LlmClient {
            inner: Arc::new(Inner {
                config,
                http,
                endpoint,
                headers,
                secrets,
            }),
        })
    }

    pub fn config(&self) -> &LlmConfig {
        &self.inner.config
    }

    /// Streams one response; the last `Ok` item is [`LlmEvent::Finished`], and nothing
    /// follows an error. Dropping the stream aborts the HTTP request.
    pub fn stream(&self, request: &ChatRequest) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
        let config = &self.inner.config;
        let body = wire::request_body(&config.model, request, config.stream, config.tools);
        let run = Run {
            inner: Arc::clone(&self.inner),
            phase: Phase::Start(body),
            pending: VecDeque::new(),
            deadline: None,
        };
        futures::stream::unfold(run, |mut run| async move {
            run.next().await.map(|item| (item, run))
        })
        .boxed()
    }

    /// The whole response (streamed or not, per `config.stream`).
    pub async fn complete(&self, request: &ChatRequest) -> Result<Completion, LlmError> {
        let mut events = self.stream(request);
        while let Some(event) = events.next().await {
            if let LlmEvent::Finished(completion) = event? {
                return Ok(completion);
            }
        }
        Err(LlmError::bad_response(
            "the response ended without finishing",
        ))
    }
}

/// One request in progress.
struct Run {
    inner: Arc<Inner>,
    phase: Phase,
    pending: VecDeque<LlmEvent>,
    /// Set when the request is sent: `request_timeout` from then.
    deadline: Option<Instant>,
}

enum Phase {
    Start(Result<Value, LlmError>),
    Streaming(Box<Streaming>),
    Done,
}

struct Streaming {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    received: usize,
    sse: SseParser,
    acc: Accumulator,
}

impl Run {
    async fn next(&mut self) -> Option<Result<LlmEvent, LlmError>> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some(Ok(event));
            }
            let step = match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Start(body) => match body {
                    Ok(body) => self.open(body).await,
                    Err(error) => Err(error),
                },
                Phase::Streaming(mut streaming) => self
                    .read(&mut streaming)
                    .await
                    .map(|more| more.then_some(Phase::Streaming(streaming))),
            };
            match step {
                Ok(Some(phase)) => self.phase = phase,
                Ok(None) => {}
                Err(error) => return Some(Err(error)),
            }
        }
    }

    /// Sends the request; a JSON answer is read whole, an event stream is read on demand.
    async fn open(&mut self, body: Value) -> Result<Option<Phase>, LlmError> {
        let inner = Arc::clone(&self.inner);
        let config = &inner.config;
        let deadline = Instant::now() + config.request_timeout;
        self.deadline = Some(deadline);
        let accept = if config.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        let mut headers = inner.headers.clone();
        headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
        let send = inner
            .http
            .post(inner.endpoint.clone())
            .headers(headers)
            .json(&body)
            .send();
        let response = tokio::time::timeout_at(deadline, send)
            .await
            .map_err(|_| timeout(&inner, TimeoutPhase::Request))?
            .map_err(|e| transport_error(&inner, &e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(status_error(&inner, deadline, response).await);
        }
        let is_stream = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("text/event-stream"));
        let mut streaming = Box::new(Streaming {
            body: response.bytes_stream().boxed(),
            received: 0,
            sse: SseParser::new(),
            acc: Accumulator::new(),
        });
        if is_stream {
            return Ok(Some(Phase::Streaming(streaming)));
        }
        // A whole JSON body: asked for, or sent by a server that ignores `stream: true`.
        let mut whole = Vec::new();
        while let Some(bytes) = next_bytes(&inner, deadline, &mut streaming).await? {
            whole.extend_from_slice(&bytes);
        }
        let value: Value = serde_json::from_slice(&whole)
            .map_err(|_| LlmError::bad_response("the response body is not JSON"))?;
        let mut acc = Accumulator::new();
        self.pending.extend(acc.push_body(&value)?);
        self.pending.push_back(LlmEvent::Finished(acc.finish()));
        Ok(None)
    }

    /// Reads the next piece of the event stream; `false` once the response is finished.
    async fn read(&mut self, streaming: &mut Streaming) -> Result<bool, LlmError> {
        let Some(bytes) = next_bytes(
            &self.inner,
            self.deadline.unwrap_or_else(Instant::now),
            streaming,
        )
        .await?
        else {
            if let Some(data) = streaming.sse.finish()?
                && self.event(streaming, &data)?
            {
                return Ok(false);
            }
            if !streaming.acc.has_finish_reason() {
                return Err(LlmError::bad_response(
                    "the stream ended before the response finished",
                ));
            }
            self.finish(streaming);
            return Ok(false);
        };
        for data in streaming.sse.push(&bytes)? {
            if self.event(streaming, &data)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Handles one event's data; `true` at `[DONE]` (the response is then finished).
    fn event(&mut self, streaming: &mut Streaming, data: &str) -> Result<bool, LlmError> {
        let data = data.trim();
        if data == "[DONE]" {
            self.finish(streaming);
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Value = serde_json::from_str(data)
            .map_err(|_| LlmError::bad_response("a stream event is not JSON"))?;
        self.pending.extend(streaming.acc.push_chunk(&chunk)?);
        Ok(false)
    }

    fn finish(&mut self, streaming: &mut Streaming) {
        let acc = std::mem::take(&mut streaming.acc);
        self.pending.push_back(LlmEvent::Finished(acc.finish()));
    }
}

/// The next bytes of the body within the idle and request deadlines and the byte cap.
async fn next_bytes(
    inner: &Inner,
    deadline: Instant,
    streaming: &mut Streaming,
) -> Result<Option<Bytes>, LlmError> {
    let config = &inner.config;
    let idle = Instant::now() + config.idle_timeout;
    let next = tokio::time::timeout_at(idle.min(deadline), streaming.body.next())
        .await
        .map_err(|_| {
            timeout(
                inner,
                if idle < deadline {
                    TimeoutPhase::Idle
                } else {
                    TimeoutPhase::Request
                },
            )
        })?;
    let Some(bytes) = next.transpose().map_err(|e| transport_error(inner, &e))? else {
        return Ok(None);
    };
    streaming.received += bytes.len();
    if streaming.received > config.max_response_bytes {
        return Err(LlmError::TooLarge {
            limit: config.max_response_bytes,
        });
    }
    Ok(Some(bytes))
}

fn timeout(inner: &Inner, phase: TimeoutPhase) -> LlmError {
    let config = &inner.config;
    LlmError::Timeout {
        phase,
        after: match phase {
            TimeoutPhase::Connect => config.connect_timeout,
            TimeoutPhase::Request => config.request_timeout,
            TimeoutPhase::Idle => config.idle_timeout,
        },
    }
}

fn transport_error(inner: &Inner, error: &reqwest::Error) -> LlmError {
    if error.is_timeout() {
        // Only the connect timeout is reqwest's; the other deadlines are ours.
        return timeout(inner, TimeoutPhase::Connect);
    }
    let detail = redact(&describe(error), &inner.secrets, ERROR_MESSAGE_CHARS);
    if error.is_body() || error.is_decode() {
        LlmError::Unreachable {
            detail: format!("the connection broke during the response: {detail}"),
        }
    } else {
        LlmError::Unreachable { detail }
    }
}

/// A non-success status, with the server's message (bounded read, redacted, cut).
async fn status_error(inner: &Inner, deadline: Instant, response: reqwest::Response) -> LlmError {
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get(header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while body.len() < ERROR_BODY_BYTES {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(bytes))) => body.extend_from_slice(&bytes),
            _ => break,
        }
    }
    body.truncate(ERROR_BODY_BYTES);
    let text = String::from_utf8_lossy(&body);
    let message = match serde_json::from_str::<Value>(&text) {
        Ok(value) => value.get("error").map_or_else(
            || {
                value
                    .get("message")
                    .or_else(|| value.get("detail"))
                    .and_then(Value::as_str)
                    .map_or_else(|| value.to_string(), str::to_owned)
            },
            super::accumulate::error_message,
        ),
        Err(_) => text.trim().to_owned(),
    };
    LlmError::Status {
        status,
        message: redact(&message, &inner.secrets, ERROR_MESSAGE_CHARS),
        retry_after,
    }
}

/// The error and its sources, joined (reqwest's own message alone says little). URLs are
/// stripped: operator config, but no business of the model's.
fn describe(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(inner) = source {
        let part = inner.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = inner.source();
    }
    text
}

fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(domain)) => domain.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}
