//! Rules for `[oauth]` (the keys that seal users' upstream tokens) and for what servers with
//! `auth = "oauth"` need of the rest: keys, and a `[server] public_url` for the address the
//! authorization server sends users back to.

use std::{ops::RangeInclusive, time::Duration};

use super::{Report, duration};
use crate::config::{OAuthConfig, SecretTemplate, ServerConfig, ServiceConfig, raw::RawOAuth};

/// A user signing in: under a minute is too short to type a password, and a `state` valid
/// for more than an hour is one more secret lying around.
const AUTHORIZATION_TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_secs(60)..=Duration::from_secs(3600);
/// Keys held at once: the current one and a few being retired.
const MAX_KEYS: usize = 4;

pub(super) fn section(raw: &RawOAuth, report: &mut Report) -> OAuthConfig {
    let d = OAuthConfig::default();
    let mut keys = Vec::new();
    let list = raw.keys.as_deref().unwrap_or_default();
    if list.len() > MAX_KEYS {
        report.problem(
            "oauth.keys",
            format!("lists {} keys; at most {MAX_KEYS}", list.len()),
        );
    }
    for (i, text) in list.iter().enumerate().take(MAX_KEYS) {
        let template = SecretTemplate::new(text);
        if !template.is_single_reference() {
            report.problem(
                format!("oauth.keys[{i}]"),
                "must be one `${NAME}` reference, such as \"${MCPGATE_OAUTH_KEY}\", with the \
                 key (32 random bytes, hex or base64) in that environment variable",
            );
            continue;
        }
        if keys.contains(&template) {
            report.problem(format!("oauth.keys[{i}]"), "is listed twice");
            continue;
        }
        keys.push(template);
    }
    OAuthConfig {
        keys,
        authorization_timeout: raw
            .authorization_timeout
            .as_ref()
            .and_then(|d| {
                duration(
                    d,
                    &AUTHORIZATION_TIMEOUT_RANGE,
                    "oauth.authorization_timeout",
                    report,
                )
            })
            .unwrap_or(d.authorization_timeout),
        client_metadata_url: raw
            .client_metadata_url
            .as_deref()
            .and_then(|text| client_metadata_url(text, report)),
    }
}

/// A Client ID Metadata Document's URL is the client id: https, a path, nothing else.
fn client_metadata_url(text: &str, report: &mut Report) -> Option<url::Url> {
    match url::Url::parse(text) {
        Ok(url)
            if url.scheme() == "https"
                && url.host().is_some()
                && !matches!(url.path(), "" | "/")
                && url.username().is_empty()
                && url.password().is_none()
                && url.query().is_none()
                && url.fragment().is_none() =>
        {
            Some(url)
        }
        _ => {
            report.problem(
                "oauth.client_metadata_url",
                "must be an https URL with a path and nothing else (it is the client id), \
                 such as \"https://gateway.example.com/oauth/client-metadata.json\"",
            );
            None
        }
    }
}

/// Servers with `auth = "oauth"` need keys (no plaintext fallback) and a public URL.
pub(super) fn check_servers(
    servers: &[ServerConfig],
    oauth: &OAuthConfig,
    service: &ServiceConfig,
    report: &mut Report,
) {
    let Some(first) = servers.iter().find(|s| s.oauth.is_some()) else {
        return;
    };
    if oauth.keys.is_empty() {
        report.problem(
            "oauth.keys",
            format!(
                "is needed: server `{}` has auth = \"oauth\", and users' tokens are kept only \
                 sealed; set keys = [\"${{MCPGATE_OAUTH_KEY}}\"] with 32 random bytes (e.g. \
                 `openssl rand -hex 32`) in that variable",
                first.id
            ),
        );
    }
    if service.public_url.is_none() {
        report.problem(
            "server.public_url",
            format!(
                "is needed: server `{}` has auth = \"oauth\", and its authorization server \
                 sends users back to {{public_url}}/api/v1/oauth/callback",
                first.id
            ),
        );
    }
}
