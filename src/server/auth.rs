//! Who is calling: the request's bearer credential (dev token, JWT, or none at all) turned
//! into a [`CallContext`], or a typed [`AuthFailure`].

mod claims;
mod failure;
mod jwks;
mod jwt;
mod keys;
mod resource;
mod verified;

use std::{fmt, net::SocketAddr};

use http::{HeaderMap, Uri, header::AUTHORIZATION};

pub use failure::{AuthCode, AuthFailure, AuthSetupError};
pub use jwks::JwksError;
pub use resource::{METADATA_PREFIX, ProtectedResource};

use self::{claims::MAX_IDENTITY_CHARS, jwt::JwtVerifier};
use crate::{
    config::{AuthConfig, Env},
    policy::CallContext,
};

/// Header naming the caller's conversation or client session (confirmations bind to it).
pub const SESSION_HEADER: &str = "x-mcpgate-session";

/// Session of a caller that names none.
pub const DEFAULT_SESSION: &str = "default";

/// Real JWTs are well under 2 KiB; a bigger one is either abuse or a token stuffed with claims
/// we would copy into every context, so the cap sits well above the first and far below what
/// a server accepts as a header.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// Query parameters that carry tokens in the wild; URLs end up in access logs, browser history
/// and `Referer` headers, so a token there is refused rather than used.
const TOKEN_QUERY_PARAMS: [&str; 3] = ["access_token", "token", "jwt"];

/// Bytes of the random dev token (printed once at start).
const DEV_TOKEN_BYTES: usize = 32;

/// Checks each request's credential and says who is calling.
pub struct Authenticator {
    mode: Mode,
    /// `/mcp` as an OAuth protected resource (JWT mode with `[server] public_url`).
    protected: Option<ProtectedResource>,
}

enum Mode {
    /// A random token generated at start; callers are the local admin.
    Dev {
        token: String,
    },
    /// No authentication: every request is the anonymous local caller.
    Anonymous,
    Jwt(Box<JwtVerifier>),
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The dev token is a credential: name the mode only.
        let mode = match self.mode {
            Mode::Dev { .. } => "dev",
            Mode::Anonymous => "none",
            Mode::Jwt(_) => "jwt",
        };
        f.debug_struct("Authenticator")
            .field("mode", &mode)
            .finish()
    }
}

impl Authenticator {
    /// Sets up authentication for a service listening on `listen`. Dev and no-auth modes are
    /// refused on non-loopback addresses and in production; JWT mode loads its keys (and
    /// fetches the JWKS) now, so a bad key fails the start rather than every request.
    pub async fn new(
        config: &AuthConfig,
        env: &Env,
        listen: SocketAddr,
        production: bool,
    ) -> Result<Authenticator, AuthSetupError> {
        let protected = match config {
            AuthConfig::Jwt(cfg) => cfg.protected.as_ref().map(ProtectedResource::new),
            AuthConfig::Dev | AuthConfig::None => None,
        };
        let mode = match config {
            AuthConfig::Dev => {
                local_only("dev", listen, production)?;
                Mode::Dev {
                    token: crate::digest::random_hex(DEV_TOKEN_BYTES),
                }
            }
            AuthConfig::None => {
                local_only("none", listen, production)?;
                tracing::warn!(
                    %listen,
                    "AUTHENTICATION IS OFF: every request is the anonymous local caller; \
                     use this only for local tools that cannot send a token"
                );
                Mode::Anonymous
            }
            AuthConfig::Jwt(cfg) => {
                Mode::Jwt(Box::new(JwtVerifier::new(cfg, env, production).await?))
            }
        };
        Ok(Authenticator { mode, protected })
    }

    /// The protected resource's metadata, when `/mcp` is one.
    pub fn protected_resource(&self) -> Option<&ProtectedResource> {
        self.protected.as_ref()
    }

    /// The `WWW-Authenticate` value for `failure`: RFC 6750's, plus where the protected
    /// resource's metadata is (RFC 9728 §5.1) and the scopes `/mcp` requires.
    pub fn challenge(&self, failure: &AuthFailure) -> String {
        let mut challenge = failure.www_authenticate();
        if let Some(protected) = &self.protected {
            challenge.push_str(&protected.challenge_params());
        }
        challenge
    }

    /// The dev-mode token, for the CLI to print; `None` in other modes.
    pub fn dev_token(&self) -> Option<&str> {
        match &self.mode {
            Mode::Dev { token } => Some(token),
            _ => None,
        }
    }

    /// When the bearer token of `headers` stops being accepted (Unix seconds, leeway
    /// included), for a connection that outlives its request (the WebMCP bridge closes a
    /// page's socket then); `None` in the modes whose tokens do not expire. Read after
    /// [`Authenticator::authenticate`] accepted the same headers, so the token is verified.
    pub fn expires_at(&self, headers: &HeaderMap) -> Option<u64> {
        let Mode::Jwt(verifier) = &self.mode else {
            return None;
        };
        let token = bearer_token(headers).ok()?;
        let claims: serde_json::Map<String, serde_json::Value> =
            jsonwebtoken::dangerous::insecure_decode_claims(token).ok()?;
        // As the verifier reads it: a number of seconds, whole or not.
        let exp = claims.get("exp")?;
        let exp = exp.as_u64().or_else(|| {
            exp.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f as u64)
        })?;
        Some(exp.saturating_add(verifier.leeway()))
    }

    /// Who is calling. Only `Authorization: Bearer <token>` is read; a token in the query
    /// string is refused in every mode, even next to a valid header.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        uri: &Uri,
        request_id: &str,
    ) -> Result<CallContext, AuthFailure> {
        refuse_query_token(uri)?;
        let session = session_header(headers)?;
        let context =
            |tenant: &str, user: &str, roles: Vec<String>, sid: Option<String>| CallContext {
                tenant: tenant.to_owned(),
                user: user.to_owned(),
                session: session
                    .clone()
                    .or(sid)
                    .unwrap_or_else(|| DEFAULT_SESSION.to_owned()),
                roles,
                request_id: request_id.to_owned(),
            };
        match &self.mode {
            Mode::Anonymous => Ok(context("local", "anonymous", Vec::new(), None)),
            Mode::Dev { token } => {
                let offered = bearer_token(headers)?;
                if !constant_time_eq(offered.as_bytes(), token.as_bytes()) {
                    return Err(AuthFailure::new(
                        AuthCode::InvalidToken,
                        "token does not match the dev token printed at start",
                    ));
                }
                Ok(context("local", "dev", vec!["admin".to_owned()], None))
            }
            Mode::Jwt(verifier) => {
                let who = verifier.verify(bearer_token(headers)?)?;
                if let Some(protected) = &self.protected
                    && resource::is_mcp_path(uri.path())
                {
                    protected.check_scopes(&who.scopes)?;
                }
                Ok(context(&who.tenant, &who.user, who.roles, who.sid))
            }
        }
    }
}

fn local_only(
    mode: &'static str,
    listen: SocketAddr,
    production: bool,
) -> Result<(), AuthSetupError> {
    if production {
        return Err(AuthSetupError::NotInProduction { mode });
    }
    if !listen.ip().is_loopback() {
        return Err(AuthSetupError::NotLoopback { mode, listen });
    }
    Ok(())
}

fn refuse_query_token(uri: &Uri) -> Result<(), AuthFailure> {
    let Some(query) = uri.query() else {
        return Ok(());
    };
    let found = url::form_urlencoded::parse(query.as_bytes()).any(|(name, _)| {
        TOKEN_QUERY_PARAMS
            .iter()
            .any(|param| name.eq_ignore_ascii_case(param))
    });
    if found {
        return Err(AuthFailure::new(
            AuthCode::TokenInQuery,
            "tokens in the URL are refused (URLs end up in logs); send `Authorization: Bearer \
             <token>` and remove the `access_token`/`token`/`jwt` query parameter",
        ));
    }
    Ok(())
}

/// The one `Authorization: Bearer` credential of the request.
fn bearer_token(headers: &HeaderMap) -> Result<&str, AuthFailure> {
    let malformed = |why: &str| AuthFailure::new(AuthCode::InvalidRequest, why);
    let mut values = headers.get_all(AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Err(AuthFailure::new(
            AuthCode::MissingToken,
            "no `Authorization: Bearer <token>` header",
        ));
    };
    if values.next().is_some() {
        return Err(malformed("more than one `Authorization` header"));
    }
    let value = value
        .to_str()
        .map_err(|_| malformed("the `Authorization` header is not printable ASCII"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| malformed("expected `Authorization: Bearer <token>`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(malformed(
            "only the `Bearer` authorization scheme is accepted",
        ));
    }
    let token = token.trim_matches(' ');
    if token.is_empty() {
        return Err(malformed("the bearer token is empty"));
    }
    if token.len() > MAX_TOKEN_BYTES {
        return Err(AuthFailure::new(
            AuthCode::TokenTooLarge,
            format!("token is larger than {MAX_TOKEN_BYTES} bytes"),
        ));
    }
    Ok(token)
}

/// The `x-mcpgate-session` header: 1 to 128 printable ASCII characters without spaces.
fn session_header(headers: &HeaderMap) -> Result<Option<String>, AuthFailure> {
    let mut values = headers.get_all(SESSION_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let bad = || {
        AuthFailure::new(
            AuthCode::InvalidRequest,
            format!(
                "`{SESSION_HEADER}` must be one header of 1 to {MAX_IDENTITY_CHARS} printable \
                 ASCII characters without spaces"
            ),
        )
    };
    let bytes = value.as_bytes();
    let valid = values.next().is_none()
        && !bytes.is_empty()
        && bytes.len() <= MAX_IDENTITY_CHARS
        && bytes.iter().all(|b| b.is_ascii_graphic());
    if !valid {
        return Err(bad());
    }
    value
        .to_str()
        .map(|s| Some(s.to_owned()))
        .map_err(|_| bad())
}

/// Compares without an early exit, so response timing does not reveal how much of the dev
/// token a guess got right.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests;
