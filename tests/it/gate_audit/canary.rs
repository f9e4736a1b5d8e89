//! Canary strings in headers, environment secrets, arguments and results never reach the
//! audit store, the logs or error bodies, on success, error, timeout and denial paths.

use std::path::Path;

use serde_json::{Value, json};

use super::{STATE_DB, audit, canary, config_dir, mcpgate, summary, toml_str, write_config};
use crate::support::{everything_http, everything_js, free_port, mcpgate_bin};

/// Every byte SQLite keeps for the state file (main file, WAL, shared memory), so rows that
/// were written and deleted, or not yet checkpointed, are searched too.
fn state_bytes(dir: &Path) -> Vec<u8> {
    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir).expect("temp dir readable") {
        let path = entry.expect("dir entry").path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with(STATE_DB) {
            bytes.extend(std::fs::read(&path).expect("state file readable"));
        }
    }
    bytes
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// The canary config: an HTTP upstream with a secret header, stdio upstreams with a secret
/// in their environment, tiny per-tool timeouts, and two upstreams that fail to connect
/// while holding the same secrets.
fn canary_config(web_port: u16) -> String {
    let bin = toml_str(&mcpgate_bin().to_string_lossy());
    let everything = toml_str(&everything_js());
    let down_port = free_port();
    let sandbox = crate::support::sandbox_section(&[&crate::support::peers()], &[]);
    format!(
        r#"
{sandbox}
[state]
database = "{STATE_DB}"

[servers.web]
url = "http://127.0.0.1:{web_port}/mcp"
transport = "streamable-http"
allow_private = true
allow_http = true
confirm = "none"
headers = {{ X-Api-Key = "${{CANARY_HEADER}}" }}

[servers.web.tool_timeouts]
trigger-long-running-operation = "300ms"

[servers.demo]
command = {bin}
args = ["demo-server"]
env = {{ API_TOKEN = "${{CANARY_ENV}}" }}
read_only_tools = ["echo", "add", "time_now", "list_notes"]

[servers.slow]
command = {bin}
args = ["fixture", "slow"]
env = {{ API_TOKEN = "${{CANARY_ENV}}" }}
read_only_tools = ["sleep", "sleep_stats", "echo"]

[servers.slow.tool_timeouts]
sleep = "300ms"

# server-everything's get-env shows that the secret really reaches the child.
[servers.local]
command = "node"
args = [{everything}, "stdio"]
env = {{ API_TOKEN = "${{CANARY_ENV}}" }}
confirm = "none"

[servers.down]
url = "http://127.0.0.1:{down_port}/mcp"
transport = "streamable-http"
allow_private = true
allow_http = true
connect_timeout = "5s"
headers = {{ X-Api-Key = "${{CANARY_HEADER}}" }}

[servers.broken]
command = "/nonexistent/mcp-server"
env = {{ API_TOKEN = "${{CANARY_ENV}}" }}
"#
    )
}

/// One call of the canary test and what its caller must be shown.
struct Case {
    args: Vec<String>,
    code: i32,
    /// Text the caller must see: on stdout for a success, in the message otherwise.
    shown: String,
    /// The one canary the caller may legitimately see again: the echo's own output, or a
    /// tool's error text quoting the argument it refused.
    may_show: Option<String>,
}

fn case(tool: &str, arguments: Value, extra: &[&str], code: i32, shown: &str) -> Case {
    let mut args = vec!["call".to_owned(), tool.to_owned(), arguments.to_string()];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Case {
        args,
        code,
        shown: shown.to_owned(),
        may_show: None,
    }
}

impl Case {
    fn may_show(mut self, canary: &str) -> Case {
        self.may_show = Some(canary.to_owned());
        self
    }
}

#[tokio::test]
async fn canaries_never_reach_the_audit_store_logs_or_error_bodies() {
    let peer = everything_http("streamableHttp").await;
    let root = tempfile::tempdir().expect("temp dir");
    let config = write_config(root.path(), &canary_config(peer.port));
    let header = canary("hdr");
    let env_secret = canary("env");
    let user = "canary-tester";
    let process_env = [
        ("CANARY_HEADER", header.as_str()),
        ("CANARY_ENV", env_secret.as_str()),
        ("USER", user),
    ];
    let [echo, zone, write, timeout, denied, unknown, invalid] = [
        "echo", "zone", "write", "timeout", "denied", "unknown", "invalid",
    ]
    .map(canary);
    // Over the demo's 256-byte title limit, so the tool refuses it without quoting it.
    let long_title = format!("{write}{}", "x".repeat(300));
    let cases = [
        // Successes: over HTTP with the secret header; over stdio, where the secret
        // environment variable arrived.
        case(
            "web.echo",
            json!({ "message": echo }),
            &[],
            0,
            &format!("Echo: {echo}"),
        )
        .may_show(&echo),
        case("local.get-env", json!({}), &[], 0, &env_secret).may_show(&env_secret),
        // A tool error whose text quotes the refused argument: the tool's own answer.
        case(
            "demo.time_now",
            json!({ "timezone": zone }),
            &[],
            1,
            &format!("error[tool_error]: the tool reported an error: time zone `{zone}`"),
        )
        .may_show(&zone),
        // An approved write that the tool refuses.
        case(
            "demo.add_note",
            json!({ "title": long_title, "body": "b" }),
            &["--yes"],
            1,
            "error[tool_error]",
        ),
        // Timeouts over HTTP (the canary in an extra argument its schema allows) and over
        // stdio (`sleep` takes no extra argument; the environment secret is there).
        case(
            "web.trigger-long-running-operation",
            json!({ "duration": 10, "steps": 1, "note": timeout }),
            &[],
            1,
            "error[timeout]",
        ),
        case(
            "slow.sleep",
            json!({ "ms": 60_000 }),
            &[],
            1,
            "error[timeout]",
        ),
        // A write not approved: no --yes and no terminal.
        case(
            "demo.add_note",
            json!({ "title": "t", "body": denied }),
            &[],
            1,
            "not approved: demo.add_note was not run",
        ),
        case(
            "web.no-such-tool",
            json!({ "x": unknown }),
            &[],
            1,
            "error[not_found]: unknown tool `web.no-such-tool`",
        ),
        // The schema refusal quotes short values back to the caller; see
        // `invalid_argument_errors_do_not_echo_short_argument_values`.
        case(
            "demo.add",
            json!({ "a": 1, "b": invalid }),
            &[],
            1,
            "error[invalid_arguments]",
        )
        .may_show(&invalid),
    ];

    let every_canary = [
        &header,
        &env_secret,
        &echo,
        &zone,
        &write,
        &timeout,
        &denied,
        &unknown,
        &invalid,
    ];
    for case in &cases {
        let args: Vec<&str> = case.args.iter().map(String::as_str).collect();
        let run = mcpgate(&config, &process_env, &args).await;
        assert_eq!(run.code, Some(case.code), "{args:?}: {run:?}");
        let caller_sees = if case.code == 0 {
            run.stdout.clone()
        } else {
            run.messages()
        };
        assert!(caller_sees.contains(&case.shown), "{args:?}: {run:?}");
        assert!(!run.logs.is_empty(), "{args:?}: trace logging is on");
        for secret in every_canary {
            for line in &run.logs {
                assert!(
                    !line.contains(secret.as_str()),
                    "{args:?} logged {secret}: {line}"
                );
            }
            if case.may_show.as_ref() != Some(secret) {
                assert!(!run.stdout.contains(secret.as_str()), "{args:?}: {run:?}");
                assert!(
                    !run.messages().contains(secret.as_str()),
                    "{args:?}: {run:?}"
                );
            }
        }
    }

    let records = audit(&config, &["--user", user]).await;
    let row = |tool: &str, decision: &str, outcome: &str| {
        (tool.to_owned(), decision.to_owned(), outcome.to_owned())
    };
    let mut expected = vec![
        row("web.echo", "allowed", "ok"),
        row("local.get-env", "allowed", "ok"),
        row("demo.time_now", "allowed", "tool_error"),
        row("demo.add_note", "pending", "confirmation_required"),
        row("demo.add_note", "approved", "ok"),
        row("demo.add_note", "allowed", "tool_error"),
        row("web.trigger-long-running-operation", "allowed", "timeout"),
        row("slow.sleep", "allowed", "timeout"),
        row("demo.add_note", "pending", "confirmation_required"),
        row("demo.add_note", "denied", "ok"),
        row("web.no-such-tool", "denied", "not_found"),
        row("demo.add", "denied", "invalid_arguments"),
    ];
    expected.sort();
    assert_eq!(summary(&records), expected, "{records:#?}");

    let state = state_bytes(config_dir(&config));
    assert!(
        contains(&state, "web.trigger-long-running-operation"),
        "the audit log lives in {STATE_DB}"
    );
    for secret in every_canary {
        assert!(!contains(&state, secret), "{secret} is in the state file");
    }
}

/// The acceptance rule says argument canaries never appear in error bodies; a schema refusal
/// quotes values of up to 40 characters (src/policy/arguments/schema.rs), which covers many
/// real API keys.
#[tokio::test]
async fn invalid_argument_errors_do_not_echo_short_argument_values() {
    let root = tempfile::tempdir().expect("temp dir");
    let bin = toml_str(&mcpgate_bin().to_string_lossy());
    let config = write_config(
        root.path(),
        &format!(
            "{sandbox}[state]\ndatabase = \"memory\"\n\n[servers.demo]\ncommand = {bin}\nargs = [\"demo-server\"]\nread_only_tools = [\"add\"]\n",
            sandbox = crate::support::sandbox_section(&[], &[])
        ),
    );
    let secret = canary("key");
    let arguments = json!({ "a": 1, "b": secret }).to_string();
    let run = mcpgate(&config, &[], &["call", "demo.add", &arguments]).await;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(
        run.messages().contains("error[invalid_arguments]"),
        "{run:?}"
    );
    assert!(!run.messages().contains(&secret), "{run:?}");
}
