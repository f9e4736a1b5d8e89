//! Redis or PostgreSQL down: everything that grants is refused, typed, `/readyz` says which
//! store is down, and the instances recover by themselves when it is back.

use reqwest::StatusCode;
use serde_json::json;

use super::{Cluster, token, wait_readyz};
use crate::support::{WAIT, wait_for_async};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_refuses_what_grants_and_recovers_without_a_restart() {
    let mut cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    cluster.redis.kill().await;
    let ready = wait_readyz(&cluster, 0, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(ready["shared"]["redis"], "down", "{ready}");
    assert_eq!(ready["shared"]["postgres"], "up", "{ready}");

    for (tool, what) in [("slow.sleep", "a write"), ("reads.sleep", "a read")] {
        let response = cluster
            .client
            .post(format!("{}/api/v1/mcp/tools/call", cluster.base(1)))
            .bearer_auth(&alice)
            .json(&json!({ "tool": tool, "arguments": { "ms": 1 } }))
            .send()
            .await
            .expect("answered");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE, "{what}");
        assert!(
            response.headers().get("retry-after").is_some(),
            "{what}: Retry-After"
        );
        let body: serde_json::Value = response.json().await.expect("json");
        assert_eq!(body["code"], "store_unavailable", "{what}: {body}");
    }
    let (status, body) = cluster
        .post(
            2,
            "/api/v1/mcp/confirmations/anything/approve",
            &alice,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");

    cluster.redis.run().await;
    for i in 0..3 {
        wait_readyz(&cluster, i, StatusCode::OK).await;
    }
    wait_for_async("calls to go through again", || async {
        let (status, _) = cluster
            .call(2, &alice, "reads.sleep", json!({ "ms": 1 }), None)
            .await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    let (status, asked) = cluster
        .call(0, &alice, "slow.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{asked}");
    cluster.stop().await;
}

/// With `reads_when_redis_down = "unlimited"`, read calls go on without limits while Redis
/// is down; writes are refused all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_may_go_on_without_limits_when_so_configured() {
    let mut cluster =
        Cluster::start_with_state("reads_when_redis_down = \"unlimited\"", "", &[]).await;
    let alice = token("acme", "alice");
    cluster.redis.kill().await;
    wait_readyz(&cluster, 0, StatusCode::SERVICE_UNAVAILABLE).await;
    let (status, body) = cluster
        .call(0, &alice, "reads.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::OK, "a read goes on: {body}");
    let (status, body) = cluster
        .call(1, &alice, "slow.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "a write does not: {body}"
    );
    cluster.redis.run().await;
    cluster.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_down_answers_no_call_without_its_record() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let (status, body) = cluster
        .call(0, &alice, "reads.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    cluster.postgres.stop().await;
    let ready = wait_readyz(&cluster, 1, StatusCode::SERVICE_UNAVAILABLE).await;
    assert_eq!(ready["shared"]["postgres"], "down", "{ready}");
    let (status, body) = cluster
        .call(1, &alice, "reads.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(body["code"], "store_unavailable", "{body}");
    let failed = cluster
        .calls
        .lock()
        .expect("calls")
        .pop()
        .expect("the call");

    cluster.postgres.run().await;
    wait_readyz(&cluster, 1, StatusCode::OK).await;
    wait_for_async("calls to go through again", || async {
        let (status, _) = cluster
            .call(1, &alice, "reads.sleep", json!({ "ms": 1 }), None)
            .await;
        if status != StatusCode::OK {
            cluster.calls.lock().expect("calls").pop();
        }
        (status == StatusCode::OK).then_some(())
    })
    .await;
    // Answered calls have their rows (the first one's, acknowledged by an asynchronous commit
    // and lost by the immediate stop, written again by instance 0 once PostgreSQL is back);
    // the refused one has none (it was not answered).
    cluster.wait_each_call_audited_once().await;
    let rows = cluster.audit_rows().await;
    assert!(!rows.iter().any(|r| r.3 == failed), "{rows:?}");
    cluster.stop().await;
}

/// An answered call's record is proven on disk by its writer within 100 ms (this PostgreSQL's
/// own WAL writer waits 10 s), so it outlives PostgreSQL and its instance crashing together,
/// when nothing is left to write it again. Fails without the writer's synchronous commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_proven_on_disk_outlives_both_crashing() {
    let mut cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    // Every other commit asynchronous: an instance's usage rollup, committed every 10 s,
    // would otherwise flush the record's WAL with its own, and the test pass without the
    // writer's flush whenever one fell within the second below.
    let pool = cluster.postgres.pool().await;
    for sql in [
        "ALTER SYSTEM SET synchronous_commit = off",
        "SELECT pg_reload_conf()",
    ] {
        sqlx::raw_sql(sql).execute(&pool).await.expect(sql);
    }
    wait_for_async("the setting to reach the sessions", || async {
        let now: String = sqlx::query_scalar("SHOW synchronous_commit")
            .fetch_one(&pool)
            .await
            .ok()?;
        (now == "off").then_some(())
    })
    .await;
    pool.close().await;
    let (status, body) = cluster
        .call(0, &alice, "reads.sleep", json!({ "ms": 1 }), None)
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // Ten times the writer's interval, far short of the WAL writer's 10 s: nothing outside
    // the writer can be waited on for this.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    cluster.instances.remove(0).kill().await;
    cluster.postgres.stop().await;
    cluster.postgres.run().await;
    cluster.assert_each_call_audited_once().await;
    cluster.stop().await;
}

/// `mcpgate config check` reaches the stores as `serve` would, writing nothing, and fails
/// when `require_shared` is set and one does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_reaches_the_shared_stores() {
    let root = tempfile::tempdir().expect("temp dir");
    let mut redis = super::RedisServer::start(root.path()).await;
    let postgres = super::PostgresServer::start(root.path()).await;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("mcpgate.toml"),
        "[state]\nredis = \"${REDIS_URL}\"\npostgres = \"${DATABASE_URL}\"\n\
         require_shared = true\nconnect_timeout = \"1s\"\n",
    )
    .expect("config");
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let check = || {
        let mut command = std::process::Command::new(crate::support::mcpgate_bin());
        command
            .current_dir(dir.path())
            .args(["config", "check"])
            .env("REDIS_URL", &redis_url)
            .env("DATABASE_URL", &database_url);
        command
    };
    let out = check().output().expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("redis: answers") && stdout.contains("postgres: answers"));
    let pool = postgres.pool().await;
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'mcpgate%'")
            .fetch_one(&pool)
            .await
            .expect("count");
    pool.close().await;
    assert_eq!(tables, 0, "a check writes nothing");

    let out = check().env_remove("DATABASE_URL").output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("DATABASE_URL"));

    redis.kill().await;
    let out = check().output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("redis: store unavailable"));
    postgres.stop().await;
}

/// A store that hangs (its process stopped, its connections open) fails a call within the
/// command deadline (`command_timeout = "1s"` here), typed; resumed, calls go through again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_store_fails_calls_within_the_deadline_and_recovers() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let call = |i: usize| {
        let cluster = &cluster;
        let alice = &alice;
        async move {
            tokio::time::timeout(
                WAIT,
                cluster.call(i, alice, "reads.sleep", json!({ "ms": 1 }), None),
            )
            .await
            .expect("answered within the wait: the deadline bounds a hung store")
        }
    };
    for i in 0..3 {
        assert_eq!(call(i).await.0, StatusCode::OK, "instance {i} before");
    }
    for (store, hang) in [
        ("redis", &(|hung| cluster.redis.hang(hung)) as &dyn Fn(bool)),
        ("postgres", &|hung| cluster.postgres.hang(hung)),
    ] {
        hang(true);
        let (status, body) = call(1).await;
        hang(false);
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{store}: {body}");
        assert_eq!(body["code"], "store_unavailable", "{store}: {body}");
        wait_for_async("calls to go through again", || async {
            (call(1).await.0 == StatusCode::OK).then_some(())
        })
        .await;
    }
    cluster.stop().await;
}
