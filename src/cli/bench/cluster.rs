//! The three-instance run: a Redis and a PostgreSQL of the benchmark's own (Debian's
//! `redis-server`, `initdb` and `pg_ctl`, on free loopback ports in the work folder), three
//! gateways sharing them, and what one call costs in Redis commands and PostgreSQL rows.

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use anyhow::{Context as _, bail};
use serde_json::Value;

use super::procs::{self, Proc};

/// The stores the instances share; stopped by [`Stores::stop`] (PostgreSQL also on drop).
pub struct Stores {
    pub redis_url: String,
    pub database_url: String,
    redis: Option<Proc>,
    pg_data: PathBuf,
}

fn pg_bin(name: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop()
}

/// `command`, as the `postgres` user when this runs as root (which `initdb` refuses).
fn as_postgres(command: &mut tokio::process::Command) -> anyhow::Result<()> {
    if nix::unistd::geteuid().is_root() {
        let user = nix::unistd::User::from_name("postgres")?
            .context("a `postgres` user (Debian's postgresql package makes it)")?;
        command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
    Ok(())
}

fn hand_to_postgres(path: &Path) -> anyhow::Result<()> {
    if nix::unistd::geteuid().is_root()
        && let Some(user) = nix::unistd::User::from_name("postgres")?
    {
        nix::unistd::chown(path, Some(user.uid), Some(user.gid))?;
    }
    Ok(())
}

async fn pg_ctl(data: &Path, args: &[&str]) -> anyhow::Result<()> {
    let mut command = tokio::process::Command::new(pg_bin("pg_ctl").context("pg_ctl")?);
    command
        .arg("-D")
        .arg(data)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    as_postgres(&mut command)?;
    if !command.status().await?.success() {
        bail!("pg_ctl {args:?} failed");
    }
    Ok(())
}

impl Stores {
    /// Starts both in `dir`; `None` when Redis or PostgreSQL is not installed.
    pub async fn start(dir: &Path) -> anyhow::Result<Option<Stores>> {
        let Some(initdb) = pg_bin("initdb") else {
            return Ok(None);
        };
        if which("redis-server").is_none() {
            return Ok(None);
        }
        std::fs::create_dir_all(dir)?;
        let redis_port = procs::free_port()?;
        let redis = procs::spawn(
            "redis",
            &[
                "redis-server".into(),
                "--port".into(),
                redis_port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--save".into(),
                String::new(),
                "--appendonly".into(),
                "no".into(),
                "--dir".into(),
                dir.display().to_string(),
            ],
            &[],
            &dir.join("redis.log"),
        )?;
        let pg = dir.join("pg");
        std::fs::create_dir_all(&pg)?;
        hand_to_postgres(dir)?;
        hand_to_postgres(&pg)?;
        let data = pg.join("data");
        let mut init = tokio::process::Command::new(initdb);
        init.arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_postgres(&mut init)?;
        if !init.status().await?.success() {
            bail!("initdb failed");
        }
        let pg_port = procs::free_port()?;
        // Durable as a deployment's would be: fsync on (the audit's commits as `[audit] sync`
        // says, batched by default, as the embedded instance's).
        let options = format!(
            "-p {pg_port} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100",
            pg.display()
        );
        pg_ctl(&data, &["-w", "-t", "60", "-o", &options, "start"]).await?;
        let stores = Stores {
            redis_url: format!("redis://127.0.0.1:{redis_port}/"),
            database_url: format!("postgres://postgres@127.0.0.1:{pg_port}/postgres"),
            redis: Some(redis),
            pg_data: data,
        };
        stores.redis_ping().await?;
        Ok(Some(stores))
    }

    async fn redis_ping(&self) -> anyhow::Result<()> {
        let client = redis::Client::open(self.redis_url.as_str())?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut c) = client.get_multiplexed_async_connection().await
                && redis::cmd("PING")
                    .query_async::<String>(&mut c)
                    .await
                    .is_ok()
            {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("redis did not answer");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Commands Redis has run so far, by command, and rows in the audit log.
    pub async fn counters(&self) -> anyhow::Result<(Vec<(String, u64)>, i64)> {
        let client = redis::Client::open(self.redis_url.as_str())?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut connection)
            .await?;
        let commands = info
            .lines()
            .filter_map(|line| {
                let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect();
        let pool = sqlx::PgPool::connect(&self.database_url).await?;
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM mcpgate_audit")
            .fetch_one(&pool)
            .await?;
        pool.close().await;
        Ok((commands, rows))
    }

    pub async fn stop(mut self) {
        if let Some(redis) = self.redis.take() {
            redis.stop().await;
        }
        let _ = pg_ctl(&self.pg_data, &["-w", "-m", "fast", "stop"]).await;
    }
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// What `calls` read calls cost, from counters before and after: Redis commands per call
/// (by command) and audit rows per call.
pub fn per_call(
    before: &(Vec<(String, u64)>, i64),
    after: &(Vec<(String, u64)>, i64),
    calls: u64,
) -> Value {
    let mut commands = serde_json::Map::new();
    let mut total = 0.0;
    for (name, count) in &after.0 {
        let was = before
            .0
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, c)| *c);
        // The two counters' own INFO calls are not the calls'.
        let spent = count.saturating_sub(was) as f64;
        let per = if name == "info" {
            0.0
        } else {
            spent / calls as f64
        };
        if per > 0.0 {
            commands.insert(
                name.clone(),
                serde_json::json!((per * 100.0).round() / 100.0),
            );
            total += per;
        }
    }
    let rows = (after.1 - before.1) as f64 / calls as f64;
    serde_json::json!({
        "redisCommands": (total * 100.0).round() / 100.0,
        "byCommand": commands,
        "auditRows": (rows * 100.0).round() / 100.0,
    })
}
