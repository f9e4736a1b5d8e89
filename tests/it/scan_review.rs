//! The model's second opinion on tool definitions (`[scan] model_review`), against the
//! scripted OpenAI-compatible server: each definition the rules pass is asked about once, in
//! the background; a flag is a `model_review` finding, which quarantines only when the
//! operator says so; calls never wait for the model.

use mcpgate::{
    catalog::{FindingCode, Severity, ToolStatus, review::GUARD_PROMPT},
    config::{Config, LlmConfig, ScanMode, ScanReviewConfig},
    gateway::Gateway,
};
use serde_json::{Value, json};

use crate::{
    scripted_llm::{Reply, ScriptedLlm},
    support::{CallExt as _, config, fixture, gateway, wait_for},
};

/// The `changing` fixture's tools in catalog order, before `gamma` is added.
const TOOLS: [&str; 5] = ["alpha", "beta", "listings", "mutate", "storm"];

fn verdict(poisoned: bool) -> Reply {
    Reply::text(&if poisoned {
        json!({ "verdict": "poisoned", "reason": "asks for the conversation" }).to_string()
    } else {
        json!({ "verdict": "clean", "reason": "describes the tool" }).to_string()
    })
}

/// `ch`, the `changing` fixture under `scan = "block"`, reviewed by `llm`.
fn reviewed(llm: &ScriptedLlm, blocks: bool) -> Config {
    let mut server = fixture("ch", "changing");
    server.scan = ScanMode::Block;
    let mut config = config(vec![server]);
    config.llm = Some(LlmConfig::new(llm.base_url(), "guard"));
    config.scan_review = ScanReviewConfig {
        enabled: true,
        blocks,
    };
    config
}

/// The user message of the model request `i`: the definition asked about.
fn asked_about(llm: &ScriptedLlm, i: usize) -> String {
    let request = &llm.requests()[i];
    let messages = request["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["content"], json!(GUARD_PROMPT));
    let definition = messages[1]["content"].as_str().expect("text");
    let start = definition.find('{').expect("a definition");
    let end = definition.rfind('}').expect("a definition");
    let parsed: Value = serde_json::from_str(&definition[start..=end]).expect("JSON");
    parsed["name"].as_str().expect("a name").to_owned()
}

fn tool_status(gw: &Gateway, name: &str) -> Option<(Vec<(FindingCode, Severity)>, ToolStatus)> {
    let catalog = gw.catalog();
    let tool = catalog.by_canonical(name)?;
    let findings = tool.findings.iter().map(|f| (f.code, f.severity)).collect();
    Some((findings, tool.status.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flag_is_a_medium_finding_and_each_definition_is_asked_about_once() {
    let mut replies = vec![verdict(true)];
    replies.extend((1..TOOLS.len()).map(|_| verdict(false)));
    replies.push(verdict(false));
    let llm = ScriptedLlm::start(replies).await;
    let gw = gateway(reviewed(&llm, false)).await;

    let (findings, status) = wait_for("the model's finding", || {
        tool_status(&gw, "ch.alpha").filter(|(findings, _)| !findings.is_empty())
    })
    .await;
    assert_eq!(findings, [(FindingCode::ModelReview, Severity::Medium)]);
    assert_eq!(
        status,
        ToolStatus::Ok,
        "the model alone does not quarantine"
    );
    llm.wait_requests(TOOLS.len()).await;
    let asked: Vec<String> = (0..TOOLS.len()).map(|i| asked_about(&llm, i)).collect();
    assert_eq!(asked, TOOLS, "each definition once, in catalog order");
    for clean in &TOOLS[1..] {
        let (findings, _) = tool_status(&gw, &format!("ch.{clean}")).expect("listed");
        assert!(findings.is_empty(), "{clean}: {findings:?}");
    }
    // The finding is where people look: the catalog a caller lists.
    let listed = gw.call("ch.beta", json!({})).await.expect("a call");
    assert!(!listed.text().is_empty());

    // A new tool: only it is asked about; the verdicts of the others are kept.
    gw.call("ch.mutate", json!({ "what": "add_tool" }))
        .await
        .expect("mutated");
    llm.wait_requests(TOOLS.len() + 1).await;
    assert_eq!(asked_about(&llm, TOOLS.len()), "gamma");
    wait_for("gamma's verdict in the catalog", || {
        tool_status(&gw, "ch.gamma").filter(|(findings, _)| findings.is_empty())
    })
    .await;
    let (findings, _) = tool_status(&gw, "ch.alpha").expect("listed");
    assert_eq!(findings, [(FindingCode::ModelReview, Severity::Medium)]);
    gw.shutdown().await;
    assert_eq!(llm.requests().len(), TOOLS.len() + 1, "nothing asked twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn told_to_the_flag_quarantines() {
    let mut replies = vec![verdict(true)];
    replies.extend((1..TOOLS.len()).map(|_| verdict(false)));
    let llm = ScriptedLlm::start(replies).await;
    let gw = gateway(reviewed(&llm, true)).await;
    let (findings, status) = wait_for("the quarantine", || {
        tool_status(&gw, "ch.alpha")
            .filter(|(_, status)| matches!(status, ToolStatus::Quarantined { .. }))
    })
    .await;
    assert_eq!(findings, [(FindingCode::ModelReview, Severity::High)]);
    let ToolStatus::Quarantined { reason } = status else {
        unreachable!()
    };
    assert!(reason.contains("model_review"), "{reason}");
    let refused = gw
        .call("ch.alpha", json!({}))
        .await
        .expect_err("quarantined");
    assert_eq!(refused.code(), "quarantined", "{refused}");
    gw.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_never_wait_for_the_model() {
    // The model answers nothing: the reviewer waits on its first request.
    let llm = ScriptedLlm::start(vec![verdict(false).stall_after(0)]).await;
    let gw = gateway(reviewed(&llm, true)).await;
    llm.wait_requests(1).await;
    let answer = gw.call("ch.beta", json!({})).await.expect("served");
    assert!(!answer.text().is_empty());
    let (findings, status) = tool_status(&gw, "ch.alpha").expect("listed");
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(status, ToolStatus::Ok);
    // Stopping the gateway ends the review in flight.
    tokio::time::timeout(crate::support::WAIT, gw.shutdown())
        .await
        .expect("the gateway stops with a review in flight");
}
