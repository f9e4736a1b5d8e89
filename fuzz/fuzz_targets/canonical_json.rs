//! RFC 8785 canonical JSON: the canonical text parses back to a value whose canonical text
//! is the same, and equal definitions have equal fingerprints.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgate::catalog::{Fingerprint, canonical_json};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let canonical = canonical_json(&value);
    let back: Value = serde_json::from_str(&canonical).expect("canonical JSON parses");
    assert_eq!(canonical_json(&back), canonical);
    assert_eq!(
        Fingerprint::of_definition(&canonical).as_str(),
        Fingerprint::of_definition(&canonical_json(&back)).as_str()
    );
});
