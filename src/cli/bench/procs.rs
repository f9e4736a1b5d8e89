//! The processes a benchmark starts (the gateway, upstreams, peer gateways) and what `/proc`
//! says about them: CPU time and resident memory.

use std::{
    net::SocketAddr,
    path::Path,
    process::Stdio,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use nix::{sys::signal::Signal, unistd::Pid};
use tokio::{
    io::{AsyncBufReadExt as _, BufReader},
    process::{Child, Command},
};

/// How long a process gets to stop after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);
/// How long a gateway may take to print its banner (it waits for every upstream first).
const START_DEADLINE: Duration = Duration::from_secs(120);
/// Linux reports CPU time in `/proc/PID/stat` in clock ticks of this rate (USER_HZ, fixed
/// at 100 in the kernel's ABI).
const TICKS_PER_SEC: u64 = 100;

/// A child process, stopped (SIGTERM, then SIGKILL) when [`Proc::stop`] is called or killed
/// when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
}

impl Proc {
    pub fn pid(&self) -> anyhow::Result<u32> {
        self.child
            .id()
            .with_context(|| format!("{} has exited", self.name))
    }

    /// Sends `signal` (SIGSTOP freezes the process: connections stay open, nothing answers).
    pub fn signal(&self, signal: Signal) -> anyhow::Result<()> {
        let pid = i32::try_from(self.pid()?).context("pid out of range")?;
        nix::sys::signal::kill(Pid::from_raw(pid), signal)
            .with_context(|| format!("cannot signal {}", self.name))
    }

    /// Asks the process to stop and waits for it; kills it after a grace period.
    pub async fn stop(mut self) {
        if self.signal(Signal::SIGCONT).is_ok() {
            let _ = self.signal(Signal::SIGTERM);
        }
        if tokio::time::timeout(STOP_GRACE, self.child.wait())
            .await
            .is_err()
        {
            eprintln!("bench: {} did not stop in time; killing it", self.name);
            let _ = self.child.kill().await;
        }
    }
}

/// Starts `command` with `env` added to this process's environment; its output goes to
/// `log`.
pub fn spawn(
    name: &str,
    command: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> anyhow::Result<Proc> {
    let (program, args) = command.split_first().context("an empty command")?;
    let out = std::fs::File::create(log).with_context(|| format!("{}", log.display()))?;
    let err = out.try_clone()?;
    let child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("cannot start {name} ({program})"))?;
    Ok(Proc {
        name: name.to_owned(),
        child,
    })
}

/// Starts `mcpgate serve --config CONFIG` and waits for its banner; returns it with the
/// address it serves on. Logs go to `log`.
pub async fn spawn_gateway(
    exe: &Path,
    config: &Path,
    env: &[(&str, String)],
    log: &Path,
) -> anyhow::Result<(Proc, SocketAddr)> {
    let err = std::fs::File::create(log).with_context(|| format!("{}", log.display()))?;
    let mut child = Command::new(exe)
        .arg("serve")
        .arg("--config")
        .arg(config)
        .env("MCPGATE_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err)
        .kill_on_drop(true)
        .spawn()
        .context("cannot start the gateway")?;
    let stdout = child.stdout.take().context("gateway stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let banner = async {
        while let Some(line) = lines.next_line().await? {
            if let Some(addr) = banner_address(&line) {
                return Ok(Some(addr));
            }
        }
        Ok::<_, std::io::Error>(None)
    };
    let addr = match tokio::time::timeout(START_DEADLINE, banner).await {
        Ok(Ok(Some(addr))) => addr,
        Ok(Ok(None)) => bail!("the gateway exited before serving; see {}", log.display()),
        Ok(Err(err)) => bail!("reading the gateway's output: {err}"),
        Err(_) => bail!("the gateway did not start in {START_DEADLINE:?}"),
    };
    // The rest of its standard output (nothing, normally) is read and dropped, so it never
    // blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let proc = Proc {
        name: "mcpgate".to_owned(),
        child,
    };
    Ok((proc, addr))
}

/// The address in `mcpgate serve`'s first banner line.
fn banner_address(line: &str) -> Option<SocketAddr> {
    line.strip_prefix("mcpgate is serving on http://")?
        .trim()
        .parse()
        .ok()
}

/// A loopback port free right now (bound, read and released).
pub fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Waits until `url` answers a GET (with any status when `any_status`, else a 2xx), at most
/// `deadline`.
pub async fn wait_http(url: &str, deadline: Duration, any_status: bool) -> anyhow::Result<()> {
    let client = super::targets::http_client()?;
    let started = Instant::now();
    loop {
        if let Ok(response) = client.get(url).send().await
            && (any_status || response.status().is_success())
        {
            return Ok(());
        }
        if started.elapsed() > deadline {
            bail!("{url} did not answer within {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// User + system CPU time of process `pid` so far (all its threads, live and gone).
pub fn cpu_time(pid: u32) -> anyhow::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_cpu_time(&stat).context("unexpected /proc/PID/stat")
}

/// Resident set of process `pid`, in bytes.
pub fn rss_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    parse_rss(&status).context("no VmRSS in /proc/PID/status")
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line. The command name (field 2)
/// may hold spaces and parentheses, so fields are counted after its last `)`.
fn parse_cpu_time(stat: &str) -> Option<Duration> {
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let ticks = utime + stime;
    Some(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000 / TICKS_PER_SEC),
    ))
}

/// `VmRSS` of a `/proc/PID/status` text, in bytes.
fn parse_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_after_the_command_name() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1380 0 0 0 \
                    250 75 0 0 20 0 3 0 1234 56789 345 18446744073709551615";
        assert_eq!(parse_cpu_time(stat), Some(Duration::from_millis(3250)));
        assert_eq!(parse_cpu_time("garbage"), None);
    }

    #[test]
    fn rss_is_read_in_bytes() {
        let status = "Name:\tmcpgate\nVmPeak:\t  9000 kB\nVmRSS:\t   12345 kB\nThreads:\t3\n";
        assert_eq!(parse_rss(status), Some(12345 * 1024));
        assert_eq!(parse_rss("Name:\tx\n"), None);
    }

    #[test]
    fn banner_names_the_address() {
        assert_eq!(
            banner_address("mcpgate is serving on http://127.0.0.1:4321"),
            Some("127.0.0.1:4321".parse().expect("address"))
        );
        assert_eq!(banner_address("  REST API   http://127.0.0.1:1/api"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let pid = std::process::id();
        assert!(rss_bytes(pid).expect("rss") > 0);
        assert!(cpu_time(pid).is_ok());
    }
}
