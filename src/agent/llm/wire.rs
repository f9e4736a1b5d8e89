//! The request body in OpenAI's chat completions shape, written the way the strictest servers
//! accept: assistant tool-call messages carry `content: ""` (llama-cpp-python answers 422 to
//! `null`), tool calls echo back the fields we did not understand, and `tools`/`tool_choice`
//! are left out when there are no tools.

use serde_json::{Map, Value, json};

use super::{ChatRequest, LlmError, Message, Role, ToolCall};

/// Keys of the body the client writes itself; `options` may not set them.
pub const RESERVED_KEYS: [&str; 6] = [
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
];

/// The JSON body for `request`. `tools_enabled: false` (a model without function calling)
/// sends no tools whatever the request holds.
pub fn request_body(
    model: &str,
    request: &ChatRequest,
    stream: bool,
    tools_enabled: bool,
) -> Result<Value, LlmError> {
    let mut body = Map::new();
    body.insert("model".into(), json!(model));
    body.insert(
        "messages".into(),
        Value::Array(request.messages.iter().map(message).collect()),
    );
    body.insert("stream".into(), json!(stream));
    if stream {
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if tools_enabled && !request.tools.is_empty() {
        body.insert("tools".into(), Value::Array(request.tools.clone()));
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), choice.clone());
        }
    }
    for (key, value) in &request.options {
        if RESERVED_KEYS.contains(&key.as_str()) {
            return Err(LlmError::BadRequest {
                detail: format!("option `{key}` is set by the client itself"),
            });
        }
        body.insert(key.clone(), value.clone());
    }
    Ok(Value::Object(body))
}

fn message(message: &Message) -> Value {
    let role = match message.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut out = Map::new();
    out.insert("role".into(), json!(role));
    out.insert("content".into(), json!(message.content));
    if message.role == Role::Assistant && !message.tool_calls.is_empty() {
        out.insert(
            "tool_calls".into(),
            Value::Array(message.tool_calls.iter().map(tool_call).collect()),
        );
    }
    if let Some(id) = &message.tool_call_id {
        out.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(out)
}

fn tool_call(call: &ToolCall) -> Value {
    let mut out = Map::new();
    out.insert("id".into(), json!(call.id));
    out.insert("type".into(), json!("function"));
    out.insert(
        "function".into(),
        json!({"name": call.name, "arguments": call.arguments}),
    );
    for (key, value) in &call.extra {
        // Unknown fields go back as received; they never replace the fields we write.
        out.entry(key.clone()).or_insert_with(|| value.clone());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> ToolCall {
        let mut extra = Map::new();
        extra.insert(
            "extra_content".into(),
            json!({"google": {"thought_signature": "sig"}}),
        );
        extra.insert("id".into(), json!("not this one"));
        ToolCall {
            id: "abcdefghi".into(),
            name: "demo_echo".into(),
            arguments: "{\"message\":\"hi\"}".into(),
            extra,
        }
    }

    #[test]
    fn messages_in_openai_shape() {
        let request = ChatRequest {
            messages: vec![
                Message::system("be brief"),
                Message::user("hi"),
                Message::assistant("", vec![call()]),
                Message::tool("abcdefghi", "Echo: hi"),
            ],
            tools: vec![json!({"type": "function", "function": {"name": "demo_echo"}})],
            tool_choice: Some(json!("auto")),
            options: [("temperature".to_owned(), json!(0.2))]
                .into_iter()
                .collect(),
        };
        let body = request_body("m", &request, true, true).expect("valid");
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "", "tool_calls": [{
                        "id": "abcdefghi", "type": "function",
                        "function": {"name": "demo_echo", "arguments": "{\"message\":\"hi\"}"},
                        "extra_content": {"google": {"thought_signature": "sig"}}
                    }]},
                    {"role": "tool", "content": "Echo: hi", "tool_call_id": "abcdefghi"}
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "tools": [{"type": "function", "function": {"name": "demo_echo"}}],
                "tool_choice": "auto",
                "temperature": 0.2
            })
        );
    }

    #[test]
    fn no_tools_no_tool_choice_and_reserved_options_refused() {
        let mut request = ChatRequest {
            messages: vec![Message::user("hi")],
            tool_choice: Some(json!("auto")),
            ..ChatRequest::default()
        };
        let body = request_body("m", &request, false, true).expect("valid");
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": false})
        );
        request.tools = vec![json!({"type": "function"})];
        let body = request_body("m", &request, false, false).expect("valid");
        assert!(body.get("tools").is_none() && body.get("tool_choice").is_none());

        for key in RESERVED_KEYS {
            request.options = [(key.to_owned(), json!(1))].into_iter().collect();
            let err = request_body("m", &request, true, true).expect_err(key);
            assert_eq!(err.code(), "llm_bad_request");
        }
    }
}
