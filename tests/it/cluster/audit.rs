//! The audit log's commits follow `[audit] sync` on PostgreSQL as on SQLite: `batched` (the
//! default) commits without waiting for the WAL to reach the disk, `every_commit` waits for
//! it; PostgreSQL's own count of WAL flushes tells them apart.

use mcpgate::fixtures::Fixture;
use reqwest::StatusCode;
use serde_json::json;

use super::{PostgresServer, RedisServer, SECRET, Upstream, instance_config, token};
use crate::support::ServedBinary;

/// Calls made one after another, each answered once its audit row is committed.
const CALLS: i64 = 40;

/// How many times PostgreSQL flushed its WAL while one instance with `[audit] sync = sync`
/// answered [`CALLS`] read calls.
async fn wal_flushes_for_calls(sync: &str) -> i64 {
    let root = tempfile::tempdir().expect("temp dir");
    let redis_dir = root.path().join("redis");
    std::fs::create_dir_all(&redis_dir).expect("redis folder");
    let mut redis = RedisServer::start(&redis_dir).await;
    let postgres = PostgresServer::start_with_fsync(root.path(), true).await;
    let upstream = Upstream::start(Fixture::Slow).await;
    let extra = format!("[audit]\nsync = \"{sync}\"\n");
    let config = instance_config(
        "a",
        &upstream.url,
        &upstream.url,
        &upstream.url,
        ("", &extra),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [
        ("REDIS_URL", redis.url()),
        ("DATABASE_URL", postgres.url()),
        ("MCPGATE_JWT_SECRET", SECRET.to_owned()),
    ];
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let served = ServedBinary::start(dir.path(), Some(&config), &env).await;
    served.wait_ready().await;

    let pool = postgres.pool().await;
    let flushes = || async {
        sqlx::query_scalar::<_, i64>("SELECT wal_sync FROM pg_stat_wal")
            .fetch_one(&pool)
            .await
            .expect("pg_stat_wal")
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let alice = token("acme", "alice");
    let call = || async {
        client
            .post(format!("{}/api/v1/mcp/tools/call", served.base))
            .bearer_auth(&alice)
            .json(&json!({ "tool": "reads.sleep", "arguments": { "ms": 0 } }))
            .send()
            .await
            .expect("answered")
            .status()
    };
    // The first call connects the writer (a connection's own start writes nothing, but
    // leaves nothing to chance).
    assert_eq!(call().await, StatusCode::OK);
    let before = flushes().await;
    for _ in 0..CALLS {
        assert_eq!(call().await, StatusCode::OK);
    }
    let after = flushes().await;
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM mcpgate_audit")
        .fetch_one(&pool)
        .await
        .expect("audit rows");
    assert_eq!(rows, CALLS + 1, "every call has its row");
    pool.close().await;
    served.stop().await;
    redis.kill().await;
    postgres.stop().await;
    after - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_audit_commits_do_not_wait_for_the_disk_and_every_commit_ones_do() {
    let batched = wal_flushes_for_calls("batched").await;
    // PostgreSQL's WAL writer flushes on its own every 200 ms; forty calls one after another
    // take far less than forty of those.
    assert!(
        batched < CALLS / 2,
        "batched: {batched} WAL flushes for {CALLS} calls"
    );
    let every_commit = wal_flushes_for_calls("every_commit").await;
    assert!(
        every_commit >= CALLS,
        "every_commit: {every_commit} WAL flushes for {CALLS} calls"
    );
}
