//! Tests of loading configuration from every source: TOML, `mcpServers` JSON, the embedded
//! default, and the `EXTERNAL_MCP_*` environment on top.

use std::{path::PathBuf, time::Duration};

use tempfile::TempDir;

use super::*;
use crate::config::{
    AccessConfig, CallLimits, Confirm, ConfirmationConfig, Grant, HttpKind, OnChange, Operator,
    PinsConfig, ScanMode, ServerConfig, ServerId, TenantAccess, TransportConfig,
};

const EXE: &str = "/opt/mcpgate/bin/mcpgate";

fn env(pairs: &[(&str, &str)]) -> Env {
    Env::from_pairs(pairs.iter().copied())
}

/// Writes `text` as `name` in a fresh directory and loads it with `--config name`.
fn load_file(name: &str, text: &str, env: &Env) -> Result<Loaded, ConfigError> {
    let dir = TempDir::new().expect("temp dir");
    std::fs::write(dir.path().join(name), text).expect("write config");
    load(Some(Path::new(name)), dir.path(), env, Path::new(EXE))
}

fn load_env(env: &Env) -> Result<Loaded, ConfigError> {
    let dir = TempDir::new().expect("temp dir");
    load(None, dir.path(), env, Path::new(EXE))
}

/// Every problem of a TOML file, as `path: message`.
fn problems(text: &str) -> Vec<String> {
    let err = load_file("c.toml", text, &Env::default()).expect_err("invalid");
    err.problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect()
}

fn paths(err: &ConfigError) -> Vec<&str> {
    err.problems.iter().map(|p| p.path.as_str()).collect()
}

fn ids(loaded: &Loaded) -> Vec<&str> {
    loaded
        .config
        .servers
        .iter()
        .map(|s| s.id.as_str())
        .collect()
}

fn server<'a>(loaded: &'a Loaded, id: &str) -> &'a ServerConfig {
    loaded
        .config
        .servers
        .iter()
        .find(|s| s.id.as_str() == id)
        .expect("server present")
}

/// The TOML example of `raw.rs`'s documentation, so the README copy is known to load.
fn documented_example() -> String {
    let source = include_str!("../raw.rs");
    let start = source.find("//! ```toml\n").expect("example start") + "//! ```toml\n".len();
    let len = source[start..].find("//! ```\n").expect("example end");
    source[start..start + len]
        .lines()
        .map(|l| {
            l.strip_prefix("//! ")
                .or(l.strip_prefix("//!"))
                .unwrap_or(l)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn without_file_or_env_the_embedded_demo_runs_from_this_binary() {
    let loaded = load_env(&Env::default()).expect("loads");
    assert_eq!(loaded.source, ConfigSource::Embedded);
    assert_eq!(ids(&loaded), ["demo"]);
    assert_eq!(
        server(&loaded, "demo").source,
        crate::config::ServerSource::Default
    );
    let TransportConfig::Stdio(stdio) = &server(&loaded, "demo").transport else {
        panic!("demo is stdio");
    };
    assert_eq!(stdio.command, EXE);
    assert!(loaded.warnings.is_empty());
}

#[test]
fn mcpgate_toml_in_the_working_directory_is_found() {
    let dir = TempDir::new().expect("temp dir");
    let file = dir.path().join("mcpgate.toml");
    std::fs::write(&file, "[servers.time]\ncommand = \"mcp-server-time\"\n").expect("write");
    let loaded = load(None, dir.path(), &Env::default(), Path::new(EXE)).expect("loads");
    assert_eq!(loaded.source, ConfigSource::File(file));
    assert_eq!(ids(&loaded), ["time"]);
    assert_eq!(
        server(&loaded, "time").source,
        crate::config::ServerSource::File
    );
}

/// The environment the documented example needs to load without warnings.
const EXAMPLE_ENV: &[(&str, &str)] = &[
    ("GITHUB_TOKEN", "t"),
    ("MCPGATE_JWT_SECRET", "0123456789abcdef0123456789abcdef"),
    ("OPENAI_API_KEY", "k"),
    ("TEAM_ID", "team"),
];

#[test]
fn the_documented_example_loads_with_every_option() {
    let env = env(EXAMPLE_ENV);
    let dir = TempDir::new().expect("temp dir");
    std::fs::write(dir.path().join("mcpgate.toml"), documented_example()).expect("write");
    let loaded = load(None, dir.path(), &env, Path::new(EXE)).expect("loads");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    assert_eq!(ids(&loaded), ["github", "time"]);
    // `[sandbox]` reaches the stdio server, its user resolved to ids.
    let time = loaded
        .config
        .server(&ServerId::new("time").expect("valid id"))
        .expect("time");
    let TransportConfig::Stdio(stdio) = &time.transport else {
        panic!("time is a command server")
    };
    let sandbox = &stdio.sandbox;
    assert_eq!(sandbox.mode, crate::config::SandboxMode::On);
    assert!(
        matches!(&sandbox.run_as, crate::config::RunAs::User { name, uid, .. } if name == "nobody" && *uid != 0),
        "{sandbox:?}"
    );
    assert_eq!(sandbox.memory, Some(4 << 30));
    assert_eq!(sandbox.cpu_seconds, Some(3600));
    assert_eq!(sandbox.read, [PathBuf::from("/srv")]);
    assert_eq!(sandbox.write, [PathBuf::from("/var/tmp")]);
    assert_eq!(sandbox.network, crate::config::Network::Off);
    let llm = loaded
        .config
        .llm
        .as_ref()
        .expect("[llm] configures a model");
    assert_eq!(llm.model, "qwen2.5-7b-instruct");
    assert_eq!(llm.api_key.as_ref().map(|k| k.expose()), Some("k"));
    assert_eq!(
        loaded.config.agent.preprompt.as_deref(),
        Some("You are ...")
    );
    let limits = &loaded.config.limits;
    assert_eq!(limits.connect_timeout, Duration::from_secs(30));
    assert_eq!(limits.max_result_bytes, 1_048_576);
    assert_eq!(
        loaded.config.reconnect.initial_delay,
        Duration::from_millis(500)
    );

    let TransportConfig::Stdio(time) = &server(&loaded, "time").transport else {
        panic!("time is stdio");
    };
    assert_eq!(time.args, ["--local-timezone", "UTC"]);
    assert_eq!(time.env[0].0, "TZ");
    assert_eq!(time.cwd, Some(PathBuf::from("/srv/time")));

    let github = server(&loaded, "github");
    let TransportConfig::Http(http) = &github.transport else {
        panic!("github is http");
    };
    assert_eq!(http.kind, HttpKind::Auto);
    assert_eq!(http.headers[0].0, "Authorization");
    assert_eq!(
        http.headers[0].1.resolve(&env).expect("resolves").expose(),
        "Bearer t"
    );
    assert_eq!(github.allowed_hosts, ["api.githubcopilot.com"]);
    assert!(github.exposes("create_issue") && !github.exposes("delete_repo"));
    assert_eq!(github.confirm, Confirm::Writes);
    assert_eq!(
        (github.on_change, github.scan),
        (OnChange::Warn, ScanMode::Warn)
    );
    assert_eq!(github.connect_timeout, Some(Duration::from_secs(10)));
    let timeouts = [("search_repositories".to_owned(), Duration::from_secs(120))];
    assert_eq!(github.tool_timeouts, timeouts);

    let config = &loaded.config;
    assert_eq!(config.call_limits, CallLimits::default());
    assert_eq!(config.confirmations, ConfirmationConfig::default());
    assert_eq!(
        config.state,
        StateConfig::Sqlite {
            path: dir.path().join("mcpgate.db")
        }
    );
    assert_eq!(
        config.pins,
        PinsConfig {
            file: dir.path().join("mcpgate.lock")
        }
    );
    assert_eq!(config.audit.log_arguments_for, ["time.get_current_time"]);
    let id = |s: &str| ServerId::new(s).expect("valid id");
    let access = AccessConfig {
        tenants: vec![TenantAccess {
            tenant: "acme".to_owned(),
            servers: vec![id("github"), id("time")],
            models: None,
        }],
        grants: vec![Grant {
            tenant: "acme".to_owned(),
            users: vec!["alice".to_owned()],
            roles: vec!["dev".to_owned()],
            tools: vec!["github.*".to_owned(), "time.get_current_time".to_owned()],
        }],
        operators: vec![Operator {
            tenant: "ops".to_owned(),
            users: vec![],
            roles: vec!["operator".to_owned()],
        }],
    };
    assert_eq!(config.access, Some(access));
}

#[test]
fn sections_override_defaults_and_servers_are_sorted_without_disabled_ones() {
    let text = r#"
        [limits]
        call_timeout = 5
        max_result_bytes = 2048
        [cache]
        ttl = 0
        max_entries = 10
        [reconnect]
        max_attempts = 0
        [servers.zeta]
        command = "z"
        [servers.alpha]
        command = "a"
        [servers.off]
        command = "o"
        enabled = false
    "#;
    let loaded = load_file("c.toml", text, &Env::default()).expect("loads");
    assert_eq!(ids(&loaded), ["alpha", "zeta"]);
    assert_eq!(loaded.config.limits.call_timeout, Duration::from_secs(5));
    assert_eq!(loaded.config.limits.max_result_bytes, 2048);
    assert_eq!(loaded.config.cache.ttl, Duration::ZERO);
    assert_eq!(loaded.config.cache.max_entries, 10);
    assert_eq!(loaded.config.reconnect.max_attempts, 0);
}

#[test]
fn every_problem_of_a_file_is_reported_with_its_path() {
    let text = r#"
        [limits]
        max_result_bytes = 10
        call_timeout = "2h"
        [servers.GitHub]
        url = "https://example.com"
        [servers.a]
        command = "x"
        url = "https://example.com"
        [servers.b]
        url = "not a url"
        [servers.c]
        comand = "typo"
        [servers.d]
        command = "d"
        read_only_tools = ["t"]
        write_tools = ["t"]
    "#;
    let err = load_file("c.toml", text, &Env::default()).expect_err("invalid");
    assert_eq!(
        paths(&err),
        [
            "limits.call_timeout",
            "limits.max_result_bytes",
            "servers.c",
            "servers.GitHub",
            "servers.a",
            "servers.b.url",
            "servers.d.write_tools",
        ]
    );
    let text = err.to_string();
    assert!(text.starts_with("7 configuration problems"), "{text}");
    assert!(text.contains("unknown field `comand`"), "{text}");
    assert!(text.contains("`GitHub` is not a valid id"), "{text}");
}

#[test]
fn file_level_errors_name_the_field_and_line() {
    let err = load_file("c.toml", "[limits]\n\n[limit]\nx = 1\n", &Env::default())
        .expect_err("unknown section");
    assert_eq!(err.problems.len(), 1);
    let message = &err.problems[0].message;
    assert!(
        message.starts_with("line 3, column 2: unknown field `limit`"),
        "{message}"
    );

    let err = load_file("c.toml", "[limits]\nbogus = 1\n", &Env::default()).expect_err("field");
    assert!(err.problems[0].message.contains("unknown field `bogus`"));

    let err = load_file("c.yaml", "x: 1", &Env::default()).expect_err("type");
    assert!(err.problems[0].message.contains("unknown file type"));

    let dir = TempDir::new().expect("temp dir");
    let err = load(
        Some(Path::new("nope.toml")),
        dir.path(),
        &Env::default(),
        Path::new(EXE),
    )
    .expect_err("missing explicit file");
    assert!(err.problems[0].message.starts_with("cannot be opened"));
}

#[test]
fn an_oversized_file_is_refused_before_parsing() {
    let text = format!("# {}\n", "x".repeat(MAX_CONFIG_FILE_BYTES as usize));
    let err = load_file("big.toml", &text, &Env::default()).expect_err("too big");
    assert!(err.problems[0].message.contains("is larger than"));
}

#[test]
fn a_literal_secret_in_the_file_is_rejected_without_echoing_it() {
    let text = r#"
        [servers.gh]
        url = "https://api.example.com/mcp"
        headers = { Authorization = "Bearer ghp_SuperSecret123" }
        [servers.local]
        command = "srv"
        env = { OPENAI_API_KEY = "sk-live-TopSecret" }
    "#;
    let err = load_file("c.toml", text, &Env::default()).expect_err("literal secrets");
    assert_eq!(
        paths(&err),
        [
            "servers.gh.headers.Authorization",
            "servers.local.env.OPENAI_API_KEY"
        ]
    );
    let shown = format!("{err} {err:?}");
    assert!(
        !shown.contains("SuperSecret") && !shown.contains("TopSecret"),
        "{shown}"
    );
    assert!(shown.contains("set OPENAI_API_KEY in the gateway's environment"));
}

#[test]
fn unset_variables_warn_but_load() {
    let text = "[servers.gh]\nurl = \"https://a.example\"\nheaders = { X-Token = \"${GH}\" }\n";
    let loaded = load_file("c.toml", text, &Env::default()).expect("loads");
    assert_eq!(loaded.warnings.len(), 1);
    assert!(
        loaded.warnings[0].starts_with("servers.gh.headers.X-Token: environment variable `GH`")
    );
}

#[test]
fn mcp_servers_json_is_imported_with_normalized_ids() {
    let text = r#"{"mcpServers": {
        "brave_search": {"command": "npx", "args": ["-y", "brave"], "env": {"BRAVE_API_KEY": "${BRAVE_API_KEY}"}},
        "GitHub": {"url": "https://api.example.com/mcp", "type": "http"},
        "old.sse": {"url": "https://sse.example.com/sse", "type": "sse"},
        "parked": {"command": "x", "disabled": true}
    }}"#;
    let env = env(&[("BRAVE_API_KEY", "b")]);
    let loaded = load_file("claude.json", text, &env).expect("loads");
    assert_eq!(ids(&loaded), ["brave-search", "github", "old-sse"]);
    assert_eq!(loaded.warnings.len(), 3, "{:?}", loaded.warnings);
    assert!(loaded.warnings[0].contains("`brave_search` normalized to `brave-search`"));
    let TransportConfig::Http(http) = &server(&loaded, "github").transport else {
        panic!("github is http");
    };
    assert_eq!(http.kind, HttpKind::Streamable);
    let TransportConfig::Http(http) = &server(&loaded, "old-sse").transport else {
        panic!("old-sse is http");
    };
    assert_eq!(http.kind, HttpKind::Sse);
}

#[test]
fn vscode_servers_key_and_stdio_type_are_accepted() {
    let text = r#"{"inputs": [], "servers": {"time": {"type": "stdio", "command": "t"}}}"#;
    let loaded = load_file("mcp.json", text, &Env::default()).expect("loads");
    assert_eq!(ids(&loaded), ["time"]);

    let text = r#"{"inputs": [{"id": "tok"}], "servers": {}}"#;
    let err = load_file("mcp.json", text, &Env::default()).expect_err("prompted inputs");
    assert_eq!(paths(&err), ["inputs"]);
}

#[test]
fn mcp_servers_json_problems_are_reported() {
    let text = r#"{"mcpServers": {
        "brave_search": {"command": "a"},
        "brave-search": {"command": "b"},
        "gh": {"command": "c", "autoApprove": []},
        "tok": {"command": "d", "env": {"GITHUB_TOKEN": "ghp_literal"}},
        "9lives": {"command": "e"}
    }}"#;
    let err = load_file("c.json", text, &Env::default()).expect_err("invalid");
    assert_eq!(
        paths(&err),
        [
            "mcpServers.gh",
            "mcpServers.brave-search",
            "mcpServers.tok.env.GITHUB_TOKEN",
            "mcpServers.9lives"
        ]
    );
    assert!(
        err.problems[0]
            .message
            .contains("unknown field `autoApprove`")
    );
    assert!(
        err.problems[1]
            .message
            .contains("already defined by `mcpServers.brave_search`")
    );
    assert!(!err.to_string().contains("ghp_literal"));

    let err = load_file(
        "c.json",
        r#"{"mcpServers": {"a": {"command": "x"}, "a": {}}}"#,
        &Env::default(),
    )
    .expect_err("duplicate key");
    assert!(err.problems[0].message.contains("duplicate key `a`"));
}

mod access;
mod env_source;
mod gate_sections;
mod sandbox;
mod service;
mod sessions;
mod user_servers;
