//! The gateway's resident memory: idle with 10 stdio upstreams, then after every tenth of a
//! long run of calls through the REST API (all ten upstreams in turn), to see any growth.

use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use super::{
    Bench,
    load::drive,
    procs::rss_bytes,
    setup::Upstream,
    targets::{self, PostCaller},
};

/// stdio upstreams behind the gateway.
pub const UPSTREAMS: usize = 10;
/// How long the gateway idles before its resident set is read.
const IDLE: Duration = Duration::from_secs(3);
/// Workers of the long run.
const CONCURRENCY: usize = 64;
/// Readings during the long run.
const STEPS: usize = 10;

/// Resident set readings, in bytes.
pub struct MemoryResult {
    pub idle: u64,
    /// (calls so far, resident set) after each tenth of the run.
    pub after: Vec<(usize, u64)>,
    pub errors: usize,
}

impl MemoryResult {
    /// Growth from the first reading under load to the last.
    pub fn growth(&self) -> i64 {
        match (self.after.first(), self.after.last()) {
            (Some((_, first)), Some((_, last))) => *last as i64 - *first as i64,
            _ => 0,
        }
    }
}

pub async fn run(bench: &Bench) -> anyhow::Result<MemoryResult> {
    let command = vec![bench.exe_str(), "fixture".into(), "bench".into()];
    let upstreams: Vec<(String, Upstream<'_>)> = (1..=UPSTREAMS)
        .map(|i| (format!("s{i:02}"), Upstream::Stdio(&command)))
        .collect();
    let gateway = bench
        .start_gateway("memory", &upstreams, Duration::from_secs(10))
        .await?;
    let result = measure(bench, &gateway, &upstreams).await;
    gateway.proc.stop().await;
    result
}

async fn measure(
    bench: &Bench,
    gateway: &super::Gateway,
    upstreams: &[(String, Upstream<'_>)],
) -> anyhow::Result<MemoryResult> {
    let pid = gateway.proc.pid()?;
    tokio::time::sleep(IDLE).await;
    let idle = rss_bytes(pid)?;
    eprintln!(
        "bench: idle resident set with {UPSTREAMS} stdio upstreams: {} KiB",
        idle / 1024
    );
    let bodies = upstreams
        .iter()
        .map(|(id, _)| {
            Bytes::from(
                json!({ "tool": format!("{id}.echo"), "arguments": { "message": "hello" } })
                    .to_string(),
            )
        })
        .collect();
    let caller = targets::boxed(PostCaller {
        client: targets::http_client()?,
        url: format!("http://{}/api/v1/mcp/tools/call", gateway.addr),
        authorization: Some(targets::bearer(&gateway.token)?),
        bodies,
        expect: "\"ok\":true",
    });
    let step = (bench.args.memory_calls / STEPS).max(1);
    let mut after = Vec::with_capacity(STEPS);
    let mut errors = 0;
    for i in 1..=STEPS {
        let run = drive(caller.clone(), step, CONCURRENCY).await;
        errors += run.summary.errors;
        if let Some(error) = run.first_error {
            eprintln!(
                "bench: memory run: {} errors, first: {error}",
                run.summary.errors
            );
        }
        let rss = rss_bytes(pid)?;
        eprintln!(
            "bench: resident set after {} calls: {} KiB",
            i * step,
            rss / 1024
        );
        after.push((i * step, rss));
    }
    Ok(MemoryResult {
        idle,
        after,
        errors,
    })
}
