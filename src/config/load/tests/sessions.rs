//! `sessions` of a server: per caller by default for HTTP servers, shared when asked; a stdio
//! server is one process, so per caller is refused there with its path; the JSON source
//! spells it alike.

use super::*;
use crate::config::Sessions;

fn sessions(loaded: &Loaded, id: &str) -> Sessions {
    server(loaded, id).sessions
}

#[test]
fn http_servers_get_a_session_per_caller_unless_shared() {
    let loaded = load_file(
        "c.toml",
        r#"
        [servers.remote]
        url = "https://mcp.example.com/mcp"
        [servers.one]
        url = "https://one.example.com/mcp"
        sessions = "shared"
        [servers.local]
        command = "t"
        sandbox = "off"
        [servers.also-local]
        command = "t"
        sandbox = "off"
        sessions = "shared"
        "#,
        &Env::default(),
    )
    .expect("valid");
    assert_eq!(sessions(&loaded, "remote"), Sessions::PerCaller);
    assert_eq!(sessions(&loaded, "one"), Sessions::Shared);
    assert_eq!(sessions(&loaded, "local"), Sessions::Shared);
    assert_eq!(sessions(&loaded, "also-local"), Sessions::Shared);
}

#[test]
fn per_caller_sessions_are_refused_for_a_stdio_server() {
    let problems = problems(
        "[servers.local]\ncommand = \"t\"\nsandbox = \"off\"\nsessions = \"per_caller\"\n",
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("servers.local.sessions: per_caller needs an HTTP server"),
        "{problems:?}"
    );
    let err = load_file(
        "c.toml",
        "[servers.remote]\nurl = \"https://mcp.example.com/mcp\"\nsessions = \"each\"\n",
        &Env::default(),
    )
    .expect_err("not a mode");
    assert!(
        err.to_string()
            .contains("unknown variant `each`, expected `shared` or `per_caller`"),
        "the problem says what is accepted: {err}"
    );
}

#[test]
fn the_json_source_spells_it_alike() {
    let env = Env::from_pairs([(
        "EXTERNAL_MCP_SERVERS_JSON",
        r#"{"remote": {"url": "https://mcp.example.com/mcp", "sessions": "shared"}}"#,
    )]);
    let loaded = load_env(&env).expect("valid");
    assert_eq!(sessions(&loaded, "remote"), Sessions::Shared);
}
