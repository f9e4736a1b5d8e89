//! Recorded stream shapes of real OpenAI-compatible servers, rebuilt for given tool calls:
//! each provider's quirks as its server sends them (sources cited per shape).

use serde_json::{Map, Value, json};

/// Whose stream shape a reply replays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    OpenAi,
    Vllm,
    LlamaCpp,
    Ollama,
    Tgi,
    Gemini,
}

impl Provider {
    pub const ALL: [Provider; 6] = [
        Provider::OpenAi,
        Provider::Vllm,
        Provider::LlamaCpp,
        Provider::Ollama,
        Provider::Tgi,
        Provider::Gemini,
    ];
}

const CREATED: u64 = 1_733_195_424;

fn usage() -> Value {
    json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
           "prompt_tokens_details": {"cached_tokens": 4}})
}

/// Pieces of at most `n` characters (on char boundaries), as a tokenizer would stream them.
fn pieces(text: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

/// OpenAI's chunk envelope (`gpt-4o-mini` stream quoted in
/// huggingface/text-generation-inference#2794).
fn openai_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_0705bf87c0",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
    })
}

/// With `stream_options.include_usage`, OpenAI ends with a chunk of no choices and the usage
/// (openai/openai-node#1068).
fn openai_usage_chunk() -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "gpt-4o-mini-2024-07-18",
        "choices": [],
        "usage": usage()
    })
}

/// A text answer in OpenAI's shape, optionally after reasoning under `field`.
pub fn text(answer: &str, reasoning: Option<(&str, &str)>) -> Vec<Value> {
    let mut chunks = vec![openai_chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        None,
    )];
    if let Some((field, reasoning)) = reasoning {
        for piece in pieces(reasoning, 6) {
            chunks.push(openai_chunk(json!({ field: piece }), None));
        }
    }
    for piece in pieces(answer, 4) {
        chunks.push(openai_chunk(json!({"content": piece}), None));
    }
    chunks.push(openai_chunk(json!({}), Some("stop")));
    chunks.push(openai_usage_chunk());
    chunks
}

/// The non-streaming body of the same answer.
pub fn text_body(answer: &str, reasoning: Option<(&str, &str)>) -> Value {
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), json!(answer));
    if let Some((field, reasoning)) = reasoning {
        message.insert(field.into(), json!(reasoning));
    }
    completion_body(Value::Object(message), "stop")
}

fn completion_body(message: Value, finish: &str) -> Value {
    json!({
        "id": "chatcmpl-scripted",
        "object": "chat.completion",
        "created": CREATED,
        "model": "scripted",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
        "usage": usage()
    })
}

/// The stream chunks and the non-streaming body calling `calls` in `provider`'s shape.
pub fn tool_calls(provider: Provider, calls: &[(&str, Value)]) -> (Vec<Value>, Value) {
    let chunks = match provider {
        Provider::OpenAi => openai(calls),
        Provider::Vllm => vllm(calls),
        Provider::LlamaCpp => llama_cpp(calls),
        Provider::Ollama => ollama(calls),
        Provider::Tgi => tgi(calls),
        Provider::Gemini => gemini(calls),
    };
    (chunks, tool_calls_body(provider, calls))
}

/// OpenAI: `index` on every delta, `id`, `type` and `name` on the first delta of a call only,
/// arguments in small pieces, `finish_reason: "tool_calls"`, usage in a last chunk with no
/// choices (huggingface/text-generation-inference#2794 quotes such a stream).
fn openai(calls: &[(&str, Value)]) -> Vec<Value> {
    let mut chunks = Vec::new();
    for (i, (name, args)) in calls.iter().enumerate() {
        let head = json!({"index": i, "id": format!("call_scripted{i}"), "type": "function",
            "function": {"name": name, "arguments": ""}});
        let delta = if i == 0 {
            json!({"role": "assistant", "content": null, "tool_calls": [head], "refusal": null})
        } else {
            json!({"tool_calls": [head]})
        };
        chunks.push(openai_chunk(delta, None));
        for piece in pieces(&args.to_string(), 5) {
            chunks.push(openai_chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                None,
            ));
        }
    }
    chunks.push(openai_chunk(json!({}), Some("tool_calls")));
    chunks.push(openai_usage_chunk());
    chunks
}

/// vLLM: every call streamed under `index: 0` with a fresh id (ai-dynamo/dynamo#4723 shows
/// vLLM's example client merging two such calls); the first delta of a call has the name and
/// no `arguments` key (the hermes parser's `DeltaFunctionCall(name=...)` dumped with
/// `exclude_none`), and the call's last arguments delta repeats `id`, `type` and `name`
/// (vllm-project/vllm#31438). Usage in a last chunk with no choices.
fn vllm(calls: &[(&str, Value)]) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": "chatcmpl-9f1c2a",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": "Qwen/Qwen2.5-7B-Instruct",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]
        })
    };
    let mut chunks = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for (i, (name, args)) in calls.iter().enumerate() {
        let id = format!("chatcmpl-tool-{:032x}", 0xabc0 + i);
        chunks.push(chunk(
            json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": name}}]}),
            None,
        ));
        let parts = pieces(&args.to_string(), 7);
        let last = parts.len().saturating_sub(1);
        for (p, piece) in parts.into_iter().enumerate() {
            let call = if p == last {
                json!({"index": 0, "id": id, "type": "function",
                    "function": {"name": name, "arguments": piece}})
            } else {
                json!({"index": 0, "function": {"arguments": piece}})
            };
            chunks.push(chunk(json!({"tool_calls": [call]}), None));
        }
    }
    chunks.push(chunk(json!({"content": ""}), Some("tool_calls")));
    chunks.push(json!({
        "id": "chatcmpl-9f1c2a", "object": "chat.completion.chunk", "created": CREATED,
        "model": "Qwen/Qwen2.5-7B-Instruct", "choices": [], "usage": usage()
    }));
    chunks
}

/// llama.cpp `llama-server`: `choices` first and `timings` on every chunk
/// (openai-php/client#780), deltas from `common_chat_msg_diff_to_json_oaicompat`: `index`
/// always, `id` and `type` only with the first delta of a call, `arguments` always present;
/// the usage rides on the finishing chunk itself.
fn llama_cpp(calls: &[(&str, Value)]) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>, usage_: Option<Value>| {
        let mut c = json!({
            "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
            "created": CREATED,
            "id": "chatcmpl-qC6laQHbZ2CmxNvJ4NoB1L93LcVF7nfe",
            "model": "qwen2.5-7b-instruct-q4_k_m.gguf",
            "system_fingerprint": "b5460-0a1b2c3d",
            "object": "chat.completion.chunk",
            "timings": {"prompt_n": 10, "prompt_ms": 251.5, "predicted_n": 28, "predicted_ms": 407.6}
        });
        if let Some(u) = usage_ {
            c["usage"] = u;
        }
        c
    };
    let mut chunks = vec![chunk(
        json!({"role": "assistant", "content": null}),
        None,
        None,
    )];
    for (i, (name, args)) in calls.iter().enumerate() {
        let text = args.to_string();
        let parts = pieces(&text, 6);
        let (first, rest) = parts
            .split_first()
            .map_or(("", &[][..]), |(f, r)| (f.as_str(), r));
        chunks.push(chunk(
            json!({"tool_calls": [{"index": i, "id": format!("Qb3XkPz9a1LmN0rT7sUvWxYz2{i}cdEfG"),
                "type": "function", "function": {"name": name, "arguments": first}}]}),
            None,
            None,
        ));
        for piece in rest {
            chunks.push(chunk(
                json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                None,
                None,
            ));
        }
    }
    chunks.push(chunk(json!({}), Some("tool_calls"), Some(usage())));
    chunks
}

/// Ollama's OpenAI compatibility before 0.4.7: tool calls with no `index`
/// (ollama/ollama#7881), each call whole in one delta (ollama/ollama#11633), all calls of
/// the message in one chunk; `system_fingerprint: "fp_ollama"`.
fn ollama(calls: &[(&str, Value)]) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({
            "id": "chatcmpl-123",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": "llama3.1",
            "system_fingerprint": "fp_ollama",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
        })
    };
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            json!({"id": format!("call_{:08x}", 0x5a17_0000 + i), "type": "function",
                "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    vec![
        chunk(
            json!({"role": "assistant", "content": "", "tool_calls": tool_calls}),
            None,
        ),
        chunk(
            json!({"role": "assistant", "content": ""}),
            Some("tool_calls"),
        ),
        json!({
            "id": "chatcmpl-123", "object": "chat.completion.chunk", "created": CREATED,
            "model": "llama3.1", "system_fingerprint": "fp_ollama", "choices": [],
            "usage": usage()
        }),
    ]
}

/// Text Generation Inference: `delta.tool_calls` is one object, not an array (`ToolCallDelta
/// { tool_calls: DeltaToolCall }` in TGI 2.x `router/src/lib.rs`), `index` always 0, `id: ""`
/// on the chunk and every call delta, `object: "text_completion"`; the name comes in the first
/// delta of a call with empty arguments and `name: null` after it (TGI 3.x), so a second call
/// shows only as a new name after complete arguments. Usage on the finishing chunk.
fn tgi(calls: &[(&str, Value)]) -> Vec<Value> {
    let chunk = |delta: Value, finish: Option<&str>, usage_: Value| {
        json!({
            "object": "text_completion",
            "id": "",
            "created": CREATED,
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "system_fingerprint": "2.4.1-sha-0ff6ff6",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
            "usage": usage_
        })
    };
    let call = |name: Value, arguments: &str| {
        json!({"role": "assistant", "tool_calls": {"index": 0, "id": "", "type": "function",
            "function": {"name": name, "arguments": arguments}}})
    };
    let mut chunks = Vec::new();
    for (name, args) in calls {
        chunks.push(chunk(call(json!(name), ""), None, Value::Null));
        for piece in pieces(&args.to_string(), 4) {
            chunks.push(chunk(call(Value::Null, &piece), None, Value::Null));
        }
    }
    chunks.push(chunk(
        json!({"role": "assistant", "content": ""}),
        Some("eos_token"),
        usage(),
    ));
    chunks
}

/// Gemini's OpenAI compatibility: chunks with no `id`, `created`, `model` or `object`, calls
/// with no `index`, each call whole in one delta with an `extra_content.google
/// .thought_signature` that must be echoed back (open-webui/computer#224,
/// iOfficeAI/aionrs#93), and `finish_reason: "stop"` on a tool-call response
/// (googleapis/python-genai#2868); usage in the last chunk.
fn gemini(calls: &[(&str, Value)]) -> Vec<Value> {
    let mut chunks = Vec::new();
    for (i, (name, args)) in calls.iter().enumerate() {
        let mut call = json!({"id": format!("function-call-{}", 1_523_456_789_012_345_678u64 + i as u64),
            "type": "function", "function": {"name": name, "arguments": args.to_string()}});
        if i == 0 {
            call["extra_content"] = json!({"google": {"thought_signature": "CiQBVKhc7scripted"}});
        }
        let mut delta = json!({"tool_calls": [call]});
        if i == 0 {
            delta["role"] = json!("assistant");
        }
        chunks.push(json!({"choices": [{"index": 0, "delta": delta}]}));
    }
    chunks.push(json!({
        "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": "stop"}],
        "usage": usage()
    }));
    chunks
}

/// The non-streaming body: OpenAI's shape, except TGI's `arguments` as a JSON object with a
/// `description: null` beside the name (langchain-ai/langchain#27523) and Gemini's
/// `finish_reason: "stop"`.
fn tool_calls_body(provider: Provider, calls: &[(&str, Value)]) -> Value {
    let tool_calls: Vec<Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| match provider {
            Provider::Tgi => json!({"id": i.to_string(), "type": "function",
                "function": {"description": null, "name": name, "arguments": args}}),
            _ => json!({"id": format!("call_scripted{i}"), "type": "function",
                "function": {"name": name, "arguments": args.to_string()}}),
        })
        .collect();
    let finish = if provider == Provider::Gemini {
        "stop"
    } else {
        "tool_calls"
    };
    completion_body(
        json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
        finish,
    )
}
