//! The model and the agent loop: `[llm]` (an OpenAI-compatible chat completions server) and
//! `[agent]` (rounds, output caps, approvals).

use std::time::Duration;

use super::Secret;

/// An OpenAI-compatible chat completions server. From `[llm]`, or by the ecosystem's
/// convention from `OPENAI_BASE_URL`, `OPENAI_API_KEY` and `MCPGATE_MODEL`.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmConfig {
    /// Up to and including the version segment, e.g. `https://api.openai.com/v1`; requests go
    /// to `{base_url}/chat/completions`.
    pub base_url: url::Url,
    /// Sent as `Authorization: Bearer`; never logged.
    pub api_key: Option<Secret>,
    pub model: String,
    /// Extra request headers (values are secrets: never logged).
    pub headers: Vec<(String, Secret)>,
    pub connect_timeout: Duration,
    /// Deadline for one whole model request, stream included.
    pub request_timeout: Duration,
    /// Longest silence between two stream chunks.
    pub idle_timeout: Duration,
    /// Stream the response (SSE); `false` asks for one JSON body.
    pub stream: bool,
    /// The model supports function calling; `false` gives plain generation with no tools.
    pub tools: bool,
    /// Largest response accepted (stream total or JSON body), in bytes.
    pub max_response_bytes: usize,
}

impl LlmConfig {
    /// A config with safe defaults for `base_url` and `model`.
    pub fn new(base_url: url::Url, model: impl Into<String>) -> LlmConfig {
        LlmConfig {
            base_url,
            api_key: None,
            model: model.into(),
            headers: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(60),
            stream: true,
            tools: true,
            max_response_bytes: 8 * 1024 * 1024,
        }
    }
}

/// A model the chat may use, under the name clients choose it by.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedModel {
    pub name: String,
    pub llm: LlmConfig,
    /// Turns on this model at once (within `[agent] max_running_turns`); `None`: no bound
    /// of its own.
    pub max_running_turns: Option<usize>,
    /// What its tokens cost; `None`: no cost is counted.
    pub price: Option<Price>,
}

/// Prices per million tokens, in the operator's currency.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    pub per_mtok_in: f64,
    pub per_mtok_out: f64,
    /// Prompt tokens read from the provider's cache; default: `per_mtok_in`.
    pub per_mtok_cached: f64,
}

impl Price {
    /// The cost of a turn in millionths of the currency (prompt tokens include the cached
    /// ones, as providers report them).
    pub fn cost_micros(&self, prompt: u64, completion: u64, cached: u64) -> u64 {
        let cached = cached.min(prompt);
        let cost = (prompt - cached) as f64 * self.per_mtok_in
            + cached as f64 * self.per_mtok_cached
            + completion as f64 * self.per_mtok_out;
        // Prices are bounded by validation, so this stays far below u64::MAX.
        cost.round().max(0.0) as u64
    }
}

/// The models clients choose among: `[[llm.models]]`, or the one `[llm]` model under its
/// model id; empty without a model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelsConfig {
    pub list: Vec<NamedModel>,
    /// The model a turn uses unless it names one; `None`: the first.
    pub default: Option<String>,
    /// Where a turn that offers tools goes when its model has none; `None`: the first model
    /// with tools.
    pub tools_model: Option<String>,
}

impl ModelsConfig {
    /// The default model, `None` when the list is empty.
    pub fn default_model(&self) -> Option<&NamedModel> {
        match &self.default {
            Some(name) => self.list.iter().find(|m| &m.name == name),
            None => self.list.first(),
        }
    }
}

/// The loop's bounds (DESIGN.md "One chat turn").
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// Model requests with tools per turn; then one last request without tools.
    pub max_rounds: u32,
    /// Tool output given to the model per call, in characters; the rest is cut with a note.
    pub max_tool_output_chars: usize,
    /// The same call (tool, arguments, result) more often than this ends the turn.
    pub max_repeats: u32,
    /// Retries of a round whose tool arguments were not valid JSON.
    pub max_argument_retries: u32,
    /// The system preamble; `None` uses the built-in one.
    pub preprompt: Option<String>,
    /// Turns running at once across the process (the chat API refuses more).
    pub max_running_turns: usize,
    /// Messages accepted in one chat request.
    pub max_messages: usize,
}

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            max_rounds: 10,
            max_tool_output_chars: 16_000,
            max_repeats: 3,
            max_argument_retries: 2,
            preprompt: None,
            max_running_turns: 64,
            max_messages: 200,
        }
    }
}
