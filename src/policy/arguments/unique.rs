//! A JSON parse into `serde_json::Value` that refuses a key repeated in one object and nesting
//! past a bound, and says where. serde_json's own `Value` keeps the last of repeated keys
//! without a word.

use std::fmt::{self, Write as _};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::ArgumentError;

/// Parses all of `raw` (trailing text is an error).
pub(super) fn parse(raw: &str, max_depth: usize) -> Result<Value, ArgumentError> {
    let mut walk = Walk {
        path: String::new(),
        depth: 0,
        max_depth,
        stopped: None,
    };
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    let parsed = Node(&mut walk)
        .deserialize(&mut deserializer)
        .and_then(|value| deserializer.end().map(|()| value));
    match (parsed, walk.stopped) {
        (Ok(value), _) => Ok(value),
        (Err(_), Some(Stop::Duplicate(path))) => Err(ArgumentError::DuplicateKey { path }),
        (Err(_), Some(Stop::TooDeep)) => Err(ArgumentError::TooDeep { limit: max_depth }),
        // serde_json's messages name a line and column, never the text itself.
        (Err(error), None) => Err(ArgumentError::Malformed {
            reason: error.to_string(),
        }),
    }
}

/// State shared down the tree: where we are, and why we stopped (serde errors carry only
/// text, so the structured reason is kept here).
struct Walk {
    /// JSON pointer of the value being parsed.
    path: String,
    depth: usize,
    max_depth: usize,
    stopped: Option<Stop>,
}

enum Stop {
    Duplicate(String),
    TooDeep,
}

impl Walk {
    fn enter<E: de::Error>(&mut self) -> Result<(), E> {
        self.depth += 1;
        if self.depth > self.max_depth {
            self.stopped = Some(Stop::TooDeep);
            return Err(E::custom("nesting too deep"));
        }
        Ok(())
    }
}

/// Appends one JSON pointer segment (RFC 6901: `~` → `~0`, `/` → `~1`).
fn push_segment(path: &mut String, key: &str) {
    path.push('/');
    for c in key.chars() {
        match c {
            '~' => path.push_str("~0"),
            '/' => path.push_str("~1"),
            c => path.push(c),
        }
    }
}

/// One value in the document.
struct Node<'w>(&'w mut Walk);

impl<'de> DeserializeSeed<'de> for Node<'_> {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // JSON text has no NaN or infinity; should one arrive, it becomes null as in serde_json.
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let walk = self.0;
        walk.enter()?;
        let base = walk.path.len();
        let mut items = Vec::new();
        loop {
            // Writing into a String cannot fail.
            let _ = write!(walk.path, "/{}", items.len());
            let item = seq.next_element_seed(Node(&mut *walk))?;
            walk.path.truncate(base);
            match item {
                Some(item) => items.push(item),
                None => break,
            }
        }
        walk.depth -= 1;
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let walk = self.0;
        walk.enter()?;
        let base = walk.path.len();
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            push_segment(&mut walk.path, &key);
            if map.contains_key(&key) {
                walk.stopped = Some(Stop::Duplicate(walk.path.clone()));
                return Err(de::Error::custom("duplicate key"));
            }
            let value = access.next_value_seed(Node(&mut *walk))?;
            walk.path.truncate(base);
            map.insert(key, value);
        }
        walk.depth -= 1;
        Ok(Value::Object(map))
    }
}
