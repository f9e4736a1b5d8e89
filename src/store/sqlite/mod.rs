//! SQLite stores: confirmations and audit in one file (WAL), sharing one connection pool
//! (sqlx); audit appends are committed in batches on a connection of their own (rusqlite,
//! called on the appending task, see `audit_writer`).

mod audit;
mod audit_writer;
mod confirmations;
mod idempotency;
mod oauth;
mod schema;
#[cfg(test)]
mod tests;
mod usage;

use std::{os::unix::fs::PermissionsExt, path::Path, sync::Arc, time::Duration};

use self::audit_writer::AuditWriter;
use super::{AuditStore, ConfirmationStore, StoreError};
use crate::config::AuditSync;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};

/// SQLite runs one writer at a time; a few connections let reads run beside it, more would
/// only queue on the file lock.
const POOL_CONNECTIONS: u32 = 4;
/// How long a statement waits for another connection's (or process's) write lock before the
/// store reports `Unavailable` and the gate fails closed.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long an operation waits for a free pooled connection.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);
/// The file holds confirmations: only its owner may read it. SQLite gives the `-wal` and
/// `-shm` files the same mode.
const FILE_MODE: u32 = 0o600;

/// The SQLite stores over one pool. Cheap to share: the pool is reference-counted.
#[derive(Clone)]
pub struct SqliteStores {
    pool: SqlitePool,
    writer: AuditWriter,
    path: std::path::PathBuf,
}

impl std::fmt::Debug for SqliteStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStores")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl SqliteStores {
    pub fn confirmations(&self) -> Arc<dyn ConfirmationStore> {
        Arc::new(confirmations::SqliteConfirmations::new(self.pool.clone()))
    }

    pub fn audit(&self) -> Arc<dyn AuditStore> {
        Arc::new(audit::SqliteAudit::new(
            self.pool.clone(),
            self.writer.clone(),
        ))
    }

    /// Requests sent with an `Idempotency-Key`, in the same file.
    pub fn idempotency(&self) -> Arc<dyn crate::store::IdempotencyStore> {
        Arc::new(idempotency::SqliteIdempotency::new(self.pool.clone()))
    }

    /// Usage: rollups of the audit log and chat turns' model use, in the same file.
    pub fn usage(&self) -> Arc<dyn crate::store::UsageStore> {
        Arc::new(usage::SqliteUsage::new(
            self.pool.clone(),
            self.path.clone(),
        ))
    }

    /// Users' upstream OAuth connections, in the same file.
    pub fn oauth(&self) -> Arc<dyn crate::oauth::OAuthStore> {
        Arc::new(oauth::SqliteOAuth::new(self.pool.clone()))
    }

    /// Stops the audit writer once it has committed and synced what was queued, then closes
    /// every connection, waiting for those in use; the last one checkpoints the WAL.
    /// Acknowledged records are committed without it: this is for a tidy shutdown.
    pub async fn close(&self) {
        self.writer.close(&self.pool).await;
        self.pool.close().await;
    }
}

/// Opens (creating if needed, mode 0600) the database at `path` and brings its schema to the
/// current version.
///
/// Pooled connections run in WAL mode with `synchronous = FULL`: a commit returns only after
/// the WAL is synced, so a spent token stays spent across a power cut or OS crash. Audit
/// records are committed before an append returns (an acknowledged call has its record, and
/// it survives a crash of the gateway), in batches, and synced to disk within 100 ms (see
/// `audit_writer`): a sync per call would be most of the gateway's own latency.
pub async fn open_sqlite(path: &Path) -> Result<SqliteStores, StoreError> {
    open_sqlite_with(path, AuditSync::Batched).await
}

/// [`open_sqlite`], with audit records synced as `audit_sync` says: with
/// [`AuditSync::EveryCommit`] each group commit of the audit writer is synced before its
/// appends return.
pub async fn open_sqlite_with(
    path: &Path,
    audit_sync: AuditSync,
) -> Result<SqliteStores, StoreError> {
    create_private_file(path).await?;
    let options = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(BUSY_TIMEOUT);
    let pool = SqlitePoolOptions::new()
        .max_connections(POOL_CONNECTIONS)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(options.clone())
        .await
        .map_err(store_error)?;
    if let Err(err) = schema::prepare(&pool).await {
        pool.close().await;
        return Err(err);
    }
    let writer = match AuditWriter::start(path, audit_sync, pool.clone()).await {
        Ok(writer) => writer,
        Err(err) => {
            pool.close().await;
            return Err(err);
        }
    };
    Ok(SqliteStores {
        pool,
        writer,
        path: path.to_owned(),
    })
}

/// Creates the file with mode 0600 before SQLite sees it (SQLite would create it 0644), and
/// narrows an existing file that others could read.
async fn create_private_file(path: &Path) -> Result<(), StoreError> {
    let unavailable =
        |err: std::io::Error| StoreError::Unavailable(format!("{}: {err}", path.display()));
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        // An existing database is opened as it is, never emptied.
        .truncate(false)
        .mode(FILE_MODE)
        .open(path)
        .await
        .map_err(unavailable)?;
    let metadata = file.metadata().await.map_err(unavailable)?;
    if !metadata.is_file() {
        return Err(StoreError::Unavailable(format!(
            "{}: not a regular file",
            path.display()
        )));
    }
    if metadata.permissions().mode() & 0o777 != FILE_MODE {
        tracing::warn!(path = %path.display(), "narrowing the state file's permissions to 0600");
        file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
            .await
            .map_err(unavailable)?;
    }
    Ok(())
}

/// SQLite primary result codes (`code & 0xff` of the extended code).
const SQLITE_CORRUPT: i32 = 11;
const SQLITE_NOTADB: i32 = 26;

/// Maps a driver error to a store error. SQLite's messages name tables and columns, never
/// bound values.
fn store_error(err: sqlx::Error) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => StoreError::Duplicate,
        sqlx::Error::Database(db) => {
            let primary = db
                .code()
                .and_then(|code| code.parse::<i32>().ok())
                .map(|code| code & 0xff);
            match primary {
                Some(SQLITE_CORRUPT | SQLITE_NOTADB) => {
                    StoreError::Corrupt(db.message().to_owned())
                }
                _ => StoreError::Unavailable(db.message().to_owned()),
            }
        }
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::Decode(_) => StoreError::Corrupt(err.to_string()),
        _ => StoreError::Unavailable(err.to_string()),
    }
}

/// Counts and sizes are `u64` in records and `INTEGER` (i64) in SQLite; nothing real comes
/// near the top bit, so saturating is exact in practice.
fn to_sql_u64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn from_sql_u64(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt("negative count in a row".to_owned()))
}

/// `usize` bounds as SQL integers.
fn to_sql_usize(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
