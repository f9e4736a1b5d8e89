//! The latency matrix: every target at every concurrency, next to the direct call of the same
//! upstream (in that order, so drift between them is small); and the large-result run.

use std::{sync::Arc, time::Duration};

use anyhow::Context as _;
use bytes::Bytes;
use serde_json::{Value, json};

use super::{
    Bench,
    load::{Caller, drive},
    procs::{self, Proc, cpu_time},
    report::Row,
    setup::Upstream,
    stats::Summary,
    targets::{self, McpCaller, PostCaller, Session},
};

/// The text every echo call sends.
const MESSAGE: &str = "hello";
/// The large result's size.
pub const BIG_BYTES: u64 = 1024 * 1024;
/// How long an upstream or peer gateway may take to come up.
const READY_DEADLINE: Duration = Duration::from_secs(60);

/// One thing to call, and whose CPU its calls cost.
pub struct Target {
    pub name: String,
    pub direct: bool,
    pub caller: Arc<dyn Caller>,
    /// The process whose CPU time is charged to these calls: the gateway, or for a direct
    /// call the upstream itself (what a gateway's own cost compares with).
    pub cpu_of: Option<u32>,
}

/// Targets calling the same upstream tool.
pub struct Group {
    pub name: String,
    pub targets: Vec<Target>,
}

/// Runs every target of every group at each concurrency: a warm-up of a tenth of `calls`
/// (at least four per worker), then `calls` measured.
pub async fn measure(
    groups: &[Group],
    concurrency: &[usize],
    calls: usize,
    only: &[String],
) -> Vec<Row> {
    let mut rows = Vec::new();
    for group in groups {
        for &workers in concurrency {
            let picked = group.targets.iter().filter(|t| {
                only.is_empty() || only.iter().any(|o| chosen(&group.name, &t.name, o))
            });
            for target in picked {
                let warm_up = (calls / 10).max(workers * 4);
                let _ = drive(target.caller.clone(), warm_up, workers).await;
                let cpu_before = target.cpu_of.and_then(|pid| cpu_time(pid).ok());
                let run = drive(target.caller.clone(), calls, workers).await;
                let cpu_after = target.cpu_of.and_then(|pid| cpu_time(pid).ok());
                let cpu_per_call = match (cpu_before, cpu_after) {
                    (Some(before), Some(after)) if run.summary.calls > 0 => {
                        Some((after - before) / u32::try_from(run.summary.calls).unwrap_or(1))
                    }
                    _ => None,
                };
                eprintln!(
                    "bench: {} / {} / c={workers}: p50 {:.3} ms, p99 {:.3} ms, {:.0} calls/s{}",
                    group.name,
                    target.name,
                    super::report::ms(run.summary.p50),
                    super::report::ms(run.summary.p99),
                    run.summary.per_sec,
                    run.first_error
                        .as_ref()
                        .map(|e| format!(", {} errors, first: {e}", run.summary.errors))
                        .unwrap_or_default(),
                );
                rows.push(Row {
                    group: group.name.clone(),
                    target: target.name.clone(),
                    direct: target.direct,
                    concurrency: workers,
                    summary: run.summary,
                    cpu_per_call,
                });
            }
        }
    }
    rows
}

/// What the matrix and the large-result run measured.
pub struct Measured {
    pub calls: Vec<Row>,
    pub big: Vec<Row>,
    /// The first and the second call of new MCP sessions, per kind of upstream session.
    pub first: Vec<FirstCalls>,
    /// What one read call costs in Redis commands and PostgreSQL rows (when both ran).
    pub cluster_cost: Option<Value>,
}

/// What new MCP sessions' first calls cost, against their second calls, through one kind of
/// upstream session.
pub struct FirstCalls {
    pub upstream: &'static str,
    pub first: Summary,
    pub second: Summary,
}

/// The upstream on 2025-11-25, with an upstream session per caller or one shared.
const LEGACY_GROUP: &str = "rmcp text, 2025-11-25, Streamable HTTP";

/// The REST target through one of three instances sharing Redis and PostgreSQL.
pub const CLUSTER_TARGET: &str = "mcpgate REST, 1 of 3 instances on Redis + PostgreSQL";

/// Calls counted for what one costs in the shared stores.
pub const COST_CALLS: usize = 1000;

/// New MCP sessions opened, one after another, for each first-call measurement.
const NEW_SESSIONS: usize = 200;

/// Everything a run started, stopped at the end whatever happened.
#[derive(Default)]
struct Started {
    procs: Vec<Proc>,
    sessions: Vec<Session>,
    children: Vec<tokio::process::Child>,
    stores: Option<super::cluster::Stores>,
}

impl Started {
    async fn stop(self) {
        targets::close(self.sessions).await;
        for mut child in self.children {
            let _ = child.kill().await;
        }
        // The gateway first (it reaps its own upstreams), then the rest.
        for proc in self.procs.into_iter().rev() {
            proc.stop().await;
        }
        if let Some(stores) = self.stores {
            stores.stop().await;
        }
    }
}

/// Starts the upstreams, the gateway and the peer gateways, and measures them.
pub async fn run(bench: &Bench) -> anyhow::Result<Measured> {
    let mut started = Started::default();
    let result = run_started(bench, &mut started).await;
    started.stop().await;
    result
}

async fn run_started(bench: &Bench, started: &mut Started) -> anyhow::Result<Measured> {
    let most = bench.args.concurrency.iter().copied().max().unwrap_or(1);
    // The rmcp upstream over Streamable HTTP, in its own process.
    let port = procs::free_port()?;
    let echo_url = format!("http://127.0.0.1:{port}/mcp");
    let fixture = procs::spawn(
        "fixture",
        &[
            bench.exe_str(),
            "fixture".into(),
            "bench".into(),
            "--http".into(),
            format!("127.0.0.1:{port}"),
        ],
        &[],
        &bench.dir.join("fixture.log"),
    )?;
    let fixture_pid = fixture.pid()?;
    started.procs.push(fixture);
    procs::wait_http(&echo_url, READY_DEADLINE, true).await?;

    // The gateway, in front of it and of server-everything over stdio.
    let everything = bench.everything_command();
    // A server on 2025-11-25 (which may ask its clients things outside a call's stream, so
    // it gets an upstream session per caller), configured twice: a session per MCP session
    // (`legacy`, the default) and one shared by all (`shared`), to show what that costs.
    let legacy_port = procs::free_port()?;
    let legacy_url = format!("http://127.0.0.1:{legacy_port}/mcp");
    let legacy = procs::spawn(
        "fixture-2025",
        &[
            bench.exe_str(),
            "fixture".into(),
            "conformance-2025".into(),
            "--http".into(),
            format!("127.0.0.1:{legacy_port}"),
        ],
        &[],
        &bench.dir.join("fixture-2025.log"),
    )?;
    let legacy_pid = legacy.pid()?;
    started.procs.push(legacy);
    procs::wait_http(&legacy_url, READY_DEADLINE, true).await?;
    let mut upstreams = vec![
        ("echo".to_owned(), Upstream::Http(&echo_url)),
        ("legacy".to_owned(), Upstream::Http(&legacy_url)),
        ("shared".to_owned(), Upstream::HttpShared(&legacy_url)),
    ];
    if let Some(command) = &everything {
        upstreams.push(("everything".to_owned(), Upstream::Stdio(command)));
    }
    let gateway = bench
        .start_gateway("calls", &upstreams, Duration::from_secs(10))
        .await?;
    let gateway_pid = gateway.proc.pid()?;
    let base = format!("http://{}", gateway.addr);
    started.procs.push(gateway.proc);
    let token = gateway.token;
    let client = targets::http_client()?;
    // `POST /api/v1/mcp/tools/call` on the gateway at `base`.
    let rest_on = |base: &str, tool: &str, arguments: Value| -> anyhow::Result<Arc<dyn Caller>> {
        Ok(targets::boxed(PostCaller {
            client: client.clone(),
            url: format!("{base}/api/v1/mcp/tools/call"),
            authorization: Some(targets::bearer(&token)?),
            bodies: vec![body(&json!({ "tool": tool, "arguments": arguments }))],
            expect: "\"ok\":true",
        }))
    };
    let rest = |tool: &str, arguments: Value| rest_on(&base, tool, arguments);

    let direct = targets::http_sessions(&echo_url, None, most).await?;
    let direct_peers = targets::peers(&direct);
    started.sessions.extend(direct);
    let through = targets::http_sessions(&format!("{base}/mcp"), Some(&token), most).await?;
    let through_peers = targets::peers(&through);
    started.sessions.extend(through);
    let mcp = |peers: &[rmcp::Peer<rmcp::RoleClient>], tool: &str, arguments: Value| {
        targets::boxed(McpCaller {
            peers: peers.to_vec(),
            tool: tool.to_owned(),
            arguments: object(arguments),
        })
    };
    let echo_args = json!({ "message": MESSAGE });
    let mut groups = vec![Group {
        name: "rmcp echo, Streamable HTTP".into(),
        targets: vec![
            target(
                "direct",
                true,
                mcp(&direct_peers, "echo", echo_args.clone()),
                Some(fixture_pid),
            ),
            target(
                "mcpgate REST",
                false,
                rest("echo.echo", echo_args.clone())?,
                Some(gateway_pid),
            ),
            target(
                "mcpgate /mcp",
                false,
                mcp(&through_peers, "echo_echo", echo_args.clone()),
                Some(gateway_pid),
            ),
        ],
    }];
    // Three instances on one Redis and one PostgreSQL, called through the first.
    let mut cluster_cost = None;
    if let Some(stores) = super::cluster::Stores::start(&bench.dir.join("stores")).await? {
        let echo_only = &upstreams[..1];
        let mut instances = Vec::new();
        for name in ["cluster-a", "cluster-b", "cluster-c"] {
            let instance = bench
                .start_gateway_with(name, echo_only, Duration::from_secs(10), Some(&stores))
                .await?;
            instances.push((format!("http://{}", instance.addr), instance.proc.pid()?));
            started.procs.push(instance.proc);
        }
        let (cluster_base, cluster_pid) = instances.swap_remove(0);
        let caller = rest_on(&cluster_base, "echo.echo", echo_args.clone())?;
        // What a call costs in the stores, on its own before the load runs.
        let _ = drive(caller.clone(), 100, 1).await;
        let before = stores.counters().await?;
        let _ = drive(caller.clone(), COST_CALLS, 1).await;
        let after = stores.counters().await?;
        cluster_cost = Some(super::cluster::per_call(&before, &after, COST_CALLS as u64));
        groups[0]
            .targets
            .push(target(CLUSTER_TARGET, false, caller, Some(cluster_pid)));
        started.stores = Some(stores);
    }

    let legacy_direct = targets::http_sessions(&legacy_url, None, most).await?;
    let legacy_peers = targets::peers(&legacy_direct);
    started.sessions.extend(legacy_direct);
    groups.push(Group {
        name: LEGACY_GROUP.into(),
        targets: vec![
            target(
                "direct",
                true,
                mcp(&legacy_peers, "test_simple_text", json!({})),
                Some(legacy_pid),
            ),
            target(
                "mcpgate /mcp, session per caller",
                false,
                mcp(&through_peers, "legacy_test_simple_text", json!({})),
                Some(gateway_pid),
            ),
            target(
                "mcpgate /mcp, shared session",
                false,
                mcp(&through_peers, "shared_test_simple_text", json!({})),
                Some(gateway_pid),
            ),
        ],
    });

    if let Some(command) = &everything {
        let (session, child) = targets::stdio_session(command).await?;
        let node_pid = child.id();
        let stdio_peers = targets::peers(std::slice::from_ref(&session));
        started.sessions.push(session);
        started.children.push(child);
        let mut group = Group {
            name: "server-everything echo, stdio".into(),
            targets: vec![
                target(
                    "direct",
                    true,
                    mcp(&stdio_peers, "echo", echo_args.clone()),
                    node_pid,
                ),
                target(
                    "mcpgate REST",
                    false,
                    rest("everything.echo", echo_args.clone())?,
                    Some(gateway_pid),
                ),
                target(
                    "mcpgate /mcp",
                    false,
                    mcp(&through_peers, "everything_echo", echo_args.clone()),
                    Some(gateway_pid),
                ),
            ],
        };
        if let Some(proxy) = &bench.args.mcp_proxy {
            let port = procs::free_port()?;
            let proc = procs::spawn(
                "mcp-proxy",
                &[
                    proxy.display().to_string(),
                    "--host".into(),
                    "127.0.0.1".into(),
                    "--port".into(),
                    port.to_string(),
                    "--named-server".into(),
                    "everything".into(),
                    shell_words(command),
                ],
                &[],
                &bench.dir.join("mcp-proxy.log"),
            )?;
            let pid = proc.pid()?;
            started.procs.push(proc);
            let url = format!("http://127.0.0.1:{port}/servers/everything/mcp");
            procs::wait_http(&url, READY_DEADLINE, true).await?;
            let sessions = targets::http_sessions(&url, None, most).await?;
            let peers = targets::peers(&sessions);
            started.sessions.extend(sessions);
            group.targets.push(target(
                "mcp-proxy (MCP)",
                false,
                mcp(&peers, "echo", echo_args.clone()),
                Some(pid),
            ));
        }
        if let Some(mcpo) = &bench.args.mcpo {
            let port = procs::free_port()?;
            let config = bench.dir.join("mcpo.json");
            let (program, args) = command.split_first().context("empty command")?;
            let servers = json!({ "mcpServers": { "everything": {
                "command": program, "args": args } } });
            std::fs::write(&config, servers.to_string())?;
            let proc = procs::spawn(
                "mcpo",
                &[
                    mcpo.display().to_string(),
                    "--host".into(),
                    "127.0.0.1".into(),
                    "--port".into(),
                    port.to_string(),
                    "--config".into(),
                    config.display().to_string(),
                ],
                &[],
                &bench.dir.join("mcpo.log"),
            )?;
            let pid = proc.pid()?;
            started.procs.push(proc);
            let base = format!("http://127.0.0.1:{port}/everything");
            procs::wait_http(&format!("{base}/openapi.json"), READY_DEADLINE, false).await?;
            group.targets.push(target(
                "mcpo (REST)",
                false,
                targets::boxed(PostCaller {
                    client: client.clone(),
                    url: format!("{base}/echo"),
                    authorization: None,
                    bodies: vec![body(&echo_args)],
                    expect: "Echo",
                }),
                Some(pid),
            ));
        }
        groups.push(group);
    }
    let only = &bench.args.targets;
    let calls = measure(&groups, &bench.args.concurrency, bench.args.calls, only).await;

    let big_args = json!({ "bytes": BIG_BYTES });
    let big_groups = [Group {
        name: "rmcp 1 MiB result, Streamable HTTP".into(),
        targets: vec![
            target(
                "direct",
                true,
                mcp(&direct_peers, "big", big_args.clone()),
                Some(fixture_pid),
            ),
            target(
                "mcpgate REST",
                false,
                rest("echo.big", big_args.clone())?,
                Some(gateway_pid),
            ),
            target(
                "mcpgate /mcp",
                false,
                mcp(&through_peers, "echo_big", big_args),
                Some(gateway_pid),
            ),
        ],
    }];
    let big_concurrency: Vec<usize> = bench
        .args
        .concurrency
        .iter()
        .copied()
        .filter(|c| *c <= 16)
        .collect();
    let big_calls = (bench.args.calls / 10).max(100);
    let big = measure(&big_groups, &big_concurrency, big_calls, only).await;

    let url = format!("{base}/mcp");
    let mut first = Vec::new();
    for (upstream, tool) in [
        ("a session per caller (default)", "legacy_test_simple_text"),
        ("one shared session", "shared_test_simple_text"),
    ] {
        let name = format!("{LEGACY_GROUP} / first call, {upstream}");
        let picked = only.is_empty() || only.iter().any(|o| name.contains(o.as_str()));
        if picked {
            first.push(first_calls(&url, &token, upstream, tool, &json!({})).await?);
        }
    }
    Ok(Measured {
        calls,
        big,
        first,
        cluster_cost,
    })
}

/// Opens [`NEW_SESSIONS`] MCP sessions one after another and times each one's first call
/// (which, through a session per caller, opens the upstream session) and its second.
async fn first_calls(
    url: &str,
    token: &str,
    upstream: &'static str,
    tool: &str,
    arguments: &Value,
) -> anyhow::Result<FirstCalls> {
    let (mut first, mut second) = (Vec::new(), Vec::new());
    let (mut first_errors, mut second_errors) = (0, 0);
    let started = std::time::Instant::now();
    for _ in 0..NEW_SESSIONS {
        let mut sessions = targets::http_sessions(url, Some(token), 1).await?;
        let caller = McpCaller {
            peers: targets::peers(&sessions),
            tool: tool.to_owned(),
            arguments: object(arguments.clone()),
        };
        for (samples, errors) in [
            (&mut first, &mut first_errors),
            (&mut second, &mut second_errors),
        ] {
            let at = std::time::Instant::now();
            match caller.call(0).await {
                Ok(()) => samples.push(at.elapsed()),
                Err(_) => *errors += 1,
            }
        }
        targets::close(std::mem::take(&mut sessions)).await;
    }
    let wall = started.elapsed();
    Ok(FirstCalls {
        upstream,
        first: Summary::new(first, first_errors, wall),
        second: Summary::new(second, second_errors, wall),
    })
}

/// Whether `filter` picks a target: it is part of `group / target`.
fn chosen(group: &str, target: &str, filter: &str) -> bool {
    format!("{group} / {target}").contains(filter)
}

fn target(name: &str, direct: bool, caller: Arc<dyn Caller>, cpu_of: Option<u32>) -> Target {
    Target {
        name: name.to_owned(),
        direct,
        caller,
        cpu_of,
    }
}

fn body(value: &Value) -> Bytes {
    Bytes::from(value.to_string())
}

fn object(value: Value) -> rmcp::model::JsonObject {
    match value {
        Value::Object(map) => map,
        _ => rmcp::model::JsonObject::new(),
    }
}

/// `command` as one string for programs that split it like a shell (mcp-proxy's
/// `--named-server`): each word single-quoted.
fn shell_words(command: &[String]) -> String {
    command
        .iter()
        .map(|word| format!("'{}'", word.replace('\'', r"'\''")))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_pick_by_group_and_target() {
        assert!(chosen("rmcp echo, HTTP", "mcpgate REST", "REST"));
        assert!(chosen(
            "rmcp echo, HTTP",
            "mcpgate REST",
            "echo, HTTP / mcpgate"
        ));
        assert!(!chosen(
            "rmcp 1 MiB result",
            "mcpgate REST",
            "echo, HTTP / mcpgate"
        ));
    }

    #[test]
    fn shell_words_quote_each_word() {
        let words = ["node".to_owned(), "/a b/it's.js".to_owned()];
        assert_eq!(shell_words(&words), r"'node' '/a b/it'\''s.js'");
    }
}
