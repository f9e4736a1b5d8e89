//! `kill -9` of `mcpgate serve` under load, at a moment chosen at random, several times on the
//! same state: every call that was answered has exactly one audit record, no call has two,
//! every confirmation consumed stays consumed; with the embedded store SQLite's integrity
//! check passes, and with the shared stores (Redis and PostgreSQL of the test's own) the same
//! holds of PostgreSQL's audit. With `[audit] sync = "every_commit"` the same holds after a
//! simulated power loss (unsynced pages dropped by LazyFS), a test run by hand where a LazyFS
//! mount exists (RELIABILITY.md, "Load, soak and crash").

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use serde_json::{Value, json};

use crate::{
    cluster::{PostgresServer, RedisServer},
    support::{ServedBinary, WAIT, mcpgate_bin, sandbox_section},
};

/// Runs of load, each ended by SIGKILL.
const RUNS: u64 = 3;
/// Callers at once in each run.
const WORKERS: u64 = 6;

/// The calls that were answered, by request id: `None` for a read or a held write; for a
/// write a confirmation let through, the call with its token (consumed by that answer).
type Answered = Arc<Mutex<HashMap<String, Option<Value>>>>;

struct Caller {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Caller {
    async fn post(&self, path: &str, request_id: Option<&str>, body: &Value) -> Option<Value> {
        let mut request = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body);
        if let Some(id) = request_id {
            request = request.header("x-request-id", id);
        }
        // A connection refused or cut is the kill: the call was not answered.
        let response = request.send().await.ok()?;
        response.json().await.ok()
    }

    async fn call(&self, request_id: &str, body: &Value) -> Option<Value> {
        self.post("/api/v1/mcp/tools/call", Some(request_id), body)
            .await
    }
}

/// Calls until the gateway is gone: three reads, then a write asked, approved and run.
async fn load(caller: Caller, run: u64, worker: u64, answered: Answered) {
    for i in 0.. {
        let id = format!("r{run}-w{worker}-{i}");
        if i % 4 != 3 {
            let echo = json!({ "tool": "demo.echo", "arguments": { "message": id } });
            let Some(answer) = caller.call(&id, &echo).await else {
                return;
            };
            assert_eq!(answer["ok"], json!(true), "{answer}");
            answered.lock().expect("lock").insert(id, None);
            continue;
        }
        let note = json!({
            "tool": "demo.add_note",
            "arguments": { "title": id, "body": "written under load" }
        });
        let asked = format!("{id}-ask");
        let Some(held) = caller.call(&asked, &note).await else {
            return;
        };
        assert_eq!(held["code"], json!("confirmation_required"), "{held}");
        answered.lock().expect("lock").insert(asked, None);
        let confirmation = held["confirmationId"].as_str().expect("an id").to_owned();
        let approve = format!("/api/v1/mcp/confirmations/{confirmation}/approve");
        let Some(approval) = caller.post(&approve, None, &json!({})).await else {
            return;
        };
        let token = approval["confirmationToken"]
            .as_str()
            .expect("a token")
            .to_owned();
        let mut confirmed = note.clone();
        confirmed["confirmationToken"] = json!(token);
        let run_it = format!("{id}-run");
        let Some(done) = caller.call(&run_it, &confirmed).await else {
            return;
        };
        assert_eq!(done["ok"], json!(true), "{done}");
        answered
            .lock()
            .expect("lock")
            .insert(run_it, Some(confirmed));
    }
}

/// A number from the clock, printed, so that a failing moment can be told apart.
fn seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .subsec_nanos();
    u64::from(nanos)
}

/// The gateway's configuration: the demo server, writes confirmed, no rate or concurrency
/// limit in the way of the load (with shared stores, a killed instance's concurrency leases
/// stay until `lease_ttl`), and `state` as the `[state]` section's body.
fn config(state: &str) -> String {
    format!(
        "{sandbox}[limits]\nuser_calls_per_minute = 0\nserver_calls_per_minute = 0\n\
         user_concurrency = 1000\nserver_concurrency = 1000\n\n\
         [state]\n{state}\n\n\
         [servers.demo]\ncommand = {bin}\nargs = [\"demo-server\"]\n\
         read_only_tools = [\"echo\", \"add\", \"time_now\", \"list_notes\"]\n",
        sandbox = sandbox_section(&[], &[]),
        bin = toml::Value::String(mcpgate_bin().to_string_lossy().into_owned()),
    )
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(WAIT)
        .build()
        .expect("client")
}

/// [`RUNS`] runs of load in `dir` with `config` and `env`, each ended by `kill -9` at a
/// moment drawn from `seed` (and, with `power`, a power loss right after it): the calls
/// answered.
async fn kill_under_load(
    dir: &std::path::Path,
    config: &str,
    env: &[(&str, &str)],
    seed: u64,
    power: Option<&LazyFs>,
) -> HashMap<String, Option<Value>> {
    let answered: Answered = Arc::default();
    let http = client();
    for run in 0..RUNS {
        let served = ServedBinary::start(dir, Some(config), env).await;
        served.wait_ready().await;
        let token = served.token.clone().expect("the dev token");
        let workers: Vec<_> = (0..WORKERS)
            .map(|worker| {
                let caller = Caller {
                    http: http.clone(),
                    base: served.base.clone(),
                    token: token.clone(),
                };
                tokio::spawn(load(caller, run, worker, answered.clone()))
            })
            .collect();
        // Somewhere between 0.2 and 1.2 s into the load.
        let moment = 200 + seed.wrapping_mul(run + 7919) % 1000;
        tokio::time::sleep(Duration::from_millis(moment)).await;
        served.kill().await;
        if let Some(lazyfs) = power {
            lazyfs.lose_unsynced_pages();
        }
        for worker in workers {
            tokio::time::timeout(WAIT, worker)
                .await
                .expect("a caller notices the kill")
                .expect("a caller's answers were as expected");
        }
    }
    let answered = std::mem::take(&mut *answered.lock().expect("lock"));
    assert!(
        answered.len() > 100,
        "only {} calls answered: too little load to mean anything",
        answered.len()
    );
    answered
}

/// Every answered call has exactly one record in `counts` (records by request id).
fn one_record_each(
    counts: &HashMap<String, i64>,
    answered: &HashMap<String, Option<Value>>,
    seed: u64,
) {
    let twice: Vec<_> = counts.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "calls with more than one record: {twice:?}"
    );
    let lost: Vec<_> = answered
        .keys()
        .filter(|id| !counts.contains_key(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} answered calls have no record (seed {seed}), e.g. {:?}",
        lost.len(),
        answered.len(),
        lost.iter().take(5).collect::<Vec<_>>()
    );
}

/// Every confirmation consumed before a kill stays consumed: a gateway started again on the
/// same state refuses each write's token.
async fn consumed_stay_consumed(
    dir: &std::path::Path,
    config: &str,
    env: &[(&str, &str)],
    answered: HashMap<String, Option<Value>>,
) {
    let served = ServedBinary::start(dir, Some(config), env).await;
    served.wait_ready().await;
    let caller = Caller {
        http: client(),
        base: served.base.clone(),
        token: served.token.clone().expect("the dev token"),
    };
    let consumed: Vec<_> = answered.into_values().flatten().collect();
    assert!(!consumed.is_empty(), "no write ran before a kill");
    for (n, call) in consumed.iter().enumerate() {
        let replay = caller
            .call(&format!("replay-{n}"), call)
            .await
            .expect("the replay is answered");
        assert_eq!(replay["code"], json!("confirmation_invalid"), "{replay}");
    }
    let status = served.stop().await;
    assert!(status.success(), "{status:?}");
}

/// State in SQLite beside the config, with the default `[audit] sync = "batched"`: a killed
/// process loses nothing its kernel was handed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_answered_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = seed();
    eprintln!("seed {seed}");
    let config = config("database = \"mcpgate.db\"");
    let answered = kill_under_load(dir.path(), &config, &[], seed, None).await;
    sqlite_records_hold(&dir.path().join("mcpgate.db"), &answered, seed);
    consumed_stay_consumed(dir.path(), &config, &[], answered).await;
}

/// The SQLite file at `db` passes its integrity check and holds one record for each call in
/// `answered`.
fn sqlite_records_hold(db: &std::path::Path, answered: &HashMap<String, Option<Value>>, seed: u64) {
    let db = rusqlite::Connection::open(db).expect("the state file");
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity check");
    assert_eq!(integrity, "ok");
    let mut counts: HashMap<String, i64> = HashMap::new();
    let mut query = db
        .prepare("SELECT request_id, COUNT(*) FROM audit GROUP BY request_id")
        .expect("query");
    let rows = query
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)?))
        })
        .expect("rows");
    for row in rows {
        let (id, count) = row.expect("a row");
        counts.insert(id, count);
    }
    one_record_each(&counts, answered, seed);
}

/// The shared stores: confirmations in Redis, the audit and consumed tokens in PostgreSQL
/// (each of the test's own; only the gateway is killed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_with_shared_stores_loses_no_answered_record() {
    let root = tempfile::tempdir().expect("temp dir");
    let redis_dir = root.path().join("redis");
    std::fs::create_dir_all(&redis_dir).expect("redis folder");
    let redis = RedisServer::start(&redis_dir).await;
    let postgres = PostgresServer::start(root.path()).await;
    let (redis_url, database_url) = (redis.url(), postgres.url());
    let env = [
        ("REDIS_URL", redis_url.as_str()),
        ("DATABASE_URL", database_url.as_str()),
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = seed();
    eprintln!("seed {seed}");
    let config = config(
        "database = \"memory\"\nredis = \"${REDIS_URL}\"\npostgres = \"${DATABASE_URL}\"\n\
         require_shared = true",
    );
    let answered = kill_under_load(dir.path(), &config, &env, seed, None).await;

    let pool = postgres.pool().await;
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT request_id, COUNT(*) FROM mcpgate_audit GROUP BY request_id")
            .fetch_all(&pool)
            .await
            .expect("the audit rows");
    let counts: HashMap<String, i64> = rows.into_iter().collect();
    one_record_each(&counts, &answered, seed);
    consumed_stay_consumed(dir.path(), &config, &env, answered).await;
}

/// A mounted [LazyFS](https://github.com/dsrhaslab/lazyfs): a FUSE file system that keeps
/// written pages in its own cache until they are synced, and drops every unsynced page when
/// told, as a machine losing power would.
struct LazyFs {
    /// A folder inside the mount.
    mount: std::path::PathBuf,
    /// The FIFO LazyFS reads its commands from (`fifo_path`).
    commands: std::path::PathBuf,
    /// The FIFO it answers `finished::clear-cache` on (`fifo_path_completed`).
    done: std::path::PathBuf,
}

impl LazyFs {
    /// From `MCPGATE_LAZYFS_MOUNT`, `MCPGATE_LAZYFS_FIFO` and `MCPGATE_LAZYFS_DONE_FIFO`.
    fn from_env() -> Self {
        let var = |name: &str| {
            std::env::var_os(name).unwrap_or_else(|| {
                panic!("{name} is not set: this test needs a LazyFS mount (RELIABILITY.md)")
            })
        };
        LazyFs {
            mount: var("MCPGATE_LAZYFS_MOUNT").into(),
            commands: var("MCPGATE_LAZYFS_FIFO").into(),
            done: var("MCPGATE_LAZYFS_DONE_FIFO").into(),
        }
    }

    /// Drops every page not yet synced and waits until LazyFS says it has.
    fn lose_unsynced_pages(&self) {
        use std::{
            io::{ErrorKind, Read, Write},
            os::unix::fs::OpenOptionsExt,
        };
        // LazyFS keeps the answer FIFO open to write and drops an answer nobody reads: open
        // it before sending the command, without waiting (a FIFO opened to read waits for a
        // writer otherwise), and poll it.
        let mut done = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(&self.done)
            .expect("LazyFS's answer FIFO");
        let mut commands = std::fs::OpenOptions::new()
            .write(true)
            .open(&self.commands)
            .expect("LazyFS's command FIFO");
        commands
            .write_all(b"lazyfs::clear-cache\n")
            .expect("command sent");
        drop(commands);
        let deadline = std::time::Instant::now() + WAIT;
        let mut answer = Vec::new();
        while !answer.ends_with(b"\n") {
            assert!(
                std::time::Instant::now() < deadline,
                "LazyFS did not answer"
            );
            let mut chunk = [0; 64];
            match done.read(&mut chunk) {
                Ok(n) if n > 0 => answer.extend_from_slice(&chunk[..n]),
                // No writer yet (LazyFS opens its end once a reader is there), or no answer
                // yet.
                Ok(_) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(e) => panic!("LazyFS's answer FIFO: {e}"),
            }
        }
        let answer = String::from_utf8_lossy(&answer);
        assert_eq!(answer.trim(), "finished::clear-cache", "{answer:?}");
    }
}

/// The embedded store with `[audit] sync = "every_commit"` on LazyFS: each run ends with
/// `kill -9` and then the loss of every unsynced page. Run by hand where LazyFS is mounted:
/// `MCPGATE_LAZYFS_MOUNT=/tmp/lazyfs.mnt MCPGATE_LAZYFS_FIFO=/tmp/lazyfs.fifo
/// MCPGATE_LAZYFS_DONE_FIFO=/tmp/lazyfs.done.fifo cargo nextest run --run-ignored only
/// crash::power_loss` (RELIABILITY.md says how LazyFS is built and mounted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a LazyFS mount named by MCPGATE_LAZYFS_MOUNT (RELIABILITY.md)"]
async fn power_loss_under_load_with_every_commit_loses_no_answered_record() {
    let lazyfs = LazyFs::from_env();
    let sync = std::env::var("MCPGATE_LAZYFS_SYNC").unwrap_or_else(|_| "every_commit".into());
    let state = tempfile::tempdir_in(&lazyfs.mount).expect("a folder on LazyFS");
    let db = state.path().join("mcpgate.db");
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = seed();
    eprintln!("seed {seed}, sync {sync}");
    let config = config(&format!(
        "database = {}\n\n[audit]\nsync = \"{sync}\"",
        toml::Value::String(db.to_string_lossy().into_owned())
    ));
    let answered = kill_under_load(dir.path(), &config, &[], seed, Some(&lazyfs)).await;
    sqlite_records_hold(&db, &answered, seed);
    consumed_stay_consumed(dir.path(), &config, &[], answered).await;
}
