//! `mcpgate chat` as a process against the scripted model and real upstreams (the demo
//! server and the `slow` fixture): line output, `--json` events, approvals refused without
//! a terminal or given by `--yes`, and, in a pseudo-terminal (util-linux `script`), the
//! spinner and the y/N question.

use std::{path::Path, process::Stdio, time::Instant};

use serde_json::{Value, json};
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    process::Command,
};

use crate::{
    scripted_llm::{Reply, ScriptedLlm},
    support::{WAIT, mcpgate_bin},
};

/// A configuration with the demo server (writes confirmed) and the `slow` fixture.
fn write_config(dir: &Path) -> std::path::PathBuf {
    let bin = mcpgate_bin();
    let bin = bin.to_string_lossy();
    let sandbox = crate::support::sandbox_section(&[], &[]);
    let path = dir.join("mcpgate.toml");
    std::fs::write(
        &path,
        format!(
            r#"
{sandbox}
[state]
database = "memory"

[servers.demo]
command = "{bin}"
args = ["demo-server"]
read_only_tools = ["echo", "add", "time_now", "list_notes"]

[servers.slow]
command = "{bin}"
args = ["fixture", "slow"]
confirm = "none"
"#
        ),
    )
    .expect("config written");
    path
}

/// `mcpgate --config <file> chat ARGS` with the scripted model in its environment.
fn chat(dir: &Path, llm: &ScriptedLlm, args: &[&str]) -> Command {
    let mut command = Command::new(mcpgate_bin());
    command
        .current_dir(dir)
        .arg("--config")
        .arg(write_config(dir))
        .arg("chat")
        .args(args)
        .env("OPENAI_BASE_URL", llm.base_url().as_str())
        .env("MCPGATE_MODEL", "scripted")
        .env_remove("OPENAI_API_KEY")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

struct Run {
    success: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

async fn run(mut command: Command) -> Run {
    let output = tokio::time::timeout(WAIT, command.output())
        .await
        .expect("mcpgate chat ended in time")
        .expect("mcpgate runs");
    Run {
        success: output.status.success(),
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn add_note() -> (&'static str, Value) {
    (
        "demo_add_note",
        json!({ "title": "cli", "body": "from the terminal" }),
    )
}

#[tokio::test]
async fn the_answer_and_each_tool_call_are_printed() {
    let llm = ScriptedLlm::start(vec![
        Reply::tool_calls(&[("demo_echo", json!({ "message": "cli" })), add_note()]),
        Reply::text("Echoed and saved."),
    ])
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(chat(dir.path(), &llm, &["--yes", "echo and save"])).await;
    assert!(out.success, "{}\n{}", out.stdout, out.stderr);
    for expected in [
        r#"→ demo.echo {"message":"cli"}"#,
        "✓ demo.echo (",
        "Echo: cli",
        "→ demo.add_note",
        "Saved note `cli`.",
        "Echoed and saved.",
    ] {
        assert!(
            out.stdout.contains(expected),
            "{expected} in:\n{}",
            out.stdout
        );
    }
    assert!(
        !out.stdout.contains('\u{1b}'),
        "no terminal, no escapes: {}",
        out.stdout
    );
    let question = &llm.requests()[0]["messages"][1];
    assert_eq!(question["content"], "echo and save");
}

#[tokio::test]
async fn without_a_terminal_approvals_are_refused() {
    let llm = ScriptedLlm::start(vec![
        Reply::tool_calls(&[add_note()]),
        Reply::text("It was not saved."),
    ])
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(chat(dir.path(), &llm, &["save a note"])).await;
    assert!(out.success, "{}\n{}", out.stdout, out.stderr);
    assert!(
        out.stderr.contains(
            "not approved: demo.add_note needs approval and standard input is not a terminal"
        ),
        "{}",
        out.stderr
    );
    assert!(
        out.stdout.contains("✗ demo.add_note") && out.stdout.contains("error[denied_by_user]"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("It was not saved."), "{}", out.stdout);
}

#[tokio::test]
async fn json_prints_every_event_as_a_line() {
    let llm = ScriptedLlm::start(vec![
        Reply::tool_calls(&[("slow_echo", json!({ "message": "json" }))]),
        Reply::text("ok"),
    ])
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(chat(
        dir.path(),
        &llm,
        &["--json", "--tool-choice", "slow_echo", "echo"],
    ))
    .await;
    assert!(out.success, "{}", out.stderr);
    let events: Vec<Value> = out
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(types.first(), Some(&"round_start"));
    assert_eq!(types.last(), Some(&"done"));
    for expected in ["tool_call", "tool_result", "final"] {
        assert!(types.contains(&expected), "{types:?}");
    }
    assert_eq!(
        llm.requests()[0]["tool_choice"],
        json!({ "type": "function", "function": { "name": "slow_echo" } }),
        "--tool-choice forces the first round"
    );
    assert_eq!(llm.requests()[1]["tool_choice"], "auto");
}

#[tokio::test]
async fn failures_have_exit_codes() {
    let llm = ScriptedLlm::start(vec![Reply::status(
        400,
        r#"{"error":{"message":"no such model"}}"#,
    )])
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(chat(dir.path(), &llm, &["hi"])).await;
    assert_eq!(out.code, Some(1), "{}", out.stderr);
    assert!(out.stderr.contains("error[llm_status]"), "{}", out.stderr);

    let mut command = chat(dir.path(), &llm, &["hi"]);
    command
        .env_remove("MCPGATE_MODEL")
        .env_remove("OPENAI_BASE_URL");
    let out = run(command).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("no model is configured"),
        "{}",
        out.stderr
    );
}

#[tokio::test]
async fn server_offers_only_the_servers_named() {
    let llm = ScriptedLlm::start(vec![Reply::text("ok")]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(chat(dir.path(), &llm, &["--server", "slow", "hi"])).await;
    assert!(out.success, "{}", out.stderr);
    let offered = llm.requests()[0]["tools"].to_string();
    assert!(
        offered.contains("slow_echo") && !offered.contains("demo_"),
        "{offered}"
    );

    let out = run(chat(dir.path(), &llm, &["--server", "nope", "hi"])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("no server `nope` is available to you"),
        "{}",
        out.stderr
    );
    assert_eq!(llm.requests().len(), 1, "no turn started");
}

/// `--model` names one of `[[llm.models]]`; without it the default, which has no tools, so
/// the turn (it offers tools) goes to the tools model, with a note saying so.
#[tokio::test]
async fn model_picks_one_of_several_and_a_turn_with_tools_goes_to_the_tools_model() {
    let writer = ScriptedLlm::start(vec![]).await;
    let tools = ScriptedLlm::start(vec![Reply::text("routed"), Reply::text("named")]).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path());
    let mut text = std::fs::read_to_string(&config).expect("config");
    text.push_str(&format!(
        r#"
[llm]
default = "writer"
[[llm.models]]
name = "writer"
base_url = "{}"
tools = false
[[llm.models]]
name = "tools"
base_url = "{}"
"#,
        writer.base_url(),
        tools.base_url()
    ));
    std::fs::write(&config, text).expect("config written");
    let chat = |args: &[&str]| {
        let mut command = Command::new(mcpgate_bin());
        command
            .current_dir(dir.path())
            .arg("--config")
            .arg(&config)
            .arg("chat")
            .args(args)
            .env_remove("MCPGATE_MODEL")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("OPENAI_API_KEY")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        command
    };
    let out = run(chat(&["hi"])).await;
    assert!(out.success, "{}", out.stderr);
    assert!(out.stdout.contains("routed"), "{}", out.stdout);
    assert!(
        out.stderr.contains("writer has no tools; tools answers"),
        "{}",
        out.stderr
    );
    let out = run(chat(&["--model", "tools", "hi"])).await;
    assert!(out.success, "{}", out.stderr);
    assert!(out.stdout.contains("named"), "{}", out.stdout);
    assert!(!out.stderr.contains("has no tools"), "{}", out.stderr);

    let out = run(chat(&["--model", "huge", "hi"])).await;
    assert_eq!(out.code, Some(2), "{}", out.stderr);
    assert!(
        out.stderr.contains("\"huge\" is not available") && out.stderr.contains("writer, tools"),
        "{}",
        out.stderr
    );
    assert!(writer.requests().is_empty());
    assert_eq!(tools.requests().len(), 2);
}

/// Single-quoted for `sh`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[tokio::test]
async fn at_a_terminal_a_spinner_runs_and_approvals_are_asked() {
    let llm = ScriptedLlm::start(vec![
        Reply::tool_calls(&[("slow_sleep", json!({ "ms": 3000 })), add_note()]),
        Reply::text("Slept and saved."),
    ])
    .await;
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path());
    let line = [
        mcpgate_bin().to_string_lossy().as_ref(),
        "--config",
        config.to_string_lossy().as_ref(),
        "chat",
        "sleep and save",
    ]
    .map(quoted)
    .join(" ");
    // `script` runs the command in a new pseudo-terminal and copies our input into it.
    let mut child = Command::new("script")
        .args([
            "--quiet",
            "--flush",
            "--return",
            "--command",
            &line,
            "/dev/null",
        ])
        .current_dir(dir.path())
        .env("OPENAI_BASE_URL", llm.base_url().as_str())
        .env("MCPGATE_MODEL", "scripted")
        .env("TERM", "xterm")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("script runs");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut seen = String::new();
    let start = Instant::now();
    let mut buffer = [0u8; 4096];
    let mut answered = false;
    loop {
        let read = tokio::time::timeout(WAIT, stdout.read(&mut buffer))
            .await
            .unwrap_or_else(|_| panic!("no output in time; so far:\n{seen}"))
            .expect("reads");
        if read == 0 {
            break;
        }
        seen.push_str(&String::from_utf8_lossy(&buffer[..read]));
        if !answered && seen.contains("Run it? [y/N]") {
            stdin.write_all(b"y\n").await.expect("answer written");
            stdin.flush().await.expect("flushed");
            answered = true;
        }
        assert!(start.elapsed() < WAIT, "still running:\n{seen}");
    }
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("exits")
        .expect("status");
    assert!(status.success(), "{seen}");
    assert!(answered, "the question was asked: {seen}");
    assert!(seen.contains("demo.add_note needs your approval"), "{seen}");
    assert!(seen.contains("Saved note `cli`."), "{seen}");
    assert!(seen.contains("✓ slow.sleep"), "{seen}");
    let spinner = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏']
        .iter()
        .any(|frame| seen.contains(&format!("\u{1b}[2K{frame} slow.sleep")));
    assert!(spinner, "a spinner line while the sleep runs: {seen:?}");
    assert!(seen.contains("Slept and saved."), "{seen}");
}
