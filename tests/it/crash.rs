//! `kill -9` of `mcpgate serve` under load, at a moment chosen at random, several times on the
//! same state folder: every call that was answered has exactly one audit record, no call has
//! two, every confirmation consumed stays consumed, and SQLite's integrity check passes
//! (RELIABILITY.md, "Load, soak and crash").

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

use serde_json::{Value, json};

use crate::support::{ServedBinary, WAIT, mcpgate_bin, sandbox_section};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_answered_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let answered: Answered = Arc::default();
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(WAIT)
        .build()
        .expect("client");
    let seed = seed();
    eprintln!("seed {seed}");
    // The demo server, writes confirmed, state in SQLite beside the config (the default
    // `[audit] sync = "batched"`: a killed process loses nothing its kernel was handed), no
    // rate limit in the way of the load.
    let config = format!(
        "{sandbox}[limits]\nuser_calls_per_minute = 0\nserver_calls_per_minute = 0\n\n\
         [state]\ndatabase = \"mcpgate.db\"\n\n\
         [servers.demo]\ncommand = {bin}\nargs = [\"demo-server\"]\n\
         read_only_tools = [\"echo\", \"add\", \"time_now\", \"list_notes\"]\n",
        sandbox = sandbox_section(&[], &[]),
        bin = toml::Value::String(mcpgate_bin().to_string_lossy().into_owned()),
    );
    for run in 0..RUNS {
        let served = ServedBinary::start(dir.path(), Some(&config), &[]).await;
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

    // The records, read from the file the killed gateways wrote.
    let db = rusqlite::Connection::open(dir.path().join("mcpgate.db")).expect("the state file");
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

    // Every confirmation consumed before a kill stays consumed.
    let served = ServedBinary::start(dir.path(), Some(&config), &[]).await;
    served.wait_ready().await;
    let caller = Caller {
        http,
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
