//! Importing each client's sample configuration (tests/import): the servers, their ids and
//! transports, references instead of secrets, and a file the gateway loads.

use super::*;

const SAMPLES: [(&str, &str); 4] = [
    (
        "claude_desktop_config.json",
        include_str!("../../tests/import/claude_desktop_config.json"),
    ),
    (
        "cursor_mcp.json",
        include_str!("../../tests/import/cursor_mcp.json"),
    ),
    (
        "vscode_mcp.json",
        include_str!("../../tests/import/vscode_mcp.json"),
    ),
    (
        "windsurf_mcp_config.json",
        include_str!("../../tests/import/windsurf_mcp_config.json"),
    ),
];

/// Every value in the samples that is a secret.
const SECRETS: [&str; 9] = [
    "ghp_claudeSampleSecret0123456789abcdef",
    "BSAclaudeArgSecret0123456789xyz",
    "ntn_cursorSampleSecret0123456789",
    "cursorInlineSecret0123456789abc",
    "pplx-vscodeSampleSecret42",
    "vscodeHeaderSecret0123456789",
    "sntrys_windsurfSampleSecret0123456789",
    "Bearer",
    "perplexity-key",
];

fn all() -> Vec<Imported> {
    let mut taken = BTreeSet::new();
    SAMPLES
        .iter()
        .flat_map(|(name, text)| import(text, name, &mut taken).expect("imports"))
        .collect()
}

fn by_id<'a>(all: &'a [Imported], id: &str) -> &'a Imported {
    all.iter()
        .find(|s| s.id == id)
        .unwrap_or_else(|| panic!("{id} imported"))
}

#[test]
fn each_clients_sample_is_imported_with_normal_ids_and_transports() {
    let all = all();
    let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "filesystem",
            "github",
            "brave-search",
            "linear",
            "notion-api",
            "local-tools",
            "perplexity",
            "fetch",
            "sentry",
            "time"
        ],
        "in each file's order"
    );
    assert_eq!(
        by_id(&all, "linear").transport,
        "sse",
        "a URL ending in /sse"
    );
    assert_eq!(by_id(&all, "notion-api").transport, "streamable-http");
    assert_eq!(by_id(&all, "fetch").transport, "streamable-http");
    assert_eq!(by_id(&all, "sentry").target, "https://mcp.sentry.dev/mcp");
    let github = by_id(&all, "github");
    assert_eq!(github.transport, "stdio");
    assert_eq!(github.table["command"].as_str(), Some("docker"));
    assert_eq!(
        github.table["args"].as_array().map(Vec::len),
        Some(6),
        "arguments kept as an array"
    );
    assert_eq!(by_id(&all, "time").table["enabled"].as_bool(), Some(false));
    assert!(
        by_id(&all, "time")
            .notes
            .iter()
            .any(|n| n.contains("alwaysAllow")),
        "a field not imported is said"
    );
}

#[test]
fn secrets_become_references_and_are_never_written() {
    let all = all();
    let text = to_toml(&all);
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} in:\n{text}");
    }
    let github = by_id(&all, "github");
    assert_eq!(
        github.table["env"]["GITHUB_PERSONAL_ACCESS_TOKEN"].as_str(),
        Some("${GITHUB_GITHUB_PERSONAL_ACCESS_TOKEN}")
    );
    assert!(text.contains("GITHUB_GITHUB_PERSONAL_ACCESS_TOKEN: the value of"));
    // References already there are kept, VS Code's `${env:...}` spelled as ours.
    assert_eq!(
        by_id(&all, "brave-search").table["env"]["BRAVE_API_KEY"].as_str(),
        Some("${BRAVE_API_KEY}")
    );
    assert_eq!(
        by_id(&all, "local-tools").table["env"]["API_KEY"].as_str(),
        Some("${MY_TOOLS_KEY}")
    );
    assert_eq!(
        by_id(&all, "notion-api").table["headers"]["Authorization"].as_str(),
        Some("${NOTION_API_AUTHORIZATION}")
    );
    // Secret-looking arguments are removed, and said.
    let brave = by_id(&all, "brave-search");
    assert!(
        brave.notes.iter().any(|n| n.contains("arguments 3, 4")),
        "{:?}",
        brave.notes
    );
    assert_eq!(
        brave.table["args"].as_array().map(Vec::len),
        Some(2),
        "the option went with its value"
    );
    let tools = by_id(&all, "local-tools");
    assert_eq!(
        tools.table["args"]
            .as_array()
            .and_then(|a| a.last())
            .and_then(|v| v.as_str()),
        Some("--token=SECRET-REMOVED")
    );
}

#[test]
fn the_written_file_loads_as_a_configuration() {
    let text = to_toml(&all());
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("mcpgate.toml"), &text).expect("written");
    let loaded = crate::config::load(
        Some(Path::new("mcpgate.toml")),
        dir.path(),
        &crate::config::Env::default(),
        Path::new("/usr/bin/mcpgate"),
    )
    .unwrap_or_else(|e| panic!("loads: {e}\n{text}"));
    assert_eq!(
        loaded.config.servers.len(),
        9,
        "the disabled one is left out"
    );
}

#[test]
fn ids_are_normalized_and_kept_apart() {
    assert_eq!(normalized_id("Brave_Search"), "brave-search");
    assert_eq!(normalized_id("9lives"), "s-9lives");
    assert_eq!(normalized_id("a..b  c"), "a-b-c");
    assert_eq!(normalized_id(&"x".repeat(40)).len(), 32);
    let mut taken = BTreeSet::new();
    assert_eq!(unique_id("git", &mut taken), "git");
    assert_eq!(unique_id("git", &mut taken), "git-2");
    assert_eq!(unique_id("git", &mut taken), "git-3");
}

#[test]
fn not_json_or_no_servers_is_a_typed_error() {
    let mut taken = BTreeSet::new();
    assert!(matches!(
        import("{", "x.json", &mut taken),
        Err(ImportError::NotJson { .. })
    ));
    assert!(matches!(
        import("{\"other\": {}}", "x.json", &mut taken),
        Err(ImportError::NoServers { .. })
    ));
}
