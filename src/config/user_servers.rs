//! `[user_servers]`: remote MCP servers users add for themselves, when the operator allows it.

use std::time::Duration;

use super::ScanMode;

/// Prefix of every user-added server's id; no configured server may use it while
/// `[user_servers]` is enabled.
pub const USER_SERVER_PREFIX: &str = "user-";

/// `[user_servers]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct UserServersConfig {
    /// Off by default: callers may not name server addresses unless the operator opts in.
    pub enabled: bool,
    /// Hosts users may add servers on: `mcp.example.com` exactly, `.example.com` for any
    /// host under it; empty: any public host.
    pub allowed_hosts: Vec<String>,
    /// Most servers one user keeps.
    pub max_per_user: usize,
    /// Most connections to one user's servers open at once on an instance: at the bound the
    /// least recently used idle one is closed for a new one.
    pub max_open_per_user: usize,
    /// A connection unused this long is closed (opened again by the next use).
    pub idle_close: Duration,
    pub connect_timeout: Duration,
    pub call_timeout: Duration,
    /// What a poisoning-scan finding on a user server's tool does (`block` by default).
    pub scan: ScanMode,
    /// **For tests only**: lets a user server be on a loopback address over plain `http`
    /// (the test servers run on `127.0.0.1`). Refused with `[server] production = true`.
    pub allow_loopback: bool,
}

impl Default for UserServersConfig {
    fn default() -> Self {
        UserServersConfig {
            enabled: false,
            allowed_hosts: Vec::new(),
            max_per_user: 5,
            max_open_per_user: 3,
            idle_close: Duration::from_secs(300),
            connect_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(60),
            scan: ScanMode::Block,
            allow_loopback: false,
        }
    }
}

impl UserServersConfig {
    /// Whether `host` (as the URL parser normalised it) is one users may add servers on.
    pub fn host_allowed(&self, host: &str) -> bool {
        user_host_allowed(&self.allowed_hosts, host)
    }
}

/// Whether `host` passes `allowed` (entries `host` exactly, `.suffix` any host under it);
/// an empty list passes every host.
pub fn user_host_allowed(allowed: &[String], host: &str) -> bool {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    allowed.is_empty()
        || allowed.iter().any(|entry| match entry.strip_prefix('.') {
            Some(suffix) => host
                .strip_suffix(suffix)
                .is_some_and(|head| head.ends_with('.') && head.len() > 1),
            None => *entry == host,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_match_exactly_or_under_a_suffix() {
        let config = UserServersConfig {
            allowed_hosts: vec!["mcp.example.com".into(), ".tools.example.org".into()],
            ..UserServersConfig::default()
        };
        assert!(config.host_allowed("mcp.example.com"));
        assert!(config.host_allowed("MCP.example.com."));
        assert!(!config.host_allowed("evil-mcp.example.com"));
        assert!(!config.host_allowed("example.com"));
        assert!(config.host_allowed("a.tools.example.org"));
        assert!(config.host_allowed("a.b.tools.example.org"));
        assert!(!config.host_allowed("tools.example.org"));
        assert!(!config.host_allowed("eviltools.example.org"));
        assert!(UserServersConfig::default().host_allowed("anything.example"));
    }
}
