//! Schema repair: never a panic, repairing twice changes nothing more, and repair never
//! breaks an input schema that compiled. A schema that does not compile before or after
//! (an unknown `$schema`, a `pattern` that is no regular expression: found in the first
//! minutes, kept in `seeds/schema_repair/`) makes the gate refuse the tool, fail closed.
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
            assert!(
                CompiledSchema::new(object).is_err(),
                "repair broke a schema that compiled: {error:?}"
            );
        }
    }
});
