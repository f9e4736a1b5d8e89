//! What only the SQLite file can show: durability across reopen, file permissions, pragmas,
//! and refusing files that are not ours.

use std::{os::unix::fs::PermissionsExt, path::Path};

use tempfile::TempDir;

use super::{SqliteStores, open_sqlite, schema::SCHEMA_VERSION};
use crate::store::{AuditQuery, AuditRecord, Binding, Pending, StoreError, tests::at};

fn record() -> AuditRecord {
    AuditRecord {
        time: at(1),
        request_id: "req-1".to_owned(),
        tenant: "acme".to_owned(),
        user: "alice".to_owned(),
        session: "s1".to_owned(),
        server: "files".to_owned(),
        tool: "files.write".to_owned(),
        decision: "allowed".to_owned(),
        confirmation_id: Some("c1".to_owned()),
        outcome: "ok".to_owned(),
        duration_ms: 3,
        argument_bytes: 10,
        result_bytes: 20,
        fingerprint: None,
        arguments: None,
        detail: None,
    }
}

fn pending() -> Pending {
    Pending {
        id: "c1".to_owned(),
        binding: Binding {
            tenant: "acme".to_owned(),
            user: "alice".to_owned(),
            session: "s1".to_owned(),
            tool: "files.write".to_owned(),
            fingerprint: "f".to_owned(),
            args_hash: "a".to_owned(),
        },
        created_at: at(0),
        expires_at: at(600),
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path)
        .expect("file exists")
        .permissions()
        .mode()
        & 0o777
}

async fn pragma<T>(stores: &SqliteStores, statement: &'static str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite> + Send + Unpin,
{
    sqlx::query_scalar(statement)
        .fetch_one(&stores.pool)
        .await
        .expect("statement runs")
}

#[tokio::test]
async fn acknowledged_writes_survive_dropping_the_store() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let stores = open_sqlite(&path).await.expect("store call succeeds");
    stores
        .audit()
        .append(record())
        .await
        .expect("store call succeeds");
    stores
        .confirmations()
        .insert_pending(pending())
        .await
        .expect("store call succeeds");
    // No close: whatever append acknowledged must already be in the file.
    drop(stores);

    let reopened = open_sqlite(&path).await.expect("store call succeeds");
    let found = reopened
        .audit()
        .query(AuditQuery::default())
        .await
        .expect("store call succeeds");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].1, record());
    let taken = reopened
        .confirmations()
        .take_pending("c1", at(1))
        .await
        .expect("store call succeeds");
    assert_eq!(taken, Some(pending()));
    reopened.close().await;
}

#[tokio::test]
async fn files_are_private_and_journaled_with_full_sync() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let stores = open_sqlite(&path).await.expect("store call succeeds");
    stores
        .audit()
        .append(record())
        .await
        .expect("store call succeeds");
    assert_eq!(mode(&path), 0o600);
    let wal = dir.path().join("state.db-wal");
    assert!(wal.exists(), "WAL file present while open");
    assert_eq!(mode(&wal), 0o600);
    assert_eq!(
        pragma::<String>(&stores, "PRAGMA journal_mode").await,
        "wal"
    );
    assert_eq!(
        pragma::<i64>(&stores, "PRAGMA synchronous").await,
        2,
        "FULL"
    );
    assert_eq!(
        pragma::<i64>(&stores, "PRAGMA user_version").await,
        SCHEMA_VERSION
    );
    stores.close().await;
}

#[tokio::test]
async fn an_existing_readable_file_is_narrowed_to_owner_only() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    std::fs::write(&path, b"").expect("prepare test file");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644))
        .expect("prepare test file");
    let stores = open_sqlite(&path).await.expect("store call succeeds");
    assert_eq!(mode(&path), 0o600);
    stores.close().await;
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let stores = open_sqlite(&path).await.expect("store call succeeds");
    sqlx::query("PRAGMA user_version = 99")
        .execute(&stores.pool)
        .await
        .expect("statement runs");
    stores.close().await;
    let err = open_sqlite(&path).await.expect_err("the file is refused");
    assert_eq!(
        err,
        StoreError::IncompatibleSchema {
            found: 99,
            supported: SCHEMA_VERSION
        }
    );
    assert_eq!(err.code(), "store_schema");
}

#[tokio::test]
async fn files_that_are_not_ours_are_refused() {
    let dir = TempDir::new().expect("temp dir");
    let garbage = dir.path().join("garbage.db");
    std::fs::write(&garbage, vec![0x5a; 8192]).expect("store call succeeds");
    let err = open_sqlite(&garbage)
        .await
        .expect_err("the file is refused");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert_eq!(err.code(), "store_corrupt");

    let foreign = dir.path().join("foreign.db");
    let stores = open_sqlite(&foreign).await.expect("store call succeeds");
    sqlx::query("PRAGMA user_version = 0")
        .execute(&stores.pool)
        .await
        .expect("statement runs");
    stores.close().await;
    let err = open_sqlite(&foreign)
        .await
        .expect_err("the file is refused");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");

    let missing_dir = dir.path().join("no-such-dir").join("state.db");
    let err = open_sqlite(&missing_dir)
        .await
        .expect_err("the file is refused");
    assert!(matches!(err, StoreError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn a_version_1_file_is_migrated_keeping_its_records_and_ids() {
    use sqlx::{ConnectOptions as _, Connection as _, sqlite::SqliteConnectOptions};
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    // A file as version 1 left it: AUTOINCREMENT ids, with a gap.
    let mut old = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .connect()
        .await
        .expect("create a version 1 file");
    for statement in super::schema::SCHEMA_V1 {
        sqlx::query(statement)
            .execute(&mut old)
            .await
            .expect("statement runs");
    }
    sqlx::query("PRAGMA user_version = 1")
        .execute(&mut old)
        .await
        .expect("statement runs");
    for (id, request) in [(5_i64, "old-5"), (9, "old-9")] {
        sqlx::query(
            "INSERT INTO audit (id, time, request_id, tenant_id, user_id, session_id, server,
                tool, decision, outcome, duration_ms, argument_bytes, result_bytes)
             VALUES (?, 1, ?, 'acme', 'alice', 's1', 'files', 'files.read', 'allowed', 'ok',
                1, 2, 3)",
        )
        .bind(id)
        .bind(request)
        .execute(&mut old)
        .await
        .expect("insert");
    }
    old.close().await.expect("close");

    let stores = open_sqlite(&path).await.expect("the file is migrated");
    assert_eq!(
        pragma::<i64>(&stores, "PRAGMA user_version").await,
        SCHEMA_VERSION
    );
    let sql: String = pragma(
        &stores,
        "SELECT sql FROM sqlite_schema WHERE name = 'audit'",
    )
    .await;
    assert!(!sql.contains("AUTOINCREMENT"), "{sql}");
    let audit = stores.audit();
    audit.append(record()).await.expect("append");
    let found = audit.query(AuditQuery::default()).await.expect("query");
    let ids: Vec<(i64, &str)> = found
        .iter()
        .map(|(id, r)| (*id, r.request_id.as_str()))
        .collect();
    assert_eq!(ids, [(10, "req-1"), (9, "old-9"), (5, "old-5")]);
    assert_eq!(found[1].1.tool, "files.read", "columns kept their values");
    stores.close().await;

    // Opened again, nothing is migrated twice.
    let again = open_sqlite(&path).await.expect("reopen");
    assert_eq!(pragma::<i64>(&again, "SELECT COUNT(*) FROM audit").await, 3);
    again.close().await;
}

#[tokio::test]
async fn a_fresh_file_has_no_autoincrement_audit() {
    let dir = TempDir::new().expect("temp dir");
    let stores = open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open");
    let sql: String = pragma(
        &stores,
        "SELECT sql FROM sqlite_schema WHERE name = 'audit'",
    )
    .await;
    assert!(sql.contains("id INTEGER PRIMARY KEY,"), "{sql}");
    stores.close().await;
}

/// A version 3 file (users' OAuth tables, no users' servers) gains the version 4 table and
/// keeps what it held: the OAuth tables are not created twice.
#[tokio::test]
async fn a_version_3_file_gains_users_servers_and_keeps_its_connections() {
    use crate::oauth::{ConnectionKey, ConnectionRow, ConnectionStatus, Sealed};
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let key = ConnectionKey {
        tenant: "acme".to_owned(),
        user: "alice".to_owned(),
        server: "linear".to_owned(),
    };
    let row = ConnectionRow {
        status: ConnectionStatus::Connected,
        issuer: None,
        scopes: String::new(),
        sealed: Sealed {
            key_id: "k".to_owned(),
            nonce: vec![1; 12],
            ciphertext: vec![2; 20],
        },
        connected_at: 1,
        updated_at: 1,
    };
    let stores = open_sqlite(&path).await.expect("open");
    stores
        .oauth()
        .put_connection(&key, &row)
        .await
        .expect("put");
    for statement in [
        "DROP TABLE user_servers",
        "DROP TABLE idempotency",
        "DROP TABLE model_usage",
        "DROP TABLE usage_state",
        "DROP TABLE usage_calls",
        "DROP TABLE usage_models",
        "PRAGMA user_version = 3",
    ] {
        sqlx::query(statement)
            .execute(&stores.pool)
            .await
            .expect("made version 3");
    }
    stores.close().await;
    let stores = open_sqlite(&path).await.expect("the file is migrated");
    assert_eq!(
        pragma::<i64>(&stores, "PRAGMA user_version").await,
        SCHEMA_VERSION
    );
    assert_eq!(
        stores.oauth().connection(&key).await.expect("read"),
        Some(row)
    );
    assert_eq!(
        stores
            .oauth()
            .user_servers("acme", "alice")
            .await
            .expect("the new table answers"),
        []
    );
    stores.close().await;
}
