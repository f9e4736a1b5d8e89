//! Digests, encodings and randomness: lowercase hex SHA-256, base64 decoding, and random hex
//! ids and tokens from the operating system's generator.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

/// Base64 of either alphabet (standard or URL-safe), padding optional; `None` for any
/// other character.
pub fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for byte in text.bytes() {
        let value = match byte {
            b'A'..=b'Z' => byte - b'A',
            b'a'..=b'z' => byte - b'a' + 26,
            b'0'..=b'9' => byte - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(value);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(u8::try_from(acc >> bits).ok()?);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

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
