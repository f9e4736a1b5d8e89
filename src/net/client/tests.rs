//! The built client against a hand-written loopback HTTP/1.1 server: redirects, blocked
//! addresses, timeouts and body caps. No request leaves loopback: refused hops fail before
//! any connection is made.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    task::JoinHandle,
};
use url::Url;

use super::{client, read_capped};
use crate::net::{NetError, NetPolicy, check_url};

/// Bound on any single test request, so a regression fails instead of hanging.
const TEST_DEADLINE: Duration = Duration::from_secs(10);
/// Largest request head the fake server reads.
const MAX_HEAD: usize = 16 * 1024;
/// Size of the `/big` body.
const BIG: usize = 1000;

/// A raw HTTP/1.1 server on 127.0.0.1 that answers by path and counts the connections it
/// accepted and the requests it parsed.
struct TestServer {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl TestServer {
    /// `other_port` is where `/to-other-port` redirects (a different origin on loopback).
    async fn start(other_port: u16) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let accepted = Arc::clone(&connections);
        let counter = Arc::clone(&requests);
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let counter = Arc::clone(&counter);
                tokio::spawn(serve(stream, addr.port(), other_port, counter));
            }
        });
        TestServer {
            addr,
            connections,
            requests,
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.addr.port())
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Connections accepted before this call. A marker request goes through the FIFO accept
    /// queue, so once it is answered every earlier connection has been counted.
    async fn connections_so_far(&self) -> usize {
        let mut stream = TcpStream::connect(self.addr)
            .await
            .expect("marker connects");
        stream
            .write_all(b"GET /ok HTTP/1.1\r\nHost: marker\r\n\r\n")
            .await
            .expect("marker request written");
        let mut answer = Vec::new();
        tokio::time::timeout(TEST_DEADLINE, stream.read_to_end(&mut answer))
            .await
            .expect("marker answered within the test deadline")
            .expect("marker answer read");
        assert!(answer.starts_with(b"HTTP/1.1 200"), "marker answered");
        self.connections() - 1
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn serve(mut stream: TcpStream, port: u16, other_port: u16, counter: Arc<AtomicUsize>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if head.len() > MAX_HEAD {
            return;
        }
    }
    counter.fetch_add(1, Ordering::SeqCst);
    let head = String::from_utf8_lossy(&head);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let redirect = |location: String| {
        format!(
            "HTTP/1.1 302 Found\r\nLocation: {location}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
    };
    let response = match path.as_str() {
        "/ok" => {
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello".to_owned()
        }
        "/to-localhost" => redirect(format!("http://localhost:{port}/ok")),
        "/to-metadata" => redirect("http://169.254.169.254/latest/meta-data/".to_owned()),
        "/to-same" => redirect("/ok".to_owned()),
        "/to-same-twice" => redirect("/to-same".to_owned()),
        "/to-other-port" => redirect(format!("http://127.0.0.1:{other_port}/ok")),
        "/big" => format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\nConnection: close\r\n\r\n{}",
            "x".repeat(BIG)
        ),
        "/big-chunked" => format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{}\r\n{:x}\r\n{}\r\n0\r\n\r\n",
            BIG / 2,
            "x".repeat(BIG / 2),
            BIG / 2,
            "y".repeat(BIG / 2)
        ),
        // Never answers: the client's read timeout must fire.
        silent if silent.starts_with("/silent") => {
            let mut rest = [0u8; 1];
            let _ = stream.read(&mut rest).await;
            return;
        }
        _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_owned(),
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// The policy the brief's loopback tests run under.
fn loopback_policy(max_redirects: usize) -> NetPolicy {
    NetPolicy {
        allow_http: true,
        allow_private: true,
        allowed_hosts: vec!["127.0.0.1".into()],
        max_redirects,
        ..NetPolicy::default()
    }
}

/// Checks the URL like a caller must, then sends a GET under the test deadline.
async fn get(policy: &NetPolicy, url: &str) -> Result<reqwest::Response, NetError> {
    let url = Url::parse(url).expect("test URL parses");
    check_url(&url, policy)?;
    send_unchecked(policy, url.as_str()).await
}

/// Sends without `check_url`, to exercise what the client enforces on its own.
async fn send_unchecked(policy: &NetPolicy, url: &str) -> Result<reqwest::Response, NetError> {
    let client = client(policy)?;
    let sent = tokio::time::timeout(TEST_DEADLINE, client.get(url).send()).await;
    Ok(sent.expect("request finishes within the test deadline")?)
}

#[tokio::test]
async fn permitted_same_origin_redirect_is_followed() {
    let server = TestServer::start(0).await;
    let resp = get(&loopback_policy(1), &server.url("/to-same"))
        .await
        .expect("redirect within the origin is followed");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.url().path(), "/ok");
    assert_eq!(read_capped(resp, 100).await.expect("small body"), "hello");
    assert_eq!(server.requests(), 2);
}

#[tokio::test]
async fn redirect_to_a_host_not_allowed_is_refused() {
    let server = TestServer::start(0).await;
    let err = get(&loopback_policy(3), &server.url("/to-localhost"))
        .await
        .expect_err("localhost is not in the allowlist");
    assert_eq!(
        err,
        NetError::HostNotAllowed {
            host: "localhost".into()
        }
    );
    assert_eq!(server.requests(), 1, "the refused hop was never requested");
}

#[tokio::test]
async fn redirect_to_metadata_is_refused_before_connecting() {
    let server = TestServer::start(0).await;
    let err = get(&loopback_policy(3), &server.url("/to-metadata"))
        .await
        .expect_err("metadata hop is refused");
    assert_eq!(
        err,
        NetError::HostNotAllowed {
            host: "169.254.169.254".into()
        }
    );
    // Without an allowlist the address rules refuse it, even with private addresses allowed.
    let open = NetPolicy {
        allowed_hosts: Vec::new(),
        ..loopback_policy(3)
    };
    let err = get(&open, &server.url("/to-metadata"))
        .await
        .expect_err("metadata hop is refused");
    assert_eq!(
        err,
        NetError::Blocked {
            addr: IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
            range: "cloud-metadata"
        }
    );
}

#[tokio::test]
async fn zero_redirects_refuses_any_redirect_and_hops_are_capped() {
    let server = TestServer::start(0).await;
    let err = get(&loopback_policy(0), &server.url("/to-same"))
        .await
        .expect_err("redirects are off");
    assert_eq!(err, NetError::TooManyRedirects { limit: 0 });
    assert_eq!(server.requests(), 1);
    let err = get(&loopback_policy(1), &server.url("/to-same-twice"))
        .await
        .expect_err("second hop exceeds the budget");
    assert_eq!(err, NetError::TooManyRedirects { limit: 1 });
    let resp = get(&loopback_policy(2), &server.url("/to-same-twice"))
        .await
        .expect("two hops fit a budget of two");
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn cross_origin_redirect_is_refused() {
    let target = TestServer::start(0).await;
    let server = TestServer::start(target.addr.port()).await;
    let err = get(&loopback_policy(3), &server.url("/to-other-port"))
        .await
        .expect_err("another port is another origin");
    assert!(
        matches!(err, NetError::CrossOriginRedirect { .. }),
        "{err:?}"
    );
    assert_eq!(target.requests(), 0);
}

/// Private addresses refused: the brief's policy minus `allow_private`.
fn public_only_http() -> NetPolicy {
    NetPolicy {
        allow_http: true,
        ..NetPolicy::default()
    }
}

#[tokio::test]
async fn loopback_literal_is_blocked_by_check_url_and_by_the_connect_guard() {
    let server = TestServer::start(0).await;
    let policy = public_only_http();
    let loopback = NetError::Blocked {
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        range: "loopback",
    };
    let err = get(&policy, &server.url("/ok")).await.expect_err("blocked");
    assert_eq!(err, loopback);
    // Sent without `check_url`: the connection is made, then refused before any request.
    let err = send_unchecked(&policy, &server.url("/ok"))
        .await
        .expect_err("blocked");
    assert_eq!(err, loopback);
    assert!(
        server.connections_so_far().await >= 1,
        "the guard saw a connection"
    );
    assert_eq!(
        server.requests(),
        1,
        "only the marker request reached the server"
    );
}

#[tokio::test]
async fn loopback_name_is_blocked_by_the_resolver_before_connecting() {
    let server = TestServer::start(0).await;
    let by_name = format!("http://localhost:{}/ok", server.addr.port());
    // `localhost` answers 127.0.0.1 and possibly ::1: either is refused.
    let err = get(&public_only_http(), &by_name)
        .await
        .expect_err("blocked");
    assert!(
        matches!(
            err,
            NetError::Blocked {
                range: "loopback",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(server.connections_so_far().await, 0);
}

#[tokio::test]
async fn plain_http_is_refused_by_the_client_itself() {
    let server = TestServer::start(0).await;
    let policy = NetPolicy {
        allow_private: true,
        ..NetPolicy::default()
    };
    let err = send_unchecked(&policy, &server.url("/ok"))
        .await
        .expect_err("https only");
    assert!(
        matches!(
            err,
            NetError::Request {
                kind: "builder",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(server.requests(), 0);
}

#[tokio::test]
async fn read_timeout_fires_on_a_silent_server() {
    let server = TestServer::start(0).await;
    let policy = NetPolicy {
        read_timeout: Duration::from_millis(300),
        ..loopback_policy(0)
    };
    let err = get(&policy, &server.url("/silent?token=s3cret"))
        .await
        .expect_err("silent server times out");
    assert!(
        matches!(
            err,
            NetError::Request {
                kind: "timeout",
                ..
            }
        ),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        !message.contains("s3cret") && !message.contains("/silent"),
        "{message}"
    );
}

#[tokio::test]
async fn body_cap_applies_to_declared_and_streamed_lengths() {
    let server = TestServer::start(0).await;
    let policy = loopback_policy(0);
    for path in ["/big", "/big-chunked"] {
        let resp = get(&policy, &server.url(path))
            .await
            .expect("request succeeds");
        assert_eq!(
            read_capped(resp, BIG - 1).await,
            Err(NetError::TooLarge { limit: BIG - 1 }),
            "{path}"
        );
        let resp = get(&policy, &server.url(path))
            .await
            .expect("request succeeds");
        let body = read_capped(resp, BIG).await.expect("exactly at the cap");
        assert_eq!(body.len(), BIG, "{path}");
    }
}
