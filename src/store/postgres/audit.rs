//! The audit log in PostgreSQL. Appends go to a writer task that commits whatever has
//! gathered as one multi-row insert (group commit), and each append returns once its batch
//! is committed: an acknowledged call has its record. Every row names the instance that
//! served the call.
//!
//! Each [lane](crate::lane) has its own writer, started by its first append, on its own
//! connection made there: a call waits for its record on its own thread, and no other thread
//! is woken for it. Queries and purges go through the shared pool.
//!
//! When a commit reaches the disk follows `[audit] sync`, as for SQLite:
//! - `every_commit`: each commit waits for its WAL to be flushed before its calls are
//!   answered.
//! - `batched` (the default): commits are asynchronous (`synchronous_commit = off`), and the
//!   writer keeps every record PostgreSQL acknowledged until a synchronous commit of its own,
//!   at most [`SETTLE_EVERY`] later, proves the WAL holding it flushed. If PostgreSQL crashes
//!   before that, the writer connects again and writes the records the crash lost (those not
//!   found in the table), before anything else. A crash of PostgreSQL or of the gateway loses
//!   no acknowledged record; losing both machines within that interval can, as a power cut
//!   can with SQLite's batched mode.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use futures::future::BoxFuture;
use sqlx::{
    Connection as _, PgConnection, PgPool, Postgres, QueryBuilder, Row as _,
    postgres::PgConnectOptions,
};
use tokio::{
    sync::{mpsc, oneshot},
    time::Instant,
};

use super::{pg_text, unavailable};
use crate::{
    config::AuditSync,
    lane::PerLane,
    store::{
        AuditQuery, AuditRecord, AuditStore, StoreError,
        clock::{from_micros, to_micros},
    },
};

/// Most records in one commit (17 parameters each, far below PostgreSQL's 65535).
const MAX_BATCH: usize = 512;
/// Appends waiting for a writer before callers wait to hand theirs over.
const QUEUE: usize = 4096;
/// In batched mode, how long an acknowledged record may wait for the proof that it is on
/// disk (and, after a failure, between attempts to write lost records again).
pub(crate) const SETTLE_EVERY: Duration = Duration::from_millis(100);
/// Attempts a writer whose handles are all gone makes to prove its last records on disk.
const FINAL_ATTEMPTS: usize = 20;
/// Acknowledged records a writer keeps unproven at most: past this it settles before it
/// takes more.
const MAX_UNSETTLED: usize = 16 * 1024;

struct Job {
    record: AuditRecord,
    done: oneshot::Sender<Result<(), StoreError>>,
}

/// How the writers reach PostgreSQL.
struct Target {
    options: PgConnectOptions,
    instance: String,
    connect_timeout: Duration,
    command_timeout: Duration,
    sync: AuditSync,
}

/// The PostgreSQL audit store.
#[derive(Clone)]
pub struct PgAudit {
    pool: PgPool,
    target: Arc<Target>,
    writers: Arc<PerLane<mpsc::Sender<Job>>>,
}

impl PgAudit {
    /// Records tagged with `instance`, written over connections made as `pool`'s are, their
    /// commits reaching the disk as `sync` says (see the module's text); `pool` serves
    /// queries and purges. A connection is given `connect_timeout`, an insert
    /// `command_timeout`.
    pub fn new(
        pool: PgPool,
        instance: &str,
        sync: AuditSync,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> PgAudit {
        let commit = match sync {
            AuditSync::Batched => "off",
            AuditSync::EveryCommit => "on",
        };
        let target = Target {
            options: pool
                .connect_options()
                .as_ref()
                .clone()
                .options([("synchronous_commit", commit)]),
            instance: instance.to_owned(),
            connect_timeout,
            command_timeout,
            sync,
        };
        PgAudit {
            pool,
            target: Arc::new(target),
            writers: Arc::new(PerLane::new()),
        }
    }

    /// The calling lane's writer, started on the lane by its first append.
    fn writer(&self) -> &mpsc::Sender<Job> {
        self.writers.get_or_init(|| {
            let (jobs, queue) = mpsc::channel(QUEUE);
            tokio::spawn(Writer::new(self.target.clone()).run(queue));
            jobs
        })
    }
}

/// One lane's writer: its connection, and in batched mode the records acknowledged but not
/// yet proven on disk.
struct Writer {
    target: Arc<Target>,
    connection: Option<PgConnection>,
    /// Acknowledged by asynchronous commits, oldest first.
    unsettled: Vec<AuditRecord>,
    /// Whether the connection failed since `unsettled` were acknowledged: PostgreSQL may
    /// have lost them, so they are looked for and written again before anything else.
    lost: bool,
    /// When `unsettled` must next be settled.
    settle_at: Option<Instant>,
}

impl Writer {
    fn new(target: Arc<Target>) -> Writer {
        Writer {
            target,
            connection: None,
            unsettled: Vec::new(),
            lost: false,
            settle_at: None,
        }
    }

    async fn run(mut self, mut queue: mpsc::Receiver<Job>) {
        let mut batch = Vec::with_capacity(MAX_BATCH);
        let settle = tokio::time::sleep(Duration::ZERO);
        tokio::pin!(settle);
        loop {
            if let Some(at) = self.settle_at {
                let full = self.unsettled.len() >= MAX_UNSETTLED;
                if full || at <= Instant::now() {
                    if full && self.lost {
                        // Failing with as many records as it keeps waiting for proof: the
                        // calls waiting now fail rather than wait, until these are safe,
                        // tried at the pace of the retries.
                        while let Ok(job) = queue.try_recv() {
                            let _ = job.done.send(Err(StoreError::Unavailable(
                                "postgres cannot be reached (earlier audit records wait)"
                                    .to_owned(),
                            )));
                        }
                        tokio::time::sleep_until(at).await;
                    }
                    self.settle().await;
                    continue;
                }
                if settle.deadline() != at {
                    settle.as_mut().reset(at);
                }
            }
            let first = tokio::select! {
                job = queue.recv() => job,
                () = &mut settle, if self.settle_at.is_some() => continue,
            };
            let Some(first) = first else { break };
            batch.push(first);
            while batch.len() < MAX_BATCH {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let result = self.commit(&batch).await;
            if let Err(err) = &result {
                tracing::error!(error = %err, records = batch.len(), "audit records not written");
            }
            let keep = result.is_ok() && self.target.sync == AuditSync::Batched;
            for job in batch.drain(..) {
                let _ = job.done.send(result.clone());
                if keep {
                    self.unsettled.push(job.record);
                }
            }
            if keep && self.settle_at.is_none() {
                self.settle_at = Some(Instant::now() + SETTLE_EVERY);
            }
        }
        // Every handle is gone: prove what is left before stopping, for a while.
        for _ in 0..FINAL_ATTEMPTS {
            if self.unsettled.is_empty() {
                return;
            }
            self.settle().await;
            if !self.unsettled.is_empty() {
                tokio::time::sleep(SETTLE_EVERY).await;
            }
        }
        tracing::error!(
            records = self.unsettled.len(),
            "the audit log stopped with records PostgreSQL may have lost"
        );
    }

    /// Proves the unsettled records on disk (a synchronous commit flushes all the WAL before
    /// it), or after a failure writes again those PostgreSQL lost. On failure they are kept
    /// and tried again [`SETTLE_EVERY`] later.
    async fn settle(&mut self) {
        let failing = self.lost;
        match self.guarded(Work::Flush).await {
            Ok(()) => {
                self.unsettled.clear();
                self.settle_at = None;
            }
            Err(err) => {
                self.settle_at = Some(Instant::now() + SETTLE_EVERY);
                if failing {
                    return;
                }
                tracing::warn!(
                    error = %err,
                    records = self.unsettled.len(),
                    "audit records not yet proven on disk; trying again until they are"
                );
            }
        }
    }

    /// Inserts `batch`, after writing again what a failure may have lost.
    async fn commit(&mut self, batch: &[Job]) -> Result<(), StoreError> {
        self.guarded(Work::Insert(batch)).await
    }

    /// Does `work` on the connection, connecting first if there is none and writing again
    /// the unsettled records PostgreSQL lost if the last connection failed, each step within
    /// its deadline. A failure, or an answer later than the deadline, drops the connection:
    /// the next attempt connects afresh (after a restart of PostgreSQL the old one is dead).
    async fn guarded(&mut self, work: Work<'_>) -> Result<(), StoreError> {
        let timed_out = |what: &str| StoreError::Unavailable(format!("postgres {what} timed out"));
        let target = &*self.target;
        let result = async {
            let connection = match &mut self.connection {
                Some(open) => open,
                None => {
                    let made = tokio::time::timeout(
                        target.connect_timeout,
                        PgConnection::connect_with(&target.options),
                    )
                    .await
                    .map_err(|_| timed_out("connecting"))?
                    .map_err(|e| unavailable(&e))?;
                    self.connection.insert(made)
                }
            };
            if self.lost {
                tokio::time::timeout(
                    target.command_timeout,
                    rewrite_lost(connection, &target.instance, &self.unsettled),
                )
                .await
                .map_err(|_| timed_out("writing lost audit records again"))??;
                self.lost = false;
            }
            let done = match work {
                Work::Insert(batch) => {
                    let records = batch.iter().map(|job| &job.record);
                    tokio::time::timeout(
                        target.command_timeout,
                        insert(connection, &target.instance, records),
                    )
                    .await
                }
                Work::Flush => {
                    tokio::time::timeout(target.command_timeout, flush(connection)).await
                }
            };
            done.map_err(|_| timed_out("writing the audit log"))?
        }
        .await;
        if result.is_err() {
            self.connection = None;
            self.lost = !self.unsettled.is_empty();
        }
        result
    }
}

/// What a writer does on its connection.
enum Work<'a> {
    /// Inserts these records.
    Insert(&'a [Job]),
    /// Proves the records acknowledged so far on disk.
    Flush,
}

/// A synchronous commit of a transaction that writes WAL: once it returns, every commit
/// acknowledged before it is on disk. The transaction must write a WAL record itself (here a
/// transactional logical message, which nothing decodes unless a slot asks for it):
/// PostgreSQL commits a transaction that wrote none asynchronously whatever
/// `synchronous_commit` says, even when it was given an id.
async fn flush(connection: &mut PgConnection) -> Result<(), StoreError> {
    sqlx::raw_sql(
        "BEGIN; SET LOCAL synchronous_commit = on; \
         SELECT pg_logical_emit_message(true, 'mcpgate', 'audit flush'); COMMIT",
    )
    .execute(connection)
    .await
    .map(|_| ())
    .map_err(|e| unavailable(&e))
}

/// What tells one record from another in the table.
type Key = (i64, String, String, String);

fn key_of(record: &AuditRecord) -> Key {
    (
        to_micros(record.time),
        pg_text(&record.request_id).into_owned(),
        pg_text(&record.decision).into_owned(),
        pg_text(&record.outcome).into_owned(),
    )
}

/// Writes those of `unsettled` the table does not hold (as many times as they are missing),
/// synchronously, so that they are settled once this returns.
async fn rewrite_lost(
    connection: &mut PgConnection,
    instance: &str,
    unsettled: &[AuditRecord],
) -> Result<(), StoreError> {
    let Some((low, high)) = unsettled
        .iter()
        .map(|r| to_micros(r.time))
        .fold(None, |span: Option<(i64, i64)>, t| {
            Some(span.map_or((t, t), |(l, h)| (l.min(t), h.max(t))))
        })
    else {
        return Ok(());
    };
    let rows = sqlx::query(
        "SELECT time_us, request_id, decision, outcome FROM mcpgate_audit \
         WHERE instance = $1 AND time_us BETWEEN $2 AND $3",
    )
    .bind(instance)
    .bind(low)
    .bind(high)
    .fetch_all(&mut *connection)
    .await
    .map_err(|e| unavailable(&e))?;
    let mut found: HashMap<Key, usize> = HashMap::new();
    for row in &rows {
        let get = |name: &str| -> Result<String, StoreError> {
            row.try_get(name)
                .map_err(|_| StoreError::Corrupt("an audit row cannot be read".to_owned()))
        };
        let time: i64 = row
            .try_get("time_us")
            .map_err(|_| StoreError::Corrupt("an audit row cannot be read".to_owned()))?;
        *found
            .entry((time, get("request_id")?, get("decision")?, get("outcome")?))
            .or_default() += 1;
    }
    let missing: Vec<&AuditRecord> = unsettled
        .iter()
        .filter(|record| match found.get_mut(&key_of(record)) {
            Some(n) if *n > 0 => {
                *n -= 1;
                false
            }
            _ => true,
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    tracing::warn!(
        records = missing.len(),
        "audit records PostgreSQL lost in a crash are written again"
    );
    for chunk in missing.chunks(MAX_BATCH) {
        insert(connection, instance, chunk.iter().copied()).await?;
    }
    flush(connection).await
}

async fn insert<'r>(
    connection: &mut PgConnection,
    instance: &str,
    records: impl Iterator<Item = &'r AuditRecord>,
) -> Result<(), StoreError> {
    let mut query = QueryBuilder::<Postgres>::new(
        "INSERT INTO mcpgate_audit (time_us, instance, request_id, tenant, user_name, \
         session, server, tool, decision, confirmation_id, outcome, duration_ms, \
         argument_bytes, result_bytes, fingerprint, arguments, detail) ",
    );
    let number = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let text = |s: &str| pg_text(s).into_owned();
    let optional = |s: &Option<String>| s.as_deref().map(text);
    query.push_values(records, |mut row, r| {
        row.push_bind(to_micros(r.time))
            .push_bind(instance.to_owned())
            .push_bind(text(&r.request_id))
            .push_bind(text(&r.tenant))
            .push_bind(text(&r.user))
            .push_bind(text(&r.session))
            .push_bind(text(&r.server))
            .push_bind(text(&r.tool))
            .push_bind(text(&r.decision))
            .push_bind(optional(&r.confirmation_id))
            .push_bind(text(&r.outcome))
            .push_bind(number(r.duration_ms))
            .push_bind(number(r.argument_bytes))
            .push_bind(number(r.result_bytes))
            .push_bind(optional(&r.fingerprint))
            .push_bind(optional(&r.arguments))
            .push_bind(optional(&r.detail));
    });
    query
        .build()
        .execute(connection)
        .await
        .map(|_| ())
        .map_err(|e| unavailable(&e))
}

impl AuditStore for PgAudit {
    fn append(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let (done, committed) = oneshot::channel();
            let job = Job {
                record: record.bounded(),
                done,
            };
            self.writer()
                .send(job)
                .await
                .map_err(|_| StoreError::Unavailable("the audit writer stopped".to_owned()))?;
            committed
                .await
                .map_err(|_| StoreError::Unavailable("the audit writer stopped".to_owned()))?
        })
    }

    fn query(
        &self,
        query: AuditQuery,
    ) -> BoxFuture<'_, Result<Vec<(i64, AuditRecord)>, StoreError>> {
        Box::pin(async move {
            let mut sql = QueryBuilder::<Postgres>::new(
                "SELECT id, time_us, request_id, tenant, user_name, session, server, tool, \
                 decision, confirmation_id, outcome, duration_ms, argument_bytes, \
                 result_bytes, fingerprint, arguments, detail FROM mcpgate_audit WHERE true",
            );
            if let Some(since) = query.since {
                sql.push(" AND time_us >= ").push_bind(to_micros(since));
            }
            if let Some(until) = query.until {
                sql.push(" AND time_us < ").push_bind(to_micros(until));
            }
            if let Some(before) = query.before_id {
                sql.push(" AND id < ").push_bind(before);
            }
            for (column, value) in [
                ("tenant", &query.tenant),
                ("user_name", &query.user),
                ("tool", &query.tool),
                ("outcome", &query.outcome),
            ] {
                if let Some(value) = value {
                    sql.push(format_args!(" AND {column} = "))
                        .push_bind(pg_text(value).into_owned());
                }
            }
            let limit = i64::try_from(query.effective_limit()).unwrap_or(i64::MAX);
            sql.push(" ORDER BY id DESC LIMIT ").push_bind(limit);
            let rows = sql
                .build()
                .fetch_all(&self.pool)
                .await
                .map_err(|e| unavailable(&e))?;
            rows.iter().map(record_of).collect()
        })
    }

    fn purge_before(&self, before: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        Box::pin(async move {
            let deleted = sqlx::query("DELETE FROM mcpgate_audit WHERE time_us < $1")
                .bind(to_micros(before))
                .execute(&self.pool)
                .await
                .map_err(|e| unavailable(&e))?;
            Ok(deleted.rows_affected())
        })
    }
}

fn record_of(row: &sqlx::postgres::PgRow) -> Result<(i64, AuditRecord), StoreError> {
    let corrupt = |_| StoreError::Corrupt("an audit row cannot be read".to_owned());
    let count = |name: &str| -> Result<u64, StoreError> {
        let n: i64 = row.try_get(name).map_err(corrupt)?;
        Ok(u64::try_from(n).unwrap_or(0))
    };
    let record = AuditRecord {
        time: from_micros(row.try_get("time_us").map_err(corrupt)?),
        request_id: row.try_get("request_id").map_err(corrupt)?,
        tenant: row.try_get("tenant").map_err(corrupt)?,
        user: row.try_get("user_name").map_err(corrupt)?,
        session: row.try_get("session").map_err(corrupt)?,
        server: row.try_get("server").map_err(corrupt)?,
        tool: row.try_get("tool").map_err(corrupt)?,
        decision: row.try_get("decision").map_err(corrupt)?,
        confirmation_id: row.try_get("confirmation_id").map_err(corrupt)?,
        outcome: row.try_get("outcome").map_err(corrupt)?,
        duration_ms: count("duration_ms")?,
        argument_bytes: count("argument_bytes")?,
        result_bytes: count("result_bytes")?,
        fingerprint: row.try_get("fingerprint").map_err(corrupt)?,
        arguments: row.try_get("arguments").map_err(corrupt)?,
        detail: row.try_get("detail").map_err(corrupt)?,
    };
    Ok((row.try_get("id").map_err(corrupt)?, record))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    fn record(n: u64, outcome: &str) -> AuditRecord {
        AuditRecord {
            time: UNIX_EPOCH + Duration::from_secs(1_700_000_000 + n),
            request_id: format!("req-{n}"),
            tenant: "acme".to_owned(),
            user: "alice".to_owned(),
            session: "s1".to_owned(),
            server: "files".to_owned(),
            tool: "files.read".to_owned(),
            decision: "allowed".to_owned(),
            confirmation_id: None,
            outcome: outcome.to_owned(),
            duration_ms: 1,
            argument_bytes: 2,
            result_bytes: 3,
            fingerprint: None,
            arguments: None,
            detail: None,
        }
    }

    /// After a crash, the records PostgreSQL still holds are not written twice, those it lost
    /// are, and two records alike are counted as two; another instance's rows count for
    /// nothing.
    #[tokio::test]
    async fn only_what_a_crash_lost_is_written_again() {
        let scratch = super::super::scratch::Database::create("audit_lost").await;
        let pool = scratch.pool().await;
        super::super::migrate(&pool).await.expect("schema");
        let mut connection = pool.acquire().await.expect("connection").detach();
        let (kept, twice, lost) = (record(1, "ok"), record(2, "ok"), record(3, "denied"));
        insert(&mut connection, "a", [&kept, &twice].into_iter())
            .await
            .expect("insert");
        insert(&mut connection, "b", [&lost].into_iter())
            .await
            .expect("insert");
        let unsettled = [kept.clone(), twice.clone(), twice.clone(), lost.clone()];
        rewrite_lost(&mut connection, "a", &unsettled)
            .await
            .expect("rewritten");
        // Again: everything is there now, nothing is added.
        rewrite_lost(&mut connection, "a", &unsettled)
            .await
            .expect("rewritten");
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SELECT instance, request_id FROM mcpgate_audit ORDER BY instance, request_id",
        )
        .fetch_all(&pool)
        .await
        .expect("rows");
        let rows: Vec<(&str, &str)> = rows.iter().map(|(i, r)| (&**i, &**r)).collect();
        assert_eq!(
            rows,
            [
                ("a", "req-1"),
                ("a", "req-2"),
                ("a", "req-2"),
                ("a", "req-3"),
                ("b", "req-3")
            ]
        );
        drop(connection);
        pool.close().await;
        scratch.drop_it().await;
    }
}
