//! Rules for `[user_servers]`: bounds in range, hosts that parse, a key to seal users' header
//! secrets with, and the tests' loopback override kept out of production.

use std::{ops::RangeInclusive, time::Duration};

use super::{Report, count, duration_or};
use crate::config::{
    OAuthConfig, ScanMode, ServerConfig, ServiceConfig, USER_SERVER_PREFIX, UserServersConfig,
    normal_host,
    raw::{RawReaction, RawUserServers},
};

const PER_USER_RANGE: RangeInclusive<usize> = 1..=100;
const OPEN_RANGE: RangeInclusive<usize> = 1..=100;
const IDLE_RANGE: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(86_400);
const CONNECT_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(100)..=Duration::from_secs(120);
const CALL_RANGE: RangeInclusive<Duration> = Duration::from_secs(1)..=Duration::from_secs(3600);

pub(super) fn section(raw: &RawUserServers, report: &mut Report) -> UserServersConfig {
    let d = UserServersConfig::default();
    let time = |value: &Option<crate::config::duration::RawDuration>,
                field: &str,
                range: &RangeInclusive<Duration>,
                default: Duration,
                report: &mut Report| {
        duration_or(
            value.as_ref(),
            ("user_servers", field),
            range,
            default,
            report,
        )
    };
    let mut allowed_hosts = Vec::new();
    for (i, entry) in raw
        .allowed_hosts
        .as_deref()
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let (dot, name) = match entry.strip_prefix('.') {
            Some(rest) => (".", rest),
            None => ("", entry.as_str()),
        };
        match normal_host(name) {
            Some(host) if !(dot == "." && host.starts_with('[')) => {
                allowed_hosts.push(format!("{dot}{host}"));
            }
            _ => report.problem(
                format!("user_servers.allowed_hosts[{i}]"),
                "must be a host name (`mcp.example.com`), or `.example.com` for any host \
                 under it",
            ),
        }
    }
    UserServersConfig {
        enabled: raw.enabled.unwrap_or(d.enabled),
        allowed_hosts,
        max_per_user: raw
            .max_per_user
            .and_then(|v| count(v, &PER_USER_RANGE, "user_servers.max_per_user", report))
            .unwrap_or(d.max_per_user),
        max_open_per_user: raw
            .max_open_per_user
            .and_then(|v| count(v, &OPEN_RANGE, "user_servers.max_open_per_user", report))
            .unwrap_or(d.max_open_per_user),
        idle_close: time(
            &raw.idle_close,
            "idle_close",
            &IDLE_RANGE,
            d.idle_close,
            report,
        ),
        connect_timeout: time(
            &raw.connect_timeout,
            "connect_timeout",
            &CONNECT_RANGE,
            d.connect_timeout,
            report,
        ),
        call_timeout: time(
            &raw.call_timeout,
            "call_timeout",
            &CALL_RANGE,
            d.call_timeout,
            report,
        ),
        scan: match raw.scan.unwrap_or(RawReaction::Block) {
            RawReaction::Warn => ScanMode::Warn,
            RawReaction::Block => ScanMode::Block,
        },
        allow_loopback: raw.allow_loopback.unwrap_or(false),
    }
}

/// What the section needs of the rest: keys to seal header secrets, no configured server
/// under the users' prefix, and no loopback override in production.
pub(super) fn check(
    config: &UserServersConfig,
    servers: &[ServerConfig],
    oauth: &OAuthConfig,
    service: &ServiceConfig,
    report: &mut Report,
) {
    if config.allow_loopback && service.production {
        report.problem(
            "user_servers.allow_loopback",
            "is for tests only and is refused with `[server] production = true`",
        );
    }
    if !config.enabled {
        return;
    }
    if oauth.keys.is_empty() {
        report.problem(
            "user_servers.enabled",
            "needs `[oauth] keys`: the headers users give their servers are secrets, kept \
             only sealed under those keys",
        );
    }
    for server in servers {
        if server.id.as_str().starts_with(USER_SERVER_PREFIX) {
            report.problem(
                format!("servers.{}", server.id),
                format!(
                    "server ids starting with `{USER_SERVER_PREFIX}` are reserved for servers \
                     users add while `[user_servers]` is enabled"
                ),
            );
        }
    }
    if config.allow_loopback {
        report.warn(
            "user_servers.allow_loopback",
            "is on: users may add servers on loopback addresses over plain http (tests only)",
        );
    }
}
