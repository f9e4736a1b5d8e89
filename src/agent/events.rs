//! The events of one chat turn, in the order they happen. Serialized with a `type` tag naming
//! the event in snake_case and fields in camelCase, like every JSON the gateway writes
//! (`{"type":"tool_call","callId":...}`); the chat API sends each as one SSE event whose
//! `event:` name is the same tag, and the page and `mcpgate chat` read them.

use serde::Serialize;
use serde_json::Value;

/// Token counts as the model server reported them (absent when it reports none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Of the prompt tokens, those the provider read from its cache
    /// (`prompt_tokens_details.cached_tokens`); 0 when it does not say.
    pub cached_tokens: u64,
}

/// One event of a chat turn. `callId` is the model's tool call id (synthesized when the
/// server sent none), unique within the turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum AgentEvent {
    /// A request to the model starts; `round` counts from 0.
    RoundStart { round: u32 },
    /// Answer text, streamed only while no tool call has appeared in the round.
    TextDelta { text: String },
    /// Reasoning text (`reasoning`, `reasoning_content` or `reasoning_text` in the stream).
    ReasoningDelta { text: String },
    /// The model asked for a tool; `tool` is the canonical `server.tool` when the name
    /// resolved in the caller's catalog, else the name the model used.
    ToolCall {
        call_id: String,
        tool: String,
        server: Option<String>,
        arguments: Value,
        /// The tool's MCP Apps view, as the merged view names it (`ui://<server>/…`): the
        /// page renders it with the call's input and result.
        #[serde(skip_serializing_if = "Option::is_none")]
        view: Option<String>,
    },
    /// How long the call is expected to take, from recent calls of the same tool.
    ToolEta { call_id: String, expected_ms: u64 },
    /// An MCP progress notification from the upstream while the call runs.
    ToolProgress {
        call_id: String,
        progress: f64,
        #[serde(skip_serializing_if = "Option::is_none")]
        total: Option<f64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// A write tool waits for the user: approve or deny `callId` (same user and session)
    /// before `expiresAt` (RFC 3339).
    ApprovalRequired {
        call_id: String,
        confirmation_id: String,
        tool: String,
        server: String,
        arguments: Value,
        expires_at: String,
    },
    /// The call succeeded; `result` is the gateway's shaped result (`content` parts,
    /// optional `structuredContent`, `truncated`).
    ToolResult {
        call_id: String,
        tool: String,
        result: Value,
        elapsed_ms: u64,
    },
    /// The call failed: a gateway error code (`denied_by_user` when the user declined,
    /// `cancelled` when the turn was cancelled) and its message, as the model reads it.
    ToolError {
        call_id: String,
        tool: String,
        code: String,
        message: String,
        elapsed_ms: u64,
    },
    /// The model's answer.
    Final {
        message: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
    },
    /// The turn failed (model unreachable, bad stream, cancelled); `code` is stable.
    Error { code: String, message: String },
    /// Always last.
    Done,
}

impl AgentEvent {
    /// The `type` tag, also the SSE `event:` name.
    pub fn kind(&self) -> &'static str {
        match self {
            AgentEvent::RoundStart { .. } => "round_start",
            AgentEvent::TextDelta { .. } => "text_delta",
            AgentEvent::ReasoningDelta { .. } => "reasoning_delta",
            AgentEvent::ToolCall { .. } => "tool_call",
            AgentEvent::ToolEta { .. } => "tool_eta",
            AgentEvent::ToolProgress { .. } => "tool_progress",
            AgentEvent::ApprovalRequired { .. } => "approval_required",
            AgentEvent::ToolResult { .. } => "tool_result",
            AgentEvent::ToolError { .. } => "tool_error",
            AgentEvent::Final { .. } => "final",
            AgentEvent::Error { .. } => "error",
            AgentEvent::Done => "done",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_tag_is_the_kind() {
        let events = [
            AgentEvent::RoundStart { round: 0 },
            AgentEvent::ToolEta {
                call_id: "a".into(),
                expected_ms: 5,
            },
            AgentEvent::Final {
                message: "hi".into(),
                usage: None,
            },
            AgentEvent::Done,
        ];
        for event in events {
            let value = serde_json::to_value(&event).expect("events serialize");
            assert_eq!(value["type"], json!(event.kind()));
        }
    }

    #[test]
    fn fields_are_camel_case() {
        let eta = AgentEvent::ToolEta {
            call_id: "a".into(),
            expected_ms: 5,
        };
        assert_eq!(
            serde_json::to_value(&eta).expect("serializes"),
            json!({ "type": "tool_eta", "callId": "a", "expectedMs": 5 })
        );
        let usage = Usage {
            prompt_tokens: 1,
            completion_tokens: 2,
            total_tokens: 3,
            cached_tokens: 0,
        };
        assert_eq!(
            serde_json::to_value(usage).expect("serializes"),
            json!({ "promptTokens": 1, "completionTokens": 2, "totalTokens": 3,
                    "cachedTokens": 0 })
        );
    }
}
