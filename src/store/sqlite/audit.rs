//! The audit log in SQLite: one committed row per record, written in batches by the
//! [`AuditWriter`]; queries are one fixed statement in which an unset filter is a NULL
//! parameter.

use std::time::SystemTime;

use futures::future::{BoxFuture, FutureExt};
use sqlx::{Row, SqlitePool, sqlite::SqliteRow};

use super::{audit_writer::AuditWriter, from_sql_u64, store_error, to_sql_usize};
use crate::store::{
    AuditQuery, AuditRecord, AuditStore, StoreError,
    clock::{from_micros, to_micros},
};

pub(super) struct SqliteAudit {
    pool: SqlitePool,
    writer: AuditWriter,
}

impl SqliteAudit {
    pub(super) fn new(pool: SqlitePool, writer: AuditWriter) -> SqliteAudit {
        SqliteAudit { pool, writer }
    }
}

// The same conditions as `AuditQuery::matches`. Newest first walks the rowid backwards, so a
// recent page is cheap whatever the filters.
const QUERY: &str = "SELECT
        id, time, request_id, tenant_id, user_id, session_id, server, tool, decision,
        confirmation_id, outcome, duration_ms, argument_bytes, result_bytes, fingerprint,
        arguments, detail
    FROM audit
    WHERE (?1 IS NULL OR time >= ?1)
      AND (?2 IS NULL OR time < ?2)
      AND (?3 IS NULL OR tenant_id = ?3)
      AND (?4 IS NULL OR user_id = ?4)
      AND (?5 IS NULL OR tool = ?5)
      AND (?6 IS NULL OR outcome = ?6)
      AND (?7 IS NULL OR id < ?7)
    ORDER BY id DESC
    LIMIT ?8";

fn record_from(row: &SqliteRow) -> Result<(i64, AuditRecord), StoreError> {
    let text = |column: &str| row.try_get::<String, _>(column).map_err(store_error);
    let optional = |column: &str| {
        row.try_get::<Option<String>, _>(column)
            .map_err(store_error)
    };
    let count = |column: &str| {
        row.try_get::<i64, _>(column)
            .map_err(store_error)
            .and_then(from_sql_u64)
    };
    let id: i64 = row.try_get("id").map_err(store_error)?;
    let record = AuditRecord {
        time: from_micros(row.try_get("time").map_err(store_error)?),
        request_id: text("request_id")?,
        tenant: text("tenant_id")?,
        user: text("user_id")?,
        session: text("session_id")?,
        server: text("server")?,
        tool: text("tool")?,
        decision: text("decision")?,
        confirmation_id: optional("confirmation_id")?,
        outcome: text("outcome")?,
        duration_ms: count("duration_ms")?,
        argument_bytes: count("argument_bytes")?,
        result_bytes: count("result_bytes")?,
        fingerprint: optional("fingerprint")?,
        arguments: optional("arguments")?,
        detail: optional("detail")?,
    };
    Ok((id, record))
}

impl AuditStore for SqliteAudit {
    fn append(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        self.writer.append(record.bounded()).boxed()
    }

    fn query(
        &self,
        query: AuditQuery,
    ) -> BoxFuture<'_, Result<Vec<(i64, AuditRecord)>, StoreError>> {
        async move {
            let rows = sqlx::query(QUERY)
                .bind(query.since.map(to_micros))
                .bind(query.until.map(to_micros))
                .bind(&query.tenant)
                .bind(&query.user)
                .bind(&query.tool)
                .bind(&query.outcome)
                .bind(query.before_id)
                .bind(to_sql_usize(query.effective_limit()))
                .fetch_all(&self.pool)
                .await
                .map_err(store_error)?;
            rows.iter().map(record_from).collect()
        }
        .boxed()
    }

    fn purge_before(&self, before: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        async move {
            let deleted = sqlx::query("DELETE FROM audit WHERE time < ?1")
                .bind(to_micros(before))
                .execute(&self.pool)
                .await
                .map_err(store_error)?;
            Ok(deleted.rows_affected())
        }
        .boxed()
    }
}
