//! Configuration parsing, TOML and `mcpServers` JSON: every input is accepted or refused
//! with a report, never a panic.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::load_config_text;

fn folder() -> &'static tempfile::TempDir {
    static FOLDER: OnceLock<tempfile::TempDir> = OnceLock::new();
    FOLDER.get_or_init(|| tempfile::tempdir().expect("a temporary folder"))
}

fuzz_target!(|data: &[u8]| {
    let Some((&kind, text)) = data.split_first() else {
        return;
    };
    let name = if kind % 2 == 0 {
        "mcpgate.toml"
    } else {
        "servers.json"
    };
    if let Err(report) = load_config_text(folder().path(), name, text) {
        assert!(!report.is_empty());
    }
});
