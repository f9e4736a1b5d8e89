//! One line from an upstream (stdio or Streamable HTTP), decoded as the gateway's client
//! decodes it: never a panic, and a decoded message decodes again to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::decode_upstream_line;

fuzz_target!(|line: &[u8]| {
    if let Some(message) = decode_upstream_line(line) {
        let again = serde_json::to_vec(&message).expect("a message serializes");
        assert_eq!(decode_upstream_line(&again).as_ref(), Some(&message));
    }
});
