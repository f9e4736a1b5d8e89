//! Input rounds handed back to 2026-07-28 clients, shared by every instance: the client's
//! retry may reach any of them. Each round is one entry that expires, taken once; what it
//! holds (the upstream's state, the binding) never reaches the client.

use std::time::Duration;

use super::{Redis, hashed, scripts};
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct RedisRounds {
    redis: Redis,
}

impl RedisRounds {
    pub fn new(redis: Redis) -> RedisRounds {
        RedisRounds { redis }
    }

    fn key(&self, handle: &str) -> String {
        self.redis.key("round", &hashed(&[handle]))
    }

    /// Keeps `value` (JSON) under `handle` for `ttl`, at most `bound` per owner (tenant and
    /// user); [`StoreError::Full`] over it.
    pub async fn put(
        &self,
        handle: &str,
        owner: (&str, &str),
        value: &serde_json::Value,
        ttl: Duration,
        bound: usize,
    ) -> Result<(), StoreError> {
        let index = self.redis.key("round-owner", &hashed(&[owner.0, owner.1]));
        let mut value = value.clone();
        value["indexes"] = serde_json::json!([index]);
        let keys = [self.key(handle), index];
        scripts::insert(&self.redis, &keys, value.to_string(), ttl, handle, bound).await
    }

    /// Takes the round `handle` names, once.
    pub async fn take(&self, handle: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let Some(raw) = scripts::take(&self.redis, &self.key(handle), handle).await? else {
            return Ok(None);
        };
        serde_json::from_str(&raw)
            .map(Some)
            .map_err(|_| StoreError::Corrupt("an input round is not JSON".to_owned()))
    }
}
