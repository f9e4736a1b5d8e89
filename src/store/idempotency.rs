//! Retry-safe writes: what the gateway remembers of a request sent with an `Idempotency-Key`
//! (after the IETF httpapi draft), so a client's retry gets the first answer instead of a
//! second call. Memory and SQLite for one instance.
//!
//! Nothing stored reveals the key or the answer to whoever reads the store: a record is found
//! by a digest of the caller and the key, and the answer is sealed (AES-256-GCM) under a key
//! derived from the caller and the `Idempotency-Key` itself, which only the client holds.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
    time::{Duration, SystemTime},
};

use async_trait::async_trait;

use super::StoreError;
use crate::oauth::{RecordId, Sealed, Vault};

/// Most records kept in memory: a client that sends a new key with every request cannot grow
/// the gateway without bound (the oldest finished ones go first).
pub const MAX_MEMORY_RECORDS: usize = 100_000;

/// One caller's key, as the store knows it: digests only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey {
    /// Names the record: a digest of the tenant, user and key.
    pub lookup: String,
    /// The key the answer is sealed with (hex), derived from the same; never stored.
    seal_key: String,
}

impl IdempotencyKey {
    pub fn new(tenant: &str, user: &str, key: &str) -> IdempotencyKey {
        let part = |domain: &str| {
            let text = format!(
                "{domain}\0{}\0{tenant}\0{}\0{user}\0{}\0{key}",
                tenant.len(),
                user.len(),
                key.len()
            );
            crate::digest::sha256_hex(text.as_bytes())
        };
        IdempotencyKey {
            lookup: part("mcpgate-idempotency-lookup"),
            seal_key: part("mcpgate-idempotency-seal"),
        }
    }

    fn vault(&self) -> Result<Vault, StoreError> {
        Vault::new([self.seal_key.as_str()])
            .map_err(|e| StoreError::Corrupt(format!("an idempotency key: {e}")))
    }

    /// `answer` sealed for this key.
    pub fn seal(&self, answer: &Answer) -> Result<Sealed, StoreError> {
        let plain = serde_json::to_vec(answer).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.vault()?
            .seal(&self.record(), &plain)
            .map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    /// The answer `sealed` holds, if it was sealed for this key.
    pub fn open(&self, sealed: &Sealed) -> Result<Answer, StoreError> {
        let plain = self
            .vault()?
            .open(&self.record(), sealed)
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
        serde_json::from_slice(&plain).map_err(|e| StoreError::Corrupt(e.to_string()))
    }

    fn record(&self) -> RecordId<'_> {
        RecordId {
            kind: "idempotent_answer",
            parts: vec![&self.lookup],
        }
    }
}

/// A finished request's answer: what the client got the first time.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
}

/// What a request with a key may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// Nothing known of the key (or it expired): go on, then [`IdempotencyStore::finish`].
    Fresh,
    /// The same request finished before: its answer, sealed.
    Replay(Sealed),
    /// The key was used for another request.
    Mismatch,
    /// The same request is being answered now.
    InFlight,
}

#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Claims `key` for the request `request_hash` at `now`, unless it is known: an unfinished
    /// claim older than `stale_after` (its instance died mid-request) counts as unknown.
    async fn begin(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        now: SystemTime,
        stale_after: Duration,
    ) -> Result<Begin, StoreError>;
    /// Keeps the answer of the request that claimed `key`, until `expires_at`.
    async fn finish(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        answer: &Sealed,
        expires_at: SystemTime,
    ) -> Result<(), StoreError>;
    /// Drops an unfinished claim (the request ended without an answer worth keeping: it may
    /// be retried with the same key).
    async fn release(&self, key: &IdempotencyKey, request_hash: &str) -> Result<(), StoreError>;
    /// Drops what expired at `now`; how many.
    async fn purge(&self, now: SystemTime) -> Result<u64, StoreError>;
}

/// What a store holds of a key, as [`decide`] reads it (times in microseconds since the
/// epoch).
pub(crate) struct Held {
    pub request_hash: String,
    pub answer: Option<Sealed>,
    pub started: i64,
    pub expires_at: Option<i64>,
}

impl Held {
    /// What a SQL store's row holds: the answer's three sealed parts are all there once the
    /// request finished, none before.
    pub(crate) fn from_columns(
        request_hash: String,
        (key_id, nonce, ciphertext): (Option<String>, Option<Vec<u8>>, Option<Vec<u8>>),
        started: i64,
        expires_at: Option<i64>,
    ) -> Held {
        Held {
            request_hash,
            answer: match (key_id, nonce, ciphertext) {
                (Some(key_id), Some(nonce), Some(ciphertext)) => Some(Sealed {
                    key_id,
                    nonce,
                    ciphertext,
                }),
                _ => None,
            },
            started,
            expires_at,
        }
    }
}

/// What a request may do given what is held of its key: `None` to claim it (nothing held,
/// expired, or a claim abandoned `stale_after` ago), else the answer.
pub(crate) fn decide(
    held: Held,
    request_hash: &str,
    now: i64,
    stale_after: Duration,
) -> Option<Begin> {
    let stale = i64::try_from(stale_after.as_micros()).unwrap_or(i64::MAX);
    let expired = held.expires_at.is_some_and(|at| at <= now);
    let abandoned = held.answer.is_none() && held.started.saturating_add(stale) <= now;
    if expired || abandoned {
        return None;
    }
    Some(if held.request_hash != request_hash {
        Begin::Mismatch
    } else {
        match held.answer {
            Some(sealed) => Begin::Replay(sealed),
            None => Begin::InFlight,
        }
    })
}

#[derive(Debug, Clone)]
struct Entry {
    request_hash: String,
    answer: Option<Sealed>,
    started: SystemTime,
    expires_at: Option<SystemTime>,
}

/// In memory: gone with the process.
#[derive(Debug, Default)]
pub struct MemoryIdempotency {
    entries: Mutex<HashMap<String, Entry>>,
}

#[async_trait]
impl IdempotencyStore for MemoryIdempotency {
    async fn begin(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        now: SystemTime,
        stale_after: Duration,
    ) -> Result<Begin, StoreError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get(&key.lookup) {
            let held = Held {
                request_hash: entry.request_hash.clone(),
                answer: entry.answer.clone(),
                started: super::clock::to_micros(entry.started),
                expires_at: entry.expires_at.map(super::clock::to_micros),
            };
            if let Some(begin) = decide(
                held,
                request_hash,
                super::clock::to_micros(now),
                stale_after,
            ) {
                return Ok(begin);
            }
        }
        if entries.len() >= MAX_MEMORY_RECORDS {
            entries.retain(|_, e| e.expires_at.is_none_or(|at| at > now));
            if entries.len() >= MAX_MEMORY_RECORDS {
                return Err(StoreError::Full);
            }
        }
        entries.insert(
            key.lookup.clone(),
            Entry {
                request_hash: request_hash.to_owned(),
                answer: None,
                started: now,
                expires_at: None,
            },
        );
        Ok(Begin::Fresh)
    }

    async fn finish(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        answer: &Sealed,
        expires_at: SystemTime,
    ) -> Result<(), StoreError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = entries.get_mut(&key.lookup)
            && entry.request_hash == request_hash
            && entry.answer.is_none()
        {
            entry.answer = Some(answer.clone());
            entry.expires_at = Some(expires_at);
        }
        Ok(())
    }

    async fn release(&self, key: &IdempotencyKey, request_hash: &str) -> Result<(), StoreError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if entries
            .get(&key.lookup)
            .is_some_and(|e| e.request_hash == request_hash && e.answer.is_none())
        {
            entries.remove(&key.lookup);
        }
        Ok(())
    }

    async fn purge(&self, now: SystemTime) -> Result<u64, StoreError> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let before = entries.len();
        entries.retain(|_, e| e.expires_at.is_none_or(|at| at > now));
        Ok((before - entries.len()) as u64)
    }
}

#[cfg(test)]
pub(crate) mod contract {
    use super::*;

    /// The contract every backend keeps.
    pub(crate) async fn holds(store: &dyn IdempotencyStore) {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let stale = Duration::from_secs(120);
        let key = IdempotencyKey::new("acme", "alice", "k-1");
        let answer = Answer {
            status: 200,
            body: b"{\"ok\":true}".to_vec(),
        };
        assert_eq!(
            store.begin(&key, "h1", t0, stale).await.expect("begin"),
            Begin::Fresh
        );
        assert_eq!(
            store.begin(&key, "h1", t0, stale).await.expect("begin"),
            Begin::InFlight,
            "the same request while the first runs"
        );
        assert_eq!(
            store.begin(&key, "h2", t0, stale).await.expect("begin"),
            Begin::Mismatch
        );
        // Another user's key of the same text is another record.
        let bobs = IdempotencyKey::new("acme", "bob", "k-1");
        assert_ne!(bobs.lookup, key.lookup);
        assert_eq!(
            store.begin(&bobs, "h1", t0, stale).await.expect("begin"),
            Begin::Fresh
        );
        let sealed = key.seal(&answer).expect("sealed");
        store
            .finish(&key, "h1", &sealed, t0 + Duration::from_secs(60))
            .await
            .expect("finish");
        match store.begin(&key, "h1", t0, stale).await.expect("begin") {
            Begin::Replay(kept) => assert_eq!(key.open(&kept).expect("opens"), answer),
            other => panic!("a replay, not {other:?}"),
        }
        assert!(bobs.open(&sealed).is_err(), "sealed for its own key alone");
        // Expired: fresh again, and purged.
        let later = t0 + Duration::from_secs(61);
        assert_eq!(store.purge(later).await.expect("purge"), 1);
        assert_eq!(
            store.begin(&key, "h2", later, stale).await.expect("begin"),
            Begin::Fresh
        );
        // Released: fresh again at once; an abandoned claim is fresh after `stale_after`.
        store.release(&key, "h2").await.expect("release");
        assert_eq!(
            store.begin(&key, "h3", later, stale).await.expect("begin"),
            Begin::Fresh
        );
        assert_eq!(
            store
                .begin(&key, "h4", later + stale, stale)
                .await
                .expect("begin"),
            Begin::Fresh,
            "an abandoned claim"
        );
    }

    #[tokio::test]
    async fn memory_keeps_the_contract() {
        holds(&MemoryIdempotency::default()).await;
    }
}
