//! Tests of the rules for one server, fed from TOML as a user would write it.

use super::*;

/// Validates one `[servers.s]` body; the server (if valid and enabled), problems as
/// `path: message`, and warnings.
fn check(body: &str, env: &Env) -> (Option<ServerConfig>, Vec<String>, Vec<String>) {
    let server: RawServer = toml::from_str(body).expect("test TOML parses");
    let entry = Entry {
        key: "s".to_owned(),
        path: "servers.s".to_owned(),
        normalize: false,
        case: FieldCase::Snake,
        server,
    };
    let mut report = Report::default();
    let id = ServerId::new("s").expect("valid id");
    let defaults = crate::config::Sandbox::default();
    let base = std::path::Path::new("/etc/mcpgate");
    let out = validate(id, &entry, env, (&defaults, base), &mut report);
    match report.finish() {
        Ok(warnings) => (out, Vec::new(), warnings),
        Err(e) => {
            let problems = e
                .problems
                .iter()
                .map(|p| format!("{}: {}", p.path, p.message));
            (out, problems.collect(), Vec::new())
        }
    }
}

fn problems(body: &str) -> Vec<String> {
    check(body, &Env::default()).1
}

fn ok(body: &str) -> ServerConfig {
    let (server, problems, _) = check(body, &Env::default());
    assert_eq!(problems, Vec::<String>::new(), "{body}");
    server.expect("valid and enabled")
}

#[test]
fn plain_http_needs_allow_http_except_to_loopback_with_allow_private() {
    let refused = problems("url = \"http://example.com/mcp\"");
    assert_eq!(refused.len(), 1);
    assert!(
        refused[0].starts_with("servers.s.url: uses plain http"),
        "{refused:?}"
    );
    ok("url = \"http://example.com/mcp\"\nallow_http = true");
    ok("url = \"http://127.0.0.1:8080/mcp\"\nallow_private = true");
    ok("url = \"http://localhost:8080/mcp\"\nallow_private = true");
    ok("url = \"http://[::1]:8080/mcp\"\nallow_private = true");
    let loopback = problems("url = \"https://localhost/mcp\"");
    assert_eq!(loopback.len(), 1);
    assert!(
        loopback[0].contains("set `allow_private` to true"),
        "{loopback:?}"
    );
}

#[test]
fn bad_urls_are_refused_without_echoing_credentials() {
    assert!(problems("url = \"ftp://example.com\"")[0].contains("scheme `ftp`"));
    assert!(problems("url = \"example.com/mcp\"")[0].contains("is not a valid URL"));
    let creds = problems("url = \"https://user:hunter2@example.com/mcp\"");
    assert_eq!(creds.len(), 1);
    assert!(creds[0].contains("holds credentials") && !creds[0].contains("hunter2"));
}

#[test]
fn fields_belong_to_their_transport() {
    assert_eq!(
        problems("command = \"x\"\ntransport = \"sse\"\nheaders = {}\nallow_http = true"),
        [
            "servers.s.transport: applies only to a server with `url`",
            "servers.s.headers: applies only to a server with `url`",
            "servers.s.allow_http: applies only to a server with `url`",
        ]
    );
    assert_eq!(
        problems("url = \"https://a.example\"\nargs = []\ncwd = \"/tmp\""),
        [
            "servers.s.args: applies only to a server with `command`",
            "servers.s.cwd: applies only to a server with `command`",
        ]
    );
    assert!(
        problems("url = \"https://a.example\"\ntransport = \"stdio\"")[0]
            .contains("needs `command`")
    );
    assert!(problems("command = \"x\"\nurl = \"https://a.example\"")[0].contains("exactly one"));
    assert!(problems("enabled = true")[0].contains("needs `command`"));
    assert!(problems("command = \"  \"")[0].starts_with("servers.s.command:"));
    let stdio = ok("command = \"x\"\ntransport = \"stdio\"");
    assert!(matches!(stdio.transport, TransportConfig::Stdio(_)));
}

#[test]
fn allowed_hosts_are_normalized_and_must_admit_the_url() {
    let s = ok(
        "url = \"https://API.example.com\"\nallowed_hosts = [\"Api.Example.com\", \"cdn.example.com\"]",
    );
    assert_eq!(s.allowed_hosts, ["api.example.com", "cdn.example.com"]);
    // A fully qualified name, in the URL or the list, is the same host.
    let fqdn = ok("url = \"https://API.EXAMPLE.COM./mcp\"\nallowed_hosts = [\"api.example.com\"]");
    assert_eq!(fqdn.allowed_hosts, ["api.example.com"]);
    let listed =
        ok("url = \"https://api.example.com/mcp\"\nallowed_hosts = [\"API.example.com.\"]");
    assert_eq!(listed.allowed_hosts, ["api.example.com"]);
    assert_eq!(
        problems("url = \"https://a.example\"\nallowed_hosts = [\"b.example\", \"\"]"),
        [
            "servers.s.allowed_hosts[1]: is not a host name or IP address",
            "servers.s.allowed_hosts: does not include the URL's host `a.example`",
        ]
    );
}

#[test]
fn tool_lists_must_name_tools_and_not_contradict() {
    assert_eq!(
        problems(
            "command = \"x\"\ndenied_tools = [\"a\", \" \"]\nread_only_tools = [\"r\", \"w\"]\n\
             write_tools = [\"w\"]"
        ),
        [
            "servers.s.denied_tools[1]: names no tool",
            "servers.s.write_tools: `w` is also in read_only_tools",
        ]
    );
    let (server, _, warnings) = check("command = \"x\"\nallowed_tools = []", &Env::default());
    assert_eq!(
        warnings,
        ["servers.s.allowed_tools: is empty: no tool of this server is exposed"]
    );
    assert!(server.is_some_and(|s| !s.exposes("anything")));
}

#[test]
fn timeouts_are_bounded() {
    assert_eq!(
        problems(
            "command = \"x\"\nconnect_timeout = 0\ncall_timeout = \"2h\"\n\
             [tool_timeouts]\nslow = \"soon\"\n\"\" = 1"
        ),
        [
            "servers.s.connect_timeout: must be between 1ms and 3600s",
            "servers.s.call_timeout: must be between 1ms and 3600s",
            "servers.s.tool_timeouts.\"\": names no tool",
            "servers.s.tool_timeouts.slow: `soon` is not a duration: write seconds (`30`, `0.5`) \
             or a number with a unit (`\"500ms\"`, `\"30s\"`, `\"2m\"`, `\"1h\"`, `\"90d\"`)",
        ]
    );
}

#[test]
fn malformed_references_are_errors_and_disabled_servers_still_checked() {
    let found = problems("command = \"x\"\nenabled = false\nenv = { TZ = \"${A-B}\" }");
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("servers.s.env.TZ: a `${...}` reference holds an invalid"));
    let (server, problems, _) = check("command = \"x\"\nenabled = false", &Env::default());
    assert!(
        server.is_none() && problems.is_empty(),
        "disabled: dropped, not an error"
    );
}

#[test]
fn defaults_apply_to_a_bare_server() {
    let s = ok("command = \"x\"");
    assert_eq!(s.confirm, Confirm::Writes);
    assert!(!s.allow_private && !s.allow_http && !s.trust_annotations);
    assert_eq!(s.allowed_tools, None);
    let TransportConfig::Http(http) = ok("url = \"https://a.example\"").transport else {
        panic!("http");
    };
    assert_eq!(http.kind, HttpKind::Auto);
}

#[test]
fn overrides_replace_titles_and_descriptions_by_upstream_name() {
    let server = ok("url = \"https://mcp.example.com/mcp\"\n\
         [overrides.send]\ndescription = \"Sends a message.\"\n\
         [overrides.\"a.b\"]\ntitle = \"A B\"\n");
    assert_eq!(
        server.override_of("send"),
        Some(&ToolOverride {
            title: None,
            description: Some("Sends a message.".to_owned()),
        })
    );
    assert_eq!(
        server.override_of("a.b").and_then(|o| o.title.as_deref()),
        Some("A B")
    );
    assert_eq!(server.override_of("other"), None);
    let got = problems(&format!(
        "url = \"https://mcp.example.com/mcp\"\n\
         [overrides.\" \"]\ntitle = \"x\"\n\
         [overrides.empty]\n\
         [overrides.long]\ndescription = \"{}\"\n",
        "x".repeat(MAX_OVERRIDE_CHARS + 1)
    ));
    let joined = got.join("\n");
    for expected in [
        "servers.s.overrides.\" \": names no tool",
        "servers.s.overrides.empty: overrides nothing",
        "servers.s.overrides.long.description: is longer than",
    ] {
        assert!(joined.contains(expected), "{expected} in:\n{joined}");
    }
    let renamed = toml::from_str::<RawServer>(
        "url = \"https://mcp.example.com/mcp\"\n[overrides.send]\nname = \"x\"\n",
    );
    assert!(renamed.is_err(), "a tool's name cannot be overridden");
}
