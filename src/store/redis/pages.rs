//! The WebMCP bridge's registry across instances: one record per connected page (who owns
//! it, which instance and connection holds its socket, its tools), living as long as its
//! holder refreshes it; and one inbox channel per instance, carrying calls to the pages it
//! holds and the replies to the calls it sent.
//!
//! A record is a hash: `owner` (the hashed tenant and user), `holder`
//! (`<instance>/<connection>`) and `record` (JSON the bridge reads). Only its holder refreshes
//! or removes it; the same owner's new connection, on any instance, takes it over; another
//! owner cannot.

use std::{sync::LazyLock, time::Duration};

use redis::Script;
use tokio_util::sync::CancellationToken;

use super::Redis;
use crate::store::StoreError;

/// KEYS: record, index. ARGV: owner, holder, record JSON, ttl ms, member. `taken` when
/// another owner holds the id.
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then return 'taken' end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'holder', ARGV[2], 'record', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('SADD', KEYS[2], ARGV[5])
return 'ok'
",
    )
});

/// KEYS: record, index. ARGV: holder, record JSON, ttl ms, owner, member. `0` when another
/// connection holds it now; a record that expired meanwhile (Redis was unreachable for
/// longer than its life) is written again. The id is listed again each time: a reader that
/// dropped it from the index while it was being written cannot hide the page for good.
static REFRESH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder and holder ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'owner', ARGV[4], 'holder', ARGV[1], 'record', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[5])
return 1
",
    )
});

/// KEYS: record, index. ARGV: holder, member.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HGET', KEYS[1], 'holder') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[2])
return 1
",
    )
});

/// Whether a claim of a page's id went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Claimed,
    /// Another owner's page holds the id.
    Taken,
}

/// One live record: who holds the page and what the bridge wrote about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageEntry {
    pub holder: String,
    pub record: String,
}

/// The pages' registry and the instances' inboxes.
#[derive(Debug, Clone)]
pub struct RedisPages {
    redis: Redis,
}

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl RedisPages {
    pub fn new(redis: Redis) -> RedisPages {
        RedisPages { redis }
    }

    /// This instance's name.
    pub fn instance(&self) -> &str {
        self.redis.instance()
    }

    fn key(&self, server: &str) -> String {
        self.redis.key("webmcp-page", server)
    }

    fn index(&self) -> String {
        self.redis.key("webmcp-pages", "all")
    }

    fn inbox(&self, instance: &str) -> String {
        self.redis.key("webmcp-inbox", &super::hashed(&[instance]))
    }

    /// Records `server`'s page as held by `holder` for `owner`, for `ttl`.
    pub async fn claim(
        &self,
        server: &str,
        owner: (&str, &str),
        holder: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<Claim, StoreError> {
        let mut invocation = CLAIM.key(self.key(server));
        invocation
            .key(self.index())
            .arg(super::hashed(&[owner.0, owner.1]))
            .arg(holder)
            .arg(record)
            .arg(millis(ttl))
            .arg(server);
        let mut connection = self.redis.connection();
        let answer: String = self
            .redis
            .run(invocation.invoke_async(&mut connection))
            .await?;
        Ok(if answer == "taken" {
            Claim::Taken
        } else {
            Claim::Claimed
        })
    }

    /// Writes `record` and extends the record's life, if `holder` still holds it (or the
    /// record expired meanwhile); `false` when another connection took it over.
    pub async fn refresh(
        &self,
        server: &str,
        owner: (&str, &str),
        holder: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<bool, StoreError> {
        let mut invocation = REFRESH.key(self.key(server));
        invocation
            .key(self.index())
            .arg(holder)
            .arg(record)
            .arg(millis(ttl))
            .arg(super::hashed(&[owner.0, owner.1]))
            .arg(server);
        let mut connection = self.redis.connection();
        let held: i64 = self
            .redis
            .run(invocation.invoke_async(&mut connection))
            .await?;
        Ok(held == 1)
    }

    /// Removes the record, if `holder` still holds it.
    pub async fn release(&self, server: &str, holder: &str) -> Result<(), StoreError> {
        let mut invocation = RELEASE.key(self.key(server));
        invocation.key(self.index()).arg(holder).arg(server);
        let mut connection = self.redis.connection();
        self.redis
            .run(invocation.invoke_async::<i64>(&mut connection))
            .await
            .map(|_| ())
    }

    /// Every live record, by server id; ids whose record expired leave the index.
    pub async fn list(&self) -> Result<Vec<(String, PageEntry)>, StoreError> {
        let mut connection = self.redis.connection();
        let servers: Vec<String> = self
            .redis
            .run(
                redis::cmd("SMEMBERS")
                    .arg(self.index())
                    .query_async(&mut connection),
            )
            .await?;
        if servers.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for server in &servers {
            pipe.cmd("HMGET")
                .arg(self.key(server))
                .arg("holder")
                .arg("record");
        }
        let fields: Vec<(Option<String>, Option<String>)> =
            self.redis.run(pipe.query_async(&mut connection)).await?;
        let mut live = Vec::new();
        let mut expired = Vec::new();
        for (server, fields) in servers.into_iter().zip(fields) {
            match fields {
                (Some(holder), Some(record)) => live.push((server, PageEntry { holder, record })),
                _ => expired.push(server),
            }
        }
        if !expired.is_empty() {
            // Whoever sees an expired id first drops it; a claim since then adds it again.
            let _ = self
                .redis
                .run(
                    redis::cmd("SREM")
                        .arg(self.index())
                        .arg(&expired)
                        .query_async::<i64>(&mut connection),
                )
                .await;
        }
        Ok(live)
    }

    /// Puts `message` in `instance`'s inbox; whether that instance is listening (`false`:
    /// nobody received it).
    pub async fn send(&self, instance: &str, message: &str) -> Result<bool, StoreError> {
        let mut connection = self.redis.connection();
        let received: i64 = self
            .redis
            .run(
                redis::cmd("PUBLISH")
                    .arg(self.inbox(instance))
                    .arg(message)
                    .query_async(&mut connection),
            )
            .await?;
        Ok(received > 0)
    }

    /// Hands each message of this instance's inbox to `handle` until `stop`; `subscribed`
    /// says whether the inbox is being listened to now.
    pub async fn listen(
        &self,
        stop: CancellationToken,
        subscribed: tokio::sync::watch::Sender<bool>,
        handle: impl FnMut(String),
    ) {
        let inbox = [self.inbox(self.instance())];
        super::events::follow_channels(&self.redis, &inbox, &stop, Some(&subscribed), handle).await;
    }
}
