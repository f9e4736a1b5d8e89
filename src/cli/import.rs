//! `mcpgate import`: the MCP servers configured in desktop clients (Claude Desktop, Cursor, VS
//! Code, Windsurf), found where each documents them or read from a file, shown, and written as
//! mcpgate servers (`--write FILE`, a new file; else printed). Secrets are never copied: each
//! becomes a `${VAR}` reference, and the variables to set are listed.

use std::{collections::BTreeSet, path::PathBuf, process::ExitCode};

use anyhow::{Context as _, bail};
use clap::Args;
use mcpgate::config::import::{Client, Imported, import, to_toml};

/// Largest client configuration read.
const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// `claude`, `cursor`, `vscode`, `windsurf`, or a file (an `mcpServers` JSON); repeatable.
    /// Without it: every client's documented places.
    #[arg(long = "from", value_name = "CLIENT|FILE")]
    pub from: Vec<String>,
    /// Write the servers to this new file (refused if it exists) instead of printing them.
    #[arg(long, value_name = "FILE")]
    pub write: Option<PathBuf>,
}

pub fn run(args: &ImportArgs) -> anyhow::Result<ExitCode> {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let appdata = std::env::var_os("APPDATA").map(PathBuf::from);
    let cwd = std::env::current_dir().context("the working directory")?;
    let mut files: Vec<PathBuf> = Vec::new();
    let wanted: Vec<String> = match args.from.is_empty() {
        true => Client::ALL.iter().map(|c| c.name().to_owned()).collect(),
        false => args.from.clone(),
    };
    for from in &wanted {
        match Client::parse(from) {
            Some(client) => files.extend(
                client
                    .locations(&home, appdata.as_deref(), &cwd)
                    .into_iter()
                    .filter(|path| path.is_file()),
            ),
            None => {
                let path = PathBuf::from(from);
                if !path.is_file() {
                    bail!("`{from}` is neither claude, cursor, vscode, windsurf nor a file");
                }
                files.push(path);
            }
        }
    }
    files.dedup();
    if files.is_empty() {
        eprintln!(
            "no MCP client configuration found (looked for {})",
            wanted.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    let mut taken = BTreeSet::new();
    let mut servers: Vec<Imported> = Vec::new();
    for file in &files {
        let size = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        if size > MAX_FILE_BYTES {
            bail!("{}: larger than {MAX_FILE_BYTES} bytes", file.display());
        }
        let text =
            std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        servers.extend(import(&text, &file.display().to_string(), &mut taken)?);
    }
    // What was found, on standard error: standard output carries the TOML alone.
    eprintln!("{} servers found in {} files:", servers.len(), files.len());
    for server in &servers {
        eprintln!(
            "  {:<24} {:<16} {}  ({})",
            server.id, server.transport, server.target, server.source
        );
        for note in &server.notes {
            eprintln!("      note: {note}");
        }
    }
    let text = to_toml(&servers);
    match &args.write {
        None => print!("{text}"),
        Some(path) => {
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .with_context(|| {
                    format!(
                        "writing {} (an existing file is never replaced: merge by hand)",
                        path.display()
                    )
                })?;
            std::io::Write::write_all(&mut file, text.as_bytes())?;
            eprintln!("written to {}", path.display());
        }
    }
    let variables: BTreeSet<&str> = servers
        .iter()
        .flat_map(|s| s.variables.iter().map(|(v, _)| v.as_str()))
        .collect();
    if !variables.is_empty() {
        eprintln!(
            "set before starting the gateway: {}",
            variables.into_iter().collect::<Vec<_>>().join(" ")
        );
    }
    Ok(ExitCode::SUCCESS)
}
