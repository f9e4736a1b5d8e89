//! MCP session records shared by every instance: what a session's `initialize` said and who
//! opened it, so any instance can serve the session's next request (the endpoint checks the
//! caller against the record before it restores anything).

use std::time::Duration;

use super::Redis;
use crate::store::StoreError;

/// How long a session record lives after its `initialize`: a client still using the session
/// then is told it is gone (404) and initializes again, as the protocol provides.
pub const SESSION_RECORD_TTL: Duration = Duration::from_secs(24 * 3600);

/// Session records of one endpoint (`/mcp`, or one server's view: a session never crosses
/// views).
#[derive(Debug, Clone)]
pub struct RedisSessions {
    redis: Redis,
    scope: String,
}

impl RedisSessions {
    pub fn new(redis: Redis, scope: &str) -> RedisSessions {
        RedisSessions {
            redis,
            scope: scope.to_owned(),
        }
    }

    fn key(&self, id: &str) -> String {
        self.redis.key(
            "mcp-session",
            &format!("{}:{}", self.scope, super::hashed(&[id])),
        )
    }

    /// Stores `record` (JSON) for session `id`.
    pub async fn put(&self, id: &str, record: &serde_json::Value) -> Result<(), StoreError> {
        let mut connection = self.redis.connection();
        let ttl = u64::try_from(SESSION_RECORD_TTL.as_millis()).unwrap_or(u64::MAX);
        self.redis
            .run(
                redis::cmd("SET")
                    .arg(self.key(id))
                    .arg(record.to_string())
                    .arg("PX")
                    .arg(ttl)
                    .query_async::<()>(&mut connection),
            )
            .await
    }

    /// The record of session `id`, if there is one.
    pub async fn get(&self, id: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let mut connection = self.redis.connection();
        let raw: Option<String> = self
            .redis
            .run(
                redis::cmd("GET")
                    .arg(self.key(id))
                    .query_async(&mut connection),
            )
            .await?;
        raw.map(|raw| {
            serde_json::from_str(&raw)
                .map_err(|_| StoreError::Corrupt("a session record is not JSON".to_owned()))
        })
        .transpose()
    }

    pub async fn delete(&self, id: &str) -> Result<(), StoreError> {
        let mut connection = self.redis.connection();
        self.redis
            .run(
                redis::cmd("DEL")
                    .arg(self.key(id))
                    .query_async::<i64>(&mut connection),
            )
            .await
            .map(|_| ())
    }
}
