//! Tests of the raw types: field spellings per source, transport names, duplicate keys.

use super::*;

#[test]
fn env_server_uses_camel_case_and_toml_server_snake_case() {
    let json = r#"{"id": "x", "url": "https://a.example", "allowedTools": ["t"],
                   "toolTimeouts": {"t": "5s"}, "readOnlyTools": ["t"]}"#;
    let (id, name, server) = serde_json::from_str::<EnvServer>(json)
        .expect("camelCase parses")
        .into_parts();
    assert_eq!(id.as_deref(), Some("x"));
    assert_eq!(name, None);
    assert_eq!(server.allowed_tools, Some(vec!["t".to_owned()]));
    assert!(server.tool_timeouts.is_some_and(|t| t.contains_key("t")));

    let err = serde_json::from_str::<EnvServer>(r#"{"allowed_tools": []}"#)
        .expect_err("snake_case is unknown in JSON");
    assert!(
        err.to_string().contains("unknown field `allowed_tools`"),
        "{err}"
    );

    let err = toml::from_str::<RawServer>("allowedTools = []").expect_err("camel in TOML");
    assert!(
        err.to_string().contains("unknown field `allowedTools`"),
        "{err}"
    );
}

#[test]
fn transport_names_and_aliases() {
    for (text, want) in [
        ("stdio", RawTransport::Stdio),
        ("streamable-http", RawTransport::StreamableHttp),
        ("http", RawTransport::StreamableHttp),
        ("streamableHttp", RawTransport::StreamableHttp),
        ("sse", RawTransport::Sse),
        ("auto", RawTransport::Auto),
    ] {
        let got: RawTransport = serde_json::from_str(&format!("\"{text}\"")).expect(text);
        assert_eq!(got, want);
    }
    assert!(serde_json::from_str::<RawTransport>("\"websocket\"").is_err());
}

#[test]
fn unique_map_rejects_duplicate_keys_and_keeps_order() {
    let map: UniqueMap<u8> = serde_json::from_str(r#"{"b": 1, "a": 2}"#).expect("parses");
    assert_eq!(map.0, [("b".to_owned(), 1), ("a".to_owned(), 2)]);
    let err = serde_json::from_str::<UniqueMap<u8>>(r#"{"a": 1, "a": 2}"#).expect_err("dup");
    assert!(err.to_string().contains("duplicate key `a`"), "{err}");
}
