//! Requests sent with an `Idempotency-Key`, shared by every instance: a retry that reaches
//! another instance gets the first answer too. In PostgreSQL rather than Redis because a kept
//! answer must outlive a Redis restart (Redis here may keep nothing on disk): a write retried
//! after one would run twice.
//!
//! A claim is one transaction: insert the key if it is new (a second inserter of the same key
//! waits on the primary key until the first commits, then inserts nothing), else read it
//! locked (`FOR UPDATE`), decide as every store does ([`decide`]) and take it over when
//! expired or abandoned.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sqlx::{PgPool, Row};

use super::unavailable;
use crate::{
    oauth::Sealed,
    store::{
        StoreError,
        clock::to_micros,
        idempotency::{Begin, Held, IdempotencyKey, IdempotencyStore, decide},
    },
};

#[derive(Debug, Clone)]
pub struct PgIdempotency {
    pool: PgPool,
}

impl PgIdempotency {
    pub fn new(pool: PgPool) -> PgIdempotency {
        PgIdempotency { pool }
    }
}

fn failed(err: sqlx::Error) -> StoreError {
    unavailable(&err)
}

#[async_trait]
impl IdempotencyStore for PgIdempotency {
    async fn begin(
        &self,
        key: &IdempotencyKey,
        request_hash: &str,
        now: SystemTime,
        stale_after: Duration,
    ) -> Result<Begin, StoreError> {
        let now = to_micros(now);
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let inserted = sqlx::query(
            "INSERT INTO mcpgate_idempotency (lookup, request_hash, started_at) \
             VALUES ($1, $2, $3) ON CONFLICT (lookup) DO NOTHING",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        if inserted.rows_affected() == 1 {
            tx.commit().await.map_err(failed)?;
            return Ok(Begin::Fresh);
        }
        let row = sqlx::query(
            "SELECT request_hash, key_id, nonce, sealed, started_at, expires_at \
             FROM mcpgate_idempotency WHERE lookup = $1 FOR UPDATE",
        )
        .bind(&key.lookup)
        .fetch_optional(&mut *tx)
        .await
        .map_err(failed)?;
        if let Some(row) = row {
            let held = Held::from_columns(
                row.try_get("request_hash").map_err(failed)?,
                (
                    row.try_get("key_id").map_err(failed)?,
                    row.try_get("nonce").map_err(failed)?,
                    row.try_get("sealed").map_err(failed)?,
                ),
                row.try_get("started_at").map_err(failed)?,
                row.try_get("expires_at").map_err(failed)?,
            );
            if let Some(begin) = decide(held, request_hash, now, stale_after) {
                tx.commit().await.map_err(failed)?;
                return Ok(begin);
            }
        }
        // Expired or abandoned (or purged between the two statements): this request's now.
        sqlx::query(
            "INSERT INTO mcpgate_idempotency (lookup, request_hash, started_at) \
             VALUES ($1, $2, $3) \
             ON CONFLICT (lookup) DO UPDATE SET request_hash = excluded.request_hash, \
                key_id = NULL, nonce = NULL, sealed = NULL, \
                started_at = excluded.started_at, expires_at = NULL",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .bind(now)
        .execute(&mut *tx)
        .await
        .map_err(failed)?;
        tx.commit().await.map_err(failed)?;
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
            "UPDATE mcpgate_idempotency SET key_id = $3, nonce = $4, sealed = $5, \
                expires_at = $6 \
             WHERE lookup = $1 AND request_hash = $2 AND sealed IS NULL",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .bind(&answer.key_id)
        .bind(&answer.nonce)
        .bind(&answer.ciphertext)
        .bind(to_micros(expires_at))
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn release(&self, key: &IdempotencyKey, request_hash: &str) -> Result<(), StoreError> {
        sqlx::query(
            "DELETE FROM mcpgate_idempotency \
             WHERE lookup = $1 AND request_hash = $2 AND sealed IS NULL",
        )
        .bind(&key.lookup)
        .bind(request_hash)
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn purge(&self, now: SystemTime) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM mcpgate_idempotency WHERE expires_at <= $1")
            .bind(to_micros(now))
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::idempotency::Answer;

    /// The machine's PostgreSQL, in a database of this test's own: the contract, and two pools
    /// (two instances) claiming one key at once: one claims it.
    #[tokio::test]
    async fn postgres_keeps_the_contract_and_one_claim_wins_across_pools() {
        let scratch = super::super::scratch::Database::create("idempotency").await;
        let pool = scratch.pool().await;
        super::super::migrate(&pool).await.expect("schema");
        let store = PgIdempotency::new(pool.clone());
        crate::store::idempotency::contract::holds(&store).await;

        let pools = [pool.clone(), scratch.pool().await, scratch.pool().await];
        let key = IdempotencyKey::new("acme", "alice", "raced");
        let now = SystemTime::now();
        let claims = pools.iter().map(|pool| {
            let (store, key) = (PgIdempotency::new(pool.clone()), key.clone());
            async move {
                store
                    .begin(&key, "h", now, Duration::from_secs(60))
                    .await
                    .expect("begin")
            }
        });
        let outcomes = futures::future::join_all(claims).await;
        let fresh = outcomes.iter().filter(|b| **b == Begin::Fresh).count();
        assert_eq!(fresh, 1, "{outcomes:?}");
        assert!(
            outcomes
                .iter()
                .all(|b| matches!(b, Begin::Fresh | Begin::InFlight)),
            "{outcomes:?}"
        );
        // The answer one instance keeps, another replays.
        let answer = Answer {
            status: 200,
            body: b"{}".to_vec(),
        };
        store
            .finish(
                &key,
                "h",
                &key.seal(&answer).expect("sealed"),
                now + Duration::from_secs(60),
            )
            .await
            .expect("finish");
        let other = PgIdempotency::new(pools[1].clone());
        match other
            .begin(&key, "h", now, Duration::from_secs(60))
            .await
            .expect("begin")
        {
            Begin::Replay(kept) => assert_eq!(key.open(&kept).expect("opens"), answer),
            begin => panic!("a replay, not {begin:?}"),
        }
        for pool in pools {
            pool.close().await;
        }
        scratch.drop_it().await;
    }
}
