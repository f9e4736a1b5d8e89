//! `mcpgate pin [--check]`, `mcpgate audit` filters and `mcpgate call --yes`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{STATE_DB, audit, config_dir, demo_config, mcpgate, summary, toml_str, write_config};
use crate::support::mcpgate_bin;

#[tokio::test]
async fn pin_writes_the_lock_file_next_to_the_config_and_check_names_changed_tools() {
    let root = tempfile::tempdir().expect("temp dir");
    let config = demo_config(root.path());
    let lock = config_dir(&config).join("mcpgate.lock");
    let gate = |args: &'static [&'static str]| mcpgate(&config, &[], args);

    let run = gate(&["pin", "--check"]).await;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.contains("no pin file"), "{run:?}");

    let run = gate(&["pin"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("pinned 6 tool(s)"), "{run:?}");
    let pins = std::fs::read_to_string(&lock).expect("the pin file is next to the config");
    assert!(
        !root.path().join("mcpgate.lock").exists(),
        "not in the working folder"
    );
    let tools = gate(&["tools", "--json"]).await;
    let listing: Value = serde_json::from_str(&tools.stdout).expect("tools JSON");
    let echo_fingerprint = listing["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "demo.echo")
        .and_then(|t| t["fingerprint"].as_str())
        .expect("demo.echo has a fingerprint")
        .to_owned();
    assert!(
        pins.contains(&format!("\"echo\" = \"{echo_fingerprint}\"")),
        "{pins}"
    );

    let run = gate(&["pin", "--check"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(run.stdout.contains("every tool matches its pin"), "{run:?}");

    let wrong = "0".repeat(echo_fingerprint.len());
    // The pin moved (the definition kept beside it stays as reviewed).
    let edited = pins.replace(
        &format!("\"echo\" = \"{echo_fingerprint}\""),
        &format!("\"echo\" = \"{wrong}\""),
    );
    std::fs::write(&lock, edited).expect("pin file edited");
    let run = gate(&["pin", "--check"]).await;
    assert_eq!(run.code, Some(1), "{run:?}");
    let report: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(report.len(), 1, "{run:?}");
    assert!(
        report[0].starts_with("changed") && report[0].contains("demo.echo"),
        "{run:?}"
    );
    // The gateway audited the drift it saw, as itself.
    let records = audit(&config, &["--user", "mcpgate", "--tool", "demo.echo"]).await;
    assert!(
        records
            .iter()
            .any(|r| r["decision"] == "observed" && r["outcome"] == "definition_changed"),
        "{records:#?}"
    );

    // Accepting the one changed tool: its pin alone is rewritten, and the audit says who.
    let run = gate(&["pin", "--tool", "demo.echo"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert!(
        run.stdout
            .contains(&format!("pinned demo.echo at {}", &echo_fingerprint[..12]))
            && run.stdout.contains("was 000000000000"),
        "{run:?}"
    );
    let run = gate(&["pin", "--check"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let accepted = audit(&config, &["--tool", "demo.echo", "--outcome", "pinned"]).await;
    assert_eq!(accepted.len(), 1, "{accepted:#?}");
    assert_eq!(accepted[0]["decision"], "accepted", "{accepted:#?}");
    assert_eq!(accepted[0]["fingerprint"], echo_fingerprint.as_str());
    assert_ne!(
        accepted[0]["user"], "mcpgate",
        "the person, not the gateway"
    );
    let run = gate(&["pin", "--tool", "demo.nope"]).await;
    assert_eq!(run.code, Some(2), "{run:?}");

    let run = gate(&["pin"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let run = gate(&["pin", "--check"]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
}

#[tokio::test]
async fn call_yes_runs_a_write_and_the_audit_shows_who_approved_it() {
    let root = tempfile::tempdir().expect("temp dir");
    let config = demo_config(root.path());
    let note = json!({ "title": "t1", "body": "b" }).to_string();

    let run = mcpgate(
        &config,
        &[("USER", "alice")],
        &["call", "demo.add_note", &note, "--yes"],
    )
    .await;
    assert_eq!(run.code, Some(0), "{run:?}");
    assert_eq!(run.stdout.trim(), "Saved note `t1`.");
    let echo = json!({ "message": "hi" }).to_string();
    let run = mcpgate(&config, &[("USER", "alice")], &["call", "demo.echo", &echo]).await;
    assert_eq!(run.code, Some(0), "{run:?}");

    let run = mcpgate(
        &config,
        &[("USER", "bob")],
        &["call", "demo.add_note", &note],
    )
    .await;
    assert_eq!(run.code, Some(1), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
    assert!(
        run.messages()
            .contains("not approved: demo.add_note was not run"),
        "{run:?}"
    );

    let approved = audit(&config, &["--tool", "demo.add_note", "--user", "alice"]).await;
    let steps: Vec<(&str, &str)> = approved
        .iter()
        .map(|r| {
            (
                r["decision"].as_str().unwrap_or_default(),
                r["outcome"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("pending", "confirmation_required"),
            ("approved", "ok"),
            ("allowed", "ok")
        ],
        "{approved:#?}"
    );
    let confirmation = approved[0]["confirmationId"].as_str().expect("an id");
    for record in &approved {
        assert_eq!(record["confirmationId"], confirmation, "{approved:#?}");
        assert_eq!(record["user"], "alice");
        assert_eq!(record["tool"], "demo.add_note");
    }

    let refused = audit(&config, &["--tool", "demo.add_note", "--user", "bob"]).await;
    assert_eq!(
        summary(&refused),
        [
            (
                "demo.add_note".to_owned(),
                "denied".to_owned(),
                "ok".to_owned()
            ),
            (
                "demo.add_note".to_owned(),
                "pending".to_owned(),
                "confirmation_required".to_owned()
            ),
        ],
        "{refused:#?}"
    );
    assert_ne!(refused[0]["confirmationId"], confirmation);
    assert_eq!(refused[0]["confirmationId"], refused[1]["confirmationId"]);

    let alice = audit(&config, &["--user", "alice"]).await;
    assert_eq!(alice.len(), 4, "{alice:#?}");
    assert!(alice.iter().any(|r| r["tool"] == "demo.echo"
        && r["decision"] == "allowed"
        && r["confirmationId"].is_null()));
    assert!(audit(&config, &["--user", "carol"]).await.is_empty());
}

/// A config whose `[audit]` names `logged` (canonical ids) for argument recording, with the
/// demo server twice: `demo` with its read tools listed, `plain` with `confirm = "none"`.
fn logging_config(root: &Path, logged: &[&str]) -> PathBuf {
    let bin = toml_str(&mcpgate_bin().to_string_lossy());
    let logged: Vec<String> = logged.iter().map(|id| toml_str(id)).collect();
    write_config(
        root,
        &format!(
            r#"
{sandbox}
[state]
database = "{STATE_DB}"

[audit]
log_arguments_for = [{logged}]

[servers.demo]
command = {bin}
args = ["demo-server"]
read_only_tools = ["echo", "add"]

[servers.plain]
command = {bin}
args = ["demo-server"]
confirm = "none"
"#,
            logged = logged.join(", "),
            sandbox = crate::support::sandbox_section(&[], &[]),
        ),
    )
}

#[tokio::test]
async fn arguments_are_recorded_only_for_the_read_tools_named_for_it() {
    let root = tempfile::tempdir().expect("temp dir");
    let config = logging_config(root.path(), &["demo.echo"]);
    let echo = json!({ "message": "hi" }).to_string();
    let run = mcpgate(&config, &[], &["call", "demo.echo", &echo]).await;
    assert_eq!(run.code, Some(0), "{run:?}");
    let add = json!({ "a": 1, "b": 2 }).to_string();
    let run = mcpgate(&config, &[], &["call", "demo.add", &add]).await;
    assert_eq!(run.code, Some(0), "{run:?}");

    let echoed = audit(&config, &["--tool", "demo.echo"]).await;
    assert_eq!(echoed.len(), 1, "{echoed:#?}");
    assert_eq!(echoed[0]["arguments"], r#"{"message":"hi"}"#);
    let added = audit(&config, &["--tool", "demo.add"]).await;
    assert_eq!(added.len(), 1, "{added:#?}");
    assert!(added[0]["arguments"].is_null(), "{added:#?}");
    assert_eq!(added[0]["argumentBytes"], add.len());
}

/// `log_arguments_for` names read tools: `confirm = "none"` alone does not make a tool a read
/// (the gate records arguments only for tools classified as reads), so `config check` refuses
/// a tool that is not in `read_only_tools` rather than accept an entry that would never apply.
#[tokio::test]
async fn log_arguments_for_refuses_tools_not_known_to_read() {
    let root = tempfile::tempdir().expect("temp dir");
    let config = logging_config(root.path(), &["plain.echo"]);
    let run = mcpgate(&config, &[], &["config", "check"]).await;
    assert_eq!(run.code, Some(2), "the entry is refused: {run:?}");
    assert!(
        run.messages().contains("audit.log_arguments_for"),
        "{run:?}"
    );
}
