//! The audit writer: concurrent appends committed in batches, in order and intact; the
//! periodic checkpoint that brings them to the database file; a stop that loses nothing.

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use tempfile::TempDir;

use super::super::{open_sqlite, open_sqlite_with};
use crate::config::AuditSync;
use crate::store::{AuditQuery, AuditRecord, AuditStore, StoreError, tests::at};

/// Bound on waits for the background checkpoint (it runs every 100 ms).
const WAIT: Duration = Duration::from_secs(10);

fn record(request_id: &str) -> AuditRecord {
    AuditRecord {
        time: at(7),
        request_id: request_id.to_owned(),
        tenant: "acme \"quoted\" \\ back".to_owned(),
        user: "zoë 😀".to_owned(),
        session: "s1".to_owned(),
        server: "files".to_owned(),
        tool: "files.read".to_owned(),
        decision: "allowed".to_owned(),
        confirmation_id: None,
        outcome: "ok".to_owned(),
        duration_ms: u64::MAX,
        argument_bytes: 0,
        result_bytes: 1 << 40,
        fingerprint: Some("f".repeat(64)),
        arguments: Some("{\"path\":\"/tmp/a\\nb\"}".to_owned()),
        detail: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_are_all_committed_intact() {
    let dir = TempDir::new().expect("temp dir");
    let stores = open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open");
    let audit: Arc<dyn AuditStore> = stores.audit();
    let mut appends = tokio::task::JoinSet::new();
    for i in 0..300 {
        let audit = audit.clone();
        appends.spawn(async move { audit.append(record(&format!("req-{i}"))).await });
    }
    while let Some(done) = appends.join_next().await {
        done.expect("task").expect("append acknowledged");
    }
    let found = audit
        .query(AuditQuery {
            limit: 1000,
            ..AuditQuery::default()
        })
        .await
        .expect("query");
    assert_eq!(found.len(), 300);
    let ids: BTreeSet<i64> = found.iter().map(|(id, _)| *id).collect();
    assert_eq!(ids.len(), 300, "ids are distinct");
    let requests: BTreeSet<&str> = found.iter().map(|(_, r)| r.request_id.as_str()).collect();
    assert_eq!(requests.len(), 300, "every record once");
    // Every field survives the batch encoding; u64::MAX saturates like a single insert.
    let (_, stored) = &found[0];
    let mut expected = record(&stored.request_id);
    expected.duration_ms = i64::MAX as u64;
    assert_eq!(stored, &expected);
    stores.close().await;
}

#[tokio::test]
async fn sequential_appends_keep_their_order() {
    let dir = TempDir::new().expect("temp dir");
    let stores = open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open");
    let audit = stores.audit();
    for i in 0..5 {
        audit
            .append(record(&format!("req-{i}")))
            .await
            .expect("append");
    }
    let found = audit.query(AuditQuery::default()).await.expect("query");
    let order: Vec<&str> = found
        .iter()
        .rev()
        .map(|(_, r)| r.request_id.as_str())
        .collect();
    assert_eq!(order, ["req-0", "req-1", "req-2", "req-3", "req-4"]);
    stores.close().await;
}

#[tokio::test]
async fn committed_records_reach_the_database_file_by_checkpoint() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let stores = open_sqlite(&path).await.expect("open");
    let marker = "req-checkpoint-probe-4f1c";
    stores.audit().append(record(marker)).await.expect("append");
    // The commit went to the WAL; the periodic checkpoint syncs it and copies it into the
    // main file, where its bytes can be found.
    let reached = tokio::time::timeout(WAIT, async {
        loop {
            let bytes = std::fs::read(&path).expect("read the database file");
            if bytes.windows(marker.len()).any(|w| w == marker.as_bytes()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        reached.is_ok(),
        "the record was not checkpointed within {WAIT:?}"
    );
    stores.close().await;
}

#[tokio::test]
async fn after_close_appends_are_refused_and_nothing_acknowledged_is_lost() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let stores = open_sqlite(&path).await.expect("open");
    let audit = stores.audit();
    audit.append(record("before")).await.expect("append");
    stores.close().await;
    let refused = audit.append(record("after")).await;
    assert!(
        matches!(refused, Err(StoreError::Unavailable(_))),
        "{refused:?}"
    );
    drop(audit);
    let reopened = open_sqlite(&path).await.expect("reopen");
    let found = reopened
        .audit()
        .query(AuditQuery::default())
        .await
        .expect("query");
    let ids: Vec<&str> = found.iter().map(|(_, r)| r.request_id.as_str()).collect();
    assert_eq!(ids, ["before"]);
    reopened.close().await;
}

/// SQLite's `PRAGMA synchronous` values.
const NORMAL: i64 = 1;
const FULL: i64 = 2;

#[tokio::test]
async fn the_writer_connection_syncs_as_configured() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    // Create the file and schema as the store does; the writer's options are then checked on
    // a connection opened as the writer opens its own.
    open_sqlite(&path).await.expect("open").close().await;
    for (sync, want) in [(AuditSync::Batched, NORMAL), (AuditSync::EveryCommit, FULL)] {
        let connection = super::open_writer(&path, sync).expect("open as the writer");
        let level: i64 = connection
            .query_row("PRAGMA synchronous", [], |row| row.get(0))
            .expect("read the sync level");
        assert_eq!(level, want, "{sync:?}");
        let mode: String = connection
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .expect("read the journal mode");
        assert_eq!(mode, "wal");
    }
}

#[tokio::test]
async fn every_commit_records_are_acknowledged_and_kept() {
    let dir = TempDir::new().expect("temp dir");
    let path = dir.path().join("state.db");
    let stores = open_sqlite_with(&path, AuditSync::EveryCommit)
        .await
        .expect("open");
    let audit = stores.audit();
    let mut appends = tokio::task::JoinSet::new();
    for i in 0..20 {
        let audit = audit.clone();
        appends.spawn(async move { audit.append(record(&format!("req-{i}"))).await });
    }
    while let Some(done) = appends.join_next().await {
        done.expect("task").expect("append acknowledged");
    }
    stores.close().await;
    drop(audit);
    let reopened = open_sqlite(&path).await.expect("reopen");
    let found = reopened
        .audit()
        .query(AuditQuery::default())
        .await
        .expect("query");
    assert_eq!(found.len(), 20);
    reopened.close().await;
}

#[test]
fn any_batch_is_written_in_a_few_whole_chunks() {
    let statements = super::Statements::new();
    for size in 0..=super::MAX_BATCH {
        let (mut left, mut chunks) = (size, 0);
        while let Some((rows, sql)) = statements.for_remaining(left) {
            assert_eq!(sql.matches('?').count(), rows * super::COLUMNS);
            left -= rows;
            chunks += 1;
        }
        assert_eq!(left, 0);
        // Full chunks of 64, then at most one of each smaller size.
        assert!(
            chunks <= size / 64 + 6,
            "{size} records took {chunks} statements"
        );
    }
}

#[tokio::test]
async fn an_append_dropped_while_leading_is_committed_and_the_queue_moves_on() {
    use futures::FutureExt as _;
    let dir = TempDir::new().expect("temp dir");
    let stores = open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open");
    let audit = stores.audit();
    // As under load: a new leader yields before committing.
    stores
        .writer
        .shared
        .crowded
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let dropped = audit.append(record("dropped")).now_or_never();
    assert!(
        dropped.is_none(),
        "the leader yielded, and its caller went away"
    );
    tokio::time::timeout(WAIT, audit.append(record("after")))
        .await
        .expect("the next append is not left without a leader")
        .expect("append");
    let found = audit.query(AuditQuery::default()).await.expect("query");
    let ids: BTreeSet<&str> = found.iter().map(|(_, r)| r.request_id.as_str()).collect();
    assert_eq!(ids, BTreeSet::from(["dropped", "after"]));
    stores.close().await;
}

#[tokio::test]
async fn a_batch_that_fails_is_rolled_back_whole_and_the_writer_goes_on() {
    let dir = TempDir::new().expect("temp dir");
    let stores = open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open");
    // The third record of the batch fails, after the first chunk (two rows) went in.
    sqlx::query(
        "CREATE TRIGGER reject_bad BEFORE INSERT ON audit WHEN NEW.request_id = 'bad'
         BEGIN SELECT RAISE(ABORT, 'rejected'); END",
    )
    .execute(&stores.pool)
    .await
    .expect("trigger");
    let audit = stores.audit();
    // As under load, the first append yields before it commits, so all three are one batch
    // of two chunks in one transaction.
    stores
        .writer
        .shared
        .crowded
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let (first, second, bad) = tokio::join!(
        audit.append(record("ok-1")),
        audit.append(record("ok-2")),
        audit.append(record("bad")),
    );
    for result in [first, second, bad] {
        assert!(
            matches!(result, Err(StoreError::Unavailable(ref m)) if m.contains("rejected")),
            "{result:?}"
        );
    }
    audit
        .append(record("after"))
        .await
        .expect("the writer is not left inside a transaction");
    let found = audit.query(AuditQuery::default()).await.expect("query");
    let ids: Vec<&str> = found.iter().map(|(_, r)| r.request_id.as_str()).collect();
    assert_eq!(ids, ["after"], "nothing of the failed batch stays");
    stores.close().await;
}
