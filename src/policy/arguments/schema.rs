//! JSON Schema validation of tool arguments: a tool's input schema compiled once, and
//! violations reported as short messages with JSON pointers that never repeat long values.

use std::fmt;

use jsonschema::{PatternOptions, ValidationError, Validator, error::ValidationErrorKind};
use rmcp::model::JsonObject;
use serde_json::{Map, Value};

use super::{ArgumentError, type_name};

/// How many violations one refusal lists; the rest are counted as "more". Enough to fix a call
/// in one go, short enough to feed back to a model.
const MAX_REPORTED_ERRORS: usize = 5;

/// Argument values up to this many characters (as JSON) are quoted in messages; longer ones
/// are described by type and size, so secrets and documents are not echoed back.
const MAX_QUOTED_VALUE_CHARS: usize = 40;

/// Longest single message, pointer included; keys, enum lists and nested messages are cut.
const MAX_MESSAGE_CHARS: usize = 240;

/// Backtracking steps a `pattern` may take on one string before the match is given up and the
/// value refused. The engine's default is a million; upstream schemas are untrusted and this
/// runs on every call.
const PATTERN_BACKTRACK_LIMIT: usize = 100_000;

/// A tool's input schema, compiled once and reused for every call of that tool.
///
/// Remote `$ref`s are never fetched: a schema that needs one fails to compile, and the tool is
/// unusable. Fetching would let an upstream make the gate send requests wherever it likes, and
/// skipping the reference would check calls against a weaker schema than the tool declared.
/// References inside the schema (`#/$defs/...`) and the standard meta-schemas work offline.
/// `format` is an annotation, as in the 2020-12 default draft: it is not enforced.
pub struct CompiledSchema {
    validator: Validator,
}

/// A tool's input schema that cannot be used: not a valid JSON Schema, a remote `$ref`, or
/// a `pattern` that is not a valid regular expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unusable input schema: {reason}")]
pub struct InvalidSchema {
    pub reason: String,
}

impl CompiledSchema {
    /// Compiles `schema` (draft from its `$schema`, 2020-12 when absent, as MCP specifies).
    /// Never panics on bad input: an invalid schema is an error.
    pub fn new(schema: &JsonObject) -> Result<CompiledSchema, InvalidSchema> {
        let schema = Value::Object(schema.clone());
        let patterns = PatternOptions::fancy_regex().backtrack_limit(PATTERN_BACKTRACK_LIMIT);
        jsonschema::options()
            .offline()
            .with_pattern_options(patterns)
            .build(&schema)
            .map(|validator| CompiledSchema { validator })
            .map_err(|error| InvalidSchema {
                reason: describe(&error),
            })
    }

    /// Checks `args` against the schema. The message lists the first
    /// [`MAX_REPORTED_ERRORS`] violations, each as `pointer: problem`.
    pub fn validate(&self, args: &Map<String, Value>) -> Result<(), ArgumentError> {
        // The validator takes a `Value`; the copy is bounded by the argument size cap.
        self.validate_value(&Value::Object(args.clone()))
    }

    /// [`CompiledSchema::validate`] for arguments still held as a `Value` (an object), which
    /// spares the copy.
    pub fn validate_value(&self, instance: &Value) -> Result<(), ArgumentError> {
        if self.validator.is_valid(instance) {
            return Ok(());
        }
        let mut errors = self.validator.iter_errors(instance);
        let mut listed: Vec<String> = errors
            .by_ref()
            .take(MAX_REPORTED_ERRORS)
            .map(|e| describe(&e))
            .collect();
        if errors.next().is_some() {
            listed.push("and more".to_owned());
        }
        Err(ArgumentError::Schema {
            message: listed.join("; "),
        })
    }
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CompiledSchema")
    }
}

/// One-shot check for callers without a cache; compiles `schema` every time.
pub fn validate(schema: &JsonObject, args: &Map<String, Value>) -> Result<(), ArgumentError> {
    CompiledSchema::new(schema)?.validate(args)
}

/// `pointer: problem`, with the offending value quoted only when short.
fn describe(error: &ValidationError<'_>) -> String {
    let pointer = error.instance_path().as_str();
    let at = if pointer.is_empty() {
        "(root)"
    } else {
        pointer
    };
    clip(&format!("{at}: {}", problem(error)), MAX_MESSAGE_CHARS)
}

fn problem(error: &ValidationError<'_>) -> String {
    match error.kind() {
        // The nested error is about a key; its own text would quote the key in full.
        ValidationErrorKind::PropertyNames { error } => {
            format!("property name {}", problem(error))
        }
        _ => error.masked_with(shown(error.instance())).to_string(),
    }
}

/// Numbers, booleans and null as JSON when short; anything else as its type and size.
///
/// Strings are never quoted, whatever their length: a short string is often exactly a key or
/// a token, and error bodies must not carry argument secrets back to logs and chat windows.
fn shown(value: &Value) -> String {
    let json = value.to_string();
    if !value.is_string() && json.chars().count() <= MAX_QUOTED_VALUE_CHARS {
        return json;
    }
    match value {
        Value::String(s) => format!("a string of {} characters", s.chars().count()),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(map) => format!("an object with {} keys", map.len()),
        other => type_name(other).to_owned(),
    }
}

/// At most `max` characters, marked when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}
