//! Usage from the shared audit log and model use in PostgreSQL, summed from the rows at each
//! query over the time index (no rollups here yet: a month of ten million calls is read in
//! seconds, not under one).

use std::time::SystemTime;

use async_trait::async_trait;
use sqlx::{AssertSqlSafe, PgPool, Row};

use super::{pg_text, unavailable};
use crate::store::{
    StoreError,
    clock::to_micros,
    usage::{
        BUCKETS, CallSums, Class, Dim, Key, LATENCY_BOUNDS_MS, ModelSums, ModelUse, UsageQuery,
        UsageRows, UsageStore,
    },
};

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

/// The select list and group of one query: dimensions (or NULL), the time bucket, then what
/// the part adds (class and outcome for calls).
fn head(query: &UsageQuery, column: impl Fn(Dim) -> Option<&'static str>) -> Vec<String> {
    let mut select: Vec<String> = query
        .group_by
        .iter()
        .map(|d| column(*d).map_or("NULL::text".to_owned(), str::to_owned))
        .collect();
    select.push(match query.interval {
        Some(i) => format!("time_us - (time_us % {})", i.micros()),
        None => "NULL::bigint".to_owned(),
    });
    select
}

fn key(row: &sqlx::postgres::PgRow, dims: usize) -> Result<Key, StoreError> {
    Ok(Key {
        values: (0..dims)
            .map(|i| row.try_get::<Option<String>, _>(i))
            .collect::<Result<_, _>>()
            .map_err(failed)?,
        time: row.try_get(dims).map_err(failed)?,
    })
}

fn count(row: &sqlx::postgres::PgRow, i: usize) -> Result<u64, StoreError> {
    let value: Option<i64> = row.try_get(i).map_err(failed)?;
    Ok(u64::try_from(value.unwrap_or(0)).unwrap_or(0))
}

#[async_trait]
impl UsageStore for PgUsage {
    async fn roll(&self) -> Result<u64, StoreError> {
        Ok(0)
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
        let (since, until) = query.hours();
        let dims = query.group_by.len();
        let mut rows = UsageRows::default();
        let filter = "time_us >= $1 AND time_us < $2 \
            AND ($3::text IS NULL OR tenant = $3) AND ($4::text IS NULL OR user_name = $4)";

        let mut select = head(query, |d| match d {
            Dim::Tenant => Some("tenant"),
            Dim::User => Some("user_name"),
            Dim::Server => Some("server"),
            Dim::Tool => Some("tool"),
            Dim::Model => None,
        });
        select.push(Class::SQL.to_owned());
        select.push("outcome".to_owned());
        let group: Vec<String> = (1..=select.len()).map(|i| i.to_string()).collect();
        select.push("count(*)".into());
        select.push("sum(duration_ms)::bigint".into());
        select.push("sum(result_bytes)::bigint".into());
        for i in 0..BUCKETS {
            let low = if i == 0 { 0 } else { LATENCY_BOUNDS_MS[i - 1] };
            let high = LATENCY_BOUNDS_MS
                .get(i)
                .map_or(String::new(), |h| format!(" AND duration_ms < {h}"));
            select.push(format!(
                "count(*) FILTER (WHERE decision = 'allowed' AND duration_ms >= {low}{high})"
            ));
        }
        // Built from this module's constants only; values are bound.
        let sql = format!(
            "SELECT {} FROM mcpgate_audit WHERE {filter} GROUP BY {}",
            select.join(", "),
            group.join(", ")
        );
        let found = sqlx::query(AssertSqlSafe(sql))
            .bind(since)
            .bind(until)
            .bind(query.tenant.as_deref())
            .bind(query.user.as_deref())
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?;
        for row in &found {
            let class: String = row.try_get(dims + 1).map_err(failed)?;
            let outcome: String = row.try_get(dims + 2).map_err(failed)?;
            let mut sums = CallSums {
                calls: count(row, dims + 3)?,
                duration_ms: count(row, dims + 4)?,
                result_bytes: count(row, dims + 5)?,
                ..CallSums::default()
            };
            for (i, bucket) in sums.buckets.iter_mut().enumerate() {
                *bucket = count(row, dims + 6 + i)?;
            }
            rows.add_calls(key(row, dims)?, Class::parse(&class), outcome, &sums);
        }

        let mut select = head(query, |d| match d {
            Dim::Tenant => Some("tenant"),
            Dim::User => Some("user_name"),
            Dim::Model => Some("model"),
            Dim::Server | Dim::Tool => None,
        });
        let group: Vec<String> = (1..=select.len()).map(|i| i.to_string()).collect();
        select.push("count(*)".into());
        for column in [
            "requests",
            "prompt_tokens",
            "completion_tokens",
            "cached_tokens",
            "cost_micros",
        ] {
            select.push(format!("sum({column})::bigint"));
        }
        let sql = format!(
            "SELECT {} FROM mcpgate_model_usage WHERE {filter} GROUP BY {}",
            select.join(", "),
            group.join(", ")
        );
        let found = sqlx::query(AssertSqlSafe(sql))
            .bind(since)
            .bind(until)
            .bind(query.tenant.as_deref())
            .bind(query.user.as_deref())
            .fetch_all(&self.pool)
            .await
            .map_err(failed)?;
        for row in &found {
            let sums = ModelSums {
                turns: count(row, dims + 1)?,
                requests: count(row, dims + 2)?,
                prompt_tokens: count(row, dims + 3)?,
                completion_tokens: count(row, dims + 4)?,
                cached_tokens: count(row, dims + 5)?,
                cost_micros: count(row, dims + 6)?,
            };
            rows.add_models(key(row, dims)?, &sums);
        }
        Ok(rows)
    }

    async fn purge_before(&self, before: SystemTime) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM mcpgate_model_usage WHERE time_us < $1")
            .bind(to_micros(before))
            .execute(&self.pool)
            .await
            .map_err(failed)?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::usage::contract;

    #[tokio::test]
    async fn postgres_keeps_the_usage_contract() {
        let scratch = super::super::scratch::Database::create("usage").await;
        let pool = scratch.pool().await;
        super::super::migrate(&pool).await.expect("schema");
        let audit = super::super::PgAudit::new(
            pool.clone(),
            "a",
            std::time::Duration::from_secs(5),
            std::time::Duration::from_secs(5),
        );
        contract::holds(&audit, &PgUsage::new(pool.clone())).await;
        pool.close().await;
        scratch.drop_it().await;
    }
}
