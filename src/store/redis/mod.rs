//! Shared state of several instances in Redis: confirmations and approved tokens (single
//! use, by Lua scripts that check and delete in one step), rate and concurrency limits (on
//! Redis `TIME`, never an instance's clock), MCP session records, change events, and the
//! WebMCP pages' registry and call routing.
//!
//! One multiplexed connection per [lane](crate::lane) (and one for every other thread),
//! each reconnected by redis-rs's connection manager and made on its lane, whose thread then
//! drives it: a call's commands wake no other thread. Every command has a deadline. A command whose outcome is unknown (the connection dropped
//! mid-command, a timeout) is an error, and for anything that grants an error refuses.
//! Scripts touch several keys of one deployment, so Redis Cluster is not supported: use one
//! primary (with replicas and Sentinel or a managed failover if wanted).

mod confirmations;
mod events;
mod limits;
mod pages;
mod rounds;
mod scripts;
mod sessions;

use std::{sync::Arc, time::Duration};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::lane::PerLane;

pub use confirmations::RedisConfirmations;
pub use events::{Event, Events};
pub use limits::{Lease, Limited, RedisLimits, Refused};
pub use pages::{Claim, PageEntry, RedisPages};
pub use rounds::RedisRounds;
pub use sessions::RedisSessions;

use super::StoreError;
use crate::config::{Secret, SharedConfig};

/// A connection to the deployment's Redis, and the names of its keys.
#[derive(Clone)]
pub struct Redis {
    /// The connection of every thread that is not a lane's.
    manager: ConnectionManager,
    /// Each lane's own, made when the lane first asks.
    lanes: Arc<PerLane<ConnectionManager>>,
    config: ConnectionManagerConfig,
    client: redis::Client,
    prefix: String,
    instance: String,
    command_timeout: Duration,
}

impl std::fmt::Debug for Redis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redis")
            .field("prefix", &self.prefix)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

/// A Redis error as a store error, without the URL or any value.
pub(crate) fn unavailable(err: &redis::RedisError) -> StoreError {
    let what = if err.is_timeout() {
        "timed out".to_owned()
    } else if err.is_connection_dropped() || err.is_connection_refusal() || err.is_io_error() {
        "cannot be reached".to_owned()
    } else {
        format!("failed ({:?})", err.kind())
    };
    StoreError::Unavailable(format!("redis {what}"))
}

impl Redis {
    /// Connects to `url` (`redis://` or `rediss://`). With `eager`, fails unless Redis
    /// answers now; otherwise the connection is made, and remade, in the background.
    pub async fn connect(
        url: &Secret,
        settings: &SharedConfig,
        eager: bool,
    ) -> Result<Redis, StoreError> {
        let unusable = |err: redis::RedisError| {
            StoreError::Unavailable(format!("the Redis URL is not usable ({:?})", err.kind()))
        };
        let info =
            redis::IntoConnectionInfo::into_connection_info(url.expose()).map_err(unusable)?;
        // RESP3: Redis tells the connection it is closing, so the manager reconnects before
        // the next command instead of failing it (RESP2 learns only from that command).
        let settings_resp3 = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        let client =
            redis::Client::open(info.set_redis_settings(settings_resp3)).map_err(unusable)?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(settings.connect_timeout))
            .set_response_timeout(Some(settings.command_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let manager = if eager {
            tokio::time::timeout(
                settings.connect_timeout,
                ConnectionManager::new_with_config(client.clone(), config.clone()),
            )
            .await
            .map_err(|_| StoreError::Unavailable("redis cannot be reached".to_owned()))?
            .map_err(|err| unavailable(&err))?
        } else {
            ConnectionManager::new_lazy_with_config(client.clone(), config.clone())
                .map_err(|err| unavailable(&err))?
        };
        let redis = Redis {
            manager,
            lanes: Arc::new(PerLane::new()),
            config,
            client,
            prefix: settings.key_prefix.clone(),
            instance: settings.instance.clone(),
            command_timeout: settings.command_timeout,
        };
        if eager {
            redis.ping().await?;
        }
        Ok(redis)
    }

    /// A key of this deployment: `<prefix>:<kind>:<rest>`.
    pub(crate) fn key(&self, kind: &str, rest: &str) -> String {
        format!("{}:{kind}:{rest}", self.prefix)
    }

    /// This instance's name.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// The calling lane's connection (connected on its first command).
    pub(crate) fn connection(&self) -> ConnectionManager {
        if crate::lane::current() == 0 {
            return self.manager.clone();
        }
        self.lanes
            .get_or_init(|| {
                // Made lazily, so this cannot fail for a URL `connect` took; if it did, the
                // shared connection serves the lane.
                ConnectionManager::new_lazy_with_config(self.client.clone(), self.config.clone())
                    .unwrap_or_else(|_| self.manager.clone())
            })
            .clone()
    }

    pub(crate) fn client(&self) -> &redis::Client {
        &self.client
    }

    /// Runs `command` with the command deadline; any failure, the deadline included, is
    /// [`StoreError::Unavailable`].
    pub(crate) async fn run<T>(
        &self,
        command: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.command_timeout, command).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(unavailable(&err)),
            Err(_) => Err(StoreError::Unavailable("redis timed out".to_owned())),
        }
    }

    /// Whether Redis answers `PING` now.
    pub async fn ping(&self) -> Result<(), StoreError> {
        let mut connection = self.connection();
        let answer: String = self
            .run(redis::cmd("PING").query_async(&mut connection))
            .await?;
        if answer == "PONG" {
            Ok(())
        } else {
            Err(StoreError::Unavailable(
                "redis answered PING oddly".to_owned(),
            ))
        }
    }
}

/// A key part naming (tenant, user) or any other tuple of free text: hex SHA-256 of its JSON,
/// so no user name can reach into another key.
pub(crate) fn hashed(parts: &[&str]) -> String {
    let json = serde_json::to_string(parts).unwrap_or_default();
    crate::digest::sha256_hex(json.as_bytes())
}
