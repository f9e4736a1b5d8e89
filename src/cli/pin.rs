//! `mcpgate pin [--check] [--tool server.tool]`: record every tool's fingerprint in the pin
//! file (or one tool's, accepting its changed definition, audited), or compare the live
//! catalog with it.

use std::process::ExitCode;

use anyhow::Context as _;
use mcpgate::{catalog::Pins, gateway::Gateway};

/// Exit code when `--check` finds differences.
const CHECK_FAILED: u8 = 1;

pub async fn run(gateway: &Gateway, check: bool, tool: Option<&str>) -> anyhow::Result<ExitCode> {
    let path = gateway
        .config()
        .pins
        .path()
        .context("no pin file is configured")?
        .to_owned();
    let existing = Pins::load(&path)?;
    let catalog = gateway.catalog();
    if check {
        let Some(pins) = existing else {
            println!(
                "no pin file at {}: run `mcpgate pin` to create it",
                path.display()
            );
            return Ok(ExitCode::from(CHECK_FAILED));
        };
        let report = mcpgate::catalog::check(&pins, &catalog);
        if report.is_clean() {
            println!("{}: every tool matches its pin", path.display());
            return Ok(ExitCode::SUCCESS);
        }
        print!("{report}");
        return Ok(ExitCode::from(CHECK_FAILED));
    }
    let mut pins = existing.unwrap_or_default();
    if let Some(name) = tool {
        let Some(tool) = catalog.by_canonical(name) else {
            anyhow::bail!("no tool `{}` in the live catalog", name.escape_debug());
        };
        let before = pins
            .get(&tool.server, &tool.upstream.name)
            .map(str::to_owned);
        pins.set(tool.server.clone(), &tool.upstream.name, &tool.fingerprint);
        pins.write(&path)?;
        gateway
            .audit_pin_accepted(&mcpgate::policy::CallContext::local(), tool)
            .await;
        let was = before.map_or("unpinned".to_owned(), |f| format!("was {}", short(&f)));
        println!(
            "pinned {} at {} ({was}) in {}",
            tool.canonical,
            short(tool.fingerprint.as_str()),
            path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut kept = Vec::new();
    for status in gateway.servers() {
        if status.tools.is_some() {
            pins.replace_server(&catalog, &status.id);
        } else {
            // A server that is down keeps the pins it had.
            kept.push(status.id.to_string());
        }
    }
    pins.write(&path)?;
    println!("pinned {} tool(s) in {}", pins.len(), path.display());
    if !kept.is_empty() {
        println!(
            "kept earlier pins of unreachable server(s): {}",
            kept.join(", ")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// A fingerprint's first 12 digits, as `mcpgate tools` shows it.
fn short(fingerprint: &str) -> &str {
    fingerprint.get(..12).unwrap_or(fingerprint)
}
