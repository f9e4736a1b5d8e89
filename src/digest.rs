//! Digests and randomness: lowercase hex SHA-256, and random hex ids and tokens from the
//! operating system's generator.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(digest.len() * 2);
    for b in digest.iter() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// `bytes` random bytes from the OS generator, as lowercase hex.
///
/// Panics only if the OS generator fails, which leaves no safe way to mint tokens.
pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the OS random generator works");
    let mut out = String::with_capacity(bytes * 2);
    for b in &buf {
        let _ = write!(out, "{b:02x}");
    }
    out
}
