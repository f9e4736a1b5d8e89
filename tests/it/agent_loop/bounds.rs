//! The loop's bounds: the round limit and its last request without tools, repeated calls,
//! arguments that are not valid JSON, and cancellation (of a running tool call, seen by
//! the upstream, and of a model request).

use mcpgate::agent::{AgentEvent, TurnOptions};
use serde_json::{Value, json};

use super::{Harness, answer, call_id, error_code, eventually, kinds, rest, tool_error, until};
use crate::scripted_llm::{Ending, Reply};

fn echo(message: &str) -> Reply {
    Reply::tool_calls(&[("slow_echo", json!({ "message": message }))])
}

/// A reply cut off at the length limit in the middle of a call's arguments.
fn cut_off() -> Reply {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-cut", "object": "chat.completion.chunk", "created": 1,
            "model": "scripted",
            "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
        })
        .to_string()
    };
    Reply::raw(vec![
        chunk(
            json!({ "role": "assistant", "tool_calls": [{ "index": 0, "id": "call_cut",
                "type": "function",
                "function": { "name": "slow_echo", "arguments": "{\"message\": \"a long me" } }] }),
            Value::Null,
        ),
        chunk(json!({}), json!("length")),
    ])
}

fn rounds(events: &[AgentEvent]) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::RoundStart { round } => Some(*round),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn at_the_round_limit_one_last_request_without_tools_asks_for_the_answer() {
    let harness = Harness::with(
        vec![
            echo("one"),
            echo("two"),
            Reply::text("Done after two rounds."),
        ],
        |c| c.agent.max_rounds = 2,
    )
    .await;
    let events = harness.turn("keep going").await;
    assert_eq!(answer(&events), "Done after two rounds.");
    assert_eq!(rounds(&events), [0, 1, 2]);
    assert_eq!(harness.llm.requests().len(), 3);
    let last = harness.request(2);
    assert!(last.get("tools").is_none(), "{last}");
    assert!(last.get("tool_choice").is_none(), "{last}");
    let note = last["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("messages");
    assert_eq!(note["role"], "user");
    assert!(
        note["content"]
            .as_str()
            .is_some_and(|t| t.contains("limit of 2 tool rounds")),
        "{note}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn the_same_call_with_the_same_result_too_often_ends_the_turn() {
    let harness = Harness::with(
        vec![
            echo("again"),
            echo("again"),
            echo("again"),
            Reply::text("never"),
        ],
        |c| c.agent.max_repeats = 2,
    )
    .await;
    let events = harness.turn("loop").await;
    assert_eq!(error_code(&events), "repeated_call");
    match &events[events.len() - 2] {
        AgentEvent::Error { message, .. } => {
            assert!(
                message.contains("slow.echo") && message.contains("3 times"),
                "{message}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        harness.llm.requests().len(),
        3,
        "no request after the third"
    );
    harness.stop().await;
}

#[tokio::test]
async fn arguments_cut_off_are_retried_with_a_note_never_run_as_empty() {
    let harness = Harness::with(
        vec![cut_off(), Reply::text("Let me answer without it.")],
        |c| c.agent.max_argument_retries = 1,
    )
    .await;
    let events = harness.turn("echo something long").await;
    let cut = call_id(&events, "slow.echo");
    let (code, message) = tool_error(&events, &cut);
    assert_eq!(code, "invalid_json_arguments");
    assert!(message.contains("cut off"), "{message}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolResult { .. })),
        "nothing ran"
    );
    assert_eq!(answer(&events), "Let me answer without it.");
    let retry = harness.request(1);
    let messages = retry["messages"].as_array().expect("messages");
    assert!(
        messages
            .iter()
            .all(|m| m["role"] != "assistant" && m["role"] != "tool"),
        "the broken reply is not sent back: {retry}"
    );
    let note = messages.last().expect("a note");
    assert_eq!(note["role"], "user");
    assert!(
        note["content"]
            .as_str()
            .is_some_and(|t| t.contains("not valid JSON") && t.contains("cut off")),
        "{note}"
    );

    // Retries are bounded: the second broken reply in a row ends the turn.
    harness.llm.push(cut_off());
    harness.llm.push(cut_off());
    harness.llm.push(Reply::text("never asked"));
    let events = harness.turn("again").await;
    assert_eq!(error_code(&events), "invalid_tool_arguments");
    assert_eq!(harness.llm.requests().len(), 4);
    harness.stop().await;
}

#[tokio::test]
async fn cancelling_mid_tool_cancels_the_upstream_call() {
    let harness = Harness::start(vec![Reply::tool_calls(&[(
        "slow_sleep",
        json!({ "ms": 60000 }),
    )])])
    .await;
    let options = TurnOptions::default();
    let cancel = options.cancel.clone();
    let mut events = harness.stream("sleep a minute", options);
    // A progress notice proves the upstream is running the call.
    let seen = until(&mut events, |e| {
        matches!(e, AgentEvent::ToolProgress { .. })
    })
    .await;
    let sleep = call_id(&seen, "slow.sleep");
    cancel.cancel();
    let events = rest(&mut events).await;
    assert_eq!(tool_error(&events, &sleep).0, "cancelled");
    assert_eq!(error_code(&events), "cancelled");
    let stats = eventually("the upstream to see the cancellation", || async {
        let stats = harness.call("slow.sleep_stats", json!({})).await;
        (stats["cancelled"] == 1 && stats["in_flight"] == 0).then_some(stats)
    })
    .await;
    assert_eq!(stats["completed"], 0, "{stats}");
    harness.stop().await;
}

#[tokio::test]
async fn cancelling_during_the_model_request_aborts_it() {
    let harness = Harness::start(vec![Reply::text("This answer never ends").stall_after(2)]).await;
    let options = TurnOptions::default();
    let cancel = options.cancel.clone();
    let mut events = harness.stream("talk", options);
    until(&mut events, |e| matches!(e, AgentEvent::TextDelta { .. })).await;
    cancel.cancel();
    let events = rest(&mut events).await;
    assert_eq!(error_code(&events), "cancelled");
    assert_eq!(kinds(&events).last(), Some(&"done"));
    assert_eq!(harness.llm.wait_ending(0).await, Ending::Dropped);
    harness.stop().await;
}
