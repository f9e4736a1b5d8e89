//! `NetError`: why an outbound request was refused or failed, without leaking secrets.

use std::{error::Error as StdError, io, net::IpAddr};

/// Why an outbound request was refused or failed. Messages name hosts, addresses and limits,
/// never paths, query strings, header values or userinfo (they may carry credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    #[error("URL scheme `{scheme}` is not allowed")]
    Scheme { scheme: String },
    #[error("URL carries a user name or password, which is refused")]
    UserInfo,
    #[error("URL has no host")]
    MissingHost,
    #[error("host `{host}` is not in the allowed hosts")]
    HostNotAllowed { host: String },
    #[error("address {addr} is in a blocked range ({range})")]
    Blocked { addr: IpAddr, range: &'static str },
    #[error("could not resolve `{host}`: {reason}")]
    Resolve { host: String, reason: String },
    #[error("connection has no peer address to check, refused")]
    NoPeerAddress,
    #[error("redirect refused: at most {limit} redirects are allowed")]
    TooManyRedirects { limit: usize },
    #[error("redirect from {from} to another origin ({to}) refused")]
    CrossOriginRedirect { from: String, to: String },
    #[error("response body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("could not build the HTTP client: {reason}")]
    Build { reason: String },
    /// Transport failure: `kind` is one of `timeout`, `connect`, `redirect`, `body`, `decode`,
    /// `request`, `builder`, `status`, `other`.
    #[error("HTTP request failed ({kind}): {detail}")]
    Request { kind: &'static str, detail: String },
}

impl From<reqwest::Error> for NetError {
    /// Recovers our own refusal (resolver, connect guard, redirect policy) from inside the
    /// reqwest error, so callers see `Blocked` rather than a generic connect error.
    fn from(err: reqwest::Error) -> Self {
        let kind = if err.is_timeout() {
            "timeout"
        } else if err.is_connect() {
            "connect"
        } else if err.is_redirect() {
            "redirect"
        } else if err.is_body() {
            "body"
        } else if err.is_decode() {
            "decode"
        } else if err.is_request() {
            "request"
        } else if err.is_builder() {
            "builder"
        } else if err.is_status() {
            "status"
        } else {
            "other"
        };
        // The URL may carry credentials in its query string: drop it, keep the causes.
        described(kind, &err.without_url())
    }
}

/// `err` as a `NetError`: our own refusal when one is among its causes, else a `Request` of
/// `kind` naming `err` and its causes. `err` and its causes must not name a URL.
pub(super) fn described(kind: &'static str, err: &(dyn StdError + 'static)) -> NetError {
    if let Some(ours) = find_ours(err) {
        return ours;
    }
    let mut detail = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        detail.push_str(": ");
        detail.push_str(&cause.to_string());
        source = cause.source();
    }
    NetError::Request { kind, detail }
}

fn find_ours(err: &(dyn StdError + 'static)) -> Option<NetError> {
    let mut source = err.source();
    while let Some(cause) = source {
        if let Some(ours) = cause.downcast_ref::<NetError>() {
            return Some(ours.clone());
        }
        // `io::Error::source` skips the error it wraps, so look inside explicitly.
        let wrapped = cause
            .downcast_ref::<io::Error>()
            .and_then(io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<NetError>());
        if let Some(ours) = wrapped {
            return Some(ours.clone());
        }
        source = cause.source();
    }
    None
}
