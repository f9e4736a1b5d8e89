//! Group commit for the SQLite audit log. Appends queue for one writer task, which commits
//! everything queued as one statement on a connection of its own and then answers each
//! append: under load one commit carries many records, and an append returns only once its
//! record is committed.
//!
//! Commits on the writer's connection are not synced to disk one by one (`synchronous =
//! NORMAL`; in WAL mode a commit is then a write to the WAL, which survives a crash of the
//! gateway but not of the machine). A checkpoint on another connection syncs the WAL at most
//! [`SYNC_INTERVAL`] after a commit, so what a power cut can take is bounded by that interval;
//! a sync per call (about 0.2 ms on a virtual disk, 10 ms at its tail) would otherwise be most
//! of the gateway's own latency.

use std::time::Duration;

use futures::future::BoxFuture;
use sqlx::{
    ConnectOptions as _, Connection as _, SqliteConnection, SqlitePool,
    sqlite::{SqliteConnectOptions, SqliteSynchronous},
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::{store_error, to_sql_u64};
use crate::store::{AuditRecord, StoreError, clock::to_micros};

/// Most records committed together: one statement binds one JSON array of them, so this
/// bounds that text (records are cut to a few KiB each) and one commit's time.
const MAX_BATCH: usize = 512;
/// Appends waiting for the writer; past this, appends wait to be queued (back-pressure
/// rather than an unbounded queue).
const QUEUE_LEN: usize = 4096;
/// Longest time between a commit and the sync that makes it survive a power cut.
pub(super) const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The writer's connection checkpoints on its own only past this many WAL pages (about
/// 40 MB): a backstop for when the periodic checkpoints cannot run, never the normal path.
const AUTOCHECKPOINT_PAGES: &str = "10000";

/// One statement for a whole batch: `?1` is a JSON array of records, each an array of the
/// columns in this order; `json_each` yields them in order, so ids follow append order.
const APPEND_BATCH: &str = "INSERT INTO audit
        (time, request_id, tenant_id, user_id, session_id, server, tool, decision,
         confirmation_id, outcome, duration_ms, argument_bytes, result_bytes, fingerprint,
         arguments, detail)
    SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, value ->> 5,
           value ->> 6, value ->> 7, value ->> 8, value ->> 9, value ->> 10, value ->> 11,
           value ->> 12, value ->> 13, value ->> 14, value ->> 15
    FROM json_each(?1)
    ORDER BY key";

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
        pool: SqlitePool,
        stop: CancellationToken,
    ) -> Result<(AuditWriter, impl Future<Output = ()> + use<>), StoreError> {
        let connection = options
            .clone()
            .synchronous(SqliteSynchronous::Normal)
            .pragma("wal_autocheckpoint", AUTOCHECKPOINT_PAGES)
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

/// The writer task: commits queued records in batches, and keeps at most one checkpoint
/// running beside it whenever something was committed since the last one.
async fn write_batches(
    mut connection: SqliteConnection,
    pool: SqlitePool,
    mut queue: mpsc::Receiver<Pending>,
    stop: CancellationToken,
) {
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
                let result = commit(&mut connection, &batch).await;
                unsynced |= result.is_ok();
                for pending in batch.drain(..) {
                    let _ = pending.done.send(result.clone());
                }
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

/// Commits `batch` as one statement (one implicit transaction: all or none).
async fn commit(connection: &mut SqliteConnection, batch: &[Pending]) -> Result<(), StoreError> {
    let rows = serde_json::to_string(&batch.iter().map(|p| row(&p.record)).collect::<Vec<_>>())
        .map_err(|err| StoreError::Unavailable(format!("encoding audit records: {err}")))?;
    let done = sqlx::query(APPEND_BATCH)
        .bind(rows)
        .execute(&mut *connection)
        .await
        .map_err(store_error)?;
    if done.rows_affected() != batch.len() as u64 {
        return Err(StoreError::Unavailable(format!(
            "{} of {} audit records were written",
            done.rows_affected(),
            batch.len()
        )));
    }
    Ok(())
}

/// The columns of one record, in [`APPEND_BATCH`]'s order.
type Row<'a> = (
    i64,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    &'a str,
    Option<&'a str>,
    &'a str,
    i64,
    i64,
    i64,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
);

fn row(r: &AuditRecord) -> Row<'_> {
    (
        to_micros(r.time),
        &r.request_id,
        &r.tenant,
        &r.user,
        &r.session,
        &r.server,
        &r.tool,
        &r.decision,
        r.confirmation_id.as_deref(),
        &r.outcome,
        to_sql_u64(r.duration_ms),
        to_sql_u64(r.argument_bytes),
        to_sql_u64(r.result_bytes),
        r.fingerprint.as_deref(),
        r.arguments.as_deref(),
        r.detail.as_deref(),
    )
}

async fn run_checkpoint(pool: SqlitePool) {
    if let Err(err) = sqlx::query(CHECKPOINT).execute(&pool).await {
        tracing::warn!(error = %store_error(err), "audit log checkpoint failed");
    }
}

#[cfg(test)]
#[path = "audit_writer_tests.rs"]
mod tests;
