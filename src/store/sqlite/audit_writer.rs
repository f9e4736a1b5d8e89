//! Group commit for the SQLite audit log. Appends queue for one writer task, which commits
//! everything queued in a few multi-row statements on a connection of its own and then
//! answers each append: under load one commit carries many records, and an append returns
//! only once its record is committed.
//!
//! Commits on the writer's connection are not synced to disk one by one (`synchronous =
//! NORMAL`; in WAL mode a commit is then a write to the WAL, which survives a crash of the
//! gateway but not of the machine). A checkpoint on another connection syncs the WAL at most
//! [`SYNC_INTERVAL`] after a commit, so what a power cut can take is bounded by that interval;
//! a sync per call (about 0.2 ms on a virtual disk, 10 ms at its tail) would otherwise be most
//! of the gateway's own latency. With [`AuditSync::EveryCommit`] the writer's connection
//! syncs each commit instead (`synchronous = FULL`), before its appends are answered; under
//! load one sync still carries a whole batch.

use std::{sync::Arc, time::Duration};

use futures::future::BoxFuture;
use sqlx::{
    AssertSqlSafe, ConnectOptions as _, Connection as _, SqliteConnection, SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteSynchronous},
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{store_error, to_sql_u64};
use crate::config::AuditSync;
use crate::store::{AuditRecord, StoreError, clock::to_micros};

/// Most records taken from the queue at once: bounds one batch's memory (records are cut to a
/// few KiB each) and its time.
const MAX_BATCH: usize = 512;
/// Rows per INSERT statement: a batch is written in chunks of these sizes, largest first, each
/// a statement prepared once; any batch takes a handful of statements. 64 rows bind 1024
/// parameters, far below SQLite's limit (32766).
const CHUNK_ROWS: [usize; 7] = [64, 32, 16, 8, 4, 2, 1];
/// Columns of an audit row, in the order [`bind_record`] binds them.
const COLUMNS: usize = 16;
/// Appends waiting for the writer; past this, appends wait to be queued (back-pressure
/// rather than an unbounded queue).
const QUEUE_LEN: usize = 4096;
/// Longest time between a commit and the sync that makes it survive a power cut.
pub(super) const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The writer's connection checkpoints on its own only past this many WAL pages (about
/// 40 MB): a backstop for when the periodic checkpoints cannot run, never the normal path.
const AUTOCHECKPOINT_PAGES: &str = "10000";
/// The writer's page cache, in KiB (SQLite's `cache_size` takes negative KiB): it only
/// appends to the end of one table, so the default 2 MiB would just hold old pages.
const CACHE_KIB: &str = "-256";

/// The head of every INSERT; rows follow as `(?, ..., ?)` groups, in append order (ids
/// follow it).
const INSERT_HEAD: &str = "INSERT INTO audit
        (time, request_id, tenant_id, user_id, session_id, server, tool, decision,
         confirmation_id, outcome, duration_ms, argument_bytes, result_bytes, fingerprint,
         arguments, detail)
    VALUES ";

/// A PASSIVE checkpoint syncs the WAL, then copies what it can into the database without
/// waiting for readers or writers.
const CHECKPOINT: &str = "PRAGMA wal_checkpoint(PASSIVE)";

struct Pending {
    record: AuditRecord,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// The appending side. The writer task stops when `stop` is cancelled or every clone of this
/// is dropped, after committing what was queued and syncing it.
#[derive(Clone)]
pub(super) struct AuditWriter {
    queue: mpsc::Sender<Pending>,
}

impl AuditWriter {
    /// Opens the writer's connection; returns the appending side and the writer task for the
    /// caller to spawn. `pool` runs the checkpoints.
    pub(super) async fn start(
        options: &SqliteConnectOptions,
        sync: AuditSync,
        pool: SqlitePool,
        stop: CancellationToken,
    ) -> Result<(AuditWriter, impl Future<Output = ()> + use<>), StoreError> {
        let connection = writer_options(options, sync)
            .connect()
            .await
            .map_err(store_error)?;
        let (queue, receiver) = mpsc::channel(QUEUE_LEN);
        Ok((
            AuditWriter { queue },
            write_batches(connection, pool, receiver, stop),
        ))
    }

    /// Queues `record` (already bounded) and waits until it is committed.
    pub(super) async fn append(&self, record: AuditRecord) -> Result<(), StoreError> {
        let stopped = || StoreError::Unavailable("the audit writer has stopped".to_owned());
        let (done, committed) = oneshot::channel();
        self.queue
            .send(Pending { record, done })
            .await
            .map_err(|_| stopped())?;
        committed.await.map_err(|_| stopped())?
    }
}

/// The writer connection's options: the pool's, with its own sync level and page cache.
fn writer_options(options: &SqliteConnectOptions, sync: AuditSync) -> SqliteConnectOptions {
    options
        .clone()
        .synchronous(match sync {
            AuditSync::Batched => SqliteSynchronous::Normal,
            AuditSync::EveryCommit => SqliteSynchronous::Full,
        })
        .pragma("wal_autocheckpoint", AUTOCHECKPOINT_PAGES)
        .pragma("cache_size", CACHE_KIB)
}

/// The writer task: commits queued records in batches, and keeps at most one checkpoint
/// running beside it whenever something was committed since the last one.
async fn write_batches(
    mut connection: SqliteConnection,
    pool: SqlitePool,
    mut queue: mpsc::Receiver<Pending>,
    stop: CancellationToken,
) {
    let statements = Statements::new();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut unsynced = false;
    let mut checkpoint: Option<BoxFuture<'static, ()>> = None;
    let mut every = tokio::time::interval(SYNC_INTERVAL);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = false;
    loop {
        tokio::select! {
            // Closing refuses new appends; those queued are still committed below.
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                queue.close();
            }
            received = queue.recv_many(&mut batch, MAX_BATCH) => {
                if received == 0 {
                    break;
                }
                unsynced |= commit(&mut connection, &statements, &mut batch).await;
            }
            _ = every.tick(), if unsynced && checkpoint.is_none() => {
                unsynced = false;
                checkpoint = Some(Box::pin(run_checkpoint(pool.clone())));
            }
            () = async { if let Some(running) = checkpoint.as_mut() { running.await } },
                if checkpoint.is_some() => {
                checkpoint = None;
            }
        }
    }
    if let Some(running) = checkpoint {
        running.await;
    }
    if unsynced {
        run_checkpoint(pool).await;
    }
    if let Err(err) = connection.close().await {
        tracing::warn!(error = %err, "closing the audit writer's connection failed");
    }
}

/// The INSERT statement of each chunk size in [`CHUNK_ROWS`] (shared, so handing one to a
/// query copies no text).
struct Statements(Vec<(usize, Arc<str>)>);

impl Statements {
    fn new() -> Statements {
        let row = format!("({})", vec!["?"; COLUMNS].join(", "));
        Statements(
            CHUNK_ROWS
                .iter()
                .map(|&rows| {
                    let values = vec![row.as_str(); rows].join(", ");
                    (rows, Arc::from(format!("{INSERT_HEAD}{values}")))
                })
                .collect(),
        )
    }

    /// The largest chunk that `remaining` records fill, with its statement.
    fn for_remaining(&self, remaining: usize) -> Option<(usize, Arc<str>)> {
        self.0
            .iter()
            .find(|(rows, _)| *rows <= remaining)
            .map(|(rows, sql)| (*rows, sql.clone()))
    }
}

/// Commits `batch` in chunks (each one statement, so all or none of its records), answers
/// every append and empties `batch`. Returns whether anything was committed.
async fn commit(
    connection: &mut SqliteConnection,
    statements: &Statements,
    batch: &mut Vec<Pending>,
) -> bool {
    let mut committed = false;
    while let Some((rows, sql)) = statements.for_remaining(batch.len()) {
        let result = {
            // Built here from our own constant text; every value is a bound parameter.
            let query = batch[..rows]
                .iter()
                .fold(sqlx::query(AssertSqlSafe(sql)), |query, p| {
                    bind_record(query, &p.record)
                });
            match query.execute(&mut *connection).await {
                Ok(done) if done.rows_affected() == rows as u64 => Ok(()),
                Ok(done) => Err(StoreError::Unavailable(format!(
                    "{} of {rows} audit records were written",
                    done.rows_affected()
                ))),
                Err(err) => Err(store_error(err)),
            }
        };
        committed |= result.is_ok();
        for pending in batch.drain(..rows) {
            let _ = pending.done.send(result.clone());
        }
    }
    committed
}

type Insert<'q> = sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments>;

/// Binds the [`COLUMNS`] columns of one record, in [`INSERT_HEAD`]'s order.
fn bind_record<'q>(query: Insert<'q>, r: &'q AuditRecord) -> Insert<'q> {
    query
        .bind(to_micros(r.time))
        .bind(r.request_id.as_str())
        .bind(r.tenant.as_str())
        .bind(r.user.as_str())
        .bind(r.session.as_str())
        .bind(r.server.as_str())
        .bind(r.tool.as_str())
        .bind(r.decision.as_str())
        .bind(r.confirmation_id.as_deref())
        .bind(r.outcome.as_str())
        .bind(to_sql_u64(r.duration_ms))
        .bind(to_sql_u64(r.argument_bytes))
        .bind(to_sql_u64(r.result_bytes))
        .bind(r.fingerprint.as_deref())
        .bind(r.arguments.as_deref())
        .bind(r.detail.as_deref())
}

async fn run_checkpoint(pool: SqlitePool) {
    if let Err(err) = sqlx::query(CHECKPOINT).execute(&pool).await {
        tracing::warn!(error = %store_error(err), "audit log checkpoint failed");
    }
}

#[cfg(test)]
#[path = "audit_writer_tests.rs"]
mod tests;
