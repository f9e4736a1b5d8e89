//! Scripts more than one kind of entry uses: insert under a per-owner bound, take once.

use std::{sync::LazyLock, time::Duration};

use redis::Script;

use super::Redis;
use crate::store::StoreError;

/// Inserts an entry that expires, refusing a duplicate and an owner over its bound; the
/// entry's value names the index keys it is listed in (`indexes`), so [`TAKE`] finds them.
/// KEYS: entry, user index. ARGV: value, ttl ms, bound, member.
pub(super) static INSERT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 'full' end
if redis.call('EXISTS', KEYS[1]) == 1 then return 'duplicate' end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[4])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
for i = 3, #KEYS do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[4])
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return 'ok'
",
    )
});

/// KEYS: entry. ARGV: member. The value names its index keys (`indexes`).
pub(super) static TAKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local v = redis.call('GET', KEYS[1])
if not v then return false end
redis.call('DEL', KEYS[1])
for _, index in ipairs(cjson.decode(v).indexes) do redis.call('ZREM', index, ARGV[1]) end
return v
",
    )
});

/// Stores `value` under `keys[0]` for `ttl`, listed as `member` in the owner's index
/// `keys[1]` (at most `bound` live entries) and in any further index keys.
pub(super) async fn insert(
    redis: &Redis,
    keys: &[String],
    value: String,
    ttl: Duration,
    member: &str,
    bound: usize,
) -> Result<(), StoreError> {
    // At least a millisecond: Redis refuses `PX 0`, and an entry due now is expired.
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
    let mut invocation = INSERT.prepare_invoke();
    for key in keys {
        invocation.key(key);
    }
    invocation.arg(value).arg(ttl_ms).arg(bound).arg(member);
    let mut connection = redis.connection();
    let answer: String = redis.run(invocation.invoke_async(&mut connection)).await?;
    match answer.as_str() {
        "ok" => Ok(()),
        "full" => Err(StoreError::Full),
        "duplicate" => Err(StoreError::Duplicate),
        _ => Err(StoreError::Corrupt("unexpected script answer".to_owned())),
    }
}

/// Takes the entry at `key` (listed as `member`) once: its value, or `None` if it is gone.
pub(super) async fn take(
    redis: &Redis,
    key: &str,
    member: &str,
) -> Result<Option<String>, StoreError> {
    let mut connection = redis.connection();
    let mut invocation = TAKE.key(key);
    invocation.arg(member);
    redis.run(invocation.invoke_async(&mut connection)).await
}
