//! Write tools in a turn: `approval_required`, then approve (the gate's token runs exactly
//! that call), deny, or no answer before the confirmation expires; only the same user and
//! session decide; other calls of the round go on meanwhile.

use std::time::Duration;

use mcpgate::agent::{AgentEvent, ApprovalError, Decision, TurnOptions};
use serde_json::json;

use super::{Harness, answer, rest, stranger, tool_error, tool_messages, until};
use crate::{scripted_llm::Reply, support::ctx};

fn add_note(title: &str) -> Reply {
    Reply::tool_calls(&[
        (
            "demo_add_note",
            json!({ "title": title, "body": "from the chat" }),
        ),
        ("slow_echo", json!({ "message": "meanwhile" })),
    ])
}

/// Runs the turn until the approval is asked and the other call has finished; returns the
/// stream, the events so far and the write call's id.
async fn until_asked(
    harness: &Harness,
) -> (
    futures::stream::BoxStream<'static, AgentEvent>,
    Vec<AgentEvent>,
    String,
) {
    let mut events = harness.stream("note this", TurnOptions::default());
    let mut asked = None;
    let mut echoed = false;
    let seen = until(&mut events, |e| {
        match e {
            AgentEvent::ApprovalRequired {
                call_id,
                confirmation_id,
                tool,
                server,
                arguments,
                expires_at,
            } => {
                assert_eq!((tool.as_str(), server.as_str()), ("demo.add_note", "demo"));
                assert_eq!(arguments["body"], "from the chat");
                assert!(!confirmation_id.is_empty());
                assert!(expires_at.ends_with('Z'), "{expires_at}");
                asked = Some(call_id.clone());
            }
            AgentEvent::ToolResult { tool, .. } if tool == "slow.echo" => echoed = true,
            _ => {}
        }
        asked.is_some() && echoed
    })
    .await;
    let asked = asked.expect("asked");
    (events, seen, asked)
}

async fn notes(harness: &Harness) -> String {
    harness.call("demo.list_notes", json!({})).await["notes"].to_string()
}

#[tokio::test]
async fn an_approved_write_runs_once_with_the_token() {
    let harness = Harness::start(vec![add_note("approved"), Reply::text("Saved it.")]).await;
    let (mut events, _, asked) = until_asked(&harness).await;
    let approvals = harness.agent.approvals();
    assert_eq!(
        approvals.decide(&stranger(), &asked, Decision::Approve),
        Err(ApprovalError::NotFound),
        "another user cannot decide"
    );
    let other_session = mcpgate::policy::CallContext {
        session: "elsewhere".into(),
        ..ctx()
    };
    assert_eq!(
        approvals.decide(&other_session, &asked, Decision::Approve),
        Err(ApprovalError::NotFound),
        "nor the same user in another session"
    );
    approvals
        .decide(&ctx(), &asked, Decision::Approve)
        .expect("the user approves");
    let events = rest(&mut events).await;
    let result = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult {
                call_id, result, ..
            } if *call_id == asked => Some(result.clone()),
            _ => None,
        })
        .expect("the approved call ran");
    assert_eq!(result["content"][0]["text"], "Saved note `approved`.");
    assert_eq!(answer(&events), "Saved it.");
    assert!(notes(&harness).await.contains("approved"));
    assert!(approvals.is_empty());
    let fed_back = tool_messages(&harness.request(1));
    assert_eq!(fed_back[0], (asked, "Saved note `approved`.".to_owned()));
    assert_eq!(fed_back[1].1, "Echo: meanwhile");
    harness.stop().await;
}

#[tokio::test]
async fn a_denied_write_is_an_error_the_model_reads() {
    let harness = Harness::start(vec![add_note("denied"), Reply::text("Not saved.")]).await;
    let (mut events, _, asked) = until_asked(&harness).await;
    harness
        .agent
        .approvals()
        .decide(&ctx(), &asked, Decision::Deny)
        .expect("the user denies");
    let events = rest(&mut events).await;
    let (code, message) = tool_error(&events, &asked);
    assert_eq!(code, "denied_by_user");
    assert!(message.contains("the user declined"), "{message}");
    assert_eq!(answer(&events), "Not saved.");
    let fed_back = tool_messages(&harness.request(1));
    assert!(
        fed_back[0]
            .1
            .starts_with("Error [denied_by_user]: the user declined"),
        "{fed_back:?}"
    );
    assert!(!notes(&harness).await.contains("denied"));
    harness.stop().await;
}

#[tokio::test]
async fn an_unanswered_approval_expires_as_declined() {
    let harness = Harness::with(vec![add_note("late"), Reply::text("No answer.")], |c| {
        c.confirmations.pending_ttl = Duration::from_millis(500);
    })
    .await;
    let (mut events, _, asked) = until_asked(&harness).await;
    let events = rest(&mut events).await;
    let (code, message) = tool_error(&events, &asked);
    assert_eq!(code, "denied_by_user");
    assert!(message.contains("expired"), "{message}");
    assert_eq!(answer(&events), "No answer.");
    assert_eq!(
        harness
            .agent
            .approvals()
            .decide(&ctx(), &asked, Decision::Approve),
        Err(ApprovalError::NotFound),
        "too late to decide"
    );
    assert!(!notes(&harness).await.contains("late"));
    harness.stop().await;
}
