//! Argument checks before a call: size cap, a parse that refuses duplicate keys, a depth
//! bound, and JSON Schema validation against the tool's input schema.

mod schema;
#[cfg(test)]
mod tests;
mod unique;

use std::io;

use serde_json::{Map, Value};

pub use schema::{CompiledSchema, InvalidSchema, validate};

/// Deepest nesting of arrays and objects accepted in arguments (the top-level object is
/// depth 1). Tool inputs rarely nest beyond a handful of levels, and every later pass over the
/// arguments (canonical hashing, schema validation, dropping) recurses once per level. We
/// enforce this ourselves while parsing; serde_json's own limit of 128 is only a backstop.
pub const MAX_ARGUMENT_DEPTH: usize = 64;

/// Why arguments were refused. Every variant has the code [`ArgumentError::CODE`]; `reason()`
/// tells them apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    #[error("arguments are {size} bytes, over the limit of {limit}")]
    TooLarge { size: usize, limit: usize },
    #[error("arguments nest deeper than {limit} levels")]
    TooDeep { limit: usize },
    /// The same key twice in one object, at the JSON pointer `path` (of the repeated key).
    /// Parsers disagree on which one wins, so a check made on one reading could let the
    /// other run.
    #[error("duplicate key at {path}")]
    DuplicateKey { path: String },
    #[error("arguments must be a JSON object, not {found}")]
    NotAnObject { found: &'static str },
    #[error("arguments are not valid JSON: {reason}")]
    Malformed { reason: String },
    /// The arguments break the tool's input schema; `message` lists the first few problems
    /// with JSON pointers.
    #[error("arguments do not match the tool's input schema: {message}")]
    Schema { message: String },
    /// The tool's own schema could not be compiled (only from the one-shot [`validate`]; the
    /// gate compiles schemas up front with [`CompiledSchema::new`] and treats such a tool as
    /// unusable).
    #[error(transparent)]
    UnusableSchema(#[from] InvalidSchema),
}

impl ArgumentError {
    /// Stable error code shared by every argument error.
    pub const CODE: &'static str = "invalid_arguments";

    pub fn code(&self) -> &'static str {
        Self::CODE
    }

    /// Stable machine-readable kind.
    pub fn reason(&self) -> &'static str {
        match self {
            ArgumentError::TooLarge { .. } => "too_large",
            ArgumentError::TooDeep { .. } => "too_deep",
            ArgumentError::DuplicateKey { .. } => "duplicate_key",
            ArgumentError::NotAnObject { .. } => "not_an_object",
            ArgumentError::Malformed { .. } => "malformed",
            ArgumentError::Schema { .. } => "schema",
            ArgumentError::UnusableSchema(_) => "unusable_schema",
        }
    }
}

/// Parses raw argument text (as a model or a REST client sent it) into an object. Checks, in
/// order: at most `max_bytes` bytes of text; valid JSON with no repeated key in any object and
/// at most [`MAX_ARGUMENT_DEPTH`] levels; an object at the top. Empty text and `null` mean no
/// arguments (an empty object).
pub fn parse_arguments(raw: &str, max_bytes: usize) -> Result<Map<String, Value>, ArgumentError> {
    if raw.len() > max_bytes {
        return Err(ArgumentError::TooLarge {
            size: raw.len(),
            limit: max_bytes,
        });
    }
    if raw.trim().is_empty() {
        return Ok(Map::new());
    }
    match unique::parse(raw, MAX_ARGUMENT_DEPTH)? {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        other => Err(ArgumentError::NotAnObject {
            found: type_name(&other),
        }),
    }
}

/// The same size and depth checks for arguments that arrived already parsed. The size is that
/// of the compact serialization, which is what goes upstream. Duplicate keys cannot be seen
/// here: whoever parsed the text has already kept one of them. Returns that size.
pub fn check_value(args: &Map<String, Value>, max_bytes: usize) -> Result<usize, ArgumentError> {
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, args).map_err(|e| ArgumentError::Malformed {
        reason: e.to_string(),
    })?;
    if counter.0 > max_bytes {
        return Err(ArgumentError::TooLarge {
            size: counter.0,
            limit: max_bytes,
        });
    }
    if args
        .values()
        .any(|v| deeper_than(v, MAX_ARGUMENT_DEPTH - 1))
    {
        return Err(ArgumentError::TooDeep {
            limit: MAX_ARGUMENT_DEPTH,
        });
    }
    Ok(counter.0)
}

/// Whether `value` nests more than `levels` arrays or objects; stops descending once it does.
fn deeper_than(value: &Value, levels: usize) -> bool {
    match value {
        Value::Array(items) => levels == 0 || items.iter().any(|v| deeper_than(v, levels - 1)),
        Value::Object(map) => levels == 0 || map.values().any(|v| deeper_than(v, levels - 1)),
        _ => false,
    }
}

/// How a JSON value's type reads in an error message (`a string`, `an array`, ...).
pub fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Counts serialized bytes without keeping them.
pub(crate) struct ByteCounter(pub(crate) usize);

impl io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
