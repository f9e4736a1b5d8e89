//! The MCP Apps sandbox: the proxy page through which the page renders an app's view, served
//! on a listener and origin of its own (the spec's sandbox proxy: "the Host and the Sandbox
//! MUST have different origins"). It holds no data and takes no token. Its
//! Content-Security-Policy, sent as a header, is built from what the view declared (the
//! spec's default when it declared nothing, never a domain it did not declare), and the
//! app's own frame inherits it.

use axum::{
    Router,
    extract::Query,
    http::{HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use serde::Deserialize;
use serde_json::Value;

/// Where the sandbox is: its port (on the gateway's address) and, behind a proxy, the origin
/// browsers reach it at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub port: u16,
    pub origin: Option<String>,
}

impl Sandbox {
    /// The sandbox's origin for a page reached at `host` (the request's Host header, already
    /// checked against the allowed hosts): the configured origin, else the same host name
    /// with the sandbox's port (another port is another origin).
    pub fn origin_for(&self, host: Option<&str>) -> Option<String> {
        if let Some(origin) = &self.origin {
            return Some(origin.clone());
        }
        let authority: axum::http::uri::Authority = host?.parse().ok()?;
        let name = authority.host();
        Some(format!("http://{name}:{}", self.port))
    }
}

/// Serves [`router`] on `listener` until `stop` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    stop: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router())
        .with_graceful_shutdown(stop.cancelled_owned())
        .await
}

/// The proxy page and its script; nothing else is served on the sandbox's origin.
pub fn router() -> Router {
    Router::new()
        .route("/sandbox", get(proxy_page))
        .route("/sandbox.js", get(proxy_script))
        .fallback(|| async { plain(StatusCode::NOT_FOUND, "not found") })
}

const PROXY_HTML: &str = include_str!("sandbox/proxy.html");
const PROXY_JS: &str = include_str!("sandbox/proxy.js");

/// Most domains one list of a view's CSP may name: a view needs a few; a long list is a
/// view trying to open everything.
const MAX_DOMAINS: usize = 32;

#[derive(Debug, Deserialize)]
struct ProxyQuery {
    /// The page's origin: the only one that may frame the proxy and talk to it.
    host: String,
    /// The view's declared `_meta.ui.csp`, as JSON.
    csp: Option<String>,
}

async fn proxy_page(
    query: Result<Query<ProxyQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return plain(
            StatusCode::BAD_REQUEST,
            "host (the page's origin) is required",
        );
    };
    let Some(host) = origin(&query.host) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "host must be an origin (scheme://host[:port])",
        );
    };
    let declared = match query.csp.as_deref().map(serde_json::from_str::<Value>) {
        None => Value::Null,
        Some(Ok(value)) => value,
        Some(Err(_)) => return plain(StatusCode::BAD_REQUEST, "csp must be JSON"),
    };
    let policy = format!("{}; frame-ancestors {host}", view_policy(&declared));
    match HeaderValue::from_str(&policy) {
        Ok(policy) => respond(
            StatusCode::OK,
            PROXY_HTML,
            "text/html; charset=utf-8",
            policy,
        ),
        Err(_) => plain(StatusCode::BAD_REQUEST, "unusable csp"),
    }
}

async fn proxy_script() -> Response {
    respond(
        StatusCode::OK,
        PROXY_JS,
        "text/javascript; charset=utf-8",
        HeaderValue::from_static(NOTHING),
    )
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    respond(
        status,
        text,
        "text/plain; charset=utf-8",
        HeaderValue::from_static(NOTHING),
    )
}

/// The policy of what runs nothing: the script, errors.
const NOTHING: &str = "default-src 'none'";

/// `body` with its type and policy, never cached (the policy depends on the query), not
/// sniffed, sending no referrer.
fn respond(
    status: StatusCode,
    body: &'static str,
    content_type: &'static str,
    policy: HeaderValue,
) -> Response {
    let mut response = (status, body).into_response();
    let headers = response.headers_mut();
    // The page's own security headers, then this response's policy in place of the page's.
    super::ui::secure(headers);
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, policy);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The Content-Security-Policy of a view that declared `csp` (its `_meta.ui.csp`), after the
/// MCP Apps spec: the default policy, widened only by the domains the view declared
/// (`connectDomains`, `resourceDomains`, `frameDomains`, `baseUriDomains`); an entry that is
/// not a plain source (`https://host[:port]`, `wss://…`, a `*.` wildcard label) is dropped.
pub fn view_policy(csp: &Value) -> String {
    let list = |key: &str| -> String {
        let domains: Vec<&str> = csp
            .get(key)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|d| is_source(d))
            .take(MAX_DOMAINS)
            .collect();
        domains.iter().map(|d| format!(" {d}")).collect()
    };
    let resources = list("resourceDomains");
    let connect = list("connectDomains");
    let frames = list("frameDomains");
    let base = list("baseUriDomains");
    let or = |domains: &str, otherwise: &str| {
        if domains.is_empty() {
            format!(" {otherwise}")
        } else {
            domains.to_owned()
        }
    };
    let connect = if connect.is_empty() {
        " 'none'".to_owned()
    } else {
        format!(" 'self'{connect}")
    };
    format!(
        "default-src 'none'; script-src 'self' 'unsafe-inline'{resources}; \
         style-src 'self' 'unsafe-inline'{resources}; img-src 'self' data:{resources}; \
         font-src 'self'{resources}; media-src 'self' data:{resources}; \
         connect-src{connect}; frame-src{}; object-src 'none'; base-uri{}",
        or(&frames, "'none'"),
        or(&base, "'self'"),
    )
}

/// Whether `source` is a scheme, a host (whose first label may be `*`) and an optional
/// port, and nothing a policy could read as more (quotes, `;`, spaces, paths, keywords).
fn is_source(source: &str) -> bool {
    let Some((scheme, rest)) = source.split_once("://") else {
        return false;
    };
    if !matches!(scheme, "https" | "http" | "wss" | "ws") {
        return false;
    }
    let (host, port) = match rest.rsplit_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (rest, None),
    };
    let host = host.strip_prefix("*.").unwrap_or(host);
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
        && host.len() <= 253
        && host.split('.').all(label_ok)
}

/// `text` as an origin (`scheme://host[:port]`, http or https), serialized; `None` otherwise.
fn origin(text: &str) -> Option<String> {
    let url = url::Url::parse(text).ok()?;
    let serialized = url.origin().ascii_serialization();
    (matches!(url.scheme(), "http" | "https") && serialized == text).then_some(serialized)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn no_declaration_is_the_specs_default() {
        assert_eq!(
            view_policy(&Value::Null),
            "default-src 'none'; script-src 'self' 'unsafe-inline'; \
             style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self'; \
             media-src 'self' data:; connect-src 'none'; frame-src 'none'; \
             object-src 'none'; base-uri 'self'"
        );
    }

    #[test]
    fn declared_domains_open_their_directives_and_nothing_else() {
        let policy = view_policy(&json!({
            "connectDomains": ["https://api.example.com", "wss://live.example.com"],
            "resourceDomains": ["https://*.cdn.example.net"],
            "frameDomains": ["https://player.example.org:8443"],
        }));
        assert!(
            policy.contains("connect-src 'self' https://api.example.com wss://live.example.com;")
        );
        assert!(policy.contains("script-src 'self' 'unsafe-inline' https://*.cdn.example.net;"));
        assert!(policy.contains("img-src 'self' data: https://*.cdn.example.net;"));
        assert!(policy.contains("frame-src https://player.example.org:8443;"));
        assert!(policy.ends_with("base-uri 'self'"));
    }

    #[test]
    fn entries_that_are_not_plain_sources_are_dropped() {
        for bad in [
            "*",
            "'unsafe-eval'",
            "https://a.example.com; script-src *",
            "https://a.example.com 'unsafe-eval'",
            "https://a.example.com/path",
            "data:",
            "javascript://x",
            "https://",
            "https://a..b",
            "https://a.example.com:99999x",
            "https://user@a.example.com",
        ] {
            let policy = view_policy(&json!({ "connectDomains": [bad], "resourceDomains": [bad] }));
            assert_eq!(policy, view_policy(&Value::Null), "{bad:?} was kept");
        }
        let many: Vec<String> = (0..100)
            .map(|i| format!("https://h{i}.example.com"))
            .collect();
        let policy = view_policy(&json!({ "connectDomains": many }));
        assert!(policy.contains("https://h31.example.com") && !policy.contains("h32."));
    }

    #[test]
    fn the_sandbox_origin_follows_the_pages_host_or_the_configuration() {
        let derived = Sandbox {
            port: 9001,
            origin: None,
        };
        assert_eq!(
            derived.origin_for(Some("127.0.0.1:8080")).as_deref(),
            Some("http://127.0.0.1:9001")
        );
        assert_eq!(
            derived.origin_for(Some("localhost")).as_deref(),
            Some("http://localhost:9001")
        );
        assert_eq!(
            derived.origin_for(Some("[::1]:8080")).as_deref(),
            Some("http://[::1]:9001")
        );
        assert_eq!(derived.origin_for(None), None);
        let configured = Sandbox {
            port: 9001,
            origin: Some("https://apps.example.com".into()),
        };
        assert_eq!(
            configured.origin_for(Some("gw.example.com")).as_deref(),
            Some("https://apps.example.com")
        );
        assert_eq!(
            origin("http://127.0.0.1:8080").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert_eq!(origin("http://127.0.0.1:8080/x"), None);
        assert_eq!(origin("null"), None);
    }
}
