//! Bearer tokens already verified, with whom they name, until they expire: a client sends the
//! same token on every request, and checking its signature and claims again each time was a
//! tenth of the gateway's own work per call. Bounded; only tokens verified against keys that
//! cannot change while the verifier lives (an HMAC secret, PEM files) are kept.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use super::claims::Identity;

/// Most tokens remembered: callers are far fewer, and each entry is a few hundred bytes.
const MAX_TOKENS: usize = 1024;

/// Verified tokens and the identity each one carries.
#[derive(Default)]
pub(super) struct VerifiedTokens {
    entries: Mutex<HashMap<Box<str>, Entry>>,
}

struct Entry {
    identity: Identity,
    /// The last second (Unix time) verification would still accept the token: its `exp`
    /// plus the leeway.
    valid_until: u64,
}

impl VerifiedTokens {
    /// The identity of `token` if it was verified and is still valid at `now`.
    pub(super) fn get(&self, token: &str, now: u64) -> Option<Identity> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries
            .get(token)
            .filter(|entry| now <= entry.valid_until)
            .map(|entry| entry.identity.clone())
    }

    /// Remembers `token`, just verified at `now`, as valid until `valid_until`. When full,
    /// expired entries go first, and everything if none has expired.
    pub(super) fn insert(&self, token: &str, identity: &Identity, valid_until: u64, now: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries.len() >= MAX_TOKENS && !entries.contains_key(token) {
            entries.retain(|_, entry| now <= entry.valid_until);
            if entries.len() >= MAX_TOKENS {
                entries.clear();
            }
        }
        entries.insert(
            token.into(),
            Entry {
                identity: identity.clone(),
                valid_until,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(user: &str) -> Identity {
        Identity {
            tenant: "acme".to_owned(),
            user: user.to_owned(),
            roles: vec!["dev".to_owned()],
            sid: None,
            scopes: Vec::new(),
        }
    }

    #[test]
    fn a_token_is_remembered_until_it_expires() {
        let tokens = VerifiedTokens::default();
        assert_eq!(tokens.get("t", 100), None);
        tokens.insert("t", &who("alice"), 200, 100);
        assert_eq!(tokens.get("t", 150), Some(who("alice")));
        assert_eq!(tokens.get("t", 200), Some(who("alice")));
        assert_eq!(tokens.get("t", 201), None);
        assert_eq!(tokens.get("t2", 150), None, "only the exact token");
    }

    #[test]
    fn the_cache_stays_bounded() {
        let tokens = VerifiedTokens::default();
        for i in 0..MAX_TOKENS {
            // Half already expired at the time of the next insert.
            let valid_until = if i % 2 == 0 { 50 } else { 500 };
            tokens.insert(&format!("t{i}"), &who("u"), valid_until, 10);
        }
        tokens.insert("new", &who("n"), 500, 100);
        let len = tokens.entries.lock().expect("lock").len();
        assert_eq!(len, MAX_TOKENS / 2 + 1, "expired entries were dropped");
        assert_eq!(tokens.get("new", 100), Some(who("n")));
        assert_eq!(tokens.get("t1", 100), Some(who("u")));
        // None expired: the whole cache goes, never past the bound.
        for i in 0..MAX_TOKENS {
            tokens.insert(&format!("s{i}"), &who("u"), 900, 100);
        }
        assert!(tokens.entries.lock().expect("lock").len() <= MAX_TOKENS);
    }
}
