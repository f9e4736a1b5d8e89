//! Faults of an upstream, injected with processes and loopback only (RELIABILITY.md): a
//! server stopped mid-call, an answer that trickles a byte a second, a `tools/list_changed`
//! storm, a listing of 100 000 tools, an answer of a gibibyte. Each time the caller gets a
//! typed error within its deadline and the gateway keeps serving the other servers.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Body,
    extract::{Request, State},
    middleware::{self, Next},
    response::Response,
};
use bytes::Bytes;
use futures::StreamExt as _;
use mcpgate::{
    config::HttpKind,
    fixtures::{Fixture, handler},
    gateway::Gateway,
    upstream::{ServerState, ServerStatus},
};
use nix::{sys::signal, unistd::Pid};
use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{
    CallExt as _, child_pids, config, fixture, gateway, http, id, wait_for, wait_for_async,
};

fn status(gw: &Gateway, server: &str) -> ServerStatus {
    gw.servers()
        .into_iter()
        .find(|s| s.id.as_str() == server)
        .expect("the server is configured")
}

/// The highest resident set size this process reached, in KiB (`VmHWM`).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM in kB")
}

/// The PID of this test's fixture server `fixture` (not of the supervisor that runs it).
fn fixture_pid(fixture: &str) -> Pid {
    let own = i32::try_from(std::process::id()).expect("a Linux pid");
    child_pids(own)
        .into_iter()
        .find(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                args.get(1..3) == Some(&[b"fixture".as_slice(), fixture.as_bytes()])
            })
        })
        .map(Pid::from_raw)
        .expect("the fixture runs as a child of this test")
}

#[tokio::test]
async fn a_server_listing_100000_tools_is_refused_with_bounded_memory() {
    let before = peak_rss_kib();
    let gw = gateway(config(vec![
        fixture("flood", "flood"),
        fixture("fine", "paginate"),
    ]))
    .await;
    let flood = status(&gw, "flood");
    assert_ne!(flood.state, ServerState::Ready);
    let error = flood.last_error.expect("the refusal is shown");
    assert!(error.contains("more than 10000 tools"), "{error}");
    assert!(gw.catalog().for_server(&id("flood")).is_empty());
    assert_eq!(gw.catalog().for_server(&id("fine")).len(), 25);

    let refused = gw
        .call("flood.tool_000001", json!({ "message": "hi" }))
        .await
        .expect_err("no tool of a refused listing is callable");
    assert_eq!(refused.code(), "not_found", "{refused}");
    let echoed = gw
        .call("fine.tool_00", json!({ "message": "still here" }))
        .await
        .expect("the other server serves");
    assert!(echoed.text().contains("still here"));

    // What the refusal cost: ten pages of 1 000 small tools and the eleventh that passed the
    // bound (about 2 MB of JSON in all), not the 100 000 tools. Listing all of them (the
    // bound raised to 1 000 000) peaked 1.2 GiB higher in a debug build, and the gateway
    // took over a minute to scan them before it served anything.
    let grew_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(
        grew_mib < 128,
        "the peak resident set grew by {grew_mib} MiB"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_list_changed_storm_costs_one_listing_a_second() {
    let gw = gateway(config(vec![
        fixture("shifty", "changing"),
        fixture("fine", "paginate"),
    ]))
    .await;
    let listings = async || -> u64 {
        let answer = gw
            .call("shifty.listings", json!({}))
            .await
            .expect("listings");
        answer.text().parse().expect("a number")
    };
    let fingerprint = || {
        gw.catalog()
            .by_canonical("shifty.alpha")
            .map(|t| t.fingerprint.clone())
    };
    let alpha_before = fingerprint().expect("alpha is listed");
    let listed_before = listings().await;

    // A real change, not announced, then 10 000 announcements of it.
    gw.call(
        "shifty.mutate",
        json!({ "what": "description", "quiet": true }),
    )
    .await
    .expect("mutate");
    let start = Instant::now();
    let (stormed, served) = tokio::join!(
        gw.call("shifty.storm", json!({ "count": 10_000 })),
        gw.call("fine.tool_00", json!({ "message": "during the storm" })),
    );
    assert_eq!(stormed.expect("the storm").text(), "stormed: 10000");
    assert!(
        served
            .expect("others are served")
            .text()
            .contains("during the storm")
    );

    // The change is seen, once the listings it asked for ran.
    wait_for("alpha's new description", || {
        fingerprint().filter(|f| *f != alpha_before)
    })
    .await;
    // Let a listing the storm asked for last run, then count: one a second at most, and
    // the first at once.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let seconds = start.elapsed().as_secs();
    let relisted = listings().await - listed_before;
    assert!(relisted >= 1, "the storm was not listened to");
    assert!(
        relisted <= seconds + 2,
        "{relisted} listings in {seconds} s for 10 000 notifications"
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_server_stopped_mid_call_times_out_typed_and_others_serve() {
    let mut stopped = fixture("stopped", "bench");
    stopped.call_timeout = Some(Duration::from_secs(2));
    let gw = gateway(config(vec![stopped, fixture("fine", "paginate")])).await;
    let pid = fixture_pid("bench");
    gw.call("stopped.echo", json!({ "message": "before" }))
        .await
        .expect("a call before the stop");

    signal::kill(pid, signal::Signal::SIGSTOP).expect("SIGSTOP");
    let (stopped_call, fine_call) = tokio::join!(
        gw.call("stopped.echo", json!({ "message": "while stopped" })),
        gw.call("fine.tool_00", json!({ "message": "meanwhile" })),
    );
    let resumed = signal::kill(pid, signal::Signal::SIGCONT);
    let err = stopped_call.expect_err("a stopped server cannot answer");
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(
        fine_call
            .expect("the other server")
            .text()
            .contains("meanwhile")
    );
    resumed.expect("SIGCONT");

    // Resumed, the server answers again; its late answer to the abandoned call is dropped.
    wait_for_async("the resumed server to answer", || async {
        gw.call("stopped.echo", json!({ "message": "after" }))
            .await
            .ok()
            .filter(|r| r.text().contains("after"))
    })
    .await;
    gw.shutdown().await;
}

#[tokio::test]
async fn an_answer_dripping_a_byte_a_second_times_out_typed() {
    let mut drip = fixture("drip", "drip");
    drip.call_timeout = Some(Duration::from_secs(2));
    let gw = gateway(config(vec![drip, fixture("fine", "paginate")])).await;
    gw.call("drip.echo", json!({ "message": "plain" }))
        .await
        .expect("an answer without the marker comes at once");

    let (dripping, fine_call) = tokio::join!(
        gw.call(
            "drip.echo",
            json!({ "message": mcpgate::fixtures::DRIP_MARKER })
        ),
        gw.call("fine.tool_00", json!({ "message": "meanwhile" })),
    );
    let err = dripping.expect_err("a trickle is not an answer");
    assert_eq!(err.code(), "timeout", "{err}");
    assert!(
        fine_call
            .expect("the other server")
            .text()
            .contains("meanwhile")
    );

    // Everything behind the trickle waits too, and still ends typed at its deadline.
    let behind = gw
        .call("drip.echo", json!({ "message": "behind it" }))
        .await
        .expect_err("stuck behind the trickle");
    assert_eq!(behind.code(), "timeout", "{behind}");
    gw.shutdown().await;
}

/// A Streamable HTTP server (rmcp's, with the bench fixture's tools) whose answer to an
/// `echo` of [`GIB_PLEASE`] is one SSE event of a gibibyte, made as it is read; `pulled`
/// counts the bytes the gateway's connection took.
struct GibServer {
    url: String,
    pulled: Arc<AtomicU64>,
    stop: CancellationToken,
}

const GIB_PLEASE: &str = "one gibibyte, please";
const GIB: u64 = 1 << 30;

async fn answer_with_a_gibibyte(
    State(pulled): State<Arc<AtomicU64>>,
    request: Request,
    next: Next,
) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let wanted = message["method"] == "tools/call"
        && message["params"]["arguments"]["message"] == GIB_PLEASE;
    if !wanted {
        return next.run(Request::from_parts(parts, Body::from(body))).await;
    }
    let head = format!(
        r#"data: {{"jsonrpc":"2.0","id":{},"result":{{"content":[{{"type":"text","text":""#,
        message["id"]
    );
    const CHUNK: usize = 64 * 1024;
    let chunk = Bytes::from(vec![b'x'; CHUNK]);
    let chunks = (GIB / CHUNK as u64) as usize;
    let parts = std::iter::once(Bytes::from(head))
        .chain(std::iter::repeat_n(chunk, chunks))
        .chain(std::iter::once(Bytes::from_static(b"\"}]}}\n\n")));
    let stream = futures::stream::iter(parts).map(move |part| {
        pulled.fetch_add(part.len() as u64, Ordering::Relaxed);
        Ok::<_, std::convert::Infallible>(part)
    });
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .expect("a response")
}

impl GibServer {
    async fn start() -> GibServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let fixture = handler(Fixture::Bench).expect("the bench fixture has a handler");
        let stop = CancellationToken::new();
        let service: StreamableHttpService<_, LocalSessionManager> = StreamableHttpService::new(
            move || Ok(fixture.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default().with_cancellation_token(stop.child_token()),
        );
        let pulled = Arc::new(AtomicU64::new(0));
        let app =
            Router::new()
                .route_service("/mcp", service)
                .layer(middleware::from_fn_with_state(
                    pulled.clone(),
                    answer_with_a_gibibyte,
                ));
        let shutdown = stop.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { shutdown.cancelled().await })
                .await;
        });
        GibServer {
            url: format!("http://{addr}/mcp"),
            pulled,
            stop,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gibibyte_answer_is_cut_off_early_with_bounded_memory() {
    let upstream = GibServer::start().await;
    let before = peak_rss_kib();
    let gw = gateway(config(vec![
        http("huge", &upstream.url, HttpKind::Streamable),
        fixture("fine", "paginate"),
    ]))
    .await;
    let (huge, fine_call) = tokio::join!(
        gw.call("huge.echo", json!({ "message": GIB_PLEASE })),
        gw.call("fine.tool_00", json!({ "message": "meanwhile" })),
    );
    let err = huge.expect_err("a gibibyte is no answer");
    assert!(
        [
            "upstream_connection_lost",
            "result_too_large",
            "upstream_protocol_error"
        ]
        .contains(&err.code()),
        "{err}"
    );
    assert!(
        fine_call
            .expect("the other server")
            .text()
            .contains("meanwhile")
    );

    // The gateway stopped reading soon after the event passed its bound (16 MiB), and held
    // no more than that.
    let pulled_mib = upstream.pulled.load(Ordering::Relaxed) >> 20;
    assert!(
        pulled_mib < 64,
        "the gateway read {pulled_mib} MiB of the answer"
    );
    let grew_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(
        grew_mib < 128,
        "the peak resident set grew by {grew_mib} MiB"
    );

    // The server serves ordinary calls again: the call that saw its answer cut ended the
    // connection, and the supervisor made a new one (before, the server stayed degraded
    // for good: over HTTP no process exits to tell the supervisor).
    wait_for_async("the server to answer again", || async {
        gw.call("huge.echo", json!({ "message": "small" }))
            .await
            .ok()
            .filter(|r| r.text().contains("small"))
    })
    .await;
    gw.shutdown().await;
    upstream.stop.cancel();
}
