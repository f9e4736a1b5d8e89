//! Tool calls in a turn: concurrency (events in completion order, tool messages in call
//! order), progress and ETA events, the preamble, images named for the model, errors fed back
//! to the model, and the gate refusing what the model invents.

use std::time::{Duration, UNIX_EPOCH};

use mcpgate::{
    agent::{AgentEvent, TurnOptions, UserTimeZone, llm::Message},
    config::LlmConfig,
};
use serde_json::json;

use super::{Harness, answer, call_id, kinds, offered, position, tool_error, tool_messages};
use crate::{scripted_llm::Reply, support::ctx};

#[tokio::test]
async fn parallel_calls_report_in_completion_order_and_answer_in_call_order() {
    let harness = Harness::start(vec![
        Reply::tool_calls(&[
            ("slow_sleep", json!({ "ms": 2000 })),
            ("slow_echo", json!({ "message": "fast" })),
        ]),
        Reply::text("Both done."),
    ])
    .await;
    let options = TurnOptions {
        time_zone: UserTimeZone::parse("+05:30").expect("an offset"),
        now: Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        ..TurnOptions::default()
    };
    let events = harness.turn_with("sleep and echo", options).await;
    assert_eq!(answer(&events), "Both done.");
    assert_eq!(
        kinds(&events)[..3],
        ["round_start", "tool_call", "tool_call"]
    );
    let sleep = call_id(&events, "slow.sleep");
    let echo = call_id(&events, "slow.echo");
    let finished = |id: &str| {
        let id = id.to_owned();
        move |e: &AgentEvent| matches!(e, AgentEvent::ToolResult { call_id, .. } if *call_id == id)
    };
    // Called first, finished last: the calls ran at the same time.
    let echo_done = position(&events, finished(&echo));
    let sleep_done = position(&events, finished(&sleep));
    assert!(echo_done < sleep_done, "{events:#?}");
    let progress = position(&events, |e| {
        matches!(e, AgentEvent::ToolProgress { call_id, total: Some(total), .. }
            if *call_id == sleep && *total == 2000.0)
    });
    assert!(progress < sleep_done);
    match &events[sleep_done] {
        AgentEvent::ToolResult {
            tool,
            result,
            elapsed_ms,
            ..
        } => {
            assert_eq!(tool, "slow.sleep");
            assert_eq!(result["content"][0]["text"], "slept 2000");
            assert!(*elapsed_ms >= 2000, "{elapsed_ms}");
        }
        other => panic!("{other:?}"),
    }

    // The model got the results in the order it made the calls.
    let second = harness.request(1);
    assert_eq!(
        tool_messages(&second),
        [
            (sleep.clone(), "slept 2000".to_owned()),
            (echo.clone(), "Echo: fast".to_owned())
        ]
    );
    let assistant = &second["messages"][2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["tool_calls"][0]["id"], sleep.as_str());
    assert_eq!(assistant["tool_calls"][1]["function"]["name"], "slow_echo");

    // The preamble: first, with the tools and the user's clock.
    let first = harness.request(0);
    assert_eq!(first["tool_choice"], "auto");
    let preamble = &first["messages"][0];
    assert_eq!(preamble["role"], "system");
    let text = preamble["content"].as_str().expect("text");
    assert!(
        text.contains("Wednesday 2023-11-15 03:43 (UTC+05:30)"),
        "{text}"
    );
    for name in ["slow_sleep", "slow_echo", "demo_add_note"] {
        assert!(text.contains(name), "{name} in {text}");
    }
    assert_eq!(first["messages"][1]["content"], "sleep and echo");
    let offered = offered(&first);
    assert!(offered.contains(&"slow_sleep") && offered.contains(&"demo_add_note"));

    // A tool called before has an expected duration.
    harness.llm.push(Reply::tool_calls(&[(
        "slow_echo",
        json!({ "message": "again" }),
    )]));
    harness.llm.push(Reply::text("ok"));
    let events = harness.turn("echo again").await;
    let again = call_id(&events, "slow.echo");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolEta { call_id, .. } if *call_id == again)),
        "{events:#?}"
    );
    assert_ne!(
        again, echo,
        "call ids are unique across the session's turns"
    );
    harness.stop().await;
}

#[tokio::test]
async fn an_error_result_is_fed_back_as_an_error() {
    let harness = Harness::start(vec![
        Reply::tool_calls(&[("demo_time_now", json!({ "timezone": "Europe/Paris" }))]),
        Reply::text("Only UTC, sorry."),
    ])
    .await;
    let events = harness.turn("time in Paris?").await;
    let id = call_id(&events, "demo.time_now");
    let (code, message) = tool_error(&events, &id);
    assert_eq!(code, "tool_error");
    assert!(message.contains("not supported"), "{message}");
    assert_eq!(answer(&events), "Only UTC, sorry.");
    let fed_back = tool_messages(&harness.request(1));
    assert_eq!(fed_back.len(), 1);
    assert!(
        fed_back[0].1.starts_with("Error [tool_error]: ") && fed_back[0].1.contains("only UTC"),
        "{fed_back:?}"
    );
    harness.stop().await;
}

#[tokio::test]
async fn names_and_arguments_the_model_invents_are_refused_by_the_gate() {
    let harness = Harness::start(vec![
        Reply::tool_calls(&[
            ("demo_launch_rockets", json!({})),
            ("demo_echo", json!({ "message": "hi", "urgent": true })),
            (
                "slow.echo",
                json!({ "message": "canonical names resolve too" }),
            ),
        ]),
        Reply::text("Two of those did not work."),
    ])
    .await;
    let events = harness.turn("go").await;
    let invented = call_id(&events, "demo_launch_rockets");
    let server = events.iter().find_map(|e| match e {
        AgentEvent::ToolCall {
            call_id, server, ..
        } if *call_id == invented => Some(server.clone()),
        _ => None,
    });
    assert_eq!(server, Some(None), "an unknown name resolves to no server");
    assert_eq!(tool_error(&events, &invented).0, "not_found");
    let extra = call_id(&events, "demo.echo");
    assert_eq!(tool_error(&events, &extra).0, "invalid_arguments");
    let canonical = call_id(&events, "slow.echo");
    assert!(
        events
            .iter()
            .any(|e| matches!(e, AgentEvent::ToolResult { call_id, .. } if *call_id == canonical))
    );
    let fed_back = tool_messages(&harness.request(1));
    assert!(
        fed_back[0].1.starts_with("Error [not_found]"),
        "{fed_back:?}"
    );
    assert!(
        fed_back[1].1.starts_with("Error [invalid_arguments]"),
        "{fed_back:?}"
    );
    assert_eq!(fed_back[2].1, "Echo: canonical names resolve too");
    assert_eq!(answer(&events), "Two of those did not work.");
    harness.stop().await;
}

#[tokio::test]
async fn a_model_without_tool_support_gets_plain_generation() {
    let harness = Harness::start(vec![Reply::text("Hello **there**.")]).await;
    let model = LlmConfig::new(harness.llm.base_url(), "plain");
    let agent = mcpgate::agent::Agent::builder(
        mcpgate::agent::llm::LlmClient::new(model).expect("client"),
        harness.gateway.clone(),
    )
    .tools_supported(false)
    .build();
    let answer = agent
        .run(ctx(), vec![Message::user("hi")], TurnOptions::default())
        .await
        .expect("an answer");
    assert_eq!(answer.message, "Hello **there**.");
    let request = harness.request(0);
    assert!(request.get("tools").is_none(), "{request}");
    assert!(request.get("tool_choice").is_none(), "{request}");
    let preamble = request["messages"][0]["content"].as_str().expect("text");
    assert!(preamble.contains("Available tools: none."), "{preamble}");
    harness.stop().await;
}

#[tokio::test]
async fn a_failed_model_request_ends_the_turn_with_its_code() {
    let harness = Harness::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"bad model"}}"#,
    )])
    .await;
    let events = harness.turn("hi").await;
    assert_eq!(super::error_code(&events), "llm_status");
    harness.stop().await;
}

#[tokio::test]
async fn images_reach_the_user_and_the_model_reads_their_names() {
    let harness = Harness::with(
        vec![
            Reply::tool_calls(&[("everything_get-tiny-image", json!({}))]),
            Reply::text("Here it is: image_1."),
        ],
        |config| {
            config.servers.push(crate::support::stdio(
                "everything",
                "node",
                &[&crate::support::everything_js(), "stdio"],
            ));
            config.servers.sort_by(|a, b| a.id.cmp(&b.id));
        },
    )
    .await;
    let events = harness.turn("show me the logo").await;
    let id = call_id(&events, "everything.get-tiny-image");
    let result = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolResult {
                call_id, result, ..
            } if *call_id == id => Some(result.clone()),
            _ => None,
        })
        .expect("a result");
    let image = result["content"]
        .as_array()
        .and_then(|parts| parts.iter().find(|p| p["type"] == "image"))
        .expect("an image part for the user");
    assert!(
        image["data"]
            .as_str()
            .is_some_and(|d| d.starts_with("iVBOR"))
    );
    let fed_back = tool_messages(&harness.request(1));
    let text = &fed_back[0].1;
    assert!(
        text.contains("[image_1: image/png image, shown to the user]"),
        "{text}"
    );
    assert!(!text.contains("iVBOR"), "no base64 for the model: {text}");
    assert_eq!(answer(&events), "Here it is: image_1.");
    harness.stop().await;
}
