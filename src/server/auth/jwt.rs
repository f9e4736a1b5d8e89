//! Bearer JWT verification: pinned algorithms, keys bound to algorithms, required registered
//! claims, and the caller's identity read from the verified claims.

use std::{sync::Arc, time::Duration};

use jsonwebtoken::{Algorithm, DecodingKey, Validation, decode, decode_header, errors::ErrorKind};
use serde_json::{Map, Value};

use super::{
    AuthCode, AuthFailure, AuthSetupError,
    claims::{ClaimNames, Identity, identity},
    jwks::{HttpsSource, Jwks, JwksSource},
    keys::{PublicKey, load_pem},
    verified::VerifiedTokens,
};
use crate::config::{Env, JwtAlgorithm, JwtConfig};

/// Clock skew beyond half a minute is a broken clock, and every second of leeway extends the
/// life of a stolen token.
pub(super) const MAX_LEEWAY: Duration = Duration::from_secs(30);

/// HS256 secrets shorter than the hash output (32 bytes) can be brute-forced offline from any
/// one token (RFC 7518 §3.2 requires at least this much).
pub(super) const MIN_PRODUCTION_SECRET_BYTES: usize = 32;

/// Registered claims every token must carry: without `exp` a token lives forever, without
/// `iss`/`aud` a token minted for another service would be accepted here.
const REQUIRED_CLAIMS: [&str; 4] = ["exp", "iss", "aud", "sub"];

/// Verifies bearer JWTs against the configured keys and claims.
pub(super) struct JwtVerifier {
    /// One validation per accepted algorithm; a token's `alg` must be one of these.
    validations: Vec<(Algorithm, Validation)>,
    hmac: Option<DecodingKey>,
    files: Vec<PublicKey>,
    jwks: Option<Jwks>,
    names: ClaimNames,
    /// Clock skew allowed on `exp` (and `nbf`), in seconds.
    leeway: u64,
    /// Tokens verified already; used only without a JWKS, whose keys can change.
    verified: VerifiedTokens,
}

impl JwtVerifier {
    pub(super) async fn new(
        cfg: &JwtConfig,
        env: &Env,
        production: bool,
    ) -> Result<JwtVerifier, AuthSetupError> {
        let source = match &cfg.jwks_url {
            Some(url) => Some(
                Arc::new(HttpsSource::new(url).map_err(AuthSetupError::Jwks)?)
                    as Arc<dyn JwksSource>,
            ),
            None => None,
        };
        JwtVerifier::with_jwks_source(cfg, env, production, source).await
    }

    /// [`JwtVerifier::new`] with the JWKS fetched from `source` instead of `cfg.jwks_url`.
    pub(super) async fn with_jwks_source(
        cfg: &JwtConfig,
        env: &Env,
        production: bool,
        jwks_source: Option<Arc<dyn JwksSource>>,
    ) -> Result<JwtVerifier, AuthSetupError> {
        let accepted: Vec<Algorithm> = cfg.algorithms.iter().map(|a| algorithm(*a)).collect();
        if accepted.is_empty() {
            return Err(AuthSetupError::NoAlgorithms);
        }
        if cfg.leeway > MAX_LEEWAY {
            return Err(AuthSetupError::LeewayTooLarge {
                leeway: cfg.leeway,
                max: MAX_LEEWAY,
            });
        }
        for (field, value) in [
            ("issuer", &cfg.issuer),
            ("audience", &cfg.audience),
            ("tenant_claim", &cfg.tenant_claim),
            ("user_claim", &cfg.user_claim),
            ("roles_claim", &cfg.roles_claim),
        ] {
            if value.is_empty() {
                return Err(AuthSetupError::EmptySetting { field });
            }
        }
        let hmac = hmac_key(cfg, env, production, &accepted)?;
        let mut files = Vec::with_capacity(cfg.public_keys.len());
        for path in &cfg.public_keys {
            files.push(load_pem(path, &accepted).await?);
        }
        let jwks = match jwks_source {
            Some(source) => Some(Jwks::start(source, &accepted).await?),
            None => None,
        };
        for (alg, name) in [(Algorithm::RS256, "RS256"), (Algorithm::ES256, "ES256")] {
            let has_file_key = files.iter().any(|key| key.alg == alg);
            if accepted.contains(&alg) && !has_file_key && jwks.is_none() {
                return Err(AuthSetupError::NoPublicKeys { algorithm: name });
            }
        }
        let validations = accepted
            .iter()
            .map(|alg| (*alg, validation(*alg, cfg)))
            .collect();
        Ok(JwtVerifier {
            validations,
            hmac,
            files,
            jwks,
            names: ClaimNames {
                tenant: cfg.tenant_claim.clone(),
                default_tenant: cfg.default_tenant.clone(),
                user: cfg.user_claim.clone(),
                roles: cfg.roles_claim.clone(),
            },
            leeway: cfg.leeway.as_secs(),
            verified: VerifiedTokens::default(),
        })
    }

    /// Seconds of clock skew allowed on `exp`.
    pub(super) fn leeway(&self) -> u64 {
        self.leeway
    }

    /// Verifies `token` and reads the caller from it. A token verified before against keys
    /// that cannot change is taken from [`VerifiedTokens`] until its `exp` (plus leeway).
    pub(super) fn verify(&self, token: &str) -> Result<Identity, AuthFailure> {
        let now = jsonwebtoken::get_current_timestamp();
        let cacheable = self.jwks.is_none();
        if cacheable && let Some(who) = self.verified.get(token, now) {
            return Ok(who);
        }
        // `none` and unknown algorithms fail here: the header parser has no variant for them.
        let header = decode_header(token)
            .map_err(|_| invalid("token header is malformed or names an unsupported algorithm"))?;
        let Some((alg, validation)) = self.validations.iter().find(|(a, _)| *a == header.alg)
        else {
            return Err(invalid("token algorithm is not accepted by this gateway"));
        };
        let jwks_keys = self.jwks.as_ref().map(Jwks::keys);
        let jwks_keys = jwks_keys.as_deref().unwrap_or_default();
        let kid = header.kid.as_deref();
        let kid_unknown = self.jwks.is_some()
            && kid.is_some_and(|kid| !jwks_keys.iter().any(|k| k.kid.as_deref() == Some(kid)));
        // The key set is chosen by the algorithm the key was loaded for, never by the token:
        // an HS256 token is checked against the HMAC secret alone.
        let candidates: Vec<&DecodingKey> = if *alg == Algorithm::HS256 {
            self.hmac.iter().collect()
        } else {
            self.files
                .iter()
                .chain(
                    jwks_keys
                        .iter()
                        .filter(|key| kid.is_none() || key.kid.as_deref() == kid),
                )
                .filter(|key| key.alg == *alg)
                .map(|key| &key.key)
                .collect()
        };
        for key in candidates {
            match decode::<Map<String, Value>>(token, key, validation) {
                Ok(data) => {
                    let who = identity(&data.claims, &self.names)?;
                    let exp = data.claims.get("exp").and_then(Value::as_u64);
                    if cacheable && let Some(exp) = exp {
                        let valid_until = exp.saturating_add(self.leeway);
                        self.verified.insert(token, &who, valid_until, now);
                    }
                    return Ok(who);
                }
                Err(err) if *err.kind() == ErrorKind::InvalidSignature => continue,
                Err(err) => return Err(claims_failure(err.kind())),
            }
        }
        if kid_unknown && let Some(jwks) = &self.jwks {
            jwks.request_refresh();
            return Err(AuthFailure::new(
                AuthCode::UnknownKey,
                "token signing key id is not known; the key set is being refreshed, retry shortly",
            ));
        }
        Err(invalid("token signature does not verify"))
    }
}

fn hmac_key(
    cfg: &JwtConfig,
    env: &Env,
    production: bool,
    accepted: &[Algorithm],
) -> Result<Option<DecodingKey>, AuthSetupError> {
    let wanted = accepted.contains(&Algorithm::HS256);
    let Some(template) = &cfg.secret else {
        return if wanted {
            Err(AuthSetupError::SecretMissing)
        } else {
            Ok(None)
        };
    };
    if !wanted {
        return Err(AuthSetupError::SecretWithoutHs256);
    }
    let secret = template
        .resolve(env)
        .map_err(|reason| AuthSetupError::SecretUnresolved { reason })?;
    let len = secret.expose().len();
    if production && len < MIN_PRODUCTION_SECRET_BYTES {
        return Err(AuthSetupError::WeakSecret {
            len,
            min: MIN_PRODUCTION_SECRET_BYTES,
        });
    }
    if len < MIN_PRODUCTION_SECRET_BYTES {
        tracing::warn!(
            len,
            min = MIN_PRODUCTION_SECRET_BYTES,
            "the JWT secret is short; production mode would refuse it"
        );
    }
    DecodingKey::from_secret(secret.expose().as_bytes())
        .map(Some)
        .map_err(|_| AuthSetupError::SecretUnresolved {
            reason: "the secret is empty".to_owned(),
        })
}

/// jsonwebtoken's defaults (60 s leeway, `nbf` unchecked, `iss`/`aud` checked only when
/// present) are all overridden here.
fn validation(alg: Algorithm, cfg: &JwtConfig) -> Validation {
    let mut v = Validation::new(alg);
    v.set_required_spec_claims(&REQUIRED_CLAIMS);
    v.leeway = cfg.leeway.as_secs();
    v.validate_exp = true;
    v.validate_nbf = true;
    v.validate_aud = true;
    v.set_issuer(&[&cfg.issuer]);
    // A protected `/mcp` also takes tokens asked for its resource (RFC 8707).
    match &cfg.protected {
        Some(protected) if protected.resource.as_str() != cfg.audience => {
            v.set_audience(&[cfg.audience.as_str(), protected.resource.as_str()]);
        }
        _ => v.set_audience(&[&cfg.audience]),
    }
    v
}

fn algorithm(alg: JwtAlgorithm) -> Algorithm {
    match alg {
        JwtAlgorithm::Hs256 => Algorithm::HS256,
        JwtAlgorithm::Rs256 => Algorithm::RS256,
        JwtAlgorithm::Es256 => Algorithm::ES256,
    }
}

/// A verified signature with claims that fail validation.
fn claims_failure(kind: &ErrorKind) -> AuthFailure {
    match kind {
        ErrorKind::ExpiredSignature => {
            AuthFailure::new(AuthCode::ExpiredToken, "token has expired")
        }
        ErrorKind::ImmatureSignature => AuthFailure::new(
            AuthCode::TokenNotYetValid,
            "token is not valid yet (`nbf` is in the future)",
        ),
        ErrorKind::InvalidIssuer => invalid("token issuer is not accepted"),
        ErrorKind::InvalidAudience => invalid("token audience does not name this gateway"),
        // Only the registered claim names reach these variants, never values.
        ErrorKind::MissingRequiredClaim(claim) => {
            invalid(format!("token lacks the required `{claim}` claim"))
        }
        ErrorKind::InvalidClaimFormat(claim) => {
            invalid(format!("token claim `{claim}` has the wrong type"))
        }
        _ => invalid("token is malformed"),
    }
}

fn invalid(message: impl Into<String>) -> AuthFailure {
    AuthFailure::new(AuthCode::InvalidToken, message)
}

#[cfg(test)]
mod tests;
