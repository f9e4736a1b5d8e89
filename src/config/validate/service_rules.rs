//! Rules for `[server]`: where `mcpgate serve` listens (file, `MCPGATE_LISTEN`, `--listen`),
//! its HTTP bounds, accepted Host and Origin values, and which auth modes may face a network.

use std::{net::SocketAddr, ops::RangeInclusive, path::Path, time::Duration};

use url::Url;

use super::{Report, auth_rules, count, duration, resource_rules};
use crate::config::{AuthConfig, ConfigError, Env, ServiceConfig, raw::RawService};

/// Wins over `listen` in the file.
const LISTEN: &str = "MCPGATE_LISTEN";

/// Request bodies are read whole before parsing: 1 KiB holds any small JSON request, and
/// 64 MiB bounds what one request can make us buffer.
const MAX_BODY_BYTES_RANGE: RangeInclusive<usize> = 1024..=64 * 1024 * 1024;
/// One request: under a second, a tool call behind it rarely completes; past an hour a
/// caller cannot tell a wait from a hang.
const REQUEST_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(3600);
/// Headers: honest clients send them in one go; a slow link needs seconds, not minutes.
const HEADER_READ_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(300);
/// Shutdown: zero stops at once; process supervisors kill long before five minutes
/// (Kubernetes after 30 s by default), so a longer grace is never served.
const SHUTDOWN_GRACE_RANGE: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(300);
/// Serving threads: one at least, and no more than the lanes a process runs.
const THREADS_RANGE: RangeInclusive<usize> = 1..=crate::lane::MAX_LANES;
/// An MCP session's idle time: a client gone without closing its session holds a task and
/// a place under the session cap until then, so a day at most.
const MCP_SESSION_IDLE_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(1)..=Duration::from_secs(24 * 3600);

const HOST_FORM: &str = "must be a Host header value: a name or address with an optional port \
                         (`gateway.example.com`, `gateway.example.com:8080`, `[::1]:8080`)";
const ORIGIN_FORM: &str = "must be an origin: http or https, a host and an optional port, \
                           nothing else (`https://app.example.com`)";

/// The validated `[server]` with the environment applied; relative key paths are resolved
/// against `base`. Broken fields keep their defaults (the report fails the load anyway).
pub(super) fn validate(
    raw: &RawService,
    env: &Env,
    (base, single_tenant): (&Path, bool),
    report: &mut Report,
) -> ServiceConfig {
    let d = ServiceConfig::default();
    let (listen, listen_path) = listen(raw, env, report);
    let production = raw.production.unwrap_or(d.production);
    let public_url = resource_rules::public_url(raw.public_url.as_deref(), production, report);
    let auth = auth_rules::validate(
        raw.auth.as_ref(),
        (production, single_tenant),
        (env, public_url.as_ref()),
        base,
        report,
    );
    if production && !matches!(auth, AuthConfig::Jwt(_)) {
        report.problem(
            "server.auth.mode",
            format!(
                "is {}, which production = true refuses: use mode = \"jwt\"",
                mode_name(&auth)
            ),
        );
    }
    if let Err(message) = loopback_only(&auth, listen) {
        report.problem(listen_path, message);
    }
    let allowed_hosts = hosts(raw.allowed_hosts.as_deref().unwrap_or_default(), report);
    if allowed_hosts.is_empty() && !is_loopback(listen) {
        report.warn(
            "server.allowed_hosts",
            "is empty, so only loopback Host names are accepted, but listen is not a loopback \
             address: list the names clients use to reach the gateway",
        );
    }
    let apps_listen = raw
        .apps_listen
        .as_deref()
        .and_then(|text| apps_listen(text, &auth, report));
    let apps_origin = raw
        .apps_origin
        .as_deref()
        .and_then(|text| match Url::parse(text) {
            Ok(url) if is_origin(&url) => Some(url.origin().ascii_serialization()),
            _ => {
                report.problem("server.apps_origin", ORIGIN_FORM);
                None
            }
        });
    if let (Some(apps), Some(page)) = (&apps_origin, &public_url)
        && *apps == page.origin().ascii_serialization()
    {
        report.problem(
            "server.apps_origin",
            "is the gateway's own origin (public_url): apps must run on another origin, or \
             they could reach the page and its token",
        );
    }
    ServiceConfig {
        listen,
        public_url,
        auth,
        production,
        max_body_bytes: raw
            .max_body_bytes
            .and_then(|n| count(n, &MAX_BODY_BYTES_RANGE, "server.max_body_bytes", report))
            .unwrap_or(d.max_body_bytes),
        request_timeout: raw
            .request_timeout
            .as_ref()
            .and_then(|r| duration(r, &REQUEST_TIMEOUT_RANGE, "server.request_timeout", report))
            .unwrap_or(d.request_timeout),
        header_read_timeout: raw
            .header_read_timeout
            .as_ref()
            .and_then(|r| {
                duration(
                    r,
                    &HEADER_READ_TIMEOUT_RANGE,
                    "server.header_read_timeout",
                    report,
                )
            })
            .unwrap_or(d.header_read_timeout),
        shutdown_grace: raw
            .shutdown_grace
            .as_ref()
            .and_then(|r| duration(r, &SHUTDOWN_GRACE_RANGE, "server.shutdown_grace", report))
            .unwrap_or(d.shutdown_grace),
        mcp_session_idle: raw
            .mcp_session_idle
            .as_ref()
            .and_then(|r| {
                duration(
                    r,
                    &MCP_SESSION_IDLE_RANGE,
                    "server.mcp_session_idle",
                    report,
                )
            })
            .unwrap_or(d.mcp_session_idle),
        allowed_hosts,
        allowed_origins: origins(
            raw.allowed_origins.as_deref().unwrap_or_default(),
            "server.allowed_origins",
            report,
        ),
        log_json: raw.log_json.unwrap_or(d.log_json),
        threads: raw
            .threads
            .and_then(|n| count(n, &THREADS_RANGE, "server.threads", report))
            .unwrap_or(d.threads),
        apps_listen,
        apps_origin,
    }
}

impl ServiceConfig {
    /// These settings listening on `listen` instead: the command line's `--listen`, which
    /// wins over the file and `MCPGATE_LISTEN`, checked by the same rule (auth modes dev and
    /// none bind loopback only).
    pub fn with_listen(self, listen: SocketAddr) -> Result<ServiceConfig, ConfigError> {
        let mut report = Report::default();
        if let Err(message) = loopback_only(&self.auth, listen) {
            report.problem("--listen", message);
        }
        report.finish()?;
        Ok(ServiceConfig { listen, ..self })
    }
}

/// The address and the path to blame for it: `MCPGATE_LISTEN`, else the file, else the
/// default.
fn listen(raw: &RawService, env: &Env, report: &mut Report) -> (SocketAddr, &'static str) {
    let (text, path) = match (env.setting(LISTEN), raw.listen.as_deref()) {
        (Some(text), _) => (text, LISTEN),
        (None, Some(text)) => (text, "server.listen"),
        (None, None) => return (ServiceConfig::default().listen, "server.listen"),
    };
    match text.parse() {
        Ok(addr) => (addr, path),
        Err(_) => {
            report.problem(
                path,
                "must be an IP address and port, such as \"127.0.0.1:8080\" or \
                 \"[::1]:8080\" (no host names: a name can resolve to a public address)",
            );
            (ServiceConfig::default().listen, path)
        }
    }
}

/// `[server] apps_listen`: an IP address and port, loopback unless JWTs guard the gateway
/// (the sandbox serves no data, but a page hosting apps is only useful where the page is).
fn apps_listen(text: &str, auth: &AuthConfig, report: &mut Report) -> Option<SocketAddr> {
    let at = "server.apps_listen";
    let Ok(addr) = text.parse::<SocketAddr>() else {
        report.problem(
            at,
            "must be an IP address and port, such as \"127.0.0.1:8081\" (port 0: the system \
             picks one)",
        );
        return None;
    };
    if let Err(message) = loopback_only(auth, addr) {
        report.problem(at, message);
        return None;
    }
    Some(addr)
}

/// Dev mode prints its token to whoever reads the log, and mode none has no token at all:
/// neither may face a network.
fn loopback_only(auth: &AuthConfig, listen: SocketAddr) -> Result<(), String> {
    if matches!(auth, AuthConfig::Jwt(_)) || is_loopback(listen) {
        return Ok(());
    }
    Err(format!(
        "{listen} is not a loopback address, and auth mode {} binds loopback only: use \
         mode = \"jwt\" in [server.auth] (or set MCPGATE_JWT_SECRET)",
        mode_name(auth)
    ))
}

fn is_loopback(listen: SocketAddr) -> bool {
    listen.ip().to_canonical().is_loopback()
}

fn mode_name(auth: &AuthConfig) -> &'static str {
    match auth {
        AuthConfig::Dev => "\"dev\"",
        AuthConfig::None => "\"none\"",
        AuthConfig::Jwt(_) => "\"jwt\"",
    }
}

/// Host header values, lowercased (hosts compare without case). Messages never quote an
/// entry, which could hold control characters.
fn hosts(items: &[String], report: &mut Report) -> Vec<String> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("server.allowed_hosts[{i}]");
        if item == "*" {
            report.problem(
                at,
                "`*` would accept any Host and undo the DNS-rebinding protection: list the \
                 names clients use",
            );
            continue;
        }
        match item.parse::<http::uri::Authority>() {
            Ok(authority) if !item.contains('@') && !authority.host().is_empty() => {
                out.push(item.to_ascii_lowercase());
            }
            _ => report.problem(at, HOST_FORM),
        }
    }
    out
}

/// Origin values in the form browsers send (`scheme://host[:port]`, default port left out),
/// so that the HTTP layer compares them as text.
/// Exact browser origins listed at `field`, in their serialized form.
pub(in crate::config) fn origins(
    items: &[String],
    field: &str,
    report: &mut Report,
) -> Vec<String> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let message = match item.as_str() {
            "*" => {
                "`*` would let any web page call the gateway in its visitors' name: list \
                    the origins of your pages"
            }
            "null" => {
                "`null` is the origin of sandboxed frames and local files, which any \
                       page can produce: list real origins"
            }
            _ => match Url::parse(item) {
                Ok(url) if is_origin(&url) => {
                    out.push(url.origin().ascii_serialization());
                    continue;
                }
                _ => ORIGIN_FORM,
            },
        };
        report.problem(at, message);
    }
    out
}

fn is_origin(url: &Url) -> bool {
    matches!(url.scheme(), "http" | "https")
        && url.host().is_some()
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none()
        && url.fragment().is_none()
}

#[cfg(test)]
mod tests;
