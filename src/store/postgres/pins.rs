//! The pins (reviewed tool definitions) shared by every instance: one row holding the pin
//! file's JSON form, changed in a transaction that holds the row, so two instances pinning
//! at once keep both pins. The local pin file is only an export then.

use sqlx::PgPool;

use super::unavailable;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct SharedPins {
    pool: PgPool,
}

impl SharedPins {
    pub fn new(pool: PgPool) -> SharedPins {
        SharedPins { pool }
    }

    /// The pins' JSON, if any instance stored them.
    pub async fn load(&self) -> Result<Option<String>, StoreError> {
        sqlx::query_scalar("SELECT body FROM mcpgate_pins WHERE id = 1")
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| unavailable(&e))
    }

    /// Replaces the pins with what `change` makes of the stored JSON (`None`: none stored
    /// yet), holding the row meanwhile; `change` returning `None` leaves them as they are.
    /// Returns what is stored afterwards.
    pub async fn update<E>(
        &self,
        change: impl FnOnce(Option<&str>) -> Result<Option<String>, E>,
    ) -> Result<Result<Option<String>, E>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| unavailable(&e))?;
        // The row exists from the first update on; before it, the insert below races only
        // with another first update, which the primary key settles.
        let current: Option<String> =
            sqlx::query_scalar("SELECT body FROM mcpgate_pins WHERE id = 1 FOR UPDATE")
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| unavailable(&e))?;
        let next = match change(current.as_deref()) {
            Ok(Some(next)) => next,
            Ok(None) => return Ok(Ok(current)),
            Err(err) => return Ok(Err(err)),
        };
        sqlx::query(
            "INSERT INTO mcpgate_pins (id, body, updated_at) VALUES (1, $1, now()) \
             ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body, updated_at = now()",
        )
        .bind(&next)
        .execute(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(Ok(Some(next)))
    }
}
