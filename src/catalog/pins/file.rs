//! The pin file on disk: parsing TOML or JSON with validation, deterministic output, and an
//! atomic write. The only file I/O in the catalog module.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    fs::{self, File, OpenOptions},
    io::{self, Read, Write},
    path::{Path, PathBuf},
};

use serde::{
    Deserialize, Deserializer,
    de::{IgnoredAny, MapAccess, SeqAccess, Visitor},
};
use serde_json::{Map, Value};
use thiserror::Error;

use super::Pins;
use crate::{
    catalog::Fingerprint,
    catalog::scan::{escaped, is_invisible},
    config::ServerId,
    digest::random_hex,
};

/// The format version written: 2 keeps the reviewed definitions beside the fingerprints.
const VERSION: i64 = 2;

/// Versions read: 1 (fingerprints only) and 2.
const READ_VERSIONS: std::ops::RangeInclusive<i64> = 1..=VERSION;

const HEADER: &str = "# mcpgate.lock — fingerprints of reviewed tool definitions. \
                      Regenerate with `mcpgate pin`.";

/// Largest pin file read. A pin with its definition takes a few kilobytes, so this holds
/// thousands of tools; a bigger file is a wrong path (a device, a log), not a lock file.
const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Characters of a key quoted in an error; keys are tool names, which are untrusted.
const MAX_KEY_SHOWN: usize = 80;

/// Reading, writing or validating a pin file failed.
#[derive(Debug, Error)]
pub enum PinsError {
    #[error("cannot read pin file {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("pin file {} is larger than {limit} bytes", path.display())]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("cannot write pin file {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("invalid pin file{}: {problem}", in_file(path.as_deref()))]
    Invalid {
        /// Set when the text came from a file.
        path: Option<PathBuf>,
        problem: PinFileProblem,
    },
}

fn in_file(path: Option<&Path>) -> String {
    path.map(|p| format!(" {}", p.display()))
        .unwrap_or_default()
}

/// What is wrong with a pin file's content; key paths are written as in TOML
/// (`servers.github."odd name"`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PinFileProblem {
    #[error("not valid {format}: {message}")]
    Syntax {
        format: &'static str,
        message: String,
    },
    #[error("`{path}` is not a known key (expected {expected})")]
    UnknownKey {
        path: String,
        expected: &'static str,
    },
    #[error("`{path}` must be {expected}, found {found}")]
    WrongType {
        path: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("`version` is missing (this format is version {VERSION})")]
    MissingVersion,
    #[error("`version` is {found}; versions 1 to {VERSION} are understood")]
    UnsupportedVersion { found: i64 },
    #[error(
        "`{path}`: not a server id (a lowercase letter, then up to 31 lowercase letters, \
         digits or `-`)"
    )]
    BadServerId { path: String },
    #[error("`{path}`: a fingerprint is 64 lowercase hex characters")]
    BadFingerprint { path: String },
    #[error("`{path}`: the definition does not hash to its fingerprint (edited by hand?)")]
    DefinitionMismatch { path: String },
}

impl PinFileProblem {
    fn into_error(self) -> PinsError {
        PinsError::Invalid {
            path: None,
            problem: self,
        }
    }
}

impl Pins {
    /// Parses and validates the TOML form.
    pub fn parse_toml(text: &str) -> Result<Pins, PinsError> {
        let root = toml::from_str::<Node>(text).map_err(|e| {
            PinFileProblem::Syntax {
                format: "TOML",
                message: e.to_string(),
            }
            .into_error()
        })?;
        validate(root).map_err(PinFileProblem::into_error)
    }

    /// Parses and validates the JSON form (same shape as the TOML one).
    pub fn parse_json(text: &str) -> Result<Pins, PinsError> {
        let root = serde_json::from_str::<Node>(text).map_err(|e| {
            PinFileProblem::Syntax {
                format: "JSON",
                message: e.to_string(),
            }
            .into_error()
        })?;
        validate(root).map_err(PinFileProblem::into_error)
    }

    /// Reads the pin file at `path`: JSON when the name ends in `.json`, TOML otherwise.
    /// A missing file is `None`: nothing has been pinned yet.
    pub fn load(path: &Path) -> Result<Option<Pins>, PinsError> {
        let read_error = |source| PinsError::Read {
            path: path.to_owned(),
            source,
        };
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(read_error(e)),
        };
        let mut text = String::new();
        file.take(MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(read_error)?;
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(PinsError::TooLarge {
                path: path.to_owned(),
                limit: MAX_FILE_BYTES,
            });
        }
        let parsed = if is_json(path) {
            Pins::parse_json(&text)
        } else {
            Pins::parse_toml(&text)
        };
        match parsed {
            Ok(pins) => Ok(Some(pins)),
            Err(PinsError::Invalid { problem, .. }) => Err(PinsError::Invalid {
                path: Some(path.to_owned()),
                problem,
            }),
            Err(other) => Err(other),
        }
    }

    /// The TOML form: header comment, `version`, then one section per server, all sorted.
    /// Tool names are quoted, with control and invisible characters written as `\u` escapes
    /// so a reviewer sees them in a diff.
    pub fn to_toml(&self) -> String {
        let mut out = format!("{HEADER}\nversion = {VERSION}\n");
        for (server, tools) in &self.servers {
            // Server ids are valid TOML bare keys by construction.
            out.push_str(&format!("\n[servers.{server}]\n"));
            for (tool, fingerprint) in tools {
                out.push_str(&format!("{} = \"{fingerprint}\"\n", toml_string(tool)));
            }
        }
        let definitions = self.referenced_definitions();
        if !definitions.is_empty() {
            out.push_str(
                "\n# The reviewed definitions, by fingerprint (its SHA-256).\n[definitions]\n",
            );
            for (fingerprint, text) in definitions {
                out.push_str(&format!("{fingerprint} = {}\n", toml_text(text)));
            }
        }
        out
    }

    /// The JSON form, same shape and order as the TOML one.
    pub fn to_json(&self) -> String {
        let servers: Map<String, Value> = self
            .servers
            .iter()
            .map(|(server, tools)| {
                let tools = tools
                    .iter()
                    .map(|(t, fp)| (t.clone(), Value::String(fp.clone())))
                    .collect();
                (server.to_string(), Value::Object(tools))
            })
            .collect();
        let definitions: Map<String, Value> = self
            .referenced_definitions()
            .into_iter()
            .map(|(fp, text)| (fp.to_owned(), Value::String(text.to_owned())))
            .collect();
        let mut root = serde_json::json!({"version": VERSION, "servers": servers});
        if !definitions.is_empty() {
            root["definitions"] = Value::Object(definitions);
        }
        let mut text = serde_json::to_string_pretty(&root).expect("a JSON value always prints");
        text.push('\n');
        text
    }

    /// Writes the file atomically (a temporary file beside it, synced, then renamed over
    /// it), so a reader never sees half a file; JSON when the name ends in `.json`.
    pub fn write(&self, path: &Path) -> Result<(), PinsError> {
        let text = if is_json(path) {
            self.to_json()
        } else {
            self.to_toml()
        };
        let write_error = |source| PinsError::Write {
            path: path.to_owned(),
            source,
        };
        let name = path.file_name().ok_or_else(|| {
            write_error(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path has no file name",
            ))
        })?;
        let temp =
            path.with_file_name(format!(".{}.{}.tmp", name.to_string_lossy(), random_hex(8)));
        let result = write_new(&temp, text.as_bytes()).and_then(|()| fs::rename(&temp, path));
        if result.is_err() {
            // Best effort: the error that matters is the one returned below.
            let _ = fs::remove_file(&temp);
        }
        result.map_err(write_error)
    }
}

/// Creates `path` (never through an existing file or link), writes and syncs it.
fn write_new(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn is_json(path: &Path) -> bool {
    path.extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"))
}

/// A TOML basic string. Quotes, backslashes, control, invisible and non-space whitespace
/// characters are escaped, the rest written as is.
fn toml_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() || is_invisible(c) || (c.is_whitespace() && c != ' ') => {
                let code = u32::from(c);
                if code <= 0xFFFF {
                    out.push_str(&format!("\\u{code:04X}"));
                } else {
                    out.push_str(&format!("\\U{code:08X}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A TOML literal string (`'...'`, read as written, so JSON stays legible) when `text` has
/// nothing a literal cannot hold or a reviewer could not see; a basic string otherwise.
fn toml_text(text: &str) -> String {
    let plain = text.chars().all(|c| {
        c != '\'' && !c.is_control() && !is_invisible(c) && (c == ' ' || !c.is_whitespace())
    });
    if plain {
        format!("'{text}'")
    } else {
        toml_string(text)
    }
}

/// A key path as TOML would write it: bare keys where allowed, quoted and escaped otherwise.
fn key_path(keys: &[&str]) -> String {
    let segments: Vec<String> = keys
        .iter()
        .map(|k| {
            let bare = !k.is_empty()
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if bare {
                (*k).to_owned()
            } else {
                format!("\"{}\"", escaped(k, MAX_KEY_SHOWN))
            }
        })
        .collect();
    segments.join(".")
}

fn validate(root: Node) -> Result<Pins, PinFileProblem> {
    let entries = match root {
        Node::Table(entries) => entries,
        other => {
            return Err(PinFileProblem::WrongType {
                path: "(top level)".to_owned(),
                expected: "a table",
                found: other.kind(),
            });
        }
    };
    // The version first: a newer file should say so, not trip over its new keys.
    match entries.iter().find(|(k, _)| k == "version") {
        None => return Err(PinFileProblem::MissingVersion),
        Some((_, Node::Integer(found))) if READ_VERSIONS.contains(found) => {}
        Some((_, Node::Integer(found))) => {
            return Err(PinFileProblem::UnsupportedVersion { found: *found });
        }
        Some((_, other)) => {
            return Err(PinFileProblem::WrongType {
                path: "version".to_owned(),
                expected: "an integer",
                found: other.kind(),
            });
        }
    }
    let mut servers = BTreeMap::new();
    let mut definitions = BTreeMap::new();
    for (key, node) in entries {
        match key.as_str() {
            "version" => {}
            "servers" => servers = validate_servers(node)?,
            "definitions" => definitions = validate_definitions(node)?,
            _ => {
                return Err(PinFileProblem::UnknownKey {
                    path: key_path(&[&key]),
                    expected: "`version`, `servers` or `definitions`",
                });
            }
        }
    }
    Ok(Pins {
        servers,
        definitions,
    })
}

/// `definitions`: fingerprint to the canonical JSON text it is the SHA-256 of. A text that
/// does not hash to its key is refused: it would show a reviewer a definition nobody pinned.
fn validate_definitions(node: Node) -> Result<BTreeMap<String, String>, PinFileProblem> {
    let Node::Table(entries) = node else {
        return Err(PinFileProblem::WrongType {
            path: "definitions".to_owned(),
            expected: "a table",
            found: node.kind(),
        });
    };
    let mut definitions = BTreeMap::new();
    for (fingerprint, node) in entries {
        let path = key_path(&["definitions", &fingerprint]);
        if !is_fingerprint(&fingerprint) {
            return Err(PinFileProblem::BadFingerprint { path });
        }
        let Node::Text(text) = node else {
            return Err(PinFileProblem::WrongType {
                path,
                expected: "a JSON text",
                found: node.kind(),
            });
        };
        if Fingerprint::of_definition(&text).as_str() != fingerprint {
            return Err(PinFileProblem::DefinitionMismatch { path });
        }
        definitions.insert(fingerprint, text);
    }
    Ok(definitions)
}

type Sections = BTreeMap<ServerId, BTreeMap<String, String>>;

fn validate_servers(node: Node) -> Result<Sections, PinFileProblem> {
    let wrong_type = |path: String, found| PinFileProblem::WrongType {
        path,
        expected: "a table",
        found,
    };
    let Node::Table(servers) = node else {
        return Err(wrong_type("servers".to_owned(), node.kind()));
    };
    let mut sections = BTreeMap::new();
    for (id, node) in servers {
        let Some(server) = ServerId::new(&id) else {
            return Err(PinFileProblem::BadServerId {
                path: key_path(&["servers", &id]),
            });
        };
        let Node::Table(tools) = node else {
            return Err(wrong_type(key_path(&["servers", &id]), node.kind()));
        };
        let mut section = BTreeMap::new();
        for (tool, node) in tools {
            match node {
                Node::Text(fp) if is_fingerprint(&fp) => {
                    section.insert(tool, fp);
                }
                Node::Text(_) => {
                    return Err(PinFileProblem::BadFingerprint {
                        path: key_path(&["servers", &id, &tool]),
                    });
                }
                other => {
                    return Err(PinFileProblem::WrongType {
                        path: key_path(&["servers", &id, &tool]),
                        expected: "a fingerprint string",
                        found: other.kind(),
                    });
                }
            }
        }
        sections.insert(server, section);
    }
    Ok(sections)
}

fn is_fingerprint(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A pin file value before validation, from either format. Tables keep written order and
/// reject duplicate keys: JSON parsers keep the last silently, which would let a second
/// entry hide the reviewed one.
enum Node {
    Text(String),
    Integer(i64),
    Table(Vec<(String, Node)>),
    Other(&'static str),
}

impl Node {
    fn kind(&self) -> &'static str {
        match self {
            Node::Text(_) => "a string",
            Node::Integer(_) => "an integer",
            Node::Table(_) => "a table",
            Node::Other(kind) => kind,
        }
    }
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pin file value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Other("a boolean"))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Integer(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(i64::try_from(v).map_or(Node::Other("a large integer"), Node::Integer))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Other("a float"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Text(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Text(v))
    }

    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Other("null"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Node::Other("an array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut seen = BTreeSet::new();
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                let shown = escaped(&key, MAX_KEY_SHOWN);
                return Err(serde::de::Error::custom(format!(
                    "duplicate key \"{shown}\""
                )));
            }
            entries.push((key, map.next_value::<Node>()?));
        }
        Ok(Node::Table(entries))
    }
}
