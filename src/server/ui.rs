//! The web page: plain HTML, CSS and JavaScript modules embedded in the binary, served at `/`
//! and `/ui/...` without authentication (the files hold no data; every piece of data comes
//! from the authenticated API), each response with a strict Content-Security-Policy.

use std::sync::LazyLock;

use axum::{
    Router,
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::AppState;

/// No inline script or style, nothing from elsewhere: model and tool text that slipped
/// through as markup still could not run or load anything.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// Files are not versioned by name, so a browser revalidates each (cheap with the ETag)
/// and a new binary's page is never mixed with an old one's scripts.
const CACHE_CONTROL: &str = "no-cache";

/// One embedded file.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:expr) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!("ui/assets/", $name)),
        }
    };
}

const JS: &str = "text/javascript; charset=utf-8";

static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("app.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", JS),
    asset!("api.js", JS),
    asset!("apps.js", JS),
    asset!("audit.js", JS),
    asset!("catalog.js", JS),
    asset!("charts.js", JS),
    asset!("chat.js", JS),
    asset!("connect.js", JS),
    asset!("dom.js", JS),
    asset!("my_servers.js", JS),
    asset!("pin_review.js", JS),
    asset!("result.js", JS),
    asset!("schema_form.js", JS),
    asset!("signin.js", JS),
    asset!("sse.js", JS),
    asset!("tool_card.js", JS),
    asset!("usage.js", JS),
];

/// Each asset's ETag, in the order of [`ASSETS`].
static ETAGS: LazyLock<Vec<String>> =
    LazyLock::new(|| ASSETS.iter().map(|a| etag_of(a.body)).collect());

/// `/` (the page) and `/ui/{file}` (its scripts, styles and icon).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(file))
}

/// The page; where the page hosts MCP Apps, its policy lets it frame the sandbox's origin
/// and nothing else.
async fn index(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let mut response = serve("index.html", &headers);
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
    if let Some(origin) = state.sandbox.as_ref().and_then(|s| s.origin_for(host))
        && let Ok(policy) =
            HeaderValue::from_str(&format!("{CONTENT_SECURITY_POLICY}; frame-src {origin}"))
    {
        response
            .headers_mut()
            .insert(header::CONTENT_SECURITY_POLICY, policy);
    }
    response
}

async fn file(Path(name): Path<String>, headers: HeaderMap) -> Response {
    serve(&name, &headers)
}

fn serve(name: &str, request: &HeaderMap) -> Response {
    let Some(index) = ASSETS.iter().position(|a| a.name == name) else {
        let mut response = (StatusCode::NOT_FOUND, "not found").into_response();
        secure(response.headers_mut());
        return response;
    };
    let asset = &ASSETS[index];
    cached(asset.body, asset.content_type, &ETAGS[index], request)
}

/// The ETag of `body`: the start of its SHA-256, quoted.
pub(super) fn etag_of(body: &[u8]) -> String {
    format!("\"{}\"", &crate::digest::sha256_hex(body)[..32])
}

/// `body` with its `etag`, or 304 when the request already holds it; revalidated each time,
/// with the page's security headers.
pub(super) fn cached(
    body: &'static [u8],
    content_type: &'static str,
    etag: &str,
    request: &HeaderMap,
) -> Response {
    let fresh = request
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|tags| tags.split(',').any(|t| t.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        body.into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(CACHE_CONTROL),
    );
    if let Ok(value) = HeaderValue::from_str(etag) {
        headers.insert(header::ETAG, value);
    }
    secure(headers);
    response
}

/// The headers every page response carries.
pub(super) fn secure(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_referenced_and_no_markup_runs_inline() {
        let text = |name: &str| {
            let asset = ASSETS.iter().find(|a| a.name == name).expect("listed");
            std::str::from_utf8(asset.body).expect("UTF-8")
        };
        let html = text("index.html");
        for bad in ["<script>", " style=", " onclick", " onload", "javascript:"] {
            assert!(!html.contains(bad), "index.html holds {bad:?}");
        }
        // Every listed file is reachable from the page (by link or module import).
        let everything: String = ASSETS
            .iter()
            .filter(|a| a.content_type.starts_with("text/"))
            .map(|a| text(a.name))
            .collect();
        for asset in ASSETS.iter().filter(|a| a.name != "index.html") {
            assert!(
                everything.contains(&format!("/ui/{}", asset.name))
                    || everything.contains(&format!("./{}", asset.name)),
                "{} is never used",
                asset.name
            );
        }
    }

    #[test]
    fn scripts_never_insert_markup_except_the_sanitized_answer() {
        for asset in ASSETS.iter().filter(|a| a.content_type == JS) {
            let code = std::str::from_utf8(asset.body).expect("UTF-8");
            for bad in ["outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
                assert!(!code.contains(bad), "{} uses {bad}", asset.name);
            }
            let inner = code.matches("innerHTML").count();
            let allowed = usize::from(asset.name == "chat.js");
            assert_eq!(
                inner, allowed,
                "{} sets innerHTML {inner} times",
                asset.name
            );
        }
    }

    #[test]
    fn conditional_requests_get_304() {
        let first = serve("app.js", &HeaderMap::new());
        assert_eq!(first.status(), StatusCode::OK);
        let etag = first.headers()[header::ETAG].clone();
        let mut request = HeaderMap::new();
        request.insert(header::IF_NONE_MATCH, etag);
        let again = serve("app.js", &request);
        assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
        assert!(
            again
                .headers()
                .contains_key(header::CONTENT_SECURITY_POLICY)
        );
        assert_eq!(
            serve("../Cargo.toml", &HeaderMap::new()).status(),
            StatusCode::NOT_FOUND
        );
    }
}
