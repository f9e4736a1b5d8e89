//! The OpenAI-compatible client against the scripted server over real HTTP and SSE: every
//! provider's recorded shape gives the loop the same tool calls; text, reasoning and usage;
//! plain JSON; typed errors that never show the key; deadlines, byte caps and cancellation.

use std::time::Duration;

use futures::StreamExt;
use mcpgate::{
    agent::llm::{
        ChatRequest, Completion, LlmClient, LlmError, LlmEvent, Message, TimeoutPhase, ToolCall,
    },
    config::{LlmConfig, Secret},
};
use serde_json::{Value, json};

use crate::scripted_llm::{Ending, Provider, Reply, ScriptedLlm};

const KEY: &str = "sk-test-0123456789-SECRET";

fn config(llm: &ScriptedLlm) -> LlmConfig {
    let mut config = LlmConfig::new(llm.base_url(), "scripted-model");
    config.api_key = Some(Secret::new(KEY));
    config
}

fn client(config: LlmConfig) -> LlmClient {
    LlmClient::new(config).expect("a valid client config")
}

fn request() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("What is the weather in Paris, and the time?")],
        tools: vec![
            json!({"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object"}}}),
            json!({"type": "function", "function": {"name": "get_time",
                "parameters": {"type": "object"}}}),
        ],
        tool_choice: Some(json!("auto")),
        ..ChatRequest::default()
    }
}

fn two_calls() -> [(&'static str, Value); 2] {
    [
        ("get_weather", json!({"city": "Paris", "units": "metric"})),
        ("get_time", json!({"zone": "Europe/Paris", "format": "24h"})),
    ]
}

/// Names and parsed arguments, as the loop reads them.
fn calls_of(completion: &Completion) -> Vec<(String, Value)> {
    completion
        .tool_calls
        .iter()
        .map(|c| {
            let args = serde_json::from_str(&c.arguments).expect("arguments are JSON text");
            (c.name.clone(), args)
        })
        .collect()
}

fn expected_calls() -> Vec<(String, Value)> {
    two_calls()
        .into_iter()
        .map(|(n, a)| (n.to_owned(), a))
        .collect()
}

async fn events(client: &LlmClient) -> Vec<Result<LlmEvent, LlmError>> {
    tokio::time::timeout(
        crate::support::WAIT,
        client.stream(&request()).collect::<Vec<_>>(),
    )
    .await
    .expect("the stream ends")
}

fn finished(events: &[Result<LlmEvent, LlmError>]) -> &Completion {
    match events.last() {
        Some(Ok(LlmEvent::Finished(completion))) => completion,
        other => panic!("the stream did not finish: {other:?}"),
    }
}

fn is_id(id: &str) -> bool {
    id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric())
}

#[tokio::test]
async fn every_provider_gives_the_same_tool_calls() {
    let replies = Provider::ALL
        .iter()
        .map(|p| Reply::provider(*p, &two_calls()))
        .collect();
    let llm = ScriptedLlm::start(replies).await;
    let client = client(config(&llm));
    for provider in Provider::ALL {
        let events = events(&client).await;
        let done = finished(&events);
        assert_eq!(calls_of(done), expected_calls(), "{provider:?}");
        assert!(done.content.is_empty(), "{provider:?}");
        let started = events
            .iter()
            .filter(|e| matches!(e, Ok(LlmEvent::ToolCallStarted)))
            .count();
        assert_eq!(started, 1, "{provider:?}: ToolCallStarted once");
        let ids: Vec<&str> = done.tool_calls.iter().map(|c| c.id.as_str()).collect();
        assert!(ids.iter().all(|id| !id.is_empty()), "{provider:?}");
        assert_ne!(ids[0], ids[1], "{provider:?}: ids are distinct");
        match provider {
            // TGI sends `id: ""`: the ids are ours, in the form Mistral requires.
            Provider::Tgi => assert!(ids.iter().all(|id| is_id(id)), "{ids:?}"),
            // Gemini's signature must go back with the call.
            Provider::Gemini => assert_eq!(
                done.tool_calls[0].extra["extra_content"]["google"]["thought_signature"],
                "CiQBVKhc7scripted"
            ),
            Provider::OpenAi => assert_eq!(ids, ["call_scripted0", "call_scripted1"]),
            _ => {}
        }
        assert!(done.usage.is_some(), "{provider:?}: usage from the stream");
    }
    llm.wait_requests(Provider::ALL.len()).await;
}

#[tokio::test]
async fn every_provider_without_streaming_gives_the_same_tool_calls() {
    let replies = Provider::ALL
        .iter()
        .map(|p| Reply::provider(*p, &two_calls()))
        .collect();
    let llm = ScriptedLlm::start(replies).await;
    let mut config = config(&llm);
    config.stream = false;
    let client = client(config);
    for provider in Provider::ALL {
        let events = events(&client).await;
        let kinds: Vec<bool> = events
            .iter()
            .map(|e| matches!(e, Ok(LlmEvent::ToolCallStarted)))
            .collect();
        assert_eq!(kinds, [true, false], "{provider:?}: started, then finished");
        assert_eq!(
            calls_of(finished(&events)),
            expected_calls(),
            "{provider:?}"
        );
    }
    let body = &llm.requests()[0];
    assert_eq!(body["stream"], false);
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn text_streams_in_pieces_with_usage_and_the_request_is_openai_shaped() {
    let llm = ScriptedLlm::start(vec![Reply::text("The weather in Paris is mild.")]).await;
    let client = client(config(&llm));
    let events = events(&client).await;
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            Ok(LlmEvent::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(texts.len() > 1, "streamed in pieces: {texts:?}");
    assert_eq!(texts.concat(), "The weather in Paris is mild.");
    let done = finished(&events);
    assert_eq!(done.content, "The weather in Paris is mild.");
    assert!(done.tool_calls.is_empty());
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));
    let usage = done.usage.expect("usage from the last chunk");
    assert_eq!(
        (
            usage.prompt_tokens,
            usage.completion_tokens,
            usage.total_tokens,
            usage.cached_tokens
        ),
        (11, 7, 18, 4)
    );

    let body = &llm.requests()[0];
    assert_eq!(body["model"], "scripted-model");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["tools"].as_array().map(Vec::len), Some(2));
    assert_eq!(body["messages"][0]["role"], "user");
}

#[tokio::test]
async fn reasoning_under_each_name() {
    let fields = ["reasoning", "reasoning_content", "reasoning_text"];
    let replies = fields
        .iter()
        .map(|f| Reply::reasoning(f, "First, look up the city.", "Mild."))
        .collect();
    let llm = ScriptedLlm::start(replies).await;
    let client = client(config(&llm));
    for field in fields {
        let events = events(&client).await;
        let reasoning: String = events
            .iter()
            .filter_map(|e| match e {
                Ok(LlmEvent::Reasoning(t)) => Some(t.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(reasoning, "First, look up the city.", "{field}");
        let done = finished(&events);
        assert_eq!(done.reasoning, "First, look up the city.", "{field}");
        assert_eq!(done.content, "Mild.", "{field}");
    }
}

#[tokio::test]
async fn assistant_calls_go_back_with_empty_content_and_their_extra_fields() {
    let llm = ScriptedLlm::start(vec![
        Reply::provider(Provider::Gemini, &two_calls()),
        Reply::text("Done."),
    ])
    .await;
    let client = client(config(&llm));
    let first = client.complete(&request()).await.expect("tool calls");
    let mut followup = request();
    followup
        .messages
        .push(Message::assistant("", first.tool_calls.clone()));
    for call in &first.tool_calls {
        followup
            .messages
            .push(Message::tool(call.id.clone(), "{\"ok\":true}"));
    }
    let second = client.complete(&followup).await.expect("an answer");
    assert_eq!(second.content, "Done.");
    let sent = &llm.requests()[1]["messages"];
    assert_eq!(sent[1]["content"], "");
    let call = &sent[1]["tool_calls"][0];
    assert_eq!(call["type"], "function");
    assert_eq!(call["id"], json!(first.tool_calls[0].id));
    assert_eq!(
        call["extra_content"]["google"]["thought_signature"],
        "CiQBVKhc7scripted"
    );
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().expect("text"))
            .expect("JSON text");
    assert_eq!(arguments, two_calls()[0].1);
    assert_eq!(sent[2]["role"], "tool");
    assert_eq!(sent[2]["tool_call_id"], json!(first.tool_calls[0].id));
}

#[tokio::test]
async fn the_key_and_extra_headers_reach_the_server() {
    let llm = ScriptedLlm::start(vec![Reply::text("hi")]).await;
    let mut config = config(&llm);
    config.headers = vec![("X-Team".to_owned(), Secret::new("team-7"))];
    let completion = client(config).complete(&request()).await.expect("answer");
    assert_eq!(completion.content, "hi");
    let headers = &llm.headers()[0];
    assert_eq!(headers["authorization"], format!("Bearer {KEY}").as_str());
    assert_eq!(headers["x-team"], "team-7");
}

#[tokio::test]
async fn error_statuses_are_typed_and_never_show_the_key() {
    let llm = ScriptedLlm::start(vec![
        Reply::status(
            401,
            &json!({"error": {"message": format!("Incorrect API key provided: {KEY}"),
                "type": "invalid_request_error"}})
            .to_string(),
        ),
        Reply::status(500, "upstream model crashed"),
    ])
    .await;
    let client = client(config(&llm));
    for expected in [401, 500] {
        let error = client.complete(&request()).await.expect_err("a status");
        let LlmError::Status {
            status, message, ..
        } = &error
        else {
            panic!("a status error, got {error:?}");
        };
        assert_eq!(*status, expected);
        assert_eq!(error.code(), "llm_status");
        assert!(!error.to_string().contains(KEY), "{error}");
        assert!(!format!("{error:?}").contains(KEY), "{error:?}");
        if expected == 401 {
            assert!(message.contains("Incorrect API key"), "{message}");
        } else {
            assert!(message.contains("crashed"), "{message}");
        }
    }
    // Past the script's end the scripted server answers 500 itself.
    let error = client
        .complete(&request())
        .await
        .expect_err("no reply left");
    assert_eq!(error.code(), "llm_status");
    assert!(error.is_transient());
}

#[tokio::test]
async fn a_silent_stream_ends_with_an_idle_timeout() {
    let llm = ScriptedLlm::start(vec![Reply::text("never finished").stall_after(2)]).await;
    let mut config = config(&llm);
    config.idle_timeout = Duration::from_millis(300);
    let events = events(&client(config)).await;
    let Some(Err(error)) = events.last() else {
        panic!("the stream fails: {events:?}");
    };
    assert_eq!(error.code(), "llm_timeout");
    assert!(
        matches!(
            error,
            LlmError::Timeout {
                phase: TimeoutPhase::Idle,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(llm.wait_ending(0).await, Ending::Dropped);
}

#[tokio::test]
async fn a_response_over_the_byte_cap_is_refused() {
    let long = "word ".repeat(2000);
    let llm = ScriptedLlm::start(vec![
        Reply::text(&long),
        Reply::json(json!({"choices": [{"index": 0,
            "message": {"role": "assistant", "content": long}}]})),
    ])
    .await;
    let mut config = config(&llm);
    config.max_response_bytes = 4096;
    let client = client(config);
    for _ in 0..2 {
        let error = client.complete(&request()).await.expect_err("too large");
        assert_eq!(error.code(), "llm_too_large", "{error}");
    }
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let llm = ScriptedLlm::start(vec![
        Reply::text(&"slowly ".repeat(200)).chunk_delay(Duration::from_millis(20)),
    ])
    .await;
    let client = client(config(&llm));
    let mut stream = client.stream(&request());
    let mut texts = 0;
    while texts < 2 {
        match stream.next().await {
            Some(Ok(LlmEvent::Text(_))) => texts += 1,
            Some(Ok(_)) => {}
            other => panic!("text expected, got {other:?}"),
        }
    }
    assert_eq!(llm.endings(), [Ending::Open]);
    drop(stream);
    assert_eq!(llm.wait_ending(0).await, Ending::Dropped);
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_and_an_error_chunk() {
    let llm = ScriptedLlm::start(vec![
        Reply::json(json!({"choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "whole"}}]})),
        Reply::raw(vec![
            json!({"choices": [{"index": 0, "delta": {"content": "par"}}]}).to_string(),
            json!({"error": {"message": "model overloaded", "code": 503}}).to_string(),
        ]),
    ])
    .await;
    let client = client(config(&llm));
    let done = client.complete(&request()).await.expect("whole body");
    assert_eq!(done.content, "whole");
    let events = events(&client).await;
    assert_eq!(
        events.first().map(|e| e.as_ref().ok().cloned()),
        Some(Some(LlmEvent::Text("par".into())))
    );
    let Some(Err(error)) = events.last() else {
        panic!("an error last: {events:?}");
    };
    assert!(matches!(error, LlmError::Reported { .. }), "{error:?}");
    assert!(error.to_string().contains("model overloaded"));
}

#[tokio::test]
async fn refusals_before_sending_and_an_unreachable_server() {
    let llm = ScriptedLlm::start(vec![]).await;
    let client = client(config(&llm));
    let mut bad = request();
    bad.options.insert("model".into(), json!("other"));
    let error = client.complete(&bad).await.expect_err("refused");
    assert_eq!(error.code(), "llm_bad_request");
    assert!(llm.requests().is_empty(), "nothing was sent");

    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let url = format!("http://127.0.0.1:{closed}/v1")
        .parse()
        .expect("url");
    let error = LlmClient::new(LlmConfig::new(url, "m"))
        .expect("client")
        .complete(&request())
        .await
        .expect_err("unreachable");
    assert_eq!(error.code(), "llm_unreachable", "{error}");

    let mut config = config(&llm);
    config.headers = vec![("bad header".to_owned(), Secret::new("x"))];
    assert_eq!(
        LlmClient::new(config).expect_err("invalid").code(),
        "llm_config"
    );
}

#[tokio::test]
async fn a_call_without_an_id_gets_one() {
    let chunk = |delta: Value, finish: Value| {
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}).to_string()
    };
    let llm = ScriptedLlm::start(vec![Reply::raw(vec![
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": "{\"city\":"}}]}),
            Value::Null,
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
            json!("tool_calls"),
        ),
    ])])
    .await;
    let done = client(config(&llm))
        .complete(&request())
        .await
        .expect("calls");
    let [ToolCall { id, name, .. }] = done.tool_calls.as_slice() else {
        panic!("one call: {:?}", done.tool_calls);
    };
    assert_eq!(name, "get_weather");
    assert!(is_id(id), "{id}");
}
