//! `mcpgate scan`: the poisoning scan's findings for tool definitions in a file (JSON lines of
//! tools, a JSON array, or an MCP `tools/list` result) or for a configured server's live
//! tools, so an operator can check a server before adding it. Exit 0: no high finding; 1: a
//! high finding; 2: the input is not tool definitions.

use std::{io::Write as _, path::PathBuf, process::ExitCode};

use anyhow::{Context as _, bail};
use clap::Args;
use mcpgate::{
    catalog::{Finding, Severity, cross_catalog, merge_cross, scan_dropped_keys, scan_tool},
    config::ServerId,
    gateway::Gateway,
};
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

/// Largest file read: a catalog of many thousands of tools fits well within it.
const MAX_FILE_BYTES: u64 = 64 << 20;

#[derive(Debug, Args)]
pub struct ScanArgs {
    /// A file of tool definitions: one JSON tool per line (or `{"server": "...", "tool":
    /// {...}}`), a JSON array of tools, or a `tools/list` result (`{"tools": [...]}`).
    #[arg(conflicts_with = "server", required_unless_present = "server")]
    pub file: Option<PathBuf>,
    /// Scan this configured server's live tools instead.
    #[arg(long)]
    pub server: Option<String>,
    /// Print one JSON object per tool instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One scanned definition.
struct Scanned {
    server: String,
    name: String,
    findings: Vec<Finding>,
}

/// Scans the definitions of `file` (each against the others, as one catalog).
pub fn scan_file(args: &ScanArgs) -> anyhow::Result<ExitCode> {
    let Some(path) = &args.file else {
        bail!("name a file, or --server ID");
    };
    let size = std::fs::metadata(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .len();
    if size > MAX_FILE_BYTES {
        bail!(
            "{} is {size} bytes, over the {MAX_FILE_BYTES}-byte limit",
            path.display()
        );
    }
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {} as UTF-8 text", path.display()))?;
    let definitions = match parse(&text) {
        Ok(definitions) => definitions,
        Err(problem) => {
            eprintln!("{}: {problem}", path.display());
            return Ok(ExitCode::from(2));
        }
    };
    // A server named by an id that is not one (`My Server`) counts as the file's own.
    let ids: Option<Vec<ServerId>> = definitions
        .iter()
        .map(|(server, ..)| ServerId::new(server).or_else(|| ServerId::new("file")))
        .collect();
    let Some(ids) = ids else {
        bail!("the file's tools cannot be given server ids");
    };
    let catalog: Vec<(&ServerId, &Tool)> = ids
        .iter()
        .zip(definitions.iter().map(|(_, t, _)| t))
        .collect();
    let cross = cross_catalog(&catalog);
    let scanned: Vec<Scanned> = definitions
        .iter()
        .zip(cross)
        .map(|((server, tool, raw), cross)| {
            let mut findings = scan_tool(tool);
            findings.extend(scan_dropped_keys(raw));
            merge_cross(&mut findings, cross);
            Scanned {
                server: server.clone(),
                name: tool.name.to_string(),
                findings,
            }
        })
        .collect();
    report(&scanned, args.json)
}

/// Prints the findings of `server`'s tools in the running gateway's catalog.
pub fn scan_server(gateway: &Gateway, server: &str, as_json: bool) -> anyhow::Result<ExitCode> {
    let Some(id) = ServerId::new(server) else {
        bail!("`{server}` is not a server id");
    };
    let catalog = gateway.catalog();
    if !gateway.servers().iter().any(|s| s.id == id) {
        bail!("no server `{server}` is configured");
    }
    let scanned: Vec<Scanned> = catalog
        .for_server(&id)
        .iter()
        .map(|t| Scanned {
            server: t.server.to_string(),
            name: t.upstream.name.to_string(),
            findings: t.findings.clone(),
        })
        .collect();
    report(&scanned, as_json)
}

/// The definitions of `text`, with the server each names (`file` when none) and each as
/// written (keys the definition loses when read included).
fn parse(text: &str) -> Result<Vec<(String, Tool, JsonObject)>, String> {
    let trimmed = text.trim_start();
    let whole: Option<Value> = if trimmed.starts_with('[') || trimmed.starts_with('{') {
        serde_json::from_str(trimmed).ok()
    } else {
        None
    };
    let items: Vec<(usize, Value)> = match whole {
        Some(Value::Array(items)) => items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (i + 1, v))
            .collect(),
        Some(Value::Object(object))
            if object.contains_key("tools") || object.contains_key("result") =>
        {
            let tools = object
                .get("tools")
                .or_else(|| object.get("result").and_then(|r| r.get("tools")))
                .and_then(Value::as_array)
                .ok_or("`tools` is not an array")?;
            tools
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, v)| (i + 1, v))
                .collect()
        }
        Some(single @ Value::Object(_)) => vec![(1, single)],
        _ => {
            let mut lines = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let value = serde_json::from_str(line)
                    .map_err(|e| format!("line {}: not JSON ({e})", i + 1))?;
                lines.push((i + 1, value));
            }
            lines
        }
    };
    if items.is_empty() {
        return Err("no tool definitions".to_owned());
    }
    items
        .into_iter()
        .map(|(at, item)| {
            let server = item
                .get("server")
                .and_then(Value::as_str)
                .unwrap_or("file")
                .to_owned();
            let tool = item.get("tool").cloned().unwrap_or(item);
            let raw = tool.as_object().cloned().unwrap_or_default();
            serde_json::from_value::<Tool>(tool)
                .map(|tool| (server, tool, raw))
                .map_err(|e| format!("item {at}: not a tool definition ({e})"))
        })
        .collect()
}

fn report(scanned: &[Scanned], as_json: bool) -> anyhow::Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    for tool in scanned {
        if as_json {
            let findings: Vec<Value> = tool
                .findings
                .iter()
                .map(|f| {
                    json!({
                        "code": f.code.as_str(),
                        "severity": f.severity.as_str(),
                        "location": f.location,
                        "detail": f.detail,
                    })
                })
                .collect();
            let line = json!({ "server": tool.server, "tool": tool.name, "findings": findings });
            writeln!(out, "{line}")?;
            continue;
        }
        let verdict = match worst(&tool.findings) {
            None => "clean".to_owned(),
            Some(severity) => format!(
                "{} finding(s), worst {}",
                tool.findings.len(),
                severity.as_str()
            ),
        };
        writeln!(out, "{}.{}  {verdict}", tool.server, shown(&tool.name))?;
        for f in &tool.findings {
            writeln!(
                out,
                "    {:<6} {} at {}: {}",
                f.severity.as_str(),
                f.code,
                f.location,
                f.detail
            )?;
        }
    }
    let high = scanned
        .iter()
        .filter(|t| worst(&t.findings) == Some(Severity::High))
        .count();
    if !as_json {
        writeln!(
            out,
            "{} tool(s) scanned, {high} with a high finding",
            scanned.len()
        )?;
    }
    Ok(if high > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn worst(findings: &[Finding]) -> Option<Severity> {
    findings.iter().map(|f| f.severity).max()
}

/// A name as it may be printed: control characters escaped (names are untrusted).
fn shown(name: &str) -> String {
    name.chars().flat_map(char::escape_debug).collect()
}
