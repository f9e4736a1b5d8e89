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
    body::Body,
    extract::{Request, State},
    middleware::{self, Next},
    response::Response,
};
use bytes::Bytes;
use futures::StreamExt as _;
use mcpgate::{
    config::HttpKind,
    fixtures::Fixture,
    gateway::Gateway,
    upstream::{ServerState, ServerStatus},
};
use nix::{sys::signal, unistd::Pid};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::support::{
    CallExt as _, child_pids, config, fixture, gateway, http, id, peak_rss_kib,
    serve_fixture_behind, wait_for, wait_for_async,
};

fn status(gw: &Gateway, server: &str) -> ServerStatus {
    gw.servers()
        .into_iter()
        .find(|s| s.id.as_str() == server)
        .expect("the server is configured")
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

/// Whether every thread of process `pid` is stopped (`T` in its `stat`).
fn all_stopped(pid: Pid) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks.flatten() {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        let state = stat
            .rsplit_once(") ")
            .map(|(_, rest)| rest.as_bytes().first());
        if state != Some(Some(&b'T')) {
            return false;
        }
        any = true;
    }
    any
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
    // A stop takes effect after `kill` returns, thread by thread: the call goes once every
    // thread of the server is stopped.
    wait_for("every thread of the server to stop", || {
        all_stopped(pid).then_some(())
    })
    .await;
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

#[tokio::test]
async fn answers_to_no_request_second_answers_and_broken_json_reach_no_caller() {
    // Up to 2025-11-25 the gateway writes its calls itself and matches their answers; at
    // the latest revision rmcp does.
    for name in ["rogue-ids", "rogue-ids-latest"] {
        rogue_answers_reach_no_caller(name).await;
    }
}

async fn rogue_answers_reach_no_caller(name: &str) {
    use mcpgate::fixtures::{DECOY, ROGUE_MARKER};
    let gw = gateway(config(vec![fixture("rogue", name)])).await;
    let pid = fixture_pid(name);
    let echo = |message: String| {
        let gw = &gw;
        async move {
            let answer = gw
                .call("rogue.echo", json!({ "message": message }))
                .await
                .unwrap_or_else(|e| panic!("{message}: {e}"));
            (message, answer.text())
        }
    };
    // Callers at once: before each marked answer come broken JSON and an answer to a request
    // nobody made, after it a second answer under its id, while the others still wait.
    let at_once = (0..6).map(|i| match i {
        5 => "plain".to_owned(),
        i => format!("{ROGUE_MARKER} {i}"),
    });
    for (message, text) in futures::future::join_all(at_once.map(echo)).await {
        assert!(
            text.contains(&message) && !text.contains(DECOY),
            "{name}: {message} was answered {text:?}"
        );
    }
    // One after another: each call's second answer comes when the next call may be waiting.
    for i in 0..6 {
        let (message, text) = echo(format!("{ROGUE_MARKER} then {i}")).await;
        assert!(
            text.contains(&message) && !text.contains(DECOY),
            "{name}: {message} was answered {text:?}"
        );
    }
    // None of it cost the connection: the same process serves, the server is ready.
    let server = status(&gw, "rogue");
    assert_eq!(
        server.state,
        ServerState::Ready,
        "{name}: {:?}",
        server.last_error
    );
    assert_eq!(fixture_pid(name), pid, "{name}");
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
        let stop = CancellationToken::new();
        let pulled = Arc::new(AtomicU64::new(0));
        let state = pulled.clone();
        let url = serve_fixture_behind(
            Fixture::Bench,
            |app| {
                app.layer(middleware::from_fn_with_state(
                    state,
                    answer_with_a_gibibyte,
                ))
            },
            &stop,
        )
        .await;
        GibServer { url, pulled, stop }
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
    // That call alone: its answer passed the event bound (not the connection lost).
    assert_eq!(err.code(), "upstream_protocol_error", "{err}");
    assert!(err.to_string().contains("passed the bound"), "{err}");
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

    // The server serves ordinary calls still: an answer past its bound fails that call
    // alone, not the connection.
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

/// What [`fail_echoes`] saw: every request's JSON-RPC method.
#[derive(Clone, Default)]
struct Methods(Arc<std::sync::Mutex<Vec<String>>>);

impl Methods {
    fn count(&self, method: &str) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|m| *m == method)
            .count()
    }
}

/// An `echo` of `HTTP <status>` is answered with that status and a text body, as a proxy in
/// front of a failing server answers; every request's method is noted.
async fn fail_echoes(State(methods): State<Methods>, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Some(method) = message["method"].as_str() {
        methods
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(method.to_owned());
    }
    let status = message["params"]["arguments"]["message"]
        .as_str()
        .and_then(|m| m.strip_prefix("HTTP "))
        .and_then(|s| s.parse::<u16>().ok());
    match status {
        Some(status) if message["method"] == "tools/call" => Response::builder()
            .status(status)
            .header("content-type", "text/plain")
            .body(Body::from("the server failed"))
            .expect("a response"),
        _ => next.run(Request::from_parts(parts, Body::from(body))).await,
    }
}

/// On a 2026-07-28 server (no session: each call a POST of its own, sent by the gateway's
/// own HTTP path), an HTTP status for one call fails that call alone, typed, once: the
/// connection is not torn down and made again, and a read is not retried into the same
/// failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_status_for_one_stateless_call_fails_it_alone() {
    let stop = CancellationToken::new();
    let methods = Methods::default();
    let state = methods.clone();
    let url = serve_fixture_behind(
        Fixture::Bench,
        |app| app.layer(middleware::from_fn_with_state(state, fail_echoes)),
        &stop,
    )
    .await;
    let gw = gateway(config(vec![http("web", &url, HttpKind::Streamable)])).await;
    let listings = methods.count("tools/list");
    assert!(listings >= 1, "listed at the start");
    for failed in [500, 502, 503, 429, 413, 408] {
        let calls = methods.count("tools/call");
        let err = gw
            .call("web.echo", json!({ "message": format!("HTTP {failed}") }))
            .await
            .expect_err("the server failed it");
        assert_eq!(err.code(), "upstream_http_error", "{err}");
        assert!(err.to_string().contains(&format!("HTTP {failed}")), "{err}");
        assert_eq!(
            methods.count("tools/call"),
            calls + 1,
            "sent once: {failed}"
        );
        assert_eq!(status(&gw, "web").state, ServerState::Ready);
    }
    let fine = gw
        .call("web.echo", json!({ "message": "fine" }))
        .await
        .expect("the next call");
    assert!(fine.text().contains("fine"));
    assert_eq!(
        methods.count("tools/list"),
        listings,
        "no new connection listed the tools again"
    );
    gw.shutdown().await;
    stop.cancel();
}
