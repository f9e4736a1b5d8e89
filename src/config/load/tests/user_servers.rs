//! `[user_servers]`: off by default, its bounds, what it needs of `[oauth]`, the reserved
//! prefix, and the tests' loopback override refused in production.

use std::time::Duration;

use crate::config::{ScanMode, UserServersConfig};

use super::*;

const KEYS: &str = "[oauth]\nkeys = [\"${MCPGATE_OAUTH_KEY}\"]\n";

#[test]
fn off_by_default_and_read_when_written() {
    let loaded = load_file("c.toml", "", &Env::default()).expect("loads");
    assert_eq!(loaded.config.user_servers, UserServersConfig::default());
    assert!(!loaded.config.user_servers.enabled);
    assert_eq!(loaded.config.user_servers.scan, ScanMode::Block);
    let text = format!(
        "{KEYS}[user_servers]\nenabled = true\nallowed_hosts = [\"MCP.Example.com\", \".tools.example.org\"]\n\
         max_per_user = 3\nmax_open_per_user = 2\nidle_close = \"2m\"\nconnect_timeout = \"5s\"\n\
         call_timeout = \"30s\"\nscan = \"warn\"\n"
    );
    let loaded = load_file("c.toml", &text, &Env::default()).expect("loads");
    let got = &loaded.config.user_servers;
    assert!(got.enabled);
    assert_eq!(got.allowed_hosts, ["mcp.example.com", ".tools.example.org"]);
    assert_eq!((got.max_per_user, got.max_open_per_user), (3, 2));
    assert_eq!(got.idle_close, Duration::from_secs(120));
    assert_eq!(got.connect_timeout, Duration::from_secs(5));
    assert_eq!(got.call_timeout, Duration::from_secs(30));
    assert_eq!(got.scan, ScanMode::Warn);
    assert!(!got.allow_loopback);
}

#[test]
fn what_it_needs_and_what_it_refuses() {
    let joined = problems(
        "[user_servers]\nenabled = true\nmax_per_user = 0\nallowed_hosts = [\"a b\", \".[::1]\"]\n\
         [servers.user-docs]\nurl = \"https://docs.example.com/mcp\"\n",
    )
    .join("\n");
    for expected in [
        "user_servers.enabled: needs `[oauth] keys`",
        "user_servers.max_per_user: must be between 1 and 100",
        "user_servers.allowed_hosts[0]: must be a host name",
        "user_servers.allowed_hosts[1]: must be a host name",
        "servers.user-docs: server ids starting with `user-` are reserved",
    ] {
        assert!(joined.contains(expected), "{expected} in:\n{joined}");
    }
    // The prefix is free while the feature is off.
    let off = "[servers.user-docs]\nurl = \"https://docs.example.com/mcp\"\n";
    load_file("c.toml", off, &Env::default()).expect("loads while off");
}

#[test]
fn the_loopback_override_is_refused_in_production() {
    let production = format!(
        "{KEYS}[user_servers]\nenabled = true\nallow_loopback = true\n\
         [server]\nproduction = true\n[server.auth]\nmode = \"jwt\"\nalgorithms = [\"HS256\"]\n\
         secret = \"${{JWT_SECRET}}\"\nissuer = \"https://issuer.test/\"\naudience = \"mcpgate\"\n"
    );
    let env = env(&[("JWT_SECRET", "0123456789abcdef0123456789abcdef-long")]);
    let err = load_file("c.toml", &production, &env).expect_err("refused");
    assert!(
        paths(&err).contains(&"user_servers.allow_loopback"),
        "{:?}",
        err.problems
    );
    let testing = production.replace("production = true", "production = false");
    let loaded = load_file("c.toml", &testing, &env).expect("loads outside production");
    assert!(loaded.config.user_servers.allow_loopback);
    assert!(
        loaded
            .warnings
            .iter()
            .any(|w| w.contains("user_servers.allow_loopback")),
        "{:?}",
        loaded.warnings
    );
}
