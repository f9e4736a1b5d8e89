//! The stores several instances share (`[state] redis`, `postgres`): opened at start, checked
//! by `/readyz`, and the limits and change events that live in Redis.

use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

use super::{Gateway, GatewayError};
use crate::{
    config::{CallLimits, Env, ReadsWhenDown, SharedConfig},
    policy::{CallContext, Effect, LimitExceeded, LimitKind},
    store::{
        StoreError,
        postgres::SharedPins,
        redis::{Event, Events, Lease, Limited, Redis, RedisLimits, Refused},
    },
};

/// Handles on the shared stores; empty for a single instance.
#[derive(Clone, Default)]
pub struct SharedStores {
    pub redis: Option<Redis>,
    pub postgres: Option<PgPool>,
    pub limits: Option<RedisLimits>,
    pub events: Option<Events>,
    pub pins: Option<SharedPins>,
    pub reads_when_redis_down: ReadsWhenDown,
    stop: CancellationToken,
}

/// Why a shared store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SharedError {
    #[error("`state.{field}`: {message}")]
    Url {
        field: &'static str,
        message: String,
    },
    #[error("`state.require_shared`: {0}")]
    Required(StoreError),
}

/// One store's state as `/readyz` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreHealth {
    pub name: &'static str,
    pub up: bool,
}

impl SharedStores {
    /// Connects to the configured stores. With `require_shared`, both must answer now;
    /// otherwise an unreachable store is connected to in the background, and everything that
    /// needs it fails closed until it answers.
    pub async fn open(settings: &SharedConfig, env: &Env) -> Result<SharedStores, SharedError> {
        let eager = settings.require_shared;
        let redis_url = resolve(&settings.redis, "redis", env)?;
        let postgres_url = resolve(&settings.postgres, "postgres", env)?;
        let stop = CancellationToken::new();
        let redis = match redis_url {
            Some(url) => Some(
                Redis::connect(&url, settings, eager)
                    .await
                    .map_err(SharedError::Required)?,
            ),
            None => None,
        };
        let postgres = match postgres_url {
            Some(url) => {
                let pool = crate::store::postgres::connect(&url, settings, eager)
                    .await
                    .map_err(SharedError::Required)?;
                if !eager {
                    let pool = pool.clone();
                    tokio::spawn(migrate_when_up(pool, stop.clone()));
                }
                Some(pool)
            }
            None => None,
        };
        let limits = redis
            .clone()
            .map(|redis| RedisLimits::new(redis, settings.lease_ttl, stop.clone()));
        let events = redis
            .clone()
            .map(|redis| Events::start(redis, stop.clone()));
        let pins = postgres.clone().map(SharedPins::new);
        Ok(SharedStores {
            redis,
            postgres,
            limits,
            events,
            pins,
            reads_when_redis_down: settings.reads_when_redis_down,
            stop,
        })
    }

    /// Whether each configured store answers now, reached from `env` with `settings`'
    /// deadlines, changing nothing (no schema applied): for `mcpgate config check`.
    pub async fn probe(
        settings: &SharedConfig,
        env: &Env,
    ) -> Result<Vec<(&'static str, Result<(), StoreError>)>, SharedError> {
        let mut answers = Vec::new();
        if let Some(url) = resolve(&settings.redis, "redis", env)? {
            let up = Redis::connect(&url, settings, true).await.map(|_| ());
            answers.push(("redis", up));
        }
        if let Some(url) = resolve(&settings.postgres, "postgres", env)? {
            let up = match crate::store::postgres::connect(&url, settings, false).await {
                Ok(pool) => {
                    let up = crate::store::postgres::ping(&pool).await;
                    pool.close().await;
                    up
                }
                Err(err) => Err(err),
            };
            answers.push(("postgres", up));
        }
        Ok(answers)
    }

    /// Whether each configured store answers now.
    pub async fn health(&self) -> Vec<StoreHealth> {
        let mut health = Vec::new();
        if let Some(redis) = &self.redis {
            health.push(StoreHealth {
                name: "redis",
                up: redis.ping().await.is_ok(),
            });
        }
        if let Some(pool) = &self.postgres {
            health.push(StoreHealth {
                name: "postgres",
                up: crate::store::postgres::ping(pool).await.is_ok(),
            });
        }
        health
    }

    /// Cancelled when the background work stops.
    pub(crate) fn stopping(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops the background work (event subscription, schema retries).
    pub fn close(&self) {
        self.stop.cancel();
    }
}

/// A store's URL from its `${VAR}` template and the environment.
fn resolve(
    template: &Option<crate::config::SecretTemplate>,
    field: &'static str,
    env: &Env,
) -> Result<Option<crate::config::Secret>, SharedError> {
    template
        .as_ref()
        .map(|t| {
            t.resolve(env)
                .map_err(|message| SharedError::Url { field, message })
        })
        .transpose()
}

/// Applies the schema once PostgreSQL answers (an instance started while it was down).
async fn migrate_when_up(pool: PgPool, stop: CancellationToken) {
    let mut wait = std::time::Duration::from_millis(200);
    loop {
        match crate::store::postgres::migrate(&pool).await {
            Ok(()) => return,
            Err(err @ StoreError::IncompatibleSchema { .. }) => {
                tracing::error!(error = %err, "the PostgreSQL schema cannot be used");
                return;
            }
            Err(err) => tracing::debug!(error = %err, "PostgreSQL schema not applied yet"),
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = (wait * 2).min(std::time::Duration::from_secs(5));
    }
}

/// A call's permits: in this process, in Redis, or none (reads while Redis is down, when
/// configured so).
pub(super) enum Permit {
    Local(
        #[expect(
            dead_code,
            reason = "held for the call; dropping it releases the permit"
        )]
        crate::policy::CallPermit,
    ),
    Shared(
        #[expect(
            dead_code,
            reason = "held for the call; dropping it releases the lease"
        )]
        Lease,
    ),
    Unlimited,
}

impl Gateway {
    /// Step 6 of the gate: rate and concurrency limits, shared when Redis is configured.
    pub(super) async fn admit(
        &self,
        ctx: &CallContext,
        server: &crate::config::ServerId,
        limits: &CallLimits,
        effect: Effect,
    ) -> Result<Permit, GatewayError> {
        let Some(shared) = &self.inner.shared.limits else {
            self.inner
                .limiter
                .check_rate(&ctx.user, server, limits, tokio::time::Instant::now())
                .map_err(super::call::limit_error)?;
            let permit = self
                .inner
                .limiter
                .acquire(&ctx.user, server, limits)
                .await
                .map_err(super::call::limit_error)?;
            return Ok(Permit::Local(permit));
        };
        match shared.admit(&ctx.user, server, limits).await {
            Ok(lease) => Ok(Permit::Shared(lease)),
            Err(Refused::Limit(limited)) => {
                let (limit, retry_after) = match limited {
                    Limited::UserRate(after) => (LimitKind::UserRate, Some(after)),
                    Limited::ServerRate(after) => (LimitKind::ServerRate, Some(after)),
                    Limited::UserConcurrency => (LimitKind::UserConcurrency, None),
                    Limited::ServerConcurrency => (LimitKind::ServerConcurrency, None),
                };
                Err(super::call::limit_error(LimitExceeded {
                    limit,
                    retry_after,
                }))
            }
            Err(Refused::Store(err)) => {
                let reads_go_on = self.inner.shared.reads_when_redis_down
                    == ReadsWhenDown::Unlimited
                    && effect == Effect::Read;
                if reads_go_on {
                    tracing::warn!(error = %err, "Redis is down: a read call runs without limits");
                    Ok(Permit::Unlimited)
                } else {
                    tracing::error!(error = %err, "the shared limits cannot be checked");
                    Err(GatewayError::StoreUnavailable {
                        what: "the shared limits store",
                    })
                }
            }
        }
    }

    /// Tells the other instances (best effort: pub/sub may drop it; they catch up at their
    /// next refresh).
    pub(super) async fn announce(&self, event: Event) {
        if let Some(events) = &self.inner.shared.events
            && let Err(err) = events.publish(event).await
        {
            tracing::warn!(error = %err, "an event could not be sent to the other instances");
        }
    }

    /// Acts on what the other instances say, until the gateway stops.
    pub(super) async fn follow_instances(&self) {
        let Some(events) = &self.inner.shared.events else {
            return;
        };
        let mut received = events.subscribe();
        loop {
            let event = tokio::select! {
                event = received.recv() => event,
                () = self.inner.cancel.cancelled() => return,
            };
            match event {
                Ok(Event::Refreshed { server }) => {
                    if let Some(id) = crate::config::ServerId::new(&server) {
                        self.inner.manager.refresh(&id);
                    }
                }
                Ok(Event::PinsChanged) => self.reload_pins().await,
                // The MCP endpoint and the chat routes follow these themselves.
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    tracing::warn!("events from other instances were missed");
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Reads the pins again (another instance changed them): the shared ones, or the file.
    pub(super) async fn reload_pins(&self) {
        let path = self.inner.config.pins.path().map(std::path::Path::to_owned);
        let Some(shared) = &self.inner.shared.pins else {
            let Some(path) = path else { return };
            match crate::catalog::Pins::load(&path) {
                Ok(pins) => self.set_pins(pins).await,
                Err(err) => tracing::warn!(error = %err, "the pin file could not be read again"),
            }
            return;
        };
        // The first instance to start brings its pin file; after that the row is the pins.
        let seeded = shared
            .update(|current| match (current, &path) {
                (Some(_), _) | (None, None) => Ok(None),
                (None, Some(path)) => {
                    crate::catalog::Pins::load(path).map(|pins| pins.map(|p| p.to_json()))
                }
            })
            .await;
        let stored = match seeded {
            Ok(Ok(stored)) => stored,
            Ok(Err(err)) => {
                tracing::warn!(error = %err, "the pin file could not be read");
                return;
            }
            Err(err) => {
                tracing::warn!(error = %err, "the shared pins could not be read");
                return;
            }
        };
        let Some(json) = stored else { return };
        match crate::catalog::Pins::parse_json(&json) {
            Ok(pins) => {
                if let Some(path) = &path
                    && let Err(err) = pins.write(path)
                {
                    tracing::warn!(error = %err, "the pin file export could not be written");
                }
                self.set_pins(Some(pins)).await;
            }
            Err(err) => tracing::error!(error = %err, "the shared pins cannot be read"),
        }
    }
}
