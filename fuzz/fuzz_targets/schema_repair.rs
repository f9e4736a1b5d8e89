//! Schema repair: never a panic, repairing twice changes nothing more, and what it makes of
//! an input schema compiles.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgate::{
    catalog::{sanitize_input_schema, sanitize_schema},
    policy::CompiledSchema,
};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let once = sanitize_schema(&value);
    assert_eq!(sanitize_schema(&once), once);
    if let Value::Object(object) = &value {
        let repaired = sanitize_input_schema(object);
        assert_eq!(sanitize_input_schema(&repaired), repaired);
        if let Err(error) = CompiledSchema::new(&repaired) {
            panic!("the repaired schema does not compile: {error:?}");
        }
    }
});
