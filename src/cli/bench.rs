//! `mcpgate bench` (hidden; run through `scripts/bench`): drives `tools/call` through the
//! upstreams directly, through mcpgate's REST API and MCP endpoint (a separate `mcpgate
//! serve` process with the whole policy path on), and through the peer gateways mcp-proxy and
//! mcpo, at several concurrencies; then `tools/list` over 50 upstreams with one frozen, and the
//! gateway's memory. Writes a markdown report to stdout and into BENCHMARKS.md.
//!
//! - `load`: the load generator; `stats`: percentiles; `targets`: the callers.
//! - `procs`: child processes and `/proc` readings; `setup`: gateway configuration, tokens.
//! - `calls`, `catalog`, `memory`: the three scenarios; `goals`: the targets checked;
//!   `report`: markdown.

mod amplification;
mod calls;
mod catalog;
mod cluster;
mod goals;
mod load;
mod memory;
mod procs;
mod report;
mod scan;
mod setup;
mod soak;
mod stats;
mod targets;
mod usage;

use std::{
    fmt::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::ExitCode,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;

/// The parts of a benchmark run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Part {
    /// `tools/call` at each concurrency, and the 1 MiB result.
    Calls,
    /// `tools/list` over 50 upstreams with one frozen.
    List,
    /// Resident memory idle and over a long run.
    Memory,
    /// The poisoning scan over 10,000 tools.
    Scan,
    /// Usage over a month of ten million calls (SQLite rollups).
    Usage,
    /// Calls at a fixed rate for a long time, mixed; every minute's figures (not in the
    /// default run: it takes `--soak-minutes`).
    Soak,
    /// What each kind of input costs the gateway against its size (memory) and against
    /// the plainest input's (CPU).
    Amplification,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Measured calls per target and concurrency (each after a warm-up of a tenth as many).
    #[arg(long, default_value_t = 5000)]
    calls: usize,
    /// Concurrency levels (workers, each with its own MCP session where there are sessions).
    #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
    concurrency: Vec<usize>,
    /// server-everything's `dist/index.js`: the stdio upstream compared with the peers.
    #[arg(long, value_name = "FILE")]
    everything: Option<PathBuf>,
    /// The Node.js that runs server-everything (looked up on PATH).
    #[arg(long, default_value = "node")]
    node: String,
    /// The `mcp-proxy` executable (PyPI mcp-proxy).
    #[arg(long, value_name = "FILE")]
    mcp_proxy: Option<PathBuf>,
    /// The `mcpo` executable (PyPI mcpo).
    #[arg(long, value_name = "FILE")]
    mcpo: Option<PathBuf>,
    /// Calls of the memory run.
    #[arg(long, default_value_t = 100_000)]
    memory_calls: usize,
    /// Calls in the usage part's month (chat turns: a tenth as many).
    #[arg(long, default_value_t = 10_000_000)]
    usage_calls: u64,
    /// The stores the usage part measures (PostgreSQL: the machine's, on 127.0.0.1:5432).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    usage_stores: Vec<String>,
    /// Calls per second of the soak.
    #[arg(long, default_value_t = 500)]
    soak_rate: u64,
    /// Minutes of the soak.
    #[arg(long, default_value_t = 30)]
    soak_minutes: u64,
    /// Which parts to run.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "calls,list,memory,scan,usage,amplification"
    )]
    only: Vec<Part>,
    /// Folder for configurations, databases and logs (emptied first).
    #[arg(long, value_name = "DIR", default_value = "target/bench-run")]
    work_dir: PathBuf,
    /// A markdown file whose generated section is replaced by this run's report.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// How the report names the command that produced it.
    #[arg(long, default_value = "scripts/bench")]
    command: String,
    /// Versions of the peers, as the report shows them.
    #[arg(long, default_value = "")]
    versions: String,
    /// Another mcpgate binary to run as the gateway (to compare builds); default: this one.
    #[arg(long, value_name = "FILE")]
    gateway_binary: Option<PathBuf>,
    /// Keep the gateway's audit log and confirmations in memory instead of SQLite (to see
    /// what the durable audit costs; the report's targets assume SQLite).
    #[arg(long)]
    memory_state: bool,
    /// Run only the targets whose `group / target` name contains this (repeat for several):
    /// e.g. `--targets direct --targets 'echo, Streamable HTTP / mcpgate REST'`.
    #[arg(long)]
    targets: Vec<String>,
}

/// A run's shared setting.
pub struct Bench {
    args: BenchArgs,
    exe: PathBuf,
    dir: PathBuf,
    secret: String,
}

/// A started gateway.
pub struct Gateway {
    proc: procs::Proc,
    addr: SocketAddr,
    /// The caller's token: tenant `bench`, role `bench`.
    token: String,
    /// The same caller with the admin role besides.
    admin_token: String,
}

impl Bench {
    fn exe_str(&self) -> String {
        self.exe.display().to_string()
    }

    /// `node dist/index.js stdio`, with node's full path (the gateway does not pass its PATH
    /// lookups on to a child's environment).
    fn everything_command(&self) -> Option<Vec<String>> {
        let script = self.args.everything.as_ref()?;
        let node = find_on_path(&self.args.node).unwrap_or_else(|| self.args.node.clone().into());
        Some(vec![
            node.display().to_string(),
            script.display().to_string(),
            "stdio".into(),
        ])
    }

    /// Writes a configuration for `upstreams` into a fresh folder `name` and starts the
    /// gateway on it.
    async fn start_gateway(
        &self,
        name: &str,
        upstreams: &[(String, setup::Upstream<'_>)],
        list_timeout: Duration,
    ) -> anyhow::Result<Gateway> {
        self.start_gateway_with(name, upstreams, list_timeout, None)
            .await
    }

    /// [`Bench::start_gateway`], as instance `name` of several sharing `shared`.
    async fn start_gateway_with(
        &self,
        name: &str,
        upstreams: &[(String, setup::Upstream<'_>)],
        list_timeout: Duration,
        shared: Option<&cluster::Stores>,
    ) -> anyhow::Result<Gateway> {
        let dir = self.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let config = dir.join("mcpgate.toml");
        std::fs::write(
            &config,
            setup::gateway_config(
                &dir,
                upstreams,
                list_timeout,
                self.args.memory_state,
                shared.map(|_| name),
            ),
        )?;
        let mut env = vec![(setup::SECRET_ENV, self.secret.clone())];
        if let Some(stores) = shared {
            env.push(("REDIS_URL", stores.redis_url.clone()));
            env.push(("DATABASE_URL", stores.database_url.clone()));
        }
        let exe = self.args.gateway_binary.as_ref().unwrap_or(&self.exe);
        let (proc, addr) =
            procs::spawn_gateway(exe, &config, &env, &dir.join("gateway.log")).await?;
        Ok(Gateway {
            proc,
            addr,
            token: setup::token(&self.secret, false)?,
            admin_token: setup::token(&self.secret, true)?,
        })
    }
}

pub async fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot locate the mcpgate binary")?;
    let dir = std::path::absolute(&args.work_dir)?;
    if dir.exists() {
        std::fs::remove_dir_all(&dir).with_context(|| format!("emptying {}", dir.display()))?;
    }
    std::fs::create_dir_all(&dir)?;
    let bench = Bench {
        exe,
        dir,
        secret: mcpgate::digest::random_hex(32),
        args,
    };
    let mut sections = String::new();
    let mut checks = Vec::new();
    if bench.args.only.contains(&Part::Calls) {
        let measured = calls::run(&bench).await?;
        checks.extend(goals::call_checks(&measured.calls));
        let _ = write!(
            sections,
            "### `tools/call`\n\n{}\n### A 1 MiB result\n\n{}\n{}",
            report::latency_table(&measured.calls),
            report::latency_table(&measured.big),
            first_call_section(&measured.first),
        );
        if let Some(cost) = &measured.cluster_cost {
            let _ = write!(
                sections,
                "\n### What a read call costs in the shared stores\n\n{} sequential REST calls \
                 through one of three instances: `{cost}` (Redis commands per call, by command, \
                 the ones a script runs included; audit rows per call).\n",
                calls::COST_CALLS,
            );
        }
    }
    if bench.args.only.contains(&Part::List) {
        let result = catalog::run(&bench).await?;
        checks.push(goals::list_check(&result));
        sections.push_str(&list_section(&result));
    }
    if bench.args.only.contains(&Part::Memory) {
        let result = memory::run(&bench).await?;
        checks.extend(goals::memory_checks(&result));
        sections.push_str(&memory_section(&result));
    }
    if bench.args.only.contains(&Part::Scan) {
        let result = scan::run()?;
        checks.push(scan_check(&result));
        sections.push_str(&scan_section(&result));
    }
    if bench.args.only.contains(&Part::Amplification) {
        let result = amplification::run(&bench).await?;
        checks.push(amplification_check(&result));
        sections.push_str(&result.section());
    }
    if bench.args.only.contains(&Part::Soak) {
        let result = soak::run(&bench).await?;
        checks.push(soak_check(&result));
        sections.push_str(&result.section(&bench.args.command));
    }
    if bench.args.only.contains(&Part::Usage) {
        let wanted = |store: &str| bench.args.usage_stores.iter().any(|s| s == store);
        let mut results = Vec::new();
        if wanted("sqlite") {
            results.push(usage::run(&bench.dir, bench.args.usage_calls).await?);
        }
        if wanted("postgres") {
            results.extend(usage::run_postgres(bench.args.usage_calls).await?);
        }
        for result in results {
            checks.push(usage_check(&result));
            sections.push_str(&usage_section(&result));
        }
    }
    let generated = format!(
        "{}\n### Targets\n\n{}\n{sections}",
        header(&bench.args),
        report::checks_table(&checks)
    );
    println!("{generated}");
    if let Some(out) = &bench.args.out {
        let existing = std::fs::read_to_string(out).unwrap_or_default();
        std::fs::write(out, report::splice(&existing, &generated))
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("bench: wrote {}", out.display());
    }
    Ok(ExitCode::SUCCESS)
}

/// When, where and how the run was made.
fn header(args: &BenchArgs) -> String {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown".into());
    let memory = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:").map(|v| v.trim().to_owned()))
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mut out = format!(
        "## Latest run\n\n\
         - Date: {}\n\
         - Machine: {cores} cores ({cpu}), {memory} memory, Linux {}; loopback only. The load \
           generator, the gateways and the upstreams share these cores.\n\
         - Command: `{}` (release build)\n\
         - Load: {} measured calls per target and concurrency, after a warm-up of a tenth as \
           many; concurrency {}; one MCP session per worker (the direct stdio upstream: one \
           session shared).\n",
        mcpgate::store::rfc3339(SystemTime::now()),
        read("/proc/sys/kernel/osrelease").trim(),
        args.command,
        args.calls,
        args.concurrency
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    );
    if !args.versions.is_empty() {
        let _ = writeln!(out, "- Peers: {}", args.versions);
    }
    out
}

/// What an upstream session per caller costs a new MCP session's first call.
fn first_call_section(rows: &[calls::FirstCalls]) -> String {
    if rows.is_empty() {
        return String::new();
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut out = String::from(
        "### The first call of an MCP session\n\n\
         New MCP sessions to `/mcp`, one after another, each calling a tool of an rmcp \
         server on 2025-11-25 over Streamable HTTP twice; through a session per caller the \
         first call opens the caller's upstream session (its handshake).\n\n\
         | upstream sessions | sessions | first call p50 ms | p95 ms | second call p50 ms | \
         p95 ms | first − second p50 ms | errors |\n\
         | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:+.3} | {} |",
            row.upstream,
            row.first.calls,
            ms(row.first.p50),
            ms(row.first.p95),
            ms(row.second.p50),
            ms(row.second.p95),
            ms(row.first.p50) - ms(row.second.p50),
            row.first.errors + row.second.errors,
        );
    }
    out.push('\n');
    out
}

/// The scan's target: 10,000 tools in under a second, on one thread and as a catalog build
/// (scan and cross-catalog signals, on every core), a refresh rescanning only what changed.
fn scan_check(result: &scan::ScanResult) -> report::Check {
    report::Check {
        what: format!("poisoning scan of {} tools", scan::TOOLS),
        target: "scan and build each under 1 s; a refresh after one change well under the \
                 first build"
            .into(),
        measured: format!(
            "scan {:.0} ms, build {:.0} ms, refresh {:.0} ms (the rules' prefilters built once per \
             process before: {:.0} ms)",
            report::ms(result.scan),
            report::ms(result.build),
            report::ms(result.refresh),
            report::ms(result.prepare)
        ),
        met: result.scan.max(result.build).as_secs_f64() < 1.0 && result.refresh < result.build,
    }
}

/// Amplification's target: no input costs the gateway more than 100 times its size in peak
/// memory, or 100 times the CPU per byte of the plainest input.
fn amplification_check(result: &amplification::AmplificationResult) -> report::Check {
    let (memory, cpu) = result.worst();
    report::Check {
        what: format!("amplification, {} kinds of input", result.rows.len()),
        target: format!(
            "peak memory within {0:.0}× an input's size, CPU within {0:.0}× the plainest \
             input's per byte",
            amplification::LIMIT
        ),
        measured: format!("worst: memory {memory:.2}×, CPU {cpu:.2}×"),
        met: memory <= amplification::LIMIT && cpu <= amplification::LIMIT,
    }
}

/// The soak's target: no errors beyond the injected ones, and no growth of the resident set
/// or the descriptors from its second minute (the first warms caches and pools) to its last.
fn soak_check(result: &soak::SoakResult) -> report::Check {
    let (first, last) = (
        result.rows.get(1).or(result.rows.first()),
        result.rows.last(),
    );
    let (rss, fds) = match (first, last) {
        (Some(first), Some(last)) => (
            last.rss_kib as i64 - first.rss_kib as i64,
            last.fds as i64 - first.fds as i64,
        ),
        _ => (0, 0),
    };
    let unexpected = result.unexpected();
    report::Check {
        what: format!(
            "soak, {} calls/s for {} minutes",
            result.rate,
            result.rows.len()
        ),
        target: "no errors beyond the injected ones; resident set within 16 MiB and \
                 descriptors within 16 of the second minute's"
            .into(),
        measured: format!(
            "{unexpected} unexpected outcomes; resident set {rss:+} KiB, descriptors {fds:+}"
        ),
        met: unexpected == 0 && rss.abs() <= 16 * 1024 && fds.abs() <= 16,
    }
}

/// Usage's target: every query of a month of ten million calls under a second.
fn usage_check(result: &usage::UsageResult) -> report::Check {
    let slowest = result
        .queries
        .iter()
        .map(|(_, with, _)| *with)
        .max()
        .unwrap_or_default();
    report::Check {
        what: format!(
            "usage over a month of {} calls ({})",
            result.calls, result.store
        ),
        target: "every query under 1 s".into(),
        measured: format!("slowest {:.0} ms", report::ms(slowest)),
        met: slowest.as_secs_f64() < 1.0,
    }
}

fn usage_section(result: &usage::UsageResult) -> String {
    let mut out = format!(
        "### Usage over a month of {} calls ({})\n\n\
         Written straight into the store in {:.0} s ({:.1} GB with the rollups); folded \
         into the hourly and daily sums in {:.0} s, as the gateway folds them every 10 s; what \
         is not yet folded is read from the log by every query. Median of 5.\n\n\
         | query | ms | from the log alone, ms |\n| --- | ---: | ---: |\n",
        result.calls,
        result.store,
        result.write.as_secs_f64(),
        result.file_bytes as f64 / 1e9,
        result.fold.as_secs_f64(),
    );
    for (what, with, without) in &result.queries {
        let _ = writeln!(
            out,
            "| {what} | {:.1} | {} |",
            report::ms(*with),
            without.map_or("-".to_owned(), |d| format!("{:.0}", report::ms(d)))
        );
    }
    out.push('\n');
    out
}

fn scan_section(result: &scan::ScanResult) -> String {
    format!(
        "### The poisoning scan over {} tools\n\n\
         | step | ms |\n| --- | ---: |\n\
         | build the rules' prefilters and the scan's tables (once per process, before the \
         first scan) | {:.1} |\n\
         | parse the definitions (the floor) | {:.1} |\n\
         | scan each, no cache (one thread) | {:.1} |\n\
         | build the catalog from scratch (scan and cross-catalog signals, every core) | {:.1} |\n\
         | build it again after one definition changed | {:.1} |\n\n\
         {} of the {} definitions have findings (the corpus's poisoned ones, repeated).\n",
        scan::TOOLS,
        report::ms(result.prepare),
        report::ms(result.parse),
        report::ms(result.scan),
        report::ms(result.build),
        report::ms(result.refresh),
        result.flagged,
        scan::TOOLS,
    )
}

fn list_section(result: &catalog::ListResult) -> String {
    let mut out = format!(
        "### `tools/list` over {} upstreams, one frozen (SIGSTOP)\n\n\
         | phase | interface | lists | p50 ms | p99 ms | max ms | tools listed | frozen \
         upstream's tools listed |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n",
        catalog::UPSTREAMS
    );
    for row in &result.rows {
        let s = &row.summary;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {} | {} |",
            row.phase,
            row.interface,
            s.calls,
            report::ms(s.p50),
            report::ms(s.p99),
            report::ms(s.max),
            row.fewest_tools,
            if row.dead_listed { "yes" } else { "no" }
        );
    }
    let _ = writeln!(
        out,
        "\nThe frozen upstream was marked degraded {:.2} s after the refresh was asked for \
         (per-upstream deadline {} s).\n",
        result.marked_degraded_after.as_secs_f64(),
        catalog::LIST_DEADLINE.as_secs()
    );
    out
}

fn memory_section(result: &memory::MemoryResult) -> String {
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let mut out = format!(
        "### Resident memory of the gateway process ({} stdio upstreams)\n\n\
         | when | VmRSS MiB |\n| --- | ---: |\n| idle | {:.1} |\n",
        memory::UPSTREAMS,
        mib(result.idle)
    );
    for (calls, rss) in &result.after {
        let _ = writeln!(
            out,
            "| after {calls} calls (REST, concurrency 64) | {:.1} |",
            mib(*rss)
        );
    }
    if result.errors > 0 {
        let _ = writeln!(out, "\n{} calls failed during the run.", result.errors);
    }
    out.push('\n');
    out
}

/// `program` as found on PATH (unchanged when it holds a `/`).
fn find_on_path(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|path| is_executable(path))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
