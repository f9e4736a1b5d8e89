//! The plain client against a hand-written loopback HTTP/1.1 server: what it sends, what it
//! refuses before sending, and its read deadline. Host names resolve through a fake lookup.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use http_body_util::Full;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::mpsc,
    task::JoinHandle,
};

use super::PlainClient;
use crate::net::{Lookup, LookupFuture, NetError, NetPolicy, read_capped_body};

/// Bound on any single test step, so a regression fails instead of hanging.
const WAIT: Duration = Duration::from_secs(10);

/// Answers every name with one address.
struct OneAddress(IpAddr);

impl Lookup for OneAddress {
    fn lookup(&self, _host: &str) -> LookupFuture {
        let ip = self.0;
        Box::pin(async move { Ok(vec![ip]) })
    }
}

const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Never answers.
struct Silent;

impl Lookup for Silent {
    fn lookup(&self, _host: &str) -> LookupFuture {
        Box::pin(std::future::pending())
    }
}

/// How the test server answers each request.
#[derive(Clone, Copy)]
enum Answer {
    /// `200` with a JSON body.
    Json,
    /// Never.
    Never,
    /// The head and half the declared body, then nothing.
    Stall,
}

const JSON: &str = r#"{"jsonrpc":"2.0","id":1,"result":{}}"#;

/// A raw HTTP/1.1 server on 127.0.0.1 that hands each request it reads (head and body) to
/// the test and counts its connections.
struct Server {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: mpsc::UnboundedReceiver<String>,
    task: JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    async fn start(answer: Answer) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("address");
        let connections = Arc::new(AtomicUsize::new(0));
        let (sent, requests) = mpsc::unbounded_channel();
        let counted = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(stream, answer, sent.clone()));
            }
        });
        Server {
            addr,
            connections,
            requests,
            task,
        }
    }

    fn url(&self, host: &str) -> http::Uri {
        format!("http://{host}:{}/mcp?key=secret", self.addr.port())
            .parse()
            .expect("uri")
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn serve(mut stream: TcpStream, answer: Answer, sent: mpsc::UnboundedSender<String>) {
    let mut buffer = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buffer).await else {
            return;
        };
        let _ = sent.send(request);
        let reply = match answer {
            Answer::Json => format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{JSON}",
                JSON.len()
            ),
            Answer::Never => String::new(),
            Answer::Stall => "HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n12345".to_owned(),
        };
        if stream.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// One request, head and body (by `Content-Length`), as text; `None` once the peer is gone.
async fn read_request(stream: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .and_then(|value| value.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if buffer.len() >= end + 4 + length {
                let request: Vec<u8> = buffer.drain(..end + 4 + length).collect();
                return Some(String::from_utf8_lossy(&request).into_owned());
            }
        }
        let read = stream.read(&mut chunk).await.ok()?;
        if read == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..read]);
    }
}

fn policy() -> NetPolicy {
    NetPolicy {
        allow_http: true,
        allow_private: true,
        ..NetPolicy::default()
    }
}

fn client(policy: &NetPolicy) -> PlainClient {
    PlainClient::new(policy, Arc::new(OneAddress(LOOPBACK))).expect("plain http allowed")
}

fn post(uri: http::Uri, body: &'static str) -> http::Request<Full<Bytes>> {
    let mut request = http::Request::new(Full::new(Bytes::from_static(body.as_bytes())));
    *request.method_mut() = http::Method::POST;
    *request.uri_mut() = uri;
    request
        .headers_mut()
        .insert("x-team", http::HeaderValue::from_static("blue"));
    request
}

async fn send(
    client: &PlainClient,
    request: http::Request<Full<Bytes>>,
) -> Result<http::Response<super::PlainBody>, NetError> {
    tokio::time::timeout(WAIT, client.send(request))
        .await
        .expect("settled within the bound")
}

#[tokio::test]
async fn a_post_reaches_the_server_as_sent_and_its_answer_is_read() {
    let mut server = Server::start(Answer::Json).await;
    let client = client(&policy());
    let response = send(&client, post(server.url("mcp.test"), "{\"a\":1}"))
        .await
        .expect("answered");
    assert_eq!(response.status(), http::StatusCode::OK);
    let body = read_capped_body(response.into_body(), 1024)
        .await
        .expect("body");
    assert_eq!(body, JSON.as_bytes());

    let request = server.requests.recv().await.expect("a request");
    let (head, body) = request.split_once("\r\n\r\n").expect("head and body");
    let mut lines = head.lines();
    assert_eq!(lines.next(), Some("POST /mcp?key=secret HTTP/1.1"));
    let headers: Vec<String> = lines.map(str::to_ascii_lowercase).collect();
    let port = server.addr.port();
    for expected in [
        format!("host: mcp.test:{port}"),
        "x-team: blue".to_owned(),
        "content-length: 7".to_owned(),
    ] {
        assert!(headers.contains(&expected), "{expected} in {headers:?}");
    }
    assert_eq!(body, "{\"a\":1}");
}

#[tokio::test]
async fn a_body_over_the_cap_is_refused() {
    let server = Server::start(Answer::Json).await;
    let client = client(&policy());
    let response = send(&client, post(server.url("mcp.test"), "{}"))
        .await
        .expect("answered");
    let read = read_capped_body(response.into_body(), JSON.len() - 1).await;
    assert_eq!(
        read,
        Err(NetError::TooLarge {
            limit: JSON.len() - 1
        })
    );
}

#[tokio::test]
async fn loopback_is_refused_unless_private_addresses_are_allowed() {
    let server = Server::start(Answer::Json).await;
    let strict = NetPolicy {
        allow_http: true,
        ..NetPolicy::default()
    };
    let client = client(&strict);
    // A name the resolver answers with loopback: refused by the resolver.
    let by_name = send(&client, post(server.url("mcp.test"), "{}")).await;
    // An address in the URL skips the resolver: refused by the connect guard.
    let by_address = send(&client, post(server.url("127.0.0.1"), "{}")).await;
    for refused in [by_name, by_address] {
        match refused {
            Err(NetError::Blocked { addr, range }) => {
                assert_eq!(addr, LOOPBACK);
                assert_eq!(range, "loopback");
            }
            other => panic!("not refused as blocked: {other:?}"),
        }
    }
    // The guard refuses after connecting but before any byte is written.
    assert!(server.connections() <= 1, "{}", server.connections());
    let mut server = server;
    assert!(server.requests.try_recv().is_err(), "no request was read");
}

#[tokio::test]
async fn a_host_outside_the_allowlist_is_refused() {
    let mut server = Server::start(Answer::Json).await;
    let policy = NetPolicy {
        allowed_hosts: vec!["mcp.test".to_owned()],
        ..policy()
    };
    let client = client(&policy);
    let refused = send(&client, post(server.url("other.test"), "{}")).await;
    assert_eq!(
        refused.err(),
        Some(NetError::HostNotAllowed {
            host: "other.test".to_owned()
        })
    );
    send(&client, post(server.url("mcp.test"), "{}"))
        .await
        .expect("the allowed host answers");
    assert!(server.requests.recv().await.is_some());
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn https_and_plain_http_under_a_strict_policy_are_not_its_business() {
    let strict = NetPolicy::default();
    assert!(PlainClient::new(&strict, Arc::new(OneAddress(LOOPBACK))).is_none());

    let client = client(&policy());
    let uri: http::Uri = "https://mcp.test/mcp".parse().expect("uri");
    match send(&client, post(uri, "{}")).await {
        Err(NetError::Request { kind, .. }) => assert_eq!(kind, "connect"),
        other => panic!("https was not refused: {other:?}"),
    }
}

#[tokio::test]
async fn a_server_silent_for_the_read_deadline_fails_the_request() {
    let policy = NetPolicy {
        read_timeout: Duration::from_millis(100),
        ..policy()
    };
    let client = client(&policy);

    let silent = Server::start(Answer::Never).await;
    match send(&client, post(silent.url("mcp.test"), "{}")).await {
        Err(NetError::Request { kind, .. }) => assert_eq!(kind, "timeout"),
        other => panic!("no timeout: {other:?}"),
    }

    let stalling = Server::start(Answer::Stall).await;
    let response = send(&client, post(stalling.url("mcp.test"), "{}"))
        .await
        .expect("the head arrives");
    let read = tokio::time::timeout(WAIT, read_capped_body(response.into_body(), 1024))
        .await
        .expect("settled within the bound");
    match read {
        Err(NetError::Request { kind, .. }) => assert_eq!(kind, "timeout"),
        other => panic!("no timeout: {other:?}"),
    }
}

#[tokio::test]
async fn errors_never_name_the_url() {
    let client = client(&policy());
    // A port nothing listens on any more, so the connect fails.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    drop(listener);
    let uri: http::Uri = format!("http://mcp.test:{port}/mcp?key=secret")
        .parse()
        .expect("uri");
    let err = send(&client, post(uri, "{}"))
        .await
        .expect_err("nothing listens there");
    let text = err.to_string();
    assert!(!text.contains("secret") && !text.contains("/mcp"), "{text}");
}

/// A name whose lookup never answers fails within the connect deadline.
#[tokio::test]
async fn a_lookup_that_never_answers_fails_within_the_connect_deadline() {
    let policy = NetPolicy {
        connect_timeout: Duration::from_millis(100),
        ..policy()
    };
    let client = PlainClient::new(&policy, Arc::new(Silent)).expect("plain http allowed");
    let uri: http::Uri = "http://mcp.test:8080/mcp".parse().expect("uri");
    match send(&client, post(uri, "{}")).await {
        Err(NetError::Resolve { host, reason }) => {
            assert_eq!(host, "mcp.test");
            assert!(reason.contains("no answer"), "{reason}");
        }
        other => panic!("not a resolve failure: {other:?}"),
    }
}

#[tokio::test]
async fn each_lane_calls_on_connections_of_its_own() {
    let server = Server::start(Answer::Json).await;
    let client = client(&policy());
    let lanes = crate::lane::Lanes::start(2).expect("lanes start");
    let call = |handle: &tokio::runtime::Handle| {
        let (client, uri) = (client.clone(), server.url("mcp.test"));
        handle.spawn(async move {
            let response = send(&client, post(uri, "{}")).await.expect("answered");
            read_capped_body(response.into_body(), 1024)
                .await
                .expect("body")
        })
    };
    let handles: Vec<_> = lanes.handles().cloned().collect();
    // Two calls in turn on each lane, and two on this thread (no lane).
    for _ in 0..2 {
        for handle in &handles {
            assert_eq!(
                call(handle).await.expect("the call's task"),
                JSON.as_bytes()
            );
        }
        let response = send(&client, post(server.url("mcp.test"), "{}"))
            .await
            .expect("answered");
        read_capped_body(response.into_body(), 1024)
            .await
            .expect("body");
    }
    // A connection per lane and one for the rest, each used again by its second call.
    assert_eq!(server.connections(), 3);
    lanes.stop().await;
}
