//! Faults of callers against `mcpgate serve` (RELIABILITY.md, "Fault injection"): 10,000
//! idle connections, a body sent a byte a second, clients that never read their answers,
//! MCP sessions and their event streams abandoned.
//! Each time the gateway's file descriptors come back to where they were, its memory stays
//! bounded, and other callers are served meanwhile.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpStream,
};

use crate::support::{ServedBinary, WAIT, mcpgate_bin, sandbox_section};

/// Two of the gateway's bench fixtures (`echo`, `big`): `bench` for the faulty callers,
/// `other` for the well-behaved one; no rate limits.
fn config(header_read_timeout: &str, request_timeout: &str) -> String {
    format!(
        "{sandbox}[server]\nheader_read_timeout = \"{header_read_timeout}\"\nrequest_timeout = \"{request_timeout}\"\n\
         mcp_session_idle = \"{MCP_SESSION_IDLE_SECS}s\"\n\n\
         [state]\ndatabase = \"memory\"\n\n\
         [limits]\nuser_calls_per_minute = 0\nserver_calls_per_minute = 0\n\
         user_concurrency = 1000\nserver_concurrency = 1000\n\n\
         [servers.bench]\ncommand = {bin}\nargs = [\"fixture\", \"bench\"]\n\
         read_only_tools = [\"echo\", \"big\"]\n\n\
         [servers.other]\ncommand = {bin}\nargs = [\"fixture\", \"bench\"]\n\
         read_only_tools = [\"echo\", \"big\"]\n",
        sandbox = sandbox_section(&[], &[]),
        bin = toml::Value::String(mcpgate_bin().to_string_lossy().into_owned()),
    )
}

/// How long an MCP session that hears nothing stays open, in these tests.
const MCP_SESSION_IDLE_SECS: u64 = 8;

struct Gateway {
    served: ServedBinary,
    http: reqwest::Client,
    token: String,
    addr: String,
}

impl Gateway {
    /// Serves with the given `[server] header_read_timeout` and `request_timeout`.
    async fn start(dir: &std::path::Path, timeouts: (&str, &str)) -> Gateway {
        let config = config(timeouts.0, timeouts.1);
        let served = ServedBinary::start(dir, Some(&config), &[]).await;
        served.wait_ready().await;
        let token = served.token.clone().expect("the dev token");
        let addr = served
            .base
            .strip_prefix("http://")
            .expect("served over HTTP")
            .to_owned();
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(WAIT)
            .build()
            .expect("client");
        Gateway {
            served,
            http,
            token,
            addr,
        }
    }

    fn pid(&self) -> u32 {
        self.served.pid()
    }

    /// The gateway's open file descriptors.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid()))
            .expect("the gateway's fds")
            .count()
    }

    /// The gateway's resident set, in MiB.
    fn rss_mib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the gateway's status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in kB");
        kib / 1024
    }

    /// A call of `other.echo` by a well-behaved caller.
    async fn echo(&self, message: &str) -> Value {
        let response = self
            .http
            .post(format!("{}/api/v1/mcp/tools/call", self.served.base))
            .bearer_auth(&self.token)
            .json(&json!({ "tool": "other.echo", "arguments": { "message": message } }))
            .send()
            .await
            .expect("the call is answered");
        response.json().await.expect("a JSON body")
    }

    /// Waits until the gateway holds at most `fds` descriptors.
    async fn settles_to(&self, fds: usize) {
        let start = Instant::now();
        while self.fds() > fds {
            assert!(
                start.elapsed() < WAIT,
                "the gateway still holds {} descriptors, {fds} before",
                self.fds()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_idle_connections_are_cut_and_others_served() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Long enough for the connections to be opened before the first are cut.
    let gw = Gateway::start(dir.path(), ("10s", "60s")).await;
    let (fds_before, rss_before) = (gw.fds(), gw.rss_mib());

    // 9,000 connections that never send a byte, and 1,000 that make one request and then
    // keep the connection open without another.
    let mut idle = Vec::new();
    for _ in 0..9_000 {
        idle.push(TcpStream::connect(&gw.addr).await.expect("connect"));
    }
    for _ in 0..1_000 {
        let mut stream = TcpStream::connect(&gw.addr).await.expect("connect");
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
            .await
            .expect("request");
        let mut answer = [0u8; 512];
        let read = stream.read(&mut answer).await.expect("answer");
        assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
        idle.push(stream);
    }
    let answer = gw.echo("beside 10,000 idle connections").await;
    assert_eq!(answer["ok"], json!(true), "{answer}");
    let held = gw.fds();
    let rss_held = gw.rss_mib();
    assert!(
        held > fds_before + 5_000,
        "the gateway holds only {held} descriptors"
    );

    // Cut at the header read timeout, fresh and kept-alive alike.
    gw.settles_to(fds_before + 2).await;
    for stream in idle.iter_mut().step_by(97) {
        let mut byte = [0u8; 1];
        let read = tokio::time::timeout(WAIT, stream.read(&mut byte)).await;
        assert!(
            matches!(read, Ok(Ok(0) | Err(_))),
            "a connection was left open"
        );
    }
    drop(idle);
    let answer = gw.echo("after").await;
    assert_eq!(answer["ok"], json!(true), "{answer}");
    // What 10,000 connections cost while held: a few KiB each (hyper's buffers and task).
    let grew = rss_held.saturating_sub(rss_before);
    assert!(grew < 256, "10,000 idle connections took {grew} MiB");
    gw.served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_sent_a_byte_a_second_is_cut_at_the_request_timeout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gw = Gateway::start(dir.path(), ("2s", "3s")).await;
    let fds_before = gw.fds();
    let body = json!({ "tool": "bench.echo", "arguments": { "message": "slow" } }).to_string();
    let mut stream = TcpStream::connect(&gw.addr).await.expect("connect");
    let head = format!(
        "POST /api/v1/mcp/tools/call HTTP/1.1\r\nhost: 127.0.0.1\r\n\
         authorization: Bearer {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n",
        gw.token,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("headers");
    let (reader, mut writer) = stream.into_split();
    let dripping = tokio::spawn(async move {
        for byte in body.bytes() {
            if writer.write_all(&[byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    let answer = gw.echo("meanwhile").await;
    assert_eq!(answer["ok"], json!(true), "{answer}");

    // The slow request is answered, typed, at `request_timeout` (3 s), long before its body
    // would have arrived; then its connection is closed.
    let mut reader = reader;
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, reader.read_to_end(&mut response))
        .await
        .expect("the connection is closed")
        .expect("read");
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 504"), "{response}");
    assert!(response.contains(r#""code":"timeout""#), "{response}");
    dripping.abort();
    gw.settles_to(fds_before).await;
    gw.served.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_never_read_hold_nothing_past_their_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gw = Gateway::start(dir.path(), ("2s", "60s")).await;
    let (fds_before, rss_before) = (gw.fds(), gw.rss_mib());
    let body = json!({ "tool": "bench.big", "arguments": { "bytes": 900_000 } }).to_string();
    let request = format!(
        "POST /api/v1/mcp/tools/call HTTP/1.1\r\nhost: 127.0.0.1\r\n\
         authorization: Bearer {}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        gw.token,
        body.len()
    );
    // 200 callers ask for 900 kB each and never read a byte of it.
    let mut silent = Vec::new();
    for _ in 0..200 {
        let mut stream = TcpStream::connect(&gw.addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("request");
        silent.push(stream);
    }
    let answer = gw.echo("beside 200 callers that never read").await;
    assert_eq!(answer["ok"], json!(true), "{answer}");
    // Each answer is handed to the kernel's socket buffer whole (the 1 MiB result bound is
    // below what loopback TCP buffers take), then the idle connection is cut at the header
    // timeout: nothing stays in the gateway.
    gw.settles_to(fds_before + 2).await;
    let grew = gw.rss_mib().saturating_sub(rss_before);
    assert!(grew < 128, "200 unread answers left {grew} MiB behind");
    drop(silent);
    gw.served.stop().await;
}

/// The endpoint the abandoning clients use: one server's view, whose cap on open sessions
/// (`server::mcp::MAX_SCOPE_SESSIONS`) is reached sooner than `/mcp`'s (1,024) and works
/// the same.
const VIEW: &str = "/mcp/bench";
/// That view's cap.
const MAX_SESSIONS: usize = 256;

impl Gateway {
    /// Opens an MCP session on [`VIEW`] (`initialize`, then `notifications/initialized`):
    /// its id, or the refusal's status and body.
    async fn open_session(&self) -> Result<String, (u16, String)> {
        let post = |session: Option<&str>, message: Value| {
            let mut request = self
                .http
                .post(format!("{}{VIEW}", self.served.base))
                .bearer_auth(&self.token)
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2025-11-25")
                .json(&message);
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
            request.send()
        };
        let initialize = json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": { "name": "abandoning", "version": "1" } } });
        let response = post(None, initialize).await.expect("answered");
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.text().await.unwrap_or_default();
        let Some(session) = session.filter(|_| status == 200) else {
            return Err((status, body));
        };
        let initialized = json!({ "jsonrpc": "2.0", "method": "notifications/initialized" });
        let response = post(Some(&session), initialized).await.expect("answered");
        assert_eq!(response.status().as_u16(), 202, "initialized");
        Ok(session)
    }

    /// Opens session `session`'s event stream (`GET` [`VIEW`]) on a connection of its own and
    /// reads the answer's head, nothing more.
    async fn open_stream(&self, session: &str) -> TcpStream {
        let mut stream = TcpStream::connect(&self.addr).await.expect("connect");
        let request = format!(
            "GET {VIEW} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\n\
             accept: text/event-stream\r\nmcp-session-id: {session}\r\n\
             mcp-protocol-version: 2025-11-25\r\n\r\n",
            self.token
        );
        stream.write_all(request.as_bytes()).await.expect("request");
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            let read = tokio::time::timeout(WAIT, stream.read(&mut byte))
                .await
                .expect("the stream's head in time")
                .expect("read");
            assert_eq!(
                read,
                1,
                "the stream's head: {}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(head.contains("text/event-stream"), "{head}");
        stream
    }
}

/// MCP clients that open sessions up to the cap (of a server's view of `/mcp`, 256), each with
/// its event stream, and vanish
/// without a `DELETE`: half close their connections, half keep them open and never read.
/// The cap holds (the next session is refused, typed), and once the sessions idled out
/// (`mcp_session_idle`) everything they held is let go: new sessions open again, the
/// descriptors come back, the memory they took is bounded. Meanwhile calls are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_mcp_sessions_and_streams_are_let_go() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gw = Gateway::start(dir.path(), ("2s", "60s")).await;
    let (fds_before, rss_before) = (gw.fds(), gw.rss_mib());
    let mut kept = Vec::new();
    for i in 0..MAX_SESSIONS {
        let session = gw.open_session().await.expect("a session under the cap");
        let stream = gw.open_stream(&session).await;
        if i % 2 == 0 {
            kept.push(stream);
        }
    }
    let (status, body) = gw.open_session().await.expect_err("a session past the cap");
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("too many open MCP sessions"), "{body}");
    let answer = gw.echo("beside 256 abandoned sessions").await;
    assert_eq!(answer["ok"], json!(true), "{answer}");
    let rss_held = gw.rss_mib();

    // Idled out: sessions open again.
    let start = Instant::now();
    let session = loop {
        if let Ok(session) = gw.open_session().await {
            break session;
        }
        assert!(
            start.elapsed() < WAIT + Duration::from_secs(MCP_SESSION_IDLE_SECS),
            "the abandoned sessions never idled out"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(!session.is_empty());
    // The streams kept open and never read were ended with their sessions, and their
    // connections cut.
    for stream in kept.iter_mut().step_by(31) {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(_) | Err(_))),
            "a stream of an idled-out session was left open"
        );
    }
    drop(kept);
    gw.settles_to(fds_before + 2).await;
    let grew = rss_held.saturating_sub(rss_before);
    assert!(grew < 128, "256 abandoned sessions took {grew} MiB");
    let answer = gw.echo("after").await;
    assert_eq!(answer["ok"], json!(true), "{answer}");
    gw.served.stop().await;
}
