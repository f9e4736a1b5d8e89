//! The stream accumulator: folds chat completion chunks (or one whole response body) into a
//! [`Completion`], tolerating what real servers send: tool-call deltas without `index` or
//! `id`, one index reused for several calls, `delta.tool_calls` as an object, `arguments`
//! as a JSON object, reasoning under three names, usage in any chunk. Pure: no I/O.

use serde_json::{Map, Value};

use super::{Completion, LlmError, LlmEvent, ToolCall, Usage};

/// Tool calls accepted in one response. A model looping on calls is stopped here rather
/// than by the round limit after the fact.
pub const MAX_TOOL_CALLS: usize = 128;

/// Bytes of arguments text accepted for one tool call.
pub const MAX_ARGUMENT_BYTES: usize = 1024 * 1024;

/// Fields of a tool-call delta the accumulator reads itself; any other is kept in `extra`.
const KNOWN_CALL_FIELDS: [&str; 4] = ["index", "id", "type", "function"];

/// Where the reasoning text of a delta or message may be, by server: `reasoning_content`
/// (DeepSeek, llama.cpp, vLLM before 0.10), `reasoning` (vLLM, Ollama, OpenRouter),
/// `reasoning_text` (accepted as well). Bedrock behind some gateways sends
/// `reasoning_content: {"text": ...}` (envoyproxy/ai-gateway#1222).
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "reasoning", "reasoning_text"];

/// A tool call being assembled.
#[derive(Debug, Default)]
struct Partial {
    index: Option<u64>,
    id: String,
    name: String,
    arguments: String,
    extra: Map<String, Value>,
}

impl Partial {
    /// The arguments so far parse as one whole JSON value.
    fn arguments_complete(&self) -> bool {
        !self.arguments.trim().is_empty() && serde_json::from_str::<Value>(&self.arguments).is_ok()
    }
}

/// One tool-call delta, read tolerantly.
struct CallDelta<'a> {
    index: Option<u64>,
    id: Option<&'a str>,
    name: Option<&'a str>,
    arguments: String,
    extra: Vec<(&'a String, &'a Value)>,
}

impl<'a> CallDelta<'a> {
    fn read(value: &'a Value) -> CallDelta<'a> {
        let function = value.get("function");
        let non_empty = |v: Option<&'a Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty());
        let arguments = match function.and_then(|f| f.get("arguments")) {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(text)) => text.clone(),
            // TGI sends the arguments as a JSON object.
            Some(other) => other.to_string(),
        };
        let extra = value
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| !KNOWN_CALL_FIELDS.contains(&k.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        CallDelta {
            index: value.get("index").and_then(Value::as_u64),
            id: non_empty(value.get("id")),
            name: non_empty(function.and_then(|f| f.get("name"))),
            arguments,
            extra,
        }
    }
}

/// Folds one response into a [`Completion`].
#[derive(Debug, Default)]
pub struct Accumulator {
    content: String,
    reasoning: String,
    calls: Vec<Partial>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    tool_call_started: bool,
}

impl Accumulator {
    /// An empty accumulator, for one response.
    pub fn new() -> Accumulator {
        Accumulator::default()
    }

    /// Whether a finish reason has been seen (a stream that ends without `[DONE]` is still
    /// complete then).
    pub fn has_finish_reason(&self) -> bool {
        self.finish_reason.is_some()
    }

    /// Takes one stream chunk; returns the events it gives, in order.
    pub fn push_chunk(&mut self, chunk: &Value) -> Result<Vec<LlmEvent>, LlmError> {
        let mut events = Vec::new();
        self.take_usage(chunk);
        let choices = chunk.get("choices").and_then(Value::as_array);
        if choices.is_none()
            && let Some(error) = chunk.get("error")
        {
            return Err(LlmError::Reported {
                message: error_message(error),
            });
        }
        for choice in choices.into_iter().flatten().filter(|c| first_choice(c)) {
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(reason.to_owned());
            }
            // Some servers put the delta under `message` in chunks too.
            let Some(delta) = choice.get("delta").or_else(|| choice.get("message")) else {
                continue;
            };
            self.take_text(delta, &mut events);
            let calls = delta_calls(delta);
            if !calls.is_empty() && !self.tool_call_started {
                self.tool_call_started = true;
                events.push(LlmEvent::ToolCallStarted);
            }
            for call in calls {
                self.merge(CallDelta::read(call))?;
            }
        }
        Ok(events)
    }

    /// Takes a whole (non-streaming) response body; returns the events a stream of it would
    /// have given, in order: reasoning, text, the start of tool calls.
    pub fn push_body(&mut self, body: &Value) -> Result<Vec<LlmEvent>, LlmError> {
        self.take_usage(body);
        let Some(choices) = body.get("choices").and_then(Value::as_array) else {
            return Err(match body.get("error") {
                Some(error) => LlmError::Reported {
                    message: error_message(error),
                },
                None => LlmError::bad_response("the response has no `choices`"),
            });
        };
        let choice = choices
            .iter()
            .find(|c| first_choice(c))
            .ok_or_else(|| LlmError::bad_response("the response has no choice"))?;
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let message = choice
            .get("message")
            .ok_or_else(|| LlmError::bad_response("the choice has no `message`"))?;
        let mut events = Vec::new();
        self.take_text(message, &mut events);
        let calls = delta_calls(message);
        if !calls.is_empty() {
            self.tool_call_started = true;
            events.push(LlmEvent::ToolCallStarted);
        }
        for call in calls {
            // A whole body lists whole calls: each entry is its own call.
            self.open(CallDelta::read(call))?;
        }
        Ok(events)
    }

    /// The completion so far: missing ids synthesized, empty calls dropped.
    pub fn finish(self) -> Completion {
        let mut tool_calls: Vec<ToolCall> = Vec::with_capacity(self.calls.len());
        for call in self.calls {
            if call.name.is_empty() && call.arguments.trim().is_empty() {
                continue;
            }
            let duplicate = tool_calls.iter().any(|c| c.id == call.id);
            let id = if call.id.is_empty() || duplicate {
                synthesize_id()
            } else {
                call.id
            };
            tool_calls.push(ToolCall {
                id,
                name: call.name,
                arguments: call.arguments,
                extra: call.extra,
            });
        }
        Completion {
            content: self.content,
            reasoning: self.reasoning,
            tool_calls,
            finish_reason: self.finish_reason,
            usage: self.usage,
        }
    }

    fn take_usage(&mut self, value: &Value) {
        if let Some(usage) = value.get("usage").and_then(read_usage) {
            self.usage = Some(usage);
        }
    }

    fn take_text(&mut self, delta: &Value, events: &mut Vec<LlmEvent>) {
        for field in REASONING_FIELDS {
            if let Some(text) = delta.get(field).and_then(text_of).filter(|t| !t.is_empty()) {
                self.reasoning.push_str(&text);
                events.push(LlmEvent::Reasoning(text));
            }
        }
        if let Some(text) = delta
            .get("content")
            .and_then(text_of)
            .filter(|t| !t.is_empty())
        {
            self.content.push_str(&text);
            events.push(LlmEvent::Text(text));
        }
    }

    /// Adds a delta to the call it continues, or opens a new call: by `index`, else by id,
    /// else the last call; a different id, or a name after complete arguments, is a new call.
    fn merge(&mut self, delta: CallDelta<'_>) -> Result<(), LlmError> {
        let target = match (delta.index, delta.id) {
            (Some(index), _) => self.calls.iter().rposition(|c| c.index == Some(index)),
            (None, Some(id)) => self.calls.iter().rposition(|c| c.id == id),
            (None, None) => self.calls.len().checked_sub(1),
        };
        let Some(position) = target else {
            return self.open(delta);
        };
        let call = &self.calls[position];
        let new_call = match delta.id {
            Some(id) => !call.id.is_empty() && call.id != id,
            None => delta.name.is_some() && call.arguments_complete(),
        };
        if new_call {
            return self.open(delta);
        }
        let call = &mut self.calls[position];
        if call.id.is_empty()
            && let Some(id) = delta.id
        {
            call.id = id.to_owned();
        }
        if let Some(name) = delta.name {
            // The name comes whole (OpenAI), repeated (vLLM), cumulative, or in pieces.
            if call.name.is_empty() || name.starts_with(call.name.as_str()) {
                call.name = name.to_owned();
            } else if call.name != name {
                call.name.push_str(name);
            }
        }
        append_arguments(call, &delta.arguments)?;
        merge_extra(&mut call.extra, delta.extra);
        Ok(())
    }

    fn open(&mut self, delta: CallDelta<'_>) -> Result<(), LlmError> {
        if self.calls.len() >= MAX_TOOL_CALLS {
            return Err(LlmError::TooManyToolCalls {
                limit: MAX_TOOL_CALLS,
            });
        }
        let mut call = Partial {
            index: delta.index,
            id: delta.id.unwrap_or_default().to_owned(),
            name: delta.name.unwrap_or_default().to_owned(),
            ..Partial::default()
        };
        append_arguments(&mut call, &delta.arguments)?;
        merge_extra(&mut call.extra, delta.extra);
        self.calls.push(call);
        Ok(())
    }
}

fn append_arguments(call: &mut Partial, piece: &str) -> Result<(), LlmError> {
    if call.arguments.len() + piece.len() > MAX_ARGUMENT_BYTES {
        return Err(LlmError::ArgumentsTooLarge {
            limit: MAX_ARGUMENT_BYTES,
        });
    }
    call.arguments.push_str(piece);
    Ok(())
}

/// Unknown fields of a call, merged into what earlier deltas gave (objects key by key, so
/// a signature sent in its own delta joins the rest).
fn merge_extra(into: &mut Map<String, Value>, fields: Vec<(&String, &Value)>) {
    for (key, value) in fields {
        if value.is_null() && into.contains_key(key) {
            continue;
        }
        if let (Some(Value::Object(existing)), Value::Object(more)) = (into.get_mut(key), value) {
            merge_extra(existing, more.iter().collect());
            continue;
        }
        into.insert(key.clone(), value.clone());
    }
}

/// The tool-call deltas of a delta or message: an array, a single object (TGI), or a legacy
/// `function_call`.
fn delta_calls(delta: &Value) -> Vec<&Value> {
    match delta.get("tool_calls") {
        Some(Value::Array(calls)) => calls.iter().filter(|c| c.is_object()).collect(),
        Some(call @ Value::Object(_)) => vec![call],
        _ => match delta.get("function_call") {
            Some(call @ Value::Object(_)) => vec![call],
            _ => Vec::new(),
        },
    }
}

/// Choice 0 (or a choice without an index): we ask for one choice and read one.
fn first_choice(choice: &Value) -> bool {
    choice.get("index").and_then(Value::as_u64).unwrap_or(0) == 0
}

/// Text from a string, a `{"text":...}` object, or an array of `{"type":"text","text":...}`
/// parts.
fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Object(part) => part.get("text").and_then(Value::as_str).map(str::to_owned),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.as_str().or_else(|| p.get("text").and_then(Value::as_str)))
                .collect(),
        ),
        _ => None,
    }
}

fn read_usage(value: &Value) -> Option<Usage> {
    let count = |key: &str| value.get(key).and_then(Value::as_u64);
    let prompt = count("prompt_tokens");
    let completion = count("completion_tokens");
    if prompt.is_none() && completion.is_none() {
        return None;
    }
    let (prompt, completion) = (prompt.unwrap_or(0), completion.unwrap_or(0));
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: count("total_tokens").unwrap_or(prompt + completion),
        // OpenAI's field, else the Anthropic-style one some compatible servers send.
        cached_tokens: value
            .pointer("/prompt_tokens_details/cached_tokens")
            .and_then(Value::as_u64)
            .or_else(|| count("cache_read_input_tokens"))
            .unwrap_or(0),
    })
}

/// The message of an `error` object or string, cut to a readable length.
pub(crate) fn error_message(error: &Value) -> String {
    let text = match error {
        Value::String(text) => text.clone(),
        other => other
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| other.to_string(), str::to_owned),
    };
    text.chars().take(500).collect()
}

/// A tool call id for a server that sent none: 9 alphanumerics, the form Mistral's template
/// requires (and every other server accepts).
fn synthesize_id() -> String {
    crate::digest::random_hex(5).chars().take(9).collect()
}

#[cfg(test)]
#[path = "accumulate_tests.rs"]
mod tests;
