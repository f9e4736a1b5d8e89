//! Rules for `[llm]` and `[agent]`, with the ecosystem's environment: `MCPGATE_MODEL` wins
//! over `model` (like the other `MCPGATE_*` settings); `OPENAI_BASE_URL` and `OPENAI_API_KEY`
//! only fill in what the file leaves out, because they are often set for other tools.

use std::{ops::RangeInclusive, time::Duration};

use url::Url;

use super::{
    AgentConfig, Env, LlmConfig, Secret, SecretTemplate,
    raw::{RawAgent, RawLlm},
    secret_rules,
    validate::{Report, count, duration},
};

/// Configures a model, and wins over `[llm] model`.
const MODEL: &str = "MCPGATE_MODEL";
/// The base URL when the file writes none.
const BASE_URL: &str = "OPENAI_BASE_URL";
/// The key when the file writes none, sent only to a base URL not written in the file.
const API_KEY: &str = "OPENAI_API_KEY";
const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Headers the client sets itself.
const CLIENT_HEADERS: [&str; 2] = ["accept", "content-type"];

/// Connecting to a model server: under a second fails on a busy machine, over five minutes
/// nobody waits.
const CONNECT_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(300);
/// One request or one silence: small local models on CPU take minutes; past an hour a
/// stuck server cannot be told from a slow one.
const REQUEST_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(3600);
const MAX_RESPONSE_BYTES_RANGE: RangeInclusive<usize> = 1024..=256 * 1024 * 1024;
const MAX_MODEL_CHARS: usize = 256;

const MAX_ROUNDS_RANGE: RangeInclusive<u32> = 1..=100;
const MAX_TOOL_OUTPUT_CHARS_RANGE: RangeInclusive<usize> = 100..=1_000_000;
const MAX_REPEATS_RANGE: RangeInclusive<u32> = 1..=100;
const MAX_ARGUMENT_RETRIES_RANGE: RangeInclusive<u32> = 0..=5;
const MAX_RUNNING_TURNS_RANGE: RangeInclusive<usize> = 1..=10_000;
const MAX_MESSAGES_RANGE: RangeInclusive<usize> = 1..=10_000;
/// The preamble goes into every request: a large one eats the model's context.
const MAX_PREPROMPT_CHARS: usize = 32 * 1024;

/// The model, when `[llm]` is written or `MCPGATE_MODEL` is set; `None` otherwise (chat is
/// then refused). Broken fields keep their defaults (the report fails the load anyway).
pub(super) fn llm(raw: Option<&RawLlm>, env: &Env, report: &mut Report) -> Option<LlmConfig> {
    let env_model = env.setting(MODEL);
    if raw.is_none() && env_model.is_none() {
        return None;
    }
    let empty = RawLlm::default();
    let raw = raw.unwrap_or(&empty);
    let model = model(raw, env_model, report);
    let (base_url, written) = base_url(raw, env, report);
    let mut config = LlmConfig::new(base_url, model);
    config.api_key = api_key(raw, written, env, report);
    config.headers = headers(raw, config.api_key.is_some(), env, report);
    let within = |raw: &Option<_>, range, field: &str, report: &mut Report| {
        raw.as_ref()
            .and_then(|r| duration(r, range, &format!("llm.{field}"), report))
    };
    config.connect_timeout = within(
        &raw.connect_timeout,
        &CONNECT_TIMEOUT_RANGE,
        "connect_timeout",
        report,
    )
    .unwrap_or(config.connect_timeout);
    config.request_timeout = within(
        &raw.request_timeout,
        &REQUEST_TIMEOUT_RANGE,
        "request_timeout",
        report,
    )
    .unwrap_or(config.request_timeout);
    config.idle_timeout = within(
        &raw.idle_timeout,
        &REQUEST_TIMEOUT_RANGE,
        "idle_timeout",
        report,
    )
    .unwrap_or(config.idle_timeout);
    if config.idle_timeout > config.request_timeout {
        report.warn(
            "llm.idle_timeout",
            "is longer than request_timeout, which ends a silent request first",
        );
    }
    config.stream = raw.stream.unwrap_or(config.stream);
    config.tools = raw.tools.unwrap_or(config.tools);
    config.max_response_bytes = raw
        .max_response_bytes
        .and_then(|n| {
            count(
                n,
                &MAX_RESPONSE_BYTES_RANGE,
                "llm.max_response_bytes",
                report,
            )
        })
        .unwrap_or(config.max_response_bytes);
    Some(config)
}

fn model(raw: &RawLlm, env_model: Option<&str>, report: &mut Report) -> String {
    let (text, at) = match (env_model, raw.model.as_deref()) {
        (Some(text), _) => (text, MODEL),
        (None, Some(text)) => (text, "llm.model"),
        (None, None) => {
            report.problem(
                "llm.model",
                format!("is required: name the model the server serves (or set {MODEL})"),
            );
            return String::new();
        }
    };
    let text = text.trim();
    if text.is_empty()
        || text.chars().count() > MAX_MODEL_CHARS
        || text.chars().any(char::is_control)
    {
        report.problem(
            at,
            format!("must be 1 to {MAX_MODEL_CHARS} characters, no control characters"),
        );
    }
    text.to_owned()
}

/// The base URL and whether the file wrote it. Messages never quote the URL, which may hold
/// a password written by mistake.
fn base_url(raw: &RawLlm, env: &Env, report: &mut Report) -> (Url, bool) {
    let default = || Url::parse(DEFAULT_BASE_URL).expect("the default base URL is valid");
    let (text, at, written) = match (raw.base_url.as_deref(), env.setting(BASE_URL)) {
        (Some(text), _) => (text, "llm.base_url", true),
        (None, Some(text)) => (text, BASE_URL, false),
        (None, None) => return (default(), false),
    };
    let problem = match Url::parse(text.trim()) {
        Err(_) => "is not a valid URL",
        Ok(url) if !matches!(url.scheme(), "http" | "https") => "must be an http or https URL",
        Ok(url) if !url.username().is_empty() || url.password().is_some() => {
            "must not hold a user or password: put the key in api_key as a ${VAR} reference"
        }
        Ok(url) if url.host().is_none() => "must name a host",
        Ok(url) if url.query().is_some() || url.fragment().is_some() => {
            "must not have a query or fragment: requests go to {base_url}/chat/completions"
        }
        Ok(url) => return (url, written),
    };
    report.problem(at, problem);
    (default(), written)
}

/// The key: the file's `${VAR}` reference resolved, else `OPENAI_API_KEY` when the base URL
/// is not the file's (a key for one provider is never sent to a server the file names).
fn api_key(raw: &RawLlm, base_url_written: bool, env: &Env, report: &mut Report) -> Option<Secret> {
    let at = "llm.api_key";
    let Some(text) = raw.api_key.as_deref() else {
        return (!base_url_written)
            .then(|| env.setting(API_KEY))
            .flatten()
            .map(Secret::new);
    };
    let template = SecretTemplate::new(text);
    if !template.is_single_reference() {
        report.problem(
            at,
            format!(
                "must be one `${{NAME}}` reference, such as \"${{{API_KEY}}}\", with the key in \
                 that environment variable: a secret is never written in configuration"
            ),
        );
        return None;
    }
    match template.resolve(env) {
        Ok(key) if !key.expose().trim().is_empty() => Some(key),
        Ok(_) | Err(_) => {
            report.warn(
                at,
                "its environment variable is not set: requests go without a key",
            );
            None
        }
    }
}

/// Extra headers, checked as servers' are, resolved now (an unset variable drops the header
/// with the warning the header rules give).
fn headers(raw: &RawLlm, has_key: bool, env: &Env, report: &mut Report) -> Vec<(String, Secret)> {
    let Some(written) = &raw.headers else {
        return Vec::new();
    };
    let cx = secret_rules::Context { env, enabled: true };
    let mut out = Vec::new();
    for (name, template) in secret_rules::headers(written, "llm.headers", &cx, report) {
        let lower = name.to_ascii_lowercase();
        let at = super::validate::join("llm.headers", &name);
        if CLIENT_HEADERS.contains(&lower.as_str()) {
            report.problem(at, "is set by the model client and cannot be configured");
            continue;
        }
        if lower == "authorization" && has_key {
            report.problem(at, "is set from api_key: write one or the other");
            continue;
        }
        if let Ok(value) = template.resolve(env) {
            out.push((name, value));
        }
    }
    out
}

/// The loop's bounds; an absent field keeps its default.
pub(super) fn agent(raw: &RawAgent, report: &mut Report) -> AgentConfig {
    let d = AgentConfig::default();
    let preprompt = raw.preprompt.as_ref().and_then(|text| {
        if text.chars().count() > MAX_PREPROMPT_CHARS || text.contains('\0') {
            report.problem(
                "agent.preprompt",
                format!("must be at most {MAX_PREPROMPT_CHARS} characters, no NUL"),
            );
            return None;
        }
        Some(text.clone())
    });
    AgentConfig {
        max_rounds: bounded(raw.max_rounds, &MAX_ROUNDS_RANGE, "max_rounds", report)
            .unwrap_or(d.max_rounds),
        max_tool_output_chars: bounded(
            raw.max_tool_output_chars,
            &MAX_TOOL_OUTPUT_CHARS_RANGE,
            "max_tool_output_chars",
            report,
        )
        .unwrap_or(d.max_tool_output_chars),
        max_repeats: bounded(raw.max_repeats, &MAX_REPEATS_RANGE, "max_repeats", report)
            .unwrap_or(d.max_repeats),
        max_argument_retries: bounded(
            raw.max_argument_retries,
            &MAX_ARGUMENT_RETRIES_RANGE,
            "max_argument_retries",
            report,
        )
        .unwrap_or(d.max_argument_retries),
        preprompt,
        max_running_turns: bounded(
            raw.max_running_turns,
            &MAX_RUNNING_TURNS_RANGE,
            "max_running_turns",
            report,
        )
        .unwrap_or(d.max_running_turns),
        max_messages: bounded(
            raw.max_messages,
            &MAX_MESSAGES_RANGE,
            "max_messages",
            report,
        )
        .unwrap_or(d.max_messages),
    }
}

fn bounded<T>(
    raw: Option<u64>,
    range: &RangeInclusive<T>,
    field: &str,
    report: &mut Report,
) -> Option<T>
where
    T: TryFrom<u64> + PartialOrd + std::fmt::Display,
{
    raw.and_then(|n| count(n, range, &format!("agent.{field}"), report))
}

#[cfg(test)]
#[path = "agent_rules_tests.rs"]
mod tests;
