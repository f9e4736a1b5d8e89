//! Group commit for the SQLite audit log, without a thread hop. An append queues its record;
//! if no commit is under way, the appending task becomes the leader and commits everything
//! queued (its own record first among them) on the writer's connection, in one transaction of
//! a few multi-row statements, then answers every append in the batch. Appends that arrive
//! meanwhile wait; if any are queued when the leader is done, a task is spawned to lead the
//! next batch. One call at a time thus commits on its own task (no wake-up of another
//! thread), and under load one commit carries many records. An append returns only once its
//! record is committed.
//!
//! Commits on the writer's connection are not synced to disk one by one (`synchronous =
//! NORMAL`; in WAL mode a commit is then a write to the WAL, tens of microseconds, which
//! survives a crash of the gateway but not of the machine). A checkpoint on another
//! connection syncs the WAL at most [`SYNC_INTERVAL`] after a commit, so what a power cut can
//! take is bounded by that interval; a sync per call (about 0.2 ms on a virtual disk, 10 ms
//! at its tail) would otherwise be most of the gateway's own latency. With
//! [`AuditSync::EveryCommit`] the writer's connection syncs each commit instead (`synchronous
//! = FULL`), before its appends are answered; such commits run on tokio's blocking threads,
//! since a sync may take milliseconds, and under load one sync still carries a whole batch.

use std::{
    path::Path,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rusqlite::{Connection, OpenFlags};
use sqlx::SqlitePool;
use tokio::sync::{Notify, oneshot};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{BUSY_TIMEOUT, store_error, to_sql_u64};
use crate::config::AuditSync;
use crate::store::{AuditRecord, StoreError, clock::to_micros};

/// Most records committed at once: bounds one batch's memory (records are cut to a few KiB
/// each) and how long it holds the connection.
const MAX_BATCH: usize = 512;
/// Rows per INSERT statement: a batch is written in chunks of these sizes, largest first, each
/// a statement prepared once; any batch takes a handful of statements. 64 rows bind 1024
/// parameters, far below SQLite's limit (32766).
const CHUNK_ROWS: [usize; 7] = [64, 32, 16, 8, 4, 2, 1];
/// Columns of an audit row, in the order [`bind_record`] binds them.
const COLUMNS: usize = 16;
/// Longest time between a commit and the sync that makes it survive a power cut.
pub(super) const SYNC_INTERVAL: Duration = Duration::from_millis(100);
/// The writer's connection checkpoints on its own only past this many WAL pages (about
/// 40 MB): a backstop for when the periodic checkpoints cannot run, never the normal path.
const AUTOCHECKPOINT_PAGES: i64 = 10_000;
/// The writer's page cache, in KiB (SQLite's `cache_size` takes negative KiB): it only
/// appends to the end of one table, so the default 2 MiB would just hold old pages.
const CACHE_KIB: i64 = -256;

/// The head of every INSERT; rows follow as `(?, ..., ?)` groups, in append order (ids
/// follow it).
const INSERT_HEAD: &str = "INSERT INTO audit
        (time, request_id, tenant_id, user_id, session_id, server, tool, decision,
         confirmation_id, outcome, duration_ms, argument_bytes, result_bytes, fingerprint,
         arguments, detail)
    VALUES ";

const BEGIN: &str = "BEGIN IMMEDIATE";
const COMMIT: &str = "COMMIT";
const ROLLBACK: &str = "ROLLBACK";

/// A PASSIVE checkpoint syncs the WAL, then copies what it can into the database without
/// waiting for readers or writers.
const CHECKPOINT: &str = "PRAGMA wal_checkpoint(PASSIVE)";

struct Pending {
    record: AuditRecord,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// The appending side; clones share one queue and connection.
#[derive(Clone)]
pub(super) struct AuditWriter {
    shared: Arc<Shared>,
    /// The checkpoint task, stopped by [`AuditWriter::close`].
    checkpoints: TaskTracker,
    stop: CancellationToken,
}

struct Shared {
    queue: Mutex<Queue>,
    /// The writer's connection; only a leader locks it. `None` once closed.
    connection: Mutex<Option<Writer>>,
    sync: AuditSync,
    /// Set by a commit, cleared by the checkpoint that follows it.
    dirty: AtomicBool,
    /// The last batch carried more than one record: calls are arriving together, and a new
    /// leader lets the others runnable on its thread queue theirs before it commits.
    crowded: AtomicBool,
    /// Wakes the checkpoint task after the first commit since the last checkpoint.
    commit_made: Notify,
    /// Wakes [`AuditWriter::close`] when a leader is done.
    idle: Notify,
}

#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    /// A leader is committing (or about to); appends only queue.
    leading: bool,
    /// Closed: appends are refused.
    closed: bool,
}

struct Writer {
    connection: Connection,
    statements: Statements,
}

fn stopped() -> StoreError {
    StoreError::Unavailable("the audit writer has stopped".to_owned())
}

impl AuditWriter {
    /// Opens the writer's connection to the database at `path` (whose schema is in place)
    /// and starts the checkpoint task, which runs on `pool`.
    pub(super) async fn start(
        path: &Path,
        sync: AuditSync,
        pool: SqlitePool,
    ) -> Result<AuditWriter, StoreError> {
        let path = path.to_owned();
        let connection = tokio::task::spawn_blocking(move || open_writer(&path, sync))
            .await
            .map_err(|err| StoreError::Unavailable(format!("opening the audit writer: {err}")))?
            .map_err(sqlite_error)?;
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            connection: Mutex::new(Some(Writer {
                connection,
                statements: Statements::new(),
            })),
            sync,
            dirty: AtomicBool::new(false),
            crowded: AtomicBool::new(false),
            commit_made: Notify::new(),
            idle: Notify::new(),
        });
        let stop = CancellationToken::new();
        let checkpoints = TaskTracker::new();
        checkpoints.spawn(checkpoint_after_commits(shared.clone(), pool, stop.clone()));
        checkpoints.close();
        Ok(AuditWriter {
            shared,
            checkpoints,
            stop,
        })
    }

    /// Queues `record` (already bounded) and waits until it is committed.
    pub(super) async fn append(&self, record: AuditRecord) -> Result<(), StoreError> {
        let (done, committed) = oneshot::channel();
        let lead = {
            let mut queue = self.shared.lock_queue();
            if queue.closed {
                return Err(stopped());
            }
            queue.pending.push(Pending { record, done });
            !std::mem::replace(&mut queue.leading, true)
        };
        if lead {
            let leader = Leader(Some(self.shared.clone()));
            if self.shared.crowded.load(Ordering::Relaxed) {
                // One more record in this commit is one commit (eight system calls) fewer.
                tokio::task::yield_now().await;
            }
            leader.lead().await;
        }
        committed.await.map_err(|_| stopped())?
    }

    /// Refuses new appends, waits for the commit under way (records queued before this are
    /// committed), syncs what was committed and closes the connection.
    pub(super) async fn close(&self, pool: &SqlitePool) {
        loop {
            let idle = self.shared.idle.notified();
            {
                let mut queue = self.shared.lock_queue();
                queue.closed = true;
                if !queue.leading {
                    break;
                }
            }
            idle.await;
        }
        self.stop.cancel();
        self.checkpoints.wait().await;
        if self.shared.dirty.swap(false, Ordering::AcqRel) {
            run_checkpoint(pool).await;
        }
        let writer = self
            .shared
            .connection
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take();
        if let Some(writer) = writer
            && let Err((_, err)) = writer.connection.close()
        {
            tracing::warn!(error = %sqlite_error(err), "closing the audit writer's connection failed");
        }
    }
}

/// Leadership taken but not yet exercised. If its holder goes away first (the appending
/// call was dropped while yielding), a task is started to lead in its place, so the queue is
/// never left without a leader.
struct Leader(Option<Arc<Shared>>);

impl Leader {
    async fn lead(mut self) {
        if let Some(shared) = self.0.take() {
            Shared::lead(&shared).await;
        }
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            Shared::hand_over(shared);
        }
    }
}

impl Shared {
    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        // The queue is consistent between statements; a panic elsewhere cannot tear it.
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Commits one batch as the leader. Batched commits run here, on the caller's task (a
    /// write to the WAL); synced ones on a blocking thread. Either way the batch, its answers
    /// and the hand-over run to the end even if the caller's future is dropped.
    async fn lead(shared: &Arc<Shared>) {
        match shared.sync {
            AuditSync::Batched => Shared::lead_batch(shared),
            AuditSync::EveryCommit => {
                let leader = shared.clone();
                if tokio::task::spawn_blocking(move || Shared::lead_batch(&leader))
                    .await
                    .is_err()
                {
                    // The blocking pool is shutting down: nothing more will be committed.
                    shared.fail_queued();
                }
            }
        }
    }

    /// Takes up to [`MAX_BATCH`] queued records, commits them, answers each append, then
    /// either hands leadership to a new task (more are queued) or gives it up.
    fn lead_batch(shared: &Arc<Shared>) {
        let mut batch: Vec<Pending> = {
            let mut queue = shared.lock_queue();
            let take = queue.pending.len().min(MAX_BATCH);
            queue.pending.drain(..take).collect()
        };
        let result = {
            let mut writer = shared
                .connection
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            match writer.as_mut() {
                Some(writer) => writer.commit(&batch),
                None => Err(stopped()),
            }
        };
        if result.is_ok() && !shared.dirty.swap(true, Ordering::AcqRel) {
            shared.commit_made.notify_one();
        }
        shared.crowded.store(batch.len() > 1, Ordering::Relaxed);
        for pending in batch.drain(..) {
            let _ = pending.done.send(result.clone());
        }
        let more = {
            let mut queue = shared.lock_queue();
            queue.leading = !queue.pending.is_empty();
            queue.leading
        };
        if !more {
            shared.idle.notify_waiters();
            return;
        }
        // The appends queued meanwhile wait on a new leader, so this one's caller is answered
        // now rather than after everyone else's batches.
        Shared::hand_over(shared.clone());
    }

    /// Starts a task to lead the next batch (leadership is already taken).
    fn hand_over(shared: Arc<Shared>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move { Shared::lead(&shared).await });
            }
            Err(_) => shared.fail_queued(),
        }
    }

    /// Answers every queued append with an error and gives up leadership: used only when no
    /// task can be started to commit them (the runtime is going away).
    fn fail_queued(&self) {
        let pending = {
            let mut queue = self.lock_queue();
            queue.leading = false;
            std::mem::take(&mut queue.pending)
        };
        for p in pending {
            let _ = p.done.send(Err(stopped()));
        }
        self.idle.notify_waiters();
    }
}

/// Opens the writer's connection: its own sync level and a small page cache; the file is
/// already in WAL mode (the pool set it).
fn open_writer(path: &Path, sync: AuditSync) -> rusqlite::Result<Connection> {
    let connection = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    connection.busy_timeout(BUSY_TIMEOUT)?;
    connection.pragma_update(None, "journal_mode", "WAL")?;
    connection.pragma_update(
        None,
        "synchronous",
        match sync {
            AuditSync::Batched => "NORMAL",
            AuditSync::EveryCommit => "FULL",
        },
    )?;
    connection.pragma_update(None, "wal_autocheckpoint", AUTOCHECKPOINT_PAGES)?;
    connection.pragma_update(None, "cache_size", CACHE_KIB)?;
    Ok(connection)
}

impl Writer {
    /// Commits `batch`, all of it or none: one statement alone (a batch of one chunk, which
    /// is what a call at a time makes) or a transaction of a few.
    fn commit(&self, batch: &[Pending]) -> Result<(), StoreError> {
        let one_chunk = self
            .statements
            .for_remaining(batch.len())
            .is_some_and(|(rows, _)| rows == batch.len());
        if one_chunk {
            return self.insert(batch);
        }
        // BEGIN and COMMIT are cached statements too: parsed once, not per batch.
        self.run(BEGIN)?;
        let inserted = self.insert(batch).and_then(|()| self.run(COMMIT));
        if inserted.is_err() && !self.connection.is_autocommit() {
            // Nothing of the batch stays; if even this fails, the next BEGIN reports it.
            let _ = self.run(ROLLBACK);
        }
        inserted
    }

    /// Inserts `batch` in chunks, largest first.
    fn insert(&self, batch: &[Pending]) -> Result<(), StoreError> {
        let mut rest = batch;
        while let Some((rows, sql)) = self.statements.for_remaining(rest.len()) {
            let (chunk, after) = rest.split_at(rows);
            let mut statement = self.connection.prepare_cached(sql).map_err(sqlite_error)?;
            for (row, pending) in chunk.iter().enumerate() {
                bind_record(&mut statement, row * COLUMNS, &pending.record)
                    .map_err(sqlite_error)?;
            }
            let written = statement.raw_execute().map_err(sqlite_error)?;
            if written != rows {
                return Err(StoreError::Unavailable(format!(
                    "{written} of {rows} audit records were written"
                )));
            }
            rest = after;
        }
        Ok(())
    }

    fn run(&self, sql: &str) -> Result<(), StoreError> {
        self.connection
            .prepare_cached(sql)
            .and_then(|mut statement| statement.raw_execute())
            .map(drop)
            .map_err(sqlite_error)
    }
}

/// The INSERT statement of each chunk size in [`CHUNK_ROWS`].
struct Statements(Vec<(usize, String)>);

impl Statements {
    fn new() -> Statements {
        let row = format!("({})", vec!["?"; COLUMNS].join(", "));
        Statements(
            CHUNK_ROWS
                .iter()
                .map(|&rows| {
                    let values = vec![row.as_str(); rows].join(", ");
                    (rows, format!("{INSERT_HEAD}{values}"))
                })
                .collect(),
        )
    }

    /// The largest chunk that `remaining` records fill, with its statement.
    fn for_remaining(&self, remaining: usize) -> Option<(usize, &str)> {
        self.0
            .iter()
            .find(|(rows, _)| *rows <= remaining)
            .map(|(rows, sql)| (*rows, sql.as_str()))
    }
}

/// Binds the [`COLUMNS`] columns of one record, in [`INSERT_HEAD`]'s order, after the
/// `offset` parameters of the rows before it.
fn bind_record(
    statement: &mut rusqlite::CachedStatement<'_>,
    offset: usize,
    r: &AuditRecord,
) -> rusqlite::Result<()> {
    let values: [&dyn rusqlite::ToSql; COLUMNS] = [
        &to_micros(r.time),
        &r.request_id,
        &r.tenant,
        &r.user,
        &r.session,
        &r.server,
        &r.tool,
        &r.decision,
        &r.confirmation_id,
        &r.outcome,
        &to_sql_u64(r.duration_ms),
        &to_sql_u64(r.argument_bytes),
        &to_sql_u64(r.result_bytes),
        &r.fingerprint,
        &r.arguments,
        &r.detail,
    ];
    for (column, value) in values.into_iter().enumerate() {
        // SQLite numbers parameters from 1.
        statement.raw_bind_parameter(offset + column + 1, value)?;
    }
    Ok(())
}

/// Runs a checkpoint [`SYNC_INTERVAL`] after the first commit since the last one, until
/// `stop`; [`AuditWriter::close`] runs the last.
async fn checkpoint_after_commits(shared: Arc<Shared>, pool: SqlitePool, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = shared.commit_made.notified() => {}
        }
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(SYNC_INTERVAL) => {}
        }
        if shared.dirty.swap(false, Ordering::AcqRel) {
            run_checkpoint(&pool).await;
        }
    }
}

async fn run_checkpoint(pool: &SqlitePool) {
    if let Err(err) = sqlx::query(CHECKPOINT).execute(pool).await {
        tracing::warn!(error = %store_error(err), "audit log checkpoint failed");
    }
}

/// SQLite's errors as store errors, as [`store_error`] maps them for sqlx. SQLite's messages
/// name tables and columns, never bound values.
pub(super) fn sqlite_error(err: rusqlite::Error) -> StoreError {
    match &err {
        rusqlite::Error::SqliteFailure(failure, message) => {
            let message = message.clone().unwrap_or_else(|| failure.to_string());
            match failure.code {
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase => {
                    StoreError::Corrupt(message)
                }
                _ => StoreError::Unavailable(message),
            }
        }
        _ => StoreError::Unavailable(err.to_string()),
    }
}

#[cfg(test)]
#[path = "audit_writer_tests.rs"]
mod tests;
