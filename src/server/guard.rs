//! DNS-rebinding protection: only configured (else loopback) Host names, and browser Origins
//! that are the same origin or configured.

use axum::{
    extract::Request,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
};

use super::{AppState, errors::ApiError};
use crate::{config::normal_host, server::auth::METADATA_PREFIX};

/// Host names accepted when none are configured.
const LOOPBACK_NAMES: &[&str] = &["localhost", "127.0.0.1", "::1"];

/// The refusal of a request whose Host is not served or whose Origin is not accepted.
pub fn refusal(state: &AppState, request: &Request) -> Option<Response> {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()));
    if !host_allowed(host, &state.service.allowed_hosts) {
        return Some(
            ApiError::new(
                StatusCode::FORBIDDEN,
                "host_not_allowed",
                "this Host is not served",
            )
            .into_response(),
        );
    }
    // Protected resource metadata is public: browser-based clients read it from their own
    // origin before they have a token (it carries no credentials and changes nothing).
    // So is the WebMCP page module, and the bridge checks its pages' origins itself against
    // `[webmcp] allowed_origins`.
    let path = request.uri().path();
    let public = request.method() == axum::http::Method::GET
        && (path.starts_with(METADATA_PREFIX)
            || path == "/webmcp.js"
            || path.starts_with(super::webmcp::BRIDGE_PREFIX));
    if let Some(origin) = headers.get(header::ORIGIN).filter(|_| !public) {
        let origin = origin.to_str().unwrap_or("");
        if !origin_allowed(origin, host.unwrap_or(""), &state.service.allowed_origins) {
            return Some(
                ApiError::new(
                    StatusCode::FORBIDDEN,
                    "origin_not_allowed",
                    "requests from this Origin are not accepted",
                )
                .into_response(),
            );
        }
    }
    None
}

/// Splits `name:port`, `[v6]:port`, `name`, `[v6]` into the bare name.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or("");
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `name:port` with the name in its normal form ([`normal_host`]).
fn normal_authority(host: &str) -> Option<String> {
    let name = normal_host(host_name(host))?;
    let port = host
        .rsplit_once(':')
        .map(|(_, port)| port)
        .filter(|port| !port.is_empty() && port.chars().all(|c| c.is_ascii_digit()))
        .filter(|_| !host.ends_with(']'));
    Some(match port {
        Some(port) => format!("{name}:{port}"),
        None => name,
    })
}

fn host_allowed(host: Option<&str>, allowed: &[String]) -> bool {
    let Some(host) = host else {
        return false;
    };
    let Some(name) = normal_host(host_name(host)) else {
        return false;
    };
    if allowed.is_empty() {
        return LOOPBACK_NAMES
            .iter()
            .any(|n| normal_host(n).is_some_and(|n| n == name));
    }
    let authority = normal_authority(host);
    allowed.iter().any(|entry| {
        let entry_name = normal_host(entry);
        entry_name.as_ref() == Some(&name)
            || (authority.is_some() && normal_authority(entry) == authority)
    })
}

/// Same origin (the Origin's authority equals the Host) or an exact configured origin.
fn origin_allowed(origin: &str, host: &str, allowed: &[String]) -> bool {
    if allowed.iter().any(|a| a == origin) {
        return true;
    }
    match url::Url::parse(origin) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => {
            let authority = match (url.host_str(), url.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_owned(),
                _ => return false,
            };
            normal_authority(&authority).is_some()
                && normal_authority(&authority) == normal_authority(host)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts_by_default() {
        assert!(host_allowed(Some("127.0.0.1:8080"), &[]));
        assert!(host_allowed(Some("localhost"), &[]));
        assert!(host_allowed(Some("[::1]:9"), &[]));
        assert!(!host_allowed(Some("evil.example:8080"), &[]));
        assert!(!host_allowed(None, &[]));
        let allowed = vec!["gw.example.com".to_owned()];
        assert!(host_allowed(Some("gw.example.com:443"), &allowed));
        assert!(!host_allowed(Some("localhost"), &allowed));
        // One normal form: case, a fully qualified name's dot, on either side.
        assert!(host_allowed(Some("GW.Example.COM.:443"), &allowed));
        assert!(host_allowed(
            Some("gw.example.com"),
            &["GW.EXAMPLE.COM.".to_owned()]
        ));
        assert!(host_allowed(Some("localhost.:8080"), &[]));
        assert!(host_allowed(
            Some("gw.example.com:8443"),
            &["gw.example.com:8443".to_owned()]
        ));
        assert!(!host_allowed(
            Some("gw.example.com:9"),
            &["gw.example.com:8443".to_owned()]
        ));
        assert!(!host_allowed(Some("gw.example.com.evil:443"), &allowed));
    }

    #[test]
    fn origins_same_or_listed() {
        assert!(origin_allowed(
            "http://127.0.0.1:8080",
            "127.0.0.1:8080",
            &[]
        ));
        assert!(!origin_allowed(
            "http://evil.example",
            "127.0.0.1:8080",
            &[]
        ));
        assert!(!origin_allowed("null", "127.0.0.1:8080", &[]));
        let allowed = vec!["https://app.example.com".to_owned()];
        assert!(origin_allowed("https://app.example.com", "gw:1", &allowed));
        // The same origin however its host is spelled.
        assert!(origin_allowed(
            "http://GW.example.com.:8080",
            "gw.example.com:8080",
            &[]
        ));
        assert!(!origin_allowed(
            "http://gw.example.com:8081",
            "gw.example.com:8080",
            &[]
        ));
    }
}
