//! Schema repair for strict model providers: the small, idempotent fixes that let upstream
//! JSON Schemas pass providers that reject `default: null` or subschemas without a `type`.

use rmcp::model::JsonObject;
use serde_json::{Map, Value};

/// Deepest subschema level repaired; deeper subtrees are left as they are. serde_json refuses
/// input nested over 128 levels and each subschema level costs at least two of them
/// (`properties` → name → schema), so parsed schemas never get here; the bound keeps
/// recursion over a hand-built value well inside the stack.
const MAX_SCHEMA_DEPTH: usize = 64;

/// With any of these a schema constrains values without a `type`, and adding one could
/// contradict it (an `enum` of numbers given `type: string`).
const TYPE_EXEMPT: &[&str] = &["enum", "const", "$ref", "anyOf", "oneOf", "allOf", "not"];

const OBJECT_HINTS: &[&str] = &[
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
];
const ARRAY_HINTS: &[&str] = &["items", "prefixItems", "contains"];
/// Numeric bounds say "number" more surely than the string fallback would; a model told
/// "string" for `{"minimum": 1}` sends `"1"` and the upstream rejects it.
const NUMBER_HINTS: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];

/// Keywords whose value is a map from names to subschemas. Draft-7 `dependencies` may also
/// map to arrays of property names; those are not objects and pass through untouched.
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];
/// Keywords whose value is one subschema.
const SCHEMA_VALUES: &[&str] = &[
    "additionalProperties",
    "items",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
];
/// Keywords whose value is an array of subschemas (`items` in its draft-4..7 tuple form).
const SCHEMA_LISTS: &[&str] = &["items", "prefixItems", "anyOf", "oneOf", "allOf"];

/// `schema` repaired for strict providers: `default: null` dropped, a missing `type` inferred
/// (object, array, number, else string) unless `enum`, `const`, `$ref`, `anyOf`, `oneOf`,
/// `allOf` or `not` constrain the value; `{}` (anything goes) left alone; the same applied to
/// every subschema. Values (`enum`, `const`, `default`, `examples`) are data and never
/// touched. Applying it twice changes nothing more.
pub fn sanitize_schema(schema: &Value) -> Value {
    let mut out = schema.clone();
    repair(&mut out, 0);
    out
}

/// A tool's input schema repaired as [`sanitize_schema`] does, and guaranteed to be an object
/// schema with a `properties` object at the top, as MCP and every provider require.
pub fn sanitize_input_schema(schema: &JsonObject) -> JsonObject {
    let mut out = schema.clone();
    if out.get("type").and_then(Value::as_str) != Some("object") {
        out.insert("type".to_owned(), Value::from("object"));
    }
    if !out.get("properties").is_some_and(Value::is_object) {
        out.insert("properties".to_owned(), Value::Object(Map::new()));
    }
    repair_map(&mut out, 0);
    out
}

fn repair(schema: &mut Value, depth: usize) {
    if let Value::Object(map) = schema {
        repair_map(map, depth);
    }
}

fn repair_map(map: &mut JsonObject, depth: usize) {
    if depth >= MAX_SCHEMA_DEPTH {
        return;
    }
    if map.get("default").is_some_and(Value::is_null) {
        map.shift_remove("default");
    }
    if let Some(inferred) = inferred_type(map) {
        map.insert("type".to_owned(), Value::from(inferred));
    }
    for key in SCHEMA_MAPS {
        if let Some(Value::Object(children)) = map.get_mut(*key) {
            for child in children.values_mut() {
                repair(child, depth + 1);
            }
        }
    }
    for key in SCHEMA_VALUES {
        if let Some(child @ Value::Object(_)) = map.get_mut(*key) {
            repair(child, depth + 1);
        }
    }
    for key in SCHEMA_LISTS {
        if let Some(Value::Array(children)) = map.get_mut(*key) {
            for child in children {
                repair(child, depth + 1);
            }
        }
    }
}

fn inferred_type(map: &JsonObject) -> Option<&'static str> {
    let has = |keys: &[&str]| keys.iter().any(|k| map.contains_key(*k));
    if map.is_empty() || map.contains_key("type") || has(TYPE_EXEMPT) {
        None
    } else if has(OBJECT_HINTS) {
        Some("object")
    } else if has(ARRAY_HINTS) {
        Some("array")
    } else if has(NUMBER_HINTS) {
        Some("number")
    } else {
        Some("string")
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> JsonObject {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    #[test]
    fn drops_null_defaults_only() {
        let out = sanitize_schema(&json!({"type": "string", "default": null}));
        assert_eq!(out, json!({"type": "string"}));
        let kept = json!({"type": "string", "default": "x"});
        assert_eq!(sanitize_schema(&kept), kept);
        assert_eq!(sanitize_schema(&json!({"default": null})), json!({}));
    }

    #[test]
    fn infers_missing_types() {
        let cases = [
            (json!({"properties": {}}), "object"),
            (json!({"required": ["a"]}), "object"),
            (json!({"additionalProperties": false}), "object"),
            (json!({"items": {"type": "string"}}), "array"),
            (json!({"prefixItems": []}), "array"),
            (json!({"minimum": 0}), "number"),
            (json!({"description": "free text"}), "string"),
        ];
        for (input, expected) in cases {
            assert_eq!(sanitize_schema(&input)["type"], json!(expected), "{input}");
        }
    }

    #[test]
    fn leaves_exempt_and_empty_schemas_alone() {
        for input in [
            json!({}),
            json!(true),
            json!({"enum": [1, 2]}),
            json!({"const": 3}),
            json!({"$ref": "#/$defs/x"}),
            json!({"anyOf": [{"type": "string"}, {"type": "null"}]}),
            json!({"not": {"type": "string"}}),
            json!({"type": ["string", "null"]}),
        ] {
            assert_eq!(sanitize_schema(&input), input);
        }
    }

    #[test]
    fn repairs_every_kind_of_subschema() {
        let bare = || json!({"description": "d", "default": null});
        let fixed = json!({"description": "d", "type": "string"});
        let mut input = Map::new();
        for key in SCHEMA_VALUES {
            input.insert((*key).to_owned(), bare());
        }
        for key in ["prefixItems", "anyOf", "oneOf", "allOf"] {
            input.insert(key.to_owned(), json!([bare(), bare()]));
        }
        for key in SCHEMA_MAPS {
            // Property names that look like keywords are still names of subschemas.
            input.insert(
                (*key).to_owned(),
                json!({"enum": bare(), "default": bare()}),
            );
        }
        let out = sanitize_schema(&Value::Object(input));
        for key in SCHEMA_VALUES {
            assert_eq!(out[*key], fixed, "{key}");
        }
        for key in ["prefixItems", "anyOf", "oneOf", "allOf"] {
            assert_eq!(out[key], json!([fixed, fixed]), "{key}");
        }
        for key in SCHEMA_MAPS {
            assert_eq!(out[*key], json!({"enum": fixed, "default": fixed}), "{key}");
        }
        let tuple = sanitize_schema(&json!({"type": "array", "items": [bare()]}));
        assert_eq!(tuple["items"], json!([fixed]));
    }

    #[test]
    fn never_touches_data_values() {
        let input = json!({
            "type": "object",
            "default": {"description": "a value, not a schema", "x": null},
            "examples": [{"description": "e"}],
            "enum": [{"properties": {}}],
            "dependencies": {"a": ["b", "c"]}
        });
        assert_eq!(sanitize_schema(&input), input);
    }

    fn nested(levels: usize) -> Value {
        let mut schema = json!({"description": "leaf"});
        for _ in 0..levels {
            schema = json!({"type": "object", "properties": {"p": schema}});
        }
        schema
    }

    fn leaf(schema: &Value, levels: usize) -> &Value {
        (0..levels).fold(schema, |node, _| &node["properties"]["p"])
    }

    #[test]
    fn stops_at_the_depth_bound() {
        let deep = sanitize_schema(&nested(100));
        assert_eq!(
            leaf(&deep, 100).get("type"),
            None,
            "beyond the bound stays as is"
        );
        let shallow = sanitize_schema(&nested(10));
        assert_eq!(leaf(&shallow, 10)["type"], "string");
    }

    #[test]
    fn input_schemas_become_object_schemas() {
        assert_eq!(
            sanitize_input_schema(&Map::new()),
            object(json!({"type": "object", "properties": {}}))
        );
        assert_eq!(
            sanitize_input_schema(&object(json!({"type": "string", "properties": 3}))),
            object(json!({"type": "object", "properties": {}}))
        );
        let valid = object(json!({
            "type": "object",
            "properties": {"q": {"type": "string"}},
            "required": ["q"]
        }));
        assert_eq!(sanitize_input_schema(&valid), valid);
    }

    fn arb_schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({})),
            Just(json!(true)),
            Just(json!({"default": null})),
            Just(json!({"description": "d"})),
            Just(json!({"minimum": 1, "default": null})),
            Just(json!({"enum": ["a", null]})),
            Just(json!({"type": "integer", "default": 3})),
            Just(json!({"type": ["string", "null"], "default": null})),
        ];
        let keys = prop::sample::select(vec![
            "properties",
            "items",
            "anyOf",
            "not",
            "if",
            "$defs",
            "required",
            "description",
            "default",
            "type",
        ]);
        leaf.prop_recursive(4, 48, 4, move |inner| {
            prop::collection::vec(
                (
                    keys.clone(),
                    prop_oneof![
                        inner.clone(),
                        prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
                        prop::collection::btree_map("[a-z]{1,3}", inner, 0..3)
                            .prop_map(|m| Value::Object(m.into_iter().collect())),
                    ],
                ),
                0..4,
            )
            .prop_map(|entries| {
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect(),
                )
            })
        })
    }

    fn arb_valid_schema() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(json!({"type": "string", "description": "s"})),
            Just(json!({"type": "integer", "minimum": 0, "default": 1})),
            Just(json!({"type": "boolean"})),
            Just(json!({"enum": ["a", "b"]})),
            Just(json!({})),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            prop_oneof![
                prop::collection::btree_map("[a-z]{1,4}", inner.clone(), 0..4).prop_map(|props| {
                    let names: Vec<String> = props.keys().cloned().collect();
                    json!({"type": "object", "properties": props, "required": names})
                }),
                inner
                    .clone()
                    .prop_map(|items| json!({"type": "array", "items": items})),
                prop::collection::vec(inner, 1..3).prop_map(|any| json!({"anyOf": any})),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn sanitizing_is_idempotent(schema in arb_schema()) {
            let once = sanitize_schema(&schema);
            prop_assert_eq!(&sanitize_schema(&once), &once);
            if let Value::Object(map) = &schema {
                let once = sanitize_input_schema(map);
                prop_assert_eq!(sanitize_input_schema(&once), once);
            }
        }

        #[test]
        fn valid_schemas_pass_unchanged(schema in arb_valid_schema()) {
            prop_assert_eq!(&sanitize_schema(&schema), &schema);
        }
    }
}
