//! Tests of argument checks: duplicate keys, size and depth bounds, schema validation.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{
    ArgumentError, CompiledSchema, MAX_ARGUMENT_DEPTH, check_value, parse_arguments, validate,
};

const LIMIT: usize = 1024;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("test value is not an object: {other}"),
    }
}

fn duplicate(path: &str) -> Result<Map<String, Value>, ArgumentError> {
    Err(ArgumentError::DuplicateKey {
        path: path.to_owned(),
    })
}

#[test]
fn duplicate_keys_are_refused_with_their_path() {
    assert_eq!(parse_arguments(r#"{"a":1,"a":2}"#, LIMIT), duplicate("/a"));
    assert_eq!(
        parse_arguments(r#"{"x":{"b":true,"c":null,"b":false}}"#, LIMIT),
        duplicate("/x/b")
    );
    assert_eq!(
        parse_arguments(r#"{"items":[{"id":1},{"id":2,"id":3}]}"#, LIMIT),
        duplicate("/items/1/id")
    );
    // Keys are compared after unescaping, and pointers escape `~` and `/` (RFC 6901).
    assert_eq!(
        parse_arguments(r#"{"m":[[{"a/b~":1,"a\/b~":2}]]}"#, LIMIT),
        duplicate("/m/0/0/a~1b~0")
    );
    // The same key in sibling objects is fine.
    let ok = parse_arguments(r#"{"l":[{"k":1},{"k":2}],"o":{"k":3}}"#, LIMIT).expect("valid");
    assert_eq!(ok["o"]["k"], json!(3));
}

#[test]
fn values_keep_their_types_and_layout_does_not_matter() {
    let number = parse_arguments(r#"{"a":1}"#, LIMIT).expect("number");
    let text = parse_arguments(r#"{"a":"1"}"#, LIMIT).expect("string");
    assert_eq!(number["a"], json!(1));
    assert_eq!(text["a"], json!("1"));
    assert_ne!(number, text);
    let spaced = parse_arguments("\n { \"b\" : [ 1 , 2.5 ] ,\t\"a\" : { } }\n", LIMIT).expect("ws");
    let reordered = parse_arguments(r#"{"a":{},"b":[1,2.5]}"#, LIMIT).expect("compact");
    assert_eq!(spaced, reordered);
}

#[test]
fn top_level_must_be_an_object_or_nothing() {
    assert_eq!(parse_arguments("", LIMIT), Ok(Map::new()));
    assert_eq!(parse_arguments("  \n", LIMIT), Ok(Map::new()));
    assert_eq!(parse_arguments("null", LIMIT), Ok(Map::new()));
    assert_eq!(
        parse_arguments("[1]", LIMIT),
        Err(ArgumentError::NotAnObject { found: "an array" })
    );
    assert_eq!(
        parse_arguments(r#""{}""#, LIMIT),
        Err(ArgumentError::NotAnObject { found: "a string" })
    );
    let malformed = parse_arguments(r#"{"a":1} {"b":2}"#, LIMIT).expect_err("trailing text");
    assert_eq!(malformed.reason(), "malformed");
    let unclosed = parse_arguments(r#"{"secret-value":"#, LIMIT).expect_err("unclosed");
    assert!(!unclosed.to_string().contains("secret-value"), "{unclosed}");
}

#[test]
fn size_limit_is_exact_in_bytes() {
    // `{"k":"…"}` is 8 bytes of frame around the value; "é" is two bytes.
    let exact = format!(r#"{{"k":"{}"}}"#, "é".repeat((LIMIT - 8) / 2));
    assert_eq!(exact.len(), LIMIT);
    assert!(parse_arguments(&exact, LIMIT).is_ok());
    let over = format!(r#"{{"k":"{}x"}}"#, "é".repeat((LIMIT - 8) / 2));
    assert_eq!(
        parse_arguments(&over, LIMIT),
        Err(ArgumentError::TooLarge {
            size: LIMIT + 1,
            limit: LIMIT
        })
    );
    // Size is checked before parsing: oversized garbage is TooLarge, not Malformed.
    let garbage = "x".repeat(LIMIT + 1);
    assert_eq!(
        parse_arguments(&garbage, LIMIT).map_err(|e| e.reason()),
        Err("too_large")
    );
}

#[test]
fn check_value_counts_the_compact_serialization() {
    let args = parse_arguments(
        &format!(r#"{{ "k" : "{}" }}"#, "a".repeat(LIMIT - 8)),
        2 * LIMIT,
    )
    .expect("parses");
    // The size returned is the compact serialization's, exactly at the limit.
    assert_eq!(check_value(&args, LIMIT), Ok(LIMIT));
    assert_eq!(
        check_value(&args, LIMIT - 1),
        Err(ArgumentError::TooLarge {
            size: LIMIT,
            limit: LIMIT - 1
        })
    );
}

fn nested(depth: usize) -> String {
    // `depth` levels in all: the top-level object, then arrays.
    format!(
        r#"{{"a":{}0{}}}"#,
        "[".repeat(depth - 1),
        "]".repeat(depth - 1)
    )
}

#[test]
fn depth_is_bounded_in_both_checks() {
    let deepest = parse_arguments(&nested(MAX_ARGUMENT_DEPTH), usize::MAX).expect("at the bound");
    assert!(check_value(&deepest, usize::MAX).is_ok());
    let too_deep = ArgumentError::TooDeep {
        limit: MAX_ARGUMENT_DEPTH,
    };
    assert_eq!(
        parse_arguments(&nested(MAX_ARGUMENT_DEPTH + 1), usize::MAX),
        Err(too_deep.clone())
    );
    let mut deeper = deepest.clone();
    deeper.insert("b".to_owned(), json!({ "wrap": deepest["a"].clone() }));
    assert_eq!(check_value(&deeper, usize::MAX), Err(too_deep));
    // Far past serde_json's own recursion limit: refused, no stack overflow.
    let absurd = parse_arguments(&nested(100_000), usize::MAX).expect_err("too deep");
    assert_eq!(absurd.reason(), "too_deep");
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(".{0,6}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    /// Without duplicates, the strict parse reads exactly what serde_json reads.
    #[test]
    fn agrees_with_serde_json_on_documents_without_duplicates(
        inner in prop::collection::btree_map(".{0,6}", json_value(), 0..4)
    ) {
        let text = serde_json::to_string(&inner).expect("serializes");
        let ours = parse_arguments(&text, usize::MAX).expect("parses");
        let theirs: Map<String, Value> = serde_json::from_str(&text).expect("serde_json parses");
        prop_assert_eq!(ours, theirs);
    }
}

fn compiled(schema: Value) -> CompiledSchema {
    CompiledSchema::new(&object(schema)).expect("valid schema")
}

fn schema_message(schema: &CompiledSchema, args: Value) -> String {
    match schema.validate(&object(args)) {
        Err(ArgumentError::Schema { message }) => message,
        other => panic!("expected a schema error, got {other:?}"),
    }
}

#[test]
fn schema_violations_name_their_pointers() {
    let schema = compiled(json!({
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "mode": {"enum": ["read", "write"]},
            "opts": {
                "type": "object",
                "properties": {"depth": {"type": "integer"}},
                "additionalProperties": false
            }
        },
        "required": ["path"]
    }));
    assert_eq!(schema.validate(&object(json!({"path": "/tmp"}))), Ok(()));
    assert_eq!(
        schema_message(&schema, json!({})),
        r#"(root): "path" is a required property"#
    );
    assert_eq!(
        schema_message(&schema, json!({"path": 7})),
        r#"/path: 7 is not of type "string""#
    );
    assert_eq!(
        schema_message(&schema, json!({"path": "p", "mode": "exec"})),
        // Strings are never quoted back: a short string may be a secret.
        r#"/mode: a string of 4 characters is not one of "read" or "write""#
    );
    let message = schema_message(&schema, json!({"path": "p", "opts": {"depth": 1, "x": 1}}));
    assert!(
        message.starts_with("/opts: Additional properties are not allowed ('x'"),
        "{message}"
    );
    let many = schema_message(
        &schema,
        json!({"path": 1, "mode": 2, "opts": {"depth": "d"}}),
    );
    assert_eq!(many.matches("; ").count(), 2, "three problems: {many}");
}

#[test]
fn long_values_are_not_echoed_and_the_list_is_bounded() {
    let schema = compiled(json!({
        "type": "object",
        "additionalProperties": {"type": "integer"}
    }));
    let secret = "s3cr3t-".repeat(20);
    let message = schema_message(&schema, json!({"token": secret}));
    assert_eq!(
        message,
        r#"/token: a string of 140 characters is not of type "integer""#
    );
    let args: Map<String, Value> = (0..9).map(|i| (format!("k{i}"), json!("x"))).collect();
    let message = schema_message(&schema, Value::Object(args));
    assert_eq!(message.matches(" is not of type ").count(), 5, "{message}");
    assert!(message.ends_with("; and more"), "{message}");
}

#[test]
fn invalid_schemas_are_errors_not_panics() {
    for bad in [
        json!({"type": 5}),
        json!({"type": "object", "properties": {"a": {"pattern": "("}}}),
        json!({"required": "name"}),
        json!({"$ref": "#/$defs/missing"}),
    ] {
        let error = CompiledSchema::new(&object(bad.clone())).expect_err("rejected");
        assert!(!error.reason.is_empty(), "{bad}: has a reason");
        let via_one_shot = validate(&object(bad), &Map::new()).expect_err("rejected");
        assert_eq!(via_one_shot.reason(), "unusable_schema");
    }
}

#[test]
fn remote_refs_are_not_fetched_and_local_ones_work() {
    let remote = json!({"$ref": "http://127.0.0.1:9/schema.json"});
    let error = CompiledSchema::new(&object(remote)).expect_err("remote $ref refused");
    assert!(error.reason.contains("127.0.0.1:9"), "{}", error.reason);
    let local = compiled(json!({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "https://example.invalid/tool.json",
        "definitions": {"id": {"type": "string"}},
        "type": "object",
        "properties": {"id": {"$ref": "#/definitions/id"}}
    }));
    assert_eq!(local.validate(&object(json!({"id": "x"}))), Ok(()));
    assert_eq!(
        schema_message(&local, json!({"id": 1})),
        r#"/id: 1 is not of type "string""#
    );
}

#[test]
fn compiled_schema_can_be_shared() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<CompiledSchema>();
}

#[test]
fn errors_share_one_code() {
    let error = ArgumentError::DuplicateKey {
        path: "/a".to_owned(),
    };
    assert_eq!(error.code(), "invalid_arguments");
    assert_eq!(error.reason(), "duplicate_key");
    assert_eq!(error.to_string(), "duplicate key at /a");
}
