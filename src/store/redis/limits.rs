//! Rate and concurrency limits shared by every instance, in one Lua script per call on
//! Redis `TIME`: the per-minute token buckets of the user and the server, then a lease in the
//! sorted sets of calls in flight per user × server and per server (scored by their deadline;
//! expired leases are purged first, so a crashed instance's permits free themselves within
//! the lease lifetime). The holder renews its lease while the call runs and removes it, its
//! own member only, when the call ends: a read call costs two round trips. One task renews
//! every lease this instance holds, in one pipeline; one task per lane sends the releases of
//! the calls it served, whatever gathered in one pipeline, on the lane's own connection.

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
    lane::PerLane,
    store::StoreError,
};

/// KEYS: user bucket, server bucket, user × server leases, server leases.
/// ARGV: user rate, server rate, take rate tokens (1/0), user cap, server cap, member, ttl ms.
/// Answers `{'ok'}` or `{limit, retry after ms}`.
///
/// Eleven commands in all, as few as it takes: Redis runs a script's commands a few
/// microseconds apart, and at high load that time is most of what Redis spends on a call.
/// A bucket is one string (`tokens:updated`) written with its expiry; a lease is added
/// first and the set counted after, and only a set over its cap is purged of expired leases
/// and counted again; a set's expiry is pushed to twice the lease lifetime when less than one
/// lifetime is left, so once per lifetime rather than per call, and a set always outlives
/// its leases.
static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = 60000
if ARGV[3] == '1' then
  local rates = {tonumber(ARGV[1]), tonumber(ARGV[2])}
  local names = {'user_rate', 'server_rate'}
  local levels = {}
  for i = 1, 2 do
    local rate = rates[i]
    if rate > 0 then
      local n, u = rate * token, now
      local state = redis.call('GET', KEYS[i])
      if state then
        local sn, su = string.match(state, '^(%d+):(%d+)$')
        if sn then n, u = tonumber(sn), tonumber(su) end
      end
      if now > u then n, u = math.min(rate * token, n + (now - u) * rate), now end
      if n < token then return {names[i], math.ceil((token - n) / rate)} end
      levels[i] = string.format('%.0f:%.0f', n - token, u)
    end
  end
  for i = 1, 2 do
    if levels[i] then redis.call('SET', KEYS[i], levels[i], 'PX', 61000) end
  end
end
local ttl = tonumber(ARGV[7])
local caps = {tonumber(ARGV[4]), tonumber(ARGV[5])}
local names = {'user_concurrency', 'server_concurrency'}
for i = 3, 4 do
  redis.call('ZADD', KEYS[i], now + ttl, ARGV[6])
  if redis.call('ZCARD', KEYS[i]) > caps[i - 2] then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
    if redis.call('ZCARD', KEYS[i]) > caps[i - 2] then
      for j = 3, i do redis.call('ZREM', KEYS[j], ARGV[6]) end
      return {names[i - 2], 0}
    end
  end
end
for i = 3, 4 do
  if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], 2 * ttl) end
end
return {'ok', 0}
",
    )
});

/// KEYS: the two lease sets. ARGV: member, ttl ms. Extends the lease if it is still held
/// (and its set's expiry as [`ADMIT`] does).
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
    if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], 2 * ttl) end
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
    lease_ttl: Duration,
    held: Arc<Held>,
}

/// The leases this instance holds, renewed together by one task, and the releases waiting
/// to be sent, sent together by one task per lane: no task per call, one round trip per
/// batch.
#[derive(Debug)]
struct Held {
    leases: Mutex<HashMap<u64, ([String; 2], String)>>,
    next: AtomicU64,
    /// Random once per process: a lease's member is `<instance>:<nonce>:<id>`, unique among
    /// instances (even two given one name) without a random draw per call.
    nonce: String,
    releases: PerLane<mpsc::UnboundedSender<([String; 2], String)>>,
    redis: Redis,
    stop: CancellationToken,
}

impl Held {
    /// Sends `lease`'s release through the calling lane's releaser, started on first use.
    fn release(&self, lease: ([String; 2], String)) {
        let releases = self.releases.get_or_init(|| {
            let (releases, pending) = mpsc::unbounded_channel();
            // With no runtime (a lane being dropped) nothing is sent: the leases expire.
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(release_all(self.redis.clone(), pending, self.stop.clone()));
            }
            releases
        });
        // The releaser is gone only when the instance stops: the lease then expires.
        let _ = releases.send(lease);
    }
}

/// Most releases sent in one pipeline.
const RELEASE_BATCH: usize = 256;

impl RedisLimits {
    /// Starts the renewing task on the current runtime, until `stop` (and the releasing ones
    /// as lanes need them).
    pub fn new(redis: Redis, lease_ttl: Duration, stop: CancellationToken) -> RedisLimits {
        let limits = RedisLimits {
            lease_ttl,
            held: Arc::new(Held {
                leases: Mutex::default(),
                next: AtomicU64::new(0),
                nonce: crate::digest::random_hex(8),
                releases: PerLane::new(),
                redis,
                stop: stop.clone(),
            }),
        };
        tokio::spawn(limits.clone().renew_all(stop));
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
            let mut connection = self.held.redis.connection();
            // A pipeline sends `EVALSHA` only: the script is loaded first (a Redis that
            // restarted has forgotten it). Once per renewal round, every `lease_ttl / 3`.
            let renewed = async {
                RENEW.load_async(&mut connection).await?;
                pipe.query_async::<Vec<i64>>(&mut connection).await
            };
            match self.held.redis.run(renewed).await {
                Ok(kept) if kept.iter().all(|k| *k == 2) => {}
                Ok(_) => tracing::warn!(
                    "a concurrency lease expired while its call ran (renewals were late); \
                     the call goes on"
                ),
                Err(err) => tracing::warn!(error = %err, "lease renewal failed"),
            }
        }
    }

    fn lease_keys(&self, user: &str, server: &ServerId) -> [String; 2] {
        [
            self.held
                .redis
                .key("leases", &format!("{server}:{}", hashed(&[user]))),
            self.held.redis.key("leases", server.as_str()),
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
            self.held.redis.key("bucket-user", &user_key),
            self.held.redis.key("bucket-server", server.as_str()),
        ];
        let leases = self.lease_keys(user, server);
        let id = self.held.next.fetch_add(1, Ordering::Relaxed);
        let member = format!("{}:{}:{id}", self.held.redis.instance(), self.held.nonce);
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
            let mut connection = self.held.redis.connection();
            let (answer, retry_ms): (String, u64) = self
                .held
                .redis
                .run(invocation.invoke_async(&mut connection))
                .await
                .map_err(Refused::Store)?;
            let after = Duration::from_millis(retry_ms);
            let limit = match answer.as_str() {
                "ok" => return Ok(self.hold(id, leases, member)),
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

    fn hold(&self, id: u64, keys: [String; 2], member: String) -> Lease {
        self.leases().insert(id, (keys, member));
        Lease {
            held: self.held.clone(),
            id,
        }
    }
}

/// Removes released leases, whatever gathered, in one pipeline.
async fn release_all(
    redis: Redis,
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
        let mut connection = redis.connection();
        if let Err(err) = redis.run(pipe.query_async::<()>(&mut connection)).await {
            tracing::warn!(error = %err, "lease release failed; the leases expire by themselves");
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
            self.held.release(lease);
        }
    }
}
