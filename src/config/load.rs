//! Finding and reading configuration: `--config FILE` (TOML or `mcpServers` JSON), else
//! `mcpgate.toml` in the working directory, else embedded defaults; then the environment.

use std::{
    io::Read,
    path::{Path, PathBuf},
};

use super::{
    Config, ConfigError, Env, ServerSource, StateConfig, external_env, mcp_servers,
    raw::{RawFile, RawServer},
    validate::{Draft, Entry, FieldCase, Report, join},
};

/// The file looked for in the working directory when no `--config` is given.
const DEFAULT_FILE: &str = "mcpgate.toml";
/// A configuration is a few KiB; a file beyond this is the wrong file (a log, a binary), and
/// reading it whole would let a path argument make us allocate without bound.
const MAX_CONFIG_FILE_BYTES: u64 = 1024 * 1024;

/// Where the configuration came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    File(PathBuf),
    Embedded,
}

/// A loaded configuration with its source and non-fatal warnings (normalized ids, ...).
#[derive(Debug, Clone)]
pub struct Loaded {
    pub config: Config,
    pub source: ConfigSource,
    pub warnings: Vec<String>,
}

/// Where the embedded default keeps its state when [`load`] is used: in memory, because
/// a first run on embedded defaults should not leave a database in whatever directory it was
/// started from.
const EMBEDDED_STATE: StateConfig = StateConfig::Memory;

/// Loads configuration. `explicit` (relative to `cwd`) is `--config`; `exe` is this binary,
/// which the embedded default runs as its demo server. Every problem of every source is
/// reported together. Relative paths in a file are resolved against the file's folder.
///
/// The environment applies to a file and to the embedded default alike: the
/// `EXTERNAL_MCP_*` servers and limits, and the `MCPGATE_*` settings of `mcpgate serve`.
/// Without a file, those are [`super::ServiceConfig::default()`] (auth mode dev on
/// 127.0.0.1:8080) with `MCPGATE_LISTEN` and the `MCPGATE_JWT_*` variables applied.
pub fn load(
    explicit: Option<&Path>,
    cwd: &Path,
    env: &Env,
    exe: &Path,
) -> Result<Loaded, ConfigError> {
    load_with_embedded_state(explicit, cwd, env, exe, EMBEDDED_STATE)
}

/// [`load`], with the embedded default (no file) keeping its state as `embedded_state` says;
/// a relative SQLite path, and the default pin file, are resolved against `cwd`.
pub fn load_with_embedded_state(
    explicit: Option<&Path>,
    cwd: &Path,
    env: &Env,
    exe: &Path,
    embedded_state: StateConfig,
) -> Result<Loaded, ConfigError> {
    let mut report = Report::default();
    let file = match explicit {
        Some(path) => Some(cwd.join(path)),
        None => Some(cwd.join(DEFAULT_FILE)).filter(|p| p.is_file()),
    };
    // The embedded default's demo server is added only when no other source defines a
    // server: beside real ones its write tools would be offered to every caller.
    let (mut draft, source, demo) = match file {
        Some(path) => (
            from_file(&path, env, &mut report),
            ConfigSource::File(path),
            Vec::new(),
        ),
        None => {
            let mut config = Config {
                state: embedded_state,
                ..Config::embedded_default(exe.to_path_buf())
            };
            let demo = std::mem::take(&mut config.servers);
            (
                Draft::from_config(config, "the embedded default", cwd),
                ConfigSource::Embedded,
                demo,
            )
        }
    };
    external_env::apply(env, &mut draft, &mut report);
    if draft.defines_no_server() {
        draft.add_valid_servers(demo, "the embedded default");
    }
    let config = draft.finish(env, &mut report);
    let warnings = report.finish()?;
    Ok(Loaded {
        config,
        source,
        warnings,
    })
}

fn from_file(path: &Path, env: &Env, report: &mut Report) -> Draft {
    let label = path.display().to_string();
    let base = path.parent().unwrap_or(Path::new(""));
    let mut draft = Draft::from_file(RawFile::default(), base, report);
    let text = match read_bounded(path) {
        Ok(text) => text,
        Err(message) => {
            report.problem(label, message);
            return draft;
        }
    };
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let entries = match extension.as_deref() {
        Some("toml") => {
            let Some((file_draft, entries)) = toml_file(&text, &label, base, report) else {
                return draft;
            };
            draft = file_draft;
            entries
        }
        Some("json") => mcp_servers::entries(&text, &label, report),
        _ => {
            report.problem(
                label,
                "unknown file type: use `.toml` (mcpgate) or `.json` (mcpServers)",
            );
            return draft;
        }
    };
    draft.add_servers(entries, ServerSource::File, env, report);
    draft
}

fn read_bounded(path: &Path) -> Result<String, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("cannot be opened: {e}"))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot be read: {e}"))?;
    if text.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(format!(
            "is larger than {MAX_CONFIG_FILE_BYTES} bytes: is it the right file?"
        ));
    }
    Ok(text)
}

/// The sections of a TOML file and its servers, each deserialized on its own so that every
/// broken server is reported.
fn toml_file(
    text: &str,
    label: &str,
    base: &Path,
    report: &mut Report,
) -> Option<(Draft, Vec<Entry>)> {
    let mut file: RawFile = match toml::from_str(text) {
        Ok(file) => file,
        Err(e) => {
            report.problem(label, toml_message(&e, text));
            return None;
        }
    };
    let servers = std::mem::take(&mut file.servers);
    let draft = Draft::from_file(file, base, report);
    let mut entries = Vec::new();
    for (key, value) in servers {
        let path = join("servers", &key);
        if !value.is_table() {
            report.problem(path, "must be a table");
            continue;
        }
        match value.try_into::<RawServer>() {
            Ok(server) => entries.push(Entry {
                key,
                path,
                normalize: false,
                case: FieldCase::Snake,
                server,
            }),
            Err(e) => report.problem(path, e.message()),
        }
    }
    Some((draft, entries))
}

/// The parser's message with its line and column, without the quoted source line (which
/// may hold a secret written by mistake).
fn toml_message(error: &toml::de::Error, text: &str) -> String {
    let Some(before) = error.span().and_then(|span| text.get(..span.start)) else {
        return error.message().to_owned();
    };
    let line = before.matches('\n').count() + 1;
    let column = before.len() - before.rfind('\n').map_or(0, |i| i + 1) + 1;
    format!("line {line}, column {column}: {}", error.message())
}

#[cfg(test)]
mod tests;
