//! stdio upstreams: a hardened child process (no shell, cleared environment, own process
//! group, optional supervisor, a sandbox entered by the supervisor), stdout framed with a
//! line-length bound, stderr drained into the log with a byte bound.

use std::{
    io,
    path::PathBuf,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
    time::Duration,
};

use nix::{
    sys::signal::{Signal, killpg},
    unistd::Pid,
};
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader, ReadBuf},
    process::{Child, ChildStdin, ChildStdout, Command},
};

use super::{
    sandbox::{self, SANDBOX_FAILED, STATUS_PREFIX},
    supervisor::NOT_STARTED,
};
use crate::config::{Env, RunAs, SandboxMode, Secret, ServerId, StdioConfig};

/// Variables passed to every child from the gateway's own environment: what programs need to
/// start (find executables, a home, a locale), nothing that usually carries a secret.
const INHERITED_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "TMPDIR", "TZ",
];

/// How long a child gets to exit on its own after its stdin is closed, and again after
/// SIGTERM, before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(3);

/// How to start a stdio server.
#[derive(Debug, Clone)]
pub struct StdioLaunch {
    pub server: ServerId,
    pub config: StdioConfig,
    /// The `mcpgate` binary to run as supervisor (see [`super::supervisor`]); `None` runs the
    /// server directly (still in its own process group, but a SIGKILLed gateway then leaves
    /// it to notice the closed stdin on its own).
    pub supervisor: Option<PathBuf>,
    pub max_line_bytes: usize,
    pub max_stderr_line_bytes: usize,
}

/// A running child process; kills its whole process group when closed or dropped, and
/// removes the scratch folder it was given.
#[derive(Debug)]
pub struct ChildGuard {
    child: Child,
    group: Option<Pid>,
    scratch: Option<PathBuf>,
    /// What the sandbox enforced, as the supervisor said before the server ran.
    sandbox: SandboxStatus,
}

impl ChildGuard {
    /// Stops the child: waits for it to exit after stdin was closed, then SIGTERM, then
    /// SIGKILL to the whole group, and reaps it. Says how it ended when it ended by itself
    /// in a way worth telling (a limit, a signal, a sandbox that could not be entered).
    pub async fn shutdown(mut self) -> Option<String> {
        let mut ended = None;
        match tokio::time::timeout(EXIT_GRACE, self.child.wait()).await {
            Ok(status) => ended = status.ok().and_then(|s| exit_reason(s, &self.sandbox)),
            Err(_) => {
                self.signal(Signal::SIGTERM);
                if tokio::time::timeout(EXIT_GRACE, self.child.wait())
                    .await
                    .is_err()
                {
                    self.signal(Signal::SIGKILL);
                    let _ = self.child.wait().await;
                }
            }
        }
        // Grandchildren may outlive a server that exited by itself.
        self.signal(Signal::SIGKILL);
        self.group = None;
        self.remove_scratch();
        ended
    }

    /// What the sandbox enforced (`None` before the supervisor said, or without a sandbox).
    pub fn sandbox_status(&self) -> SandboxStatus {
        self.sandbox.clone()
    }

    fn remove_scratch(&mut self) {
        if let Some(scratch) = self.scratch.take() {
            let _ = std::fs::remove_dir_all(scratch);
        }
    }

    fn signal(&self, signal: Signal) {
        if let Some(group) = self.group {
            let _ = killpg(group, signal);
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        // Last resort when `shutdown` was not awaited: no orphans, whatever path we took.
        self.signal(Signal::SIGKILL);
        let _ = self.child.start_kill();
        self.remove_scratch();
    }
}

/// What the supervisor reported of a server's sandbox: the status line's JSON.
#[derive(Debug, Clone, Default)]
pub struct SandboxStatus(Arc<Mutex<Option<serde_json::Value>>>);

impl SandboxStatus {
    pub fn get(&self) -> Option<serde_json::Value> {
        self.0.lock().ok().and_then(|slot| slot.clone())
    }

    fn set(&self, value: serde_json::Value) {
        if let Ok(mut slot) = self.0.lock() {
            *slot = Some(value);
        }
    }
}

/// Why a server's process ended, when it says more than "closed": 128 plus a signal from the
/// supervisor (or the signal itself without one), or the sandbox failing.
fn exit_reason(status: std::process::ExitStatus, sandbox: &SandboxStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt as _;
    let signal = status.signal().or_else(|| {
        status
            .code()
            .filter(|c| (129..=159).contains(c))
            .map(|c| c - 128)
    });
    if status.code() == Some(NOT_STARTED) {
        return Some(
            "its program could not be started (the log has why: not found, or not readable \
             by its user or its sandbox)"
                .into(),
        );
    }
    if status.code() == Some(SANDBOX_FAILED) && sandbox.get().is_none() {
        return Some(
            "its sandbox could not be entered (the log has the supervisor's reason)".into(),
        );
    }
    let signal = Signal::try_from(signal?).ok()?;
    Some(match signal {
        Signal::SIGXCPU => {
            "it used up its CPU time limit (sandbox cpu_seconds) and was stopped by SIGXCPU"
                .to_owned()
        }
        Signal::SIGXFSZ => "it exceeded the file size limit (SIGXFSZ)".to_owned(),
        Signal::SIGKILL => {
            "it was killed (SIGKILL: past the hard CPU limit, out of memory, or by another process)"
                .to_owned()
        }
        other => format!("it ended on signal {}", other.as_str()),
    })
}

/// Starts the child. Returns its stdout (line-bounded), stdin, the guard, and the shared slot
/// where a framing failure is described.
pub fn spawn(
    launch: &StdioLaunch,
    env: &Env,
) -> Result<
    (
        LineBounded<ChildStdout>,
        ChildStdin,
        ChildGuard,
        FramingError,
    ),
    SpawnError,
> {
    let mut vars = resolve_env(&launch.config, env)?;
    let sandboxed = launch.config.sandbox.mode != SandboxMode::Off;
    let mut scratch = None;
    let mut command = match &launch.supervisor {
        Some(exe) => {
            let mut c = Command::new(exe);
            c.arg("supervise")
                .arg("--parent")
                .arg(std::process::id().to_string());
            if sandboxed {
                let (plan, made) = sandbox_plan(launch, &mut vars)?;
                scratch = made;
                c.arg("--sandbox").arg(plan);
            }
            c.arg("--")
                .arg(&launch.config.command)
                .args(&launch.config.args);
            c
        }
        None if sandboxed => {
            return Err(SpawnError::Sandbox(
                "the sandbox is entered by the mcpgate supervisor, and none is configured \
                 (GatewayOptions::supervisor); set the server's sandbox mode to \"off\" to \
                 run it unsandboxed"
                    .to_owned(),
            ));
        }
        None => {
            let mut c = Command::new(&launch.config.command);
            c.args(&launch.config.args);
            c
        }
    };
    command
        .env_clear()
        .envs(vars.iter().map(|(k, v)| (k, v.expose())))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(cwd) = launch.config.cwd.as_ref().or(scratch.as_ref()) {
        command.current_dir(cwd);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(source) => {
            if let Some(scratch) = &scratch {
                let _ = std::fs::remove_dir_all(scratch);
            }
            return Err(SpawnError::Spawn {
                command: launch.config.command.clone(),
                source,
            });
        }
    };
    let group = child.id().map(|id| Pid::from_raw(id as i32));
    let status = SandboxStatus::default();
    let guard_parts = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let guard = ChildGuard {
        child,
        group,
        scratch,
        sandbox: status.clone(),
    };
    let (Some(stdin), Some(stdout), Some(stderr)) = guard_parts else {
        return Err(SpawnError::Pipes);
    };
    let status = sandboxed.then_some(status);
    drain_stderr(
        launch.server.clone(),
        stderr,
        launch.max_stderr_line_bytes,
        status,
    );
    let failure = FramingError::default();
    let stdout = LineBounded::new(stdout, launch.max_line_bytes, failure.clone());
    Ok((stdout, stdin, guard, failure))
}

/// The sandbox plan for `launch` (as JSON for the supervisor), and the scratch folder made
/// for it when it has no `cwd`: its working folder, `HOME` and `TMPDIR` unless its `env`
/// names them, owned by the user it runs as, removed when it stops.
fn sandbox_plan(
    launch: &StdioLaunch,
    vars: &mut Vec<(String, Secret)>,
) -> Result<(String, Option<PathBuf>), SpawnError> {
    let config = &launch.config;
    let gateway_uid = nix::unistd::geteuid().as_raw();
    if let Some(reason) = config.sandbox.refusal(gateway_uid) {
        return Err(SpawnError::Sandbox(reason.to_owned()));
    }
    let (workdir, scratch) = match &config.cwd {
        Some(cwd) => (cwd.clone(), None),
        None => {
            let scratch = make_scratch(&launch.server, &config.sandbox.run_as)?;
            (scratch.clone(), Some(scratch))
        }
    };
    for name in ["HOME", "TMPDIR"] {
        if !config.env.iter().any(|(n, _)| n == name) {
            vars.retain(|(n, _)| n != name);
            vars.push((
                name.to_owned(),
                Secret::new(workdir.to_string_lossy().into_owned()),
            ));
        }
    }
    let path = vars
        .iter()
        .find(|(n, _)| n == "PATH")
        .map(|(_, v)| v.expose().to_owned());
    let plan = sandbox::plan(config, &workdir, path.as_deref());
    let json = serde_json::to_string(&plan)
        .map_err(|err| SpawnError::Sandbox(format!("a sandbox path is not UTF-8: {err}")))?;
    Ok((json, scratch))
}

/// A fresh, private folder for one start of `server`, owned by the user it runs as.
fn make_scratch(server: &ServerId, run_as: &RunAs) -> Result<PathBuf, SpawnError> {
    use std::os::unix::fs::DirBuilderExt as _;
    let fail = |what: &str, err: &dyn std::fmt::Display| {
        SpawnError::Sandbox(format!(
            "cannot make the server's scratch folder ({what}): {err}"
        ))
    };
    let dir = std::env::temp_dir().join(format!(
        "mcpgate-{}-{server}-{}",
        std::process::id(),
        crate::digest::random_hex(4)
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| fail("create", &e))?;
    if let RunAs::User { uid, gid, .. } = run_as {
        let owner = (Some((*uid).into()), Some((*gid).into()));
        if let Err(err) = nix::unistd::chown(&dir, owner.0, owner.1) {
            let _ = std::fs::remove_dir(&dir);
            return Err(fail("chown", &err));
        }
    }
    Ok(dir)
}

fn resolve_env(config: &StdioConfig, env: &Env) -> Result<Vec<(String, Secret)>, SpawnError> {
    let mut vars: Vec<(String, Secret)> = INHERITED_VARS
        .iter()
        .filter_map(|name| {
            let value = env.get(name)?;
            Some(((*name).to_owned(), Secret::new(value)))
        })
        .collect();
    for (name, template) in &config.env {
        let value = template.resolve(env).map_err(|reason| SpawnError::Env {
            name: name.clone(),
            reason,
        })?;
        vars.retain(|(n, _)| n != name);
        vars.push((name.clone(), value));
    }
    Ok(vars)
}

/// Copies the child's stderr into the log, a line at a time, each line cut to `max` bytes.
/// With `sandbox`, the first line is the supervisor's word on the sandbox: kept there, and
/// logged as a warning when the kernel enforced less than asked. The task ends when the
/// child closes stderr.
fn drain_stderr(
    server: ServerId,
    stderr: tokio::process::ChildStderr,
    max: usize,
    mut sandbox: Option<SandboxStatus>,
) {
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line_capped(&mut reader, &mut line, max).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let text = String::from_utf8_lossy(&line);
                    let text = text.trim_end();
                    // Only the first line: the server itself writes after it.
                    let status = sandbox.take().and_then(|slot| {
                        let json = text.strip_prefix(STATUS_PREFIX)?;
                        Some((slot, serde_json::from_str::<serde_json::Value>(json).ok()?))
                    });
                    if let Some((slot, status)) = status {
                        if status["landlock"] != "full" {
                            tracing::warn!(server = %server, sandbox = %status, "the kernel enforces only part of this server's sandbox");
                        } else {
                            tracing::debug!(server = %server, sandbox = %status, "sandbox entered");
                        }
                        slot.set(status);
                        continue;
                    }
                    tracing::info!(server = %server, stderr = %text, "upstream stderr");
                }
            }
        }
    });
}

/// Reads one line, keeping at most `max` bytes of it and discarding the rest.
async fn read_line_capped<R: AsyncBufReadExt + Unpin>(
    reader: &mut R,
    out: &mut Vec<u8>,
    max: usize,
) -> io::Result<usize> {
    let mut total = 0;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(total);
        }
        let newline = available.iter().position(|b| *b == b'\n');
        let take = newline.map_or(available.len(), |i| i + 1);
        let room = max.saturating_sub(out.len());
        out.extend_from_slice(&available[..take.min(room)]);
        reader.consume(take);
        total += take;
        if newline.is_some() {
            return Ok(total);
        }
    }
}

/// Why a stdio stream was cut off, shared between the reader and whoever reports the error.
#[derive(Debug, Clone, Default)]
pub struct FramingError(Arc<Mutex<Option<String>>>);

impl FramingError {
    pub fn get(&self) -> Option<String> {
        self.0.lock().ok().and_then(|slot| slot.clone())
    }

    fn set(&self, message: String) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert(message);
        }
    }
}

/// An `AsyncRead` that fails once a line grows past `max` bytes without a newline, so a child
/// that prints without newlines cannot grow our buffers without bound: the connection fails
/// with a clear error instead.
#[derive(Debug)]
pub struct LineBounded<R> {
    inner: R,
    max: usize,
    current: usize,
    failure: FramingError,
}

impl<R> LineBounded<R> {
    pub fn new(inner: R, max: usize, failure: FramingError) -> Self {
        LineBounded {
            inner,
            max,
            current: 0,
            failure,
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for LineBounded<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.current > self.max {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "line too long",
            )));
        }
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                // Every line of the read is measured, not only the one it ends in: a long
                // line with its newline in the same read is over the bound all the same.
                for byte in &buf.filled()[before..] {
                    if *byte == b'\n' {
                        this.current = 0;
                    } else {
                        this.current += 1;
                        if this.current > this.max {
                            break;
                        }
                    }
                }
                if this.current > this.max {
                    let message = format!(
                        "upstream wrote a line longer than {} bytes on stdout; connection closed",
                        this.max
                    );
                    this.failure.set(message.clone());
                    // An error must not come with data: hand back none of this read.
                    buf.set_filled(before);
                    return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, message)));
                }
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start `{command}`: {source}")]
    Spawn { command: String, source: io::Error },
    #[error("environment variable `{name}` for the child: {reason}")]
    Env { name: String, reason: String },
    #[error("child process pipes were not available")]
    Pipes,
    #[error("sandbox: {0}")]
    Sandbox(String),
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncReadExt;

    use super::*;

    #[tokio::test]
    async fn line_bound_fails_on_long_line_and_passes_short_ones() {
        let data = b"short\nline\n".repeat(10);
        let failure = FramingError::default();
        let mut ok = LineBounded::new(&data[..], 8, failure.clone());
        let mut out = Vec::new();
        ok.read_to_end(&mut out).await.expect("short lines pass");
        assert_eq!(out, data);
        assert!(failure.get().is_none());

        let long = [b'x'; 100];
        let failure = FramingError::default();
        let mut bad = LineBounded::new(&long[..], 8, failure.clone());
        let err = bad
            .read_to_end(&mut Vec::new())
            .await
            .expect_err("long line fails");
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(
            failure
                .get()
                .expect("reason recorded")
                .contains("longer than 8 bytes")
        );
    }

    #[tokio::test]
    async fn a_line_of_the_bound_passes_and_one_byte_more_fails() {
        // The bound counts the line's bytes, not its newline.
        let at_bound = b"12345678\n".repeat(3);
        let failure = FramingError::default();
        let mut fits = LineBounded::new(&at_bound[..], 8, failure.clone());
        let mut out = Vec::new();
        fits.read_to_end(&mut out)
            .await
            .expect("lines of 8 bytes pass");
        assert_eq!(out, at_bound);
        assert!(failure.get().is_none());

        let over = b"12345678\n123456789\n";
        let failure = FramingError::default();
        let mut bad = LineBounded::new(&over[..], 8, failure.clone());
        bad.read_to_end(&mut Vec::new())
            .await
            .expect_err("a line of 9 bytes fails");
        assert!(failure.get().is_some());
    }

    #[test]
    fn how_a_server_ended_is_told_from_its_supervisors_code_or_signal() {
        use std::os::unix::process::ExitStatusExt as _;
        let exited = |code: i32| std::process::ExitStatus::from_raw(code << 8);
        let no_status = SandboxStatus::default();
        let reason = |status, sandbox: &SandboxStatus| exit_reason(status, sandbox);
        // The supervisor exits 128 plus the signal; without one, the signal itself.
        let cpu = reason(exited(128 + 24), &no_status).expect("a reason");
        assert!(
            cpu.contains("CPU time limit") && cpu.contains("SIGXCPU"),
            "{cpu}"
        );
        let direct = std::process::ExitStatus::from_raw(24);
        assert_eq!(reason(direct, &no_status), Some(cpu));
        assert!(reason(exited(137), &no_status).is_some_and(|r| r.contains("SIGKILL")));
        assert!(
            reason(exited(NOT_STARTED), &no_status)
                .is_some_and(|r| r.contains("could not be started"))
        );
        // 71 is the sandbox failing only before the supervisor reported entering it.
        assert!(reason(exited(SANDBOX_FAILED), &no_status).is_some_and(|r| r.contains("sandbox")));
        let entered = SandboxStatus::default();
        entered.set(serde_json::json!({"landlock": "full"}));
        assert_eq!(reason(exited(SANDBOX_FAILED), &entered), None);
        // An ordinary end says nothing more than "closed".
        assert_eq!(reason(exited(0), &no_status), None);
        assert_eq!(reason(exited(1), &no_status), None);
    }

    #[tokio::test]
    async fn stderr_lines_are_capped() {
        let input = b"0123456789abcdef\nsecond\n";
        let mut reader = BufReader::new(&input[..]);
        let mut line = Vec::new();
        read_line_capped(&mut reader, &mut line, 4)
            .await
            .expect("reads");
        assert_eq!(line, b"0123");
        line.clear();
        read_line_capped(&mut reader, &mut line, 40)
            .await
            .expect("reads");
        assert_eq!(line, b"second\n");
    }
}
