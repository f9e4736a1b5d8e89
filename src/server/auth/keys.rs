//! Verification keys bound to one algorithm each: PEM public key files and JWKS entries.
//!
//! A key is usable only with the algorithm it was loaded for. That binding is what defeats
//! algorithm confusion: an RSA public key is never handed to HMAC as a secret.

use std::path::Path;

use jsonwebtoken::{
    Algorithm, DecodingKey, DecodingKeyKind,
    crypto::CryptoProvider,
    jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse},
};

use super::AuthSetupError;

/// A public key file is a few hundred bytes; anything much larger is not one.
const MAX_KEY_FILE_BYTES: u64 = 64 * 1024;

/// RSA keys below 2048 bits are factorable by well-funded attackers (NIST SP 800-131A).
const MIN_RSA_MODULUS_BYTES: usize = 256;

/// Length of an uncompressed P-256 point: `0x04 || x || y`.
const P256_POINT_BYTES: usize = 65;

/// A verification key and the one algorithm it may verify.
#[derive(Clone)]
pub(super) struct PublicKey {
    pub alg: Algorithm,
    /// The JWKS `kid`; `None` for keys from files.
    pub kid: Option<String>,
    pub key: DecodingKey,
}

/// Loads a PEM public key file (RSA for RS256, P-256 for ES256) whose algorithm is accepted.
pub(super) async fn load_pem(
    path: &Path,
    accepted: &[Algorithm],
) -> Result<PublicKey, AuthSetupError> {
    let fail = |reason: &str| AuthSetupError::KeyFile {
        path: path.to_owned(),
        reason: reason.to_owned(),
    };
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(|err| fail(&err.to_string()))?;
    if meta.len() > MAX_KEY_FILE_BYTES {
        return Err(fail(&format!(
            "larger than {MAX_KEY_FILE_BYTES} bytes, not a public key"
        )));
    }
    let bytes = tokio::fs::read(path)
        .await
        .map_err(|err| fail(&err.to_string()))?;
    // The decoder would also take private keys and certificates; a private key here means a
    // signing key was copied to the gateway, which must never hold one.
    let text = String::from_utf8_lossy(&bytes);
    let labels: Vec<&str> = text
        .lines()
        .filter_map(|line| line.trim().strip_prefix("-----BEGIN "))
        .collect();
    if labels.iter().any(|label| label.contains("PRIVATE")) {
        return Err(fail(
            "holds a private key; give the gateway the public key only",
        ));
    }
    if !matches!(
        labels.as_slice(),
        ["PUBLIC KEY-----"] | ["RSA PUBLIC KEY-----"]
    ) {
        return Err(fail("expected exactly one PEM `PUBLIC KEY` block"));
    }
    let (alg, key) = if let Ok(rsa) = DecodingKey::from_rsa_pem(&bytes) {
        (Algorithm::RS256, rsa_components(&rsa).map_err(fail)?)
    } else if let Ok(ec) = DecodingKey::from_ec_pem(&bytes) {
        check_p256(&ec).map_err(fail)?;
        (Algorithm::ES256, ec)
    } else {
        return Err(fail("not an RSA or P-256 public key"));
    };
    if !accepted.contains(&alg) {
        return Err(fail(&format!(
            "is a key for {alg:?}, which is not an accepted algorithm"
        )));
    }
    Ok(PublicKey {
        alg,
        kid: None,
        key,
    })
}

/// A JWKS entry as a key, or why it is skipped. Only RSA (RS256) and P-256 (ES256) signing
/// keys are taken; symmetric (`oct`) keys never are, since a published secret is no secret.
pub(super) fn from_jwk(jwk: &Jwk, accepted: &[Algorithm]) -> Result<PublicKey, &'static str> {
    if jwk
        .common
        .public_key_use
        .as_ref()
        .is_some_and(|u| *u != PublicKeyUse::Signature)
    {
        return Err("not a signing key (`use`)");
    }
    let (alg, declared) = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => (Algorithm::RS256, KeyAlgorithm::RS256),
        AlgorithmParameters::EllipticCurve(ec) if ec.curve == EllipticCurve::P256 => {
            (Algorithm::ES256, KeyAlgorithm::ES256)
        }
        _ => return Err("unsupported key type"),
    };
    if jwk
        .common
        .key_algorithm
        .is_some_and(|named| named != declared)
    {
        return Err("its `alg` is not RS256 or ES256");
    }
    if !accepted.contains(&alg) {
        return Err("its algorithm is not accepted");
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|_| "malformed key parameters")?;
    match alg {
        Algorithm::RS256 => check_modulus(&key)?,
        _ => check_p256(&key)?,
    }
    Ok(PublicKey {
        alg,
        kid: jwk.common.key_id.clone(),
        key,
    })
}

/// Turns a PEM RSA key into modulus/exponent form, so file and JWKS keys are checked alike.
fn rsa_components(key: &DecodingKey) -> Result<DecodingKey, &'static str> {
    let provider = CryptoProvider::try_get_default().ok_or("no crypto provider is available")?;
    let der = key
        .try_get_as_bytes()
        .map_err(|_| "not an RSA public key")?;
    let (n, e) = (provider.key_utils.rsa_pub_components_from_public_key)(der)
        .map_err(|_| "not an RSA public key")?;
    let key = DecodingKey::from_rsa_raw_components(&n, &e);
    check_modulus(&key)?;
    Ok(key)
}

fn check_modulus(key: &DecodingKey) -> Result<(), &'static str> {
    match key.kind() {
        DecodingKeyKind::RsaModulusExponent { n, .. }
            if n.iter().skip_while(|b| **b == 0).count() >= MIN_RSA_MODULUS_BYTES =>
        {
            Ok(())
        }
        _ => Err("RSA key shorter than 2048 bits"),
    }
}

fn check_p256(key: &DecodingKey) -> Result<(), &'static str> {
    match key.try_get_as_bytes() {
        Ok(point) if point.len() == P256_POINT_BYTES && point[0] == 0x04 => Ok(()),
        _ => Err("EC key is not an uncompressed P-256 key (ES256)"),
    }
}
