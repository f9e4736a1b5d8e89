//! Tests of `[server]` and `MCPGATE_LISTEN`, fed from TOML as a user would write it.

use super::*;
use crate::config::raw::RawFile;

/// A strong HS256 key for the JWT sections below (32 bytes).
const KEY: &str = "0123456789abcdef0123456789abcdef";
/// The smallest valid JWT mode, keyed by `K`.
const JWT: &str =
    "[server.auth]\nmode = \"jwt\"\nsecret = \"${K}\"\nissuer = \"i\"\naudience = \"a\"\n";

struct Checked {
    service: ServiceConfig,
    problems: Vec<String>,
    warnings: Vec<String>,
}

fn check(text: &str, env: &[(&str, &str)]) -> Checked {
    let file: RawFile = toml::from_str(text).expect("test TOML parses");
    let env = Env::from_pairs(env.iter().copied());
    let mut report = Report::default();
    let service = validate(
        &file.server,
        &env,
        (Path::new("/etc/mcpgate"), file.access.is_none()),
        &mut report,
    );
    let warnings = report.warnings().to_vec();
    let problems = match report.finish() {
        Ok(_) => Vec::new(),
        Err(e) => e
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect(),
    };
    Checked {
        service,
        problems,
        warnings,
    }
}

fn ok(text: &str) -> ServiceConfig {
    let checked = check(text, &[("K", KEY)]);
    assert_eq!(checked.problems, Vec::<String>::new(), "{text}");
    checked.service
}

fn problems(text: &str) -> Vec<String> {
    check(text, &[("K", KEY)]).problems
}

#[test]
fn no_section_is_the_default_the_embedded_config_promises() {
    for text in ["", "[server]\n", "[server]\n[server.auth]\n"] {
        let checked = check(text, &[]);
        assert_eq!(checked.service, ServiceConfig::default(), "{text:?}");
        assert_eq!(checked.problems, Vec::<String>::new());
        assert_eq!(checked.warnings, Vec::<String>::new());
    }
}

#[test]
fn every_field_is_read() {
    let service = ok(r#"
        [server]
        listen = "127.0.0.2:9000"
        production = false
        max_body_bytes = 2048
        request_timeout = "5m"
        header_read_timeout = "12s"
        shutdown_grace = 0
        mcp_session_idle = "90s"
        allowed_hosts = ["Gateway.Example.com", "gateway.example.com:8443", "[::1]:9000"]
        allowed_origins = ["HTTPS://App.Example.com:443/", "http://localhost:3000"]
        log_json = true
        threads = 3
        apps_listen = "127.0.0.2:9001"
        apps_origin = "HTTPS://Apps.Example.com/"
    "#);
    let want = ServiceConfig {
        listen: SocketAddr::from(([127, 0, 0, 2], 9000)),
        public_url: None,
        auth: AuthConfig::Dev,
        production: false,
        max_body_bytes: 2048,
        request_timeout: Duration::from_secs(300),
        header_read_timeout: Duration::from_secs(12),
        shutdown_grace: Duration::ZERO,
        mcp_session_idle: Duration::from_secs(90),
        allowed_hosts: vec![
            "gateway.example.com".to_owned(),
            "gateway.example.com:8443".to_owned(),
            "[::1]:9000".to_owned(),
        ],
        allowed_origins: vec![
            "https://app.example.com".to_owned(),
            "http://localhost:3000".to_owned(),
        ],
        log_json: true,
        threads: 3,
        apps_listen: Some(SocketAddr::from(([127, 0, 0, 2], 9001))),
        apps_origin: Some("https://apps.example.com".to_owned()),
    };
    assert_eq!(service, want);
}

#[test]
fn the_apps_sandbox_is_another_origin_and_faces_no_network_without_jwt() {
    let found = problems(
        r#"
        [server]
        public_url = "http://127.0.0.1:8080"
        apps_origin = "http://127.0.0.1:8080/"
        apps_listen = "0.0.0.0:8081"
    "#,
    );
    let joined = found.join("\n");
    assert!(
        joined.contains("server.apps_origin: is the gateway's own origin"),
        "{joined}"
    );
    assert!(
        joined.contains("server.apps_listen: 0.0.0.0:8081 is not a loopback"),
        "{joined}"
    );
    for bad in [
        "apps_origin = \"https://apps.example.com/x\"",
        "apps_listen = \"apps:80\"",
    ] {
        let found = problems(&format!("[server]\n{bad}\n"));
        assert_eq!(found.len(), 1, "{bad}: {found:?}");
    }
}

#[test]
fn bounds_are_inclusive_and_reported_with_their_path() {
    let cases: [(&str, &[&str], &[&str]); 5] = [
        (
            "max_body_bytes",
            &["1024", "67108864"],
            &["1023", "67108865", "0"],
        ),
        (
            "request_timeout",
            &["\"1s\"", "1", "\"1h\""],
            &["\"999ms\"", "\"3601s\"", "0"],
        ),
        (
            "shutdown_grace",
            &["0", "\"5m\"", "\"300s\""],
            &["\"301s\"", "\"1h\""],
        ),
        (
            "mcp_session_idle",
            &["\"1s\"", "\"24h\""],
            &["\"999ms\"", "\"86401s\"", "0"],
        ),
        ("threads", &["1", "64"], &["0", "65"]),
    ];
    for (field, good, bad) in cases {
        for value in good {
            ok(&format!("[server]\n{field} = {value}\n"));
        }
        for value in bad {
            let found = problems(&format!("[server]\n{field} = {value}\n"));
            assert_eq!(found.len(), 1, "{field} = {value}: {found:?}");
            assert!(
                found[0].starts_with(&format!("server.{field}: must be between")),
                "{found:?}"
            );
        }
    }
    let found = problems("[server]\nshutdown_grace = \"soon\"\n");
    assert!(found[0].contains("is not a duration"), "{found:?}");
}

#[test]
fn listen_must_be_an_ip_address_and_port() {
    for bad in ["localhost:8080", "8080", "127.0.0.1", "", "127.0.0.1:99999"] {
        let found = problems(&format!("[server]\nlisten = \"{bad}\"\n"));
        assert_eq!(found.len(), 1, "{bad}: {found:?}");
        assert!(
            found[0].starts_with("server.listen: must be an IP address and port"),
            "{found:?}"
        );
    }
    let service = ok("[server]\nlisten = \"[::1]:0\"\n");
    assert_eq!(service.listen, "[::1]:0".parse().expect("address"));
}

#[test]
fn mcpgate_listen_wins_over_the_file_and_empty_counts_as_unset() {
    let text = "[server]\nlisten = \"127.0.0.1:1000\"\n";
    let port = |env: &[(&str, &str)]| check(text, env).service.listen.port();
    assert_eq!(port(&[(LISTEN, "127.0.0.1:2000")]), 2000);
    assert_eq!(port(&[(LISTEN, " 127.0.0.1:2000 ")]), 2000);
    assert_eq!(port(&[(LISTEN, "  ")]), 1000);
    assert_eq!(port(&[]), 1000);
    assert_eq!(
        check("", &[(LISTEN, "[::1]:3000")]).service.listen.port(),
        3000
    );

    let found = check(text, &[(LISTEN, "localhost")]).problems;
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("MCPGATE_LISTEN: must be an IP address"));
}

#[test]
fn dev_and_none_bind_loopback_only() {
    for auth in [
        "",
        "[server.auth]\nmode = \"dev\"\n",
        "[server.auth]\nmode = \"none\"\n",
    ] {
        for addr in ["0.0.0.0:8080", "[::]:8080", "192.168.1.5:80"] {
            let found = problems(&format!("[server]\nlisten = \"{addr}\"\n{auth}"));
            assert_eq!(found.len(), 1, "{addr} {auth}: {found:?}");
            assert!(found[0].starts_with("server.listen: "), "{found:?}");
            assert!(found[0].contains("is not a loopback address"), "{found:?}");
            assert!(found[0].contains("use mode = \"jwt\""), "{found:?}");
        }
        for addr in ["127.8.9.10:1", "[::1]:1", "[::ffff:127.0.0.1]:1"] {
            ok(&format!("[server]\nlisten = \"{addr}\"\n{auth}"));
        }
    }
    let found = check("", &[(LISTEN, "0.0.0.0:8080")]).problems;
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with(
            "MCPGATE_LISTEN: 0.0.0.0:8080 is not a loopback address, and auth mode \"dev\""
        ),
        "{found:?}"
    );
}

#[test]
fn jwt_may_listen_anywhere_and_asks_for_allowed_hosts_there() {
    let open = format!("[server]\nlisten = \"0.0.0.0:8080\"\n{JWT}");
    let checked = check(&open, &[("K", KEY)]);
    assert_eq!(checked.problems, Vec::<String>::new());
    assert!(matches!(checked.service.auth, AuthConfig::Jwt(_)));
    assert_eq!(checked.warnings.len(), 1);
    assert!(checked.warnings[0].starts_with("server.allowed_hosts: is empty"));

    let named =
        format!("[server]\nlisten = \"0.0.0.0:8080\"\nallowed_hosts = [\"gw.example.com\"]\n{JWT}");
    let checked = check(&named, &[("K", KEY)]);
    assert_eq!(checked.problems, Vec::<String>::new());
    assert_eq!(checked.warnings, Vec::<String>::new());
}

#[test]
fn production_refuses_dev_and_none_but_takes_jwt() {
    let found = problems("[server]\nproduction = true\n");
    assert_eq!(
        found,
        ["server.auth.mode: is \"dev\", which production = true refuses: use mode = \"jwt\""]
    );
    let found = problems("[server]\nproduction = true\n[server.auth]\nmode = \"none\"\n");
    assert_eq!(found.len(), 1);
    assert!(found[0].starts_with("server.auth.mode: is \"none\""));

    let service = ok(&format!("[server]\nproduction = true\n{JWT}"));
    assert!(service.production);
    assert!(matches!(service.auth, AuthConfig::Jwt(_)));
}

#[test]
fn allowed_hosts_take_host_values_only() {
    let found = problems(
        r#"[server]
        allowed_hosts = ["*", "", "https://gw.example.com", "user@gw.example.com", "gw example",
                         "gw.example.com/path", "gw.example.com"]"#,
    );
    let paths: Vec<&str> = found
        .iter()
        .map(|p| p.split_once(": ").expect("path: message").0)
        .collect();
    assert_eq!(
        paths,
        (0..6)
            .map(|i| format!("server.allowed_hosts[{i}]"))
            .collect::<Vec<_>>()
    );
    assert!(found[0].contains("`*` would accept any Host"), "{found:?}");
    assert!(
        found[1].contains("must be a Host header value"),
        "{found:?}"
    );
}

#[test]
fn allowed_origins_take_origins_only_and_never_echo_them() {
    let found = problems(
        r#"[server]
        allowed_origins = ["*", "null", "https://app.example.com/path", "ftp://app.example.com",
                           "https://u:pw1234@app.example.com", "app.example.com",
                           "https://app.example.com?x=1", "", "https://ok.example.com"]"#,
    );
    assert_eq!(found.len(), 8, "{found:?}");
    for (i, problem) in found.iter().enumerate() {
        assert!(
            problem.starts_with(&format!("server.allowed_origins[{i}]: ")),
            "{problem}"
        );
        assert!(!problem.contains("pw1234"), "{problem}");
    }
    assert!(found[0].contains("any web page"));
    assert!(found[1].contains("sandboxed frames"));
    assert!(found[2].contains("must be an origin"));
}

#[test]
fn with_listen_applies_the_loopback_rule_to_the_command_line() {
    let dev = ServiceConfig::default();
    let err = dev
        .clone()
        .with_listen("0.0.0.0:8080".parse().expect("address"))
        .expect_err("dev on every interface");
    assert_eq!(err.problems.len(), 1);
    assert_eq!(err.problems[0].path, "--listen");
    assert!(err.problems[0].message.contains("use mode = \"jwt\""));

    let local = dev
        .with_listen("127.0.0.1:0".parse().expect("address"))
        .expect("loopback");
    assert_eq!(local.listen.port(), 0);

    let jwt = ok(JWT)
        .with_listen("0.0.0.0:9999".parse().expect("address"))
        .expect("jwt may listen anywhere");
    assert_eq!(jwt.listen, SocketAddr::from(([0, 0, 0, 0], 9999)));
}
