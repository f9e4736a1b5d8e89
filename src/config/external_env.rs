//! The environment as a configuration source: the `EXTERNAL_MCP_*` variables, applied on
//! top of whichever file (or the embedded default) was loaded. An empty variable counts as
//! unset ([`Env::setting`]).

use serde_json::Value;

use super::{
    Env, ServerSource,
    duration::RawDuration,
    limit_rules::{PAYLOAD_BYTES_RANGE, TIMEOUT_RANGE},
    raw::{EnvServer, UniqueMap},
    validate::{Draft, Entry, FieldCase, Report, count, duration, join},
};

/// `true`/`false`/`1`/`0`; `false` ignores [`SERVERS_JSON`].
pub(super) const ENABLED: &str = "EXTERNAL_MCP_ENABLED";
/// A JSON object id → server, or an array of servers with `id` (or `name`).
pub(super) const SERVERS_JSON: &str = "EXTERNAL_MCP_SERVERS_JSON";
pub(super) const CONNECT_TIMEOUT: &str = "EXTERNAL_MCP_CONNECT_TIMEOUT";
pub(super) const CALL_TIMEOUT: &str = "EXTERNAL_MCP_CALL_TIMEOUT";
pub(super) const MAX_RESULT_BYTES: &str = "EXTERNAL_MCP_MAX_RESULT_BYTES";

/// Applies the environment's limits and servers to `draft`.
pub(super) fn apply(env: &Env, draft: &mut Draft, report: &mut Report) {
    let get = |name| env.setting(name);
    let timeout = |name, report: &mut Report| {
        get(name).and_then(|v| {
            duration(
                &RawDuration::Text(v.to_owned()),
                &TIMEOUT_RANGE,
                name,
                report,
            )
        })
    };
    if let Some(d) = timeout(CONNECT_TIMEOUT, report) {
        draft.limits.connect_timeout = d;
    }
    if let Some(d) = timeout(CALL_TIMEOUT, report) {
        draft.limits.call_timeout = d;
    }
    if let Some(v) = get(MAX_RESULT_BYTES) {
        match v.parse::<u64>() {
            Ok(n) => {
                if let Some(n) = count(n, &PAYLOAD_BYTES_RANGE, MAX_RESULT_BYTES, report) {
                    draft.limits.max_result_bytes = n;
                }
            }
            Err(_) => report.problem(MAX_RESULT_BYTES, "is not a whole number of bytes"),
        }
    }

    let enabled = match get(ENABLED).map(str::to_ascii_lowercase).as_deref() {
        None | Some("true" | "1") => true,
        Some("false" | "0") => false,
        Some(_) => {
            report.problem(ENABLED, "must be true, false, 1 or 0");
            true
        }
    };
    let Some(json) = get(SERVERS_JSON) else {
        return;
    };
    if !enabled {
        report.warn(SERVERS_JSON, format!("ignored because {ENABLED} is false"));
        return;
    }
    let entries = entries(json, report);
    draft.add_servers(entries, ServerSource::Environment, env, report);
}

/// The servers of `EXTERNAL_MCP_SERVERS_JSON`, object or array form.
fn entries(json: &str, report: &mut Report) -> Vec<Entry> {
    let mut out = Vec::new();
    match json.chars().next() {
        Some('{') => match serde_json::from_str::<UniqueMap<Value>>(json) {
            Ok(map) => {
                for (key, value) in map.0 {
                    let path = join(SERVERS_JSON, &key);
                    out.extend(entry(Some(key), path, value, report));
                }
            }
            Err(e) => report.problem(SERVERS_JSON, e.to_string()),
        },
        Some('[') => match serde_json::from_str::<Vec<Value>>(json) {
            Ok(list) => {
                for (i, value) in list.into_iter().enumerate() {
                    let path = format!("{SERVERS_JSON}[{i}]");
                    out.extend(entry(None, path, value, report));
                }
            }
            Err(e) => report.problem(SERVERS_JSON, e.to_string()),
        },
        _ => report.problem(
            SERVERS_JSON,
            "must be a JSON object (id → server) or an array of servers with `id`",
        ),
    }
    out
}

/// One server; `key` is the object key in the object form, where `id` and `name` would be a
/// second, possibly contradicting, id. The array form takes its id from `id` or `name`.
fn entry(key: Option<String>, path: String, value: Value, report: &mut Report) -> Option<Entry> {
    if !value.is_object() {
        report.problem(path, "must be an object");
        return None;
    }
    let (id, name, server) = match serde_json::from_value::<EnvServer>(value) {
        Ok(server) => server.into_parts(),
        Err(e) => {
            report.problem(path, e.to_string());
            return None;
        }
    };
    let key = if let Some(key) = key {
        for (field, present) in [("id", id.is_some()), ("name", name.is_some())] {
            if present {
                report.problem(
                    format!("{path}.{field}"),
                    "is not allowed here: the object key is the server id",
                );
            }
        }
        key
    } else {
        match (id, name) {
            (Some(id), Some(name)) if id != name => {
                report.problem(
                    &path,
                    "has both `id` and `name`, and they differ: keep `id`",
                );
                return None;
            }
            (Some(id), _) | (None, Some(id)) => id,
            (None, None) => {
                report.problem(&path, "needs an `id`");
                return None;
            }
        }
    };
    Some(Entry {
        key,
        path,
        normalize: true,
        case: FieldCase::Camel,
        server,
    })
}
