//! The poisoning scan measured on a corpus (tests/scan_corpus): real servers' tools listed
//! live (the benign set) and poisoned definitions written after public attack write-ups, by
//! kind. Detection per kind and false positives are held at least as good as recorded here;
//! `MCPGATE_SCAN_REPORT=1` prints the table (the README's security section quotes it).

use std::{collections::BTreeMap, path::PathBuf, sync::Arc};

use mcpgate::{
    catalog::{Finding, Severity, cross_catalog, scan_tool},
    config::ServerId,
};
use rmcp::model::Tool;
use serde_json::Value;

/// Poisoned definitions each kind must still catch (of those in the corpus).
const MIN_DETECTED: &[(&str, usize)] = &[
    ("classic", 11),
    ("schema_strings", 29),
    ("hidden_text", 22),
    ("encoded", 21),
    ("multilingual", 32),
    ("paraphrase", 21),
    ("shadowing", 22),
    ("exfiltration", 22),
    ("impersonation", 11),
    ("heldout classic", 9),
    ("heldout schema_strings", 5),
    ("heldout hidden_text", 10),
    ("heldout encoded", 7),
    ("heldout multilingual", 7),
    ("heldout paraphrase", 6),
    ("heldout shadowing", 10),
    ("heldout exfiltration", 9),
    ("heldout impersonation", 9),
];

/// Benign tools with any finding, at most.
const MAX_FALSE_POSITIVES: usize = 0;

struct Entry {
    id: String,
    kind: String,
    server: ServerId,
    tool: Tool,
}

fn corpus(file: &str) -> Vec<Entry> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/scan_corpus")
        .join(file);
    let text = std::fs::read_to_string(&path).expect("the corpus is there");
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(i, line)| {
            let entry: Value = serde_json::from_str(line).expect("a JSON line");
            let id = entry["id"].as_str().expect("an id").to_owned();
            // Each poisoned definition stands on a server of its own, so every other tool is
            // another server's to it.
            let server = entry["server"]
                .as_str()
                .map_or_else(|| format!("suspect-{i}"), str::to_owned);
            Entry {
                id,
                kind: entry["kind"].as_str().unwrap_or("benign").to_owned(),
                server: ServerId::new(&server).expect("a server id"),
                tool: serde_json::from_value(entry["tool"].clone()).expect("a tool"),
            }
        })
        .collect()
}

/// Every finding of each entry, scanned alone and with the whole catalog `all`.
fn findings(entries: &[&Entry]) -> Vec<Vec<Finding>> {
    let catalog: Vec<(&ServerId, &Tool)> = entries.iter().map(|e| (&e.server, &e.tool)).collect();
    let cross = cross_catalog(&catalog);
    entries
        .iter()
        .zip(cross)
        .map(|(entry, cross)| {
            let mut found = scan_tool(&entry.tool);
            found.extend(cross);
            found
        })
        .collect()
}

fn shown(found: &[Finding]) -> String {
    found
        .iter()
        .map(|f| format!("{} {}", f.code, f.location))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn detection_and_false_positives_hold_on_the_corpus() {
    let benign = corpus("benign.jsonl");
    let poisoned = corpus("poisoned.jsonl");
    assert!(benign.len() >= 150 && poisoned.len() >= 150);
    let report = std::env::var_os("MCPGATE_SCAN_REPORT").is_some();

    // False positives: the benign tools as one catalog, as a gateway in front of their
    // servers would hold them.
    let alone: Vec<&Entry> = benign.iter().collect();
    let mut flagged = Vec::new();
    let mut flagged_high = 0;
    for (entry, found) in alone.iter().zip(findings(&alone)) {
        if !found.is_empty() {
            if found.iter().any(|f| f.severity == Severity::High) {
                flagged_high += 1;
            }
            flagged.push(format!(
                "{} {}: {}",
                entry.id,
                entry.tool.name,
                shown(&found)
            ));
        }
    }

    // Detection: the poisoned definitions beside the benign catalog; the held-out set was
    // written apart from the rules and never used to tune them.
    let heldout = corpus("heldout.jsonl");
    let poisoned: Vec<Entry> = poisoned
        .into_iter()
        .chain(heldout.into_iter().map(|mut e| {
            e.kind = format!("heldout {}", e.kind);
            e
        }))
        .collect();
    let mixed: Vec<&Entry> = benign.iter().chain(&poisoned).collect();
    let all = findings(&mixed);
    let mut kinds: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut missed = Vec::new();
    for (entry, found) in mixed.iter().zip(&all).skip(benign.len()) {
        let counts = kinds.entry(entry.kind.as_str()).or_default();
        counts.1 += 1;
        if found.is_empty() {
            missed.push(format!("{} ({})", entry.id, entry.kind));
        } else {
            counts.0 += 1;
        }
    }
    if report {
        println!("| kind | detected | of |");
        println!("| --- | --- | --- |");
        let (mut caught, mut total) = (0, 0);
        for (kind, (found, of)) in &kinds {
            println!("| {kind} | {found} | {of} |");
            caught += found;
            total += of;
        }
        println!("| all | {caught} | {total} |");
        println!(
            "benign with any finding: {} of {} ({} high)",
            flagged.len(),
            benign.len(),
            flagged_high
        );
        for line in &flagged {
            println!("  fp {line}");
        }
        for line in &missed {
            println!("  missed {line}");
        }
    }
    for (kind, least) in MIN_DETECTED {
        let (found, of) = kinds.get(kind).copied().unwrap_or_default();
        assert!(
            found >= *least,
            "{kind}: {found} of {of} caught, {least} before"
        );
    }
    assert!(
        flagged.len() < MAX_FALSE_POSITIVES + 1,
        "{} benign tools flagged, at most {MAX_FALSE_POSITIVES} before:\n{}",
        flagged.len(),
        flagged.join("\n")
    );
}

#[test]
fn a_long_legitimate_description_is_no_finding() {
    let sentence = "Breaks a problem into numbered thoughts, revises earlier ones when new \
                    evidence arrives, and branches when two approaches both look promising. ";
    let description: String = sentence.repeat(2_800 / sentence.len() + 1);
    assert!(description.len() >= 2_800);
    let schema = serde_json::json!({ "type": "object", "properties": {
        "thought": { "type": "string", "description": "The current thinking step." } } });
    let Value::Object(schema) = schema else {
        unreachable!()
    };
    let tool = Tool::new("think", description, Arc::new(schema));
    assert_eq!(shown(&scan_tool(&tool)), "");
}
