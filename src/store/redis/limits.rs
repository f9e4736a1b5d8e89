//! Rate and concurrency limits shared by every instance, in one Lua script on Redis `TIME`
//! for the calls waiting on a lane (one call alone, or whatever gathered while the lane's
//! last script ran): the per-minute token buckets of the user and the server, then a lease
//! in the sorted sets of calls in flight per user × server and per server (scored by their
//! deadline; expired leases are purged first, so a crashed instance's permits free themselves
//! within the lease lifetime). The holder renews its lease while the call runs and removes it, its
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
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{Redis, hashed};
use crate::{
    config::{CallLimits, ServerId},
    lane::PerLane,
    store::StoreError,
};

/// KEYS: four per call: user bucket, server bucket, user × server leases, server leases.
/// ARGV: the lease lifetime in ms, then six per call: user rate, server rate, take rate
/// tokens (1/0), user cap, server cap, member.
/// Answers two values per call, in order: `ok` or the limit that refused it, and the retry
/// after in ms.
///
/// The calls a lane has waiting are admitted by one script, as if one after another: each
/// takes its rate tokens and its leases from what the calls before it left. A key several
/// calls share is read once and written once: a bucket is one string (`tokens:updated`)
/// read with `GET` and written with its expiry; a set is counted once, purged of expired
/// leases only when a call would go over its cap, and given all its new leases in one
/// `ZADD`; its expiry is pushed to twice the lease lifetime when less than one lifetime is
/// left, so a set always outlives its leases. One call alone costs eleven commands, as many
/// calls of one user and server cost the same eleven: Redis runs a script's commands a few
/// microseconds apart, and at high load that time is most of what it spends on a call.
static ADMIT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local token = 60000
local ttl = tonumber(ARGV[1])
local buckets, bucket_keys, sets, set_keys, out = {}, {}, {}, {}, {}
local function bucket(key, rate)
  local b = buckets[key]
  if not b then
    local n, u = rate * token, now
    local state = redis.call('GET', key)
    if state then
      local sn, su = string.match(state, '^(%d+):(%d+)$')
      if sn then n, u = tonumber(sn), tonumber(su) end
    end
    b = {n = n, u = u, taken = false}
    buckets[key] = b
    bucket_keys[#bucket_keys + 1] = key
  end
  if now > b.u then b.n, b.u = math.min(rate * token, b.n + (now - b.u) * rate), now end
  return b
end
local function set(key)
  local s = sets[key]
  if not s then
    s = {count = redis.call('ZCARD', key), purged = false, adds = {}}
    sets[key] = s
    set_keys[#set_keys + 1] = key
  end
  return s
end
local rate_names = {'user_rate', 'server_rate'}
local cap_names = {'user_concurrency', 'server_concurrency'}
for call = 0, #KEYS / 4 - 1 do
  local k, a = call * 4, 1 + call * 6
  local answer, retry = 'ok', 0
  if ARGV[a + 3] == '1' then
    local rates, levels = {tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])}, {}
    for i = 1, 2 do
      if rates[i] > 0 then
        local b = bucket(KEYS[k + i], rates[i])
        if b.n < token then
          answer, retry = rate_names[i], math.ceil((token - b.n) / rates[i])
          break
        end
        levels[i] = b
      end
    end
    if answer == 'ok' then
      for i = 1, 2 do
        if levels[i] then levels[i].n, levels[i].taken = levels[i].n - token, true end
      end
    end
  end
  if answer == 'ok' then
    local caps, held = {tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5])}, {}
    for i = 1, 2 do
      local key = KEYS[k + 2 + i]
      local s = set(key)
      if s.count >= caps[i] and not s.purged then
        redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
        s.count, s.purged = redis.call('ZCARD', key) + #s.adds, true
      end
      if s.count >= caps[i] then
        answer = cap_names[i]
        break
      end
      s.count = s.count + 1
      held[i] = s
    end
    for i = 1, 2 do
      if held[i] then
        if answer == 'ok' then
          held[i].adds[#held[i].adds + 1] = ARGV[a + 6]
        else
          held[i].count = held[i].count - 1
        end
      end
    end
  end
  out[#out + 1] = answer
  out[#out + 1] = retry
end
for _, key in ipairs(bucket_keys) do
  local b = buckets[key]
  if b.taken then redis.call('SET', key, string.format('%.0f:%.0f', b.n, b.u), 'PX', 61000) end
end
for _, key in ipairs(set_keys) do
  local adds = sets[key].adds
  if #adds > 0 then
    local members = {}
    for _, member in ipairs(adds) do
      members[#members + 1] = now + ttl
      members[#members + 1] = member
    end
    redis.call('ZADD', key, unpack(members))
    if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, 2 * ttl) end
  end
end
return out
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
    admissions: PerLane<mpsc::UnboundedSender<Ask>>,
    lease_ttl: Duration,
    redis: Redis,
    stop: CancellationToken,
}

/// A call waiting for its admission's answer. Dropped unread (the call went away) after
/// the admitter answered, it gives back the leases the answer granted; dropped before, the
/// admitter finds the call gone and gives them back itself.
struct Waiting<'a> {
    answer: oneshot::Receiver<Result<(String, u64), StoreError>>,
    read: bool,
    held: &'a Arc<Held>,
    leases: &'a [String; 2],
    member: &'a str,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.read
            && let Ok(Ok((answer, _))) = self.answer.try_recv()
            && answer == "ok"
        {
            self.held
                .release((self.leases.clone(), self.member.to_owned()));
        }
    }
}

/// One call's admission, waiting for its lane's next script.
#[derive(Debug)]
struct Ask {
    /// User bucket, server bucket, user × server leases, server leases.
    keys: [String; 4],
    rates: [u32; 2],
    take_rate: bool,
    caps: [u32; 2],
    member: String,
    answered: oneshot::Sender<Result<(String, u64), StoreError>>,
}

impl Held {
    /// Hands `ask` to the calling lane's admitter, started on first use: the calls waiting
    /// on a lane are admitted together, by one script.
    fn admit(self: &Arc<Held>, ask: Ask) {
        let admissions = self.admissions.get_or_init(|| {
            let (admissions, pending) = mpsc::unbounded_channel();
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(admit_all(self.clone(), pending));
            }
            admissions
        });
        // With the admitter gone (the instance stopping) the ask is dropped, and its call
        // refused as the store's.
        let _ = admissions.send(ask);
    }

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
                admissions: PerLane::new(),
                lease_ttl,
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
        let deadline = tokio::time::Instant::now() + limits.concurrency_wait;
        let mut take_rate = true;
        loop {
            let (answered, answer) = oneshot::channel();
            let ask = Ask {
                keys: [&buckets[0], &buckets[1], &leases[0], &leases[1]].map(Clone::clone),
                rates: [limits.user_calls_per_minute, limits.server_calls_per_minute],
                take_rate,
                caps: [limits.user_concurrency, limits.server_concurrency],
                member: member.clone(),
                answered,
            };
            self.held.admit(ask);
            let mut waiting = Waiting {
                answer,
                read: false,
                held: &self.held,
                leases: &leases,
                member: &member,
            };
            let answered = (&mut waiting.answer).await;
            waiting.read = true;
            drop(waiting);
            let (answer, retry_ms) = answered
                .map_err(|_| {
                    Refused::Store(StoreError::Unavailable("the limits stopped".to_owned()))
                })?
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

/// Most calls admitted by one script.
const ADMIT_BATCH: usize = 64;

/// Admits the calls waiting on a lane, whatever gathered, by one script; one script at a
/// time, so calls arriving meanwhile gather for the next. A script that fails (or whose
/// outcome is unknown) refuses every call it carried: never admitted by default.
async fn admit_all(held: Arc<Held>, mut pending: mpsc::UnboundedReceiver<Ask>) {
    let (redis, stop) = (&held.redis, &held.stop);
    let ttl_ms = u64::try_from(held.lease_ttl.as_millis()).unwrap_or(u64::MAX);
    let mut batch = Vec::with_capacity(ADMIT_BATCH);
    while gather(&mut pending, stop, &mut batch, ADMIT_BATCH).await {
        let mut invocation = ADMIT.prepare_invoke();
        invocation.arg(ttl_ms);
        for ask in &batch {
            for key in &ask.keys {
                invocation.key(key);
            }
            invocation
                .arg(ask.rates[0])
                .arg(ask.rates[1])
                .arg(if ask.take_rate { "1" } else { "0" })
                .arg(ask.caps[0])
                .arg(ask.caps[1])
                .arg(&ask.member);
        }
        let mut connection = redis.connection();
        let answers: Result<Vec<(String, u64)>, StoreError> = redis
            .run(invocation.invoke_async(&mut connection))
            .await
            .and_then(|answers: Vec<(String, u64)>| {
                if answers.len() == batch.len() {
                    Ok(answers)
                } else {
                    Err(StoreError::Corrupt(
                        "the limit script answered for another number of calls".to_owned(),
                    ))
                }
            });
        match answers {
            Ok(answers) => {
                for (ask, answer) in batch.drain(..).zip(answers) {
                    let admitted = answer.0 == "ok";
                    let Ask {
                        keys: [_, _, user, server],
                        member,
                        answered,
                        ..
                    } = ask;
                    // A call that went away while it waited (its client gone) leaves the
                    // leases it was given: removed at once rather than left to expire.
                    if answered.send(Ok(answer)).is_err() && admitted {
                        held.release(([user, server], member));
                    }
                }
            }
            Err(err) => {
                // The script may have run: whatever it granted is removed (removing what it
                // did not grant changes nothing).
                for ask in batch.drain(..) {
                    let Ask {
                        keys: [_, _, user, server],
                        member,
                        answered,
                        ..
                    } = ask;
                    let _ = answered.send(Err(err.clone()));
                    held.release(([user, server], member));
                }
            }
        }
    }
}

/// Waits for the next item, then takes whatever else is waiting, up to `most` in `batch`;
/// false once `stop` is cancelled or every sender is gone.
async fn gather<T>(
    pending: &mut mpsc::UnboundedReceiver<T>,
    stop: &CancellationToken,
    batch: &mut Vec<T>,
    most: usize,
) -> bool {
    let first = tokio::select! {
        () = stop.cancelled() => return false,
        first = pending.recv() => first,
    };
    let Some(first) = first else { return false };
    batch.push(first);
    while batch.len() < most {
        match pending.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    true
}

/// Removes released leases, whatever gathered, in one pipeline.
async fn release_all(
    redis: Redis,
    mut pending: mpsc::UnboundedReceiver<([String; 2], String)>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(RELEASE_BATCH);
    while gather(&mut pending, &stop, &mut batch, RELEASE_BATCH).await {
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

#[cfg(test)]
mod tests {
    use futures::future::join_all;

    use super::*;
    use crate::config::{Secret, SharedConfig};

    /// Limits on the machine's Redis (127.0.0.1:6379), under a key prefix of their own.
    async fn limits(stop: &CancellationToken) -> RedisLimits {
        let settings = SharedConfig {
            key_prefix: format!("mcpgate-test-{}", crate::digest::random_hex(6)),
            instance: "a".to_owned(),
            ..SharedConfig::default()
        };
        let url = Secret::new("redis://127.0.0.1:6379/");
        let redis = Redis::connect(&url, &settings, true)
            .await
            .expect("the machine's Redis answers on 127.0.0.1:6379");
        RedisLimits::new(redis, Duration::from_secs(30), stop.clone())
    }

    fn call_limits(user_concurrency: u32, user_calls_per_minute: u32) -> CallLimits {
        CallLimits {
            user_concurrency,
            server_concurrency: 100,
            concurrency_wait: Duration::ZERO,
            user_calls_per_minute,
            server_calls_per_minute: 1000,
            ..CallLimits::default()
        }
    }

    /// A lease for `user`, asked again while the cap refuses, within 10 s (the leases
    /// here live 30 s: a lease left behind would refuse every ask).
    async fn admitted_soon(
        limits: &RedisLimits,
        user: &str,
        server: &ServerId,
        call: &CallLimits,
    ) -> Lease {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match limits.admit(user, server, call).await {
                Ok(lease) => return lease,
                Err(Refused::Limit(Limited::UserConcurrency))
                    if tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Err(other) => panic!("{user} not admitted: {other:?}"),
            }
        }
    }

    fn outcomes(results: &[Result<Lease, Refused>]) -> Vec<&'static str> {
        results
            .iter()
            .map(|r| match r {
                Ok(_) => "ok",
                Err(Refused::Limit(Limited::UserConcurrency)) => "user_concurrency",
                Err(Refused::Limit(Limited::ServerConcurrency)) => "server_concurrency",
                Err(Refused::Limit(Limited::UserRate(_))) => "user_rate",
                Err(Refused::Limit(Limited::ServerRate(_))) => "server_rate",
                Err(Refused::Store(_)) => "store",
            })
            .collect()
    }

    /// Calls asking together (on one thread, so one script admits them all) are admitted
    /// as if one after another: a cap of 2 admits two of six, another user's call counts
    /// apart, a released lease admits the next; a rate of 3 a minute admits three of five,
    /// and refused calls take no lease.
    #[tokio::test]
    async fn calls_admitted_together_are_counted_one_after_another() {
        let stop = CancellationToken::new();
        let limits = limits(&stop).await;
        let server = ServerId::new("files").expect("id");
        let capped = call_limits(2, 1000);
        let mut asks: Vec<_> = (0..6)
            .map(|_| limits.admit("alice", &server, &capped))
            .collect();
        asks.push(limits.admit("bob", &server, &capped));
        let mut results = join_all(asks).await;
        let bob = results.pop().expect("bob's");
        assert_eq!(
            outcomes(&results),
            [
                "ok",
                "ok",
                "user_concurrency",
                "user_concurrency",
                "user_concurrency",
                "user_concurrency"
            ]
        );
        assert!(bob.is_ok(), "another user's cap is apart");
        let first = results.remove(0);
        drop(first);
        // The release is sent by the lane's releaser: the next call is admitted once it
        // has reached Redis.
        drop(admitted_soon(&limits, "alice", &server, &capped).await);

        let rated = call_limits(100, 3);
        let results = join_all((0..5).map(|_| limits.admit("carol", &server, &rated))).await;
        assert_eq!(
            outcomes(&results),
            ["ok", "ok", "ok", "user_rate", "user_rate"]
        );
        // A call that goes away while it waits for its admission leaves no lease behind:
        let one = call_limits(1, 1000);
        // with a cap of 1, the next call is admitted well before the lease would expire.
        let mut gone = Box::pin(limits.admit("dave", &server, &one));
        assert!(
            futures::poll!(&mut gone).is_pending(),
            "its ask is handed over"
        );
        drop(gone);
        drop(admitted_soon(&limits, "dave", &server, &one).await);
        // The same once the answer has come (the lease is in Redis) but was never read.
        let mut gone = Box::pin(limits.admit("erin", &server, &one));
        assert!(futures::poll!(&mut gone).is_pending());
        let key = limits.lease_keys("erin", &server)[0].clone();
        let mut connection = limits.held.redis.connection();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while redis::cmd("ZCARD")
            .arg(&key)
            .query_async::<u64>(&mut connection)
            .await
            .expect("zcard")
            == 0
        {
            assert!(tokio::time::Instant::now() < deadline, "never admitted");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(gone);
        drop(admitted_soon(&limits, "erin", &server, &one).await);
        let held: usize = limits.leases().len();
        // alice's second lease, bob's, and carol's three (the loop's lease was dropped).
        assert_eq!(held, 5, "refused calls hold no lease");
        stop.cancel();
    }
}
