//! The chat page against the scripted model: tool cards for two reads and two writes (one
//! approved from the keyboard, one denied), Stop during a slow tool, and an answer full of
//! markup that renders inert. The Rust side checks what the gateway and the model saw.

use std::time::Duration;

use mcpgate::{config::LlmConfig, gateway::Gateway, policy::CallContext};
use serde_json::{Value, json};

use super::{PageService, jwt, run_script, servers};
use crate::{
    scripted_llm::{Reply, ScriptedLlm, offered},
    support::{self, wait_for},
};

/// A page service whose model answers with `replies`, and a token for user `ada`.
async fn start(replies: Vec<Reply>) -> (PageService, ScriptedLlm, String) {
    let llm = ScriptedLlm::start(replies).await;
    let mut config = support::config(servers());
    config.llm = Some(LlmConfig::new(llm.base_url(), "scripted"));
    let gateway = support::gateway(config).await;
    let service = PageService::start(gateway).await;
    (service, llm, jwt("ada", &["admin"]))
}

/// The page's user, calling directly through the gate (any session: reads need none).
fn ada() -> CallContext {
    CallContext {
        tenant: "local".into(),
        user: "ada".into(),
        session: "checks".into(),
        roles: vec![],
        request_id: "page-test".into(),
    }
}

async fn call(gateway: &Gateway, tool: &str) -> Value {
    let output = gateway
        .call_tool(&ada(), tool, json!({}), None)
        .await
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let text = output.text();
    output.structured.clone().unwrap_or(json!(text))
}

/// The `tool` messages of one request to the model, as text.
fn tool_messages(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|m| m["role"] == "tool")
                .map(|m| m["content"].to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn tool_cards_approve_and_deny_in_the_browser() {
    let (service, llm, token) = start(vec![
        Reply::tool_calls(&[
            ("demo_echo", json!({ "message": "hello from the page" })),
            ("conf_test_image_content", json!({})),
            (
                "demo_add_note",
                json!({ "title": "keep", "body": "approved in the page" }),
            ),
            (
                "demo_add_note",
                json!({ "title": "drop", "body": "denied in the page" }),
            ),
        ]),
        Reply::text("Saved **keep**; `drop` was denied, so it was not saved."),
    ])
    .await;
    run_script(
        "chat_tools.mjs",
        &[("MCPGATE_URL", &service.base), ("MCPGATE_TOKEN", &token)],
        &[
            "a read tool's card shows its arguments and result",
            "an image result is shown and named as the model knows it",
            "two writes wait for approval at once, showing what will run and until when",
            "approve from the keyboard runs the write",
            "deny from the keyboard tells the model",
            "the answer renders and the cards fold into Used 4 tools",
        ],
    )
    .await;
    let gateway = &service.gateway;
    let notes = call(gateway, "demo.list_notes").await.to_string();
    assert!(notes.contains("keep") && !notes.contains("drop"), "{notes}");
    let records = gateway
        .audit_store()
        .query(mcpgate::store::AuditQuery {
            tool: Some("demo.add_note".into()),
            ..Default::default()
        })
        .await
        .expect("audit");
    // Besides the two decisions (approved, denied), one call reached the upstream.
    let ran: Vec<_> = records
        .iter()
        .filter(|(_, r)| r.decision == "allowed")
        .collect();
    assert_eq!(ran.len(), 1, "the approved write ran once: {records:?}");
    assert_eq!(ran[0].1.outcome, "ok");
    let decisions: Vec<&str> = records.iter().map(|(_, r)| r.decision.as_str()).collect();
    assert!(
        decisions.contains(&"approved") && decisions.contains(&"denied"),
        "{decisions:?}"
    );
    let fed_back = tool_messages(&llm.requests()[1]);
    assert!(
        fed_back.iter().any(|m| m.contains("denied_by_user")),
        "the model is told of the denial: {fed_back:?}"
    );
    assert!(
        fed_back.iter().any(|m| m.contains("Saved note `keep`.")),
        "{fed_back:?}"
    );
    service.stop().await;
}

#[tokio::test]
async fn stop_cancels_a_slow_tool_in_the_browser() {
    let (service, llm, token) = start(vec![Reply::tool_calls(&[(
        "slow_sleep",
        json!({ "ms": 60_000 }),
    )])])
    .await;
    run_script(
        "chat_stop.mjs",
        &[("MCPGATE_URL", &service.base), ("MCPGATE_TOKEN", &token)],
        &[
            "the slow tool's card shows progress",
            "Stop cancels the turn and the running tool",
        ],
    )
    .await;
    let gateway = service.gateway.clone();
    let mut stats = json!(null);
    for _ in 0..(support::WAIT.as_millis() / 50) {
        stats = call(&gateway, "slow.sleep_stats").await;
        if stats["in_flight"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(stats["in_flight"], 0, "{stats}");
    assert_eq!(
        stats["cancelled"], 1,
        "the upstream call was cancelled: {stats}"
    );
    assert_eq!(stats["completed"], 0, "{stats}");
    assert_eq!(llm.requests().len(), 1, "no round after the stop");
    service.stop().await;
}

#[tokio::test]
async fn model_markup_renders_inert_in_the_browser() {
    let hostile = "Look: <img src=x onerror=\"window.__xss=1\"> <script>window.__xss=2</script> \
                   [a link](javascript:window.__xss=3) \
                   <a href=\"javascript:window.__xss=4\" onclick=\"window.__xss=5\">raw</a> \
                   **bold** and [docs](https://example.com/docs)";
    let (service, llm, token) = start(vec![
        Reply::text(hostile).chunk_delay(Duration::from_millis(5)),
        Reply::reasoning(
            "reasoning_content",
            "The user asks again.",
            "Second answer.",
        ),
    ])
    .await;
    run_script(
        "chat_untrusted.mjs",
        &[("MCPGATE_URL", &service.base), ("MCPGATE_TOKEN", &token)],
        &[
            "streamed text and the final answer never become markup that runs",
            "safe Markdown renders",
            "reasoning is shown folded",
        ],
    )
    .await;
    wait_for("two model requests", || {
        (llm.requests().len() == 2).then_some(())
    })
    .await;
    // The second turn carried the conversation: both questions and the first answer.
    let messages = llm.requests()[1]["messages"].to_string();
    for part in ["first question", "second question", "**bold**"] {
        assert!(messages.contains(part), "{part} missing from {messages}");
    }
    service.stop().await;
}

#[tokio::test]
async fn server_toggles_narrow_the_tools_the_model_is_offered() {
    let (service, llm, token) =
        start(vec![Reply::text("Only the slow and conformance tools.")]).await;
    run_script(
        "chat_servers.mjs",
        &[("MCPGATE_URL", &service.base), ("MCPGATE_TOKEN", &token)],
        &[
            "each server shows its tools and their size",
            "a server switched off is left out of the turn",
            "the choice stays with the conversation, and New chat resets it",
        ],
    )
    .await;
    let requests = llm.requests();
    assert_eq!(requests.len(), 1, "one turn, one request");
    let offered = offered(&requests[0]);
    assert!(
        offered.iter().any(|name| name.starts_with("slow_")),
        "{offered:?}"
    );
    assert!(
        !offered.iter().any(|name| name.starts_with("demo_")),
        "the server switched off is left out: {offered:?}"
    );
    service.stop().await;
}

/// Two models: `writer` (no tools, the default) and `tools`; the page picks, and each turn
/// reaches the model the gateway routed it to.
#[tokio::test]
async fn the_model_picker_chooses_and_routing_shows_in_the_page() {
    use mcpgate::config::{ModelsConfig, NamedModel};
    let writer = ScriptedLlm::start(vec![Reply::text("Leaves fall, tools rest.")]).await;
    let tools = ScriptedLlm::start(vec![
        Reply::text("It is time to test."),
        Reply::text("Still time to test."),
    ])
    .await;
    let mut plain = LlmConfig::new(writer.base_url(), "writer-model");
    plain.tools = false;
    let named = |name: &str, llm: LlmConfig| NamedModel {
        name: name.to_owned(),
        llm,
        max_running_turns: None,
        price: None,
    };
    let mut config = support::config(servers());
    config.models = ModelsConfig {
        list: vec![
            named("writer", plain.clone()),
            named("tools", LlmConfig::new(tools.base_url(), "tools-model")),
        ],
        default: Some("writer".into()),
        tools_model: Some("tools".into()),
    };
    config.llm = Some(plain);
    let service = PageService::start(support::gateway(config).await).await;
    run_script(
        "chat_models.mjs",
        &[
            ("MCPGATE_URL", &service.base),
            ("MCPGATE_TOKEN", &jwt("ada", &["admin"])),
        ],
        &[
            "the picker lists the models with the default chosen",
            "without tools the chosen model answers",
            "a turn with tools on a model without them is answered by the tools model",
            "the model picked is the one asked",
        ],
    )
    .await;
    let asked = writer.requests();
    assert_eq!(asked.len(), 1, "the writer answered the turn without tools");
    assert!(offered(&asked[0]).is_empty());
    let asked = tools.requests();
    assert_eq!(asked.len(), 2, "the tools model answered the other two");
    assert!(offered(&asked[0]).iter().any(|n| n.starts_with("demo_")));
    service.stop().await;
}
