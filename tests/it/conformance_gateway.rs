//! The MCP conformance suite's server mode (Node 22) against the gateway itself: `mcpgate
//! serve` with the `conformance` fixture as a stdio upstream, the suite pointed at the
//! per-server view `/mcp/conformance`, where the fixture's tools keep their own names.

use std::path::Path;

use crate::{
    conformance_server::SuiteRun,
    support::{ServedBinary, mcpgate_bin},
};

/// Measured on this machine kind (conformance 0.1.16): all 30 active scenarios pass through
/// the gateway, as they do directly against the fixture. The fixture speaks 2026-07-28 to the
/// gateway, so its sampling and elicitation arrive as input rounds, which the gateway answers
/// by asking the suite's client over its session and sends again; its log messages carry no
/// call id and reach the suite's client because every other request still known on the
/// connection is the same caller's; progress and log messages sent just before a call's
/// answer are relayed before it. Nothing is lost: this floor is the whole suite.
const PASSING_FLOOR: usize = 30;

/// `mcpgate serve` in `dir` with the conformance fixture (no confirmations, no
/// authentication, memory state) on a loopback port.
async fn serve(dir: &Path) -> ServedBinary {
    let config = format!(
        "{sandbox}[state]\ndatabase = \"memory\"\n\n[server.auth]\nmode = \"none\"\n\n\
         [servers.conformance]\ncommand = {bin:?}\nargs = [\"fixture\", \"conformance\"]\n\
         confirm = \"none\"\n",
        bin = mcpgate_bin().display().to_string(),
        sandbox = crate::support::sandbox_section(&[], &[]),
    );
    ServedBinary::start(dir, Some(&config), &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_conformance_scenarios_pass_through_the_gateway() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = serve(dir.path()).await;
    gateway.wait_ready().await;
    let run = SuiteRun::against(&format!("{}/mcp/conformance", gateway.base)).await;
    // Gracefully, so the gateway reaps its stdio child before it exits.
    let status = gateway.stop().await;

    run.assert_passes_at_least(PASSING_FLOOR);
    assert!(status.success(), "the gateway stopped cleanly: {status:?}");
}
