//! Raw `[llm]` and `[agent]` sections: the model server and the bounds of the tool loop, as
//! written.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::duration::RawDuration;

/// `[llm]`: an OpenAI-compatible chat completions server. Every field optional here, so a
/// missing one is reported with its path or filled from the environment.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLlm {
    /// As text, so that a bad URL is reported with its path (and never quoted).
    pub base_url: Option<String>,
    pub model: Option<String>,
    /// One `${NAME}` reference: the file names the variable, the environment holds the key.
    pub api_key: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    pub connect_timeout: Option<RawDuration>,
    pub request_timeout: Option<RawDuration>,
    pub idle_timeout: Option<RawDuration>,
    pub stream: Option<bool>,
    pub tools: Option<bool>,
    pub max_response_bytes: Option<u64>,
    /// Several models (`[[llm.models]]`); the fields above are then what each inherits.
    pub models: Option<Vec<RawModel>>,
    /// The name of the model a turn uses unless it names one; default: the first.
    pub default: Option<String>,
    /// Where a turn that offers tools goes when its model has none; default: the first
    /// model with tools.
    pub tools_model: Option<String>,
    /// Prices per million tokens of the one model (usage and cost).
    pub price_per_mtok_in: Option<f64>,
    pub price_per_mtok_out: Option<f64>,
    pub price_per_mtok_cached: Option<f64>,
}

/// One of `[[llm.models]]`: a name clients pick it by, and what differs from `[llm]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawModel {
    pub name: Option<String>,
    pub base_url: Option<String>,
    /// Default: the name.
    pub model: Option<String>,
    pub api_key: Option<String>,
    pub headers: Option<BTreeMap<String, String>>,
    pub connect_timeout: Option<RawDuration>,
    pub request_timeout: Option<RawDuration>,
    pub idle_timeout: Option<RawDuration>,
    pub stream: Option<bool>,
    pub tools: Option<bool>,
    pub max_response_bytes: Option<u64>,
    /// Turns on this model at once.
    pub max_running_turns: Option<u64>,
    /// Prices per million tokens (usage and cost); never inherited.
    pub price_per_mtok_in: Option<f64>,
    pub price_per_mtok_out: Option<f64>,
    pub price_per_mtok_cached: Option<f64>,
}

/// `[agent]`: bounds of one chat turn and of the turns running at once.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    pub max_rounds: Option<u64>,
    pub max_tool_output_chars: Option<u64>,
    pub max_repeats: Option<u64>,
    pub max_argument_retries: Option<u64>,
    pub preprompt: Option<String>,
    pub max_running_turns: Option<u64>,
    pub max_messages: Option<u64>,
}
