//! One line from an upstream (stdio or Streamable HTTP), decoded as the gateway's client
//! decodes it: never a panic, and a decoded message, written out again, is still a message.
//! Not always the same one: rmcp reads a result with a duplicate key as an untyped result
//! (all fields kept) and the same result without the duplicate as a typed one (fields it does
//! not know dropped); `seeds/upstream_line/duplicate_key` is the input that showed it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::decode_upstream_line;

fuzz_target!(|line: &[u8]| {
    if let Some(message) = decode_upstream_line(line) {
        let again = serde_json::to_vec(&message).expect("a message serializes");
        assert!(decode_upstream_line(&again).is_some(), "{message}");
    }
});
