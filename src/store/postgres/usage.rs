//! Usage from the shared audit log and model use in PostgreSQL, with hourly and daily
//! rollups like SQLite's (see [`crate::store::usage`]), folded differently: ids in PostgreSQL
//! commit out of order across instances, so folding goes by time. An hour is folded once it
//! ended [`FOLD_LAG`] ago (records carry the time their call started and are written when it
//! ends, so a record later than that is not counted); one instance folds each hour, under a
//! row lock on the fold's state. A query reads whole days and hours from the rollups up to
//! the folded mark and the rest from the log over the time index, in one snapshot.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, PgPool, Postgres, Row, Transaction};

use super::{pg_text, unavailable};
use crate::store::{
    StoreError,
    clock::to_micros,
    usage::{
        BUCKETS, CallSums, Class, DAY_US, Dim, HOUR_US, Interval, Key, ModelSums, ModelUse,
        UsageQuery, UsageRows, UsageStore, bucket_sql,
    },
};

/// How long after an hour ends it is folded: longer than any call runs.
pub const FOLD_LAG: Duration = Duration::from_secs(2 * 3600);
/// Hours folded per [`UsageStore::roll`] at most (each one statement).
const HOURS_PER_ROLL: usize = 24;

#[derive(Debug, Clone)]
pub struct PgUsage {
    pool: PgPool,
}

impl PgUsage {
    pub fn new(pool: PgPool) -> PgUsage {
        PgUsage { pool }
    }
}

fn failed(err: sqlx::Error) -> StoreError {
    unavailable(&err)
}

/// Built only from this module's constants (table and column names, numbers); values bound.
fn safe(sql: String) -> AssertSqlSafe<String> {
    AssertSqlSafe(sql)
}

fn floor(time: i64, unit: i64) -> i64 {
    time - time.rem_euclid(unit)
}

/// One part of usage: its log, its rollup table, keys and sums.
struct Spec {
    name: &'static str,
    raw: &'static str,
    rollup: &'static str,
    /// (column, expression over the log)
    keys: Vec<(&'static str, String)>,
    /// (column, expression over the log)
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
        raw: "mcpgate_audit",
        rollup: "mcpgate_usage_calls",
        keys: vec![
            ("tenant", "tenant".into()),
            ("user_name", "user_name".into()),
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
        raw: "mcpgate_model_usage",
        rollup: "mcpgate_usage_models",
        keys: vec![
            ("tenant", "tenant".into()),
            ("user_name", "user_name".into()),
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

/// The rollup tables and the folds' state, beside the schema (`CREATE ... IF NOT EXISTS`).
pub(super) fn schema() -> String {
    let mut out = String::from(
        "CREATE TABLE IF NOT EXISTS mcpgate_usage_state (\
         spec text PRIMARY KEY, hour_mark bigint, day_mark bigint);\n",
    );
    for spec in [calls_spec(), models_spec()] {
        let keys: Vec<String> = spec
            .keys
            .iter()
            .map(|(k, _)| format!("{k} text NOT NULL"))
            .collect();
        let sums: Vec<String> = spec
            .sums
            .iter()
            .map(|(s, _)| format!("{s} bigint NOT NULL"))
            .collect();
        let names: Vec<&str> = spec.keys.iter().map(|(k, _)| *k).collect();
        out.push_str(&format!(
            "CREATE TABLE IF NOT EXISTS {} (span text NOT NULL, start bigint NOT NULL, {}, {}, \
             PRIMARY KEY (span, start, {}));\n",
            spec.rollup,
            keys.join(", "),
            sums.join(", "),
            names.join(", ")
        ));
    }
    out
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
            .map(|(s, _)| format!("{s} = {r}.{s} + excluded.{s}", r = self.rollup))
            .collect();
        format!(
            "ON CONFLICT (span, start, {}) DO UPDATE SET {}",
            keys.join(", "),
            adds.join(", ")
        )
    }

    /// Folds the log's hour `$1` (to `$2`).
    fn fold_hour(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(_, e)| e.as_str()).collect();
        let sums: Vec<String> = self
            .sums
            .iter()
            .map(|(_, e)| format!("sum({e})::bigint"))
            .collect();
        let group: Vec<String> = (1..=self.keys.len()).map(|i| (i + 2).to_string()).collect();
        format!(
            "INSERT INTO {} ({}) SELECT 'h', $1::bigint, {}, {} FROM {} \
             WHERE time_us >= $1 AND time_us < $2 GROUP BY {} {}",
            self.rollup,
            self.columns(),
            keys.join(", "),
            sums.join(", "),
            self.raw,
            group.join(", "),
            self.upsert()
        )
    }

    /// Builds day `$1` (to `$2`) from its hour rows.
    fn fold_day(&self) -> String {
        let keys: Vec<&str> = self.keys.iter().map(|(k, _)| *k).collect();
        let sums: Vec<String> = self
            .sums
            .iter()
            .map(|(s, _)| format!("sum({s})::bigint"))
            .collect();
        format!(
            "INSERT INTO {r} ({}) SELECT 'd', $1::bigint, {}, {} FROM {r} \
             WHERE span = 'h' AND start >= $1 AND start < $2 GROUP BY {} {}",
            self.columns(),
            keys.join(", "),
            sums.join(", "),
            keys.join(", "),
            self.upsert(),
            r = self.rollup,
        )
    }

    /// Folds the hours that ended [`FOLD_LAG`] before PostgreSQL's clock, a bounded number,
    /// then the days whose hours are all folded; how many hours it folded.
    async fn roll(&self, tx: &mut Transaction<'_, Postgres>) -> Result<u64, StoreError> {
        sqlx::query("INSERT INTO mcpgate_usage_state (spec) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(self.name)
            .execute(&mut **tx)
            .await
            .map_err(failed)?;
        // The row lock: one instance folds at a time; the others wait, then find it done.
        let (hour_mark, day_mark): (Option<i64>, Option<i64>) = sqlx::query_as(
            "SELECT hour_mark, day_mark FROM mcpgate_usage_state WHERE spec = $1 FOR UPDATE",
        )
        .bind(self.name)
        .fetch_one(&mut **tx)
        .await
        .map_err(failed)?;
        let now: i64 =
            sqlx::query_scalar("SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
                .fetch_one(&mut **tx)
                .await
                .map_err(failed)?;
        let lag = i64::try_from(FOLD_LAG.as_micros()).unwrap_or(i64::MAX);
        let foldable = floor(now.saturating_sub(lag), HOUR_US);
        let mut hour = match hour_mark {
            Some(mark) => mark,
            None => match self.first_at(tx, i64::MIN).await? {
                Some(first) => floor(first, HOUR_US),
                None => return Ok(0),
            },
        };
        let first_hour = hour;
        let mut folded = 0;
        while hour < foldable && folded < HOURS_PER_ROLL {
            // Hours without records are skipped in one step.
            match self.first_at(tx, hour).await? {
                Some(next) if floor(next, HOUR_US) < foldable => {
                    hour = hour.max(floor(next, HOUR_US));
                }
                _ => {
                    hour = foldable;
                    break;
                }
            }
            sqlx::query(safe(self.fold_hour()))
                .bind(hour)
                .bind(hour + HOUR_US)
                .execute(&mut **tx)
                .await
                .map_err(failed)?;
            hour += HOUR_US;
            folded += 1;
        }
        let mut day = day_mark.unwrap_or_else(|| floor(first_hour, DAY_US));
        while day + DAY_US <= hour {
            sqlx::query(safe(self.fold_day()))
                .bind(day)
                .bind(day + DAY_US)
                .execute(&mut **tx)
                .await
                .map_err(failed)?;
            day += DAY_US;
            let next: Option<i64> = sqlx::query_scalar(safe(format!(
                "SELECT min(start) FROM {} WHERE span = 'h' AND start >= $1",
                self.rollup
            )))
            .bind(day)
            .fetch_one(&mut **tx)
            .await
            .map_err(failed)?;
            day = day
                .max(floor(next.unwrap_or(hour), DAY_US))
                .min(floor(hour, DAY_US));
        }
        sqlx::query("UPDATE mcpgate_usage_state SET hour_mark = $2, day_mark = $3 WHERE spec = $1")
            .bind(self.name)
            .bind(hour)
            .bind(day)
            .execute(&mut **tx)
            .await
            .map_err(failed)?;
        Ok(folded as u64)
    }

    /// The time of the log's first record at or after `from`.
    async fn first_at(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        from: i64,
    ) -> Result<Option<i64>, StoreError> {
        sqlx::query_scalar(safe(format!(
            "SELECT min(time_us) FROM {} WHERE time_us >= $1",
            self.raw
        )))
        .bind(from)
        .fetch_one(&mut **tx)
        .await
        .map_err(failed)
    }

    /// The select list of a query over `raw` rows or rollup rows, and its GROUP BY.
    fn select(&self, query: &UsageQuery, raw: bool) -> (Vec<String>, String) {
        let key = |column: &str| match self.keys.iter().find(|(k, _)| *k == column) {
            Some((_, e)) if raw => e.clone(),
            Some((k, _)) => (*k).to_owned(),
            None => "NULL::text".to_owned(),
        };
        let mut select: Vec<String> = query
            .group_by
            .iter()
            .map(|d| {
                key(match d {
                    Dim::Tenant => "tenant",
                    Dim::User => "user_name",
                    Dim::Server => "server",
                    Dim::Tool => "tool",
                    Dim::Model => "model",
                })
            })
            .collect();
        let time = if raw { "time_us" } else { "start" };
        select.push(match query.interval {
            Some(i) => format!("{time} - ({time} % {})", i.micros()),
            None => "NULL::bigint".to_owned(),
        });
        if self.name == "calls" {
            select.push(key("class"));
            select.push("outcome".to_owned());
        }
        let group: Vec<String> = (1..=select.len()).map(|i| i.to_string()).collect();
        for (s, e) in &self.sums {
            select.push(if raw {
                format!("sum({e})::bigint")
            } else {
                format!("sum({s})::bigint")
            });
        }
        (select, group.join(", "))
    }

    /// Sums `query` over `span` rows starting in `[from, to)`, or (`None`) log rows in it.
    async fn read(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        query: &UsageQuery,
        span: Option<&str>,
        (from, to): (i64, i64),
        rows: &mut UsageRows,
    ) -> Result<(), StoreError> {
        if from >= to {
            return Ok(());
        }
        let (select, group) = self.select(query, span.is_none());
        let source = match span {
            Some(span) => format!(
                "{} WHERE span = '{span}' AND start >= $1 AND start < $2",
                self.rollup
            ),
            None => format!("{} WHERE time_us >= $1 AND time_us < $2", self.raw),
        };
        let sql = format!(
            "SELECT {} FROM {source} AND ($3::text IS NULL OR tenant = $3) \
             AND ($4::text IS NULL OR user_name = $4) GROUP BY {group}",
            select.join(", ")
        );
        let found = sqlx::query(safe(sql))
            .bind(from)
            .bind(to)
            .bind(query.tenant.as_deref())
            .bind(query.user.as_deref())
            .fetch_all(&mut **tx)
            .await
            .map_err(failed)?;
        let dims = query.group_by.len();
        let calls = self.name == "calls";
        for row in &found {
            let key = Key {
                values: (0..dims)
                    .map(|i| row.try_get::<Option<String>, _>(i))
                    .collect::<Result<_, _>>()
                    .map_err(failed)?,
                time: row.try_get(dims).map_err(failed)?,
            };
            let first = if calls { dims + 3 } else { dims + 1 };
            let sum = |i: usize| -> Result<u64, StoreError> {
                let value: Option<i64> = row.try_get(first + i).map_err(failed)?;
                Ok(u64::try_from(value.unwrap_or(0)).unwrap_or(0))
            };
            if calls {
                let class: String = row.try_get(dims + 1).map_err(failed)?;
                let outcome: String = row.try_get(dims + 2).map_err(failed)?;
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

    /// Whole days from day rows and hours from hour rows below the folded marks, the rest
    /// from the log.
    async fn usage(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        query: &UsageQuery,
        rows: &mut UsageRows,
    ) -> Result<(), StoreError> {
        let marks: Option<(Option<i64>, Option<i64>)> =
            sqlx::query_as("SELECT hour_mark, day_mark FROM mcpgate_usage_state WHERE spec = $1")
                .bind(self.name)
                .fetch_optional(&mut **tx)
                .await
                .map_err(failed)?;
        let (hour_mark, day_mark) = marks.unwrap_or_default();
        let (since, until) = query.hours();
        let folded_to = hour_mark.unwrap_or(since).clamp(since, until);
        let days = match (query.interval, day_mark) {
            (Some(Interval::Hour), _) | (_, None) => None,
            (_, Some(built)) => {
                let first = floor(since + DAY_US - 1, DAY_US);
                let end = floor(folded_to, DAY_US).min(built);
                (first < end).then_some((first, end))
            }
        };
        match days {
            Some((first, end)) => {
                self.read(tx, query, Some("d"), (first, end), rows).await?;
                self.read(tx, query, Some("h"), (since, first), rows)
                    .await?;
                self.read(tx, query, Some("h"), (end, folded_to), rows)
                    .await?;
            }
            None => {
                self.read(tx, query, Some("h"), (since, folded_to), rows)
                    .await?;
            }
        }
        self.read(tx, query, None, (folded_to, until), rows).await
    }
}

#[async_trait]
impl UsageStore for PgUsage {
    async fn roll(&self) -> Result<u64, StoreError> {
        let mut folded = 0;
        for spec in [calls_spec(), models_spec()] {
            let mut tx = self.pool.begin().await.map_err(failed)?;
            match spec.roll(&mut tx).await {
                Ok(hours) => {
                    tx.commit().await.map_err(failed)?;
                    folded += hours;
                }
                Err(err) => {
                    let _ = tx.rollback().await;
                    return Err(err);
                }
            }
        }
        Ok(folded)
    }

    async fn record_model_use(&self, record: &ModelUse) -> Result<(), StoreError> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        sqlx::query(
            "INSERT INTO mcpgate_model_usage (time_us, tenant, user_name, session, model, \
             requests, prompt_tokens, completion_tokens, cached_tokens, cost_micros) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(to_micros(record.time))
        .bind(pg_text(&record.tenant).as_ref())
        .bind(pg_text(&record.user).as_ref())
        .bind(pg_text(&record.session).as_ref())
        .bind(pg_text(&record.model).as_ref())
        .bind(n(record.requests))
        .bind(n(record.prompt_tokens))
        .bind(n(record.completion_tokens))
        .bind(n(record.cached_tokens))
        .bind(n(record.cost_micros))
        .execute(&self.pool)
        .await
        .map_err(failed)?;
        Ok(())
    }

    async fn usage(&self, query: &UsageQuery) -> Result<UsageRows, StoreError> {
        // One snapshot: the marks and the rows they describe are read as of one moment.
        let mut tx = self.pool.begin().await.map_err(failed)?;
        let mut rows = UsageRows::default();
        let read = async {
            sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            calls_spec().usage(&mut tx, query, &mut rows).await?;
            models_spec().usage(&mut tx, query, &mut rows).await
        }
        .await;
        let _ = tx.rollback().await;
        read.map(|()| rows)
    }

    async fn purge_before(&self, before: SystemTime) -> Result<u64, StoreError> {
        let before = to_micros(before);
        let mut deleted = 0;
        for sql in [
            "DELETE FROM mcpgate_model_usage WHERE time_us < $1",
            "DELETE FROM mcpgate_usage_calls WHERE (span = 'h' AND start + 3600000000 <= $1) \
             OR (span = 'd' AND start + 86400000000 <= $1)",
            "DELETE FROM mcpgate_usage_models WHERE (span = 'h' AND start + 3600000000 <= $1) \
             OR (span = 'd' AND start + 86400000000 <= $1)",
        ] {
            deleted += sqlx::query(sql)
                .bind(before)
                .execute(&self.pool)
                .await
                .map_err(failed)?
                .rows_affected();
        }
        Ok(deleted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::usage::contract;

    /// The contract from the log alone, then folded (days and hours), then with a record
    /// appended after folding (read from the log: its hour is past the mark).
    #[tokio::test]
    async fn postgres_keeps_the_usage_contract_folded_or_not() {
        let scratch = super::super::scratch::Database::create("usage").await;
        let pool = scratch.pool().await;
        super::super::migrate(&pool).await.expect("schema");
        let audit = super::super::PgAudit::new(
            pool.clone(),
            "a",
            crate::config::AuditSync::Batched,
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(5),
        );
        let usage = PgUsage::new(pool.clone());
        contract::holds(&audit, &usage).await;
        // Two instances fold at once: each hour once.
        let other = PgUsage::new(scratch.pool().await);
        loop {
            let (a, b) = tokio::join!(usage.roll(), other.roll());
            if a.expect("roll") + b.expect("roll") == 0 {
                break;
            }
        }
        let days: i64 =
            sqlx::query_scalar("SELECT count(*) FROM mcpgate_usage_calls WHERE span = 'd'")
                .fetch_one(&pool)
                .await
                .expect("count");
        assert!(days > 0, "whole days were built");
        contract::check(&usage).await;
        pool.close().await;
        scratch.drop_it().await;
    }
}
