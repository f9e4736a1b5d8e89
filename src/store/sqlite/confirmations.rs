//! Confirmations in SQLite. Every operation is one statement, so each is atomic on its own:
//! a take is `DELETE … RETURNING` (run to completion, so it commits before the row is
//! handed out; the primary key, or one `rowid` chosen in the same statement, makes it at
//! most one row), and a bounded insert counts and inserts in one `INSERT … SELECT … WHERE`.

use std::time::SystemTime;

use futures::future::{BoxFuture, FutureExt};
use sqlx::{Row, SqlitePool, sqlite::SqliteRow};

use super::{store_error, to_sql_usize};
use crate::store::{
    Approved, Binding, ConfirmationStore, Pending, StoreError,
    clock::{from_micros, is_expired, to_micros},
    confirmations::MAX_PER_USER,
};

pub(super) struct SqliteConfirmations {
    pool: SqlitePool,
}

impl SqliteConfirmations {
    pub(super) fn new(pool: SqlitePool) -> SqliteConfirmations {
        SqliteConfirmations { pool }
    }
}

const INSERT_PENDING: &str = "INSERT INTO pending
        (id, tenant_id, user_id, session_id, tool, fingerprint, args_hash, created_at, expires_at)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
    WHERE (SELECT COUNT(*) FROM pending WHERE tenant_id = ?2 AND user_id = ?3) < ?10";

const TAKE_PENDING: &str = "DELETE FROM pending WHERE id = ?1 RETURNING
    id, tenant_id, user_id, session_id, tool, fingerprint, args_hash, created_at, expires_at";

const LIST_PENDING: &str = "SELECT
    id, tenant_id, user_id, session_id, tool, fingerprint, args_hash, created_at, expires_at
    FROM pending WHERE tenant_id = ?1 AND user_id = ?2 AND expires_at > ?3
    ORDER BY created_at, id LIMIT ?4";

const INSERT_TOKEN: &str = "INSERT INTO tokens
        (token_hash, confirmation_id, tenant_id, user_id, session_id, tool, fingerprint,
         args_hash, expires_at)
    SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
    WHERE (SELECT COUNT(*) FROM tokens WHERE tenant_id = ?3 AND user_id = ?4) < ?10";

const TAKE_TOKEN: &str = "DELETE FROM tokens WHERE token_hash = ?1 RETURNING
    confirmation_id, tenant_id, user_id, session_id, tool, fingerprint, args_hash, expires_at";

/// One statement: the row is chosen and deleted atomically, so concurrent takes of one
/// grant cannot both get it. `rowid` picks one row among grants alike in every column.
const TAKE_APPROVED: &str = "DELETE FROM tokens WHERE rowid = (
        SELECT rowid FROM tokens
        WHERE tenant_id = ?1 AND user_id = ?2 AND session_id = ?3 AND tool = ?4
            AND fingerprint = ?5 AND args_hash = ?6 AND expires_at > ?7
        ORDER BY expires_at, token_hash LIMIT 1)
    RETURNING
    confirmation_id, tenant_id, user_id, session_id, tool, fingerprint, args_hash, expires_at";

const PURGE_PENDING: &str = "DELETE FROM pending WHERE expires_at <= ?1";
const PURGE_TOKENS: &str = "DELETE FROM tokens WHERE expires_at <= ?1";

type SqliteQuery<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// Binds a binding's six columns, in the order both tables declare them.
fn bind_binding<'q>(query: SqliteQuery<'q>, b: &'q Binding) -> SqliteQuery<'q> {
    query
        .bind(&b.tenant)
        .bind(&b.user)
        .bind(&b.session)
        .bind(&b.tool)
        .bind(&b.fingerprint)
        .bind(&b.args_hash)
}

/// A bounded insert (`INSERT … SELECT … WHERE count < bound`) affects no row at the bound.
fn bounded_insert(
    result: Result<sqlx::sqlite::SqliteQueryResult, sqlx::Error>,
) -> Result<(), StoreError> {
    match result.map_err(store_error)?.rows_affected() {
        0 => Err(StoreError::Full),
        _ => Ok(()),
    }
}

fn binding_from(row: &SqliteRow) -> Result<Binding, sqlx::Error> {
    Ok(Binding {
        tenant: row.try_get("tenant_id")?,
        user: row.try_get("user_id")?,
        session: row.try_get("session_id")?,
        tool: row.try_get("tool")?,
        fingerprint: row.try_get("fingerprint")?,
        args_hash: row.try_get("args_hash")?,
    })
}

fn pending_from(row: &SqliteRow) -> Result<Pending, sqlx::Error> {
    Ok(Pending {
        id: row.try_get("id")?,
        binding: binding_from(row)?,
        created_at: from_micros(row.try_get("created_at")?),
        expires_at: from_micros(row.try_get("expires_at")?),
    })
}

fn approved_from(row: &SqliteRow) -> Result<Approved, sqlx::Error> {
    Ok(Approved {
        binding: binding_from(row)?,
        confirmation_id: row.try_get("confirmation_id")?,
        expires_at: from_micros(row.try_get("expires_at")?),
    })
}

impl ConfirmationStore for SqliteConfirmations {
    fn insert_pending(&self, pending: Pending) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            let query = sqlx::query(INSERT_PENDING).bind(&pending.id);
            let result = bind_binding(query, &pending.binding)
                .bind(to_micros(pending.created_at))
                .bind(to_micros(pending.expires_at))
                .bind(to_sql_usize(MAX_PER_USER))
                .execute(&self.pool)
                .await;
            bounded_insert(result)
        }
        .boxed()
    }

    fn take_pending(
        &self,
        id: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Pending>, StoreError>> {
        let id = id.to_owned();
        async move {
            let rows = sqlx::query(TAKE_PENDING)
                .bind(&id)
                .fetch_all(&self.pool)
                .await
                .map_err(store_error)?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let pending = pending_from(row).map_err(store_error)?;
            Ok((!is_expired(pending.expires_at, now)).then_some(pending))
        }
        .boxed()
    }

    fn list_pending(
        &self,
        tenant: &str,
        user: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Vec<Pending>, StoreError>> {
        let (tenant, user) = (tenant.to_owned(), user.to_owned());
        async move {
            let rows = sqlx::query(LIST_PENDING)
                .bind(&tenant)
                .bind(&user)
                .bind(to_micros(now))
                .bind(to_sql_usize(MAX_PER_USER))
                .fetch_all(&self.pool)
                .await
                .map_err(store_error)?;
            rows.iter()
                .map(|row| pending_from(row).map_err(store_error))
                .collect()
        }
        .boxed()
    }

    fn insert_token(
        &self,
        token_hash: &str,
        approved: Approved,
        _now: SystemTime,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let token_hash = token_hash.to_owned();
        async move {
            let query = sqlx::query(INSERT_TOKEN)
                .bind(&token_hash)
                .bind(&approved.confirmation_id);
            let result = bind_binding(query, &approved.binding)
                .bind(to_micros(approved.expires_at))
                .bind(to_sql_usize(MAX_PER_USER))
                .execute(&self.pool)
                .await;
            bounded_insert(result)
        }
        .boxed()
    }

    fn take_token(
        &self,
        token_hash: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>> {
        let token_hash = token_hash.to_owned();
        async move {
            let rows = sqlx::query(TAKE_TOKEN)
                .bind(&token_hash)
                .fetch_all(&self.pool)
                .await
                .map_err(store_error)?;
            let Some(row) = rows.first() else {
                return Ok(None);
            };
            let approved = approved_from(row).map_err(store_error)?;
            Ok((!is_expired(approved.expires_at, now)).then_some(approved))
        }
        .boxed()
    }

    fn take_approved(
        &self,
        binding: &Binding,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>> {
        let binding = binding.clone();
        async move {
            let rows = bind_binding(sqlx::query(TAKE_APPROVED), &binding)
                .bind(to_micros(now))
                .fetch_all(&self.pool)
                .await
                .map_err(store_error)?;
            rows.first()
                .map(|row| approved_from(row).map_err(store_error))
                .transpose()
        }
        .boxed()
    }

    fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        async move {
            let now = to_micros(now);
            let mut purged = 0;
            for statement in [PURGE_PENDING, PURGE_TOKENS] {
                let done = sqlx::query(statement)
                    .bind(now)
                    .execute(&self.pool)
                    .await
                    .map_err(store_error)?;
                purged += done.rows_affected();
            }
            Ok(purged)
        }
        .boxed()
    }
}
