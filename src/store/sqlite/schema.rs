//! The SQLite schema and its version (`PRAGMA user_version`), created on open.

use sqlx::SqlitePool;

use super::store_error;
use crate::store::StoreError;

/// The schema this build reads and writes. A file with a newer version is refused; an older
/// one is migrated.
pub(super) const SCHEMA_VERSION: i64 = 5;

const _: () = assert!(
    SCHEMA_VERSION == 5,
    "write the migration and its user_version"
);

/// Version 1. Times are microseconds since the Unix epoch. `user` is reserved in PostgreSQL,
/// so owner columns are `tenant_id` and `user_id` everywhere.
pub(super) const SCHEMA_V1: [&str; 7] = [
    "CREATE TABLE pending (
        id TEXT PRIMARY KEY NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) STRICT",
    "CREATE INDEX pending_owner ON pending (tenant_id, user_id)",
    "CREATE INDEX pending_expiry ON pending (expires_at)",
    "CREATE TABLE tokens (
        token_hash TEXT PRIMARY KEY NOT NULL,
        confirmation_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        tool TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        args_hash TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    ) STRICT",
    "CREATE INDEX tokens_owner ON tokens (tenant_id, user_id)",
    "CREATE INDEX tokens_expiry ON tokens (expires_at)",
    // Version 1 had `AUTOINCREMENT` here; version 2 drops it (see `AUDIT_V2`).
    "CREATE TABLE audit (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        decision TEXT NOT NULL,
        confirmation_id TEXT,
        outcome TEXT NOT NULL,
        duration_ms INTEGER NOT NULL,
        argument_bytes INTEGER NOT NULL,
        result_bytes INTEGER NOT NULL,
        fingerprint TEXT,
        arguments TEXT,
        detail TEXT
    ) STRICT",
];

/// Version 2: the audit table without `AUTOINCREMENT`, whose `sqlite_sequence` row was one
/// more page written by every commit (a sixth of the gateway's CPU per call under load). Ids
/// are still the rowid, one more than the largest, so they ascend with time and none is
/// reused while the newest record is kept; the log is append-only (mcpgate deletes no
/// record), so paging with `before_id` stays stable. Rows keep their ids.
const AUDIT_V2: [&str; 4] = [
    "CREATE TABLE audit_v2 (
        id INTEGER PRIMARY KEY,
        time INTEGER NOT NULL,
        request_id TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        server TEXT NOT NULL,
        tool TEXT NOT NULL,
        decision TEXT NOT NULL,
        confirmation_id TEXT,
        outcome TEXT NOT NULL,
        duration_ms INTEGER NOT NULL,
        argument_bytes INTEGER NOT NULL,
        result_bytes INTEGER NOT NULL,
        fingerprint TEXT,
        arguments TEXT,
        detail TEXT
    ) STRICT",
    "INSERT INTO audit_v2 SELECT
        id, time, request_id, tenant_id, user_id, session_id, server, tool, decision,
        confirmation_id, outcome, duration_ms, argument_bytes, result_bytes, fingerprint,
        arguments, detail
    FROM audit ORDER BY id",
    "DROP TABLE audit",
    "ALTER TABLE audit_v2 RENAME TO audit",
];

/// Version 3: each user's upstream OAuth connections, the authorizations under way, and the
/// clients registered with authorization servers. Secrets are sealed (`crate::oauth::vault`):
/// `sealed` holds ciphertext and tag, `nonce` and `key_id` say how to open it; nothing in
/// these tables is a usable credential without the key.
const OAUTH_V3: [&str; 4] = [
    "CREATE TABLE oauth_connections (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        server TEXT NOT NULL,
        status TEXT NOT NULL,
        issuer TEXT,
        scopes TEXT NOT NULL,
        key_id TEXT NOT NULL,
        nonce BLOB NOT NULL,
        sealed BLOB NOT NULL,
        connected_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, user_id, server)
    ) STRICT",
    "CREATE TABLE oauth_pending (
        state_hash TEXT PRIMARY KEY NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        server TEXT NOT NULL,
        key_id TEXT NOT NULL,
        nonce BLOB NOT NULL,
        sealed BLOB NOT NULL,
        expires_at INTEGER NOT NULL
    ) STRICT",
    "CREATE INDEX oauth_pending_expiry ON oauth_pending (expires_at)",
    "CREATE TABLE oauth_clients (
        server TEXT NOT NULL,
        issuer TEXT NOT NULL,
        key_id TEXT NOT NULL,
        nonce BLOB NOT NULL,
        sealed BLOB NOT NULL,
        PRIMARY KEY (server, issuer)
    ) STRICT",
];

/// Version 4: the remote servers users add for themselves (`[user_servers]`), the headers
/// sent to each sealed like OAuth tokens; and requests sent with an `Idempotency-Key`, found
/// by a digest (`lookup`), their answers sealed under a key only the client holds.
const USER_SERVERS_V4: [&str; 3] = [
    "CREATE TABLE idempotency (
        lookup TEXT PRIMARY KEY NOT NULL,
        request_hash TEXT NOT NULL,
        key_id TEXT,
        nonce BLOB,
        sealed BLOB,
        started_at INTEGER NOT NULL,
        expires_at INTEGER
    ) STRICT",
    "CREATE INDEX idempotency_expiry ON idempotency (expires_at)",
    "CREATE TABLE user_servers (
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        name TEXT NOT NULL,
        url TEXT NOT NULL,
        key_id TEXT NOT NULL,
        nonce BLOB NOT NULL,
        sealed BLOB NOT NULL,
        read_only TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, user_id, name)
    ) STRICT",
];

/// Checks the version and creates the schema in a fresh file, or migrates an older one, in
/// one write transaction: two processes opening one file cannot both create or migrate it,
/// and a migration that fails leaves the file as it was.
///
/// The transaction is always ended here, committed or rolled back: a transaction merely
/// dropped keeps the file's write lock until its connection is used again, and the audit
/// writer (another connection) would wait on it.
pub(super) async fn prepare(pool: &SqlitePool) -> Result<(), StoreError> {
    let mut tx = pool
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(store_error)?;
    match prepare_in(&mut tx).await {
        Ok(()) => tx.commit().await.map_err(store_error),
        Err(err) => {
            let _ = tx.rollback().await;
            Err(err)
        }
    }
}

async fn prepare_in(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>) -> Result<(), StoreError> {
    let found: i64 = sqlx::query_scalar("PRAGMA user_version")
        .fetch_one(&mut **tx)
        .await
        .map_err(store_error)?;
    if found > SCHEMA_VERSION {
        return Err(StoreError::IncompatibleSchema {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    if found == SCHEMA_VERSION {
        return Ok(());
    }
    if found == 0 {
        let objects: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_schema")
            .fetch_one(&mut **tx)
            .await
            .map_err(store_error)?;
        if objects > 0 {
            return Err(StoreError::Corrupt(
                "the file holds tables but no mcpgate schema version".to_owned(),
            ));
        }
    }
    // A fresh file gets version 1 and then each migration, as an old file does.
    let first = if found == 0 { &SCHEMA_V1[..] } else { &[] };
    let audit_v2 = if found < 2 { &AUDIT_V2[..] } else { &[] };
    let oauth_v3 = if found < 3 { &OAUTH_V3[..] } else { &[] };
    // Version 5: usage (chat turns' model use, and the rollups of the audit log).
    let usage_v5 = super::usage::schema_v5();
    let user_servers_v4 = if found < 4 { &USER_SERVERS_V4[..] } else { &[] };
    for statement in first
        .iter()
        .chain(audit_v2)
        .chain(oauth_v3)
        .chain(user_servers_v4)
        .copied()
        .chain(usage_v5.iter().map(String::as_str))
    {
        sqlx::query(sqlx::AssertSqlSafe(statement))
            .execute(&mut **tx)
            .await
            .map_err(store_error)?;
    }
    // PRAGMA takes no bound parameters, so the version is spelled out; the assertion above
    // keeps it equal to SCHEMA_VERSION.
    sqlx::query("PRAGMA user_version = 5")
        .execute(&mut **tx)
        .await
        .map_err(store_error)?;
    Ok(())
}
