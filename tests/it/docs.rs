//! The README and the reference pages in `docs/` say what the code does: every fenced TOML
//! block loads as a configuration (with each `${VAR}` it names set), and every relative link
//! reaches a file. (Their Rust blocks are compiled as doc tests from `src/lib.rs`.)

use std::path::{Path, PathBuf};

use mcpgate::config::{Env, load};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README and every page of `docs/`, as (name, text).
fn pages() -> Vec<(String, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ is there")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    assert!(docs.len() >= 6, "the reference pages: {docs:?}");
    paths.extend(docs);
    paths
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(root())
                .expect("in the checkout")
                .display()
                .to_string();
            (name, std::fs::read_to_string(&p).expect("reads"))
        })
        .collect()
}

/// The fenced blocks of `language` in `text`, with the line each starts on.
fn blocks(text: &str, language: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut current: Option<(usize, String)> = None;
    for (index, line) in text.lines().enumerate() {
        match &mut current {
            None => {
                if line.trim_start().strip_prefix("```") == Some(language) {
                    current = Some((index + 1, String::new()));
                }
            }
            Some((_, body)) => {
                if line.trim_start().starts_with("```") {
                    out.extend(current.take());
                } else {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// The `[servers.*]` tables of a block, as text.
fn server_tables(block: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in block.lines() {
        if line.starts_with('[') {
            inside = line.starts_with("[servers.");
        }
        if inside {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// Every `${NAME}` in `text`.
fn references(text: &str) -> Vec<String> {
    text.split("${")
        .skip(1)
        .filter_map(|rest| rest.split_once('}').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn every_toml_block_loads_as_a_configuration() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut checked = 0;
    let mut failures = Vec::new();
    for (page, text) in pages() {
        // A block showing other sections speaks of the servers the page showed before it.
        let mut servers = String::new();
        for (line, mut block) in blocks(&text, "toml") {
            let own = server_tables(&block);
            if own.is_empty() {
                block.push_str(&servers);
            } else {
                servers.push_str(&own);
            }
            let file = dir.path().join(format!("block-{checked}.toml"));
            std::fs::write(&file, &block).expect("written");
            // A secret-looking value of the length production mode asks of a JWT secret.
            let env = Env::from_pairs(
                references(&block)
                    .into_iter()
                    .map(|name| (name, "x".repeat(40))),
            );
            if let Err(err) = load(Some(&file), dir.path(), &env, Path::new("/bin/true")) {
                failures.push(format!("{page}:{line}: {err}"));
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 4,
        "the pages show their configuration ({checked} blocks)"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn every_relative_link_reaches_a_file() {
    let mut broken = Vec::new();
    for (page, text) in pages() {
        let folder = root().join(&page);
        let folder = folder.parent().expect("a folder");
        for target in text
            .split("](")
            .skip(1)
            .filter_map(|rest| rest.split_once(')'))
        {
            let link = target.0;
            if link.starts_with("http") || link.starts_with('#') || link.starts_with("mailto:") {
                continue;
            }
            let path = link.split('#').next().unwrap_or_default();
            if !folder.join(path).exists() {
                broken.push(format!("{page}: {link}"));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn the_readme_is_a_newcomers_page() {
    let (_, readme) = &pages()[0];
    let lines = readme.lines().count();
    assert!(
        lines <= 200,
        "the README is {lines} lines: reference belongs in docs/"
    );
    for must in [
        "cargo run -- serve",
        "scripts/test",
        "docs/configuration.md",
    ] {
        assert!(readme.contains(must), "the README names {must}");
    }
}
