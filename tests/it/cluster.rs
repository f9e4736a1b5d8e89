//! Several `mcpgate serve` instances on one Redis and one PostgreSQL, tested from outside as
//! clients would. The stores are real servers of the tests' own (Debian's `redis-server`,
//! `initdb` and `pg_ctl`), on free loopback ports in a temporary folder, stopped at the end;
//! the upstream is the `slow` fixture over Streamable HTTP in this process, so every call the
//! instances make is counted in one place.

mod chat;
mod confirmations;
mod idempotency;
mod limits;
mod outages;
mod pins;
mod rounds;
mod sessions;
mod webmcp;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use jsonwebtoken::{EncodingKey, Header, encode};
use mcpgate::fixtures::{Fixture, serve_http};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use crate::support::{ServedBinary, WAIT, free_port, wait_for_async};

pub(crate) const SECRET: &str = "cluster-test-secret-of-enough-length-0123456789";
pub(crate) const ISSUER: &str = "https://issuer.test/";

/// A Redis server of the test's own.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start(dir: &Path) -> RedisServer {
        let mut redis = RedisServer {
            port: free_port(),
            dir: dir.to_path_buf(),
            child: None,
        };
        redis.run().await;
        redis
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Starts it (again) on the same port, loading `dump.rdb` from its folder if one was
    /// saved.
    pub async fn run(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--dbfilename",
                "dump.rdb",
            ])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("redis-server starts (scripts/install-peers.sh installs it)");
        self.child = Some(child);
        let client = redis::Client::open(self.url()).expect("url");
        wait_for_async("redis to answer", || async {
            let mut connection = client.get_multiplexed_async_connection().await.ok()?;
            redis::cmd("PING")
                .query_async::<String>(&mut connection)
                .await
                .ok()
        })
        .await;
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) it: a server that holds its connections
    /// open and answers nothing.
    pub fn hang(&self, hung: bool) {
        let pid = self
            .child
            .as_ref()
            .and_then(Child::id)
            .expect("redis-server runs");
        signal(pid, hung);
    }

    /// Kills it: nothing is saved.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// One command's answer.
    pub async fn command<T: redis::FromRedisValue>(&self, args: &[&str]) -> T {
        let client = redis::Client::open(self.url()).expect("url");
        let mut connection = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis connection");
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async(&mut connection).await.expect("command")
    }
}

/// A PostgreSQL cluster of the test's own (run as the `postgres` user when the tests run as
/// root, which `initdb` refuses to be).
pub struct PostgresServer {
    pub port: u16,
    data: PathBuf,
    socket: PathBuf,
}

fn pg_bin(name: &str) -> PathBuf {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL is installed (scripts/install-peers.sh)")
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin").join(name))
        .filter(|p| p.exists())
        .collect();
    found.sort();
    found.pop().expect("a PostgreSQL bin folder")
}

fn as_postgres(command: &mut Command) {
    if nix::unistd::geteuid().is_root() {
        let user = nix::unistd::User::from_name("postgres")
            .expect("passwd readable")
            .expect("a postgres user (Debian's postgresql package makes it)");
        command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    }
}

fn hand_to_postgres(path: &Path) {
    if nix::unistd::geteuid().is_root() {
        let user = nix::unistd::User::from_name("postgres")
            .expect("passwd readable")
            .expect("a postgres user");
        nix::unistd::chown(path, Some(user.uid), Some(user.gid)).expect("chown");
    }
}

impl PostgresServer {
    pub async fn start(dir: &Path) -> PostgresServer {
        let root = dir.join("pg");
        std::fs::create_dir_all(&root).expect("pg folder");
        hand_to_postgres(dir);
        hand_to_postgres(&root);
        let server = PostgresServer {
            port: free_port(),
            data: root.join("data"),
            socket: root.clone(),
        };
        let mut initdb = Command::new(pg_bin("initdb"));
        initdb
            .arg("-D")
            .arg(&server.data)
            .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_postgres(&mut initdb);
        let status = initdb.status().await.expect("initdb runs");
        assert!(status.success(), "initdb failed");
        server.run().await;
        server
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    async fn pg_ctl(&self, args: &[&str]) {
        let mut command = Command::new(pg_bin("pg_ctl"));
        command
            .arg("-D")
            .arg(&self.data)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_postgres(&mut command);
        let status = command.status().await.expect("pg_ctl runs");
        assert!(status.success(), "pg_ctl {args:?} failed");
    }

    /// Starts it (again) on the same port.
    pub async fn run(&self) {
        let options = format!(
            // WAL an asynchronous commit leaves in PostgreSQL's buffers stays there until
            // something flushes it (the WAL writer only every 10 s): an immediate stop
            // loses it, the worst a crash can do.
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=60 \
             -c wal_writer_delay=10s",
            self.port,
            self.socket.display()
        );
        self.pg_ctl(&["-w", "-t", "60", "-o", &options, "start"])
            .await;
    }

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the postmaster and every backend: a server
    /// that holds its connections open and answers nothing.
    pub fn hang(&self, hung: bool) {
        let pid_file =
            std::fs::read_to_string(self.data.join("postmaster.pid")).expect("postmaster.pid");
        let postmaster: u32 = pid_file
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("the postmaster's pid");
        signal(postmaster, hung);
        for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            // `pid (comm) state ppid ...`: the name may hold spaces, the fields after it not.
            let parent = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            if parent == Some(postmaster) {
                signal(pid, hung);
            }
        }
    }

    /// Stops it at once (in-flight transactions are lost; committed ones are kept).
    pub async fn stop(&self) {
        self.pg_ctl(&["-w", "-m", "immediate", "stop"]).await;
    }

    /// Its data directory (heap files and WAL).
    pub fn data_dir(&self) -> PathBuf {
        self.data.clone()
    }

    pub async fn pool(&self) -> sqlx::PgPool {
        sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&self.url())
            .await
            .expect("PostgreSQL connection")
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        let mut command = std::process::Command::new(pg_bin("pg_ctl"));
        command
            .arg("-D")
            .arg(&self.data)
            .args(["-w", "-m", "immediate", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if nix::unistd::geteuid().is_root()
            && let Ok(Some(user)) = nix::unistd::User::from_name("postgres")
        {
            use std::os::unix::process::CommandExt as _;
            command.uid(user.uid.as_raw()).gid(user.gid.as_raw());
        }
        let _ = command.status();
    }
}

/// `SIGSTOP` (`hung`) or `SIGCONT` to process `pid`.
fn signal(pid: u32, hung: bool) {
    use nix::sys::signal::{Signal, kill};
    let signal = if hung {
        Signal::SIGSTOP
    } else {
        Signal::SIGCONT
    };
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    kill(pid, signal).expect("signalled");
}

/// A fixture over Streamable HTTP, shared by every instance.
pub struct Upstream {
    pub url: String,
    stop: CancellationToken,
}

impl Upstream {
    pub async fn start(fixture: Fixture) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}/mcp", listener.local_addr().expect("addr"));
        let stop = CancellationToken::new();
        tokio::spawn(serve_http(fixture, listener, stop.clone()));
        Upstream { url, stop }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// What every instance's configuration says beyond its name: JWT auth, two tenants, the
/// `slow` upstream twice (`slow`: `sleep` is a write; `reads`: nothing needs a
/// confirmation), and `changing`.
fn instance_config(
    name: &str,
    upstream: &str,
    changing: &str,
    conformance: &str,
    (state, extra): (&str, &str),
) -> String {
    format!(
        r#"[state]
database = "memory"
redis = "${{REDIS_URL}}"
postgres = "${{DATABASE_URL}}"
require_shared = true
instance = "{name}"
lease_ttl = "3s"
command_timeout = "1s"
connect_timeout = "1s"
{state}

[server.auth]
mode = "jwt"
algorithms = ["HS256"]
secret = "${{MCPGATE_JWT_SECRET}}"
issuer = "{ISSUER}"
audience = "mcpgate"

[access.tenants.acme]
servers = ["slow", "reads", "changing", "conf"]
[access.tenants.globex]
servers = ["slow", "reads", "conf"]
[[access.grants]]
tenant = "acme"
tools = ["slow.*", "reads.*", "changing.*", "conf.*"]
[[access.grants]]
tenant = "globex"
tools = ["slow.*", "reads.*", "conf.*"]
[[access.operators]]
tenant = "ops"
roles = ["operator"]

[servers.slow]
url = "{upstream}"
transport = "streamable-http"
allow_private = true
read_only_tools = ["sleep_stats"]

[servers.reads]
url = "{upstream}"
transport = "streamable-http"
allow_private = true
confirm = "none"
read_only_tools = ["sleep", "sleep_stats"]

[servers.changing]
url = "{changing}"
transport = "streamable-http"
allow_private = true
confirm = "none"
on_change = "block"

[servers.conf]
url = "{conformance}"
transport = "streamable-http"
allow_private = true
confirm = "none"
{extra}"#
    )
}

/// Three instances (`a`, `b`, `c`) on one Redis and one PostgreSQL, and the upstream.
pub struct Cluster {
    pub redis: RedisServer,
    pub postgres: PostgresServer,
    _upstream: Upstream,
    _changing: Upstream,
    _conformance: Upstream,
    pub instances: Vec<ServedBinary>,
    pub client: reqwest::Client,
    /// The request id of every tool call made through [`Cluster::call`].
    pub calls: std::sync::Mutex<Vec<String>>,
    _dirs: Vec<tempfile::TempDir>,
    _root: tempfile::TempDir,
}

impl Cluster {
    pub async fn start() -> Cluster {
        Cluster::start_with("", &[]).await
    }

    /// With `extra` appended to every instance's configuration, and `envs[i]` added to
    /// instance i's environment.
    pub async fn start_with(extra: &str, envs: &[&[(&str, &str)]]) -> Cluster {
        Cluster::start_with_state("", extra, envs).await
    }

    /// [`Cluster::start_with`], with `state` added to every instance's `[state]`.
    pub async fn start_with_state(state: &str, extra: &str, envs: &[&[(&str, &str)]]) -> Cluster {
        let root = tempfile::tempdir().expect("temp dir");
        let redis = RedisServer::start(&root.path().join("redis").tap_mkdir()).await;
        let postgres = PostgresServer::start(root.path()).await;
        let upstream = Upstream::start(Fixture::Slow).await;
        let changing = Upstream::start(Fixture::Changing).await;
        let conformance = Upstream::start(Fixture::Conformance).await;
        let (redis_url, database_url) = (redis.url(), postgres.url());
        let mut instances = Vec::new();
        let mut dirs = Vec::new();
        for (i, name) in ["a", "b", "c"].iter().enumerate() {
            let dir = tempfile::tempdir().expect("temp dir");
            let config = instance_config(
                name,
                &upstream.url,
                &changing.url,
                &conformance.url,
                (state, extra),
            );
            let mut env = vec![
                ("REDIS_URL", redis_url.as_str()),
                ("DATABASE_URL", database_url.as_str()),
                ("MCPGATE_JWT_SECRET", SECRET),
            ];
            env.extend(envs.get(i).copied().unwrap_or_default().iter().copied());
            let served = ServedBinary::start(dir.path(), Some(&config), &env).await;
            served.wait_ready().await;
            instances.push(served);
            dirs.push(dir);
        }
        Cluster {
            redis,
            postgres,
            _upstream: upstream,
            _changing: changing,
            _conformance: conformance,
            instances,
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            calls: std::sync::Mutex::default(),
            _dirs: dirs,
            _root: root,
        }
    }

    pub fn base(&self, i: usize) -> &str {
        &self.instances[i].base
    }

    /// A POST to instance `i` as `token`.
    pub async fn post(
        &self,
        i: usize,
        path: &str,
        token: &str,
        body: Value,
    ) -> (StatusCode, Value) {
        let request = self.client.post(format!("{}{path}", self.base(i)));
        answer(request.bearer_auth(token).json(&body)).await
    }

    pub async fn get(&self, i: usize, path: &str, token: &str) -> (StatusCode, Value) {
        let request = self.client.get(format!("{}{path}", self.base(i)));
        answer(request.bearer_auth(token)).await
    }

    /// `POST /api/v1/mcp/tools/call` on instance `i`.
    pub async fn call(
        &self,
        i: usize,
        token: &str,
        tool: &str,
        arguments: Value,
        confirmation: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut body = json!({ "tool": tool, "arguments": arguments });
        if let Some(token) = confirmation {
            body["confirmationToken"] = json!(token);
        }
        let request_id = format!("call-{}", mcpgate_test_id());
        self.calls.lock().expect("calls").push(request_id.clone());
        let request = self
            .client
            .post(format!("{}/api/v1/mcp/tools/call", self.base(i)))
            .bearer_auth(token)
            .header("x-request-id", &request_id);
        answer(request.json(&body)).await
    }

    /// Waits until every call made through [`Cluster::call`] has an audit row (a record
    /// PostgreSQL lost in a crash is written again after it recovers), then asserts as
    /// [`Cluster::assert_each_call_audited_once`].
    pub async fn wait_each_call_audited_once(&self) {
        wait_for_async("every call's audit row", || async {
            let rows = self.audit_rows().await;
            let calls = self.calls.lock().expect("calls").clone();
            calls
                .iter()
                .all(|id| rows.iter().any(|r| &r.3 == id))
                .then_some(())
        })
        .await;
        self.assert_each_call_audited_once().await;
    }

    /// Every call made through [`Cluster::call`] has exactly one audit row, written by one
    /// of the instances.
    pub async fn assert_each_call_audited_once(&self) {
        let rows = self.audit_rows().await;
        let calls = self.calls.lock().expect("calls").clone();
        for id in &calls {
            let mine: Vec<_> = rows.iter().filter(|r| &r.3 == id).collect();
            assert_eq!(mine.len(), 1, "call {id} has {} audit rows", mine.len());
            assert!(
                ["a", "b", "c"].contains(&mine[0].0.as_str()),
                "row names its instance: {:?}",
                mine[0]
            );
        }
    }

    /// The upstream's counters, read through instance 0 with `token`.
    pub async fn stats(&self, token: &str) -> Value {
        let (status, body) = self
            .call(0, token, "reads.sleep_stats", json!({}), None)
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["data"]["structuredContent"].clone()
    }

    /// Every audit row in PostgreSQL: (instance, tool, outcome, request id).
    pub async fn audit_rows(&self) -> Vec<(String, String, String, String)> {
        let pool = self.postgres.pool().await;
        let rows: Vec<(String, String, String, String)> = sqlx::query_as(
            "SELECT instance, tool, outcome, request_id FROM mcpgate_audit ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .expect("audit rows");
        pool.close().await;
        rows
    }

    pub async fn stop(mut self) {
        for instance in self.instances.drain(..) {
            instance.stop().await;
        }
        self.redis.kill().await;
        self.postgres.stop().await;
    }
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).expect("folder");
        self
    }
}

/// The status and JSON body (`null` when none) of `request`'s answer.
async fn answer(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("request answered");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// A fresh hex id.
pub fn mcpgate_test_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A token for `user` of `tenant`, valid for ten minutes.
pub fn token(tenant: &str, user: &str) -> String {
    token_with_roles(tenant, user, &[])
}

/// [`token`] with `roles`.
pub fn token_with_roles(tenant: &str, user: &str, roles: &[&str]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs();
    encode(
        &Header::default(),
        &json!({
            "iss": ISSUER, "aud": "mcpgate", "sub": user, "tenant": tenant, "roles": roles,
            "iat": now, "nbf": now, "exp": now + 600,
        }),
        &EncodingKey::from_secret(SECRET.as_bytes()).expect("key"),
    )
    .expect("token")
}

/// `/readyz` of instance `i`.
pub async fn readyz(cluster: &Cluster, i: usize) -> (StatusCode, Value) {
    let response = cluster
        .client
        .get(format!("{}/readyz", cluster.base(i)))
        .send()
        .await
        .expect("readyz answered");
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// Waits until `/readyz` of instance `i` has `status`.
pub async fn wait_readyz(cluster: &Cluster, i: usize, status: StatusCode) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (now, body) = readyz(cluster, i).await;
        if now == status {
            return body;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "readyz of instance {i} stayed {now}: {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
