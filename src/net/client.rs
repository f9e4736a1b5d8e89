//! Building the SSRF-safe `reqwest::Client` and reading bodies under a byte cap.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use http_body::Body;
use http_body_util::BodyExt;
use reqwest::redirect::{Attempt, Policy};
use url::Url;

use super::{
    NetError, NetPolicy, check_url,
    guard::ConnectGuardLayer,
    resolve::{Lookup, SystemLookup, ValidatingResolver},
};

/// The client every outbound request of mcpgate goes through, built from `policy`.
///
/// What it enforces by itself on every request: scheme (`https_only` unless `allow_http`),
/// the allowlist for host names, address rules on every resolved address and on every
/// connection's peer, and `check_url` on every redirect hop. What the caller must still do:
/// run [`check_url`] on the first URL, the only place userinfo and the allowlist for IP-literal
/// hosts are checked.
pub fn client(policy: &NetPolicy) -> Result<reqwest::Client, NetError> {
    client_with_lookup(policy, Arc::new(SystemLookup))
}

/// [`client`] with an injected name lookup (tests, or a custom resolver).
pub fn client_with_lookup(
    policy: &NetPolicy,
    lookup: Arc<dyn Lookup>,
) -> Result<reqwest::Client, NetError> {
    let policy = Arc::new(policy.clone());
    reqwest::Client::builder()
        // System proxies (HTTP_PROXY and friends) would move the connection out of our
        // resolver's and guard's sight.
        .no_proxy()
        .tls_backend_rustls()
        .https_only(!policy.allow_http)
        .dns_resolver(ValidatingResolver::new(Arc::clone(&policy), lookup))
        .connector_layer(ConnectGuardLayer::new(Arc::clone(&policy)))
        .redirect(redirect_policy(Arc::clone(&policy)))
        // A Referer would carry the previous URL, query string and all, to the next hop.
        .referer(false)
        .connect_timeout(policy.connect_timeout)
        .read_timeout(policy.read_timeout)
        .build()
        .map_err(|err| NetError::Build {
            reason: err.without_url().to_string(),
        })
}

fn redirect_policy(policy: Arc<NetPolicy>) -> Policy {
    Policy::custom(move |attempt: Attempt| {
        match check_redirect(&policy, attempt.url(), attempt.previous()) {
            Ok(()) => attempt.follow(),
            Err(err) => attempt.error(err),
        }
    })
}

/// A hop must be within the hop budget, pass `check_url`, and stay on the first URL's origin:
/// reqwest strips `Authorization` and cookies on a cross-origin hop but forwards every other
/// header, and upstream API keys often travel in custom headers.
fn check_redirect(policy: &NetPolicy, next: &Url, previous: &[Url]) -> Result<(), NetError> {
    // `previous` starts with the first URL, so its length is the number of this hop.
    if previous.len() > policy.max_redirects {
        return Err(NetError::TooManyRedirects {
            limit: policy.max_redirects,
        });
    }
    check_url(next, policy)?;
    if let Some(first) = previous.first()
        && first.origin() != next.origin()
    {
        return Err(NetError::CrossOriginRedirect {
            from: first.origin().ascii_serialization(),
            to: next.origin().ascii_serialization(),
        });
    }
    Ok(())
}

/// Reads a whole response body, failing with [`NetError::TooLarge`] as soon as it would
/// exceed `max` bytes (a declared `Content-Length` over the cap fails before reading).
pub async fn read_capped(resp: reqwest::Response, max: usize) -> Result<Bytes, NetError> {
    read_capped_body(http::Response::from(resp).into_body(), max).await
}

/// [`read_capped`] for any response body whose errors are, or convert to, [`NetError`].
pub async fn read_capped_body<B>(body: B, max: usize) -> Result<Bytes, NetError>
where
    B: Body<Data = Bytes>,
    NetError: From<B::Error>,
{
    let too_large = NetError::TooLarge { limit: max };
    // A declared length is the body's lower bound.
    if u64::try_from(max).is_ok_and(|max| body.size_hint().lower() > max) {
        return Err(too_large);
    }
    let mut body = std::pin::pin!(body);
    let mut read = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(chunk) = frame?.into_data() else {
            continue;
        };
        if chunk.len() > max - read.len() {
            return Err(too_large);
        }
        read.extend_from_slice(&chunk);
    }
    Ok(read.freeze())
}

#[cfg(test)]
mod tests;
