//! `mcpgate pin [--check] [--tool server.tool]`: record every tool's fingerprint in the pin
//! file (or one tool's, accepting its changed definition, audited), or compare the live
//! catalog with it.

use std::process::ExitCode;

use anyhow::Context as _;
use mcpgate::{
    catalog::Pins,
    gateway::{Gateway, PinError},
};

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
    if let Some(name) = tool {
        let accepted = gateway
            .accept_pin(&mcpgate::policy::CallContext::local(), name, None)
            .await
            .map_err(|err| match err {
                PinError::UnknownTool(name) => {
                    anyhow::anyhow!("no tool `{}` in the live catalog", name.escape_debug())
                }
                other => other.into(),
            })?;
        let was = accepted
            .previous
            .map_or("unpinned".to_owned(), |f| format!("was {}", short(&f)));
        println!(
            "pinned {} at {} ({was}) in {}",
            accepted.tool,
            short(&accepted.fingerprint),
            accepted.path.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut pins = existing.unwrap_or_default();
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
