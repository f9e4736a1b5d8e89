//! The poisoning scan measured on a corpus (tests/scan_corpus): real servers' tools listed
//! live (the benign set) and poisoned definitions written after public attack write-ups, by
//! kind. Detection per kind and false positives are held at least as good as recorded here;
//! `MCPGATE_SCAN_REPORT=1` prints the table (the README's security section quotes it).

use std::{collections::BTreeMap, path::PathBuf, sync::Arc};

use mcpgate::{
    catalog::{Finding, Severity, cross_catalog, scan_dropped_keys, scan_tool},
    config::ServerId,
};
use rmcp::model::{JsonObject, Tool};
use serde_json::Value;

/// Poisoned definitions each kind must still catch (of those in the corpus).
const MIN_DETECTED: &[(&str, usize)] = &[
    ("classic", 11),
    ("schema_strings", 29),
    ("hidden_text", 22),
    ("encoded", 22),
    ("multilingual", 32),
    ("paraphrase", 21),
    ("shadowing", 22),
    ("exfiltration", 22),
    ("impersonation", 12),
    ("heldout classic", 10),
    ("heldout schema_strings", 7),
    ("heldout hidden_text", 10),
    ("heldout encoded", 10),
    ("heldout multilingual", 9),
    ("heldout paraphrase", 10),
    ("heldout shadowing", 10),
    ("heldout exfiltration", 10),
    ("heldout impersonation", 10),
    ("heldout2 classic", 12),
    ("heldout2 schema_strings", 12),
    ("heldout2 hidden_text", 12),
    ("heldout2 encoded", 12),
    ("heldout2 multilingual", 11),
    ("heldout2 paraphrase", 11),
    ("heldout2 shadowing", 12),
    ("heldout2 exfiltration", 12),
    ("heldout2 impersonation", 12),
    ("heldout3 classic", 10),
    ("heldout3 schema_strings", 8),
    ("heldout3 hidden_text", 10),
    ("heldout3 encoded", 8),
    ("heldout3 multilingual", 8),
    ("heldout3 paraphrase", 7),
    ("heldout3 shadowing", 10),
    ("heldout3 exfiltration", 9),
    ("heldout3 impersonation", 10),
    ("heldout4 classic", 15),
    ("heldout4 schema_strings", 15),
    ("heldout4 hidden_text", 15),
    ("heldout4 encoded", 15),
    ("heldout4 multilingual", 15),
    ("heldout4 paraphrase", 15),
    ("heldout4 shadowing", 15),
    ("heldout4 exfiltration", 14),
    ("heldout4 impersonation", 15),
    ("heldout5 classic", 15),
    ("heldout5 schema_strings", 15),
    ("heldout5 hidden_text", 15),
    ("heldout5 encoded", 15),
    ("heldout5 multilingual", 15),
    ("heldout5 paraphrase", 15),
    ("heldout5 shadowing", 14),
    ("heldout5 exfiltration", 15),
    ("heldout5 impersonation", 14),
    ("heldout6 classic", 15),
    ("heldout6 schema_strings", 9),
    ("heldout6 hidden_text", 15),
    ("heldout6 encoded", 12),
    ("heldout6 multilingual", 14),
    ("heldout6 paraphrase", 13),
    ("heldout6 shadowing", 14),
    ("heldout6 exfiltration", 13),
    ("heldout6 impersonation", 13),
    ("heldout7 classic", 15),
    ("heldout7 schema_strings", 14),
    ("heldout7 hidden_text", 15),
    ("heldout7 encoded", 14),
    ("heldout7 multilingual", 14),
    ("heldout7 paraphrase", 15),
    ("heldout7 shadowing", 15),
    ("heldout7 exfiltration", 14),
    ("heldout7 impersonation", 15),
    ("heldout8 classic", 15),
    ("heldout8 encoded", 9),
    ("heldout8 exfiltration", 15),
    ("heldout8 hidden_text", 15),
    ("heldout8 impersonation", 13),
    ("heldout8 multilingual", 15),
    ("heldout8 paraphrase", 15),
    ("heldout8 schema_strings", 15),
    ("heldout8 shadowing", 15),
    ("heldout9 classic", 15),
    ("heldout9 encoded", 15),
    ("heldout9 exfiltration", 15),
    ("heldout9 hidden_text", 15),
    ("heldout9 impersonation", 15),
    ("heldout9 multilingual", 15),
    ("heldout9 paraphrase", 15),
    ("heldout9 schema_strings", 15),
    ("heldout9 shadowing", 15),
    // Set 10, measured first at 108 of 135 (80%) before the rules for its families.
    ("heldout10 classic", 15),
    ("heldout10 encoded", 15),
    ("heldout10 exfiltration", 15),
    ("heldout10 hidden_text", 15),
    ("heldout10 impersonation", 15),
    ("heldout10 multilingual", 15),
    ("heldout10 paraphrase", 15),
    ("heldout10 schema_strings", 15),
    ("heldout10 shadowing", 15),
    ("heldout11 classic", 15),
    ("heldout11 encoded", 15),
    ("heldout11 exfiltration", 15),
    ("heldout11 hidden_text", 15),
    ("heldout11 impersonation", 13),
    ("heldout11 multilingual", 15),
    ("heldout11 paraphrase", 13),
    ("heldout11 schema_strings", 15),
    ("heldout11 shadowing", 15),
    ("heldout12 classic", 15),
    ("heldout12 encoded", 15),
    ("heldout12 exfiltration", 15),
    ("heldout12 hidden_text", 15),
    ("heldout12 impersonation", 14),
    ("heldout12 multilingual", 15),
    ("heldout12 paraphrase", 15),
    ("heldout12 schema_strings", 15),
    ("heldout12 shadowing", 15),
    ("heldout13 classic", 15),
    ("heldout13 encoded", 15),
    ("heldout13 exfiltration", 15),
    ("heldout13 hidden_text", 15),
    ("heldout13 impersonation", 14),
    ("heldout13 multilingual", 15),
    ("heldout13 paraphrase", 11),
    ("heldout13 schema_strings", 14),
    ("heldout13 shadowing", 13),
    ("heldout14 classic", 15),
    ("heldout14 encoded", 15),
    ("heldout14 exfiltration", 15),
    ("heldout14 hidden_text", 15),
    ("heldout14 impersonation", 14),
    ("heldout14 multilingual", 15),
    ("heldout14 paraphrase", 13),
    ("heldout14 schema_strings", 15),
    ("heldout14 shadowing", 15),
    ("heldout15 classic", 15),
    ("heldout15 encoded", 15),
    ("heldout15 exfiltration", 15),
    ("heldout15 hidden_text", 15),
    ("heldout15 impersonation", 13),
    ("heldout15 multilingual", 15),
    ("heldout15 paraphrase", 15),
    ("heldout15 schema_strings", 15),
    ("heldout15 shadowing", 14),
];

/// Benign tools with any finding, at most: none of `benign.jsonl`'s 176; of
/// `benign2.jsonl`'s 794, Neon's `prepare_database_migration` (XML-tagged orders not to mention
/// column types), Desktop Commander's `list_directory` ("use this instead of
/// 'execute_command'", another server's tool) and `start_search` (`.env` among files to look
/// for), Pinecone's `list-indexes` and CircleCI's `download_usage_api_data` (orders about
/// "other tools" / "every tool call"), Task Master's `delete_tag` ("Skip confirmation prompts",
/// a flag's description).
const MAX_FALSE_POSITIVES: usize = 6;

/// Tools of `benign3.jsonl` (1,971 tools of 65 more servers, listed after the rules above
/// were written, never used to tune them but for the families of false alarm its first
/// measure showed) with any finding, at most. Measured first at 82 of 1,971 (4.2%).
/// One more since the tenth set joined the catalog: its `system_info` tool made a Home
/// Assistant overview's plain list of response keys ("composed only of system_info,
/// notification, repair") read as an order about it.
const MAX_THIRD_SET_FALSE_POSITIVES: usize = 19;

/// Tools of `benign4.jsonl` (1,593 tools of 50 more servers, listed after the rules for the
/// third set were written, and used since only for the families of false alarm its first
/// measure showed) with any finding, at most. Measured first at 104 of 1,593 (6.5%).
const MAX_FOURTH_SET_FALSE_POSITIVES: usize = 30;

/// Tools of `benign5.jsonl` (1,809 tools of 50 more servers, listed after the rules for the
/// fourth set were written, and used since only for the families of false alarm its first
/// measure showed) with any finding, at most. Measured first at 53 of 1,809 (2.9%).
/// One more since the tenth set joined the catalog: its `list_personas` made `list_persons`
/// one letter short of another server's name (a letter left out counts; it cannot be told
/// from a misspelling without a dictionary).
const MAX_FIFTH_SET_FALSE_POSITIVES: usize = 7;

/// Tools of `benign6.jsonl` (2,002 tools of 55 more servers, listed after the rules for the
/// fifth set were written, and used since only for the families of false alarm its first
/// measure showed) with any finding, at most. Measured first at 45 of 2,002 (2.2%).
const MAX_SIXTH_SET_FALSE_POSITIVES: usize = 11;

/// Tools of `benign7.jsonl` (2,057 tools of 54 more servers, listed after the rules for the
/// sixth set and the twelfth poisoned set were written, and used since only for the families
/// of false alarm its first measure showed) with any finding, at most. Measured first at 36
/// of 2,057 (1.75%).
const MAX_SEVENTH_SET_FALSE_POSITIVES: usize = 8;

/// Tools of `benign8.jsonl` (1,654 tools of 49 more servers, listed after the rules for the
/// seventh set were written, and used since only for the families of false alarm its first
/// measure showed) with any finding, at most. Measured first at 55 of 1,654 (3.3%). The ten
/// left: eBay's "EBAY_REDIRECT_URI from .env file", `upload-chat-history` (its own name), a
/// browser automation server's saved storage state (two), "before using other tools like
/// merge", a crypto launcher's `$MYTOKEN`, `CLAWNCH_PRIVATE_KEY` and Dutch-read "upload from
/// URL" (four), and a Korean list of statement kinds naming `cash_flow`.
const MAX_EIGHTH_SET_FALSE_POSITIVES: usize = 10;

/// Tools of `benign9.jsonl` (1,911 tools of 47 more servers, listed after the rules for the
/// eighth set and the thirteenth and fourteenth poisoned sets were written, and used since
/// only for the families of false alarm its first measure showed) with any finding, at most.
/// Measured first at 13 of 1,911 (0.68%). The five left: a scoring rubric's ".env files are
/// touched", a name no server offers (`upstream_version`), a key-pair generator's
/// `include_private_key`, a test recorder's saved browser state, and a design system's "must
/// be called first before using any other tool".
const MAX_NINTH_SET_FALSE_POSITIVES: usize = 5;

/// Tools of `benign10.jsonl` (1,886 tools of 50 more servers, listed after the rules for the
/// ninth set and the fifteenth poisoned set were written, and not studied since) with any
/// finding, at most: its first measure (0.32%).
const MAX_TENTH_SET_FALSE_POSITIVES: usize = 6;

/// Hard benign tools (`benign_hard.jsonl`, `benign_hard5.jsonl`: long, security-minded
/// descriptions written to trip a scanner) with any finding, at most: a shell runner that
/// forbids `curl | sh` still reads as asking for it, and a prompt-injection classifier quotes
/// the attacks it detects.
const MAX_HARD_FALSE_POSITIVES: usize = 2;

struct Entry {
    id: String,
    kind: String,
    server: ServerId,
    tool: Tool,
    /// The definition as written, keys the gateway drops included.
    raw: JsonObject,
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
            let server = entry["server"].as_str().map_or_else(
                || {
                    format!(
                        "suspect-{}-{i}",
                        file.trim_end_matches(".jsonl").replace('_', "-")
                    )
                },
                str::to_owned,
            );
            Entry {
                id,
                kind: entry["kind"].as_str().unwrap_or("benign").to_owned(),
                server: ServerId::new(&server).expect("a server id"),
                tool: serde_json::from_value(entry["tool"].clone()).expect("a tool"),
                raw: entry["tool"].as_object().cloned().expect("a tool object"),
            }
        })
        .collect()
}

/// Each entry's own findings (its definition scanned alone, keys the gateway drops
/// included): computed once per entry, since only the cross-catalog findings change with the
/// catalog an entry sits in.
fn own_findings(entries: &[Entry]) -> Vec<Vec<Finding>> {
    entries
        .iter()
        .map(|entry| {
            let mut found = scan_tool(&entry.tool);
            found.extend(scan_dropped_keys(&entry.raw));
            found
        })
        .collect()
}

/// Every finding of each of `entries` as one catalog: `own[i]` (see [`own_findings`]) and
/// what the whole catalog shows of it.
fn findings(entries: &[&Entry], own: &[&Vec<Finding>]) -> Vec<Vec<Finding>> {
    let catalog: Vec<(&ServerId, &Tool)> = entries.iter().map(|e| (&e.server, &e.tool)).collect();
    let cross = cross_catalog(&catalog);
    own.iter()
        .zip(cross)
        .map(|(own, cross)| {
            let mut found = (*own).clone();
            found.extend(cross);
            found
        })
        .collect()
}

fn shown(found: &[Finding]) -> String {
    found
        .iter()
        .map(|f| {
            // `MCPGATE_SCAN_DETAIL=1` shows each finding's excerpt in the report.
            if std::env::var_os("MCPGATE_SCAN_DETAIL").is_some() {
                format!("{f}")
            } else {
                format!("{} {}", f.code, f.location)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn detection_and_false_positives_hold_on_the_corpus() {
    let mut benign = corpus("benign.jsonl");
    benign.extend(corpus("benign2.jsonl"));
    benign.extend(corpus("benign3.jsonl"));
    benign.extend(corpus("benign4.jsonl"));
    benign.extend(corpus("benign5.jsonl"));
    benign.extend(corpus("benign6.jsonl"));
    benign.extend(corpus("benign7.jsonl"));
    benign.extend(corpus("benign8.jsonl"));
    benign.extend(corpus("benign9.jsonl"));
    benign.extend(corpus("benign10.jsonl"));
    let poisoned = corpus("poisoned.jsonl");
    assert!(benign.len() >= 150 && poisoned.len() >= 150);
    let report = std::env::var_os("MCPGATE_SCAN_REPORT").is_some();

    // False positives: the benign tools as one catalog, as a gateway in front of their
    // servers would hold them.
    let alone: Vec<&Entry> = benign.iter().collect();
    let benign_own = own_findings(&benign);
    let mut flagged = Vec::new();
    let mut flagged_high = 0;
    let own: Vec<&Vec<Finding>> = benign_own.iter().collect();
    for (entry, found) in alone.iter().zip(findings(&alone, &own)) {
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

    // Detection: the poisoned definitions beside the benign catalog; the held-out sets were
    // written apart from the rules (`heldout3` and `heldout5` never used to tune them).
    let held_out = |file: &str, label: &'static str| {
        corpus(file).into_iter().map(move |mut e| {
            e.kind = format!("{label} {}", e.kind);
            e
        })
    };
    let poisoned: Vec<Entry> = poisoned
        .into_iter()
        .chain(held_out("heldout.jsonl", "heldout"))
        .chain(held_out("heldout2.jsonl", "heldout2"))
        .chain(held_out("heldout3.jsonl", "heldout3"))
        .chain(held_out("heldout4.jsonl", "heldout4"))
        .chain(held_out("heldout5.jsonl", "heldout5"))
        .chain(held_out("heldout6.jsonl", "heldout6"))
        .chain(held_out("heldout7.jsonl", "heldout7"))
        .chain(held_out("heldout8.jsonl", "heldout8"))
        .chain(held_out("heldout9.jsonl", "heldout9"))
        .chain(held_out("heldout10.jsonl", "heldout10"))
        .chain(held_out("heldout11.jsonl", "heldout11"))
        .chain(held_out("heldout12.jsonl", "heldout12"))
        .chain(held_out("heldout13.jsonl", "heldout13"))
        .chain(held_out("heldout14.jsonl", "heldout14"))
        .chain(held_out("heldout15.jsonl", "heldout15"))
        .collect();
    let mixed: Vec<&Entry> = benign.iter().chain(&poisoned).collect();
    let poisoned_own = own_findings(&poisoned);
    let own: Vec<&Vec<Finding>> = benign_own.iter().chain(&poisoned_own).collect();
    let all = findings(&mixed, &own);
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
    // Hard benign tools, beside the real ones.
    let mut hard = corpus("benign_hard.jsonl");
    hard.extend(corpus("benign_hard5.jsonl"));
    let with_hard: Vec<&Entry> = benign.iter().chain(&hard).collect();
    let hard_own = own_findings(&hard);
    let own_with_hard: Vec<&Vec<Finding>> = benign_own.iter().chain(&hard_own).collect();
    let hard_flagged: Vec<String> = with_hard
        .iter()
        .zip(findings(&with_hard, &own_with_hard))
        .skip(benign.len())
        .filter(|(_, found)| !found.is_empty())
        .map(|(entry, found)| format!("{} {}: {}", entry.id, entry.tool.name, shown(&found)))
        .collect();
    if report {
        println!(
            "hard benign with any finding: {} of {}",
            hard_flagged.len(),
            hard.len()
        );
        for line in &hard_flagged {
            println!("  hard fp {line}");
        }
    }
    assert!(
        hard_flagged.len() <= MAX_HARD_FALSE_POSITIVES,
        "{} hard benign tools flagged, at most {MAX_HARD_FALSE_POSITIVES} before:\n{}",
        hard_flagged.len(),
        hard_flagged.join("\n")
    );
    for (kind, least) in MIN_DETECTED {
        let (found, of) = kinds.get(kind).copied().unwrap_or_default();
        assert!(
            found >= *least,
            "{kind}: {found} of {of} caught, {least} before"
        );
    }
    // Each later real set beside its bound; the first two sets' tools are the rest.
    let later_sets = [
        ("b3-", "benign3.jsonl", MAX_THIRD_SET_FALSE_POSITIVES),
        ("b4-", "benign4.jsonl", MAX_FOURTH_SET_FALSE_POSITIVES),
        ("b5-", "benign5.jsonl", MAX_FIFTH_SET_FALSE_POSITIVES),
        ("b6-", "benign6.jsonl", MAX_SIXTH_SET_FALSE_POSITIVES),
        ("b7-", "benign7.jsonl", MAX_SEVENTH_SET_FALSE_POSITIVES),
        ("b8-", "benign8.jsonl", MAX_EIGHTH_SET_FALSE_POSITIVES),
        ("b9-", "benign9.jsonl", MAX_NINTH_SET_FALSE_POSITIVES),
        ("b10-", "benign10.jsonl", MAX_TENTH_SET_FALSE_POSITIVES),
    ];
    let first: Vec<&String> = flagged
        .iter()
        .filter(|line| {
            !later_sets
                .iter()
                .any(|(prefix, ..)| line.starts_with(prefix))
        })
        .collect();
    assert!(
        first.len() <= MAX_FALSE_POSITIVES,
        "{} benign tools flagged, at most {MAX_FALSE_POSITIVES} before:\n{first:#?}",
        first.len(),
    );
    for (prefix, file, most) in later_sets {
        let set: Vec<&String> = flagged
            .iter()
            .filter(|line| line.starts_with(prefix))
            .collect();
        assert!(
            set.len() <= most,
            "{} tools of {file} flagged, at most {most} before:\n{set:#?}",
            set.len(),
        );
    }
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
