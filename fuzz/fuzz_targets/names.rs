//! Canonical ids and the function names models see: the mapping stays injective, and every
//! name is at most 64 characters of `[A-Za-z0-9_-]`.
#![no_main]

use std::collections::{HashMap, HashSet};

use libfuzzer_sys::fuzz_target;
use mcpgate::{
    catalog::{MAX_FUNCTION_NAME_LEN, canonical_id, function_names},
    config::ServerId,
};

fuzz_target!(|pairs: Vec<(String, String)>| {
    let mut seen = HashSet::new();
    let tools: Vec<(ServerId, String)> = pairs
        .into_iter()
        .filter_map(|(server, tool)| Some((ServerId::new(&server)?, tool)))
        .filter(|(server, tool)| seen.insert((server.to_string(), tool.clone())))
        .take(512)
        .collect();
    let names = function_names(&tools);
    assert_eq!(names.len(), tools.len());
    let mut by_name = HashMap::new();
    for ((server, tool), name) in tools.iter().zip(&names) {
        assert!(
            !name.is_empty() && name.len() <= MAX_FUNCTION_NAME_LEN,
            "{name}"
        );
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
            "{name}"
        );
        if let Some(other) = by_name.insert(name.clone(), (server, tool)) {
            panic!("{name} names both {other:?} and {:?}", (server, tool));
        }
        let _ = canonical_id(server, tool);
    }
});
