//! Usage in SQLite (schema version 5): chat turns' model use in `model_usage`, and hourly and
//! daily rollups of the audit log (`usage_calls`) and of model use (`usage_models`), folded
//! in id order (see [`crate::store::usage`]). The audit writer appends in id order on one
//! connection, so every record below the folded id is in the rollups and every one above is
//! read from the log: a query is exact whenever it runs.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::SystemTime,
};

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, Row, Sqlite, SqlitePool, Transaction};

use super::{audit_writer::sqlite_error, store_error};
use crate::store::{
    StoreError,
    clock::to_micros,
    usage::{
        BUCKETS, CallSums, Class, DAY_US, Dim, HOUR_US, Interval, Key, ModelSums, ModelUse,
        UsageQuery, UsageRows, UsageStore, bucket_sql,
    },
};

/// Records folded per transaction: short, so the audit writer, which waits for the file's
/// write lock meanwhile, never waits long.
const CHUNK: i64 = 10_000;

/// What is folded into a rollup table, and how.
struct Spec {
    name: &'static str,
    raw: &'static str,
    rollup: &'static str,
    /// (rollup column, expression over the raw table)
    keys: Vec<(&'static str, String)>,
    sums: Vec<(String, String)>,
}

fn calls_spec() -> Spec {
    let mut sums = vec![
        ("calls".to_owned(), "1".to_owned()),
        ("duration_ms".to_owned(), "duration_ms".to_owned()),
        ("result_bytes".to_owned(), "result_bytes".to_owned()),
    ];
    sums.extend((0..BUCKETS).map(|i| (format!("b{i}"), bucket_sql(i))));
    Spec {
        name: "calls",
        raw: "audit",
        rollup: "usage_calls",
        keys: vec![
            ("tenant_id", "tenant_id".into()),
            ("user_id", "user_id".into()),
            ("server", "server".into()),
            ("tool", "tool".into()),
            ("class", Class::SQL.into()),
            ("outcome", "outcome".into()),
        ],
        sums,
    }
}

fn models_spec() -> Spec {
    Spec {
        name: "models",
        raw: "model_usage",
        rollup: "usage_models",
        keys: vec![
            ("tenant_id", "tenant_id".into()),
            ("user_id", "user_id".into()),
            ("model", "model".into()),
        ],
        sums: [
            ("turns", "1"),
            ("requests", "requests"),
            ("prompt_tokens", "prompt_tokens"),
            ("completion_tokens", "completion_tokens"),
            ("cached_tokens", "cached_tokens"),
            ("cost_micros", "cost_micros"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .to_vec(),
    }
}

/// Version 5's statements.
pub(super) fn schema_v5() -> Vec<String> {
    let mut statements = vec![
        "CREATE TABLE model_usage (
            id INTEGER PRIMARY KEY,
            time INTEGER NOT NULL,
            tenant_id TEXT NOT NULL,
            user_id TEXT NOT NULL,
            session_id TEXT NOT NULL,
            model TEXT NOT NULL,
            requests INTEGER NOT NULL,
            prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL,
            cached_tokens INTEGER NOT NULL,
            cost_micros INTEGER NOT NULL
        ) STRICT"
            .to_owned(),
        "CREATE TABLE usage_state (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL) STRICT"
            .to_owned(),
    ];
    for spec in [calls_spec(), models_spec()] {
        let keys: Vec<String> = spec
            .keys
            .iter()
            .map(|(k, _)| format!("{k} TEXT NOT NULL"))
            .collect();
        let sums: Vec<String> = spec
            .sums
            .iter()
            .map(|(s, _)| format!("{s} INTEGER NOT NULL"))
            .collect();
        let key_names: Vec<&str> = spec.keys.iter().map(|(k, _)| *k).collect();
        statements.push(format!(
            "CREATE TABLE {} (span TEXT NOT NULL, start INTEGER NOT NULL, {}, {}, \
             PRIMARY KEY (span, start, {})) STRICT, WITHOUT ROWID",
            spec.rollup,
            keys.join(", "),
            sums.join(", "),
            key_names.join(", ")
        ));
    }
    statements
}

pub(super) struct SqliteUsage {
    pool: SqlitePool,
    /// The file, which folding opens a connection of its own to.
    path: std::path::PathBuf,
    /// That connection, kept between folds.
    folder: Arc<Mutex<Option<rusqlite::Connection>>>,
}

impl SqliteUsage {
    pub(super) fn new(pool: SqlitePool, path: std::path::PathBuf) -> SqliteUsage {
        SqliteUsage {
            pool,
            path,
            folder: Arc::default(),
        }
    }
}

async fn state(tx: &mut Transaction<'_, Sqlite>, name: &str) -> Result<Option<i64>, StoreError> {
    sqlx::query_scalar("SELECT value FROM usage_state WHERE name = ?1")
        .bind(name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(store_error)
}

/// SQL of this module: built only from its own constants (table and column names, numbers),
/// never from a request; values are bound.
fn safe(sql: String) -> AssertSqlSafe<String> {
    AssertSqlSafe(sql)
}

fn floor(time: i64, unit: i64) -> i64 {
    time - time.rem_euclid(unit)
}

impl Spec {
    fn columns(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(k, _)| *k).collect();
        let sums: Vec<&str> = self.sums.iter().map(|(s, _)| s.as_str()).collect();
        format!("span, start, {}, {}", keys.join(", "), sums.join(", "))
    }

    fn upsert(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(k, _)| *k).collect();
        let adds: Vec<String> = self
            .sums
            .iter()
            .map(|(s, _)| format!("{s} = {s} + excluded.{s}"))
            .collect();
        format!(
            "ON CONFLICT (span, start, {}) DO UPDATE SET {}",
            keys.join(", "),
            adds.join(", ")
        )
    }

    /// Folds raw rows `(from, to]` (and those before `before`, when given) into `span` rows.
    fn fold_raw(&self, span: &str, unit: i64, before: Option<i64>) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(_, e)| e.as_str()).collect();
        let sums: Vec<String> = self.sums.iter().map(|(_, e)| format!("SUM({e})")).collect();
        let group: Vec<String> = (2..=self.keys.len() + 2).map(|i| i.to_string()).collect();
        let before = before.map_or(String::new(), |b| format!(" AND time < {b}"));
        format!(
            "INSERT INTO {} ({}) SELECT '{span}', time - (time % {unit}), {}, {} FROM {} \
             WHERE id > ?1 AND id <= ?2{before} GROUP BY {} {}",
            self.rollup,
            self.columns(),
            keys.join(", "),
            sums.join(", "),
            self.raw,
            group.join(", "),
            self.upsert()
        )
    }

    /// Builds day `?1` (to `?2`) from its hour rows.
    fn fold_day(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(k, _)| *k).collect();
        let sums: Vec<String> = self.sums.iter().map(|(s, _)| format!("SUM({s})")).collect();
        format!(
            "INSERT INTO {} ({}) SELECT 'd', ?1, {}, {} FROM {} \
             WHERE span = 'h' AND start >= ?1 AND start < ?2 GROUP BY {} {}",
            self.rollup,
            self.columns(),
            keys.join(", "),
            sums.join(", "),
            self.rollup,
            keys.join(", "),
            self.upsert()
        )
    }

    /// One chunk folded in one write transaction, on a connection of its own in a blocking
    /// thread: the transaction never waits on the async runtime, so the audit writer (which
    /// waits for the file's write lock on the thread that appends) always sees it end.
    fn roll(&self, db: &mut rusqlite::Connection) -> Result<u64, StoreError> {
        let tx = db
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(sqlite_error)?;
        let folded = self.roll_in(&tx)?;
        tx.commit().map_err(sqlite_error)?;
        Ok(folded)
    }

    fn roll_in(&self, tx: &rusqlite::Transaction<'_>) -> Result<u64, StoreError> {
        use rusqlite::OptionalExtension as _;
        let (id_name, day_name) = (format!("{}.id", self.name), format!("{}.day", self.name));
        let state = |name: &str| -> Result<Option<i64>, StoreError> {
            tx.query_row(
                "SELECT value FROM usage_state WHERE name = ?1",
                [name],
                |row| row.get(0),
            )
            .optional()
            .map_err(sqlite_error)
        };
        let set_state = |name: &str, value: i64| -> Result<(), StoreError> {
            tx.execute(
                "INSERT INTO usage_state (name, value) VALUES (?1, ?2) \
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                rusqlite::params![name, value],
            )
            .map(drop)
            .map_err(sqlite_error)
        };
        let folded = state(&id_name)?.unwrap_or(0);
        let last: Option<i64> = tx
            .query_row(&format!("SELECT max(id) FROM {}", self.raw), [], |row| {
                row.get(0)
            })
            .map_err(sqlite_error)?;
        let Some(last) = last.filter(|&l| l > folded) else {
            return Ok(0);
        };
        let to = last.min(folded.saturating_add(CHUNK));
        let (first, latest): (Option<i64>, Option<i64>) = tx
            .query_row(
                &format!(
                    "SELECT min(time), max(time) FROM {} WHERE id > ?1 AND id <= ?2",
                    self.raw
                ),
                [folded, to],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(sqlite_error)?;
        let (Some(first), Some(latest)) = (first, latest) else {
            set_state(&id_name, to)?;
            return Ok(0);
        };
        let mut day = match state(&day_name)? {
            Some(day) => day,
            None => floor(first, DAY_US),
        };
        tx.execute(&self.fold_raw("h", HOUR_US, None), [folded, to])
            .map_err(sqlite_error)?;
        // Late records of days already built go to those days too.
        tx.execute(&self.fold_raw("d", DAY_US, Some(day)), [folded, to])
            .map_err(sqlite_error)?;
        // Days that ended (by the newest record folded) are built from their hours.
        while day + DAY_US <= latest {
            tx.execute(&self.fold_day(), [day, day + DAY_US])
                .map_err(sqlite_error)?;
            day += DAY_US;
            let next: Option<i64> = tx
                .query_row(
                    &format!(
                        "SELECT min(start) FROM {} WHERE span = 'h' AND start >= ?1",
                        self.rollup
                    ),
                    [day],
                    |row| row.get(0),
                )
                .map_err(sqlite_error)?;
            if let Some(next) = next {
                day = day.max(floor(next, DAY_US));
            }
        }
        set_state(&day_name, day)?;
        set_state(&id_name, to)?;
        Ok(u64::try_from(to - folded).unwrap_or(0))
    }

    /// The column (rollup) or expression (raw) of `dim`, `NULL` where it does not apply.
    fn dim(&self, dim: Dim, raw: bool) -> String {
        let column = match dim {
            Dim::Tenant => "tenant_id",
            Dim::User => "user_id",
            Dim::Server => "server",
            Dim::Tool => "tool",
            Dim::Model => "model",
        };
        self.key_column(column, raw)
    }

    /// Sums `query` over one tier: `span` rows starting in `[from, to)`, or (`span` `None`)
    /// raw rows above id `folded` in `[from, to)`.
    async fn read(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        query: &UsageQuery,
        span: Option<&str>,
        (from, to): (i64, i64),
        folded: i64,
        rows: &mut UsageRows,
    ) -> Result<(), StoreError> {
        if from >= to {
            return Ok(());
        }
        let raw = span.is_none();
        let time = if raw { "time" } else { "start" };
        let mut select: Vec<String> = query.group_by.iter().map(|d| self.dim(*d, raw)).collect();
        select.push(match query.interval {
            Some(i) => format!("{time} - ({time} % {})", i.micros()),
            None => "NULL".to_owned(),
        });
        let calls = self.name == "calls";
        if calls {
            select.push(self.key_column("class", raw));
            select.push("outcome".to_owned());
        }
        let group: Vec<String> = (1..=select.len()).map(|i| i.to_string()).collect();
        for (s, e) in &self.sums {
            select.push(if raw {
                format!("SUM({e})")
            } else {
                format!("SUM({s})")
            });
        }
        let source = match span {
            Some(span) => format!(
                "{} WHERE span = '{span}' AND start >= ?1 AND start < ?2",
                self.rollup
            ),
            None => format!("{} WHERE id > ?3 AND time >= ?1 AND time < ?2", self.raw),
        };
        let sql = format!(
            "SELECT {} FROM {source} AND (?4 IS NULL OR tenant_id = ?4) \
             AND (?5 IS NULL OR user_id = ?5) GROUP BY {}",
            select.join(", "),
            group.join(", ")
        );
        let found = sqlx::query(safe(sql))
            .bind(from)
            .bind(to)
            .bind(folded)
            .bind(query.tenant.as_deref())
            .bind(query.user.as_deref())
            .fetch_all(&mut **tx)
            .await
            .map_err(store_error)?;
        let dims = query.group_by.len();
        for row in &found {
            let key = Key {
                values: (0..dims)
                    .map(|i| row.try_get::<Option<String>, _>(i))
                    .collect::<Result<_, _>>()
                    .map_err(store_error)?,
                time: row.try_get(dims).map_err(store_error)?,
            };
            let sums_from = if calls { dims + 3 } else { dims + 1 };
            let sum = |i: usize| -> Result<u64, StoreError> {
                let value: Option<i64> = row.try_get(sums_from + i).map_err(store_error)?;
                Ok(u64::try_from(value.unwrap_or(0)).unwrap_or(0))
            };
            if calls {
                let class: String = row.try_get(dims + 1).map_err(store_error)?;
                let outcome: String = row.try_get(dims + 2).map_err(store_error)?;
                let mut sums = CallSums {
                    calls: sum(0)?,
                    duration_ms: sum(1)?,
                    result_bytes: sum(2)?,
                    ..CallSums::default()
                };
                for (i, bucket) in sums.buckets.iter_mut().enumerate() {
                    *bucket = sum(3 + i)?;
                }
                rows.add_calls(key, Class::parse(&class), outcome, &sums);
            } else {
                let sums = ModelSums {
                    turns: sum(0)?,
                    requests: sum(1)?,
                    prompt_tokens: sum(2)?,
                    completion_tokens: sum(3)?,
                    cached_tokens: sum(4)?,
                    cost_micros: sum(5)?,
                };
                rows.add_models(key, &sums);
            }
        }
        Ok(())
    }

    /// A key's column (rollup) or expression (raw), `NULL` when the spec has no such key.
    fn key_column(&self, column: &str, raw: bool) -> String {
        match self.keys.iter().find(|(k, _)| *k == column) {
            Some((_, e)) if raw => e.clone(),
            Some((k, _)) => (*k).to_owned(),
            None => "NULL".to_owned(),
        }
    }

    /// Every tier of `query`: whole days from day rows, other whole hours from hour rows,
    /// records not yet folded from the raw table.
    async fn usage(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        query: &UsageQuery,
        rows: &mut UsageRows,
    ) -> Result<(), StoreError> {
        let folded = state(tx, &format!("{}.id", self.name)).await?.unwrap_or(0);
        let days_built = state(tx, &format!("{}.day", self.name)).await?;
        let (since, until) = query.hours();
        let days = match (query.interval, days_built) {
            (Some(Interval::Hour), _) | (_, None) => None,
            (_, Some(built)) => {
                let first = floor(since + DAY_US - 1, DAY_US);
                let end = floor(until, DAY_US).min(built);
                (first < end).then_some((first, end))
            }
        };
        match days {
            Some((first, end)) => {
                self.read(tx, query, Some("d"), (first, end), folded, rows)
                    .await?;
                self.read(tx, query, Some("h"), (since, first), folded, rows)
                    .await?;
                self.read(tx, query, Some("h"), (end, until), folded, rows)
                    .await?;
            }
            None => {
                self.read(tx, query, Some("h"), (since, until), folded, rows)
                    .await?;
            }
        }
        self.read(tx, query, None, (since, until), folded, rows)
            .await
    }
}

#[async_trait]
impl UsageStore for SqliteUsage {
    async fn roll(&self) -> Result<u64, StoreError> {
        let (path, folder) = (self.path.clone(), self.folder.clone());
        tokio::task::spawn_blocking(move || {
            let mut held = folder.lock().unwrap_or_else(PoisonError::into_inner);
            if held.is_none() {
                let db = rusqlite::Connection::open_with_flags(
                    &path,
                    rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                        | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(sqlite_error)?;
                db.busy_timeout(super::BUSY_TIMEOUT).map_err(sqlite_error)?;
                *held = Some(db);
            }
            let Some(db) = held.as_mut() else {
                return Ok(0);
            };
            let calls = calls_spec().roll(db)?;
            let models = models_spec().roll(db)?;
            Ok(calls + models)
        })
        .await
        .map_err(|err| StoreError::Unavailable(format!("folding usage stopped: {err}")))?
    }

    async fn record_model_use(&self, record: &ModelUse) -> Result<(), StoreError> {
        let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO model_usage (time, tenant_id, user_id, session_id, model, requests, \
             prompt_tokens, completion_tokens, cached_tokens, cost_micros) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .bind(to_micros(record.time))
        .bind(&record.tenant)
        .bind(&record.user)
        .bind(&record.session)
        .bind(&record.model)
        .bind(count(record.requests))
        .bind(count(record.prompt_tokens))
        .bind(count(record.completion_tokens))
        .bind(count(record.cached_tokens))
        .bind(count(record.cost_micros))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn usage(&self, query: &UsageQuery) -> Result<UsageRows, StoreError> {
        // One read transaction: what was folded and the rollups are read as of one moment.
        let mut tx = self.pool.begin().await.map_err(store_error)?;
        let mut rows = UsageRows::default();
        let read = async {
            calls_spec().usage(&mut tx, query, &mut rows).await?;
            models_spec().usage(&mut tx, query, &mut rows).await
        }
        .await;
        match read {
            Ok(()) => tx.commit().await.map_err(store_error)?,
            Err(err) => {
                let _ = tx.rollback().await;
                return Err(err);
            }
        }
        Ok(rows)
    }

    async fn purge_before(&self, before: SystemTime) -> Result<u64, StoreError> {
        let before = to_micros(before);
        let mut deleted = 0;
        for sql in [
            "DELETE FROM model_usage WHERE time < ?1",
            "DELETE FROM usage_calls WHERE (span = 'h' AND start + 3600000000 <= ?1) \
             OR (span = 'd' AND start + 86400000000 <= ?1)",
            "DELETE FROM usage_models WHERE (span = 'h' AND start + 3600000000 <= ?1) \
             OR (span = 'd' AND start + 86400000000 <= ?1)",
        ] {
            deleted += sqlx::query(sql)
                .bind(before)
                .execute(&self.pool)
                .await
                .map_err(store_error)?
                .rows_affected();
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use crate::store::usage::contract;

    /// The contract read three ways: nothing folded (all from the log), everything folded
    /// (days and hours), and folded with more records appended after (both at once).
    #[tokio::test]
    async fn sqlite_keeps_the_contract_folded_or_not() {
        let dir = tempfile::tempdir().expect("temp dir");
        let stores = crate::store::open_sqlite(&dir.path().join("state.db"))
            .await
            .expect("open");
        let usage = stores.usage();
        contract::holds(stores.audit().as_ref(), usage.as_ref()).await;
        while usage.roll().await.expect("roll") > 0 {}
        contract::check(usage.as_ref()).await;
        let days: i64 = sqlx::query_scalar("SELECT count(*) FROM usage_calls WHERE span = 'd'")
            .fetch_one(&stores.pool)
            .await
            .expect("count");
        assert!(days > 0, "whole days were built");
        stores.close().await;

        // Folded halfway: the first records rolled, the rest read from the log.
        let dir = tempfile::tempdir().expect("temp dir");
        let stores = crate::store::open_sqlite(&dir.path().join("state.db"))
            .await
            .expect("open");
        let usage = stores.usage();
        let audit = stores.audit();
        let records = contract::records();
        let (early, late) = records.split_at(9);
        for record in early {
            audit.append(record.clone()).await.expect("append");
        }
        for used in contract::model_uses() {
            usage.record_model_use(&used).await.expect("model use");
        }
        while usage.roll().await.expect("roll") > 0 {}
        for record in late {
            audit.append(record.clone()).await.expect("append");
        }
        contract::check(usage.as_ref()).await;
        stores.close().await;
    }
}

#[cfg(test)]
mod lock_tests {
    use crate::store::usage::contract;

    /// Folding ends its transaction whatever it found (an empty log included): another
    /// gateway on the same file appends and folds without waiting on a lock left behind.
    #[tokio::test]
    async fn folding_leaves_no_lock_on_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("state.db");
        let first = crate::store::open_sqlite(&path).await.expect("open");
        first.usage().roll().await.expect("roll");
        let records = contract::records();
        first
            .audit()
            .append(records[0].clone())
            .await
            .expect("append");
        let second = crate::store::open_sqlite(&path).await.expect("open");
        assert_eq!(second.usage().roll().await.expect("roll"), 1);
        let started = std::time::Instant::now();
        second
            .audit()
            .append(records[1].clone())
            .await
            .expect("append");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        first.close().await;
        second.close().await;
    }
}
