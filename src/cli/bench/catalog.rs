//! `tools/list` across 50 upstreams while one of them never answers: the gateway must answer
//! at once from its last good catalog, not wait for the dead upstream.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use nix::sys::signal::Signal;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::{Bench, procs, report::ms, setup::Upstream, stats::Summary, targets};

/// Upstreams behind the gateway; the last one is frozen.
pub const UPSTREAMS: usize = 50;
/// Tools each upstream lists (the bench fixture's `echo` and `big`).
const TOOLS_EACH: usize = 2;
/// The per-upstream deadline of a refresh (`[limits] list_timeout`).
pub const LIST_DEADLINE: Duration = Duration::from_secs(2);
/// `tools/list` calls per interface and phase.
const LISTS: usize = 200;

/// One interface's `tools/list` in one phase.
pub struct ListRow {
    pub phase: &'static str,
    pub interface: &'static str,
    pub summary: Summary,
    /// Fewest tools any answer listed, and whether every answer held the frozen upstream's.
    pub fewest_tools: usize,
    pub dead_listed: bool,
}

/// What the scenario found.
pub struct ListResult {
    pub rows: Vec<ListRow>,
    /// From the refresh request until the gateway marked the frozen upstream degraded.
    pub marked_degraded_after: Duration,
}

impl ListResult {
    /// Every answer came well within the deadline and still held every tool.
    pub fn met(&self) -> bool {
        self.rows.iter().all(|r| {
            r.summary.errors == 0
                && r.summary.max < LIST_DEADLINE
                && r.dead_listed
                && r.fewest_tools == UPSTREAMS * TOOLS_EACH
        })
    }

    pub fn slowest(&self) -> Duration {
        self.rows
            .iter()
            .map(|r| r.summary.max)
            .max()
            .unwrap_or_default()
    }
}

pub async fn run(bench: &Bench) -> anyhow::Result<ListResult> {
    // 49 upstreams served in this process, one in a process of its own to freeze.
    let stop = CancellationToken::new();
    let mut urls = Vec::with_capacity(UPSTREAMS);
    for _ in 1..UPSTREAMS {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        urls.push(format!("http://{}/mcp", listener.local_addr()?));
        let stop = stop.clone();
        tokio::spawn(async move {
            let _ =
                mcpgate::fixtures::serve_http(mcpgate::fixtures::Fixture::Bench, listener, stop)
                    .await;
        });
    }
    let port = procs::free_port()?;
    let dead_url = format!("http://127.0.0.1:{port}/mcp");
    let dead = procs::spawn(
        "frozen fixture",
        &[
            bench.exe_str(),
            "fixture".into(),
            "bench".into(),
            "--http".into(),
            format!("127.0.0.1:{port}"),
        ],
        &[],
        &bench.dir.join("frozen-fixture.log"),
    )?;
    urls.push(dead_url.clone());
    let outcome = async {
        procs::wait_http(&dead_url, Duration::from_secs(30), true).await?;
        let upstreams: Vec<(String, Upstream<'_>)> = urls
            .iter()
            .enumerate()
            .map(|(i, url)| (format!("u{:02}", i + 1), Upstream::Http(url)))
            .collect();
        let dead_id = format!("u{UPSTREAMS:02}");
        let gateway = bench
            .start_gateway("catalog", &upstreams, LIST_DEADLINE)
            .await?;
        let result = measure(&gateway, &dead, &upstreams, &dead_id).await;
        gateway.proc.stop().await;
        result
    }
    .await;
    dead.stop().await;
    stop.cancel();
    outcome
}

async fn measure(
    gateway: &super::Gateway,
    dead: &procs::Proc,
    upstreams: &[(String, Upstream<'_>)],
    dead_id: &str,
) -> anyhow::Result<ListResult> {
    let base = format!("http://{}", gateway.addr);
    let client = targets::http_client()?;
    let auth = targets::bearer(&gateway.admin_token)?;
    let sessions = targets::http_sessions(&format!("{base}/mcp"), Some(&gateway.token), 1).await?;
    let peer = sessions[0].peer().clone();
    let rest_list = || {
        let client = client.clone();
        let auth = auth.clone();
        let url = format!("{base}/api/v1/mcp/tools");
        async move {
            let tools: Value = client
                .get(url)
                .header(reqwest::header::AUTHORIZATION, auth)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            let names: Vec<String> = tools["tools"]
                .as_array()
                .map(|tools| {
                    tools
                        .iter()
                        .filter_map(|t| t["name"].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default();
            anyhow::Ok(names)
        }
    };
    let mcp_list = || {
        let peer = peer.clone();
        async move {
            let tools = peer.list_all_tools().await?;
            anyhow::Ok(tools.iter().map(|t| t.name.to_string()).collect::<Vec<_>>())
        }
    };
    let before = rest_list().await?;
    ensure!(
        before.len() == UPSTREAMS * TOOLS_EACH,
        "the gateway lists {} tools, not {}",
        before.len(),
        UPSTREAMS * TOOLS_EACH
    );

    dead.signal(Signal::SIGSTOP)?;
    let refreshed = Instant::now();
    for (id, _) in upstreams {
        client
            .post(format!("{base}/api/v1/mcp/servers/{id}/refresh"))
            .header(reqwest::header::AUTHORIZATION, auth.clone())
            .send()
            .await?
            .error_for_status()
            .with_context(|| format!("refresh {id}"))?;
    }
    let dead_prefix = format!("{dead_id}.");
    let dead_function = format!("{dead_id}_");
    let mut rows = Vec::new();
    let phase = "refreshing, one upstream frozen";
    rows.push(
        time_lists(
            phase,
            "REST GET /api/v1/mcp/tools",
            &rest_list,
            &dead_prefix,
        )
        .await,
    );
    rows.push(time_lists(phase, "MCP tools/list", &mcp_list, &dead_function).await);

    let degraded = wait_degraded(&client, &base, &auth, dead_id, refreshed).await?;
    let phase = "after the deadline, upstream degraded";
    rows.push(
        time_lists(
            phase,
            "REST GET /api/v1/mcp/tools",
            &rest_list,
            &dead_prefix,
        )
        .await,
    );
    rows.push(time_lists(phase, "MCP tools/list", &mcp_list, &dead_function).await);
    targets::close(sessions).await;
    Ok(ListResult {
        rows,
        marked_degraded_after: degraded,
    })
}

/// Times [`LISTS`] sequential lists through `list`.
async fn time_lists<F, Fut>(
    phase: &'static str,
    interface: &'static str,
    list: &F,
    dead_prefix: &str,
) -> ListRow
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<Vec<String>>>,
{
    let mut samples = Vec::with_capacity(LISTS);
    let mut errors = 0;
    let mut fewest = usize::MAX;
    let mut dead_listed = true;
    let started = Instant::now();
    for _ in 0..LISTS {
        let sent = Instant::now();
        match list().await {
            Ok(names) => {
                samples.push(sent.elapsed());
                fewest = fewest.min(names.len());
                dead_listed &= names.iter().any(|n| n.starts_with(dead_prefix));
            }
            Err(error) => {
                errors += 1;
                eprintln!("bench: {interface}: {error:#}");
            }
        }
    }
    let summary = Summary::new(samples, errors, started.elapsed());
    eprintln!(
        "bench: tools/list ({phase}, {interface}): p50 {:.3} ms, max {:.3} ms, {fewest} tools",
        ms(summary.p50),
        ms(summary.max)
    );
    ListRow {
        phase,
        interface,
        summary,
        fewest_tools: if fewest == usize::MAX { 0 } else { fewest },
        dead_listed,
    }
}

/// Waits until the gateway reports `id` as no longer ready; returns the time since `since`.
async fn wait_degraded(
    client: &reqwest::Client,
    base: &str,
    auth: &reqwest::header::HeaderValue,
    id: &str,
    since: Instant,
) -> anyhow::Result<Duration> {
    let deadline = LIST_DEADLINE * 10;
    loop {
        let servers: Value = client
            .get(format!("{base}/api/v1/mcp/servers"))
            .header(reqwest::header::AUTHORIZATION, auth.clone())
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let state = servers["servers"]
            .as_array()
            .and_then(|list| list.iter().find(|s| s["id"] == id))
            .and_then(|s| s["state"].as_str())
            .map(str::to_owned);
        if state.as_deref().is_some_and(|s| s != "ready") {
            return Ok(since.elapsed());
        }
        if since.elapsed() > deadline {
            bail!("the gateway still reports {id} as {state:?} after {deadline:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
