//! The disk under the SQLite file fills up (a small tmpfs, mounted by the test: it runs as
//! root, as the project's tests do on their machines): calls that need an audit record fail
//! typed, nothing answered loses its record, and the gateway recovers by itself when space
//! returns (RELIABILITY.md, "Fault injection").

use std::{
    collections::HashSet,
    io::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use serde_json::{Value, json};

use crate::support::{ServedBinary, WAIT, mcpgate_bin, sandbox_section};

/// A tmpfs of `size`, unmounted when dropped (lazily: whatever still holds a file in it).
struct Tmpfs {
    path: PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(path).expect("mount point");
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(path)
            .status()
            .expect("mount runs");
        assert!(
            mounted.success(),
            "mounting a tmpfs needs root (the project's test machines run tests as root)"
        );
        Tmpfs {
            path: path.to_owned(),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

/// Writes `file` until the file system has no byte left.
fn fill(file: &Path) {
    let mut out = std::fs::File::create(file).expect("filler file");
    let block = vec![0u8; 64 * 1024];
    loop {
        match out.write(&block) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
            Err(e) => panic!("filling the disk: {e}"),
        }
    }
    // The last partial blocks, a byte at a time.
    while out.write(&[0]).is_ok_and(|n| n == 1) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_calls_typed_and_the_gateway_recovers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk = Tmpfs::mount(&dir.path().join("disk"), "4m");
    let config = format!(
        "{sandbox}[limits]\nuser_calls_per_minute = 0\nserver_calls_per_minute = 0\n\n\
         [state]\ndatabase = {db}\n\n\
         [servers.demo]\ncommand = {bin}\nargs = [\"demo-server\"]\n\
         read_only_tools = [\"echo\", \"add\", \"time_now\", \"list_notes\"]\n",
        sandbox = sandbox_section(&[], &[]),
        db = toml::Value::String(disk.path.join("mcpgate.db").to_string_lossy().into_owned()),
        bin = toml::Value::String(mcpgate_bin().to_string_lossy().into_owned()),
    );
    let served = ServedBinary::start(dir.path(), Some(&config), &[]).await;
    served.wait_ready().await;
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(WAIT)
        .build()
        .expect("client");
    let token = served.token.clone().expect("the dev token");
    let call = async |id: &str| -> (u16, Value) {
        let response = http
            .post(format!("{}/api/v1/mcp/tools/call", served.base))
            .bearer_auth(&token)
            .header("x-request-id", id)
            .json(&json!({ "tool": "demo.echo", "arguments": { "message": id } }))
            .send()
            .await
            .expect("every call is answered");
        let status = response.status().as_u16();
        (status, response.json().await.expect("a JSON body"))
    };
    let mut answered_ok = HashSet::new();
    for i in 0..20 {
        let id = format!("before-{i}");
        let (status, body) = call(&id).await;
        assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");
        answered_ok.insert(id);
    }

    // The disk fills up. Whatever room SQLite's files already have may still take some
    // records; once it is gone, calls are refused, typed, and none answered `ok` unrecorded.
    let filler = disk.path.join("filler");
    fill(&filler);
    let mut refused = 0;
    for i in 0..400 {
        let id = format!("full-{i}");
        let (status, body) = call(&id).await;
        if body["ok"] == json!(true) {
            answered_ok.insert(id);
            continue;
        }
        assert_eq!(
            (status, &body["code"]),
            (503, &json!("store_unavailable")),
            "{body}"
        );
        refused += 1;
    }
    assert!(refused > 0, "400 calls on a full disk were all recorded");

    // Space returns: calls succeed again, without a restart.
    std::fs::remove_file(&filler).expect("filler removed");
    let mut recovered = false;
    let start = std::time::Instant::now();
    let mut i = 0;
    while !recovered {
        assert!(start.elapsed() < WAIT, "the gateway did not recover");
        let id = format!("after-{i}");
        i += 1;
        let (_, body) = call(&id).await;
        if body["ok"] == json!(true) {
            answered_ok.insert(id);
            recovered = true;
        } else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    for i in 0..20 {
        let id = format!("recovered-{i}");
        let (status, body) = call(&id).await;
        assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");
        answered_ok.insert(id);
    }
    let status = served.stop().await;
    assert!(status.success(), "{status:?}");

    // Every call answered `ok` has its record; the file is sound.
    let db = rusqlite::Connection::open(disk.path.join("mcpgate.db")).expect("the state file");
    let integrity: String = db
        .query_row("PRAGMA integrity_check", [], |row| row.get(0))
        .expect("integrity check");
    assert_eq!(integrity, "ok");
    let mut query = db
        .prepare("SELECT request_id FROM audit WHERE outcome = 'ok'")
        .expect("query");
    let recorded: HashSet<String> = query
        .query_map([], |row| row.get(0))
        .expect("rows")
        .collect::<Result<_, _>>()
        .expect("request ids");
    let missing: Vec<_> = answered_ok.difference(&recorded).collect();
    assert!(missing.is_empty(), "answered without a record: {missing:?}");
    drop(query);
    drop(db);
    drop(disk);
}
