//! No orphans: stopping the gateway, gracefully (SIGTERM) or not (SIGKILL), leaves no
//! upstream process behind, grandchildren included.

use std::{path::Path, process::Stdio, time::Duration};

use nix::{sys::signal::Signal, unistd::Pid};
use tokio::process::Command;

use crate::support::{alive, mcpgate_bin, wait_for};

/// Writes a config with a `spawner` server (which starts a grandchild and records both PIDs)
/// and a `slow` server whose `sleep` keeps the gateway busy.
fn write_config(dir: &Path) -> std::path::PathBuf {
    let bin = mcpgate_bin();
    let pid_file = dir.join("pids");
    let text = format!(
        r#"
{sandbox}
[servers.spawner]
command = "{bin}"
args = ["fixture", "spawner"]
env = {{ FIXTURE_PID_FILE = "{pids}" }}

[servers.slow]
command = "{bin}"
args = ["fixture", "slow"]
confirm = "none"
"#,
        bin = bin.display(),
        pids = pid_file.display(),
        sandbox = crate::support::sandbox_section(&[], &[dir]),
    );
    let path = dir.join("mcpgate.toml");
    std::fs::write(&path, text).expect("config written");
    path
}

async fn stop_gateway_and_check(signal: Signal) {
    let dir = tempfile::tempdir().expect("temp dir");
    let config = write_config(dir.path());
    let mut gateway = Command::new(mcpgate_bin())
        .arg("--config")
        .arg(&config)
        .args(["call", "slow.sleep", r#"{"ms": 60000}"#])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("mcpgate starts");
    let pid_file = dir.path().join("pids");
    let pids: Vec<i32> = wait_for("the spawner to record its PIDs", || {
        let text = std::fs::read_to_string(&pid_file).ok()?;
        let pids: Vec<i32> = text.lines().filter_map(|l| l.trim().parse().ok()).collect();
        (pids.len() == 2).then_some(pids)
    })
    .await;
    assert!(pids.iter().all(|p| alive(*p)), "server and grandchild run");
    // Give the call time to be in flight: wait until the slow server is connected too.
    wait_for("the slow server process", || {
        let out = std::process::Command::new("pgrep")
            .args(["-f", "fixture slow"])
            .output()
            .ok()?;
        (!out.stdout.is_empty()).then_some(())
    })
    .await;

    let pid = Pid::from_raw(gateway.id().expect("running") as i32);
    nix::sys::signal::kill(pid, signal).expect("signal sent");
    tokio::time::timeout(Duration::from_secs(30), gateway.wait())
        .await
        .expect("the gateway exits")
        .expect("wait works");
    wait_for("every upstream process to be gone", || {
        pids.iter().all(|p| !alive(*p)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn sigterm_leaves_no_orphans() {
    stop_gateway_and_check(Signal::SIGTERM).await;
}

#[tokio::test]
async fn sigkill_leaves_no_orphans() {
    stop_gateway_and_check(Signal::SIGKILL).await;
}

/// A benchmark stopped by SIGTERM takes down everything it started: the upstream fixture, the
/// gateway under test and the gateway's own upstreams.
#[tokio::test]
async fn a_stopped_benchmark_leaves_no_process_behind() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut bench = Command::new(mcpgate_bin())
        .args(["bench", "--only", "calls", "--calls", "100000000"])
        .args(["--concurrency", "1", "--everything"])
        .arg(crate::support::everything_js())
        .args(["--targets", "rmcp echo, Streamable HTTP / mcpgate REST"])
        .arg("--work-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the benchmark starts");
    let bench_pid = bench.id().expect("running") as i32;
    // Running calls: the gateway under test has started its upstreams.
    let started = wait_for("the gateway under test and its upstreams", || {
        let pids = crate::support::child_pids(bench_pid);
        let gateway = pids
            .iter()
            .any(|&pid| command_line(pid).contains(" serve "));
        let supervised = pids
            .iter()
            .any(|&pid| command_line(pid).contains(" supervise "));
        (gateway && supervised).then_some(pids)
    })
    .await;

    nix::sys::signal::kill(Pid::from_raw(bench_pid), Signal::SIGTERM).expect("signal sent");
    let status = tokio::time::timeout(Duration::from_secs(30), bench.wait())
        .await
        .expect("the benchmark exits")
        .expect("wait works");
    assert_eq!(status.code(), Some(130), "{status:?}");
    wait_for("every process the benchmark started to be gone", || {
        started.iter().all(|&pid| !alive(pid)).then_some(())
    })
    .await;
}

/// The command line of `pid`, its arguments joined by spaces (empty once it is gone).
fn command_line(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .unwrap_or_default()
}
