//! The poisoning scan over a catalog of 10,000 tools (the corpus's real and poisoned
//! definitions, repeated under other names and servers): building the rules' prefilters (once
//! per process, timed apart), the first scan of all of them, a
//! catalog build from scratch (scan and cross-catalog signals), and the refresh after one
//! definition changed, which rescans only that one (the rest come from the scan cache) and
//! recomputes the cross-catalog signals. Each is compared with parsing the same definitions,
//! the floor any scanner pays.

use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use mcpgate::{
    catalog::{Catalog, ServerTools, prepare_scan, scan_tool},
    config::ServerId,
};
use rmcp::model::Tool;
use serde_json::Value;

/// Tools in the scanned catalog.
pub const TOOLS: usize = 10_000;
/// Tools per server.
const PER_SERVER: usize = 100;
/// Where the definitions come from (relative to the repository, where `scripts/bench` runs).
const CORPUS: &[&str] = &[
    "tests/scan_corpus/benign.jsonl",
    "tests/scan_corpus/poisoned.jsonl",
];

/// What the run measured.
pub struct ScanResult {
    /// Building the rules' prefilters and the scan's tables, once per process, before the
    /// first scan (else the first scan pays for it).
    pub prepare: Duration,
    /// Parsing the 10,000 definitions from JSON (the floor).
    pub parse: Duration,
    /// Scanning each once, without the cache.
    pub scan: Duration,
    /// A catalog build from scratch (fingerprints, names, schemas, scan, cross signals).
    pub build: Duration,
    /// A catalog build after one definition changed.
    pub refresh: Duration,
    /// Tools with any finding.
    pub flagged: usize,
}

pub fn run() -> anyhow::Result<ScanResult> {
    let mut lines = Vec::new();
    for path in CORPUS {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{path} (run from the repository)"))?;
        lines.extend(
            text.lines()
                .filter(|l| !l.trim().is_empty())
                .map(str::to_owned),
        );
    }
    ensure!(!lines.is_empty(), "the corpus is empty");
    // Each definition under a name of its own, so the catalog holds 10,000 distinct tools.
    let copies: Vec<String> = (0..TOOLS)
        .map(|i| {
            let mut entry: Value =
                serde_json::from_str(&lines[i % lines.len()]).unwrap_or_default();
            let name = entry["tool"]["name"].as_str().unwrap_or("t").to_owned();
            entry["tool"]["name"] = Value::String(format!("{name}_{i}"));
            entry["tool"].to_string()
        })
        .collect();

    let started = Instant::now();
    let tools: Vec<Tool> = copies
        .iter()
        .map(|text| serde_json::from_str(text))
        .collect::<Result<_, _>>()
        .context("a corpus definition does not parse")?;
    let parse = started.elapsed();

    // The rules' prefilters are built once per process: timed apart, so the scan is what
    // every scan after the first costs.
    let started = Instant::now();
    prepare_scan();
    let prepare = started.elapsed();

    let started = Instant::now();
    let flagged = tools.iter().filter(|t| !scan_tool(t).is_empty()).count();
    let scan = started.elapsed();

    let servers = |tools: &[Tool]| -> Vec<ServerTools> {
        tools
            .chunks(PER_SERVER)
            .enumerate()
            .filter_map(|(i, chunk)| {
                let id = ServerId::new(&format!("server-{i}"))?;
                Some(ServerTools::new(id, chunk.to_vec(), false))
            })
            .collect()
    };
    // The servers' tool lists are ready before the clock starts, as a refresh has them from
    // its upstreams: the build is timed, not copying its input.
    let input = servers(&tools);
    let started = Instant::now();
    let catalog = Catalog::build(input);
    let build = started.elapsed();
    ensure!(
        catalog.len() == TOOLS,
        "the catalog holds {} tools",
        catalog.len()
    );

    let mut changed = tools;
    if let Some(first) = changed.first_mut() {
        first.description = Some(
            format!(
                "{} (changed)",
                first.description.clone().unwrap_or_default()
            )
            .into(),
        );
    }
    let input = servers(&changed);
    let started = Instant::now();
    let catalog = Catalog::build(input);
    let refresh = started.elapsed();
    ensure!(
        catalog.len() == TOOLS,
        "the refreshed catalog holds {} tools",
        catalog.len()
    );

    Ok(ScanResult {
        prepare,
        parse,
        scan,
        build,
        refresh,
        flagged,
    })
}
