//! Poisoning scan: static checks on a tool definition's text (name, title, description and
//! every description or title nested in its schemas) for hidden or manipulative content.

mod phrases;
mod unicode;

use std::fmt;

use rmcp::model::{JsonObject, Tool};
use serde_json::Value;

use phrases::{Normalized, OwnNames};
pub(super) use unicode::{escaped, is_invisible};

/// Longest top-level description: generous for honest tools (the longest seen in popular
/// servers is about 1,500 characters), while a longer one is mostly room to hide things.
const MAX_DESCRIPTION_CHARS: usize = 2_000;

/// Longest nested description or title (schema properties, `$defs`, the tool title): these
/// describe one parameter and need far less room than the tool itself.
const MAX_NESTED_TEXT_CHARS: usize = 1_000;

/// A whitespace run this long pushes the text after it out of view in most UIs.
const MAX_WHITESPACE_RUN: usize = 20;

/// Line breaks in one whitespace run that push the text after it out of view.
const MAX_LINE_BREAK_RUN: usize = 5;

/// Deepest nesting of schema objects and arrays walked. The walk recurses on the stack and
/// the schema is untrusted; honest schemas stay under about ten levels. Text deeper than this
/// is not scanned, so reaching it is reported as `schema_too_deep` instead of passing silently.
const MAX_SCHEMA_DEPTH: usize = 64;

/// Characters of offending text quoted in a finding, so a finding never replays a payload.
const MAX_EXCERPT_CHARS: usize = 40;

/// Schema keys whose string values are text shown to the model.
const TEXT_KEYS: &[&str] = &["description", "title", "markdownDescription"];

/// Schema keys whose values are arrays of such text.
const TEXT_ARRAY_KEYS: &[&str] = &["enumDescriptions", "markdownEnumDescriptions", "enumNames"];

/// What a finding is about. Declaration order is the order of findings at one location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingCode {
    /// Format characters (zero-width, BOM, soft hyphen), bidi controls, tags, blank fillers,
    /// or variation selectors out of context.
    InvisibleUnicode,
    /// Privileged-instruction markup or an "ignore previous instructions" phrase.
    HiddenInstructions,
    /// A credential path or phrase (`~/.ssh`, `.env`, `/etc/passwd`, "private key").
    SecretAccess,
    /// Asking the model to keep something from the user.
    Concealment,
    /// An instruction about how to use other tools.
    CrossToolInstruction,
    /// A whitespace run long enough to push text out of view.
    WhitespaceRun,
    /// A description or title over its length limit.
    OversizeDescription,
    /// A schema nested deeper than 64 levels; the rest was not scanned.
    SchemaTooDeep,
}

impl FindingCode {
    /// Stable snake_case code for logs, APIs and config.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingCode::InvisibleUnicode => "invisible_unicode",
            FindingCode::HiddenInstructions => "hidden_instructions",
            FindingCode::SecretAccess => "secret_access",
            FindingCode::Concealment => "concealment",
            FindingCode::CrossToolInstruction => "cross_tool_instruction",
            FindingCode::WhitespaceRun => "whitespace_run",
            FindingCode::OversizeDescription => "oversize_description",
            FindingCode::SchemaTooDeep => "schema_too_deep",
        }
    }
}

impl fmt::Display for FindingCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One problem in one piece of a tool's text; at most one per code and location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub code: FindingCode,
    /// Where: `name`, `title`, `description`, `annotations.title`, or a schema path such as
    /// `inputSchema.properties.path.description` (keys escaped and cut like `detail`).
    pub location: String,
    /// Short and safe to show: quotes at most 40 characters of the text, with control and
    /// invisible characters escaped as `\u{..}`.
    pub detail: String,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.location, self.code, self.detail)
    }
}

/// Every finding in `tool`, sorted by location, then code. The same tool always gives the
/// same findings in the same order.
pub fn scan_tool(tool: &Tool) -> Vec<Finding> {
    let own = OwnNames {
        tool: &tool.name,
        params: tool
            .input_schema
            .get("properties")
            .and_then(Value::as_object)
            .map(|props| props.keys().map(String::as_str).collect())
            .unwrap_or_default(),
    };
    let mut scan = Scan {
        own,
        findings: Vec::new(),
    };
    // A name is never too long here: the catalog caps the name models see.
    scan.text("name", &tool.name, None);
    if let Some(title) = &tool.title {
        scan.text("title", title, Some(MAX_NESTED_TEXT_CHARS));
    }
    if let Some(description) = &tool.description {
        scan.text("description", description, Some(MAX_DESCRIPTION_CHARS));
    }
    if let Some(title) = tool.annotations.as_ref().and_then(|a| a.title.as_ref()) {
        scan.text("annotations.title", title, Some(MAX_NESTED_TEXT_CHARS));
    }
    scan.schema("inputSchema", &tool.input_schema);
    if let Some(output) = &tool.output_schema {
        scan.schema("outputSchema", output);
    }
    let mut findings = scan.findings;
    findings.sort_by(|a, b| (&a.location, a.code).cmp(&(&b.location, b.code)));
    findings
}

struct Scan<'a> {
    own: OwnNames<'a>,
    findings: Vec<Finding>,
}

impl Scan<'_> {
    fn push(&mut self, code: FindingCode, location: &str, detail: String) {
        self.findings.push(Finding {
            code,
            location: location.to_owned(),
            detail,
        });
    }

    fn invisible(&mut self, location: &str, text: &str) {
        let (count, first) = unicode::suspicious_invisible(text);
        if let Some((index, c)) = first {
            // A little context before the character, so a reviewer can find it.
            let from: String = text
                .chars()
                .skip(index.saturating_sub(10))
                .take(MAX_EXCERPT_CHARS + 1)
                .collect();
            let detail = format!(
                "{count} invisible character(s), first U+{:04X} at character {index}: \"{}\"",
                u32::from(c),
                escaped(&from, MAX_EXCERPT_CHARS)
            );
            self.push(FindingCode::InvisibleUnicode, location, detail);
        }
    }

    /// Runs every text check on `text`; `max_chars` is its length limit, if any.
    fn text(&mut self, location: &str, text: &str, max_chars: Option<usize>) {
        self.invisible(location, text);
        let normalized = Normalized::new(text);
        let phrase_checks = [
            (
                FindingCode::HiddenInstructions,
                phrases::hidden_instructions(&normalized),
            ),
            (
                FindingCode::SecretAccess,
                phrases::secret_access(&normalized),
            ),
            (FindingCode::Concealment, phrases::concealment(&normalized)),
            (
                FindingCode::CrossToolInstruction,
                phrases::cross_tool_instruction(text, &self.own),
            ),
            (FindingCode::WhitespaceRun, whitespace_run(text)),
        ];
        for (code, detail) in phrase_checks {
            if let Some(detail) = detail {
                self.push(code, location, detail);
            }
        }
        if let Some(max) = max_chars {
            let len = text.chars().count();
            if len > max {
                let detail = format!("{len} characters, limit {max}");
                self.push(FindingCode::OversizeDescription, location, detail);
            }
        }
    }

    fn schema(&mut self, location: &str, schema: &JsonObject) {
        let mut path = location.to_owned();
        let mut too_deep = false;
        self.object(schema, &mut path, 0, &mut too_deep);
    }

    /// Scans the text keys of `object` and walks into every nested object and array,
    /// whatever its JSON Schema role, so `$defs`, `anyOf` and unknown keywords are covered.
    fn object(&mut self, object: &JsonObject, path: &mut String, depth: usize, deep: &mut bool) {
        for (key, value) in object {
            let len = path.len();
            path.push('.');
            path.push_str(&escaped(key, MAX_EXCERPT_CHARS));
            // Property names reach the model too; only invisible characters matter in them.
            self.invisible(path, key);
            match value {
                Value::String(text) if TEXT_KEYS.contains(&key.as_str()) => {
                    self.text(path, text, Some(MAX_NESTED_TEXT_CHARS));
                }
                Value::Array(items) if TEXT_ARRAY_KEYS.contains(&key.as_str()) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::String(text) = item {
                            let at = format!("{path}[{i}]");
                            self.text(&at, text, Some(MAX_NESTED_TEXT_CHARS));
                        }
                    }
                }
                _ => self.value(value, path, depth + 1, deep),
            }
            path.truncate(len);
        }
    }

    fn value(&mut self, value: &Value, path: &mut String, depth: usize, deep: &mut bool) {
        let nested = matches!(value, Value::Object(_) | Value::Array(_));
        if nested && depth > MAX_SCHEMA_DEPTH {
            // Reported once per schema: past the first, the rest is noise.
            if !*deep {
                *deep = true;
                let detail = format!("nested deeper than {MAX_SCHEMA_DEPTH} levels; not scanned");
                self.push(FindingCode::SchemaTooDeep, path, detail);
            }
            return;
        }
        match value {
            Value::Object(object) => self.object(object, path, depth, deep),
            Value::Array(items) => {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    self.value(item, path, depth + 1, deep);
                    path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// A run of whitespace (invisible characters count as part of it) at least
/// [`MAX_WHITESPACE_RUN`] long or holding [`MAX_LINE_BREAK_RUN`] line breaks.
fn whitespace_run(text: &str) -> Option<String> {
    let mut run_start = 0;
    let mut run_len = 0;
    let mut breaks = 0;
    let mut chars = text.chars().enumerate().peekable();
    while let Some((index, c)) = chars.next() {
        if !(c.is_whitespace() || is_invisible(c)) {
            run_len = 0;
            breaks = 0;
            continue;
        }
        if run_len == 0 {
            run_start = index;
        }
        run_len += 1;
        // `\r\n` is one break: its `\r` is counted only when no `\n` follows.
        let lone_cr = c == '\r' && chars.peek().is_none_or(|&(_, n)| n != '\n');
        if matches!(c, '\n' | '\u{2028}' | '\u{2029}') || lone_cr {
            breaks += 1;
        }
        if run_len >= MAX_WHITESPACE_RUN || breaks >= MAX_LINE_BREAK_RUN {
            return Some(format!(
                "{run_len}+ whitespace characters ({breaks} line break(s)) from character \
                 {run_start}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests;
