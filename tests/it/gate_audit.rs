//! The audit trail through the real `mcpgate` binary: secrets and call contents never reach
//! the audit store, the logs or error bodies, while every attempt is still recorded; and the
//! `pin`, `audit` and `call --yes` commands. Shared helpers here; one submodule per theme.

mod canary;
mod commands;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use mcpgate::digest::random_hex;
use serde_json::Value;
use tokio::process::Command;

use crate::support::mcpgate_bin;

/// Longest one `mcpgate` run may take: it waits up to connect + list timeouts (40 s by
/// default) for its servers' first try, and the machine running the tests is busy.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Random bytes in a canary: unique per test run, short enough to pass as a real API key.
const CANARY_BYTES: usize = 12;

/// The state file every test config names, next to the config.
const STATE_DB: &str = "state.db";

/// What one `mcpgate` run printed, with its stderr split into log lines (JSON, from
/// `--log-json`) and the command's own messages to the caller (everything else).
#[derive(Debug)]
struct Run {
    code: Option<i32>,
    stdout: String,
    logs: Vec<String>,
    messages: Vec<String>,
}

impl Run {
    fn messages(&self) -> String {
        self.messages.join("\n")
    }
}

/// Runs `mcpgate --config <config> --log trace --log-json <args>` with `env` added to this
/// process's environment, stdin not a terminal, from the folder above the config's, so
/// files that belong next to the config are not found by accident in the working folder.
async fn mcpgate(config: &Path, env: &[(&str, &str)], args: &[&str]) -> Run {
    let cwd = config_dir(config)
        .parent()
        .expect("the config folder is in the test folder");
    let child = Command::new(mcpgate_bin())
        .current_dir(cwd)
        .arg("--config")
        .arg(config)
        .args(["--log", "trace", "--log-json"])
        .args(args)
        .envs(env.iter().copied())
        .env_remove("MCPGATE_LOG")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(RUN_TIMEOUT, child)
        .await
        .unwrap_or_else(|_| panic!("mcpgate {args:?} did not finish"))
        .expect("mcpgate runs");
    let (logs, messages) = String::from_utf8_lossy(&out.stderr)
        .lines()
        .map(str::to_owned)
        .partition(|line| serde_json::from_str::<Value>(line).is_ok_and(|v| v.is_object()));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        logs,
        messages,
    }
}

/// `mcpgate audit --json` with `filters`, oldest record first.
async fn audit(config: &Path, filters: &[&str]) -> Vec<Value> {
    let mut args = vec!["audit", "--json", "--limit", "1000"];
    args.extend_from_slice(filters);
    let run = mcpgate(config, &[], &args).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let mut records: Vec<Value> = run
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("audit lines are JSON"))
        .collect();
    records.sort_by_key(|r| r["id"].as_i64());
    records
}

/// `(tool, decision, outcome)` of each record, sorted.
fn summary(records: &[Value]) -> Vec<(String, String, String)> {
    let mut rows: Vec<_> = records
        .iter()
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (field("tool"), field("decision"), field("outcome"))
        })
        .collect();
    rows.sort();
    rows
}

fn canary(label: &str) -> String {
    format!("{label}{}", random_hex(CANARY_BYTES))
}

/// A TOML basic string holding `text`.
fn toml_str(text: &str) -> String {
    toml::Value::String(text.to_owned()).to_string()
}

/// Writes `root/etc/mcpgate.toml`.
fn write_config(root: &Path, text: &str) -> PathBuf {
    let etc = root.join("etc");
    std::fs::create_dir(&etc).expect("config folder created");
    let path = etc.join("mcpgate.toml");
    std::fs::write(&path, text).expect("config written");
    path
}

fn config_dir(config: &Path) -> &Path {
    config.parent().expect("the config is in a folder")
}

/// A config with the demo server (writes confirmed) and the state file next to it.
fn demo_config(root: &Path) -> PathBuf {
    let bin = toml_str(&mcpgate_bin().to_string_lossy());
    write_config(
        root,
        &format!(
            "{sandbox}[state]\ndatabase = \"{STATE_DB}\"\n\n[servers.demo]\ncommand = {bin}\nargs = [\"demo-server\"]\nread_only_tools = [\"echo\", \"add\", \"time_now\", \"list_notes\"]\n",
            sandbox = crate::support::sandbox_section(&[], &[])
        ),
    )
}
