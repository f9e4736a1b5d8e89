//! Tool names: the canonical id `server.tool` for people, and the unique function name
//! `server_tool` that models and the MCP endpoint see.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::config::ServerId;

use crate::digest::sha256_hex;

/// Longest function name: OpenAI, Anthropic and Gemini all reject names over 64 characters.
pub const MAX_FUNCTION_NAME_LEN: usize = 64;

/// Hex digits of SHA-256 in a suffix: 32 bits keeps names readable, and every suffixed name
/// is checked for uniqueness anyway, so a rare clash costs one more round, not a wrong name.
const HASH_SUFFIX_LEN: usize = 8;

/// Fresh hash suffixes tried for one name before falling back to a counter. An honest clash
/// survives a round with odds near 2^-32; only tool names crafted against our hashes get
/// further, and the counter fallback ends them with a guaranteed free name.
const HASH_ROUNDS: u32 = 4;

/// The canonical id `server.tool`, the upstream name kept as-is. Server ids hold no `.`, so
/// the first `.` always separates the two.
pub fn canonical_id(server: &ServerId, tool: &str) -> String {
    format!("{server}.{tool}")
}

/// One function name per entry of `tools` (same order), unique across distinct entries;
/// equal entries get equal names. Each name matches `^[A-Za-z0-9_-]{1,64}$`.
///
/// The result depends only on the set of canonical ids, never on their order: ids are sorted,
/// the first id of each group whose sanitized names coincide keeps the bare name, and the
/// others get `_` plus a hash suffix that is re-checked against every name already taken.
pub fn function_names(tools: &[(ServerId, String)]) -> Vec<String> {
    let canonical: Vec<String> = tools
        .iter()
        .map(|(server, tool)| canonical_id(server, tool))
        .collect();

    // Sorted and deduplicated: the order-independence rests on this.
    let mut groups: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let unique: HashSet<&str> = canonical.iter().map(String::as_str).collect();
    let mut sorted: Vec<&str> = unique.into_iter().collect();
    sorted.sort_unstable();
    for id in &sorted {
        groups.entry(base_name(id)).or_default().push(id);
    }

    // Bare names are claimed before any suffix is chosen, so a suffixed name can never take
    // the bare name of an id that sorts later.
    let mut taken: HashSet<String> = groups.keys().cloned().collect();
    let mut assigned: HashMap<&str, String> = HashMap::with_capacity(sorted.len());
    for (base, ids) in &groups {
        let mut ids = ids.iter();
        if let Some(first) = ids.next() {
            assigned.insert(first, base.clone());
        }
        for id in ids {
            let name = free_suffixed_name(base, id, &taken);
            taken.insert(name.clone());
            assigned.insert(id, name);
        }
    }

    canonical
        .iter()
        .map(|id| {
            assigned
                .get(id.as_str())
                .cloned()
                .expect("every canonical id was given a name above")
        })
        .collect()
}

/// `canonical` with every character outside `[A-Za-z0-9_-]` replaced by `_`; over-long names
/// are cut and get a hash of the full id, so two long ids sharing a prefix still differ.
fn base_name(canonical: &str) -> String {
    let sanitized: String = canonical
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if sanitized.len() <= MAX_FUNCTION_NAME_LEN {
        sanitized
    } else {
        with_suffix(&sanitized, &short_hash(canonical))
    }
}

/// `base` cut so that `base_suffix` fits in [`MAX_FUNCTION_NAME_LEN`].
fn with_suffix(base: &str, suffix: &str) -> String {
    let keep = MAX_FUNCTION_NAME_LEN.saturating_sub(suffix.len() + 1);
    let mut name: String = base.chars().take(keep).collect();
    name.push('_');
    name.push_str(suffix);
    name
}

fn short_hash(text: &str) -> String {
    let mut hash = sha256_hex(text.as_bytes());
    hash.truncate(HASH_SUFFIX_LEN);
    hash
}

/// A name for `id` (whose bare name `base` is taken) that is not in `taken`.
///
/// The counter fallback always succeeds: its `taken.len() + 1` candidates are distinct (the
/// digits after the last `_` differ), so at least one of them is free.
fn free_suffixed_name(base: &str, id: &str, taken: &HashSet<String>) -> String {
    let hashed =
        (1..=HASH_ROUNDS).map(|round| with_suffix(base, &short_hash(&format!("{id}#{round}"))));
    let counted = (0..=taken.len()).map(|n| with_suffix(base, &n.to_string()));
    hashed
        .chain(counted)
        .find(|name| !taken.contains(name))
        .expect("more distinct candidates than taken names")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn server(id: &str) -> ServerId {
        ServerId::new(id).expect("valid server id")
    }

    fn entries(pairs: &[(&str, &str)]) -> Vec<(ServerId, String)> {
        pairs
            .iter()
            .map(|(s, t)| (server(s), (*t).to_owned()))
            .collect()
    }

    fn well_formed(name: &str) -> bool {
        (1..=MAX_FUNCTION_NAME_LEN).contains(&name.len())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_names_join_server_and_tool() {
        let names = function_names(&entries(&[("github", "create_issue"), ("fs", "read-file")]));
        assert_eq!(names, ["github_create_issue", "fs_read-file"]);
        assert_eq!(
            canonical_id(&server("github"), "create_issue"),
            "github.create_issue"
        );
    }

    #[test]
    fn disallowed_characters_become_underscores() {
        let names = function_names(&entries(&[("a", "ns.tool name/ü")]));
        assert_eq!(names, ["a_ns_tool_name__"]);
    }

    #[test]
    fn long_names_are_cut_with_a_hash_of_the_full_id() {
        let long = "x".repeat(100);
        let names = function_names(&entries(&[("srv", &long)]));
        let expected_hash = &sha256_hex(format!("srv.{long}").as_bytes())[..HASH_SUFFIX_LEN];
        assert_eq!(names[0].len(), MAX_FUNCTION_NAME_LEN);
        assert!(names[0].ends_with(&format!("_{expected_hash}")));
        assert!(names[0].starts_with("srv_xxx"));
    }

    #[test]
    fn collisions_keep_the_bare_name_for_the_first_canonical_id() {
        let names = function_names(&entries(&[("a", "x_y"), ("a", "x-y"), ("a", "x.y")]));
        // Sorted canonical ids: "a.x-y" < "a.x.y" < "a.x_y".
        assert_eq!(names[1], "a_x-y");
        assert_eq!(names[2], "a_x_y", "a.x.y sorts first in the a_x_y group");
        let hash = &sha256_hex(b"a.x_y#1")[..HASH_SUFFIX_LEN];
        assert_eq!(names[0], format!("a_x_y_{hash}"));
    }

    #[test]
    fn a_tool_named_like_a_suffixed_name_keeps_it() {
        let first = function_names(&entries(&[("a", "x.y"), ("a", "x_y")]));
        let suffixed = first[1].clone();
        let squatter = suffixed.trim_start_matches("a_").to_owned();
        let names = function_names(&entries(&[("a", "x.y"), ("a", "x_y"), ("a", &squatter)]));
        assert_eq!(names[2], suffixed, "a bare name is never taken by a suffix");
        let unique: HashSet<&String> = names.iter().collect();
        assert_eq!(unique.len(), 3);
    }

    #[test]
    fn equal_entries_share_a_name() {
        let names = function_names(&entries(&[("a", "t"), ("a", "t")]));
        assert_eq!(names, ["a_t", "a_t"]);
    }

    #[test]
    fn counter_fallback_always_finds_a_free_name() {
        let taken: HashSet<String> = (1..=HASH_ROUNDS)
            .map(|r| with_suffix("a_x", &short_hash(&format!("a.x#{r}"))))
            .chain(["a_x_0".to_owned()])
            .collect();
        assert_eq!(free_suffixed_name("a_x", "a.x", &taken), "a_x_1");
    }

    fn tool_name() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("x_y".to_owned()),
            Just("x-y".to_owned()),
            Just("x.y".to_owned()),
            Just("x y".to_owned()),
            Just("x_y_".to_owned()),
            "[a-z_.-]{0,6}",
            "\\PC{0,10}",
            "[a-z]{60,70}[._-]?[a-z]{0,3}",
        ]
    }

    fn tool_set() -> impl Strategy<Value = Vec<(ServerId, String)>> {
        let server = prop::sample::select(vec!["a", "a-b", "ab", "b", "x"]).prop_map(server);
        prop::collection::vec((server, tool_name()), 0..24)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn names_are_well_formed_injective_and_order_independent(
            (tools, shuffled) in tool_set().prop_flat_map(|t| (Just(t.clone()), Just(t).prop_shuffle()))
        ) {
            let names = function_names(&tools);
            prop_assert_eq!(names.len(), tools.len());
            let mut by_name: HashMap<&str, &(ServerId, String)> = HashMap::new();
            for (name, entry) in names.iter().zip(&tools) {
                prop_assert!(well_formed(name), "bad name {:?}", name);
                if let Some(other) = by_name.insert(name, entry) {
                    prop_assert_eq!(other, entry, "two tools share {}", name);
                }
            }
            let shuffled_names = function_names(&shuffled);
            let reordered: HashMap<&(ServerId, String), &String> =
                shuffled.iter().zip(&shuffled_names).collect();
            for (name, entry) in names.iter().zip(&tools) {
                prop_assert_eq!(reordered[entry], name);
            }
        }
    }
}
