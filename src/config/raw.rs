//! Raw serde types, exactly as written in `mcpgate.toml`, `mcpServers` JSON and
//! `EXTERNAL_MCP_SERVERS_JSON`; unknown fields are errors.
//!
//! # The `mcpgate.toml` file
//!
//! ```toml
//! # Every section and every field is optional; the values shown are the defaults.
//! [limits]
//! connect_timeout = "30s"          # connect + initialize one upstream
//! call_timeout = "60s"             # one tool call
//! list_timeout = "10s"             # listing one upstream's tools during a refresh
//! max_result_bytes = 1048576       # largest tool result passed on (1 KiB ..= 256 MiB)
//! max_line_bytes = 4194304         # longest line a stdio upstream may print (1 KiB ..= 256 MiB)
//! max_stderr_line_bytes = 4096     # stderr kept per line in the log (64 B ..= 64 KiB)
//!
//! [cache]                          # the tool-list cache
//! ttl = "60s"                      # 0 ..= 24h; 0 means every refresh asks the upstream
//! max_entries = 1000               # 1 ..= 100000
//!
//! [reconnect]                      # bounded exponential backoff after a failure
//! initial_delay = "500ms"
//! max_delay = "30s"
//! max_attempts = 8                 # 0 ..= 1000
//!
//! # A local server: a program started without a shell, with exactly this environment.
//! [servers.time]
//! command = "mcp-server-time"
//! args = ["--local-timezone", "UTC"]
//! env = { TZ = "UTC" }
//! cwd = "/srv/time"
//!
//! # A remote server.
//! [servers.github]
//! url = "https://api.githubcopilot.com/mcp/"
//! transport = "auto"               # auto (default) | streamable-http (alias http) | sse
//! headers = { Authorization = "Bearer ${GITHUB_TOKEN}" }
//! allowed_hosts = ["api.githubcopilot.com"]   # default: the URL's own host
//! allow_private = false            # permit loopback/private addresses
//! allow_http = false               # permit plain http:// (loopback with allow_private: always)
//! enabled = true
//! # Options for every server:
//! allowed_tools = ["search_repositories", "create_issue"]  # default: all tools
//! denied_tools = []
//! confirm = "writes"               # all | writes | none: which calls need a confirmation
//! read_only_tools = ["search_repositories"]
//! write_tools = ["create_issue"]
//! trust_annotations = false        # believe upstream readOnlyHint/destructiveHint
//! on_change = "warn"               # warn | block: a pinned tool's definition changed
//! scan = "warn"                    # warn | block: a tool description looks like an injection
//! connect_timeout = "10s"          # overrides [limits]
//! call_timeout = "30s"
//!
//! [servers.github.tool_timeouts]   # per tool, by upstream tool name
//! search_repositories = "2m"
//! ```
//!
//! Durations are a number of seconds (`30`, `0.5`) or a string with a unit: `"500ms"`,
//! `"30s"`, `"2m"`, `"1h"`. Header and `env` values may reference the gateway's environment
//! as `${NAME}`; secrets must be written that way, never literally. `transport` defaults to
//! `auto` because most servers speak Streamable HTTP and some still speak only the legacy
//! SSE transport: the user pastes a URL without knowing which, and the cost is one refused
//! request to an SSE-only server.

use std::{collections::BTreeMap, fmt, marker::PhantomData};

use serde::{
    Deserialize, Deserializer,
    de::{MapAccess, Visitor},
};

use super::duration::RawDuration;

/// The top level of `mcpgate.toml`. Servers stay untyped here so that each one is
/// deserialized on its own and every broken server is reported, not only the first.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFile {
    #[serde(default)]
    pub limits: RawLimits,
    #[serde(default)]
    pub cache: RawCache,
    #[serde(default)]
    pub reconnect: RawReconnect,
    #[serde(default)]
    pub servers: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLimits {
    pub connect_timeout: Option<RawDuration>,
    pub call_timeout: Option<RawDuration>,
    pub list_timeout: Option<RawDuration>,
    pub max_result_bytes: Option<u64>,
    pub max_line_bytes: Option<u64>,
    pub max_stderr_line_bytes: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCache {
    pub ttl: Option<RawDuration>,
    pub max_entries: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReconnect {
    pub initial_delay: Option<RawDuration>,
    pub max_delay: Option<RawDuration>,
    pub max_attempts: Option<u64>,
}

/// `transport` of a server; `stdio` is accepted (with `command`) so that imported and
/// environment configurations can say it explicitly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RawTransport {
    Stdio,
    #[serde(alias = "http", alias = "streamableHttp")]
    StreamableHttp,
    Sse,
    Auto,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawConfirm {
    All,
    Writes,
    None,
}

/// `on_change` and `scan`: what to do when something looks wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RawReaction {
    Warn,
    Block,
}

/// Declares the server fields once and derives both spellings from that one list: the TOML
/// file uses snake_case, `EXTERNAL_MCP_SERVERS_JSON` uses camelCase (and may carry `id` or
/// `name` when it is an array).
macro_rules! server_fields {
    ($($field:ident: $ty:ty,)*) => {
        /// One server as written, every field optional (validation decides what is required).
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawServer {
            $(pub $field: Option<$ty>,)*
        }

        /// One server of `EXTERNAL_MCP_SERVERS_JSON`.
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "camelCase")]
        pub struct EnvServer {
            pub id: Option<String>,
            pub name: Option<String>,
            $(pub $field: Option<$ty>,)*
        }

        impl EnvServer {
            /// Splits off `id` and `name`, which only the array form uses.
            pub fn into_parts(self) -> (Option<String>, Option<String>, RawServer) {
                (self.id, self.name, RawServer { $($field: self.$field,)* })
            }
        }
    };
}

server_fields! {
    enabled: bool,
    transport: RawTransport,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    cwd: String,
    url: String,
    headers: BTreeMap<String, String>,
    allow_private: bool,
    allow_http: bool,
    allowed_hosts: Vec<String>,
    allowed_tools: Vec<String>,
    denied_tools: Vec<String>,
    read_only_tools: Vec<String>,
    write_tools: Vec<String>,
    confirm: RawConfirm,
    trust_annotations: bool,
    on_change: RawReaction,
    scan: RawReaction,
    connect_timeout: RawDuration,
    call_timeout: RawDuration,
    tool_timeouts: BTreeMap<String, RawDuration>,
}

/// A JSON object kept in written order that rejects duplicate keys: `serde_json` would keep
/// the last one silently, and a server pasted twice under one name would vanish unnoticed.
#[derive(Debug)]
pub struct UniqueMap<V>(pub Vec<(String, V)>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for UniqueMap<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct UniqueVisitor<V>(PhantomData<V>);

        impl<'de, V: Deserialize<'de>> Visitor<'de> for UniqueVisitor<V> {
            type Value = UniqueMap<V>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries: Vec<(String, V)> = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, V>()? {
                    if entries.iter().any(|(k, _)| *k == key) {
                        return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
                    }
                    entries.push((key, value));
                }
                Ok(UniqueMap(entries))
            }
        }

        deserializer.deserialize_map(UniqueVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
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
}
