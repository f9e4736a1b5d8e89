//! Tool calls posted on a Streamable HTTP connection at 2026-07-28 by the calling task: the
//! request is the one rmcp would post, the answer comes back from a JSON body or an event
//! stream, a broken stream resumes from its last event, and tools that promote arguments
//! to headers are left to rmcp.

use std::{net::SocketAddr, sync::Mutex};

use axum::{
    body::Body,
    extract::{ConnectInfo, Request, State},
    middleware::Next,
    response::{IntoResponse, Response},
};
use futures::StreamExt;
use rmcp::{
    model::{CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, Tool},
    service::ServiceError,
    transport::{
        StreamableHttpServerConfig, StreamableHttpService,
        streamable_http_server::session::local::LocalSessionManager,
    },
};
use serde_json::{Value, json};
use tokio::{net::TcpListener, sync::Notify};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::*;
use crate::{
    config::{
        Env, HttpConfig, HttpKind, Limits, SecretTemplate, ServerConfig, ServerId, TransportConfig,
    },
    fixtures::{Fixture, handler},
    upstream::{
        ConnectOptions, Connection, UpstreamError, connect,
        relay::RelayRegistry,
        tool_call::{CallLink, send_call},
        watch::WatchRegistry,
    },
};

const WAIT: Duration = Duration::from_secs(30);

/// One request the front saw.
#[derive(Debug, Clone)]
struct Seen {
    /// The client's end of the connection the request came on.
    peer: Option<SocketAddr>,
    method: http::Method,
    headers: http::HeaderMap,
    body: Option<Value>,
}

/// How the front answers `tools/call` itself instead of passing it to the fixture.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Break {
    /// Pass everything through.
    No,
    /// A JSON body rather than an event stream.
    Json,
    /// 500 with a JSON-RPC error in a JSON body.
    RpcError500,
    /// 503 with a text body.
    Unavailable,
    /// 400 with a text body.
    BadRequest,
    /// 200 with an HTML page.
    Html,
    /// 202 and nothing else.
    Accepted,
    /// A stream that names event `e1` and ends; the answer comes to the `GET` resuming it.
    AfterEvent,
    /// A stream that names event `e1` and ends; the `GET` resuming it is refused (503).
    AfterEventGone,
    /// A stream that ends before naming any event.
    BeforeEvent,
    /// A stream that first asks the client a `ping`, and answers once the client did.
    AsksFirst,
    /// The answer, and the end of the stream a millisecond later, in a write of its own.
    EndsLater,
    /// The answer, then a stream that never ends (a comment every few milliseconds); the
    /// front is told when it is dropped.
    KeptOpen,
}

/// A front to an rmcp fixture that records every request and may break call streams.
#[derive(Clone)]
struct Front {
    seen: Arc<Mutex<Vec<Seen>>>,
    breaks: Break,
    /// The id of the last `tools/call` the front answered itself.
    call_id: Arc<Mutex<Option<Value>>>,
    /// Told when the client answered the front's `ping`.
    pinged: Arc<Notify>,
    /// Told when a stream kept open was dropped (its connection closed).
    dropped: Arc<Notify>,
}

/// Tells its `Notify` when dropped.
struct OnDrop(Arc<Notify>);

impl Drop for OnDrop {
    fn drop(&mut self) {
        self.0.notify_one();
    }
}

impl Front {
    fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The requests seen that `keep` keeps, in order.
    fn seen_where(&self, keep: impl Fn(&Seen) -> bool) -> Vec<Seen> {
        self.seen().into_iter().filter(|seen| keep(seen)).collect()
    }

    /// The `tools/call` POSTs seen, in order.
    fn calls(&self) -> Vec<Seen> {
        self.seen_where(|seen| {
            seen.body
                .as_ref()
                .is_some_and(|body| body["method"] == "tools/call")
        })
    }
}

fn event_stream(body: String) -> Response {
    ([(http::header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

async fn record(State(front): State<Front>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|info| info.0);
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    front
        .seen
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .push(Seen {
            peer,
            method: parts.method.clone(),
            headers: parts.headers.clone(),
            body: body.clone(),
        });
    if front.breaks != Break::No {
        let resumes = parts.method == http::Method::GET
            && parts
                .headers
                .get("last-event-id")
                .is_some_and(|id| id == "e1");
        if resumes && front.breaks == Break::AfterEventGone {
            return http::StatusCode::SERVICE_UNAVAILABLE.into_response();
        }
        if resumes {
            let id = front
                .call_id
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone();
            let answer = json!({
                "jsonrpc": "2.0",
                "id": id,
                "result": { "content": [{ "type": "text", "text": "resumed" }] },
            });
            return event_stream(format!("id: e2\ndata: {answer}\n\n"));
        }
        if body.as_ref().is_some_and(|body| body["id"] == "s1") {
            front.pinged.notify_one();
            return http::StatusCode::ACCEPTED.into_response();
        }
        if let Some(body) = body.as_ref().filter(|body| body["method"] == "tools/call") {
            *front
                .call_id
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(body["id"].clone());
            if front.breaks == Break::AsksFirst {
                let ping = json!({ "jsonrpc": "2.0", "id": "s1", "method": "ping" });
                let answer = json!({
                    "jsonrpc": "2.0",
                    "id": body["id"],
                    "result": { "content": [{ "type": "text", "text": "after the ping" }] },
                });
                let pinged = front.pinged.clone();
                let events = futures::stream::iter([format!("data: {ping}\n\n")]).chain(
                    futures::stream::once(async move {
                        pinged.notified().await;
                        format!("data: {answer}\n\n")
                    }),
                );
                let body = Body::from_stream(events.map(Ok::<_, std::convert::Infallible>));
                return ([(http::header::CONTENT_TYPE, "text/event-stream")], body).into_response();
            }
            match front.breaks {
                Break::RpcError500 => {
                    let error = json!({
                        "jsonrpc": "2.0",
                        "id": body["id"],
                        "error": { "code": -32603, "message": "the tool broke" },
                    });
                    return (http::StatusCode::INTERNAL_SERVER_ERROR, axum::Json(error))
                        .into_response();
                }
                Break::Unavailable => {
                    return (
                        http::StatusCode::SERVICE_UNAVAILABLE,
                        "down for maintenance",
                    )
                        .into_response();
                }
                Break::BadRequest => {
                    return (http::StatusCode::BAD_REQUEST, "no such thing").into_response();
                }
                Break::Html => {
                    return (
                        [(http::header::CONTENT_TYPE, "text/html")],
                        "<html>a login page</html>",
                    )
                        .into_response();
                }
                Break::Accepted => return http::StatusCode::ACCEPTED.into_response(),
                Break::EndsLater => {
                    let answer = json!({
                        "jsonrpc": "2.0",
                        "id": body["id"],
                        "result": { "content": [{ "type": "text", "text": "ends later" }] },
                    });
                    let events = futures::stream::iter([format!("data: {answer}\n\n")]).chain(
                        futures::stream::once(tokio::time::sleep(Duration::from_millis(1)))
                            .filter_map(|()| async { None }),
                    );
                    let body = Body::from_stream(events.map(Ok::<_, std::convert::Infallible>));
                    return ([(http::header::CONTENT_TYPE, "text/event-stream")], body)
                        .into_response();
                }
                Break::KeptOpen => {
                    let answer = json!({
                        "jsonrpc": "2.0",
                        "id": body["id"],
                        "result": { "content": [{ "type": "text", "text": "kept open" }] },
                    });
                    let dropped = OnDrop(front.dropped.clone());
                    // A comment every few milliseconds: a write is how the server finds the
                    // connection closed.
                    let ticks = futures::stream::unfold((), |()| async {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        Some((": still here\n\n".to_owned(), ()))
                    });
                    let events = futures::stream::iter([format!("data: {answer}\n\n")])
                        .chain(ticks)
                        .map(move |event| {
                            // The guard lives as long as the stream: told when it goes.
                            let _ = &dropped;
                            Ok::<_, std::convert::Infallible>(event)
                        });
                    let body = Body::from_stream(events);
                    return ([(http::header::CONTENT_TYPE, "text/event-stream")], body)
                        .into_response();
                }
                _ => {}
            }
            if front.breaks == Break::Json {
                let answer = json!({
                    "jsonrpc": "2.0",
                    "id": body["id"],
                    "result": { "content": [{ "type": "text", "text": "as JSON" }] },
                });
                return axum::Json(answer).into_response();
            }
            return event_stream(match front.breaks {
                Break::AfterEvent | Break::AfterEventGone => {
                    "id: e1\nretry: 10\ndata: \n\n".to_owned()
                }
                _ => "retry: 10\n\n".to_owned(),
            });
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Fixture `f` over Streamable HTTP behind a recording front on 127.0.0.1:0, until `stop`.
async fn serve_front(f: Fixture, breaks: Break, stop: &CancellationToken) -> (String, Front) {
    let fixture = handler(f).expect("in-process fixture");
    let config = StreamableHttpServerConfig::default().with_cancellation_token(stop.clone());
    let service = StreamableHttpService::new(
        move || Ok(fixture.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let front = Front {
        seen: Arc::default(),
        breaks,
        call_id: Arc::default(),
        pinged: Arc::default(),
        dropped: Arc::default(),
    };
    let app = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(front.clone(), record));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/mcp", listener.local_addr().expect("address"));
    let stop = stop.clone();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
    });
    (url, front)
}

/// A connection to `url` with its link knowing the server's tools, and the relay registry.
async fn open(url: &str) -> (Connection, HttpLink, Arc<RelayRegistry>) {
    let mut server = ServerConfig::new(
        ServerId::new("up").expect("valid id"),
        TransportConfig::Http(HttpConfig {
            url: url.parse().expect("url"),
            kind: HttpKind::Streamable,
            headers: vec![("x-team".to_owned(), SecretTemplate::new("blue"))],
        }),
    );
    server.allow_http = true;
    server.allow_private = true;
    let options = ConnectOptions {
        env: Env::default(),
        limits: Limits::default(),
        supervisor: None,
        listing_tokens: None,
    };
    let relays = RelayRegistry::new();
    let watches = WatchRegistry::new(TaskTracker::new());
    let connection = connect(
        &server,
        &options,
        Arc::new(Notify::new()),
        relays.clone(),
        watches,
    )
    .await
    .expect("connects");
    let Some(CallLink::Http(link)) = connection.link.clone() else {
        panic!("a 2026-07-28 HTTP connection has an HTTP link");
    };
    let tools = connection
        .service
        .peer()
        .list_all_tools()
        .await
        .expect("tools");
    link.listed(&tools);
    (connection, link, relays)
}

fn echo(message: &str) -> CallToolRequestParams {
    CallToolRequestParams::new("echo").with_arguments(
        json!({ "message": message })
            .as_object()
            .expect("object")
            .clone(),
    )
}

/// The bench fixture behind a front, and a connection to it whose HTTP link knows the
/// server's tools. Dropping it stops the fixture.
struct Rig {
    stop: CancellationToken,
    front: Front,
    connection: Connection,
    link: HttpLink,
    relays: Arc<RelayRegistry>,
}

impl Rig {
    async fn start(breaks: Break) -> Rig {
        let stop = CancellationToken::new();
        let (url, front) = serve_front(Fixture::Bench, breaks, &stop).await;
        let (connection, link, relays) = open(&url).await;
        Rig {
            stop,
            front,
            connection,
            link,
            relays,
        }
    }

    /// Calls through `send_call`: posted on the link when `direct`, else through rmcp.
    async fn call(
        &self,
        direct: bool,
        mut params: CallToolRequestParams,
    ) -> Result<CallToolResult, ServiceError> {
        let link = CallLink::Http(self.link.clone());
        let guard = self.relays.register(None, WAIT);
        let capabilities = ClientCapabilities::default();
        let peer = self.connection.service.peer();
        let sent = send_call(
            peer,
            direct.then_some(&link),
            &mut params,
            &guard,
            Some(&capabilities),
        );
        let response = tokio::time::timeout(WAIT, sent)
            .await
            .expect("answered within the bound")?;
        match response {
            CallToolResponse::Complete(result) => Ok(result),
            other => panic!("not a complete result: {other:?}"),
        }
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|part| part.as_text().map(|text| text.text.clone()))
        .collect()
}

/// `body` without what differs between two calls: the id and the progress token.
fn without_ids(mut body: Value) -> Value {
    body["id"] = Value::Null;
    body["params"]["_meta"]["progressToken"] = Value::Null;
    body
}

#[tokio::test]
async fn a_call_is_posted_as_rmcp_posts_it_and_answered() {
    let rig = Rig::start(Break::No).await;
    assert!(
        rig.link.posts_plain(),
        "an http endpoint is posted to by hyper alone"
    );
    posted_as_rmcp_posts_it(rig).await;
}

#[tokio::test]
async fn a_call_posted_with_reqwest_is_posted_as_rmcp_posts_it() {
    let mut rig = Rig::start(Break::No).await;
    rig.link = rig.link.posting_with_reqwest();
    assert!(!rig.link.posts_plain());
    posted_as_rmcp_posts_it(rig).await;
}

/// A call through rmcp and one posted on the link get the same answer, and the two POSTs
/// carry the same headers and body but for id and token.
async fn posted_as_rmcp_posts_it(rig: Rig) {
    let through_rmcp = rig.call(false, echo("hi")).await;
    let posted = rig.call(true, echo("hi")).await;
    let (through_rmcp, posted) = (through_rmcp.expect("rmcp's"), posted.expect("direct"));
    assert_eq!(text(&posted), text(&through_rmcp));
    assert_eq!(posted, through_rmcp);

    let calls = rig.front.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    let (rmcp, ours) = (&calls[0], &calls[1]);
    let body = ours.body.clone().expect("JSON body");
    assert_eq!(body["id"], "mcpgate-0");
    assert_eq!(body["params"]["_meta"]["progressToken"], "mcpgate-0");
    assert_eq!(
        without_ids(body),
        without_ids(rmcp.body.clone().expect("JSON body"))
    );
    let headers = |seen: &Seen| {
        let mut headers: Vec<(String, String)> = seen
            .headers
            .iter()
            .filter(|(name, _)| *name != http::header::CONTENT_LENGTH)
            .map(|(name, value)| {
                let value = value.to_str().expect("text").to_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        headers.sort();
        headers
    };
    assert_eq!(headers(ours), headers(rmcp));
    let ours = headers(ours);
    for expected in [
        ("mcp-method", "tools/call"),
        ("mcp-name", "echo"),
        ("x-team", "blue"),
    ] {
        assert!(
            ours.iter()
                .any(|(n, v)| (n.as_str(), v.as_str()) == expected),
            "{expected:?} in {ours:?}"
        );
    }
}

#[tokio::test]
async fn an_upstream_error_comes_back_as_the_error() {
    let rig = Rig::start(Break::No).await;
    rig.link.listed(&[Tool::new(
        "no_such_tool",
        "listed here only",
        Arc::new(serde_json::Map::new()),
    )]);
    let params = CallToolRequestParams::new("no_such_tool");
    let through_rmcp = rig.call(false, params.clone()).await;
    let posted = rig.call(true, params).await;
    match (through_rmcp, posted) {
        (Err(ServiceError::McpError(rmcp)), Err(ServiceError::McpError(ours))) => {
            assert_eq!(ours, rmcp);
        }
        other => panic!("both refused as the server refused: {other:?}"),
    }
}

/// The end of a call's stream, coming after the answer, is read: the connection goes back
/// to the pool and a later call comes on it.
#[tokio::test]
async fn the_next_call_comes_on_the_same_connection() {
    let rig = Rig::start(Break::EndsLater).await;
    let first = rig.call(true, echo("one")).await.expect("answered");
    assert_eq!(text(&first), "ends later");
    // The end of the first call's stream is read after its answer, in a task of its own: a
    // call that starts before that task ran takes another connection, so try a few.
    for _ in 0..20 {
        rig.call(true, echo("again")).await.expect("answered");
        let calls = rig.front.calls();
        let first_peer = calls[0].peer.expect("peer recorded");
        if calls[1..].iter().any(|seen| seen.peer == Some(first_peer)) {
            return;
        }
    }
    panic!(
        "no call came on the first one's connection: {:?}",
        rig.front.calls()
    );
}

/// A stream the server keeps open after the answer does not hold the call, and is given up
/// (its connection closed) once the drain's bound passed.
#[tokio::test]
async fn a_stream_kept_open_after_the_answer_is_given_up() {
    let rig = Rig::start(Break::KeptOpen).await;
    let dropped = rig.front.dropped.notified();
    let result = rig.call(true, echo("hi")).await.expect("answered");
    assert_eq!(text(&result), "kept open");
    tokio::time::timeout(WAIT, dropped)
        .await
        .expect("the stream is given up and its connection closed");
    let again = rig.call(true, echo("hi")).await.expect("answered again");
    assert_eq!(text(&again), "kept open");
    let calls = rig.front.calls();
    assert_ne!(
        calls[0].peer, calls[1].peer,
        "a connection whose stream was given up is not reused"
    );
}

#[tokio::test]
async fn an_answer_as_a_json_body_is_read() {
    let rig = Rig::start(Break::Json).await;
    let result = rig.call(true, echo("hi")).await.expect("answered");
    assert_eq!(text(&result), "as JSON");
}

/// A refused POST ends the call as it does through rmcp: a JSON-RPC error in the body is the
/// server's answer, whatever the status; a 5xx, or another media type, fails this call alone
/// (not the connection: the other calls on it go on); a 400 ends the connection (the server
/// no longer takes what it negotiated).
#[tokio::test]
async fn refused_posts_end_the_call_as_through_rmcp() {
    for (breaks, code, expected) in [
        (Break::RpcError500, "upstream_error", "the tool broke"),
        (Break::Unavailable, "upstream_http_error", "HTTP 503"),
        (
            Break::BadRequest,
            "upstream_connection_lost",
            "connection lost",
        ),
        (
            Break::Html,
            "upstream_protocol_error",
            "neither JSON nor an event stream",
        ),
    ] {
        let rig = Rig::start(breaks).await;
        let through_rmcp = rig.call(false, echo("hi")).await;
        let posted = rig.call(true, echo("hi")).await;
        let (through_rmcp, posted) = (
            UpstreamError::from_service(through_rmcp.expect_err("refused")),
            UpstreamError::from_service(posted.expect_err("refused")),
        );
        assert_eq!(posted.to_string(), through_rmcp.to_string(), "{breaks:?}");
        assert_eq!(
            (posted.code(), through_rmcp.code()),
            (code, code),
            "{breaks:?}"
        );
        assert!(
            posted.to_string().contains(expected),
            "{breaks:?}: {posted}"
        );
    }
}

/// 202 to a call's POST: on 2026-07-28 no answer can follow, so the call ends at once.
#[tokio::test]
async fn an_accepted_call_ends_at_once() {
    let rig = Rig::start(Break::Accepted).await;
    let outcome = rig.call(true, echo("hi")).await;
    assert!(
        matches!(outcome, Err(ServiceError::UnexpectedResponse)),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_stream_broken_after_an_event_resumes_from_it() {
    let rig = Rig::start(Break::AfterEvent).await;
    let result = rig
        .call(true, echo("hi"))
        .await
        .expect("answered on the resumed stream");
    assert_eq!(text(&result), "resumed");
    let resumed: Vec<Seen> = rig
        .front
        .seen_where(|seen| seen.method == http::Method::GET);
    assert_eq!(resumed.len(), 1, "{resumed:?}");
    let header = |name: &str| {
        resumed[0]
            .headers
            .get(name)
            .map(|value| value.to_str().expect("text").to_owned())
    };
    assert_eq!(header("last-event-id").as_deref(), Some("e1"));
    assert_eq!(
        header("mcp-protocol-version").as_deref(),
        Some("2026-07-28")
    );
    assert_eq!(header("x-team").as_deref(), Some("blue"));
    assert_eq!(header("mcp-method"), None);
}

/// A request the server sends on a call's stream is answered by the connection's handler
/// and posted back, as rmcp's service would; the call's answer follows.
#[tokio::test]
async fn a_request_on_the_call_stream_is_answered() {
    let rig = Rig::start(Break::AsksFirst).await;
    let result = rig
        .call(true, echo("hi"))
        .await
        .expect("answered after the ping");
    assert_eq!(text(&result), "after the ping");
    let answers: Vec<Seen> = rig
        .front
        .seen_where(|seen| seen.body.as_ref().is_some_and(|body| body["id"] == "s1"));
    assert_eq!(answers.len(), 1, "{answers:?}");
    let answer = answers[0].body.clone().expect("JSON");
    assert_eq!(
        answer,
        json!({ "jsonrpc": "2.0", "id": "s1", "result": {} })
    );
    assert_eq!(answers[0].headers.get("mcp-method"), None);
    assert_eq!(
        answers[0]
            .headers
            .get("mcp-protocol-version")
            .map(|v| v.as_bytes()),
        Some(&b"2026-07-28"[..])
    );
}

/// Resuming is bounded: after five refused tries in a row the call fails.
#[tokio::test]
async fn a_stream_that_cannot_be_resumed_fails_the_call_after_five_tries() {
    let rig = Rig::start(Break::AfterEventGone).await;
    let outcome = rig.call(true, echo("hi")).await;
    assert!(
        matches!(outcome, Err(ServiceError::TransportClosed)),
        "{outcome:?}"
    );
    let tries = rig
        .front
        .seen_where(|seen| seen.method == http::Method::GET);
    assert_eq!(tries.len(), 5, "{tries:?}");
}

/// The server ended the call's stream without an answer or an event to resume from: the call
/// fails, alone (the stream ended as the server meant it to; nothing says the connection
/// failed).
#[tokio::test]
async fn a_stream_that_ends_before_naming_an_event_fails_the_call() {
    let rig = Rig::start(Break::BeforeEvent).await;
    let outcome = UpstreamError::from_service(
        rig.call(true, echo("hi"))
            .await
            .expect_err("no answer came"),
    );
    assert_eq!(outcome.code(), "upstream_protocol_error", "{outcome}");
    assert!(
        outcome.to_string().contains("ended the call's stream"),
        "{outcome}"
    );
    assert!(
        rig.front
            .seen()
            .iter()
            .all(|seen| seen.method != http::Method::GET),
        "nothing to resume from"
    );
}

#[tokio::test]
async fn tools_that_promote_arguments_to_headers_are_left_to_rmcp() {
    let rig = Rig::start(Break::No).await;
    assert!(rig.link.sends("echo"));
    let schema = |value: Value| Arc::new(value.as_object().expect("object").clone());
    let tools = [
        Tool::new("plain", "", schema(json!({ "type": "object" }))),
        Tool::new(
            "promotes",
            "",
            schema(json!({
                "type": "object",
                "properties": { "region": { "type": "string", "x-mcp-header": "Region" } },
            })),
        ),
        Tool::new(
            "promotes_deep",
            "",
            schema(json!({
                "type": "object",
                "properties": { "a": { "type": "object", "properties": {
                    "b": { "type": "string", "x-mcp-header": "B" } } } },
            })),
        ),
        Tool::new("spaced name", "", schema(json!({ "type": "object" }))),
        Tool::new("naïve", "", schema(json!({ "type": "object" }))),
        Tool::new("=?base64?x?=", "", schema(json!({ "type": "object" }))),
    ];
    rig.link.listed(&tools);
    let sent: Vec<&str> = tools
        .iter()
        .map(|tool| tool.name.as_ref())
        .filter(|name| rig.link.sends(name))
        .collect();
    assert_eq!(sent, ["plain"]);
    assert!(!rig.link.sends("echo"), "no longer listed");
}
