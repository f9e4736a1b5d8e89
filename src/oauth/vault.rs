//! Users' upstream OAuth secrets at rest: sealed with AES-256-GCM under a key from the
//! environment, each record bound to its identity, so the database alone reveals nothing and a
//! sealed record moved to another row (another user, server or kind) no longer opens.
//!
//! Several keys may be configured: the first seals, every one opens. Each record names the
//! key that sealed it by a key id (the first 8 bytes of the key's SHA-256, in hex), so a new key
//! is rolled out by putting it first and keeping the old one until records are sealed again
//! (every refresh and every new connection re-seals under the first key).

use aws_lc_rs::{
    aead::{AES_256_GCM, Aad, LessSafeKey, NONCE_LEN, Nonce, UnboundKey},
    rand::{SecureRandom, SystemRandom},
};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// A key is 32 random bytes, written as 64 hex digits or base64 (standard or URL-safe).
pub const KEY_BYTES: usize = 32;

/// What a record's identity is prefixed with: a version, so a later format cannot be confused
/// with this one.
const AAD_PREFIX: &[u8] = b"mcpgate/oauth/v1";

/// Why a key or a sealed record is refused. Messages never quote key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VaultError {
    #[error("an OAuth token key must be 32 bytes, written as 64 hex digits or base64")]
    BadKey,
    #[error("no OAuth token key is configured")]
    NoKey,
    #[error("two OAuth token keys are the same key")]
    DuplicateKey,
    #[error("the record was sealed under key id {key_id}, which is not configured")]
    UnknownKey { key_id: String },
    #[error("the record does not open: it was altered, or belongs to another row")]
    Tampered,
    #[error("the system random number generator failed")]
    Random,
}

/// What a record is, bound into its seal: the kind of secret and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordId<'a> {
    pub kind: &'a str,
    pub parts: Vec<&'a str>,
}

impl RecordId<'_> {
    /// The associated data: prefix, kind and parts, each length-prefixed so that no two
    /// identities share an encoding.
    fn aad(&self) -> Vec<u8> {
        let mut out = AAD_PREFIX.to_vec();
        for part in std::iter::once(self.kind).chain(self.parts.iter().copied()) {
            out.extend_from_slice(&(part.len() as u64).to_be_bytes());
            out.extend_from_slice(part.as_bytes());
        }
        out
    }
}

/// A sealed secret as stored: which key, the nonce, and ciphertext with its tag.
#[derive(Clone, PartialEq, Eq)]
pub struct Sealed {
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl std::fmt::Debug for Sealed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sealed")
            .field("key_id", &self.key_id)
            .field("bytes", &self.ciphertext.len())
            .finish_non_exhaustive()
    }
}

struct Key {
    id: String,
    key: LessSafeKey,
}

/// The configured keys: the first seals, all open.
pub struct Vault {
    keys: Vec<Key>,
    random: SystemRandom,
}

impl std::fmt::Debug for Vault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<&str> = self.keys.iter().map(|k| k.id.as_str()).collect();
        f.debug_struct("Vault").field("key_ids", &ids).finish()
    }
}

impl Vault {
    /// A vault from keys as written (hex or base64); the first seals.
    pub fn new<'a>(written: impl IntoIterator<Item = &'a str>) -> Result<Vault, VaultError> {
        let mut keys: Vec<Key> = Vec::new();
        for text in written {
            let bytes = decode_key(text)?;
            let id = key_id(&bytes);
            if keys.iter().any(|k| k.id == id) {
                return Err(VaultError::DuplicateKey);
            }
            let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| VaultError::BadKey)?;
            keys.push(Key {
                id,
                key: LessSafeKey::new(unbound),
            });
        }
        if keys.is_empty() {
            return Err(VaultError::NoKey);
        }
        Ok(Vault {
            keys,
            random: SystemRandom::new(),
        })
    }

    /// A vault from the `[oauth] keys` references, resolved from `env`. The message of an
    /// error names no key material.
    pub fn from_config(
        keys: &[crate::config::SecretTemplate],
        env: &crate::config::Env,
    ) -> Result<Vault, String> {
        let mut written: Vec<zeroize::Zeroizing<String>> = Vec::with_capacity(keys.len());
        for template in keys {
            let secret = template.resolve(env)?;
            written.push(zeroize::Zeroizing::new(secret.expose().to_owned()));
        }
        Vault::new(written.iter().map(|k| k.as_str())).map_err(|err| err.to_string())
    }

    /// The id of the key that seals.
    pub fn current_key_id(&self) -> &str {
        &self.keys[0].id
    }

    /// Seals `plaintext` as the record `id`, under the first key and a fresh random nonce
    /// (96 bits: collisions are negligible far beyond the records one gateway seals).
    pub fn seal(&self, id: &RecordId<'_>, plaintext: &[u8]) -> Result<Sealed, VaultError> {
        let key = &self.keys[0];
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| VaultError::Random)?;
        let mut buffer = plaintext.to_vec();
        key.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(id.aad()),
                &mut buffer,
            )
            .map_err(|_| VaultError::Random)?;
        Ok(Sealed {
            key_id: key.id.clone(),
            nonce: nonce.to_vec(),
            ciphertext: buffer,
        })
    }

    /// Opens a record sealed as `id`; fails if it was sealed as anything else, altered, or
    /// sealed under a key no longer configured.
    pub fn open(
        &self,
        id: &RecordId<'_>,
        sealed: &Sealed,
    ) -> Result<Zeroizing<Vec<u8>>, VaultError> {
        let key = self
            .keys
            .iter()
            .find(|k| k.id == sealed.key_id)
            .ok_or_else(|| VaultError::UnknownKey {
                key_id: sealed.key_id.clone(),
            })?;
        let nonce: [u8; NONCE_LEN] = sealed
            .nonce
            .as_slice()
            .try_into()
            .map_err(|_| VaultError::Tampered)?;
        let mut buffer = Zeroizing::new(sealed.ciphertext.clone());
        let len = key
            .key
            .open_in_place(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(id.aad()),
                &mut buffer,
            )
            .map_err(|_| VaultError::Tampered)?
            .len();
        buffer.truncate(len);
        Ok(buffer)
    }
}

/// 64 hex digits, or base64 (standard or URL-safe, padded or not) of 32 bytes.
fn decode_key(text: &str) -> Result<Zeroizing<Vec<u8>>, VaultError> {
    let text = text.trim();
    if text.len() == 2 * KEY_BYTES && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        let bytes = (0..KEY_BYTES)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| VaultError::BadKey)?;
        return Ok(Zeroizing::new(bytes));
    }
    let bytes = Zeroizing::new(crate::digest::base64_decode(text).ok_or(VaultError::BadKey)?);
    if bytes.len() != KEY_BYTES {
        return Err(VaultError::BadKey);
    }
    Ok(bytes)
}

fn key_id(key: &[u8]) -> String {
    let digest = Sha256::digest(key);
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    /// 32 bytes of 0xff in URL-safe base64 without padding.
    const K2: &str = "__________________________________________8";

    fn alice() -> RecordId<'static> {
        RecordId {
            kind: "connection",
            parts: vec!["acme", "alice", "linear"],
        }
    }

    #[test]
    fn a_record_opens_as_itself_only() {
        let vault = Vault::new([K1]).expect("vault");
        let sealed = vault
            .seal(&alice(), b"refresh-token-canary")
            .expect("sealed");
        assert!(!sealed.ciphertext.windows(6).any(|w| w == b"canary"));
        assert_eq!(
            &*vault.open(&alice(), &sealed).expect("opens"),
            b"refresh-token-canary"
        );
        for other in [
            RecordId {
                kind: "connection",
                parts: vec!["acme", "bob", "linear"],
            },
            RecordId {
                kind: "connection",
                parts: vec!["acme", "alice", "github"],
            },
            RecordId {
                kind: "pending",
                parts: vec!["acme", "alice", "linear"],
            },
            // The same bytes split differently are another identity.
            RecordId {
                kind: "connection",
                parts: vec!["acme", "alicelinear"],
            },
        ] {
            assert_eq!(
                vault.open(&other, &sealed),
                Err(VaultError::Tampered),
                "{other:?}"
            );
        }
        let mut altered = sealed.clone();
        altered.ciphertext[0] ^= 1;
        assert_eq!(vault.open(&alice(), &altered), Err(VaultError::Tampered));
        // Two seals of the same secret differ (fresh nonces).
        assert_ne!(
            vault.seal(&alice(), b"x").expect("a"),
            vault.seal(&alice(), b"x").expect("b")
        );
    }

    #[test]
    fn keys_rotate_without_downtime() {
        let old = Vault::new([K1]).expect("old");
        let sealed_old = old.seal(&alice(), b"secret").expect("sealed");
        let rotated = Vault::new([K2, K1]).expect("rotated");
        assert_eq!(
            &*rotated.open(&alice(), &sealed_old).expect("old key opens"),
            b"secret"
        );
        let sealed_new = rotated.seal(&alice(), b"secret").expect("sealed");
        assert_eq!(sealed_new.key_id, rotated.current_key_id());
        assert_ne!(sealed_new.key_id, sealed_old.key_id);
        let without_old = Vault::new([K2]).expect("old key retired");
        assert_eq!(
            without_old.open(&alice(), &sealed_old),
            Err(VaultError::UnknownKey {
                key_id: sealed_old.key_id.clone()
            })
        );
    }

    #[test]
    fn keys_are_32_bytes_in_hex_or_base64() {
        assert!(Vault::new([K1]).is_ok());
        assert!(Vault::new([K2]).is_ok());
        let standard = "//////////////////////////////////////////8=";
        assert_eq!(
            Vault::new([standard])
                .expect("standard base64")
                .current_key_id(),
            Vault::new([K2]).expect("url-safe").current_key_id()
        );
        for bad in ["", "short", &K1[..62], "zz".repeat(32).as_str(), "AAAA"] {
            assert_eq!(Vault::new([bad]).err(), Some(VaultError::BadKey), "{bad}");
        }
        assert_eq!(Vault::new([]).err(), Some(VaultError::NoKey));
        assert_eq!(Vault::new([K1, K1]).err(), Some(VaultError::DuplicateKey));
        assert!(!format!("{:?}", Vault::new([K1]).expect("vault")).contains("0001"));
    }
}
