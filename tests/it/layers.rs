//! The one door: the gateway's callers (`server/`, `agent/`) reach what lies below it only
//! through `gateway`, never by importing `upstream`, so a new kind of tool source joins below
//! the gateway without touching them (DESIGN.md, "Tool sources below the gate").

use std::path::{Path, PathBuf};

/// The modules above the gateway that must not name `upstream`.
const CALLERS: &[&str] = &["src/server", "src/agent"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable source folder") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The code of `text` without its `//` comments (doc comments included).
fn code(text: &str) -> String {
    text.lines()
        .map(|line| line.split_once("//").map_or(line, |(code, _)| code))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where `code` names the `upstream` module: a `use` whose path has an `upstream` segment, or
/// a path spelled through it (`crate::upstream::…`).
fn names_upstream(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(start) = rest.find("use ") {
        let statement = &rest[start..];
        let end = statement.find(';').unwrap_or(statement.len());
        let statement = &statement[..end];
        let segments = statement.split(|c: char| !(c.is_alphanumeric() || c == '_'));
        if segments.into_iter().any(|s| s == "upstream") {
            found.push(statement.split_whitespace().collect::<Vec<_>>().join(" "));
        }
        rest = &rest[start + 4..];
    }
    for path in ["crate::upstream", "mcpgate::upstream", "super::upstream"] {
        if code.contains(path) {
            found.push(path.to_owned());
        }
    }
    found
}

#[test]
fn nothing_above_the_gateway_imports_upstream() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in CALLERS {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(
        files.len() > 20,
        "the callers' sources were found: {files:?}"
    );
    let offenders: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = std::fs::read_to_string(file).expect("readable source");
            let shown = file
                .strip_prefix(root)
                .unwrap_or(file)
                .display()
                .to_string();
            names_upstream(&code(&text))
                .into_iter()
                .map(move |what| format!("{shown}: {what}"))
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "callers must reach upstreams through `gateway` (re-export what they need there):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_check_sees_every_way_of_naming_upstream() {
    let grouped = "use crate::{\n    config::X,\n    upstream::{CallRelay, Owner},\n};";
    assert_eq!(names_upstream(grouped).len(), 1);
    assert_eq!(names_upstream("use crate::upstream::CallRelay;").len(), 2);
    assert_eq!(
        names_upstream("let e = crate::upstream::UpstreamError::Gone;").len(),
        1
    );
    assert!(
        names_upstream(&code(
            "// upstream::CallRelay\nuse crate::gateway::CallRelay;"
        ))
        .is_empty()
    );
    // A local named `upstream` is no import.
    assert!(names_upstream("let upstream = 1; use crate::gateway::Gateway;").is_empty());
}
