//! Rate and concurrency limits shared by every instance, in one Lua script per call on
//! Redis `TIME`: the per-minute token buckets of the user and the server, then a lease in the
//! sorted sets of calls in flight per user × server and per server (scored by their deadline;
//! expired leases are purged first, so a crashed instance's permits free themselves within
//! the lease lifetime). The holder renews its lease while the call runs and removes it, its
//! own member only, when the call ends: a read call costs two round trips.

use std::{sync::LazyLock, time::Duration};

use redis::Script;
use tokio_util::sync::CancellationToken;

use super::{Redis, hashed};
use crate::{
    config::{CallLimits, ServerId},
    store::StoreError,
};

/// KEYS: user bucket, server bucket, user × server leases, server leases.
/// ARGV: user rate, server rate, take rate tokens (1/0), user cap, server cap, member, ttl ms.
/// Answers `{'ok'}` or `{limit, retry after ms}`.
static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = 60000
local function bucket(key, rate)
  local state = redis.call('HMGET', key, 'n', 'u')
  local n = tonumber(state[1]) or rate * token
  local u = tonumber(state[2]) or now
  if now > u then n = math.min(rate * token, n + (now - u) * rate) end
  return n, math.max(u, now)
end
if ARGV[3] == '1' then
  local rates = {tonumber(ARGV[1]), tonumber(ARGV[2])}
  local names = {'user_rate', 'server_rate'}
  local levels, times = {}, {}
  for i = 1, 2 do
    if rates[i] > 0 then
      levels[i], times[i] = bucket(KEYS[i], rates[i])
      if levels[i] < token then
        return {names[i], math.ceil((token - levels[i]) / rates[i])}
      end
    end
  end
  for i = 1, 2 do
    if rates[i] > 0 then
      redis.call('HSET', KEYS[i], 'n', levels[i] - token, 'u', times[i])
      redis.call('PEXPIRE', KEYS[i], 61000)
    end
  end
end
local ttl = tonumber(ARGV[7])
local caps = {tonumber(ARGV[4]), tonumber(ARGV[5])}
local names = {'user_concurrency', 'server_concurrency'}
for i = 3, 4 do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) >= caps[i - 2] then return {names[i - 2], 0} end
end
for i = 3, 4 do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[6])
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
end
return {'ok', 0}
",
    )
});

/// KEYS: the two lease sets. ARGV: member, ttl ms. Extends the lease if it is still held.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local held = 0
for i = 1, 2 do
  if redis.call('ZSCORE', KEYS[i], ARGV[1]) then
    redis.call('ZADD', KEYS[i], 'XX', now + ttl, ARGV[1])
    if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
    held = held + 1
  end
end
return held
",
    )
});

/// How often a waiting call asks again for a concurrency permit.
const WAIT_STEP: Duration = Duration::from_millis(20);

/// Which shared limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// The user's per-minute bucket is empty; a token is back after this long.
    UserRate(Duration),
    /// The server's per-minute bucket is empty.
    ServerRate(Duration),
    UserConcurrency,
    ServerConcurrency,
}

/// Why a call was not admitted.
#[derive(Debug)]
pub enum Refused {
    Limit(Limited),
    Store(StoreError),
}

/// The shared limits of one deployment.
#[derive(Clone, Debug)]
pub struct RedisLimits {
    redis: Redis,
    lease_ttl: Duration,
}

impl RedisLimits {
    pub fn new(redis: Redis, lease_ttl: Duration) -> RedisLimits {
        RedisLimits { redis, lease_ttl }
    }

    fn lease_keys(&self, user: &str, server: &ServerId) -> [String; 2] {
        [
            self.redis
                .key("leases", &format!("{server}:{}", hashed(&[user]))),
            self.redis.key("leases", server.as_str()),
        ]
    }

    /// Takes a rate token from the user's and the server's buckets and a lease on both
    /// concurrency caps; waits for a lease at most `concurrency_wait`.
    pub async fn admit(
        &self,
        user: &str,
        server: &ServerId,
        limits: &CallLimits,
    ) -> Result<Lease, Refused> {
        let user_key = hashed(&[user]);
        let buckets = [
            self.redis.key("rate-user", &user_key),
            self.redis.key("rate-server", server.as_str()),
        ];
        let leases = self.lease_keys(user, server);
        let member = format!(
            "{}:{}",
            self.redis.instance(),
            crate::digest::random_hex(12)
        );
        let ttl_ms = u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let deadline = tokio::time::Instant::now() + limits.concurrency_wait;
        let mut take_rate = true;
        loop {
            let mut invocation = ADMIT.prepare_invoke();
            invocation
                .key(&buckets[0])
                .key(&buckets[1])
                .key(&leases[0])
                .key(&leases[1])
                .arg(limits.user_calls_per_minute)
                .arg(limits.server_calls_per_minute)
                .arg(if take_rate { "1" } else { "0" })
                .arg(limits.user_concurrency)
                .arg(limits.server_concurrency)
                .arg(&member)
                .arg(ttl_ms);
            let mut connection = self.redis.connection();
            let (answer, retry_ms): (String, u64) = self
                .redis
                .run(invocation.invoke_async(&mut connection))
                .await
                .map_err(Refused::Store)?;
            let after = Duration::from_millis(retry_ms);
            let limit = match answer.as_str() {
                "ok" => return Ok(Lease::start(self.clone(), leases, member)),
                "user_rate" => return Err(Refused::Limit(Limited::UserRate(after))),
                "server_rate" => return Err(Refused::Limit(Limited::ServerRate(after))),
                "user_concurrency" => Limited::UserConcurrency,
                "server_concurrency" => Limited::ServerConcurrency,
                _ => {
                    return Err(Refused::Store(StoreError::Corrupt(
                        "unexpected limit script answer".to_owned(),
                    )));
                }
            };
            take_rate = false;
            if tokio::time::Instant::now() + WAIT_STEP > deadline {
                return Err(Refused::Limit(limit));
            }
            tokio::time::sleep(WAIT_STEP).await;
        }
    }

    async fn renew(&self, keys: &[String; 2], member: &str) -> Result<i64, StoreError> {
        let ttl_ms = u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut invocation = RENEW.prepare_invoke();
        invocation
            .key(&keys[0])
            .key(&keys[1])
            .arg(member)
            .arg(ttl_ms);
        let mut connection = self.redis.connection();
        self.redis
            .run(invocation.invoke_async(&mut connection))
            .await
    }

    async fn release(&self, keys: &[String; 2], member: &str) -> Result<(), StoreError> {
        let mut connection = self.redis.connection();
        let mut pipe = redis::pipe();
        pipe.zrem(&keys[0], member)
            .ignore()
            .zrem(&keys[1], member)
            .ignore();
        self.redis
            .run(pipe.query_async::<()>(&mut connection))
            .await
    }

    /// Calls in flight now on `server`, every instance together (tests, metrics).
    pub async fn in_flight(&self, server: &ServerId) -> Result<u64, StoreError> {
        let key = self.redis.key("leases", server.as_str());
        let mut connection = self.redis.connection();
        let now_ms = self.redis_now_ms().await?;
        self.redis
            .run(
                redis::cmd("ZCOUNT")
                    .arg(&key)
                    .arg(format!("({now_ms}"))
                    .arg("+inf")
                    .query_async(&mut connection),
            )
            .await
    }

    async fn redis_now_ms(&self) -> Result<u64, StoreError> {
        let mut connection = self.redis.connection();
        let (secs, micros): (u64, u64) = self
            .redis
            .run(redis::cmd("TIME").query_async(&mut connection))
            .await?;
        Ok(secs * 1000 + micros / 1000)
    }
}

/// A call's place in the shared concurrency caps: renewed while held, removed on drop.
pub struct Lease {
    stop: CancellationToken,
}

impl Lease {
    fn start(limits: RedisLimits, keys: [String; 2], member: String) -> Lease {
        let stop = CancellationToken::new();
        let every = limits.lease_ttl / 3;
        let stopped = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stopped.cancelled() => break,
                    () = tokio::time::sleep(every) => {
                        match limits.renew(&keys, &member).await {
                            Ok(2) => {}
                            Ok(_) => tracing::warn!(
                                "a concurrency lease expired while its call ran (renewals \
                                 were late); the call goes on"
                            ),
                            Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
                        }
                    }
                }
            }
            if let Err(err) = limits.release(&keys, &member).await {
                tracing::warn!(error = %err, "lease release failed; it expires by itself");
            }
        });
        Lease { stop }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}
