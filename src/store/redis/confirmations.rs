//! Pending confirmations and approved tokens in Redis. Every step that grants is one Lua
//! script: insert checks the per-user bound and refuses duplicates, take removes the entry
//! and its index entries together, so of any number of concurrent takes exactly one gets it,
//! whichever instance they reach. Expiry is Redis's own (`PX`, scores on Redis `TIME`): an
//! instance's clock, right or wrong, decides nothing. A token taken is also recorded in
//! PostgreSQL when it is configured, so a Redis restored from an older snapshot, or a
//! replica promoted before it saw the take, cannot hand the token out again.

use std::{
    sync::{Arc, LazyLock},
    time::{Duration, SystemTime},
};

use futures::future::BoxFuture;
use redis::Script;
use serde_json::{Value, json};

use super::{Redis, hashed, scripts};
use crate::store::{
    Approved, Binding, ConfirmationStore, MAX_PER_USER, Pending, StoreError,
    clock::{from_micros, to_micros},
    postgres::Consumed,
};

/// KEYS: user index. ARGV: entry key prefix. Unexpired values, oldest deadline first.
static LIST: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local out = {}
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then table.insert(out, v) else redis.call('ZREM', KEYS[1], id) end
end
return out
",
    )
});

/// KEYS: binding index. ARGV: token key prefix. Takes the grant expiring first:
/// `{token hash, value}`.
static TAKE_BOUND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
while true do
  local first = redis.call('ZRANGE', KEYS[1], 0, 0)
  if #first == 0 then return false end
  local key = ARGV[1] .. first[1]
  local v = redis.call('GET', key)
  redis.call('ZREM', KEYS[1], first[1])
  if v then
    redis.call('DEL', key)
    for _, index in ipairs(cjson.decode(v).indexes) do redis.call('ZREM', index, first[1]) end
    return {first[1], v}
  end
end
",
    )
});

/// Confirmations in Redis; consumed tokens also in PostgreSQL when `consumed` is set.
pub struct RedisConfirmations {
    redis: Redis,
    consumed: Option<Arc<Consumed>>,
}

impl RedisConfirmations {
    pub fn new(redis: Redis, consumed: Option<Arc<Consumed>>) -> RedisConfirmations {
        RedisConfirmations { redis, consumed }
    }

    fn pending_key(&self, id: &str) -> String {
        self.redis.key("pending", id)
    }

    fn token_key(&self, hash: &str) -> String {
        self.redis.key("token", hash)
    }

    fn user_index(&self, kind: &str, tenant: &str, user: &str) -> String {
        self.redis.key(kind, &hashed(&[tenant, user]))
    }

    fn binding_index(&self, binding: &Binding) -> String {
        self.redis.key("approved", &hashed(&binding_parts(binding)))
    }

    async fn insert(
        &self,
        keys: &[String],
        value: String,
        ttl: Duration,
        member: &str,
    ) -> Result<(), StoreError> {
        scripts::insert(&self.redis, keys, value, ttl, member, MAX_PER_USER).await
    }

    /// Records that the token was taken; `false` when it had been taken before.
    async fn first_take(
        &self,
        token_hash: &str,
        confirmation_id: &str,
    ) -> Result<bool, StoreError> {
        match &self.consumed {
            Some(consumed) => consumed.record(token_hash, confirmation_id).await,
            None => Ok(true),
        }
    }
}

fn binding_parts(b: &Binding) -> [&str; 6] {
    [
        &b.tenant,
        &b.user,
        &b.session,
        &b.tool,
        &b.fingerprint,
        &b.args_hash,
    ]
}

fn binding_json(b: &Binding) -> Value {
    json!({
        "tenant": b.tenant, "user": b.user, "session": b.session, "tool": b.tool,
        "fingerprint": b.fingerprint, "argsHash": b.args_hash,
    })
}

fn corrupt() -> StoreError {
    StoreError::Corrupt("a Redis entry is not a confirmation".to_owned())
}

fn text(value: &Value, field: &str) -> Result<String, StoreError> {
    value
        .get(field)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(corrupt)
}

fn time(value: &Value, field: &str) -> Result<SystemTime, StoreError> {
    value
        .get(field)
        .and_then(Value::as_i64)
        .map(from_micros)
        .ok_or_else(corrupt)
}

fn binding_of(value: &Value) -> Result<Binding, StoreError> {
    let b = value.get("binding").ok_or_else(corrupt)?;
    Ok(Binding {
        tenant: text(b, "tenant")?,
        user: text(b, "user")?,
        session: text(b, "session")?,
        tool: text(b, "tool")?,
        fingerprint: text(b, "fingerprint")?,
        args_hash: text(b, "argsHash")?,
    })
}

fn pending_of(raw: &str) -> Result<Pending, StoreError> {
    let value: Value = serde_json::from_str(raw).map_err(|_| corrupt())?;
    Ok(Pending {
        id: text(&value, "id")?,
        binding: binding_of(&value)?,
        created_at: time(&value, "createdAt")?,
        expires_at: time(&value, "expiresAt")?,
    })
}

fn approved_of(raw: &str) -> Result<Approved, StoreError> {
    let value: Value = serde_json::from_str(raw).map_err(|_| corrupt())?;
    Ok(Approved {
        binding: binding_of(&value)?,
        confirmation_id: text(&value, "confirmationId")?,
        expires_at: time(&value, "expiresAt")?,
    })
}

impl ConfirmationStore for RedisConfirmations {
    fn insert_pending(&self, pending: Pending) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let b = &pending.binding;
            let index = self.user_index("pending-user", &b.tenant, &b.user);
            let ttl = pending
                .expires_at
                .duration_since(pending.created_at)
                .unwrap_or_default();
            let value = json!({
                "id": pending.id,
                "binding": binding_json(b),
                "createdAt": to_micros(pending.created_at),
                "expiresAt": to_micros(pending.expires_at),
                "indexes": [index],
            });
            let keys = [self.pending_key(&pending.id), index];
            self.insert(&keys, value.to_string(), ttl, &pending.id)
                .await
        })
    }

    fn take_pending(
        &self,
        id: &str,
        _now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Pending>, StoreError>> {
        let id = id.to_owned();
        Box::pin(async move {
            let taken = scripts::take(&self.redis, &self.pending_key(&id), &id).await?;
            taken.as_deref().map(pending_of).transpose()
        })
    }

    fn list_pending(
        &self,
        tenant: &str,
        user: &str,
        _now: SystemTime,
    ) -> BoxFuture<'_, Result<Vec<Pending>, StoreError>> {
        let index = self.user_index("pending-user", tenant, user);
        Box::pin(async move {
            let mut connection = self.redis.connection();
            let prefix = self.pending_key("");
            let mut invocation = LIST.key(&index);
            invocation.arg(&prefix);
            let values: Vec<String> = self
                .redis
                .run(invocation.invoke_async(&mut connection))
                .await?;
            let mut pending = values
                .iter()
                .map(|v| pending_of(v))
                .collect::<Result<Vec<_>, _>>()?;
            pending.sort_by_key(|p| (p.created_at, p.id.clone()));
            Ok(pending)
        })
    }

    fn insert_token(
        &self,
        token_hash: &str,
        approved: Approved,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let token_hash = token_hash.to_owned();
        Box::pin(async move {
            let b = &approved.binding;
            let user_index = self.user_index("token-user", &b.tenant, &b.user);
            let binding_index = self.binding_index(b);
            let ttl = approved.expires_at.duration_since(now).unwrap_or_default();
            let value = json!({
                "binding": binding_json(b),
                "confirmationId": approved.confirmation_id,
                "expiresAt": to_micros(approved.expires_at),
                "indexes": [user_index, binding_index],
            });
            let keys = [self.token_key(&token_hash), user_index, binding_index];
            self.insert(&keys, value.to_string(), ttl, &token_hash)
                .await
        })
    }

    fn take_token(
        &self,
        token_hash: &str,
        _now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>> {
        let token_hash = token_hash.to_owned();
        Box::pin(async move {
            let key = self.token_key(&token_hash);
            let taken = scripts::take(&self.redis, &key, &token_hash).await?;
            let Some(approved) = taken.as_deref().map(approved_of).transpose()? else {
                return Ok(None);
            };
            let first = self
                .first_take(&token_hash, &approved.confirmation_id)
                .await?;
            Ok(first.then_some(approved))
        })
    }

    fn take_approved(
        &self,
        binding: &Binding,
        _now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>> {
        let index = self.binding_index(binding);
        Box::pin(async move {
            let mut connection = self.redis.connection();
            let prefix = self.token_key("");
            let mut invocation = TAKE_BOUND.key(&index);
            invocation.arg(&prefix);
            let taken: Option<(String, String)> = self
                .redis
                .run(invocation.invoke_async(&mut connection))
                .await?;
            let Some((token_hash, raw)) = taken else {
                return Ok(None);
            };
            let approved = approved_of(&raw)?;
            let first = self
                .first_take(&token_hash, &approved.confirmation_id)
                .await?;
            Ok(first.then_some(approved))
        })
    }

    fn purge_expired(&self, _now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        // Redis expires entries by itself and the scripts drop stale index members; what
        // is left is the durable record of consumed tokens.
        Box::pin(async move {
            match &self.consumed {
                Some(consumed) => consumed.purge().await,
                None => Ok(0),
            }
        })
    }
}
