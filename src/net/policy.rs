//! What an outbound request may reach: `NetPolicy` and the URL and address checks under it.

use std::{net::IpAddr, time::Duration};

use url::{Host, Url};

use super::{NetError, classify, is_cloud_metadata};
use crate::config::normal_host;

/// Connect deadline: long enough for a slow TLS handshake across continents, short enough
/// that a black-holed address does not hold a caller for minutes.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest wait for the next bytes of a response: a tool call may compute for a while before
/// answering, but a peer that goes silent for longer than this is treated as gone.
pub const DEFAULT_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Rules for one client's outbound requests. `Default` is the safe profile.
#[derive(Debug, Clone, PartialEq)]
pub struct NetPolicy {
    /// Permit plain `http://` (off by default: credentials and tool results travel in clear).
    pub allow_http: bool,
    /// Permit loopback, private and other special-purpose addresses (local experiments).
    /// Cloud metadata endpoints stay blocked even then.
    pub allow_private: bool,
    /// Permit loopback addresses alone (the tests' override for users' own servers): every
    /// other special-purpose range stays blocked.
    pub allow_loopback: bool,
    /// Exact, case-insensitive host allowlist (no suffix or wildcard matching); empty means
    /// any public host.
    pub allowed_hosts: Vec<String>,
    pub connect_timeout: Duration,
    /// Per-read idle deadline, not a whole-response deadline (streams may stay open).
    pub read_timeout: Duration,
    /// Redirect hops followed; 0 refuses every redirect. Each hop is checked like the first URL.
    pub max_redirects: usize,
}

impl Default for NetPolicy {
    fn default() -> Self {
        NetPolicy {
            allow_http: false,
            allow_private: false,
            allow_loopback: false,
            allowed_hosts: Vec::new(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            read_timeout: DEFAULT_READ_TIMEOUT,
            // Redirects re-send bodies and custom headers: none unless configured.
            max_redirects: 0,
        }
    }
}

impl NetPolicy {
    /// Whether a connection to `ip` is permitted under this policy.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), NetError> {
        if self.allow_loopback && ip.is_loopback() {
            return Ok(());
        }
        let range = if self.allow_private {
            is_cloud_metadata(ip).then_some("cloud-metadata")
        } else {
            classify(ip).err().map(|blocked| blocked.range)
        };
        match range {
            Some(range) => Err(NetError::Blocked { addr: ip, range }),
            None => Ok(()),
        }
    }

    /// Whether `host` passes the allowlist. Entries are normalised the way URL hosts are
    /// (case, IDNA, IPv4 spellings, IPv6 forms), so `LOCALHOST`, `0x7f.1` or `[::1]` match
    /// what the URL parser produced; an entry that does not parse as a host never matches.
    pub fn host_allowed(&self, host: &Host) -> bool {
        if self.allowed_hosts.is_empty() {
            return true;
        }
        let Some(host) = normal_host(&host.to_string()) else {
            return false;
        };
        self.allowed_hosts
            .iter()
            .filter_map(|entry| normal_host(entry))
            .any(|entry| entry == host)
    }
}

/// Checks a URL before any request to it: scheme, userinfo, host allowlist, and IP literals
/// (which never reach the resolver, so they are classified here).
pub fn check_url(url: &Url, policy: &NetPolicy) -> Result<(), NetError> {
    match url.scheme() {
        "https" => {}
        "http" if policy.allow_http => {}
        other => {
            return Err(NetError::Scheme {
                scheme: other.to_owned(),
            });
        }
    }
    // `user@host` makes people (and some parsers) read the wrong host, and credentials in a
    // URL end up in logs.
    if !url.username().is_empty() || url.password().is_some() {
        return Err(NetError::UserInfo);
    }
    let host = url.host().ok_or(NetError::MissingHost)?.to_owned();
    if !policy.host_allowed(&host) {
        return Err(NetError::HostNotAllowed {
            host: host.to_string(),
        });
    }
    match host {
        Host::Ipv4(v4) => policy.check_ip(IpAddr::V4(v4)),
        Host::Ipv6(v6) => policy.check_ip(IpAddr::V6(v6)),
        Host::Domain(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests;
