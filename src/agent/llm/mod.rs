//! An OpenAI-compatible chat completions client over our `reqwest`, for the servers people
//! actually run (OpenAI, vLLM, llama.cpp, Ollama, TGI, Gemini's compatibility endpoint, …),
//! whose streams differ in ways that break naive clients. These are the types the agent loop
//! speaks; the wire format lives beside them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::agent::events::Usage;

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One chat message in OpenAI's shape. An assistant message with tool calls is sent with
/// `content: ""` (some servers reject `null`).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: String,
    /// Assistant messages: the calls the model made.
    pub tool_calls: Vec<ToolCall>,
    /// Tool messages: the call this answers.
    pub tool_call_id: Option<String>,
}

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message::text(Role::System, content)
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message::text(Role::User, content)
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Message {
        Message {
            tool_calls,
            ..Message::text(Role::Assistant, content)
        }
    }

    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Message {
        Message {
            tool_call_id: Some(call_id.into()),
            ..Message::text(Role::Tool, content)
        }
    }

    fn text(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
}

/// A tool call as the model made it, accumulated from the stream.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The server's id, or a synthesized one (9 alphanumerics) when it sent none.
    pub id: String,
    /// The function name the model used (not yet resolved against any catalog).
    pub name: String,
    /// The arguments as the model wrote them: JSON text, possibly invalid or truncated (an
    /// object sent as an object is serialized to text).
    pub arguments: String,
    /// Fields of the call we do not know (e.g. a provider's signature), echoed back as sent.
    pub extra: Map<String, Value>,
}

/// One request to the model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// Tool definitions in OpenAI's `{"type":"function","function":{...}}` shape; empty
    /// sends no `tools` (and no `tool_choice`).
    pub tools: Vec<Value>,
    /// `"auto"`, `"none"`, `"required"` or a forced function; `None` leaves it out.
    pub tool_choice: Option<Value>,
    /// Sampling options passed through as given (`temperature`, `top_p`, `max_tokens`,
    /// `seed`, …); the client refuses keys it sets itself (`model`, `messages`, `stream`,
    /// `tools`, `tool_choice`).
    pub options: Map<String, Value>,
}

/// What a finished model response holds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    pub content: String,
    pub reasoning: String,
    /// Decided from the accumulated calls, never from `finish_reason`.
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
}

/// What a streaming response yields, in order; the last item is always `Finished`.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    Text(String),
    Reasoning(String),
    /// The first sign of a tool call in this response (the loop stops streaming text).
    ToolCallStarted,
    Finished(Completion),
}

mod accumulate;
mod client;
mod error;
pub(crate) mod sse;
mod wire;

pub use accumulate::{Accumulator, MAX_ARGUMENT_BYTES, MAX_TOOL_CALLS};
pub use client::LlmClient;
pub use error::{LlmError, TimeoutPhase};
