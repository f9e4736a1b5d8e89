//! Rate and concurrency limits shared by every instance, in one Lua script per call on
//! Redis `TIME`: the per-minute token buckets of the user and the server, then a lease in the
//! sorted sets of calls in flight per user × server and per server (scored by their deadline;
//! expired leases are purged first, so a crashed instance's permits free themselves within
//! the lease lifetime). The holder renews its lease while the call runs and removes it, its
//! own member only, when the call ends: a read call costs two round trips. One task renews
//! every lease this instance holds and another sends releases, each in one pipeline.

use std::{
    collections::HashMap,
    sync::{
        Arc, LazyLock, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use redis::Script;
use tokio::sync::mpsc;
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
    held: Arc<Held>,
}

/// The leases this instance holds, renewed together by one task, and the releases waiting
/// to be sent, sent together by another: no task per call, one round trip per batch.
#[derive(Debug)]
struct Held {
    leases: Mutex<HashMap<u64, ([String; 2], String)>>,
    next: AtomicU64,
    releases: mpsc::UnboundedSender<([String; 2], String)>,
}

/// Most releases sent in one pipeline.
const RELEASE_BATCH: usize = 256;

impl RedisLimits {
    /// Starts the renewing and releasing tasks on the current runtime, until `stop`.
    pub fn new(redis: Redis, lease_ttl: Duration, stop: CancellationToken) -> RedisLimits {
        let (releases, pending) = mpsc::unbounded_channel();
        let limits = RedisLimits {
            redis,
            lease_ttl,
            held: Arc::new(Held {
                leases: Mutex::default(),
                next: AtomicU64::new(0),
                releases,
            }),
        };
        tokio::spawn(limits.clone().renew_all(stop.clone()));
        tokio::spawn(limits.clone().release_all(pending, stop));
        limits
    }

    fn leases(&self) -> std::sync::MutexGuard<'_, HashMap<u64, ([String; 2], String)>> {
        self.held
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every `lease_ttl / 3`, extends every lease held here, in one pipeline.
    async fn renew_all(self, stop: CancellationToken) {
        let ttl_ms = u64::try_from(self.lease_ttl.as_millis()).unwrap_or(u64::MAX);
        let mut every = tokio::time::interval(self.lease_ttl / 3);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            let held: Vec<([String; 2], String)> = self.leases().values().cloned().collect();
            if held.is_empty() {
                continue;
            }
            let mut pipe = redis::pipe();
            for (keys, member) in &held {
                pipe.invoke_script(RENEW.key(&keys[0]).key(&keys[1]).arg(member).arg(ttl_ms));
            }
            let mut connection = self.redis.connection();
            // A pipeline sends `EVALSHA` only: the script is loaded first (a Redis that
            // restarted has forgotten it). Once per renewal round, every `lease_ttl / 3`.
            let renewed = async {
                RENEW.load_async(&mut connection).await?;
                pipe.query_async::<Vec<i64>>(&mut connection).await
            };
            match self.redis.run(renewed).await {
                Ok(kept) if kept.iter().all(|k| *k == 2) => {}
                Ok(_) => tracing::warn!(
                    "a concurrency lease expired while its call ran (renewals were late); \
                     the call goes on"
                ),
                Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
            }
        }
    }

    /// Removes released leases, whatever gathered, in one pipeline.
    async fn release_all(
        self,
        mut pending: mpsc::UnboundedReceiver<([String; 2], String)>,
        stop: CancellationToken,
    ) {
        let mut batch = Vec::with_capacity(RELEASE_BATCH);
        loop {
            let first = tokio::select! {
                () = stop.cancelled() => return,
                first = pending.recv() => first,
            };
            let Some(first) = first else { return };
            batch.push(first);
            while batch.len() < RELEASE_BATCH {
                match pending.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            let mut pipe = redis::pipe();
            for (keys, member) in batch.drain(..) {
                pipe.zrem(&keys[0], &member)
                    .ignore()
                    .zrem(&keys[1], &member)
                    .ignore();
            }
            let mut connection = self.redis.connection();
            if let Err(err) = self
                .redis
                .run(pipe.query_async::<()>(&mut connection))
                .await
            {
                tracing::warn!(error = %err, "lease release failed; the leases expire by themselves");
            }
        }
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
                "ok" => return Ok(self.hold(leases, member)),
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

    fn hold(&self, keys: [String; 2], member: String) -> Lease {
        let id = self.held.next.fetch_add(1, Ordering::Relaxed);
        self.leases().insert(id, (keys, member));
        Lease {
            held: self.held.clone(),
            id,
        }
    }
}

/// A call's place in the shared concurrency caps: renewed while held, removed on drop.
pub struct Lease {
    held: Arc<Held>,
    id: u64,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let taken = self
            .held
            .leases
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        if let Some(lease) = taken {
            // The releaser is gone only when the instance stops: the lease then expires.
            let _ = self.held.releases.send(lease);
        }
    }
}
