//! Rules for `[llm]` and `[agent]`, with the ecosystem's environment: `MCPGATE_MODEL` wins
//! over `model` (like the other `MCPGATE_*` settings); `OPENAI_BASE_URL` and `OPENAI_API_KEY`
//! only fill in what the file leaves out, because they are often set for other tools.

use std::{ops::RangeInclusive, time::Duration};

use url::Url;

use super::{
    AgentConfig, Env, LlmConfig, ModelsConfig, NamedModel, Price, Secret, SecretTemplate,
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
/// A model's name in `[[llm.models]]`.
const MAX_MODEL_NAME_CHARS: usize = 64;
/// A price per million tokens beyond any model's.
const MAX_PRICE: f64 = 1_000_000.0;

const MAX_ROUNDS_RANGE: RangeInclusive<u32> = 1..=100;
const MAX_TOOL_OUTPUT_CHARS_RANGE: RangeInclusive<usize> = 100..=1_000_000;
const MAX_REPEATS_RANGE: RangeInclusive<u32> = 1..=100;
const MAX_ARGUMENT_RETRIES_RANGE: RangeInclusive<u32> = 0..=5;
const MAX_RUNNING_TURNS_RANGE: RangeInclusive<usize> = 1..=10_000;
const MAX_MESSAGES_RANGE: RangeInclusive<usize> = 1..=10_000;
/// The preamble goes into every request: a large one eats the model's context.
const MAX_PREPROMPT_CHARS: usize = 32 * 1024;

/// The model, when `[llm]` is written or `MCPGATE_MODEL` is set; `None` otherwise (chat is
/// then refused). Broken fields keep their defaults (the report fails the load anyway). With
/// `[[llm.models]]`, the default one of them, beside the list.
pub(super) fn llm(
    raw: Option<&RawLlm>,
    env: &Env,
    report: &mut Report,
) -> (Option<LlmConfig>, ModelsConfig) {
    let env_model = env.setting(MODEL);
    if raw.is_none() && env_model.is_none() {
        return (None, ModelsConfig::default());
    }
    let empty = RawLlm::default();
    let raw = raw.unwrap_or(&empty);
    if raw.models.is_some() {
        let models = models(raw, env, report);
        return (models.default_model().map(|m| m.llm.clone()), models);
    }
    let at = |field: &str| format!("llm.{field}");
    let one = one_model(raw, &at, env_model, env, report);
    let prices = (
        raw.price_per_mtok_in,
        raw.price_per_mtok_out,
        raw.price_per_mtok_cached,
    );
    let models = ModelsConfig {
        list: vec![NamedModel {
            name: one.model.clone(),
            llm: one.clone(),
            max_running_turns: None,
            price: price(prices, "llm", report),
        }],
        default: None,
        tools_model: None,
    };
    (Some(one), models)
}

/// `[[llm.models]]`, each with what it does not write inherited from `[llm]` (but a model
/// with its own `base_url` inherits no key and no header: a secret for one provider never
/// reaches another); empty without the list.
fn models(raw: &RawLlm, env: &Env, report: &mut Report) -> ModelsConfig {
    let Some(entries) = &raw.models else {
        return ModelsConfig::default();
    };
    if entries.is_empty() {
        report.problem("llm.models", "lists no model: remove it, or add one");
    }
    if raw.model.is_some() {
        report.problem(
            "llm.model",
            "is not used with [[llm.models]]: give each model its own (default: its name)",
        );
    }
    if raw.price_per_mtok_in.is_some() || raw.price_per_mtok_out.is_some() {
        report.problem(
            "llm.price_per_mtok_in",
            "is not used with [[llm.models]]: give each model its own prices",
        );
    }
    if env.setting(MODEL).is_some() {
        report.warn(
            MODEL,
            "is ignored with [[llm.models]]: choose the default with llm.default",
        );
    }
    let mut list: Vec<NamedModel> = Vec::new();
    for (i, entry) in entries.iter().enumerate() {
        let path = format!("llm.models[{i}]");
        let Some(name) = model_name(entry.name.as_deref(), &format!("{path}.name"), report) else {
            continue;
        };
        if list.iter().any(|m| m.name == name) {
            report.problem(format!("{path}.name"), format!("`{name}` is listed twice"));
            continue;
        }
        let own_url = entry.base_url.is_some();
        let merged = RawLlm {
            base_url: entry.base_url.clone().or_else(|| raw.base_url.clone()),
            model: Some(entry.model.clone().unwrap_or_else(|| name.clone())),
            api_key: entry
                .api_key
                .clone()
                .or_else(|| (!own_url).then(|| raw.api_key.clone()).flatten()),
            headers: entry
                .headers
                .clone()
                .or_else(|| (!own_url).then(|| raw.headers.clone()).flatten()),
            connect_timeout: entry
                .connect_timeout
                .clone()
                .or_else(|| raw.connect_timeout.clone()),
            request_timeout: entry
                .request_timeout
                .clone()
                .or_else(|| raw.request_timeout.clone()),
            idle_timeout: entry
                .idle_timeout
                .clone()
                .or_else(|| raw.idle_timeout.clone()),
            stream: entry.stream.or(raw.stream),
            tools: entry.tools.or(raw.tools),
            max_response_bytes: entry.max_response_bytes.or(raw.max_response_bytes),
            models: None,
            default: None,
            tools_model: None,
            price_per_mtok_in: None,
            price_per_mtok_out: None,
            price_per_mtok_cached: None,
        };
        let written = |field: &str| match field {
            "base_url" => own_url,
            "model" => true,
            "api_key" => entry.api_key.is_some(),
            "headers" => entry.headers.is_some(),
            "connect_timeout" => entry.connect_timeout.is_some(),
            "request_timeout" => entry.request_timeout.is_some(),
            "idle_timeout" => entry.idle_timeout.is_some(),
            "stream" => entry.stream.is_some(),
            "tools" => entry.tools.is_some(),
            _ => entry.max_response_bytes.is_some(),
        };
        let at = |field: &str| {
            if written(field) {
                format!("{path}.{field}")
            } else {
                format!("llm.{field}")
            }
        };
        let llm = one_model(&merged, &at, None, env, report);
        let max_running_turns = entry.max_running_turns.and_then(|n| {
            count(
                n,
                &MAX_RUNNING_TURNS_RANGE,
                &format!("{path}.max_running_turns"),
                report,
            )
        });
        let price = price(
            (
                entry.price_per_mtok_in,
                entry.price_per_mtok_out,
                entry.price_per_mtok_cached,
            ),
            &path,
            report,
        );
        list.push(NamedModel {
            name,
            llm,
            max_running_turns,
            price,
        });
    }
    let pick = |field: &str, written: Option<&String>, report: &mut Report| {
        let name = written?;
        if list.iter().any(|m| &m.name == name) {
            Some(name.clone())
        } else {
            report.problem(
                format!("llm.{field}"),
                format!("`{name}` is not the name of one of [[llm.models]]"),
            );
            None
        }
    };
    let default = pick("default", raw.default.as_ref(), report);
    let tools_model = pick("tools_model", raw.tools_model.as_ref(), report);
    if let Some(name) = &tools_model
        && list.iter().any(|m| &m.name == name && !m.llm.tools)
    {
        report.problem(
            "llm.tools_model",
            format!("`{name}` has `tools = false`: name a model with tools"),
        );
    }
    ModelsConfig {
        list,
        default,
        tools_model,
    }
}

/// Prices per million tokens: both `in` and `out` or neither, each at most a million.
pub(super) fn price(
    (input, output, cached): (Option<f64>, Option<f64>, Option<f64>),
    path: &str,
    report: &mut Report,
) -> Option<Price> {
    let mut ok = true;
    for (value, field) in [
        (input, "price_per_mtok_in"),
        (output, "price_per_mtok_out"),
        (cached, "price_per_mtok_cached"),
    ] {
        if value.is_some_and(|v| !(0.0..=MAX_PRICE).contains(&v)) {
            report.problem(
                format!("{path}.{field}"),
                format!("must be a price per million tokens from 0 to {MAX_PRICE}"),
            );
            ok = false;
        }
    }
    match (input, output) {
        (Some(per_mtok_in), Some(per_mtok_out)) => ok.then_some(Price {
            per_mtok_in,
            per_mtok_out,
            per_mtok_cached: cached.unwrap_or(per_mtok_in),
        }),
        (None, None) if cached.is_none() => None,
        _ => {
            report.problem(
                format!("{path}.price_per_mtok_in"),
                "and price_per_mtok_out go together: give both, or neither",
            );
            None
        }
    }
}

/// Every name in a tenant's `models` is a configured model's.
pub(super) fn check_tenant_models(
    access: &super::AccessConfig,
    llm: Option<&LlmConfig>,
    models: &ModelsConfig,
    report: &mut Report,
) {
    for tenant in &access.tenants {
        let Some(names) = &tenant.models else {
            continue;
        };
        let at = format!(
            "{}.models",
            super::validate::join("access.tenants", &tenant.tenant)
        );
        for name in names {
            let known = if models.list.is_empty() {
                llm.is_some_and(|l| &l.model == name)
            } else {
                models.list.iter().any(|m| &m.name == name)
            };
            if !known {
                report.problem(
                    at.as_str(),
                    format!("`{name}` is not a configured model's name"),
                );
            }
        }
    }
}

/// A model's name: what clients pick it by, shown in the page and in events.
fn model_name(name: Option<&str>, at: &str, report: &mut Report) -> Option<String> {
    let Some(name) = name else {
        report.problem(at, "is required: the name clients choose this model by");
        return None;
    };
    let fits = (1..=MAX_MODEL_NAME_CHARS).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:/-".contains(c));
    if !fits {
        report.problem(
            at,
            format!(
                "must be 1 to {MAX_MODEL_NAME_CHARS} characters of letters, digits, `.`, `_`, \
                 `:`, `/` and `-`"
            ),
        );
        return None;
    }
    Some(name.to_owned())
}

/// One model's settings; `at(field)` is where each field is reported.
fn one_model(
    raw: &RawLlm,
    at: &dyn Fn(&str) -> String,
    env_model: Option<&str>,
    env: &Env,
    report: &mut Report,
) -> LlmConfig {
    let model = model(raw, at, env_model, report);
    let (base_url, written) = base_url(raw, at, env, report);
    let mut config = LlmConfig::new(base_url, model);
    config.api_key = api_key(raw, at, written, env, report);
    config.headers = headers(raw, at, config.api_key.is_some(), env, report);
    let within = |raw: &Option<_>, range, field: &str, report: &mut Report| {
        raw.as_ref()
            .and_then(|r| duration(r, range, &at(field), report))
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
            &at("idle_timeout"),
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
                &at("max_response_bytes"),
                report,
            )
        })
        .unwrap_or(config.max_response_bytes);
    config
}

fn model(
    raw: &RawLlm,
    at: &dyn Fn(&str) -> String,
    env_model: Option<&str>,
    report: &mut Report,
) -> String {
    let written = at("model");
    let (text, at) = match (env_model, raw.model.as_deref()) {
        (Some(text), _) => (text, MODEL),
        (None, Some(text)) => (text, written.as_str()),
        (None, None) => {
            report.problem(
                written.as_str(),
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
fn base_url(
    raw: &RawLlm,
    at: &dyn Fn(&str) -> String,
    env: &Env,
    report: &mut Report,
) -> (Url, bool) {
    let default = || Url::parse(DEFAULT_BASE_URL).expect("the default base URL is valid");
    let file_at = at("base_url");
    let (text, at, written) = match (raw.base_url.as_deref(), env.setting(BASE_URL)) {
        (Some(text), _) => (text, file_at.as_str(), true),
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
fn api_key(
    raw: &RawLlm,
    at: &dyn Fn(&str) -> String,
    base_url_written: bool,
    env: &Env,
    report: &mut Report,
) -> Option<Secret> {
    let at = at("api_key");
    let at = at.as_str();
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
fn headers(
    raw: &RawLlm,
    at: &dyn Fn(&str) -> String,
    has_key: bool,
    env: &Env,
    report: &mut Report,
) -> Vec<(String, Secret)> {
    let Some(written) = &raw.headers else {
        return Vec::new();
    };
    let cx = secret_rules::Context { env, enabled: true };
    let mut out = Vec::new();
    let prefix = at("headers");
    for (name, template) in secret_rules::headers(written, &prefix, &cx, report) {
        let lower = name.to_ascii_lowercase();
        let at = super::validate::join(&prefix, &name);
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
