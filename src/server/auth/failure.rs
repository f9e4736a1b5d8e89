//! Why a request was not authenticated (`AuthFailure`) and why authentication could not be set
//! up (`AuthSetupError`).

use std::{fmt, net::SocketAddr, path::PathBuf, time::Duration};

use http::StatusCode;

/// The realm announced in `WWW-Authenticate`.
const REALM: &str = "mcpgate";

/// What went wrong, for programs: stable snake_case codes in every API.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthCode {
    /// No `Authorization` header.
    MissingToken,
    /// An `Authorization` header that is not one well-formed `Bearer` credential, or a bad
    /// `x-mcpgate-session` header.
    InvalidRequest,
    /// A token in the query string (refused even when a header is present too).
    TokenInQuery,
    /// A token longer than the gateway accepts.
    TokenTooLarge,
    /// Malformed token, refused algorithm, bad signature, wrong issuer or audience, missing
    /// registered claim.
    InvalidToken,
    /// `exp` is past, beyond the configured leeway.
    ExpiredToken,
    /// `nbf` is in the future, beyond the configured leeway.
    TokenNotYetValid,
    /// The token names a key id the JWKS does not hold (yet); a refresh has been requested.
    UnknownKey,
    /// The signature verifies but the tenant, user, roles or `sid` claims are missing or
    /// unusable.
    InvalidClaims,
    /// A valid token without a scope `/mcp` requires (`[server.auth] scopes`).
    InsufficientScope,
}

impl AuthCode {
    pub fn as_str(self) -> &'static str {
        match self {
            AuthCode::MissingToken => "missing_token",
            AuthCode::InvalidRequest => "invalid_request",
            AuthCode::TokenInQuery => "token_in_query",
            AuthCode::TokenTooLarge => "token_too_large",
            AuthCode::InvalidToken => "invalid_token",
            AuthCode::ExpiredToken => "expired_token",
            AuthCode::TokenNotYetValid => "token_not_yet_valid",
            AuthCode::UnknownKey => "unknown_key",
            AuthCode::InvalidClaims => "invalid_claims",
            AuthCode::InsufficientScope => "insufficient_scope",
        }
    }

    /// The RFC 6750 error code; `None` for a request without credentials, which RFC 6750
    /// §3.1 answers with the challenge alone.
    fn bearer_error(self) -> Option<&'static str> {
        match self {
            AuthCode::MissingToken => None,
            AuthCode::InvalidRequest | AuthCode::TokenInQuery => Some("invalid_request"),
            AuthCode::TokenTooLarge
            | AuthCode::InvalidToken
            | AuthCode::ExpiredToken
            | AuthCode::TokenNotYetValid
            | AuthCode::UnknownKey
            | AuthCode::InvalidClaims => Some("invalid_token"),
            AuthCode::InsufficientScope => Some("insufficient_scope"),
        }
    }
}

impl fmt::Display for AuthCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused request. The message is safe to send to the caller: it names claims and limits,
/// never the token or any claim's value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct AuthFailure {
    code: AuthCode,
    message: String,
}

impl AuthFailure {
    pub(super) fn new(code: AuthCode, message: impl Into<String>) -> AuthFailure {
        AuthFailure {
            code,
            message: message.into(),
        }
    }

    pub fn code(&self) -> AuthCode {
        self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status RFC 6750 gives this failure: 400 for a malformed request, 403 for a
    /// missing scope, else 401.
    pub fn status(&self) -> StatusCode {
        match self.code.bearer_error() {
            Some("invalid_request") => StatusCode::BAD_REQUEST,
            Some("insufficient_scope") => StatusCode::FORBIDDEN,
            _ => StatusCode::UNAUTHORIZED,
        }
    }

    /// The `WWW-Authenticate` header value, e.g.
    /// `Bearer realm="mcpgate", error="invalid_token", error_description="token has expired"`.
    pub fn www_authenticate(&self) -> String {
        match self.code.bearer_error() {
            None => format!("Bearer realm=\"{REALM}\""),
            Some(error) => format!(
                "Bearer realm=\"{REALM}\", error=\"{error}\", error_description=\"{}\"",
                quoted_text(&self.message)
            ),
        }
    }
}

/// RFC 6750 limits `error_description` to printable ASCII without `"` and `\`; anything else
/// would break the header or its parsing by clients.
fn quoted_text(text: &str) -> String {
    text.chars()
        .filter_map(|c| match c {
            '"' | '\\' => Some('\''),
            ' '..='~' => Some(c),
            _ => None,
        })
        .collect()
}

/// Why `mcpgate serve` refuses to start with the configured authentication.
#[derive(Debug, thiserror::Error)]
pub enum AuthSetupError {
    #[error(
        "auth mode `{mode}` accepts loopback addresses only, but the service listens on \
         {listen}; bind 127.0.0.1 or configure JWT authentication"
    )]
    NotLoopback {
        mode: &'static str,
        listen: SocketAddr,
    },
    #[error("auth mode `{mode}` is refused in production; configure JWT authentication")]
    NotInProduction { mode: &'static str },
    #[error("JWT auth needs at least one accepted algorithm")]
    NoAlgorithms,
    #[error("JWT leeway of {leeway:?} is too large; at most {max:?} is allowed")]
    LeewayTooLarge { leeway: Duration, max: Duration },
    #[error("JWT setting `{field}` must not be empty")]
    EmptySetting { field: &'static str },
    #[error("HS256 is accepted but no JWT secret is configured")]
    SecretMissing,
    #[error("a JWT secret is configured but HS256 is not an accepted algorithm")]
    SecretWithoutHs256,
    #[error("the JWT secret could not be resolved: {reason}")]
    SecretUnresolved { reason: String },
    #[error("the JWT secret is {len} bytes; production requires at least {min}")]
    WeakSecret { len: usize, min: usize },
    #[error("{algorithm} is accepted but no public key file or JWKS URL is configured")]
    NoPublicKeys { algorithm: &'static str },
    #[error("public key file {}: {reason}", path.display())]
    KeyFile { path: PathBuf, reason: String },
    #[error("JWKS: {0}")]
    Jwks(#[from] super::jwks::JwksError),
}
