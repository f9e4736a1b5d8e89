//! The durable record of consumed confirmation tokens: a token's hash is inserted when it is
//! taken, and a second insert of the same hash finds it there. Redis decides who takes a
//! token; this keeps the decision through a Redis restart or failover.

use sqlx::PgPool;

use super::{pg_text, unavailable};
use crate::store::StoreError;

/// How long a consumed token is remembered: far longer than any token lives (ten minutes
/// at most), so a token restored with an old Redis snapshot is still known as used.
const REMEMBER_HOURS: i32 = 24;

#[derive(Debug, Clone)]
pub struct Consumed {
    pool: PgPool,
    instance: String,
}

impl Consumed {
    pub fn new(pool: PgPool, instance: &str) -> Consumed {
        Consumed {
            pool,
            instance: instance.to_owned(),
        }
    }

    /// Records that `token_hash` was taken now; `false` when it had been taken before.
    pub async fn record(
        &self,
        token_hash: &str,
        confirmation_id: &str,
    ) -> Result<bool, StoreError> {
        let inserted = sqlx::query(
            "INSERT INTO mcpgate_consumed (token_hash, confirmation_id, instance) \
             VALUES ($1, $2, $3) ON CONFLICT (token_hash) DO NOTHING",
        )
        .bind(pg_text(token_hash).as_ref())
        .bind(pg_text(confirmation_id).as_ref())
        .bind(&self.instance)
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(inserted.rows_affected() == 1)
    }

    /// Forgets consumed tokens older than a day, by PostgreSQL's clock.
    pub async fn purge(&self) -> Result<u64, StoreError> {
        let deleted = sqlx::query(
            "DELETE FROM mcpgate_consumed WHERE consumed_at < now() - make_interval(hours => $1)",
        )
        .bind(REMEMBER_HOURS)
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(deleted.rows_affected())
    }
}
