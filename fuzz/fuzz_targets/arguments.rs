//! A tool call's arguments as the gate reads them (duplicate keys refused, depth and size
//! bounded): never a panic, and what it accepts it accepts again once written out.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgate::policy::{check_value, parse_arguments};

const MAX_BYTES: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(args) = parse_arguments(raw, MAX_BYTES) {
        let written = serde_json::to_string(&args).expect("arguments serialize");
        let again = parse_arguments(&written, usize::MAX).expect("written arguments parse");
        assert_eq!(again, args);
        let _ = check_value(&args, MAX_BYTES);
    }
});
