//! The audit log in PostgreSQL. Appends go to a writer task that commits whatever has
//! gathered as one multi-row insert (group commit), and each append returns once its batch
//! is committed: an acknowledged call has its record. Every row names the instance that
//! served the call.
//!
//! Each [lane](crate::lane) has its own writer, started by its first append, on its own
//! connection made there: a call waits for its record on its own thread, and no other thread
//! is woken for it. Queries and purges go through the shared pool.

use std::{sync::Arc, time::Duration, time::SystemTime};

use futures::future::BoxFuture;
use sqlx::{
    Connection as _, PgConnection, PgPool, Postgres, QueryBuilder, Row as _,
    postgres::PgConnectOptions,
};
use tokio::sync::{mpsc, oneshot};

use super::{pg_text, unavailable};
use crate::{
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
}

/// The PostgreSQL audit store.
#[derive(Clone)]
pub struct PgAudit {
    pool: PgPool,
    target: Arc<Target>,
    writers: Arc<PerLane<mpsc::Sender<Job>>>,
}

impl PgAudit {
    /// Records tagged with `instance`, written over connections made as `pool`'s are (each
    /// commit waits for its WAL to reach the disk, whatever `[audit] sync` says for SQLite:
    /// a record PostgreSQL acknowledged survives PostgreSQL's crash); `pool` serves queries
    /// and purges. A connection is given `connect_timeout`, an insert `command_timeout`.
    pub fn new(
        pool: PgPool,
        instance: &str,
        connect_timeout: Duration,
        command_timeout: Duration,
    ) -> PgAudit {
        let target = Target {
            options: pool.connect_options().as_ref().clone(),
            instance: instance.to_owned(),
            connect_timeout,
            command_timeout,
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
            tokio::spawn(write(self.target.clone(), queue));
            jobs
        })
    }
}

async fn write(target: Arc<Target>, mut queue: mpsc::Receiver<Job>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut connection = None;
    while let Some(first) = queue.recv().await {
        batch.push(first);
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let result = commit(&target, &mut connection, &batch).await;
        if let Err(err) = &result {
            tracing::error!(error = %err, records = batch.len(), "audit records not written");
        }
        for job in batch.drain(..) {
            let _ = job.done.send(result.clone());
        }
    }
}

/// Inserts `batch` on `connection`, connecting first if there is none. A failure, or an
/// answer later than the deadline, drops the connection: the next batch connects afresh
/// (after a restart of PostgreSQL the old one is dead).
async fn commit(
    target: &Target,
    connection: &mut Option<PgConnection>,
    batch: &[Job],
) -> Result<(), StoreError> {
    let timed_out = |what: &str| StoreError::Unavailable(format!("postgres {what} timed out"));
    let result = async {
        let open = match connection {
            Some(open) => open,
            None => {
                let made = tokio::time::timeout(
                    target.connect_timeout,
                    PgConnection::connect_with(&target.options),
                )
                .await
                .map_err(|_| timed_out("connecting"))?
                .map_err(|e| unavailable(&e))?;
                connection.insert(made)
            }
        };
        tokio::time::timeout(
            target.command_timeout,
            insert(open, &target.instance, batch),
        )
        .await
        .map_err(|_| timed_out("writing the audit log"))?
    }
    .await;
    if result.is_err() {
        *connection = None;
    }
    result
}

async fn insert(
    connection: &mut PgConnection,
    instance: &str,
    batch: &[Job],
) -> Result<(), StoreError> {
    let mut query = QueryBuilder::<Postgres>::new(
        "INSERT INTO mcpgate_audit (time_us, instance, request_id, tenant, user_name, \
         session, server, tool, decision, confirmation_id, outcome, duration_ms, \
         argument_bytes, result_bytes, fingerprint, arguments, detail) ",
    );
    let number = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    let text = |s: &str| pg_text(s).into_owned();
    let optional = |s: &Option<String>| s.as_deref().map(text);
    query.push_values(batch, |mut row, job| {
        let r = &job.record;
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
