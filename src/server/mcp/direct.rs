//! `tools/call` in a session answered on the HTTP request's own task.
//!
//! rmcp serves a session's request through the session's worker task, its service loop, a
//! task of its own for the handler, and back the same way, and answers with an event
//! stream: at concurrency 1 that is most of what `/mcp` added over the REST API. A
//! `tools/call` that can need nothing of the client while it runs is answered here instead,
//! by the same handler code ([`SessionCore::call_tool`]) and the same gate.
//!
//! Such a call is one whose client declared no capability the gateway could use during it
//! (roots, sampling, elicitation: so no request goes to the client, and a write tool's
//! confirmation is out of band). The answer is JSON (which the transport allows for any
//! request) when the call sends nothing before it;
//! once the upstream reports progress (and the call asked for it), the answer becomes an
//! event stream: the progress notifications as they come, then the answer. The log messages
//! an upstream sends during a call go to the session's standalone stream, as rmcp routes
//! them. Everything else (other methods, resumption, unknown sessions, headers rmcp would
//! have to check, a body without a length or over the limit) goes to rmcp as it came, but
//! for a request from a caller other than the one who opened the session it names: that is
//! refused here, since rmcp's own handling (streams, `DELETE`, notifications) knows no
//! callers. [`CappedSessions`] knows each session's opener from `initialize` on, so that
//! holds before the session is initialized too.
//!
//! rmcp closes a session that received nothing for a while (`[server] mcp_session_idle`);
//! calls answered here do not reach it, so one of them tells the session it is in use as
//! often as five times in that while.

use std::{
    borrow::Cow,
    collections::HashMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, Weak},
    time::Duration,
};

use axum::{
    body::Body,
    extract::Request,
    http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use bytes::Bytes;
use futures::StreamExt as _;
use http_body_util::{BodyExt as _, Limited};
use rmcp::{
    RoleServer,
    model::{
        CallToolRequestParams, ClientNotification, CustomNotification, JsonRpcMessage,
        JsonRpcVersion2_0, ProtocolVersion, RequestId, ServerJsonRpcMessage, ServerNotification,
        ServerResult,
    },
    service::RequestContext,
    transport::streamable_http_server::{SessionId, SessionManager as _},
};
use serde::Deserialize;
use tokio::{sync::mpsc, time::Instant};

use super::{
    handler::{NOT_OWNER, SESSION_ID_HEADER, SessionCore},
    sessions::CappedSessions,
};
use crate::{policy::CallContext, server::errors::ApiError};

/// How many times per idle period a session whose calls are answered here is shown to rmcp
/// as in use, at most: often enough that a late one is still in time.
const TOUCHES_PER_IDLE: u32 = 5;
/// The method of the notification that shows a session as in use; the handler ignores it.
const TOUCH_METHOD: &str = "notifications/mcpgate/in_use";
// Headers the direct path reads, as names: a lookup by string parses the name first.
/// Header naming the protocol version of the request.
const PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// Header of a request resuming a stream.
const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");
/// The standard headers (SEP-2243) naming a request's method and its tool.
const MCP_METHOD: HeaderName = HeaderName::from_static("mcp-method");
const MCP_NAME: HeaderName = HeaderName::from_static("mcp-name");
/// Progress notifications of one call waiting for its client to read them (as rmcp's
/// request streams: the upstream's side waits when the client does not read).
const PROGRESS_QUEUE: usize = 16;

/// Where a call answered here sends its progress: its own answer, which becomes an event
/// stream. In the call's request extensions; [`ClientRelay`](super::relay::ClientRelay)
/// takes it.
#[derive(Clone)]
pub struct CallStream(mpsc::Sender<ServerNotification>);

impl CallStream {
    /// Sends `notification` to the call's client; `false` when the client is gone.
    pub async fn send(&self, notification: ServerNotification) -> bool {
        self.0.send(notification).await.is_ok()
    }
}

/// What a call answered here sends its client, in order: its progress, then its answer.
struct Flow {
    call: Option<Pin<Box<dyn Future<Output = ServerJsonRpcMessage> + Send>>>,
    /// The answer, once the call gave it, until the progress sent before it has gone.
    answer: Option<ServerJsonRpcMessage>,
    notes: mpsc::Receiver<ServerNotification>,
}

impl Flow {
    async fn next(mut self) -> Option<(ServerJsonRpcMessage, Flow)> {
        loop {
            if self.call.is_none() && self.answer.is_none() {
                return None;
            }
            if let Ok(note) = self.notes.try_recv() {
                return Some((JsonRpcMessage::notification(note), self));
            }
            if let Some(answer) = self.answer.take() {
                return Some((answer, self));
            }
            let call = self.call.as_mut()?;
            let answer = tokio::select! {
                biased;
                note = self.notes.recv() => match note {
                    Some(note) => return Some((JsonRpcMessage::notification(note), self)),
                    // Every sender is gone: nothing more comes before the answer.
                    None => call.as_mut().await,
                },
                answer = call.as_mut() => answer,
            };
            self.call = None;
            self.answer = Some(answer);
        }
    }
}

/// The sessions of one endpoint whose `tools/call` may be answered here.
pub struct Direct {
    sessions: Mutex<HashMap<SessionId, Entry>>,
    manager: Arc<CappedSessions>,
    max_body_bytes: usize,
    /// How often a session is shown to rmcp as in use; `None` when sessions never idle out.
    touch_every: Option<Duration>,
}

struct Entry {
    core: Weak<SessionCore>,
    /// When rmcp last heard of the session because of a call answered here.
    touched: Instant,
}

impl Direct {
    pub fn new(manager: Arc<CappedSessions>, max_body_bytes: usize) -> Direct {
        Direct {
            sessions: Mutex::new(HashMap::new()),
            touch_every: manager.idle().map(|idle| idle / TOUCHES_PER_IDLE),
            manager,
            max_body_bytes,
        }
    }

    /// Adds an initialized session.
    pub fn insert(&self, id: SessionId, core: &Arc<SessionCore>) {
        let entry = Entry {
            core: Arc::downgrade(core),
            touched: Instant::now(),
        };
        self.lock().insert(id, entry);
    }

    /// Removes a session that ended.
    pub fn remove(&self, id: &SessionId) {
        self.lock().remove(id);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Entry>> {
        self.sessions.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The session `headers` name, if it is here; shows it to rmcp as in use when due.
    fn session(&self, headers: &HeaderMap) -> Option<Arc<SessionCore>> {
        let id = headers.get(&SESSION_ID_HEADER)?.to_str().ok()?;
        let mut sessions = self.lock();
        let entry = sessions.get_mut(id)?;
        let core = entry.core.upgrade()?;
        if self
            .touch_every
            .is_some_and(|every| entry.touched.elapsed() >= every)
        {
            entry.touched = Instant::now();
            let (id, manager): (SessionId, _) = (id.into(), self.manager.clone());
            tokio::spawn(async move {
                let touch = ClientNotification::CustomNotification(CustomNotification::new(
                    TOUCH_METHOD,
                    None,
                ));
                let message = JsonRpcMessage::notification(touch);
                if let Err(err) = manager.accept_message(&id, message).await {
                    tracing::debug!(error = %err, "an MCP session could not be shown in use");
                }
            });
        }
        Some(core)
    }

    /// Answers `request` here if it is a `tools/call` this module may answer; otherwise
    /// gives it back as it came (its body read into memory) for rmcp.
    ///
    /// Any request naming a session here that another caller opened (a `GET` stream, a
    /// `DELETE`, a notification as much as a call) is refused: rmcp's own handling of those
    /// knows no callers.
    pub async fn answer(&self, request: Request) -> Result<Response, Request> {
        let caller = request.extensions().get::<Arc<CallContext>>();
        let Some(core) = self.session(request.headers()) else {
            // Not (yet) answered here: a session still being initialized, or one rmcp
            // does not know. Its opener, if it has one, is the only caller it serves.
            let another = request
                .headers()
                .get(&SESSION_ID_HEADER)
                .and_then(|id| id.to_str().ok())
                .zip(caller)
                .is_some_and(|(id, caller)| self.manager.opened_by_another(id, caller));
            return if another {
                Ok(not_owner())
            } else {
                Err(request)
            };
        };
        if caller.is_some_and(|caller| core.opened_by_another(caller)) {
            return Ok(not_owner());
        }
        if !self.eligible(&request) {
            return Err(request);
        }
        let (parts, body) = request.into_parts();
        let bytes = match Limited::new(body, self.max_body_bytes).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(_) => {
                return Ok((
                    StatusCode::BAD_REQUEST,
                    "the request body could not be read",
                )
                    .into_response());
            }
        };
        let Some((id, params, mut context)) = call_here(&core, &parts.headers, &bytes) else {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        context.extensions.insert(parts);
        // Progress can go only to a call that asked for it (with a token); any other call
        // answers with JSON, and needs no channel.
        let notes = context.meta.get_progress_token().is_some().then(|| {
            let (progress, notes) = mpsc::channel(PROGRESS_QUEUE);
            context.extensions.insert(CallStream(progress));
            notes
        });
        let current = is_2026_07_28_or_later(&context);
        let call = async move {
            let _cancellable = core.answering(id.clone(), context.ct.clone());
            match core.call_tool(params, context).await {
                Ok(response) => {
                    JsonRpcMessage::response(for_version(ServerResult::from(response), current), id)
                }
                Err(error) => JsonRpcMessage::error(error, Some(id)),
            }
        };
        let Some(notes) = notes else {
            return Ok(json_answer(&call.await));
        };
        let flow = Flow {
            call: Some(Box::pin(call)),
            answer: None,
            notes,
        };
        let mut messages = Box::pin(futures::stream::unfold(flow, Flow::next));
        // The call runs here until it answers or reports progress.
        Ok(match messages.next().await {
            Some(answer @ (JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_))) => {
                json_answer(&answer)
            }
            Some(first) => event_stream(futures::stream::iter([first]).chain(messages)),
            None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
        })
    }

    /// A POST with a JSON body of known length within the limit, that accepts the
    /// transport's two answers and resumes nothing.
    fn eligible(&self, request: &Request) -> bool {
        if request.method() != http::Method::POST {
            return false;
        }
        let headers = request.headers();
        let length = headers
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        length.is_some_and(|length| length <= self.max_body_bytes)
            && !headers.contains_key(&LAST_EVENT_ID)
            && is_json(headers.get(header::CONTENT_TYPE))
            && accepts_both(headers)
    }
}

/// The `tools/call` in `body` with its context, when it is one this module answers: the
/// call's id, its parameters, and the context rmcp's service loop would give it.
fn call_here(
    core: &SessionCore,
    headers: &HeaderMap,
    body: &[u8],
) -> Option<(RequestId, CallToolRequestParams, RequestContext<RoleServer>)> {
    let CallBody {
        id,
        method,
        mut params,
        ..
    } = serde_json::from_slice::<CallBody<'_>>(body).ok()?;
    if method != "tools/call" {
        return None;
    }
    // As rmcp's service loop does: the request's `_meta` moves to the context.
    let mut context = RequestContext::new(id.clone(), core.peer.get()?.clone());
    if let Some(meta) = params.meta.take() {
        context.meta = meta;
    }
    let eligible = standard_headers_agree(headers, &params.name)
        && needs_nothing_of_the_client(&context, headers.get(&PROTOCOL_VERSION));
    eligible.then_some((id, params, context))
}

/// A JSON-RPC request with the members of a `tools/call`, read in one pass. rmcp reads a
/// message as an untagged enum of flattened ones, which buffers the body several times over
/// (a fifth of the direct path's own time at concurrency 1); anything this does not read
/// goes to rmcp, which reads it as it always does.
#[derive(Deserialize)]
struct CallBody<'a> {
    #[serde(rename = "jsonrpc")]
    _version: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(borrow)]
    method: Cow<'a, str>,
    params: CallToolRequestParams,
}

/// The refusal of a request naming a session another caller opened.
pub(super) fn not_owner() -> Response {
    ApiError::new(StatusCode::FORBIDDEN, "forbidden", NOT_OWNER).into_response()
}

/// `Content-Type: application/json` (any parameters).
pub(super) fn is_json(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split_once(';').map_or(v, |(essence, _)| essence).trim())
        .is_some_and(|essence| essence.eq_ignore_ascii_case("application/json"))
}

/// `Accept` names both answers the transport may give, without weights (a weight of zero
/// refuses a type; rmcp reads those).
fn accepts_both(headers: &HeaderMap) -> bool {
    let (mut json, mut events) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        for range in value.split(',') {
            let mut fields = range.split(';');
            let essence = fields.next().unwrap_or_default().trim();
            if fields.any(|p| p.trim().to_ascii_lowercase().starts_with("q=")) {
                return false;
            }
            json |= essence.eq_ignore_ascii_case("application/json");
            events |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && events
}

/// The request's standard headers (SEP-2243) are absent or say what its body says; rmcp
/// checks any other case.
fn standard_headers_agree(headers: &HeaderMap, tool: &str) -> bool {
    let names_the = |name: &HeaderName, expected: &str| {
        let mut values = headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (None, _) => true,
            (Some(value), None) => value.as_bytes() == expected.as_bytes(),
            (Some(_), Some(_)) => false,
        }
    };
    names_the(&MCP_METHOD, "tools/call")
        && names_the(&MCP_NAME, tool)
        && !headers
            .keys()
            .any(|name| name.as_str().starts_with("mcp-param-"))
}

/// The call can need nothing of the client while it runs: the client declared no roots,
/// sampling or elicitation, and speaks the session's protocol version (in the header, if
/// sent, and not per request).
fn needs_nothing_of_the_client(
    context: &RequestContext<RoleServer>,
    version: Option<&HeaderValue>,
) -> bool {
    let Some(info) = context.peer.peer_info() else {
        return false;
    };
    let same_version =
        version.is_none_or(|v| v.as_bytes() == info.protocol_version.as_str().as_bytes());
    let asks_nothing = context
        .client_capabilities()
        .is_some_and(|c| c.roots.is_none() && c.sampling.is_none() && c.elicitation.is_none());
    same_version && asks_nothing && context.meta.protocol_version().is_none()
}

/// Whether the session speaks 2026-07-28 or later (ISO dates compare as strings do).
fn is_2026_07_28_or_later(context: &RequestContext<RoleServer>) -> bool {
    context
        .protocol_version()
        .is_some_and(|v| v.as_str() >= ProtocolVersion::V_2026_07_28.as_str())
}

/// A result in the shape of the session's version, as rmcp's own handling gives it: an
/// older client gets no `resultType` and no non-object structured output (fields of
/// 2026-07-28), a current one the caching hints its version requires.
fn for_version(mut result: ServerResult, current: bool) -> ServerResult {
    if current {
        result.fill_missing_cache_hints();
    } else {
        result.strip_result_type_for_legacy_peer();
        result.strip_non_object_output_for_legacy_peer();
    }
    result
}

/// `message` as the JSON answer to a POST.
fn json_answer(message: &ServerJsonRpcMessage) -> Response {
    match serde_json::to_vec(message) {
        Ok(body) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            Bytes::from(body),
        )
            .into_response(),
        Err(err) => {
            tracing::error!(error = %err, "an MCP answer could not be written");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// `messages` as a `text/event-stream` answer, one event each.
fn event_stream(
    messages: impl futures::Stream<Item = ServerJsonRpcMessage> + Send + 'static,
) -> Response {
    let events = messages.map(|message| {
        let data = serde_json::to_string(&message).unwrap_or_else(|err| {
            tracing::error!(error = %err, "an MCP message could not be written");
            String::new()
        });
        Ok::<_, std::convert::Infallible>(Bytes::from(format!("data: {data}\n\n")))
    });
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            ),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        ],
        Body::from_stream(events),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn both_answers_must_be_accepted_and_no_weight_read() {
        let accepts = |value| accepts_both(&headers(&[("accept", value)]));
        assert!(accepts("application/json, text/event-stream"));
        assert!(accepts(
            "Text/Event-Stream , APPLICATION/JSON; charset=utf-8"
        ));
        assert!(accepts_both(&headers(&[
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
        ])));
        assert!(!accepts("application/json"));
        assert!(!accepts("*/*"));
        // A weight may refuse a type: rmcp reads those.
        assert!(!accepts("application/json;q=0, text/event-stream"));
        assert!(!accepts("application/json, text/event-stream; q=0.5"));
        assert!(!accepts_both(&HeaderMap::new()));
    }

    #[test]
    fn json_is_the_media_type_whatever_its_parameters() {
        let json = |value| is_json(Some(&HeaderValue::from_static(value)));
        assert!(json("application/json"));
        assert!(json("Application/JSON; charset=utf-8"));
        assert!(!json("text/plain"));
        assert!(!json("application/json-seq"));
        assert!(!is_json(None));
    }

    #[test]
    fn standard_headers_may_be_absent_or_say_what_the_body_says() {
        let agree = |pairs: &[(&'static str, &'static str)]| {
            standard_headers_agree(&headers(pairs), "demo_echo")
        };
        assert!(agree(&[]));
        assert!(agree(&[
            ("mcp-method", "tools/call"),
            ("mcp-name", "demo_echo")
        ]));
        assert!(!agree(&[("mcp-method", "tools/list")]));
        assert!(!agree(&[("mcp-name", "demo_add")]));
        assert!(!agree(&[
            ("mcp-name", "demo_echo"),
            ("mcp-name", "demo_echo")
        ]));
        assert!(!agree(&[("mcp-param-message", "hi")]));
    }

    #[test]
    fn a_call_is_read_as_rmcp_reads_it() {
        use rmcp::model::{ClientJsonRpcMessage, ClientRequest, GetMeta as _, JsonRpcRequest};
        let calls = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"demo_echo"}}"#,
            r#"{"jsonrpc":"2.0","id":"a-1","method":"tools/call","params":{"name":"demo_echo",
                "arguments":{"message":"hi","n":[1,2.5,null]},
                "_meta":{"progressToken":3,"io.example/trace":{"x":1}}},"extra":true}"#,
            r#"{"params":{"requestState":"s","inputResponses":{"k":{"action":"accept"}},
                "name":"n"},"method":"tools/call","id":1,"jsonrpc":"2.0"}"#,
        ];
        for body in calls {
            let ours = serde_json::from_slice::<CallBody<'_>>(body.as_bytes()).expect("ours");
            let Ok(JsonRpcMessage::Request(JsonRpcRequest {
                id, mut request, ..
            })) = serde_json::from_str::<ClientJsonRpcMessage>(body)
            else {
                panic!("rmcp reads a request: {body}");
            };
            let meta = std::mem::take(request.get_meta_mut());
            let ClientRequest::CallToolRequest(call) = request else {
                panic!("rmcp reads a tools/call: {body}");
            };
            let mut params = ours.params;
            assert_eq!(params.meta.take().unwrap_or_default(), meta, "{body}");
            assert_eq!((ours.id, ours.method.as_ref()), (id, "tools/call"));
            assert_eq!(params, call.params, "{body}");
        }
        // What is not a tools/call here goes to rmcp.
        let others = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"n"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"n"}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n"}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","_meta":1}}"#,
        ];
        for body in others {
            let read = serde_json::from_slice::<CallBody<'_>>(body.as_bytes());
            assert!(
                read.is_err() || read.is_ok_and(|call| call.method != "tools/call"),
                "{body}"
            );
        }
    }
}
