//! Rules for `[webmcp]`: exact origins only, canonical ids of page tools, bounds in range.

use std::{ops::RangeInclusive, time::Duration};

use super::{Report, count, duration_or};
use crate::config::{
    Confirm, PageVisibility, ScanMode, WEBMCP_PREFIX, WebMcpConfig,
    raw::{RawConfirm, RawReaction, RawWebMcp},
};

const CALL_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(600);
const HEARTBEAT_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(300);
const FRAME_RANGE: RangeInclusive<usize> = 1024..=(16 * 1024 * 1024);
const TOOLS_RANGE: RangeInclusive<usize> = 1..=1024;
const SCHEMA_RANGE: RangeInclusive<usize> = 256..=(1024 * 1024);
const PAGES_PER_USER_RANGE: RangeInclusive<usize> = 1..=256;
const PAGES_RANGE: RangeInclusive<usize> = 1..=100_000;

pub(super) fn section(raw: &RawWebMcp, report: &mut Report) -> WebMcpConfig {
    let d = WebMcpConfig::default();
    let time = |value: &Option<crate::config::duration::RawDuration>,
                field: &str,
                range: &RangeInclusive<Duration>,
                default: Duration,
                report: &mut Report| {
        duration_or(value.as_ref(), ("webmcp", field), range, default, report)
    };
    let size = |value: Option<u64>,
                field: &str,
                range: &RangeInclusive<usize>,
                default: usize,
                report: &mut Report| {
        value
            .and_then(|v| count(v, range, &format!("webmcp.{field}"), report))
            .unwrap_or(default)
    };
    let visible_to = match raw.visible_to.as_deref() {
        None | Some("owner") => PageVisibility::Owner,
        Some("tenant") => PageVisibility::Tenant,
        Some(_) => {
            report.problem("webmcp.visible_to", "must be `owner` or `tenant`");
            PageVisibility::Owner
        }
    };
    let heartbeat = time(
        &raw.heartbeat,
        "heartbeat",
        &HEARTBEAT_RANGE,
        d.heartbeat,
        report,
    );
    let heartbeat_timeout = time(
        &raw.heartbeat_timeout,
        "heartbeat_timeout",
        &HEARTBEAT_RANGE,
        d.heartbeat_timeout.max(heartbeat * 2),
        report,
    );
    if heartbeat_timeout <= heartbeat {
        report.problem(
            "webmcp.heartbeat_timeout",
            "must be longer than `heartbeat`: a page answers a ping within the timeout",
        );
    }
    WebMcpConfig {
        allowed_origins: super::service_rules::origins(
            raw.allowed_origins.as_deref().unwrap_or_default(),
            "webmcp.allowed_origins",
            report,
        ),
        visible_to,
        read_only_tools: tool_ids(raw.read_only_tools.as_deref(), "read_only_tools", report),
        write_tools: tool_ids(raw.write_tools.as_deref(), "write_tools", report),
        confirm: match raw.confirm.unwrap_or(RawConfirm::Writes) {
            RawConfirm::All => Confirm::All,
            RawConfirm::Writes => Confirm::Writes,
            RawConfirm::None => Confirm::None,
        },
        scan: match raw.scan.unwrap_or(RawReaction::Warn) {
            RawReaction::Warn => ScanMode::Warn,
            RawReaction::Block => ScanMode::Block,
        },
        call_timeout: time(
            &raw.call_timeout,
            "call_timeout",
            &CALL_TIMEOUT_RANGE,
            d.call_timeout,
            report,
        ),
        heartbeat,
        heartbeat_timeout,
        max_frame_bytes: size(
            raw.max_frame_bytes,
            "max_frame_bytes",
            &FRAME_RANGE,
            d.max_frame_bytes,
            report,
        ),
        max_tools: size(
            raw.max_tools,
            "max_tools",
            &TOOLS_RANGE,
            d.max_tools,
            report,
        ),
        max_schema_bytes: size(
            raw.max_schema_bytes,
            "max_schema_bytes",
            &SCHEMA_RANGE,
            d.max_schema_bytes,
            report,
        ),
        max_pages_per_user: size(
            raw.max_pages_per_user,
            "max_pages_per_user",
            &PAGES_PER_USER_RANGE,
            d.max_pages_per_user,
            report,
        ),
        max_pages: size(
            raw.max_pages,
            "max_pages",
            &PAGES_RANGE,
            d.max_pages,
            report,
        ),
        names: names(raw.names.as_ref(), report),
    }
}

/// `[webmcp.names]`: valid client ids, each under its own name of 1 to 25 of `a-z 0-9 -`.
fn names(
    raw: Option<&std::collections::BTreeMap<String, String>>,
    report: &mut Report,
) -> Vec<(String, crate::config::ServerId)> {
    let mut out: Vec<(String, crate::config::ServerId)> = Vec::new();
    for (client, name) in raw.into_iter().flatten() {
        let field = format!(
            "webmcp.names.{}",
            client.chars().take(64).collect::<String>()
        );
        if crate::webmcp::server_id(client).is_none() {
            report.problem(
                &field,
                "a client id is 1 to 64 of A-Z, a-z, 0-9, `_`, `.`, `-`",
            );
            continue;
        }
        let shaped = (1..=32 - WEBMCP_PREFIX.len()).contains(&name.len())
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        let Some(id) = shaped
            .then(|| crate::config::ServerId::new(&format!("{WEBMCP_PREFIX}{name}")))
            .flatten()
        else {
            report.problem(&field, "a name is 1 to 25 of a-z, 0-9 and `-`");
            continue;
        };
        if out.iter().any(|(_, taken)| *taken == id) {
            report.problem(&field, "another client id has this name");
            continue;
        }
        out.push((client.clone(), id));
    }
    out
}

/// `webmcp-<name>.<tool>` ids, each as written.
fn tool_ids(items: Option<&[String]>, field: &str, report: &mut Report) -> Vec<String> {
    let mut out = Vec::new();
    for (i, item) in items.unwrap_or_default().iter().enumerate() {
        let valid = item.split_once('.').is_some_and(|(server, tool)| {
            server.starts_with(WEBMCP_PREFIX)
                && crate::config::ServerId::new(server).is_some()
                && crate::webmcp::valid_tool_name(tool)
        });
        if valid {
            out.push(item.clone());
        } else {
            report.problem(
                format!("webmcp.{field}[{i}]"),
                format!(
                    "must be a page tool's id, `{WEBMCP_PREFIX}<name>.<tool>` (such as \
                     `{WEBMCP_PREFIX}editor.get_block`)"
                ),
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (WebMcpConfig, Vec<String>) {
        let raw: RawWebMcp = toml::from_str(text).expect("parses");
        let mut report = Report::default();
        let config = section(&raw, &mut report);
        let problems = match report.finish() {
            Ok(_) => Vec::new(),
            Err(err) => err.problems.iter().map(|p| p.path.clone()).collect(),
        };
        (config, problems)
    }

    #[test]
    fn off_by_default_and_origins_exact() {
        let (config, problems) = parse("");
        assert!(problems.is_empty());
        assert!(!config.enabled());
        let (config, problems) = parse(
            r#"allowed_origins = ["https://Editor.Example.com", "*"]
               read_only_tools = ["webmcp-editor.get_block", "editor.get_block"]
               visible_to = "everyone"
               heartbeat = "10s"
               heartbeat_timeout = "5s""#,
        );
        assert_eq!(config.allowed_origins, ["https://editor.example.com"]);
        assert_eq!(config.read_only_tools, ["webmcp-editor.get_block"]);
        for field in [
            "webmcp.allowed_origins[1]",
            "webmcp.read_only_tools[1]",
            "webmcp.visible_to",
            "webmcp.heartbeat_timeout",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(field)),
                "{field} not reported in {problems:?}"
            );
        }
    }

    #[test]
    fn names_are_valid_and_each_clients_own() {
        let (config, problems) = parse(
            r#"[names]
               "com.example.editor" = "editor"
               "com.example.other" = "editor"
               "bad id!" = "x"
               "notes" = "Notes_1""#,
        );
        assert_eq!(config.names.len(), 1);
        assert_eq!(config.names[0].0, "com.example.editor");
        assert_eq!(config.names[0].1.as_str(), "webmcp-editor");
        for field in [
            "webmcp.names.com.example.other",
            "webmcp.names.bad id!",
            "webmcp.names.notes",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(field)),
                "{field} not reported in {problems:?}"
            );
        }
    }
}
