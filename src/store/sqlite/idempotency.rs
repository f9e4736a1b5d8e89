//! Requests sent with an `Idempotency-Key`, in SQLite (schema version 4): a claim and its
//! check are one write transaction, so two requests with one key cannot both go on.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sqlx::{Row, SqlitePool};

use super::store_error;
use crate::{
    oauth::Sealed,
    store::{
        StoreError,
        clock::to_micros,
        idempotency::{Begin, Held, IdempotencyKey, IdempotencyStore, decide},
    },
};

pub(super) struct SqliteIdempotency {
    pool: SqlitePool,
}

impl SqliteIdempotency {
    pub(super) fn new(pool: SqlitePool) -> SqliteIdempotency {
        SqliteIdempotency { pool }
    }
}

#[async_trait]
impl IdempotencyStore for SqliteIdempotency {
    async fn begin(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        now: SystemTime,
        stale_after: Duration,
    ) -> Result<Begin, StoreError> {
        let now = to_micros(now);
        let mut tx = self
            .pool
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(store_error)?;
        let row = sqlx::query(
            "SELECT request_hash, key_id, nonce, sealed, started_at, expires_at
             FROM idempotency WHERE lookup = ?1",
        )
        .bind(&key.lookup)
        .fetch_optional(&mut *tx)
        .await
        .map_err(store_error)?;
        if let Some(row) = row {
            let held = Held::from_columns(
                row.try_get("request_hash").map_err(store_error)?,
                (
                    row.try_get("key_id").map_err(store_error)?,
                    row.try_get("nonce").map_err(store_error)?,
                    row.try_get("sealed").map_err(store_error)?,
                ),
                row.try_get("started_at").map_err(store_error)?,
                row.try_get("expires_at").map_err(store_error)?,
            );
            if let Some(begin) = decide(held, request_hash, now, stale_after) {
                // Ended here, not dropped: a dropped transaction keeps the write lock until
                // its connection is used again, and the audit writer would wait on it.
                tx.commit().await.map_err(store_error)?;
                return Ok(begin);
            }
        }
        sqlx::query(
            "INSERT INTO idempotency (lookup, request_hash, started_at) VALUES (?1, ?2, ?3)
             ON CONFLICT (lookup) DO UPDATE SET request_hash = excluded.request_hash,
                key_id = NULL, nonce = NULL, sealed = NULL,
                started_at = excluded.started_at, expires_at = NULL",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(store_error)?;
        tx.commit().await.map_err(store_error)?;
        Ok(Begin::Fresh)
    }

    async fn finish(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        answer: &Sealed,
        expires_at: SystemTime,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE idempotency SET key_id = ?3, nonce = ?4, sealed = ?5, expires_at = ?6
             WHERE lookup = ?1 AND request_hash = ?2 AND sealed IS NULL",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .bind(&answer.key_id)
        .bind(&answer.nonce)
        .bind(&answer.ciphertext)
        .bind(to_micros(expires_at))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn release(&self, key: &IdempotencyKey, request_hash: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM idempotency
             WHERE lookup = ?1 AND request_hash = ?2 AND sealed IS NULL",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn purge(&self, now: SystemTime) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM idempotency WHERE expires_at <= ?1")
            .bind(to_micros(now))
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn sqlite_keeps_the_contract() {
        let dir = tempfile::tempdir().expect("temp dir");
        let stores = crate::store::open_sqlite(&dir.path().join("state.db"))
            .await
            .expect("open");
        crate::store::idempotency::contract::holds(stores.idempotency().as_ref()).await;
        stores.close().await;
    }
}
