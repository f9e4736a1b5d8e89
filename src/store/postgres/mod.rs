//! Durable state of several instances in PostgreSQL: the audit log (group commit off the
//! request path; a call is answered only once its record is committed), the record of every
//! consumed confirmation token, the pins, users' OAuth connections and servers, and the
//! answers kept for `Idempotency-Key` retries. The schema is applied at start under an
//! advisory lock, so instances starting together do not race.

mod audit;
mod consumed;
mod idempotency;
mod oauth;
mod pins;
#[cfg(test)]
pub(crate) mod scratch;
mod usage;

use std::{str::FromStr as _, time::Duration};

use sqlx::{
    PgPool,
    postgres::{PgConnectOptions, PgPoolOptions},
};

pub use audit::PgAudit;
pub use consumed::Consumed;
pub use idempotency::PgIdempotency;
pub use oauth::PgOAuth;
pub use pins::SharedPins;
pub use usage::PgUsage;

use super::StoreError;
use crate::config::{Secret, SharedConfig};

/// The schema version this build writes and reads. Tables added later beside the first ones
/// (users' OAuth connections) are left alone by builds that do not know them, so they do not
/// change the version: instances of both builds may run together during an upgrade.
const SCHEMA_VERSION: i32 = 1;

/// A key of `pg_advisory_xact_lock` that only mcpgate's migrations take.
const MIGRATION_LOCK: i64 = 0x6d63_7067_6174_6501;

const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS mcpgate_schema (version integer NOT NULL);
CREATE TABLE IF NOT EXISTS mcpgate_audit (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time_us bigint NOT NULL,
    time timestamptz GENERATED ALWAYS AS (to_timestamp(time_us / 1000000.0)) STORED,
    instance text NOT NULL,
    request_id text NOT NULL,
    tenant text NOT NULL,
    user_name text NOT NULL,
    session text NOT NULL,
    server text NOT NULL,
    tool text NOT NULL,
    decision text NOT NULL,
    confirmation_id text,
    outcome text NOT NULL,
    duration_ms bigint NOT NULL,
    argument_bytes bigint NOT NULL,
    result_bytes bigint NOT NULL,
    fingerprint text,
    arguments text,
    detail text
);
CREATE INDEX IF NOT EXISTS mcpgate_audit_time ON mcpgate_audit (time_us);
CREATE INDEX IF NOT EXISTS mcpgate_audit_tenant ON mcpgate_audit (tenant, id);
CREATE INDEX IF NOT EXISTS mcpgate_audit_tenant_user ON mcpgate_audit (tenant, user_name, id);
CREATE INDEX IF NOT EXISTS mcpgate_audit_tool ON mcpgate_audit (tool, id);
CREATE TABLE IF NOT EXISTS mcpgate_consumed (
    token_hash text PRIMARY KEY,
    confirmation_id text NOT NULL,
    instance text NOT NULL,
    consumed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS mcpgate_consumed_at ON mcpgate_consumed (consumed_at);
CREATE TABLE IF NOT EXISTS mcpgate_pins (
    id smallint PRIMARY KEY CHECK (id = 1),
    body text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS mcpgate_oauth_connections (
    tenant text NOT NULL,
    user_name text NOT NULL,
    server text NOT NULL,
    status text NOT NULL,
    issuer text,
    scopes text NOT NULL,
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    sealed bytea NOT NULL,
    connected_at bigint NOT NULL,
    updated_at bigint NOT NULL,
    PRIMARY KEY (tenant, user_name, server)
);
CREATE INDEX IF NOT EXISTS mcpgate_oauth_connections_server
    ON mcpgate_oauth_connections (server, updated_at);
CREATE TABLE IF NOT EXISTS mcpgate_oauth_pending (
    state_hash text PRIMARY KEY,
    tenant text NOT NULL,
    user_name text NOT NULL,
    server text NOT NULL,
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    sealed bytea NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS mcpgate_oauth_pending_expiry ON mcpgate_oauth_pending (expires_at);
CREATE TABLE IF NOT EXISTS mcpgate_user_servers (
    tenant text NOT NULL,
    user_name text NOT NULL,
    name text NOT NULL,
    url text NOT NULL,
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    sealed bytea NOT NULL,
    read_only text NOT NULL,
    created_at bigint NOT NULL,
    PRIMARY KEY (tenant, user_name, name)
);
CREATE TABLE IF NOT EXISTS mcpgate_idempotency (
    lookup text PRIMARY KEY,
    request_hash text NOT NULL,
    key_id text,
    nonce bytea,
    sealed bytea,
    started_at bigint NOT NULL,
    expires_at bigint
);
CREATE INDEX IF NOT EXISTS mcpgate_idempotency_expiry ON mcpgate_idempotency (expires_at);
CREATE TABLE IF NOT EXISTS mcpgate_model_usage (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    time_us bigint NOT NULL,
    tenant text NOT NULL,
    user_name text NOT NULL,
    session text NOT NULL,
    model text NOT NULL,
    requests bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cached_tokens bigint NOT NULL,
    cost_micros bigint NOT NULL
);
CREATE INDEX IF NOT EXISTS mcpgate_model_usage_time ON mcpgate_model_usage (time_us);
CREATE TABLE IF NOT EXISTS mcpgate_oauth_clients (
    server text NOT NULL,
    issuer text NOT NULL,
    key_id text NOT NULL,
    nonce bytea NOT NULL,
    sealed bytea NOT NULL,
    PRIMARY KEY (server, issuer)
);
";

/// A PostgreSQL error as a store error, without the URL, the SQL or any value.
pub(crate) fn unavailable(err: &sqlx::Error) -> StoreError {
    let what = match err {
        sqlx::Error::PoolTimedOut => "cannot be reached (pool timed out)",
        sqlx::Error::Io(_) | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => "cannot be reached",
        sqlx::Error::Database(_) => "refused a statement",
        _ => "failed",
    };
    StoreError::Unavailable(format!("postgres {what}"))
}

/// Text PostgreSQL keeps: it refuses NUL in `text`, which no name of ours holds anyway.
pub(crate) fn pg_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{fffd}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Opens the pool for `url` and applies the schema. With `eager`, fails unless PostgreSQL
/// answers now; otherwise the schema is applied at the first successful connection.
pub async fn connect(
    url: &Secret,
    settings: &SharedConfig,
    eager: bool,
) -> Result<PgPool, StoreError> {
    let pool = pool_options(settings).connect_lazy_with(connect_options(url)?);
    if eager {
        migrate(&pool).await?;
    }
    Ok(pool)
}

fn connect_options(url: &Secret) -> Result<PgConnectOptions, StoreError> {
    Ok(PgConnectOptions::from_str(url.expose())
        .map_err(|_| StoreError::Unavailable("the PostgreSQL URL is not usable".to_owned()))?
        .application_name("mcpgate"))
}

fn pool_options(settings: &SharedConfig) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(settings.pool_size)
        .min_connections(0)
        .acquire_timeout(settings.command_timeout.max(settings.connect_timeout))
        .idle_timeout(Some(Duration::from_secs(300)))
}

/// Applies the schema (idempotent) under the migration lock; refuses a database a newer
/// mcpgate wrote.
pub async fn migrate(pool: &PgPool) -> Result<(), StoreError> {
    let mut tx = pool.begin().await.map_err(|e| unavailable(&e))?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
    sqlx::raw_sql(SCHEMA)
        .execute(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
    // Built from the usage module's constants (table and column names) only.
    sqlx::raw_sql(sqlx::AssertSqlSafe(usage::schema()))
        .execute(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
    let found: Option<i32> = sqlx::query_scalar("SELECT max(version) FROM mcpgate_schema")
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
    match found {
        Some(found) if found > SCHEMA_VERSION => {
            return Err(StoreError::IncompatibleSchema {
                found: i64::from(found),
                supported: i64::from(SCHEMA_VERSION),
            });
        }
        Some(_) => {}
        None => {
            sqlx::query("INSERT INTO mcpgate_schema (version) VALUES ($1)")
                .bind(SCHEMA_VERSION)
                .execute(&mut *tx)
                .await
                .map_err(|e| unavailable(&e))?;
        }
    }
    tx.commit().await.map_err(|e| unavailable(&e))
}

/// Whether PostgreSQL answers now.
pub async fn ping(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("SELECT 1")
        .execute(pool)
        .await
        .map(|_| ())
        .map_err(|e| unavailable(&e))
}
