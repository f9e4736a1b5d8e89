//! Usage over a month of ten million calls in SQLite: the records are written straight into a
//! fresh state file (10 tenants, 200 users each keeping to 8 of 100 tools, 3 % of the calls held for a
//! confirmation, 3 % errors, durations spread from 1 ms to seconds), folded into the rollups
//! as the gateway folds them, then queried the ways the API and the page ask, with a tail of
//! records not yet folded. Beside each, the same sums from the log alone (no rollups): what
//! the rollups save.

use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use mcpgate::store::usage::{Dim, Interval, UsageQuery};

/// Calls appended after folding: read from the log by every query.
const TAIL: u64 = 20_000;
const DAYS: u64 = 30;
/// Queries are timed this many times; the median is kept.
const RUNS: usize = 5;

pub struct UsageResult {
    /// `SQLite` or `PostgreSQL`.
    pub store: &'static str,
    pub calls: u64,
    pub write: Duration,
    pub fold: Duration,
    pub file_bytes: u64,
    /// (what, with rollups, from the log alone)
    pub queries: Vec<(String, Duration, Option<Duration>)>,
}

/// A small, fixed pseudo-random sequence (xorshift): the same month every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The time of record `i` of `n` spread over `span` microseconds (in 128 bits: a month in
/// microseconds times ten million overflows 64).
fn at(span: i64, i: u64, n: u64) -> anyhow::Result<i64> {
    Ok(i64::try_from(
        i128::from(span) * i128::from(i) / i128::from(n.max(1)),
    )?)
}

fn micros(time: SystemTime) -> i64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// Writes the month into `path` (created by the gateway's own schema first).
async fn write_month(path: &std::path::Path, end: SystemTime, calls: u64) -> anyhow::Result<()> {
    let turns = calls / 10;
    mcpgate::store::open_sqlite(path).await?.close().await;
    let mut db = rusqlite::Connection::open(path)?;
    db.pragma_update(None, "synchronous", "OFF")?;
    let start = micros(end) - i64::try_from(DAYS * 86_400_000_000)?;
    let span = i64::try_from(DAYS * 86_400_000_000)?;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let outcomes = [
        "tool_error",
        "timeout",
        "upstream_error",
        "invalid_arguments",
    ];
    let tx = db.transaction()?;
    {
        let mut insert = tx.prepare(
            "INSERT INTO audit (time, request_id, tenant_id, user_id, session_id, server, tool, \
             decision, confirmation_id, outcome, duration_ms, argument_bytes, result_bytes) \
             VALUES (?1, ?2, ?3, ?4, 's', ?5, ?6, ?7, NULL, ?8, ?9, 64, ?10)",
        )?;
        for i in 0..calls + TAIL {
            let r = rng.next();
            let user = r % 200;
            let tenant = user / 20;
            // Each user keeps to eight tools of the hundred, the first most (as people do):
            // the k-th with probability about 2^-(k+1).
            let k = u64::from(((r >> 8) & 0xff).trailing_ones()).min(7);
            let tool_id = (user * 7 + k * 13) % 100;
            let (server, tool) = (tool_id / 10, tool_id % 10);
            let roll = (r >> 24) % 1000;
            let (decision, outcome) = match roll {
                0..=29 => ("pending", "confirmation_required"),
                30..=59 => ("allowed", outcomes[usize::try_from(roll % 4)?]),
                _ => ("allowed", "ok"),
            };
            let duration = 1 + ((r >> 32) % 1000) * ((r >> 42) % 8) * ((r >> 45) % 4 + 1) / 4;
            // Ascending in time with the ids, as the gateway appends; the tail after `end`'s
            // month starts again near its end.
            let time = if i < calls {
                start + at(span, i, calls)?
            } else {
                micros(end) - 60_000_000 + i64::try_from(i - calls)?
            };
            insert.execute(rusqlite::params![
                time,
                format!("r{i}"),
                format!("tenant-{tenant}"),
                format!("user-{user}"),
                format!("srv{server}"),
                format!("srv{server}.tool_{tool}"),
                decision,
                outcome,
                i64::try_from(duration)?,
                i64::try_from((r >> 50) % 20_000)?,
            ])?;
        }
        let mut turn = tx.prepare(
            "INSERT INTO model_usage (time, tenant_id, user_id, session_id, model, requests, \
             prompt_tokens, completion_tokens, cached_tokens, cost_micros) \
             VALUES (?1, ?2, ?3, 's', ?4, 2, ?5, 300, 0, ?6)",
        )?;
        for i in 0..turns {
            let r = rng.next();
            let user = r % 200;
            let prompt = 1_000 + (r >> 20) % 9_000;
            turn.execute(rusqlite::params![
                start + at(span, i, turns)?,
                format!("tenant-{}", user / 20),
                format!("user-{user}"),
                ["big", "small", "tools"][usize::try_from((r >> 12) % 3)?],
                i64::try_from(prompt)?,
                i64::try_from(prompt * 3)?,
            ])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The median of `RUNS` timings of `work`.
async fn timed<F, Fut, T>(mut work: F) -> anyhow::Result<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut times = Vec::new();
    for _ in 0..RUNS {
        let started = Instant::now();
        work().await?;
        times.push(started.elapsed());
    }
    times.sort();
    Ok(times[RUNS / 2])
}

pub async fn run(dir: &std::path::Path, calls: u64) -> anyhow::Result<UsageResult> {
    let path = dir.join("usage.db");
    let _ = std::fs::remove_file(&path);
    let end = SystemTime::now();
    let started = Instant::now();
    write_month(&path, end, calls)
        .await
        .context("writing the month")?;
    let write = started.elapsed();

    // Fold the month (not the tail) as the gateway would, chunk after chunk.
    let db = rusqlite::Connection::open(&path)?;
    db.execute(
        "CREATE TEMP TABLE tail AS SELECT * FROM audit WHERE id > ?1",
        [i64::try_from(calls)?],
    )?;
    db.execute("DELETE FROM audit WHERE id > ?1", [i64::try_from(calls)?])?;
    let stores = mcpgate::store::open_sqlite(&path).await?;
    let usage = stores.usage();
    let started = Instant::now();
    while usage.roll().await? > 0 {}
    let fold = started.elapsed();
    db.execute("INSERT INTO audit SELECT * FROM temp.tail", [])?;
    drop(db);

    let raw = Raw::Sqlite(rusqlite::Connection::open(&path)?);
    counted(&usage, end, calls + TAIL).await?;
    let queries = measure(&usage, &raw, end).await?;
    stores.close().await;
    let file_bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    Ok(UsageResult {
        store: "SQLite",
        calls,
        write,
        fold,
        file_bytes,
        queries,
    })
}

/// Every record written is counted in the month: what is measured is the whole month.
async fn counted(
    usage: &std::sync::Arc<dyn mcpgate::store::UsageStore>,
    end: SystemTime,
    expected: u64,
) -> anyhow::Result<()> {
    let query = UsageQuery {
        since: end - Duration::from_secs(DAYS * 86_400 + 3_600),
        until: end + Duration::from_secs(3_600),
        group_by: Vec::new(),
        interval: None,
        tenant: None,
        user: None,
    };
    let rows = usage.usage(&query).await?;
    let found: u64 = rows.calls.values().map(|s| s.calls).sum();
    anyhow::ensure!(
        found == expected,
        "the month holds {found} records, not {expected}"
    );
    Ok(())
}

/// Where the same sums are read from the log alone.
enum Raw {
    Sqlite(rusqlite::Connection),
    Postgres(sqlx::PgPool),
}

impl Raw {
    /// Sums by `dim` over `[since, until)` from the log: a scan of every record in range.
    async fn time(
        &self,
        dim: Dim,
        since: SystemTime,
        until: SystemTime,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let rows = match self {
            Raw::Sqlite(db) => {
                let column = if dim == Dim::User { "user_id" } else { "tool" };
                let sql = format!(
                    "SELECT {column}, outcome, count(*), sum(duration_ms), sum(result_bytes) \
                     FROM audit WHERE time >= ?1 AND time < ?2 GROUP BY 1, 2"
                );
                let mut statement = db.prepare(&sql)?;
                statement
                    .query_map([micros(since), micros(until)], |row| row.get::<_, i64>(2))?
                    .count()
            }
            Raw::Postgres(pool) => {
                let column = if dim == Dim::User {
                    "user_name"
                } else {
                    "tool"
                };
                // Built from the two names above only.
                let sql = format!(
                    "SELECT {column}, outcome, count(*), sum(duration_ms), sum(result_bytes) \
                     FROM mcpgate_audit WHERE time_us >= $1 AND time_us < $2 GROUP BY 1, 2"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(micros(since))
                    .bind(micros(until))
                    .fetch_all(pool)
                    .await?
                    .len()
            }
        };
        anyhow::ensure!(rows > 0, "the log answered nothing");
        Ok(started.elapsed())
    }
}

/// The queries the API and the page ask, each timed with the rollups (median of [`RUNS`]) and,
/// for two of them, from the log alone.
async fn measure(
    usage: &std::sync::Arc<dyn mcpgate::store::UsageStore>,
    raw: &Raw,
    end: SystemTime,
) -> anyhow::Result<Vec<(String, Duration, Option<Duration>)>> {
    let month = |group_by: Vec<Dim>, interval: Option<Interval>, days: u64| UsageQuery {
        since: end - Duration::from_secs(days * 86_400),
        until: end,
        group_by,
        interval,
        tenant: None,
        user: None,
    };
    let cases = [
        ("a month by tool", month(vec![Dim::Tool], None, 30), true),
        ("a month by user", month(vec![Dim::User], None, 30), true),
        (
            "a month by tenant and user",
            month(vec![Dim::Tenant, Dim::User], None, 30),
            false,
        ),
        (
            "a month by day (the page's chart)",
            month(vec![], Some(Interval::Day), 30),
            false,
        ),
        ("a month by model", month(vec![Dim::Model], None, 30), false),
        (
            "a week by hour and server",
            month(vec![Dim::Server], Some(Interval::Hour), 7),
            false,
        ),
        (
            "one tenant's month by user",
            UsageQuery {
                tenant: Some("tenant-3".into()),
                ..month(vec![Dim::User], None, 30)
            },
            false,
        ),
    ];
    let mut queries = Vec::new();
    for (what, query, compare) in cases {
        let with = timed(|| {
            let (usage, query) = (usage.clone(), query.clone());
            async move { Ok(usage.usage(&query).await?) }
        })
        .await?;
        let without = if compare {
            Some(
                raw.time(query.group_by[0], query.since, query.until)
                    .await?,
            )
        } else {
            None
        };
        queries.push((what.to_owned(), with, without));
    }
    Ok(queries)
}

/// The admin connection to the machine's PostgreSQL (loopback, trust), where the PostgreSQL
/// part makes a database of its own.
const POSTGRES_ADMIN: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// The same month in PostgreSQL (written by PostgreSQL itself from `generate_series`), folded
/// as the gateway folds it there (by the hour, two hours behind), and the same queries; the
/// last two hours are read from the log by every query. `None` when no PostgreSQL answers.
pub async fn run_postgres(calls: u64) -> anyhow::Result<Option<UsageResult>> {
    let Ok(admin) = sqlx::PgPool::connect(POSTGRES_ADMIN).await else {
        eprintln!("bench: no PostgreSQL on 127.0.0.1:5432; its usage part is skipped");
        return Ok(None);
    };
    let name = format!("mcpgate_bench_{}", mcpgate::digest::random_hex(6));
    // The name is ours: a fixed word and hex digits.
    sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&admin)
        .await?;
    let result = postgres_month(&name, calls).await;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP DATABASE {name} WITH (FORCE)"
    )))
    .execute(&admin)
    .await?;
    admin.close().await;
    result.map(Some)
}

async fn postgres_month(name: &str, calls: u64) -> anyhow::Result<UsageResult> {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&format!("postgres://postgres@127.0.0.1:5432/{name}"))
        .await?;
    mcpgate::store::postgres::migrate(&pool).await?;
    let end = SystemTime::now();
    let span = i64::try_from(DAYS * 86_400_000_000)?;
    let start = micros(end) - span;
    let started = Instant::now();
    // The distribution of the SQLite part: users keep to 8 of 100 tools, the first most.
    // One connection: the seed holds for its session.
    let mut conn = pool.acquire().await?;
    sqlx::query("SELECT setseed(0.42)")
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "INSERT INTO mcpgate_audit (time_us, instance, request_id, tenant, user_name, session, \
            server, tool, decision, outcome, duration_ms, argument_bytes, result_bytes) \
         SELECT $1 + (($2::numeric * g) / $3)::bigint, 'bench', 'r' || g, 'tenant-' || (u / 20), 'user-' || u, 's', \
            'srv' || (t / 10), 'srv' || (t / 10) || '.tool_' || (t % 10), \
            CASE WHEN r < 0.03 THEN 'pending' ELSE 'allowed' END, \
            CASE WHEN r < 0.03 THEN 'confirmation_required' WHEN r < 0.06 THEN 'tool_error' \
                 ELSE 'ok' END, \
            1 + (random() * 1000)::bigint * (random() * 8)::bigint / 4, 64, \
            (random() * 20000)::bigint \
         FROM (SELECT g, u, r, (u * 7 + 13 * least(7, floor(-ln(1 - random()) / ln(2))))::bigint \
                 % 100 AS t \
               FROM (SELECT g, (random() * 199)::bigint AS u, random() AS r \
                     FROM generate_series(0::bigint, $3 - 1) AS g) AS a) AS b",
    )
    .bind(start)
    .bind(span)
    .bind(i64::try_from(calls)?)
    .execute(&mut *conn)
    .await?;
    drop(conn);
    let turns = i64::try_from(calls / 10)?;
    sqlx::query(
        "INSERT INTO mcpgate_model_usage (time_us, tenant, user_name, session, model, requests, \
            prompt_tokens, completion_tokens, cached_tokens, cost_micros) \
         SELECT $1 + (($2::numeric * g) / $3)::bigint, 'tenant-' || (u / 20), 'user-' || u, 's', \
            (ARRAY['big', 'small', 'tools'])[1 + g % 3], 2, p, 300, 0, p * 3 \
         FROM (SELECT g, (g * 7919) % 200 AS u, 1000 + (g * 104729) % 9000 AS p \
               FROM generate_series(0::bigint, $3 - 1) AS g) AS a",
    )
    .bind(start)
    .bind(span)
    .bind(turns)
    .execute(&pool)
    .await?;
    sqlx::query("ANALYZE").execute(&pool).await?;
    let write = started.elapsed();
    let written: i64 = sqlx::query_scalar("SELECT count(*) FROM mcpgate_audit")
        .fetch_one(&pool)
        .await?;
    anyhow::ensure!(
        u64::try_from(written)? == calls,
        "{written} of {calls} records written"
    );
    let usage: std::sync::Arc<dyn mcpgate::store::UsageStore> =
        std::sync::Arc::new(mcpgate::store::postgres::PgUsage::new(pool.clone()));
    let started = Instant::now();
    while usage.roll().await? > 0 {}
    let fold = started.elapsed();
    counted(&usage, end, calls).await?;
    let queries = measure(&usage, &Raw::Postgres(pool.clone()), end).await?;
    let file_bytes: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
        .fetch_one(&pool)
        .await?;
    pool.close().await;
    Ok(UsageResult {
        store: "PostgreSQL",
        calls,
        write,
        fold,
        file_bytes: u64::try_from(file_bytes)?,
        queries,
    })
}
