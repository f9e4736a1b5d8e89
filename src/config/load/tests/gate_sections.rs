//! Tests of the gate's sections: the per-call limits in `[limits]`, `[confirmations]`,
//! `[state]`, `[pins]` and `[audit]`.

use crate::config::{AuditSync, Config, ResultOverflow};

use super::*;

/// Loads `text` as `sub/gate.toml` under a fresh working directory; also returns the
/// working directory, so that paths can be told apart from the config folder.
fn load_sub(text: &str, env: &Env) -> (Result<Loaded, ConfigError>, PathBuf) {
    let dir = TempDir::new().expect("temp dir");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    std::fs::write(dir.path().join("sub/gate.toml"), text).expect("write config");
    let loaded = load(
        Some(Path::new("sub/gate.toml")),
        dir.path(),
        env,
        Path::new(EXE),
    );
    (loaded, dir.path().to_path_buf())
}

fn problems(text: &str) -> Vec<String> {
    let err = load_file("c.toml", text, &Env::default()).expect_err("invalid");
    err.problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect()
}

fn ok(text: &str) -> Loaded {
    load_file("c.toml", text, &Env::default()).expect("loads")
}

#[test]
fn every_per_call_limit_is_read_from_limits_beside_the_old_ones() {
    let loaded = ok(r#"
        [limits]
        call_timeout = "5s"
        max_argument_bytes = 2048
        max_binary_bytes = 4096
        result_overflow = "truncate"
        user_concurrency = 2
        server_concurrency = 3
        concurrency_wait = "250ms"
        user_calls_per_minute = 0
        server_calls_per_minute = 7
        retries = 0
        idempotency_window = "2h"
    "#);
    assert_eq!(loaded.config.limits.call_timeout, Duration::from_secs(5));
    let want = CallLimits {
        max_argument_bytes: 2048,
        max_binary_bytes: 4096,
        result_overflow: ResultOverflow::Truncate,
        user_concurrency: 2,
        server_concurrency: 3,
        concurrency_wait: Duration::from_millis(250),
        user_calls_per_minute: 0,
        server_calls_per_minute: 7,
        retries: 0,
        idempotency_window: Duration::from_secs(7200),
    };
    assert_eq!(loaded.config.call_limits, want);
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);

    let err = load_file(
        "c.toml",
        "[limits]\nresult_overflow = \"drop\"\n",
        &Env::default(),
    )
    .expect_err("unknown overflow");
    assert!(
        err.problems[0].message.contains("unknown variant `drop`"),
        "{err}"
    );
}

/// Each bounded field: its lowest and highest accepted values (as written, and as the
/// validated field shows them), and a value just outside each end where one exists.
struct Bound {
    section: &'static str,
    field: &'static str,
    min: (&'static str, &'static str),
    max: (&'static str, &'static str),
    below: Option<&'static str>,
    above: &'static str,
    shown: fn(&Config) -> String,
}

#[test]
fn every_new_bound_holds_at_both_ends() {
    let bounds = [
        Bound {
            section: "limits",
            field: "max_argument_bytes",
            min: ("1024", "1024"),
            max: ("16777216", "16777216"),
            below: Some("1023"),
            above: "16777217",
            shown: |c| c.call_limits.max_argument_bytes.to_string(),
        },
        Bound {
            section: "limits",
            field: "max_binary_bytes",
            min: ("1024", "1024"),
            max: ("268435456", "268435456"),
            below: Some("1023"),
            above: "268435457",
            shown: |c| c.call_limits.max_binary_bytes.to_string(),
        },
        Bound {
            section: "limits",
            field: "user_concurrency",
            min: ("1", "1"),
            max: ("10000", "10000"),
            below: Some("0"),
            above: "10001",
            shown: |c| c.call_limits.user_concurrency.to_string(),
        },
        Bound {
            section: "limits",
            field: "server_concurrency",
            min: ("1", "1"),
            max: ("100000", "100000"),
            below: Some("0"),
            above: "100001",
            shown: |c| c.call_limits.server_concurrency.to_string(),
        },
        Bound {
            section: "limits",
            field: "concurrency_wait",
            min: ("0", "0ns"),
            max: ("\"1m\"", "60s"),
            below: Some("-1"),
            above: "\"60.001s\"",
            shown: |c| format!("{:?}", c.call_limits.concurrency_wait),
        },
        Bound {
            section: "limits",
            field: "user_calls_per_minute",
            min: ("0", "0"),
            max: ("1000000", "1000000"),
            below: None,
            above: "1000001",
            shown: |c| c.call_limits.user_calls_per_minute.to_string(),
        },
        Bound {
            section: "limits",
            field: "server_calls_per_minute",
            min: ("0", "0"),
            max: ("1000000", "1000000"),
            below: None,
            above: "1000001",
            shown: |c| c.call_limits.server_calls_per_minute.to_string(),
        },
        Bound {
            section: "limits",
            field: "retries",
            min: ("0", "0"),
            max: ("5", "5"),
            below: None,
            above: "6",
            shown: |c| c.call_limits.retries.to_string(),
        },
        Bound {
            section: "confirmations",
            field: "token_ttl",
            min: ("\"1s\"", "1s"),
            max: ("\"10m\"", "600s"),
            below: Some("\"999ms\""),
            above: "\"601s\"",
            shown: |c| format!("{:?}", c.confirmations.token_ttl),
        },
        Bound {
            section: "confirmations",
            field: "pending_ttl",
            min: ("1", "1s"),
            max: ("\"24h\"", "86400s"),
            below: Some("0.5"),
            above: "\"86401s\"",
            shown: |c| format!("{:?}", c.confirmations.pending_ttl),
        },
    ];
    for b in bounds {
        let text = |value: &str| format!("[{}]\n{} = {value}\n", b.section, b.field);
        for (written, shown) in [b.min, b.max] {
            let loaded = ok(&text(written));
            assert_eq!((b.shown)(&loaded.config), shown, "{} = {written}", b.field);
        }
        for bad in b.below.into_iter().chain([b.above]) {
            let got = problems(&text(bad));
            assert_eq!(got.len(), 1, "{} = {bad}: {got:?}", b.field);
            let path = format!("{}.{}: ", b.section, b.field);
            assert!(got[0].starts_with(&path), "{} = {bad}: {got:?}", b.field);
        }
    }
}

#[test]
fn a_user_allowed_more_than_its_server_is_warned_about() {
    let loaded = ok("[limits]\nuser_concurrency = 10\nserver_concurrency = 4\n");
    assert_eq!(loaded.warnings.len(), 1);
    assert!(
        loaded.warnings[0].starts_with("limits.user_concurrency: is above server_concurrency"),
        "{:?}",
        loaded.warnings
    );
}

#[test]
fn relative_state_and_pin_paths_are_resolved_against_the_config_folder() {
    let (loaded, cwd) = load_sub("", &Env::default());
    let config = loaded.expect("loads").config;
    let folder = cwd.join("sub");
    let db = folder.join("mcpgate.db");
    assert_eq!(config.state, StateConfig::Sqlite { path: db });
    assert_eq!(config.pins.file, folder.join("mcpgate.lock"));

    let text = "[state]\ndatabase = \"data/gate.db\"\n[pins]\nfile = \"../pins.lock\"\n";
    let (loaded, cwd) = load_sub(text, &Env::default());
    let config = loaded.expect("loads").config;
    let db = cwd.join("sub/data/gate.db");
    assert_eq!(config.state, StateConfig::Sqlite { path: db });
    assert_eq!(config.pins.file, cwd.join("sub/../pins.lock"));

    let text = "[state]\ndatabase = \"/var/lib/mcpgate/g.db\"\n[pins]\nfile = \"/etc/g.lock\"\n";
    let config = ok(text).config;
    let db = PathBuf::from("/var/lib/mcpgate/g.db");
    assert_eq!(config.state, StateConfig::Sqlite { path: db });
    assert_eq!(config.pins.file, Path::new("/etc/g.lock"));
}

#[test]
fn an_imported_mcp_servers_file_keeps_its_state_beside_it() {
    let dir = TempDir::new().expect("temp dir");
    std::fs::create_dir(dir.path().join("claude")).expect("mkdir");
    let file = dir.path().join("claude/mcp.json");
    std::fs::write(&file, r#"{"mcpServers": {"t": {"command": "t"}}}"#).expect("write");
    let loaded = load(Some(&file), dir.path(), &Env::default(), Path::new(EXE)).expect("loads");
    let db = dir.path().join("claude/mcpgate.db");
    assert_eq!(loaded.config.state, StateConfig::Sqlite { path: db });
}

#[test]
fn memory_state_is_spelled_two_ways_and_paths_must_be_paths() {
    for spelling in ["memory", ":memory:"] {
        let text = format!("[state]\ndatabase = \"{spelling}\"\n");
        assert_eq!(ok(&text).config.state, StateConfig::Memory, "{spelling}");
    }
    let got = problems("[state]\ndatabase = \" \"\n[pins]\nfile = \"\"\n");
    assert_eq!(
        got,
        [
            "state.database: must be a file path (non-empty, no NUL)",
            "pins.file: must be a file path (non-empty, no NUL)",
        ]
    );
    let got = problems("[state]\ndatabase = \"a\\u0000b\"\n");
    assert_eq!(got.len(), 1);
    let got = problems("[state]\npath = \"x.db\"\n");
    assert!(got[0].contains("unknown field `path`"), "{got:?}");
}

#[test]
fn the_embedded_default_keeps_state_where_the_caller_says() {
    let dir = TempDir::new().expect("temp dir");
    let cwd = dir.path();
    let loaded = load(None, cwd, &Env::default(), Path::new(EXE)).expect("loads");
    assert_eq!(loaded.config.state, StateConfig::Memory);
    assert_eq!(loaded.config.pins.file, cwd.join("mcpgate.lock"));
    assert_eq!(loaded.config.access, None);
    assert_eq!(loaded.config.call_limits, CallLimits::default());

    let relative = StateConfig::default();
    let loaded = load_with_embedded_state(None, cwd, &Env::default(), Path::new(EXE), relative)
        .expect("loads");
    let db = cwd.join("mcpgate.db");
    assert_eq!(loaded.config.state, StateConfig::Sqlite { path: db });

    let absolute = StateConfig::Sqlite {
        path: PathBuf::from("/var/lib/mcpgate.db"),
    };
    let loaded =
        load_with_embedded_state(None, cwd, &Env::default(), Path::new(EXE), absolute.clone())
            .expect("loads");
    assert_eq!(loaded.config.state, absolute);
}

/// Two servers: `time` whose reads are listed, `notes` that never asks for confirmation but
/// declares one write.
const AUDIT_SERVERS: &str = r#"
    [servers.time]
    command = "t"
    read_only_tools = ["get_current_time"]
    [servers.notes]
    command = "n"
    confirm = "none"
    read_only_tools = ["list_notes"]
    write_tools = ["delete_note"]
    [servers.off]
    command = "o"
    enabled = false
"#;

#[test]
fn arguments_are_logged_only_for_read_tools() {
    let text = format!(
        "{AUDIT_SERVERS}\n[audit]\nlog_arguments_for = [\"time.get_current_time\", \
         \"notes.list_notes\"]\n"
    );
    let loaded = ok(&text);
    let want = ["time.get_current_time", "notes.list_notes"];
    assert_eq!(loaded.config.audit.log_arguments_for, want);

    let text = format!(
        "{AUDIT_SERVERS}\n[audit]\nlog_arguments_for = [\"time.set_timezone\", \
         \"notes.delete_note\"]\n"
    );
    let got = problems(&text);
    assert_eq!(got.len(), 2, "{got:?}");
    assert!(
        got[0].starts_with("audit.log_arguments_for[0]: `time.set_timezone` is not known to read"),
        "{got:?}"
    );
    assert!(got[0].contains("list `set_timezone` in the server's read_only_tools"));
    assert!(
        got[1].starts_with("audit.log_arguments_for[1]: `notes.delete_note` is not known"),
        "{got:?}"
    );
}

#[test]
fn log_arguments_for_names_one_tool_of_a_configured_server() {
    let text = format!(
        "{AUDIT_SERVERS}\n[audit]\nlog_arguments_for = [\"time\", \"time.\", \"time.*\", \
         \"github.search\", \"Time.get_current_time\"]\n"
    );
    let got = problems(&text);
    let want = [
        "audit.log_arguments_for[0]: must be one canonical tool id, `server.tool`",
        "audit.log_arguments_for[1]: must be one canonical tool id, `server.tool`",
        "audit.log_arguments_for[2]: must be one canonical tool id, `server.tool`",
        "audit.log_arguments_for[3]: `github` is not a configured server",
        "audit.log_arguments_for[4]: `Time` is not a configured server",
    ];
    assert_eq!(got, want);

    let text = format!("{AUDIT_SERVERS}\n[audit]\nlog_arguments_for = [\"off.read\"]\n");
    let loaded = ok(&text);
    assert!(loaded.config.audit.log_arguments_for.is_empty());
    assert_eq!(
        loaded.warnings,
        ["audit.log_arguments_for[0]: ignored: server `off` is disabled"]
    );
}

#[test]
fn audit_may_name_a_server_added_by_the_environment() {
    let json = r#"{"clock": {"command": "c", "readOnlyTools": ["now"]}}"#;
    let env = env(&[(external_env::SERVERS_JSON, json)]);
    let text = "[audit]\nlog_arguments_for = [\"clock.now\"]\n";
    let loaded = load_file("c.toml", text, &env).expect("loads");
    assert_eq!(loaded.config.audit.log_arguments_for, ["clock.now"]);
}

#[test]
fn audit_sync_is_batched_unless_every_commit_is_asked_for() {
    assert_eq!(ok("").config.audit.sync, AuditSync::Batched);
    let loaded = ok("[audit]\nsync = \"batched\"\n");
    assert_eq!(loaded.config.audit.sync, AuditSync::Batched);
    let loaded = ok("[audit]\nsync = \"every_commit\"\n");
    assert_eq!(loaded.config.audit.sync, AuditSync::EveryCommit);

    let err = load_file("c.toml", "[audit]\nsync = \"always\"\n", &Env::default())
        .expect_err("unknown sync");
    assert_eq!(err.problems.len(), 1, "{err}");
    assert_eq!(err.problems[0].path, "audit.sync", "{err}");
    assert!(err.problems[0].message.contains("`always`"), "{err}");
}

#[test]
fn shared_stores_are_named_by_references_and_bounded() {
    let loaded = ok(r#"
        [state]
        redis = "${REDIS_URL}"
        postgres = "${DATABASE_URL}"
        require_shared = true
        instance = "gw-1"
        lease_ttl = "10s"
        reads_when_redis_down = "unlimited"
        [audit]
        retention = "90d"
    "#);
    let shared = &loaded.config.shared;
    assert!(shared.require_shared && shared.any());
    assert_eq!(
        shared.redis.as_ref().map(|t| t.as_written()),
        Some("${REDIS_URL}")
    );
    assert_eq!(shared.instance, "gw-1");
    assert_eq!(shared.lease_ttl, std::time::Duration::from_secs(10));
    assert_eq!(
        shared.reads_when_redis_down,
        crate::config::ReadsWhenDown::Unlimited
    );
    assert_eq!(
        loaded.config.audit.retention,
        Some(std::time::Duration::from_secs(90 * 86_400))
    );
    // Nothing shared by default: a single instance changes nothing.
    assert!(!ok("").config.shared.any());

    let got = problems(
        "[state]\nredis = \"redis://:hunter2@cache:6379\"\nrequire_shared = true\n\
         instance = \"a b\"\nlease_ttl = \"1s\"\nreads_when_redis_down = \"maybe\"\n\
         pool_size = 0\n[audit]\nretention = \"5m\"\n",
    );
    let joined = got.join("\n");
    for expected in [
        "state.redis: must be a `${VAR}` reference",
        "state.require_shared: needs both `redis` and `postgres`",
        "state.instance: must be 1 to 64 ASCII letters",
        "state.lease_ttl: must be between",
        "state.reads_when_redis_down: `maybe` is not a choice",
        "state.pool_size: must be between 1 and 256",
        "audit.retention: must be between",
    ] {
        assert!(joined.contains(expected), "{expected} in:\n{joined}");
    }
    assert!(
        !joined.contains("hunter2"),
        "a secret never shows: {joined}"
    );
}

#[test]
fn the_models_second_opinion_is_off_by_default_and_needs_a_model() {
    assert_eq!(
        ok("").config.scan_review,
        crate::config::ScanReviewConfig::default()
    );
    let on = ok(r#"
        [llm]
        base_url = "http://127.0.0.1:9/v1"
        model = "guard"
        [scan]
        model_review = true
        model_review_blocks = true
    "#);
    assert_eq!(
        on.config.scan_review,
        crate::config::ScanReviewConfig {
            enabled: true,
            blocks: true
        }
    );
    let problems = problems("[scan]\nmodel_review = true\n");
    assert!(
        problems
            .iter()
            .any(|p| p.starts_with("scan.model_review: needs a model")),
        "{problems:?}"
    );
}
