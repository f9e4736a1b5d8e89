//! Servers with `auth = "oauth"`: every request carries a user's own token. A call goes over a
//! session of that user's alone, opened with their token (a new one when the token changes);
//! the server's shared session, which lists its tools and hears its notifications, is opened
//! with the token of a user who connected, and waits while nobody has.

use std::sync::Arc;

use futures::future::BoxFuture;
use zeroize::Zeroizing;

use crate::config::{SecretTemplate, ServerConfig, ServerId, TransportConfig};

/// Tokens to list a server with: some connected user's, refreshed as needed.
pub trait ListingTokens: Send + Sync {
    /// A current token of a user who connected `server`; `None` while nobody has.
    fn listing_token<'a>(
        &'a self,
        server: &'a ServerId,
    ) -> BoxFuture<'a, Option<Zeroizing<String>>>;
}

/// The gateway's [`ListingTokens`], in [`super::ConnectOptions`].
#[derive(Clone)]
pub struct ListingTokensHandle(pub Arc<dyn ListingTokens>);

impl std::fmt::Debug for ListingTokensHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListingTokens")
    }
}

/// One user's token for one call: the session it goes over is keyed by `session` (the
/// user and a digest of the token, never the token).
pub struct UserToken {
    pub session: String,
    pub secret: Zeroizing<String>,
}

impl std::fmt::Debug for UserToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserToken")
            .field("session", &self.session)
            .finish_non_exhaustive()
    }
}

/// `server` as connected with `token`: its headers plus `Authorization: Bearer <token>`.
/// `None` for a token that could not be a header value (or would read as a reference).
pub(super) fn with_bearer(server: &ServerConfig, token: &str) -> Option<ServerConfig> {
    let valid = !token.is_empty()
        && !token.contains("${")
        && token.bytes().all(|b| (0x21..=0x7e).contains(&b));
    if !valid {
        return None;
    }
    let mut server = server.clone();
    if let TransportConfig::Http(http) = &mut server.transport {
        http.headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
        http.headers.push((
            "Authorization".to_owned(),
            SecretTemplate::new(format!("Bearer {token}")),
        ));
    }
    Some(server)
}
