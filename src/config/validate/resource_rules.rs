//! Rules for what makes `/mcp` an OAuth 2.1 protected resource: `[server] public_url` (where
//! clients reach the gateway) and, in JWT mode, `[server.auth] authorization_servers` and
//! `scopes`.

use url::{Host, Url};

use super::Report;
use crate::config::server_rules::is_loopback;
use crate::config::{ProtectedResourceConfig, raw::RawAuth};

/// Scopes a client is told to ask for: a handful in practice; 32 bounds the challenge header.
const MAX_SCOPES: usize = 32;
/// Authorization servers named in the metadata; clients try them in order.
const MAX_AUTHORIZATION_SERVERS: usize = 8;

/// `[server] public_url`: an origin (scheme, host, port), https unless its host is loopback,
/// and https in production. Returned without the trailing `/`.
pub(super) fn public_url(text: Option<&str>, production: bool, report: &mut Report) -> Option<Url> {
    let text = text?;
    let at = "server.public_url";
    let url = match Url::parse(text) {
        Ok(url) => url,
        Err(_) => {
            report.problem(at, "is not a URL: write the origin clients use, such as \"https://gateway.example.com\"");
            return None;
        }
    };
    if !(url.username().is_empty()
        && url.password().is_none()
        && matches!(url.path(), "" | "/")
        && url.query().is_none()
        && url.fragment().is_none()
        && url.host().is_some())
    {
        report.problem(
            at,
            "must be an origin only (scheme, host and optional port, no path, query or user), \
             such as \"https://gateway.example.com\"",
        );
        return None;
    }
    match url.scheme() {
        "https" => Some(url),
        "http" if production => {
            report.problem(at, "must use https: production = true refuses plain http");
            None
        }
        "http" if is_loopback(&url) => Some(url),
        "http" => {
            report.problem(
                at,
                "must use https: plain http is accepted for loopback hosts only (tokens \
                 travel to this address)",
            );
            None
        }
        _ => {
            report.problem(at, "must use https (or http for a loopback host)");
            None
        }
    }
}

/// The protected resource of JWT mode: `{public_url}/mcp`, its authorization servers (the
/// issuer when none are written) and its scopes. `None` without `public_url`, where writing
/// either setting is a problem.
pub(super) fn protected_resource(
    raw: &RawAuth,
    public_url: Option<&Url>,
    issuer: &str,
    production: bool,
    report: &mut Report,
) -> Option<ProtectedResourceConfig> {
    let Some(public_url) = public_url else {
        for (field, written) in [
            ("authorization_servers", raw.authorization_servers.is_some()),
            ("scopes", raw.scopes.is_some()),
        ] {
            if written {
                report.problem(
                    format!("server.auth.{field}"),
                    "needs server.public_url: the protected resource is named by the address \
                     clients reach the gateway at",
                );
            }
        }
        return None;
    };
    let resource = public_url.join("mcp").ok()?;
    let authorization_servers = match &raw.authorization_servers {
        Some(list) => authorization_servers(list, production, report),
        None => match Url::parse(issuer) {
            Ok(url)
                if url.scheme() == "https"
                    || (url.scheme() == "http" && !production && is_loopback(&url)) =>
            {
                vec![issuer.to_owned()]
            }
            // An empty issuer was reported already.
            _ if issuer.is_empty() => Vec::new(),
            _ => {
                report.problem(
                    "server.auth.authorization_servers",
                    "is needed: the issuer is not an https URL (or http for a loopback host, \
                     outside production), so clients cannot be pointed at it; list the \
                     authorization servers' issuer URLs",
                );
                Vec::new()
            }
        },
    };
    let scopes = scopes(
        raw.scopes.as_deref().unwrap_or_default(),
        "server.auth.scopes",
        report,
    );
    Some(ProtectedResourceConfig {
        resource,
        authorization_servers,
        scopes,
    })
}

fn authorization_servers(list: &[String], production: bool, report: &mut Report) -> Vec<String> {
    let field = "server.auth.authorization_servers";
    if list.is_empty() {
        report.problem(
            field,
            "must name at least one issuer URL (or be left out: the issuer)",
        );
    }
    if list.len() > MAX_AUTHORIZATION_SERVERS {
        report.problem(
            field,
            format!(
                "lists {} servers; at most {MAX_AUTHORIZATION_SERVERS}",
                list.len()
            ),
        );
        return Vec::new();
    }
    let mut out = Vec::with_capacity(list.len());
    for (i, text) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let message = match Url::parse(text) {
            Ok(url) if !url.username().is_empty() || url.password().is_some() => {
                "must not carry a user name or password"
            }
            Ok(url) if url.query().is_some() || url.fragment().is_some() => {
                "must be an issuer URL without query or fragment (RFC 8414)"
            }
            Ok(url) if url.scheme() == "https" => {
                out.push(text.clone());
                continue;
            }
            Ok(url) if url.scheme() == "http" && !production && is_loopback(&url) => {
                out.push(text.clone());
                continue;
            }
            Ok(_) => "must use https (http only for a loopback host, outside production)",
            Err(_) => "is not a URL",
        };
        report.problem(at, message);
    }
    out
}

/// RFC 6749 §3.3 scope tokens written at `field`: printable ASCII without space, `"` and
/// `\`, each once.
pub(in crate::config) fn scopes(list: &[String], field: &str, report: &mut Report) -> Vec<String> {
    if list.len() > MAX_SCOPES {
        report.problem(
            field,
            format!("lists {} scopes; at most {MAX_SCOPES}", list.len()),
        );
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::with_capacity(list.len());
    for (i, scope) in list.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let valid = !scope.is_empty()
            && scope.len() <= 128
            && scope
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
        if !valid {
            report.problem(
                at,
                "must be an OAuth scope: 1 to 128 printable ASCII characters without spaces, \
                 `\"` or `\\`",
            );
        } else if out.contains(scope) {
            report.problem(at, "is listed twice");
        } else {
            out.push(scope.clone());
        }
    }
    out
}

/// `127.0.0.0/8` and `::1` written as addresses: no name lookup can move them elsewhere.
pub(super) fn is_loopback_ip(url: &Url) -> bool {
    match url.host() {
        Some(Host::Ipv4(ip)) => ip.is_loopback(),
        Some(Host::Ipv6(ip)) => ip.is_loopback(),
        _ => false,
    }
}
