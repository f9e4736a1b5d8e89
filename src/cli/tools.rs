//! `mcpgate tools`: the merged catalog with each server's state, as a table or JSON.

use std::io::Write as _;

use mcpgate::{catalog::ToolStatus, gateway::Gateway};
use serde_json::json;

pub fn print(gateway: &Gateway, as_json: bool) -> anyhow::Result<()> {
    let catalog = gateway.catalog();
    let servers = gateway.servers();
    let mut out = std::io::stdout().lock();
    if as_json {
        let servers: Vec<_> = servers
            .iter()
            .map(|s| {
                json!({
                    "id": s.id.as_str(),
                    "state": s.state.as_str(),
                    "lastError": s.last_error,
                    "transport": s.transport,
                    "toolCount": catalog.for_server(&s.id).len(),
                    "stale": s.stale,
                    "source": source(gateway, s),
                    "sandbox": gateway.sandbox_of(s),
                })
            })
            .collect();
        let tools: Vec<_> = catalog
            .tools()
            .iter()
            .map(|t| gateway.tool_json(t))
            .collect();
        serde_json::to_writer_pretty(&mut out, &json!({ "servers": servers, "tools": tools }))?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(out, "SERVERS")?;
    for s in &servers {
        let count = catalog.for_server(&s.id).len();
        write!(
            out,
            "  {:<20} {:<10} {:<16} {:>3} tools  from {}{}",
            s.id.as_str(),
            s.state.as_str(),
            s.transport.unwrap_or("-"),
            count,
            source(gateway, s),
            if s.stale { " (stale)" } else { "" }
        )?;
        match &s.last_error {
            Some(error) => writeln!(out, "  last error: {}", one_line(error))?,
            None => writeln!(out)?,
        }
        if let Some(sandbox) = gateway.sandbox_of(s) {
            writeln!(out, "      sandbox: {}", one_line(&sandbox_line(&sandbox)))?;
        }
    }
    writeln!(out, "\nTOOLS")?;
    for t in catalog.tools() {
        let description = t
            .upstream
            .description
            .as_deref()
            .map(one_line)
            .unwrap_or_default();
        writeln!(
            out,
            "  {:<32} {:<32} {}  {:<11} {}",
            one_line(&t.canonical),
            t.function_name,
            &t.fingerprint.as_str()[..12.min(t.fingerprint.as_str().len())],
            t.status.as_str(),
            truncate(&description, 80)
        )?;
        if let ToolStatus::Quarantined { reason } = &t.status {
            writeln!(out, "      quarantined: {reason}")?;
        }
        for finding in &t.findings {
            writeln!(out, "      finding: {finding}")?;
        }
    }
    for warning in catalog.warnings() {
        writeln!(out, "warning: {warning}")?;
    }
    Ok(())
}

/// Where a server was configured: `file`, `environment`, `default` or `code`.
fn source(gateway: &Gateway, status: &mcpgate::gateway::ServerStatus) -> &'static str {
    gateway
        .config()
        .server(&status.id)
        .map_or("-", |server| server.source.as_str())
}

/// A server's sandbox in one line: user, what the kernel enforces, network, limits, paths.
fn sandbox_line(sandbox: &serde_json::Value) -> String {
    if sandbox["mode"] == "off" {
        return "off (runs as the gateway's user, unconfined)".to_owned();
    }
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let memory = sandbox["memoryBytes"]
        .as_u64()
        .map_or("-".to_owned(), |b| format!("{} MiB", b >> 20));
    let network = match &sandbox["network"] {
        serde_json::Value::Bool(true) => "any".to_owned(),
        serde_json::Value::Bool(false) => "none".to_owned(),
        ports => format!("tcp ports {ports}"),
    };
    format!(
        "{} as {}, landlock {}, network {network}, memory {memory}, cpu {} s, files {}, \
         processes {}, read +{}, write +{}",
        text(&sandbox["mode"]),
        text(&sandbox["user"]),
        text(&sandbox["enforced"]["landlock"]),
        text(&sandbox["cpuSeconds"]),
        text(&sandbox["openFiles"]),
        text(&sandbox["processes"]),
        text(&sandbox["read"]),
        text(&sandbox["write"]),
    )
}

/// Control characters could forge extra lines in a terminal: fold them to spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}
