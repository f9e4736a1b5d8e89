//! Tests of the `EXTERNAL_MCP_*` environment applied on top of a file or the default.

use super::*;
use crate::config::ServerSource;

#[test]
fn env_json_object_form_takes_every_option_in_camel_case() {
    let json = r#"{"search": {
        "url": "https://search.example.com/mcp", "transport": "streamable-http",
        "headers": {"Authorization": "Bearer ${SEARCH_TOKEN}"},
        "allowedTools": ["find", "fetch", "drop"], "deniedTools": ["drop"],
        "readOnlyTools": ["find"], "writeTools": ["fetch"], "confirm": "all",
        "trustAnnotations": true, "onChange": "block", "scan": "block",
        "allowedHosts": ["search.example.com"], "allowHttp": false, "allowPrivate": false,
        "connectTimeout": "5s", "callTimeout": 20, "toolTimeouts": {"find": "250ms"}
    }}"#;
    let env = env(&[(external_env::SERVERS_JSON, json), ("SEARCH_TOKEN", "s")]);
    let loaded = load_env(&env).expect("loads");
    assert_eq!(
        ids(&loaded),
        ["search"],
        "servers from the environment replace the default's demo server"
    );
    let s = server(&loaded, "search");
    assert!(s.exposes("find") && s.exposes("fetch") && !s.exposes("drop"));
    assert_eq!(
        (s.read_only_tools.as_slice(), s.write_tools.as_slice()),
        (&["find".to_owned()][..], &["fetch".to_owned()][..])
    );
    assert_eq!(s.confirm, Confirm::All);
    assert!(s.trust_annotations);
    assert_eq!((s.on_change, s.scan), (OnChange::Block, ScanMode::Block));
    assert_eq!(s.connect_timeout, Some(Duration::from_secs(5)));
    assert_eq!(s.call_timeout, Some(Duration::from_secs(20)));
    assert_eq!(
        s.tool_timeouts,
        [("find".to_owned(), Duration::from_millis(250))]
    );
    let TransportConfig::Http(http) = &s.transport else {
        panic!("search is http");
    };
    assert_eq!(http.kind, HttpKind::Streamable);
}

#[test]
fn env_json_array_form_uses_id_or_name_and_normalizes() {
    let json = r#"[{"id": "time", "transport": "stdio", "command": "t"},
                   {"name": "My Notes", "command": "n", "enabled": true},
                   {"id": "off", "command": "o", "enabled": false}]"#;
    let text = "[servers.files]\ncommand = \"f\"\n";
    let loaded =
        load_file("c.toml", text, &env(&[(external_env::SERVERS_JSON, json)])).expect("loads");
    assert_eq!(ids(&loaded), ["files", "my-notes", "time"]);
    assert_eq!(
        loaded.warnings,
        ["EXTERNAL_MCP_SERVERS_JSON[1]: server id `My Notes` normalized to `my-notes`"]
    );
}

#[test]
fn env_json_problems_name_the_variable_and_field() {
    let json = r#"[{"id": "files", "command": "x"},
                   {"id": "a", "command": "x", "allowed_tools": []},
                   {"command": "x"},
                   {"id": "b", "name": "c", "command": "x"},
                   {"id": "d", "url": "http://example.com", "allowHttp": "yes"},
                   {"id": "e", "url": "http://example.com"}]"#;
    let text = "[servers.files]\ncommand = \"f\"\nenabled = false\n";
    let err = load_file("c.toml", text, &env(&[(external_env::SERVERS_JSON, json)]))
        .expect_err("invalid");
    assert_eq!(
        paths(&err),
        [
            "EXTERNAL_MCP_SERVERS_JSON[1]",
            "EXTERNAL_MCP_SERVERS_JSON[2]",
            "EXTERNAL_MCP_SERVERS_JSON[3]",
            "EXTERNAL_MCP_SERVERS_JSON[4]",
            "EXTERNAL_MCP_SERVERS_JSON[0]",
            "EXTERNAL_MCP_SERVERS_JSON[5].url",
        ]
    );
    let messages: Vec<&str> = err.problems.iter().map(|p| p.message.as_str()).collect();
    assert!(
        messages[0].contains("unknown field `allowed_tools`"),
        "{}",
        messages[0]
    );
    assert!(
        messages[4].contains("already defined by `servers.files`"),
        "{}",
        messages[4]
    );
    assert!(
        messages[5].contains("set `allowHttp` to true"),
        "{}",
        messages[5]
    );

    // The demo is not there to clash with: an environment server may be called `demo`.
    let loaded = load_env(&env(&[(
        external_env::SERVERS_JSON,
        r#"{"demo": {"command": "x"}}"#,
    )]))
    .expect("no clash");
    let demo = server(&loaded, "demo");
    assert_eq!(demo.source, ServerSource::Environment);
    let TransportConfig::Stdio(stdio) = &demo.transport else {
        panic!("demo is stdio");
    };
    assert_eq!(stdio.command, "x");

    let err = load_env(&env(&[(
        external_env::SERVERS_JSON,
        r#"{"x": {"id": "x", "command": "c"}}"#,
    )]))
    .expect_err("id in object form");
    assert_eq!(paths(&err), ["EXTERNAL_MCP_SERVERS_JSON.x.id"]);

    for bad in [
        "nope",
        "{",
        "[1]",
        r#"{"a": {"command": "x"}, "a": {"command": "y"}}"#,
    ] {
        assert!(
            load_env(&env(&[(external_env::SERVERS_JSON, bad)])).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn env_enabled_false_ignores_the_servers_json() {
    let pairs = [
        (external_env::ENABLED, "0"),
        (external_env::SERVERS_JSON, "not even json"),
    ];
    let loaded = load_env(&env(&pairs)).expect("ignored");
    assert_eq!(ids(&loaded), ["demo"], "no other server: the demo stays");
    assert_eq!(
        loaded.warnings,
        ["EXTERNAL_MCP_SERVERS_JSON: ignored because EXTERNAL_MCP_ENABLED is false"]
    );

    let json = r#"{"x": {"command": "c"}}"#;
    for on in ["true", "1", "TRUE", ""] {
        let loaded = load_env(&env(&[
            (external_env::ENABLED, on),
            (external_env::SERVERS_JSON, json),
        ]))
        .expect(on);
        assert_eq!(ids(&loaded), ["x"], "{on}");
    }
    let err = load_env(&env(&[(external_env::ENABLED, "yes")])).expect_err("not a bool");
    assert_eq!(paths(&err), [external_env::ENABLED]);
}

#[test]
fn env_limits_override_the_file_and_are_bounded() {
    let text = "[limits]\nconnect_timeout = 3\ncall_timeout = 4\n";
    let pairs = [
        (external_env::CONNECT_TIMEOUT, "500ms"),
        (external_env::CALL_TIMEOUT, "2.5"),
        (external_env::MAX_RESULT_BYTES, "65536"),
    ];
    let loaded = load_file("c.toml", text, &env(&pairs)).expect("loads");
    let limits = &loaded.config.limits;
    assert_eq!(limits.connect_timeout, Duration::from_millis(500));
    assert_eq!(limits.call_timeout, Duration::from_millis(2500));
    assert_eq!(limits.max_result_bytes, 65536);

    let pairs = [
        (external_env::CONNECT_TIMEOUT, "0"),
        (external_env::CALL_TIMEOUT, "soon"),
        (external_env::MAX_RESULT_BYTES, "1MB"),
    ];
    let err = load_env(&env(&pairs)).expect_err("invalid");
    assert_eq!(
        paths(&err),
        [
            external_env::CONNECT_TIMEOUT,
            external_env::CALL_TIMEOUT,
            external_env::MAX_RESULT_BYTES
        ]
    );
    let err = load_env(&env(&[(external_env::MAX_RESULT_BYTES, "512")])).expect_err("too small");
    assert!(err.problems[0].message.contains("between 1024 and"));
}
