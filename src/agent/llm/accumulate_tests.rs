//! Tests of the accumulator: each quirk on its own, and any split of the arguments giving the
//! same calls.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

fn chunk(delta: Value) -> Value {
    json!({"choices": [{"index": 0, "delta": delta}]})
}

fn run(chunks: &[Value]) -> (Vec<LlmEvent>, Completion) {
    let mut acc = Accumulator::new();
    let mut events = Vec::new();
    for c in chunks {
        events.extend(acc.push_chunk(c).expect("chunk accepted"));
    }
    (events, acc.finish())
}

fn calls(completion: &Completion) -> Vec<(String, Value)> {
    completion
        .tool_calls
        .iter()
        .map(|c| {
            let args = serde_json::from_str(&c.arguments).expect("arguments are JSON");
            (c.name.clone(), args)
        })
        .collect()
}

fn two_calls() -> Vec<(String, Value)> {
    vec![
        ("get_weather".into(), json!({"city": "Paris"})),
        ("get_time".into(), json!({"zone": "UTC"})),
    ]
}

#[test]
fn text_reasoning_usage_and_finish() {
    let (events, done) = run(&[
        chunk(json!({"role": "assistant", "content": ""})),
        chunk(json!({"reasoning_content": "think"})),
        chunk(json!({"reasoning": " more"})),
        chunk(json!({"reasoning_text": "!"})),
        chunk(json!({"reasoning_content": {"text": "?"}})),
        chunk(json!({"content": "Hel"})),
        chunk(json!({"content": [{"type": "text", "text": "lo"}]})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        json!({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}),
    ]);
    assert_eq!(done.content, "Hello");
    assert_eq!(done.reasoning, "think more!?");
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));
    let usage = done.usage.expect("usage");
    assert_eq!((usage.prompt_tokens, usage.total_tokens), (3, 5));
    assert_eq!(events[0], LlmEvent::Reasoning("think".into()));
    assert_eq!(events.last(), Some(&LlmEvent::Text("lo".into())));
    assert!(done.tool_calls.is_empty());
}

#[test]
fn openai_indexed_deltas() {
    let (events, done) = run(&[
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "call_a", "type": "function",
            "function": {"name": "get_weather", "arguments": ""}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]})),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_b", "type": "function",
            "function": {"name": "get_time", "arguments": "{\"zone\""}}]}),
        ),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]})),
        chunk(json!({"tool_calls": [{"index": 1, "function": {"arguments": ":\"UTC\"}"}}]})),
    ]);
    assert_eq!(calls(&done), two_calls());
    assert_eq!(done.tool_calls[0].id, "call_a");
    assert_eq!(
        events
            .iter()
            .filter(|e| **e == LlmEvent::ToolCallStarted)
            .count(),
        1
    );
}

#[test]
fn reused_index_with_new_id_is_a_new_call() {
    let (_, done) = run(&[
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "get_weather"}}]}),
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":\"Paris\"}"}}]}),
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "get_weather", "arguments": ""}}]}),
        ),
        chunk(
            json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "get_time", "arguments": "{\"zone\":\"UTC\"}"}}]}),
        ),
    ]);
    assert_eq!(calls(&done), two_calls());
    assert_eq!(done.tool_calls[1].id, "b");
}

#[test]
fn object_tool_calls_without_ids_split_on_a_name_after_complete_arguments() {
    let delta = |name: Value, args: &str| {
        json!({"tool_calls": {"index": 0, "id": "", "type": "function",
            "function": {"name": name, "arguments": args}}})
    };
    let (_, done) = run(&[
        chunk(delta(json!("get_weather"), "")),
        chunk(delta(Value::Null, "{\"city\":")),
        chunk(delta(Value::Null, "\"Paris\"}")),
        chunk(delta(json!("get_time"), "")),
        chunk(delta(Value::Null, "{\"zone\":\"UTC\"}")),
    ]);
    assert_eq!(calls(&done), two_calls());
    for call in &done.tool_calls {
        assert_eq!(call.id.len(), 9);
        assert!(call.id.chars().all(|c| c.is_ascii_alphanumeric()));
    }
    assert_ne!(done.tool_calls[0].id, done.tool_calls[1].id);
}

#[test]
fn indexless_calls_by_id_and_metadata_kept() {
    let (_, done) = run(&[
        chunk(json!({"tool_calls": [
            {"id": "x1", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
            {"id": "x2", "function": {"name": "get_time", "arguments": {"zone": "UTC"}}}
        ]})),
        // A metadata-only delta continues the last call.
        chunk(json!({"tool_calls": [{"extra_content": {"google": {"thought_signature": "sig"}}}]})),
        json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    ]);
    assert_eq!(calls(&done), two_calls());
    assert_eq!(
        done.tool_calls[1].extra["extra_content"]["google"]["thought_signature"],
        "sig"
    );
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));
}

#[test]
fn indexless_pieces_without_ids_continue_the_last_call() {
    let (_, done) = run(&[
        chunk(json!({"tool_calls": [{"function": {"name": "get_weather", "arguments": "{\"ci"}}]})),
        chunk(json!({"tool_calls": [{"function": {"arguments": "ty\":\"Paris\"}"}}]})),
        chunk(
            json!({"tool_calls": [{"function": {"name": "get_time", "arguments": "{\"zone\":\"UTC\"}"}}]}),
        ),
    ]);
    assert_eq!(calls(&done), two_calls());
}

#[test]
fn a_whole_body_with_object_arguments() {
    let mut acc = Accumulator::new();
    let events = acc
        .push_body(&json!({"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "reasoning_content": "hm",
            "tool_calls": [
                {"id": "0", "type": "function", "function": {"description": null, "name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "0", "type": "function", "function": {"name": "get_time", "arguments": "{\"zone\":\"UTC\"}"}}
            ]}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
        .expect("body accepted");
    assert_eq!(
        events,
        vec![LlmEvent::Reasoning("hm".into()), LlmEvent::ToolCallStarted]
    );
    let done = acc.finish();
    assert_eq!(calls(&done), two_calls());
    assert_eq!(done.tool_calls[0].id, "0");
    assert_ne!(done.tool_calls[1].id, "0", "a duplicate id is replaced");
}

#[test]
fn error_chunks_and_bodies_are_reported() {
    let mut acc = Accumulator::new();
    let err = acc
        .push_chunk(&json!({"error": {"message": "model overloaded"}}))
        .expect_err("an error chunk");
    assert_eq!(err.code(), "llm_status");
    assert!(err.to_string().contains("model overloaded"));
    let err = Accumulator::new()
        .push_body(&json!({"object": "list"}))
        .expect_err("no choices");
    assert_eq!(err.code(), "llm_bad_response");
}

#[test]
fn bounds_on_calls_and_arguments() {
    let mut acc = Accumulator::new();
    let mut result = Ok(Vec::new());
    for i in 0..=MAX_TOOL_CALLS {
        result = acc.push_chunk(&chunk(
            json!({"tool_calls": [{"index": i, "function": {"name": "f", "arguments": "{}"}}]}),
        ));
        if result.is_err() {
            break;
        }
    }
    assert!(matches!(result, Err(LlmError::TooManyToolCalls { .. })));

    let mut acc = Accumulator::new();
    let piece = "x".repeat(MAX_ARGUMENT_BYTES / 2 + 1);
    let delta = chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}));
    acc.push_chunk(&delta).expect("first half fits");
    let err = acc.push_chunk(&delta).expect_err("too long");
    assert_eq!(err.code(), "llm_too_large");
}

#[test]
fn empty_calls_are_dropped() {
    let (_, done) = run(&[chunk(json!({"tool_calls": [{"index": 0, "function": {}}]}))]);
    assert!(done.tool_calls.is_empty());
}

/// Splits `text` at the given (sorted, deduplicated) char positions.
fn split(text: &str, cuts: &[usize]) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut start = 0;
    for &cut in cuts.iter().filter(|&&c| c > 0 && c < chars.len()) {
        if cut > start {
            out.push(chars[start..cut].iter().collect());
            start = cut;
        }
    }
    out.push(chars[start..].iter().collect());
    out
}

proptest! {
    /// However the arguments are cut into deltas, with or without ids on continuations,
    /// the same calls come out.
    #[test]
    fn any_split_gives_the_same_calls(
        cuts_a in proptest::collection::btree_set(0usize..40, 0..8),
        cuts_b in proptest::collection::btree_set(0usize..40, 0..8),
        repeat_id in any::<bool>(),
        indexed in any::<bool>(),
        city in "[a-zA-Zé ]{0,12}",
    ) {
        let args = [json!({"city": city}), json!({"zone": "UTC", "n": [1, 2]})];
        let names = ["get_weather", "get_time"];
        let cuts = [cuts_a.into_iter().collect::<Vec<_>>(), cuts_b.into_iter().collect()];
        let mut chunks = Vec::new();
        for i in 0..2 {
            let id = format!("call_{i}");
            let mut first = json!({"id": id, "function": {"name": names[i], "arguments": ""}});
            if indexed {
                first["index"] = json!(i);
            }
            chunks.push(chunk(json!({"tool_calls": [first]})));
            for piece in split(&args[i].to_string(), &cuts[i]) {
                let mut delta = json!({"function": {"arguments": piece}});
                if indexed {
                    delta["index"] = json!(i);
                }
                if repeat_id {
                    delta["id"] = json!(id);
                }
                chunks.push(chunk(json!({"tool_calls": [delta]})));
            }
        }
        let (_, done) = run(&chunks);
        let got = calls(&done);
        prop_assert_eq!(got, vec![
            (names[0].to_owned(), args[0].clone()),
            (names[1].to_owned(), args[1].clone()),
        ]);
    }
}
