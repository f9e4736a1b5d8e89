//! The same two tool calls in each recorded provider's stream shape (OpenAI, vLLM, llama.cpp,
//! Ollama, TGI, Gemini) give the loop the same calls: the same tools with the same
//! arguments, run through the gate, answered in call order.

use mcpgate::agent::AgentEvent;
use serde_json::{Value, json};

use super::{Harness, answer, tool_messages};
use crate::scripted_llm::{Provider, Reply};

#[tokio::test]
async fn every_provider_shape_gives_the_loop_the_same_calls() {
    let calls = [
        ("slow_echo", json!({ "message": "first" })),
        ("demo_add", json!({ "a": 2, "b": 3 })),
    ];
    for provider in Provider::ALL {
        let harness = Harness::start(vec![
            Reply::provider(provider, &calls),
            Reply::text("Done."),
        ])
        .await;
        let events = harness.turn("echo and add").await;
        assert_eq!(answer(&events), "Done.", "{provider:?}: {events:#?}");
        let called: Vec<(String, Value)> = events
            .iter()
            .filter_map(|e| match e {
                AgentEvent::ToolCall {
                    tool, arguments, ..
                } => Some((tool.clone(), arguments.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(
            called,
            [
                ("slow.echo".to_owned(), json!({ "message": "first" })),
                ("demo.add".to_owned(), json!({ "a": 2, "b": 3 })),
            ],
            "{provider:?}"
        );
        let results = events
            .iter()
            .filter(|e| matches!(e, AgentEvent::ToolResult { .. }))
            .count();
        assert_eq!(results, 2, "{provider:?}: {events:#?}");
        // The second request answers both calls, in call order, under the ids it echoes.
        let second = harness.request(1);
        let answered = tool_messages(&second);
        assert_eq!(answered.len(), 2, "{provider:?}: {second:#}");
        let assistant = second["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "assistant"))
            .cloned()
            .unwrap_or_else(|| panic!("{provider:?}: no assistant message in {second:#}"));
        let ids: Vec<String> = assistant["tool_calls"]
            .as_array()
            .map(|calls| {
                calls
                    .iter()
                    .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            answered
                .iter()
                .map(|(id, _)| id.clone())
                .collect::<Vec<_>>(),
            ids,
            "{provider:?}"
        );
        assert!(
            answered[0].1.contains("first"),
            "{provider:?}: {answered:?}"
        );
        assert!(answered[1].1.contains('5'), "{provider:?}: {answered:?}");
        harness.stop().await;
    }
}
