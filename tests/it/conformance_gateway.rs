//! The MCP conformance suite's server mode (Node 22) against the gateway itself: `mcpgate
//! serve` with the `conformance` fixture as a stdio upstream, the suite pointed at the
//! per-server view `/mcp/conformance`, where the fixture's tools keep their own names.

use std::path::Path;

use crate::{
    conformance_server::SuiteRun,
    support::{ServedBinary, mcpgate_bin},
};

/// Measured on this machine kind (conformance 0.1.16): all 30 active scenarios pass through
/// the gateway, as they do directly against the fixture, over each upstream path below.
/// Nothing is lost: this floor is the whole suite.
const PASSING_FLOOR: usize = 30;

/// `mcpgate serve` in `dir` in front of `upstream` (a `[servers.conformance]` body), no
/// confirmations, no authentication, memory state, on a loopback port.
async fn serve(dir: &Path, upstream: &str) -> ServedBinary {
    let config = format!(
        "{sandbox}[state]\ndatabase = \"memory\"\n\n[server.auth]\nmode = \"none\"\n\n\
         [servers.conformance]\n{upstream}confirm = \"none\"\n",
        sandbox = crate::support::sandbox_section(&[], &[]),
    );
    ServedBinary::start(dir, Some(&config), &[]).await
}

fn stdio(fixture: &str) -> String {
    format!(
        "command = {bin:?}\nargs = [\"fixture\", {fixture:?}]\n",
        bin = mcpgate_bin().display().to_string()
    )
}

/// Runs the suite at `/mcp/conformance` of a gateway in front of `upstream`.
async fn suite_through_the_gateway(upstream: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = serve(dir.path(), upstream).await;
    gateway.wait_ready().await;
    let run = SuiteRun::against(&format!("{}/mcp/conformance", gateway.base)).await;
    // Gracefully, so the gateway reaps its stdio child before it exits.
    let status = gateway.stop().await;

    run.assert_passes_at_least(PASSING_FLOOR);
    assert!(status.success(), "the gateway stopped cleanly: {status:?}");
}

/// A stdio upstream on 2026-07-28: its sampling and elicitation arrive as input rounds,
/// which the gateway answers by asking the suite's client over its session and sends again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_conformance_scenarios_pass_through_the_gateway() {
    suite_through_the_gateway(&stdio("conformance")).await;
}

/// A stdio upstream up to 2025-11-25, asking sampling and elicitation with requests that
/// name no call, as SDK-built servers do: one process, one session, so such a request goes to
/// the one call running (the suite runs its scenarios one at a time), whatever ended before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_passes_through_the_gateway_to_a_2025_stdio_server() {
    suite_through_the_gateway(&stdio("conformance-2025")).await;
}

/// The same server over Streamable HTTP: its unlinked requests come on the standalone
/// stream of the upstream session the gateway opened for the suite's client alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_passes_through_the_gateway_to_a_2025_http_server() {
    let port = crate::support::free_port();
    let mut fixture = tokio::process::Command::new(mcpgate_bin())
        .args([
            "fixture",
            "conformance-2025",
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the fixture starts");
    let start = std::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            start.elapsed() < crate::support::WAIT,
            "the fixture listens"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let upstream = format!(
        "url = \"http://127.0.0.1:{port}/mcp\"\ntransport = \"streamable-http\"\n\
         allow_private = true\n"
    );
    suite_through_the_gateway(&upstream).await;
    fixture.kill().await.expect("the fixture stops");
}
