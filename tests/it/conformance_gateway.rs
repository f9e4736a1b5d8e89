//! The MCP conformance suite's server mode (Node 22) against the gateway itself: `mcpgate
//! serve` with the `conformance` fixture as a stdio upstream, the suite pointed at the
//! per-server view `/mcp/conformance`, where the fixture's tools keep their own names.

use std::{path::Path, process::Stdio, time::Duration};

use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
};

use crate::{
    conformance_server::SuiteRun,
    support::{WAIT, mcpgate_bin},
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
/// authentication, memory state) on a loopback port; returns the child and its base URL.
async fn serve(dir: &Path) -> (Child, String) {
    let config = format!(
        "{sandbox}[state]\ndatabase = \"memory\"\n\n[server.auth]\nmode = \"none\"\n\n\
         [servers.conformance]\ncommand = {bin:?}\nargs = [\"fixture\", \"conformance\"]\n\
         confirm = \"none\"\n",
        bin = mcpgate_bin().display().to_string(),
        sandbox = crate::support::sandbox_section(&[], &[]),
    );
    std::fs::write(dir.join("mcpgate.toml"), config).expect("config written");
    let mut child = Command::new(mcpgate_bin())
        .current_dir(dir)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("serve starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut base = None;
    while let Some(line) = tokio::time::timeout(WAIT, lines.next_line())
        .await
        .expect("banner in time")
        .expect("stdout readable")
    {
        if let Some(rest) = line.strip_prefix("mcpgate is serving on ") {
            base = Some(rest.trim().to_owned());
        }
        if line.starts_with("Press Ctrl-C") {
            break;
        }
    }
    // Whatever the gateway prints later must never fill the pipe and stall it.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base.expect("address printed"))
}

/// Waits until `/readyz` says every upstream settled, so the suite meets the fixture's tools.
async fn wait_ready(base: &str) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let ready = async {
        loop {
            let response = client.get(format!("{base}/readyz")).send().await;
            if response.is_ok_and(|r| r.status().is_success()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(WAIT, ready)
        .await
        .expect("the gateway gets ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_conformance_scenarios_pass_through_the_gateway() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (mut gateway, base) = serve(dir.path()).await;
    wait_ready(&base).await;
    let run = SuiteRun::against(&format!("{base}/mcp/conformance")).await;
    // Gracefully, so the gateway reaps its stdio child before it exits.
    let pid = gateway.id().expect("the gateway is running");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a Linux pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("signal sent");
    let status = tokio::time::timeout(WAIT, gateway.wait())
        .await
        .expect("the gateway exits in time")
        .expect("the gateway is reaped");

    run.assert_passes_at_least(PASSING_FLOOR);
    assert!(status.success(), "the gateway stopped cleanly: {status:?}");
}
