//! The tool-list cache: recent `tools/list` results keyed by server identity and a hash of
//! the credentials used, bounded in age and in entries. Time is passed in, never read.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use rmcp::model::Tool;

use crate::{
    config::{CacheConfig, Env, ServerConfig, ServerId, TransportConfig},
    digest::sha256_hex,
};

/// Which cached list a connection may use: same server, same transport, same credentials.
/// Only hashes of the transport and credentials are held, so a key can be logged or kept in
/// memory without holding a token (URLs may carry one in their query, too).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CacheKey {
    server: ServerId,
    /// SHA-256 of the URL, or of the command, arguments and working directory.
    transport: String,
    /// SHA-256 of the resolved headers (HTTP) or child environment (stdio): two users with
    /// different tokens may see different tools and must never share a list.
    credentials: String,
}

impl CacheKey {
    /// `connection` is the resolved header or environment pairs as sent upstream; their order
    /// does not matter.
    pub fn new<'a>(
        server: &ServerId,
        transport: &TransportConfig,
        connection: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> CacheKey {
        let transport = match transport {
            TransportConfig::Http(http) => hash_fields(["http", http.url.as_str()]),
            TransportConfig::Stdio(stdio) => {
                let cwd = stdio
                    .cwd
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let head = ["stdio", stdio.command.as_str(), cwd.as_str()];
                hash_fields(
                    head.into_iter()
                        .chain(stdio.args.iter().map(String::as_str)),
                )
            }
            // A factory has no stable identity to hash; one cache serves one configuration,
            // where the server id already names the factory.
            TransportConfig::InProcess(_) => hash_fields(["in-process"]),
        };
        let mut pairs: Vec<(&str, &str)> = connection.into_iter().collect();
        pairs.sort_unstable();
        let credentials = hash_fields(pairs.into_iter().flat_map(|(k, v)| [k, v]));
        CacheKey {
            server: server.clone(),
            transport,
            credentials,
        }
    }

    /// The key of a configured server, with its header (HTTP) or environment (stdio)
    /// references resolved from `env`; a reference that does not resolve counts as its
    /// written form, which no resolved value can equal.
    pub fn for_server(server: &ServerConfig, env: &Env) -> CacheKey {
        let templates = match &server.transport {
            TransportConfig::Http(http) => http.headers.as_slice(),
            TransportConfig::Stdio(stdio) => stdio.env.as_slice(),
            TransportConfig::InProcess(_) => &[],
        };
        let resolved: Vec<(&str, String)> = templates
            .iter()
            .map(|(name, template)| {
                let value = template
                    .resolve(env)
                    .map(|secret| secret.expose().to_owned())
                    .unwrap_or_else(|_| format!("unresolved:{}", template.as_written()));
                (name.as_str(), value)
            })
            .collect();
        CacheKey::new(
            &server.id,
            &server.transport,
            resolved.iter().map(|(k, v)| (*k, v.as_str())),
        )
    }

    pub fn server(&self) -> &ServerId {
        &self.server
    }
}

/// SHA-256 of length-prefixed fields, so `["ab", "c"]` and `["a", "bc"]` differ.
fn hash_fields<'a>(fields: impl IntoIterator<Item = &'a str>) -> String {
    let mut bytes = Vec::new();
    for field in fields {
        bytes.extend_from_slice(&(field.len() as u64).to_be_bytes());
        bytes.extend_from_slice(field.as_bytes());
    }
    sha256_hex(&bytes)
}

#[derive(Debug)]
struct Entry {
    tools: Arc<Vec<Tool>>,
    stored_at: Instant,
}

/// Cached tool lists. Not synchronized: the owner wraps it in the lock it needs.
#[derive(Debug)]
pub struct ToolListCache {
    ttl: Duration,
    max_entries: usize,
    entries: HashMap<CacheKey, Entry>,
}

impl ToolListCache {
    /// A TTL of zero or a cap of zero disables caching.
    pub fn new(config: &CacheConfig) -> ToolListCache {
        ToolListCache {
            ttl: config.ttl,
            max_entries: config.max_entries,
            entries: HashMap::new(),
        }
    }

    /// The list stored under `key` if it is younger than the TTL at `now`.
    pub fn get(&self, key: &CacheKey, now: Instant) -> Option<Arc<Vec<Tool>>> {
        self.entries
            .get(key)
            .filter(|entry| self.is_fresh(entry, now))
            .map(|entry| Arc::clone(&entry.tools))
    }

    /// Stores `tools` under `key` as of `now`. Expired entries go first; if the cache is still
    /// full, the oldest entry makes room. The scan is linear, which is fine for the entry
    /// cap's scale (a thousand) and one insert per upstream listing.
    pub fn insert(&mut self, key: CacheKey, tools: impl Into<Arc<Vec<Tool>>>, now: Instant) {
        if self.max_entries == 0 || self.ttl.is_zero() {
            return;
        }
        let ttl = self.ttl;
        self.entries
            .retain(|_, entry| now.saturating_duration_since(entry.stored_at) < ttl);
        if !self.entries.contains_key(&key) {
            while self.entries.len() >= self.max_entries {
                // Ties on time fall back to key order, so eviction never depends on hashing.
                let oldest = self
                    .entries
                    .iter()
                    .min_by(|a, b| (a.1.stored_at, a.0).cmp(&(b.1.stored_at, b.0)))
                    .map(|(k, _)| k.clone());
                match oldest {
                    Some(oldest) => self.entries.remove(&oldest),
                    None => break,
                };
            }
        }
        let entry = Entry {
            tools: tools.into(),
            stored_at: now,
        };
        self.entries.insert(key, entry);
    }

    pub fn invalidate(&mut self, key: &CacheKey) {
        self.entries.remove(key);
    }

    /// Drops every list of `server`, whatever the credentials: a `tools/list_changed` from
    /// the server makes all of them suspect.
    pub fn invalidate_server(&mut self, server: &ServerId) {
        self.entries.retain(|key, _| &key.server != server);
    }

    /// Entries held, fresh or not yet purged.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn is_fresh(&self, entry: &Entry, now: Instant) -> bool {
        now.saturating_duration_since(entry.stored_at) < self.ttl
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::config::{HttpConfig, HttpKind, InProcess, StdioConfig};

    use super::*;

    fn server(id: &str) -> ServerId {
        ServerId::new(id).expect("valid server id")
    }

    fn http(url: &str) -> TransportConfig {
        TransportConfig::Http(HttpConfig {
            url: url.parse().expect("valid url"),
            kind: HttpKind::Streamable,
            headers: Vec::new(),
        })
    }

    fn stdio(args: &[&str]) -> TransportConfig {
        TransportConfig::Stdio(StdioConfig {
            command: "npx".to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: Vec::new(),
            cwd: Some(PathBuf::from("/srv")),
            sandbox: crate::config::Sandbox::default(),
        })
    }

    fn key(token: &str) -> CacheKey {
        CacheKey::new(
            &server("gh"),
            &http("https://example.com/mcp"),
            [("Authorization", token)],
        )
    }

    fn tools(names: &[&'static str]) -> Vec<Tool> {
        names
            .iter()
            .map(|n| Tool::new(*n, "d", serde_json::Map::new()))
            .collect()
    }

    fn cache(ttl_secs: u64, max_entries: usize) -> ToolListCache {
        ToolListCache::new(&CacheConfig {
            ttl: Duration::from_secs(ttl_secs),
            max_entries,
        })
    }

    #[test]
    fn keys_separate_credentials_and_hold_no_secret() {
        let alice = key("Bearer alice-secret");
        let bob = key("Bearer bob-secret");
        assert_ne!(alice, bob);
        assert_eq!(alice, key("Bearer alice-secret"));
        assert!(!format!("{alice:?}").contains("alice-secret"));

        let a = CacheKey::new(
            &server("x"),
            &http("https://e.com/"),
            [("A", "1"), ("B", "2")],
        );
        let b = CacheKey::new(
            &server("x"),
            &http("https://e.com/"),
            [("B", "2"), ("A", "1")],
        );
        assert_eq!(a, b, "header order does not matter");
        let c = CacheKey::new(&server("x"), &http("https://e.com/"), [("A", "12")]);
        let d = CacheKey::new(&server("x"), &http("https://e.com/"), [("A1", "2")]);
        assert_ne!(c, d, "fields are length-prefixed");
    }

    #[test]
    fn keys_follow_the_transport_identity() {
        let none: [(&str, &str); 0] = [];
        let a = CacheKey::new(&server("fs"), &stdio(&["server-fs", "/a"]), none);
        let b = CacheKey::new(&server("fs"), &stdio(&["server-fs", "/b"]), none);
        let c = CacheKey::new(&server("fs"), &http("https://e.com/"), none);
        let factory = InProcess(Arc::new(|| tokio::io::duplex(64).0));
        let d = CacheKey::new(&server("fs"), &TransportConfig::InProcess(factory), none);
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_ne!(c, d);
        assert_eq!(a.server(), &server("fs"));
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let mut cache = cache(60, 10);
        let t0 = Instant::now();
        cache.insert(key("t"), tools(&["a"]), t0);
        let hit = cache.get(&key("t"), t0 + Duration::from_secs(59));
        assert_eq!(hit.map(|t| t.len()), Some(1));
        assert!(cache.get(&key("t"), t0 + Duration::from_secs(60)).is_none());
        assert!(cache.get(&key("other"), t0).is_none());
    }

    #[test]
    fn the_oldest_entry_is_evicted_when_full() {
        let mut cache = cache(60, 2);
        let t0 = Instant::now();
        cache.insert(key("1"), tools(&["a"]), t0);
        cache.insert(key("2"), tools(&["b"]), t0 + Duration::from_secs(1));
        cache.insert(key("1"), tools(&["c"]), t0 + Duration::from_secs(2));
        assert_eq!(cache.len(), 2, "replacing a key evicts nothing");
        cache.insert(key("3"), tools(&["d"]), t0 + Duration::from_secs(3));
        let now = t0 + Duration::from_secs(3);
        assert!(cache.get(&key("2"), now).is_none());
        assert_eq!(
            cache.get(&key("1"), now).map(|t| t[0].name.to_string()),
            Some("c".into())
        );
        assert!(cache.get(&key("3"), now).is_some());
    }

    #[test]
    fn expired_entries_go_before_fresh_ones() {
        let mut cache = cache(10, 2);
        let t0 = Instant::now();
        cache.insert(key("old"), tools(&["a"]), t0);
        cache.insert(key("new"), tools(&["b"]), t0 + Duration::from_secs(8));
        cache.insert(key("x"), tools(&["c"]), t0 + Duration::from_secs(11));
        assert_eq!(cache.len(), 2);
        assert!(
            cache
                .get(&key("new"), t0 + Duration::from_secs(11))
                .is_some()
        );
    }

    #[test]
    fn invalidation_by_key_and_by_server() {
        let mut cache = cache(60, 10);
        let t0 = Instant::now();
        let other = CacheKey::new(&server("fs"), &http("https://e.com/"), [("A", "1")]);
        cache.insert(key("1"), tools(&["a"]), t0);
        cache.insert(key("2"), tools(&["a"]), t0);
        cache.insert(other.clone(), tools(&["a"]), t0);
        cache.invalidate(&key("1"));
        assert!(cache.get(&key("1"), t0).is_none());
        cache.invalidate_server(&server("gh"));
        assert!(cache.get(&key("2"), t0).is_none());
        assert!(cache.get(&other, t0).is_some());
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn a_zero_cap_or_ttl_disables_caching() {
        let t0 = Instant::now();
        for mut cache in [cache(60, 0), cache(0, 10)] {
            cache.insert(key("t"), tools(&["a"]), t0);
            assert!(cache.get(&key("t"), t0).is_none());
            assert!(cache.is_empty());
        }
    }
}
