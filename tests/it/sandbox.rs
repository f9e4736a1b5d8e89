//! stdio servers in their sandbox, through `mcpgate serve` as users run it: a hostile server
//! (tests/sandbox/hostile.py, on the system's python3) tries from its tools what a server
//! must not do, and each attempt fails inside it with the limit that stopped it, while the
//! gateway and another server keep serving; the real npm and PyPI servers work unchanged in a
//! default sandbox as `nobody`. As root the servers run as `nobody`; as anyone else, as that
//! user (the sandbox's other walls are the same).

use std::{
    net::TcpListener,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use mcpgate::digest::random_hex;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{ServedBinary, WAIT, npm_package, peers};

/// The variable holding the canary secret in the gateway's environment.
const CANARY_VAR: &str = "MCPGATE_SANDBOX_CANARY";
/// The user sandboxed servers run as when the tests run as root.
const NOBODY: u32 = 65534;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// The `run_as` line: `nobody` as root, else nothing (the gateway's own user).
fn run_as_line() -> &'static str {
    if is_root() {
        "run_as = \"nobody\"\n"
    } else {
        ""
    }
}

/// Whether every folder above `path` lets other users through (as `nobody` needs to reach
/// the installed test peers in the checkout).
fn others_reach(path: &Path) -> bool {
    path.ancestors()
        .skip(1)
        .all(|folder| std::fs::metadata(folder).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

fn toml_str(path: &Path) -> String {
    toml::Value::String(path.to_string_lossy().into_owned()).to_string()
}

/// A folder every user may enter and read (a temp folder is private to its maker).
fn open_folder(path: &Path) {
    std::fs::create_dir_all(path).expect("folder");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// The hostile server's script, copied where its user can read it; the folder holding it.
fn hostile_script(root: &Path) -> PathBuf {
    let folder = root.join("server");
    open_folder(&folder);
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sandbox/hostile.py");
    std::fs::copy(source, folder.join("hostile.py")).expect("script copied");
    folder
}

/// A folder the sandboxed user may write (owned by it when the tests run as root).
fn writable_folder(path: &Path) -> PathBuf {
    open_folder(path);
    if is_root() {
        nix::unistd::chown(path, Some(NOBODY.into()), None).expect("chown");
    }
    path.to_path_buf()
}

struct Api {
    base: String,
    client: reqwest::Client,
}

impl Api {
    fn new(served: &ServedBinary) -> Api {
        Api {
            base: served.base.clone(),
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
        }
    }

    /// Calls `tool`; its answer (or error) as text, and whether it succeeded.
    async fn call(&self, tool: &str, arguments: Value) -> (bool, String) {
        let response = self
            .client
            .post(format!("{}/api/v1/mcp/tools/call", self.base))
            .json(&json!({ "tool": tool, "arguments": arguments }))
            .send()
            .await
            .expect("sent");
        let status = response.status();
        let body: Value = response.json().await.expect("JSON");
        if body["ok"] == true {
            assert_eq!(status, StatusCode::OK);
            let text = body["data"]["content"][0]["text"]
                .as_str()
                .unwrap_or_default();
            (true, text.to_owned())
        } else {
            let message = body["message"].as_str().unwrap_or_default();
            (
                false,
                format!("{}: {message}", body["code"].as_str().unwrap_or_default()),
            )
        }
    }

    /// A call that must fail inside the server (a tool error, not a gateway refusal); its text.
    async fn refused(&self, tool: &str, arguments: Value) -> String {
        let (ok, text) = self.call(tool, arguments.clone()).await;
        assert!(!ok, "{tool} {arguments} should have been stopped: {text}");
        assert!(
            text.starts_with("tool_error: "),
            "{tool} {arguments}: {text}"
        );
        text
    }

    async fn server(&self, id: &str) -> Value {
        let response = self
            .client
            .get(format!("{}/api/v1/mcp/servers", self.base))
            .send()
            .await
            .expect("sent");
        let body: Value = response.json().await.expect("JSON");
        body["servers"]
            .as_array()
            .expect("servers")
            .iter()
            .find(|s| s["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("server {id} listed: {body}"))
    }

    /// Waits until `id`'s state is `state`; the server's entry then.
    async fn wait_state(&self, id: &str, state: &str) -> Value {
        let waited = tokio::time::timeout(WAIT, async {
            loop {
                let server = self.server(id).await;
                if server["state"] == state {
                    return server;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        waited
            .await
            .unwrap_or_else(|_| panic!("{id} never became {state}"))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_is_held_by_its_sandbox_and_the_gateway_keeps_serving() {
    let root = tempfile::tempdir().expect("temp dir");
    open_folder(root.path());
    let script = hostile_script(root.path());
    let allowed = writable_folder(&root.path().join("allowed"));
    let open_port = TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_port = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = |l: &TcpListener| l.local_addr().expect("addr").port();
    let unix_path = root.path().join("db.sock");
    let _unix = std::os::unix::net::UnixListener::bind(&unix_path).expect("unix socket");
    std::fs::set_permissions(&unix_path, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let canary = random_hex(16);
    let state = root.path().join("state.db");
    let config = format!(
        r#"
[state]
database = {state}

[server.auth]
mode = "none"

[reconnect]
initial_delay = "100ms"
max_delay = "500ms"

[sandbox]
{run_as}read = [{script_dir}]

[servers.hostile]
command = "/usr/bin/python3"
args = [{script}]
confirm = "none"
sandbox = {{ memory = "1GiB", cpu_seconds = 2, processes = 64, write = [{allowed}], network = [{open_port}] }}

# Required: every rule asked for is enforced on this kernel, or it does not start.
[servers.bystander]
command = "/usr/bin/python3"
args = [{script}]
confirm = "none"
sandbox = "required"
"#,
        state = toml_str(&state),
        run_as = run_as_line(),
        script_dir = toml_str(&script),
        script = toml_str(&script.join("hostile.py")),
        allowed = toml_str(&allowed),
        open_port = port(&open_port),
    );
    let served = ServedBinary::start(root.path(), Some(&config), &[(CANARY_VAR, &canary)]).await;
    served.wait_ready().await;
    let api = Api::new(&served);

    // Who it is: nobody (as root), no groups, in a scratch folder that is also its home,
    // with an environment that holds no secret of the gateway's.
    let (ok, who) = api.call("hostile.whoami", json!({})).await;
    assert!(ok, "{who}");
    let who: Value = serde_json::from_str(&who).expect("whoami is JSON");
    let me = nix::unistd::geteuid().as_raw();
    assert_eq!(who["uid"], if is_root() { NOBODY } else { me }, "{who}");
    if is_root() {
        assert_eq!(who["groups"], json!([]), "{who}");
    }
    assert_eq!(who["cwd"], who["home"], "{who}");
    assert!(!who["environ"].to_string().contains(CANARY_VAR), "{who}");

    // The gateway's secrets: its environment, its state and its configuration.
    let environ = api
        .refused("hostile.read", json!({ "path": "/proc/{gateway}/environ" }))
        .await;
    assert!(environ.contains("PermissionError"), "{environ}");
    assert!(!environ.contains(&canary), "the canary leaked: {environ}");
    for secret in [state.clone(), root.path().join("mcpgate.toml")] {
        let text = api.refused("hostile.read", json!({ "path": secret })).await;
        assert!(text.contains("PermissionError"), "{secret:?}: {text}");
    }
    // Writing: only where it was given.
    for outside in [
        script.join("planted.py"),
        PathBuf::from("/tmp/planted-by-hostile"),
    ] {
        let text = api
            .refused("hostile.write", json!({ "path": outside }))
            .await;
        assert!(text.contains("PermissionError"), "{outside:?}: {text}");
        assert!(!outside.exists(), "{outside:?} was written");
    }
    let (ok, text) = api
        .call("hostile.write", json!({ "path": allowed.join("ok.txt") }))
        .await;
    assert!(ok, "its own folder is writable: {text}");
    // The network: the one port it was given, no other.
    let text = api
        .refused("hostile.connect", json!({ "port": port(&closed_port) }))
        .await;
    assert!(text.contains("PermissionError"), "{text}");
    let (ok, text) = api
        .call("hostile.connect", json!({ "port": port(&open_port) }))
        .await;
    assert!(ok, "the allowed port connects: {text}");
    // A local Unix socket anyone may connect to (a database's, say) is not a way out; UDP
    // is, with ports given (for DNS), but not without.
    let text = api
        .refused("hostile.unix", json!({ "path": unix_path }))
        .await;
    assert!(text.contains("PermissionError"), "{text}");
    let (ok, text) = api
        .call("hostile.udp", json!({ "port": port(&open_port) }))
        .await;
    assert!(ok, "UDP stays open with ports: {text}");
    for tool in ["bystander.udp", "bystander.connect"] {
        let text = api.refused(tool, json!({ "port": port(&open_port) })).await;
        assert!(text.contains("PermissionError"), "{tool}: {text}");
    }
    // A fork bomb stops at the process limit.
    let text = api
        .refused("hostile.fork", json!({ "count": 10_000 }))
        .await;
    assert!(text.contains("Resource temporarily unavailable"), "{text}");
    let forked: usize = text
        .split("forked ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a count in {text}"));
    assert!(forked < 64, "{text}");
    // 8 GiB does not fit its 1 GiB of address space.
    let text = api
        .refused("hostile.allocate", json!({ "bytes": 8u64 << 30 }))
        .await;
    assert!(text.contains("MemoryError"), "{text}");
    // Spinning stops at its CPU limit (SIGXCPU, which it catches and reports).
    let text = api
        .refused("hostile.spin", json!({ "seconds": 30, "catch": true }))
        .await;
    assert!(text.contains("stopped by SIGXCPU"), "{text}");

    // The other server and the gateway went on serving throughout.
    let (ok, text) = api.call("bystander.whoami", json!({})).await;
    assert!(ok, "{text}");

    // Not caught, the CPU limit ends the process: the server's last error says so, and the
    // gateway starts it again.
    let (ok, text) = api
        .call("hostile.spin", json!({ "seconds": 30, "catch": false }))
        .await;
    assert!(!ok, "{text}");
    let mut seen = Vec::new();
    let down = tokio::time::timeout(WAIT, async {
        loop {
            let server = api.server("hostile").await;
            if server["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("CPU time limit"))
            {
                return server;
            }
            if !seen.contains(&server["lastError"]) {
                seen.push(server["lastError"].clone());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let down = down.unwrap_or_else(|_| panic!("the CPU limit is never the last error: {seen:?}"));
    assert!(
        down["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("SIGXCPU")),
        "{down}"
    );
    api.wait_state("hostile", "ready").await;
    let (ok, text) = api.call("hostile.whoami", json!({})).await;
    assert!(ok, "restarted: {text}");

    // The second process got a scratch folder of its own; stopping removes it.
    let (_, again) = api.call("hostile.whoami", json!({})).await;
    let again: Value = serde_json::from_str(&again).expect("whoami is JSON");
    let scratch = PathBuf::from(again["cwd"].as_str().expect("cwd"));
    assert!(scratch.is_dir(), "{again}");
    assert_ne!(again["cwd"], who["cwd"], "a fresh folder per start");
    assert!(
        !Path::new(who["cwd"].as_str().expect("cwd")).exists(),
        "the first one is gone"
    );
    let bystander = api.server("bystander").await;
    assert_eq!(bystander["state"], "ready", "{bystander}");

    let status = served.stop().await;
    assert!(status.success(), "{status:?}");
    assert!(!scratch.exists(), "the scratch folder is removed at stop");
    assert!(!root.path().join("server/planted.py").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_work_in_a_default_sandbox() {
    let root = tempfile::tempdir().expect("temp dir");
    open_folder(root.path());
    let files = writable_folder(&root.path().join("files"));
    std::fs::write(files.join("hello.txt"), "hello from the sandbox").expect("file");
    let memory = writable_folder(&root.path().join("memory"));
    let bin = peers().join("node_modules/.bin");
    let config = format!(
        r#"
[state]
database = "memory"

[server.auth]
mode = "none"

[sandbox]
{run_as}
[servers.everything]
command = {everything}
args = ["stdio"]
confirm = "none"

[servers.filesystem]
command = {filesystem}
args = [{files}]
confirm = "none"
sandbox = {{ write = [{files}] }}

[servers.memory]
command = {memory_bin}
env = {{ MEMORY_FILE_PATH = {memory_file} }}
confirm = "none"
sandbox = {{ write = [{memory}] }}

[servers.time]
command = {time}
args = ["--local-timezone", "UTC"]
confirm = "none"

# As `npx` starts it: npx and node from the system, the package from the folder it runs in.
[servers.npx]
command = "npx"
args = ["--no-install", "mcp-server-everything"]
cwd = {peers}
sandbox = {{ read = [{peers}] }}
confirm = "none"
"#,
        peers = toml_str(&peers()),
        // A checkout that other users cannot reach (under a private home) cannot lend its
        // installed peers to `nobody`: then they run as the user running the tests, in the
        // same sandbox otherwise.
        run_as = if others_reach(&peers()) {
            run_as_line().to_owned()
        } else {
            eprintln!("the checkout is not reachable by other users: servers run as this user");
            format!(
                "run_as = \"{}:{}\"\n",
                nix::unistd::geteuid(),
                nix::unistd::getegid()
            )
        },
        everything = toml_str(&bin.join("mcp-server-everything")),
        filesystem = toml_str(&bin.join("mcp-server-filesystem")),
        memory_bin = toml_str(&bin.join("mcp-server-memory")),
        files = toml_str(&files),
        memory = toml_str(&memory),
        memory_file = toml_str(&memory.join("memory.jsonl")),
        time = toml_str(&peers().join("venv/bin/mcp-server-time")),
    );
    // The packages the links point into are where the tests installed them.
    assert!(npm_package("@modelcontextprotocol/server-everything").exists());
    let served = ServedBinary::start(root.path(), Some(&config), &[]).await;
    served.wait_ready().await;
    let api = Api::new(&served);
    for id in ["everything", "filesystem", "memory", "time", "npx"] {
        let server = api.server(id).await;
        assert_eq!(server["state"], "ready", "{server}");
    }
    for echo in ["everything.echo", "npx.echo"] {
        let (ok, text) = api.call(echo, json!({ "message": "sandboxed" })).await;
        assert!(ok && text.contains("sandboxed"), "{echo}: {text}");
    }
    let (ok, text) = api
        .call(
            "filesystem.read_text_file",
            json!({ "path": files.join("hello.txt") }),
        )
        .await;
    assert!(ok && text.contains("hello from the sandbox"), "{text}");
    let (ok, text) = api
        .call(
            "filesystem.write_file",
            json!({ "path": files.join("new.txt"), "content": "written" }),
        )
        .await;
    assert!(ok, "{text}");
    assert_eq!(
        std::fs::read_to_string(files.join("new.txt")).expect("written"),
        "written"
    );
    let entity = json!({ "entities": [{ "name": "sandbox", "entityType": "test", "observations": ["works"] }] });
    let (ok, text) = api.call("memory.create_entities", entity).await;
    assert!(ok, "{text}");
    assert!(
        std::fs::read_to_string(memory.join("memory.jsonl"))
            .expect("the memory file")
            .contains("sandbox")
    );
    let (ok, text) = api
        .call("time.get_current_time", json!({ "timezone": "UTC" }))
        .await;
    assert!(ok && text.contains("UTC"), "{text}");
    let status = served.stop().await;
    assert!(status.success(), "{status:?}");
}
