//! The newline-delimited JSON-RPC transport to a stdio (or in-process) upstream. Sending is
//! rmcp's own; receiving reads lines here so that the message a gateway receives most, a
//! tool call's result, is decoded straight into its type. rmcp decodes every server result
//! through an untagged enum of twenty kinds, trying each in turn (a tool call's result comes
//! sixteenth) and building an error for every miss: about 45k instructions per call, a sixth
//! of the gateway's whole cost of a call. Everything else, and any result that is not plainly
//! a tool call's, is decoded as rmcp decodes it, with rmcp's rules for what is skipped.
//!
//! The writing side is shared ([`LineLink`]): rmcp's messages and the gateway's own tool calls
//! ([`LineLink::register`]) go out as whole lines, one writer at a time, and answers to the
//! gateway's own calls (ids `mcpgate-N`, never rmcp's numbers) are handed to their callers
//! here instead of to rmcp's service loop. A tool call sent this way skips that loop's channel,
//! its task per message and rmcp's generic encoding.

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{
        Arc, LazyLock, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
};

use rmcp::{
    RoleClient,
    model::{
        CallToolRequestParams, CallToolResult, ClientCapabilities, ContentBlock, ErrorData,
        JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, NumberOrString, ProgressToken,
        RequestId, RequestMetaObject, ResultType, ServerResult,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::Transport,
};
use serde::{Deserialize, de::IgnoredAny};
use serde_json::value::RawValue;
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader},
    sync::oneshot,
};

use super::relay::RelayRegistry;

/// Reads lines of at most `max_line` bytes (longer ones are dropped, as rmcp drops them) and
/// writes through the shared [`LineLink`].
pub(crate) struct LineTransport<R> {
    read: BufReader<R>,
    /// The line being read; kept across cancelled reads (`receive` is polled in a `select!`).
    line: Vec<u8>,
    max_line: usize,
    /// Dropping the rest of a line that was too long.
    discarding: bool,
    link: LineLink,
    /// Where notifications are counted as they are read ([`RelayRegistry::announce`]).
    relays: Option<Arc<RelayRegistry>>,
}

impl<R> LineTransport<R>
where
    R: AsyncRead + Send + Unpin,
{
    pub(crate) fn new<W>(read: R, write: W, max_line: usize) -> LineTransport<R>
    where
        W: AsyncWrite + Send + 'static,
    {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            max_line,
            discarding: false,
            link: LineLink {
                writer: Arc::new(LineWriter {
                    state: tokio::sync::Mutex::new(Some(WriteState {
                        io: Box::pin(write),
                        unsent: Vec::new(),
                    })),
                }),
                calls: Arc::new(DirectCalls {
                    next: AtomicU64::new(1),
                    waiting: Mutex::new(Some(HashMap::new())),
                }),
            },
            relays: None,
        }
    }

    /// Counts each notification as being relayed from when it is read, for the call it
    /// belongs to in `relays`, so that the call's answer read after it waits for it.
    pub(super) fn announcing(mut self, relays: Arc<RelayRegistry>) -> LineTransport<R> {
        self.relays = Some(relays);
        self
    }

    /// The connection's shared side, for tool calls sent without rmcp's service loop.
    pub(super) fn link(&self) -> LineLink {
        self.link.clone()
    }

    /// Reads until a whole line is in `self.line`. Cancel-safe: bytes are moved from the
    /// reader's buffer into `self.line` with no await in between.
    async fn read_line(&mut self) -> Line {
        loop {
            let (used, step) = {
                let available = match self.read.fill_buf().await {
                    Ok(available) => available,
                    Err(err) => return Line::Failed(err),
                };
                if available.is_empty() {
                    return Line::End;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |at| at + 1);
                if self.discarding {
                    (
                        take,
                        if newline.is_some() {
                            Step::Resume
                        } else {
                            Step::More
                        },
                    )
                } else if self.line.len().saturating_add(take) > self.max_line {
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Step::TooLong)
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (
                        take,
                        if newline.is_some() {
                            Step::Done
                        } else {
                            Step::More
                        },
                    )
                }
            };
            self.read.consume(used);
            match step {
                Step::Done => return Line::Read,
                Step::TooLong => return Line::TooLong,
                Step::Resume => self.discarding = false,
                Step::More => {}
            }
        }
    }
}

enum Line {
    Read,
    TooLong,
    End,
    Failed(std::io::Error),
}

enum Step {
    Done,
    More,
    Resume,
    TooLong,
}

impl<R> Transport<RoleClient> for LineTransport<R>
where
    R: AsyncRead + Send + Unpin,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let line = serde_json::to_vec(&item).map(|mut line| {
            line.push(b'\n');
            line
        });
        let writer = self.link.writer.clone();
        async move { writer.write_line(&line?).await }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read_line().await {
                Line::Read => {}
                Line::TooLong => {
                    tracing::error!(
                        max_line_bytes = self.max_line,
                        "an upstream message exceeded the line length limit; dropped"
                    );
                    continue;
                }
                Line::End => {
                    self.link.calls.close();
                    return None;
                }
                Line::Failed(err) => {
                    tracing::error!(error = %err, "reading from the upstream failed");
                    self.link.calls.close();
                    return None;
                }
            }
            let decoded = decode(trim(&self.line));
            self.line.clear();
            match decoded {
                Decoded::Message(mut message) => {
                    if let Some(relays) = &self.relays {
                        relays.announce_in(&mut message);
                    }
                    if let Some(message) = self.link.calls.answer(message) {
                        return Some(message);
                    }
                }
                Decoded::Skip => {}
                Decoded::Invalid => {
                    // Well-formed JSON that is no JSON-RPC message: answered as rmcp answers
                    // it. The send is a task of its own, so that a cancelled receive cannot
                    // cut the answer short.
                    let answer = TxJsonRpcMessage::<RoleClient>::error(
                        ErrorData::invalid_request("Invalid request", None),
                        None,
                    );
                    tokio::spawn(self.send(answer));
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.link.calls.close();
        let writer = self.link.writer.clone();
        async move {
            writer.state.lock().await.take();
            Ok(())
        }
    }
}

impl<R> Drop for LineTransport<R> {
    fn drop(&mut self) {
        // Calls still waiting learn at once that no answer will come.
        self.link.calls.close();
    }
}

/// The shared side of a line connection: its writer, and the tool calls the gateway sent
/// itself, waiting for their answers.
#[derive(Clone)]
pub(crate) struct LineLink {
    writer: Arc<LineWriter>,
    calls: Arc<DirectCalls>,
}

impl std::fmt::Debug for LineLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LineLink").finish_non_exhaustive()
    }
}

/// Prefix of the ids of the gateway's own requests (rmcp numbers its requests).
const DIRECT_ID_PREFIX: &str = "mcpgate-";

/// The id of the gateway's own request number `key` (a string: rmcp numbers its own), which
/// is also its progress token.
pub(super) fn direct_id(key: u64) -> RequestId {
    NumberOrString::String(format!("{DIRECT_ID_PREFIX}{key}").into())
}

impl LineLink {
    /// A call about to be sent: its id, and where its answer will come. `None` once the
    /// connection has ended.
    pub(super) fn register(&self) -> Option<DirectCall> {
        let key = self.calls.next.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        self.calls.lock().as_mut()?.insert(key, answer);
        Some(DirectCall {
            id: direct_id(key),
            key,
            calls: self.calls.clone(),
            receiver,
        })
    }

    /// Writes `call`'s `tools/call` request with `params`.
    pub(super) async fn send(
        &self,
        call: &DirectCall,
        params: &mut CallToolRequestParams,
    ) -> std::io::Result<()> {
        // Before 2026-07-28 a request's `_meta` carries only the progress token.
        static TOKEN_ONLY: LazyLock<CallMeta> = LazyLock::new(CallMeta::default);
        let mut line = request_json(&call.id, params, &TOKEN_ONLY, None)?;
        line.push(b'\n');
        self.writer.write_line(&line).await
    }
}

/// What the gateway writes into the `_meta` of each of its calls on one connection, beside
/// the caller's own entries: the progress token (the call's id), and on 2026-07-28 the
/// protocol version, the client and its capabilities. Serialized once per connection; they
/// replace the caller's entries of the same keys, as rmcp's setters do.
#[derive(Debug, Clone)]
pub(super) struct CallMeta {
    /// The progress token's key.
    token: String,
    /// The capabilities' key.
    capabilities: String,
    /// Each fixed entry's key and its `"key":value`.
    fixed: Vec<(String, Vec<u8>)>,
}

impl Default for CallMeta {
    /// No fixed entries: the progress token only.
    fn default() -> Self {
        CallMeta::new(&RequestMetaObject::new())
    }
}

impl CallMeta {
    /// Writes `fixed`'s entries (as its setters made them) into every call.
    pub(super) fn new(fixed: &RequestMetaObject) -> CallMeta {
        let key_of = |set: &dyn Fn(&mut RequestMetaObject)| {
            let mut meta = RequestMetaObject::new();
            set(&mut meta);
            meta.keys().next().cloned().unwrap_or_default()
        };
        let token =
            key_of(&|meta| meta.set_progress_token(ProgressToken(NumberOrString::Number(0))));
        let capabilities =
            key_of(&|meta| meta.set_client_capabilities(ClientCapabilities::default()));
        let fixed = fixed
            .iter()
            .filter(|(key, _)| **key != token)
            .filter_map(|(key, value)| {
                let mut entry = serde_json::to_vec(key).ok()?;
                entry.push(b':');
                serde_json::to_writer(&mut entry, value).ok()?;
                Some((key.clone(), entry))
            })
            .collect();
        CallMeta {
            token,
            capabilities,
            fixed,
        }
    }

    fn writes(&self, key: &str, capabilities: bool) -> bool {
        key == self.token
            || (capabilities && key == self.capabilities)
            || self.fixed.iter().any(|(fixed, _)| fixed == key)
    }
}

/// A `tools/call` request with id `id`, serialized as rmcp would send `params` after setting
/// `meta`'s entries, the progress token `id` and `capabilities` (when given) in its `_meta`,
/// but without changing or cloning `params`.
pub(super) fn request_json(
    id: &RequestId,
    params: &mut CallToolRequestParams,
    meta: &CallMeta,
    capabilities: Option<&ClientCapabilities>,
) -> std::io::Result<Vec<u8>> {
    // The caller's `_meta` is written after the rest, merged with ours.
    let callers = params.meta.take();
    let json = write_request(id, params, callers.as_ref(), meta, capabilities);
    params.meta = callers;
    json
}

fn write_request(
    id: &RequestId,
    params: &CallToolRequestParams,
    callers: Option<&RequestMetaObject>,
    meta: &CallMeta,
    capabilities: Option<&ClientCapabilities>,
) -> std::io::Result<Vec<u8>> {
    // A call with small arguments and the connection's `_meta` takes 300 to 500 bytes.
    let mut json = Vec::with_capacity(512);
    json.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    serde_json::to_writer(&mut json, id)?;
    json.extend_from_slice(br#","method":"tools/call","params":"#);
    serde_json::to_writer(&mut json, params)?;
    // Reopen the params object (it always has a name) to add `_meta`.
    if json.pop() != Some(b'}') {
        return Err(std::io::Error::other(
            "tool call parameters are not an object",
        ));
    }
    json.extend_from_slice(br#","_meta":{"#);
    serde_json::to_writer(&mut json, &meta.token)?;
    json.push(b':');
    serde_json::to_writer(&mut json, id)?;
    for (key, entry) in &meta.fixed {
        if capabilities.is_some() && *key == meta.capabilities {
            continue;
        }
        json.push(b',');
        json.extend_from_slice(entry);
    }
    if let Some(capabilities) = capabilities {
        json.push(b',');
        serde_json::to_writer(&mut json, &meta.capabilities)?;
        json.push(b':');
        serde_json::to_writer(&mut json, capabilities)?;
    }
    for (key, value) in callers.iter().flat_map(|callers| callers.iter()) {
        if meta.writes(key, capabilities.is_some()) {
            continue;
        }
        json.push(b',');
        serde_json::to_writer(&mut json, key)?;
        json.push(b':');
        serde_json::to_writer(&mut json, value)?;
    }
    json.extend_from_slice(b"}}}");
    Ok(json)
}

/// One of the gateway's own calls, registered until its answer comes or it is dropped.
pub(super) struct DirectCall {
    pub(super) id: RequestId,
    key: u64,
    calls: Arc<DirectCalls>,
    receiver: oneshot::Receiver<RxJsonRpcMessage<RoleClient>>,
}

impl DirectCall {
    /// The answer (a response or an error); `None` if the connection ended first.
    pub(super) async fn answer(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        (&mut self.receiver).await.ok()
    }
}

impl Drop for DirectCall {
    fn drop(&mut self) {
        if let Some(waiting) = self.calls.lock().as_mut() {
            waiting.remove(&self.key);
        }
    }
}

struct DirectCalls {
    next: AtomicU64,
    /// Calls waiting for their answers; `None` once the connection has ended.
    waiting: Mutex<Option<HashMap<u64, oneshot::Sender<RxJsonRpcMessage<RoleClient>>>>>,
}

impl DirectCalls {
    fn lock(
        &self,
    ) -> MutexGuard<'_, Option<HashMap<u64, oneshot::Sender<RxJsonRpcMessage<RoleClient>>>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands an answer to one of the gateway's own calls to its caller (or drops it, if the
    /// caller is gone); anything else is given back, for rmcp.
    fn answer(
        &self,
        message: RxJsonRpcMessage<RoleClient>,
    ) -> Option<RxJsonRpcMessage<RoleClient>> {
        let id = match &message {
            JsonRpcMessage::Response(response) => Some(&response.id),
            JsonRpcMessage::Error(error) => error.id.as_ref(),
            _ => None,
        };
        let Some(NumberOrString::String(id)) = id else {
            return Some(message);
        };
        let Some(key) = id
            .strip_prefix(DIRECT_ID_PREFIX)
            .and_then(|key| key.parse::<u64>().ok())
        else {
            return Some(message);
        };
        let answer = self
            .lock()
            .as_mut()
            .and_then(|waiting| waiting.remove(&key));
        match answer {
            Some(answer) => {
                let _ = answer.send(message);
            }
            None => tracing::debug!(id = %id, "an answer to an abandoned call; dropped"),
        }
        None
    }

    /// The connection ended: calls waiting now, or registered later, get no answer.
    fn close(&self) {
        self.lock().take();
    }
}

/// The writing side, one line at a time.
struct LineWriter {
    /// `None` once closed.
    state: tokio::sync::Mutex<Option<WriteState>>,
}

struct WriteState {
    io: Pin<Box<dyn AsyncWrite + Send>>,
    /// Bytes of lines taken but not yet written. A writer cancelled part way through its line
    /// leaves the rest here and the next writer finishes it first, so lines never interleave.
    unsent: Vec<u8>,
}

impl LineWriter {
    async fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let mut state = self.state.lock().await;
        let Some(state) = state.as_mut() else {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "the upstream connection is closed",
            ));
        };
        state.unsent.extend_from_slice(line);
        while !state.unsent.is_empty() {
            let written = state.io.write(&state.unsent).await?;
            if written == 0 {
                return Err(std::io::ErrorKind::WriteZero.into());
            }
            state.unsent.drain(..written);
        }
        state.io.flush().await
    }
}

/// The line without its newline, carriage return or UTF-8 byte order mark.
pub(crate) fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "made and taken apart at once; boxing would add an allocation per message"
)]
pub(crate) enum Decoded {
    Message(RxJsonRpcMessage<RoleClient>),
    /// Empty, not JSON, or a notification rmcp ignores.
    Skip,
    /// JSON that is not a message.
    Invalid,
}

pub(crate) fn decode(line: &[u8]) -> Decoded {
    if line.is_empty() {
        return Decoded::Skip;
    }
    if let Some(message) = call_result(line) {
        return Decoded::Message(message);
    }
    match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
        Ok(message) => Decoded::Message(message),
        Err(err) => match err.classify() {
            // Not JSON: nothing to correlate an answer with, and answering garbage can start
            // an error storm.
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                tracing::debug!(error = %err, "ignoring an unparsable upstream message");
                Decoded::Skip
            }
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                if ignored_notification(line) {
                    Decoded::Skip
                } else {
                    tracing::debug!(error = %err, "an upstream message is no JSON-RPC message");
                    Decoded::Invalid
                }
            }
        },
    }
}

/// A response whose result has a tool call result's fields and no others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Response<'a> {
    #[expect(dead_code, reason = "checked by deserializing: must be \"2.0\"")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(borrow)]
    result: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CallResultFields<'a> {
    #[expect(dead_code, reason = "present: required of the fast path")]
    content: IgnoredAny,
    #[serde(default, rename = "structuredContent")]
    _structured_content: Option<IgnoredAny>,
    #[serde(default, rename = "isError")]
    _is_error: Option<IgnoredAny>,
    #[serde(default, rename = "_meta")]
    _meta: Option<IgnoredAny>,
    #[serde(default, borrow)]
    result_type: Option<&'a str>,
}

/// The commonest tool result of all: text parts only (`{"type":"text","text":...}`, nothing
/// else), perhaps `isError`. Decoded in one pass; rmcp decodes each part through its tagged
/// content enum, buffering it first.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct TextResult {
    content: Vec<TextPart>,
    is_error: Option<bool>,
    /// `complete` only (every 2026-07-28 result names its type); any other is left to rmcp.
    result_type: Option<Complete>,
}

#[derive(Deserialize)]
enum Complete {
    #[serde(rename = "complete")]
    Complete,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TextPart {
    #[serde(rename = "type")]
    _kind: TextKind,
    text: String,
}

#[derive(Deserialize)]
enum TextKind {
    #[serde(rename = "text")]
    Text,
}

impl TextResult {
    /// The result exactly as rmcp decodes it: the result type if named, no metadata or
    /// structured content.
    fn into_result(self) -> CallToolResult {
        let content = self
            .content
            .into_iter()
            .map(|part| ContentBlock::text(part.text))
            .collect();
        let mut result = CallToolResult::success(content);
        result.result_type = self
            .result_type
            .map(|Complete::Complete| ResultType::COMPLETE);
        result.is_error = self.is_error;
        result
    }
}

/// `line` decoded as a tool call's result, if it plainly is one: a response whose result has
/// `content`, only the fields of a tool call's result, and no `resultType` but `complete`.
/// rmcp's untagged decoding gives such a result the same type; anything else is left to it.
fn call_result(line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    let response: Response<'_> = serde_json::from_slice(line).ok()?;
    let result = match serde_json::from_str::<TextResult>(response.result.get()) {
        Ok(text) => text.into_result(),
        Err(_) => {
            let fields: CallResultFields<'_> = serde_json::from_str(response.result.get()).ok()?;
            if fields.result_type.is_some_and(|kind| kind != "complete") {
                return None;
            }
            serde_json::from_str::<CallToolResult>(response.result.get()).ok()?
        }
    };
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id: response.id,
        result: ServerResult::CallToolResult(result),
    }))
}

/// Notifications rmcp skips rather than answers when they do not decode: any with a method
/// outside MCP's, and non-standard `notifications/...`.
fn ignored_notification(line: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return false;
    };
    let Some(method) = value.get("method").and_then(serde_json::Value::as_str) else {
        return false;
    };
    (value.get("id").is_none() && !standard_method(method))
        || (method.starts_with("notifications/") && !standard_notification(method))
}

fn standard_method(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "server/discover"
            | "prompts/get"
            | "prompts/list"
            | "resources/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "resources/templates/list"
            | "subscriptions/listen"
            | "tools/call"
            | "tools/list"
            | "completion/complete"
            | "elicitation/create"
            | "logging/setLevel"
            | "roots/list"
            | "sampling/createMessage"
    ) || standard_notification(method)
}

fn standard_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/initialized"
            | "notifications/message"
            | "notifications/progress"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
            | "notifications/roots/list_changed"
            | "notifications/subscriptions/acknowledged"
            | "notifications/tools/list_changed"
    )
}

#[cfg(test)]
#[path = "line_transport_tests.rs"]
mod tests;
