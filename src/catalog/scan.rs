//! Poisoning scan: static checks on every string of a tool definition that reaches a model
//! or a client (name, title, description, annotations, every string and property name of its
//! schemas at any depth), read as the model reads it: NFKC-normalized, invisible characters
//! reported and dropped, hidden parts (comments, hidden elements, terminal escapes, tag
//! characters) reported and read, encoded runs (base64, hex, percent, rot13) decoded. The
//! instruction families (override, concealment, exfiltration, secret access) are word
//! patterns in English and rules kept as data in six languages (`rules.rs`). What needs the
//! whole catalog (shadowing, impersonation) is in `cross.rs`.

mod cross;
mod decode;
mod hidden;
mod phrases;
mod rules;
mod unicode;

use std::{
    borrow::Cow,
    collections::HashMap,
    fmt,
    sync::{Arc, LazyLock, Mutex},
};

use rmcp::model::{JsonObject, Tool};
use serde_json::Value;
use unicode_normalization::{IsNormalized, UnicodeNormalization as _};

pub use cross::{cross_catalog, cross_catalog_beside};

/// `cross`, a tool's findings from [`cross_catalog`], added to its own ones from [`scan_tool`],
/// one finding per code and location (both passes may note the same sentence).
pub fn merge_cross(findings: &mut Vec<Finding>, cross: Vec<Finding>) {
    for finding in cross {
        if !findings
            .iter()
            .any(|f| f.code == finding.code && f.location == finding.location)
        {
            findings.push(finding);
        }
    }
}
use phrases::Normalized;
use rules::Family;
pub(super) use unicode::{escaped, is_invisible};

/// Longest description, title or other text of a definition before it is noted as long
/// (low severity: length alone is no poisoning, and all of it is scanned anyway). Generous for
/// honest tools: among 970 tools of 62 popular servers the longest description is near 7,000
/// characters (Firecrawl's, with JSON examples) and the longest parameter description near
/// 6,800 (a category list).
const MAX_TEXT_CHARS: usize = 16_000;

/// A whitespace run this long inside a line pushes the text after it out of view in most UIs
/// (half a usual description pane or more); shorter ones line up code comments in examples.
const MAX_WHITESPACE_RUN: usize = 40;

/// Indentation (blanks at the start of a line) this long does the same; shorter indentation
/// is layout (descriptions written as indented template literals, JSON examples).
const MAX_INDENT_RUN: usize = 80;

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

/// JSON Schema's keywords: keys that are fixed words, never an upstream's text.
const SCHEMA_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "items",
    "description",
    "title",
    "enum",
    "default",
    "examples",
    "const",
    "format",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "multipleOf",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "$schema",
    "$ref",
    "$defs",
    "definitions",
    "$id",
    "$anchor",
    "$comment",
    "anyOf",
    "oneOf",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "prefixItems",
    "dependentRequired",
    "dependentSchemas",
    "unevaluatedProperties",
    "unevaluatedItems",
    "readOnly",
    "writeOnly",
    "deprecated",
    "nullable",
    "contentEncoding",
    "contentMediaType",
    "markdownDescription",
    "enumDescriptions",
];

/// Schema keys whose string values are structure, not text: never scanned as text (their
/// values are names, types and patterns the validator reads).
const STRUCTURAL_KEYS: &[&str] = &[
    "type",
    "format",
    "$ref",
    "$schema",
    "$id",
    "$anchor",
    "$dynamicRef",
    "$dynamicAnchor",
    "pattern",
    "contentEncoding",
    "contentMediaType",
];

/// Schema keys whose values are arrays of such text.
const TEXT_ARRAY_KEYS: &[&str] = &["enumDescriptions", "markdownEnumDescriptions", "enumNames"];

/// What a finding is about. Declaration order is the order of findings at one location.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FindingCode {
    /// Format characters (zero-width, BOM, soft hyphen), bidi controls, tags, blank fillers,
    /// or variation selectors out of context.
    InvisibleUnicode,
    /// Text hidden from a person and read by the model: comments, hidden elements, terminal
    /// escape sequences, tag characters.
    HiddenText,
    /// Privileged-instruction markup, or a phrase that overrides earlier instructions.
    HiddenInstructions,
    /// A credential path or phrase (`~/.ssh`, `.env`, `/etc/passwd`, "private key"), or a
    /// request for secrets.
    SecretAccess,
    /// Asking the model to keep something from the user.
    Concealment,
    /// Sending data out (URLs, images, commands) or asking for the conversation or the
    /// model's own instructions.
    Exfiltration,
    /// An encoded run (base64, hex, percent, rot13) that decodes to text.
    EncodedPayload,
    /// An instruction about how another server's tool must be used.
    Shadowing,
    /// A name that imitates another tool's (mixed scripts, confusable letters, one edit away).
    Impersonation,
    /// An instruction about how to use other tools.
    CrossToolInstruction,
    /// A whitespace run long enough to push text out of view.
    WhitespaceRun,
    /// A description or title over its length limit.
    OversizeDescription,
    /// A schema nested deeper than 64 levels; the rest was not scanned.
    SchemaTooDeep,
    /// The model asked for a second opinion (`[scan] model_review`) flagged a definition the
    /// rules passed (see `catalog::review`).
    ModelReview,
}

/// How much a finding weighs: `scan = "block"` quarantines tools with a high one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Low,
    Medium,
    High,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Low => "low",
            Severity::Medium => "medium",
            Severity::High => "high",
        }
    }
}

impl FindingCode {
    /// Stable snake_case code for logs, APIs and config.
    pub fn as_str(self) -> &'static str {
        match self {
            FindingCode::InvisibleUnicode => "invisible_unicode",
            FindingCode::HiddenText => "hidden_text",
            FindingCode::HiddenInstructions => "hidden_instructions",
            FindingCode::SecretAccess => "secret_access",
            FindingCode::Concealment => "concealment",
            FindingCode::Exfiltration => "exfiltration",
            FindingCode::EncodedPayload => "encoded_payload",
            FindingCode::Shadowing => "shadowing",
            FindingCode::Impersonation => "impersonation",
            FindingCode::CrossToolInstruction => "cross_tool_instruction",
            FindingCode::WhitespaceRun => "whitespace_run",
            FindingCode::OversizeDescription => "oversize_description",
            FindingCode::SchemaTooDeep => "schema_too_deep",
            FindingCode::ModelReview => "model_review",
        }
    }

    /// The weight of a finding of this code (an encoded run that reads as plain text, not
    /// as an instruction, weighs less: see [`Finding::severity`]).
    pub fn severity(self) -> Severity {
        match self {
            FindingCode::InvisibleUnicode
            | FindingCode::HiddenText
            | FindingCode::HiddenInstructions
            | FindingCode::SecretAccess
            | FindingCode::Concealment
            | FindingCode::Exfiltration
            | FindingCode::EncodedPayload
            | FindingCode::Shadowing
            | FindingCode::Impersonation => Severity::High,
            FindingCode::CrossToolInstruction
            | FindingCode::WhitespaceRun
            | FindingCode::SchemaTooDeep
            | FindingCode::ModelReview => Severity::Medium,
            FindingCode::OversizeDescription => Severity::Low,
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
    pub severity: Severity,
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

/// Findings of definitions scanned before, by fingerprint (and `_meta`, which the
/// fingerprint leaves out): a refresh rescans only what changed. Bounded; when full, it
/// starts again.
static SCANNED: LazyLock<Mutex<HashMap<String, Vec<Finding>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// Definitions whose findings are kept: a gateway's whole catalog many times over.
const MAX_SCANNED: usize = 100_000;

/// [`scan_tool`], from the findings of an earlier scan of the same definition when there is
/// one (`fingerprint` is the definition's).
pub fn scan_tool_cached(fingerprint: &str, tool: &Tool) -> Vec<Finding> {
    let key = match &tool.meta {
        Some(meta) => format!(
            "{fingerprint}:{}",
            crate::digest::sha256_hex(
                serde_json::to_string(&meta.0)
                    .unwrap_or_default()
                    .as_bytes()
            )
        ),
        None => fingerprint.to_owned(),
    };
    if let Some(found) = SCANNED
        .lock()
        .ok()
        .and_then(|cache| cache.get(&key).cloned())
    {
        return found;
    }
    let found = scan_tool(tool);
    if let Ok(mut cache) = SCANNED.lock() {
        if cache.len() >= MAX_SCANNED {
            cache.clear();
        }
        cache.insert(key, found.clone());
    }
    found
}

/// Builds the rules' prefilters and the tables the scan reads, so that no scan pays for them
/// (they are built once per process, else by the first scan): for a process that wants its
/// first scan as fast as the rest, and for a benchmark before its clock starts.
pub fn prepare_scan() {
    rules::prepare();
    // The decoders', the phrase readers' and the cross-catalog tables, through definitions
    // that reach each of them.
    let sample = Tool::new(
        "prepare",
        "Reads <!-- a comment --> and aGlkZGVuIHRleHQgaW4gYmFzZTY0 and %68%69%64%64%65%6e, \
         then `send_email` to user@example.com.",
        Arc::new(JsonObject::new()),
    );
    scan_tool(&sample);
    if let Some(server) = &crate::config::ServerId::new("prepare") {
        cross_catalog(&[(server, &sample)]);
    }
}

/// Every finding in `tool`, sorted by location, then code. The same tool always gives the
/// same findings in the same order.
pub fn scan_tool(tool: &Tool) -> Vec<Finding> {
    let mut scan = Scan {
        findings: Vec::new(),
        takes_private_key: false,
    };
    // A name is never too long here: the catalog caps the name models see.
    scan.text("name", &tool.name, None);
    if let Some(title) = &tool.title {
        scan.text("title", title, Some(MAX_TEXT_CHARS));
    }
    if let Some(description) = &tool.description {
        scan.text("description", description, Some(MAX_TEXT_CHARS));
    }
    if let Some(title) = tool.annotations.as_ref().and_then(|a| a.title.as_ref()) {
        scan.text("annotations.title", title, Some(MAX_TEXT_CHARS));
    }
    scan.schema("inputSchema", &tool.input_schema);
    if let Some(output) = &tool.output_schema {
        scan.schema("outputSchema", output);
    }
    // Clients read `_meta` (an MCP App's view and its policy live there).
    if let Some(meta) = &tool.meta {
        scan.schema("_meta", &meta.0);
    }
    let mut findings = scan.findings;
    // A tool whose name says it handles secrets (`ssh_key_manager`, `manage_dotenv`) names
    // them in its own name, description and values as a matter of course: that alone is no
    // finding. Secrets asked for in a parameter's description still are, and anything else
    // of weight keeps them all.
    if about_secrets(&tool.name)
        && findings
            .iter()
            .all(|f| f.code == FindingCode::SecretAccess || f.severity < Severity::High)
    {
        findings.retain(|f| f.code != FindingCode::SecretAccess || !states_purpose(&f.location));
    }
    findings.sort_by(|a, b| (&a.location, a.code).cmp(&(&b.location, b.code)));
    findings
}

/// Keys of a tool definition that [`Tool`] keeps (MCP's `Tool`, with `execution` of later
/// revisions): the rest is dropped when a definition is read, so no model reads it through
/// the gateway.
const TOOL_KEYS: &[&str] = &[
    "name",
    "title",
    "description",
    "inputSchema",
    "outputSchema",
    "annotations",
    "icons",
    "_meta",
    "execution",
];

/// The keys of a tool's annotations that [`Tool`] keeps.
const ANNOTATION_KEYS: &[&str] = &[
    "title",
    "readOnlyHint",
    "destructiveHint",
    "idempotentHint",
    "openWorldHint",
];

/// The findings in what a raw definition carries beyond [`Tool`] (`x-llm-guidance` beside
/// `inputSchema`): the gateway drops those keys, but a server that writes an order there
/// means it for clients that keep them, so `mcpgate scan` reports them before the server
/// is added.
pub fn scan_dropped_keys(definition: &JsonObject) -> Vec<Finding> {
    let mut extra: JsonObject = definition
        .iter()
        .filter(|(key, _)| !TOOL_KEYS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    // Annotations' own keys beyond MCP's (`annotations.x-bootstrap`) are dropped too.
    if let Some(Value::Object(annotations)) = definition.get("annotations") {
        let dropped: JsonObject = annotations
            .iter()
            .filter(|(key, _)| !ANNOTATION_KEYS.contains(&key.as_str()))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        if !dropped.is_empty() {
            extra.insert("annotations".to_owned(), Value::Object(dropped));
        }
    }
    if extra.is_empty() {
        return Vec::new();
    }
    let mut scan = Scan {
        findings: Vec::new(),
        takes_private_key: false,
    };
    let mut path = String::new();
    let mut too_deep = false;
    scan.object(&extra, &mut path, 0, &mut too_deep);
    let mut findings = scan.findings;
    for finding in &mut findings {
        // `.x-llm-guidance` reads as `x-llm-guidance`.
        if let Some(location) = finding.location.strip_prefix('.') {
            finding.location = location.to_owned();
        }
    }
    findings.sort_by(|a, b| (&a.location, a.code).cmp(&(&b.location, b.code)));
    findings
}

/// Words of a tool name that say the tool's job is secrets.
const SECRET_PURPOSES: &[&str] = &[
    "auth",
    "cert",
    "certificate",
    "certificates",
    "certs",
    "credential",
    "credentials",
    "dotenv",
    "env",
    "gpg",
    "key",
    "keychain",
    "keyring",
    "keys",
    "oauth",
    "passkey",
    "password",
    "passwords",
    "pgp",
    "secret",
    "secrets",
    "ssh",
    "token",
    "tokens",
    "vault",
];

/// Where a tool says what it is for: its name, titles and description, and the values its
/// parameters take (a default `.env` for a tool about `.env` files).
fn states_purpose(location: &str) -> bool {
    // The last key of a schema path, without an array index (`...enum[2]` is `enum`).
    let key = location.rsplit('.').next().unwrap_or(location);
    let key = key.split('[').next().unwrap_or(key);
    matches!(
        location,
        "name" | "title" | "description" | "annotations.title"
    ) || (location.contains('.') && matches!(key, "default" | "enum" | "examples" | "const" | "required"))
        // A parameter's own name (`private_key` of a tool that manages private keys).
        || location
            .rsplit_once('.')
            .is_some_and(|(parent, _)| parent.ends_with(".properties"))
}

/// Whether `name` names a private key (`privateKey`, `private_key`, `signerPrivateKey`): a
/// parameter that takes one, as a wallet's or a certificate's tools have. Not an SSH or PGP
/// key (`ssh_private_key`): those live in files a model could be sent to read.
/// Every string a schema holds is asked, so the ending is compared without copying the name.
fn names_private_key(name: &str) -> bool {
    let mut from_the_end = name
        .chars()
        .rev()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase());
    if !"privatekey"
        .chars()
        .rev()
        .all(|c| from_the_end.next() == Some(c))
    {
        return false;
    }
    let before: String = from_the_end
        .collect::<Vec<char>>()
        .into_iter()
        .rev()
        .collect();
    !["ssh", "gpg", "pgp"].iter().any(|k| before.contains(k))
}

/// Whether `name` says its tool's job is secrets (see [`SECRET_PURPOSES`]).
fn about_secrets(name: &str) -> bool {
    phrases::split_identifier(name)
        .to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|word| SECRET_PURPOSES.contains(&word))
}

struct Scan {
    findings: Vec<Finding>,
    /// Set while a parameter that takes a private key (`privateKey`) is read: its name, its
    /// own schema and the strings naming it (`required`). "Private key" there names what the
    /// parameter takes (a wallet's signing tools), not a secret to go and find. Paths to key
    /// files and the rules' requests still count, and the rest of the tool is read as usual.
    takes_private_key: bool,
}

impl Scan {
    /// The instructions `n` holds, read as this tool's (see [`Scan::takes_private_key`]).
    fn instructions(&self, n: &Normalized) -> Vec<(FindingCode, String)> {
        instructions(n, self.takes_private_key)
    }

    /// Records a finding at its code's severity, once per code and location.
    fn push(&mut self, code: FindingCode, location: &str, detail: String) {
        self.push_weighed(code, code.severity(), location, detail);
    }

    fn push_weighed(
        &mut self,
        code: FindingCode,
        severity: Severity,
        location: &str,
        detail: String,
    ) {
        if self
            .findings
            .iter()
            .any(|f| f.code == code && f.location == location)
        {
            return;
        }
        self.findings.push(Finding {
            code,
            severity,
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
        let folded = nfkc(text);
        let normalized = Normalized::new(&folded);
        for (code, detail) in self.instructions(&normalized) {
            self.push(code, location, detail);
        }
        let layout_checks = [
            (
                FindingCode::CrossToolInstruction,
                phrases::cross_tool_instruction(&folded),
            ),
            (FindingCode::WhitespaceRun, whitespace_run(text)),
        ];
        for (code, detail) in layout_checks {
            if let Some(detail) = detail {
                self.push(code, location, detail);
            }
        }
        self.hidden(location, text);
        self.encoded(location, &folded);
        // One token (`accurate_and_attach_the_key_file`, an enum value): read as words too.
        if !text.trim().contains(char::is_whitespace) {
            self.identifier_words(location, &folded);
        }
        if let Some(max) = max_chars {
            let len = text.chars().count();
            if len > max {
                let detail = format!("{len} characters, limit {max}");
                self.push(FindingCode::OversizeDescription, location, detail);
            }
        }
    }

    /// A property name or other key: read as the words it is made of.
    /// JSON Schema's own keywords are fixed words and are not read again.
    fn name(&mut self, location: &str, name: &str) {
        if SCHEMA_KEYWORDS.contains(&name) {
            return;
        }
        self.invisible(location, name);
        let folded = nfkc(name);
        for (code, detail) in self.instructions(&Normalized::new(&folded)) {
            self.push(code, location, detail);
        }
        self.identifier_words(location, &folded);
    }

    /// An identifier read as the words it is made of (`readSshKey`, `id_of_the_user`), when
    /// that differs from reading it whole.
    fn identifier_words(&mut self, location: &str, folded: &str) {
        let split = phrases::split_identifier(folded);
        if split == folded {
            return;
        }
        // Two words are a setting's name (`suppressWarnings`, `skipConfirmation`): what the
        // setting does, not a request to keep anything from the person or to act unasked.
        let setting = split.split_whitespace().count() <= 2;
        for (code, detail) in self.instructions(&Normalized::new(&split)) {
            let what_a_setting_does = matches!(
                code,
                FindingCode::Concealment | FindingCode::HiddenInstructions
            );
            if !(setting && what_a_setting_does) {
                self.push(code, location, detail);
            }
        }
    }

    /// Text hidden from a person: reported, and what it says is read too (tag characters
    /// spell text that is nowhere else in plain form).
    fn hidden(&mut self, location: &str, text: &str) {
        for part in hidden::hidden_parts(text) {
            if ![hidden::CONDITIONAL_COMMENT, hidden::MARKER_COMMENT].contains(&part.how) {
                let detail = format!(
                    "{}: \"{}\"",
                    part.how,
                    escaped(&part.text, MAX_EXCERPT_CHARS)
                );
                self.push(FindingCode::HiddenText, location, detail);
            }
            let said = Normalized::new(&nfkc(&part.text));
            for (code, detail) in self.instructions(&said) {
                self.push(code, location, format!("{} ({})", detail, part.how));
            }
        }
    }

    /// Encoded runs that decode to text, and the text read as rot13: an instruction inside
    /// weighs high; plain text, medium.
    fn encoded(&mut self, location: &str, folded: &str) {
        for run in decode::decoded_runs(folded) {
            let said = Normalized::new(&run.text);
            let found = self.instructions(&said);
            // Printable text that is no language (a path, a name) counts only for what it
            // names: `~/.ssh/id_rsa` in base64 does, an id does not.
            if !run.readable && found.is_empty() {
                continue;
            }
            let severity = if found.is_empty() {
                Severity::Medium
            } else {
                Severity::High
            };
            let detail = format!(
                "{} at byte {} decodes to \"{}\"",
                run.encoding,
                run.start,
                escaped(&run.text, MAX_EXCERPT_CHARS)
            );
            self.push_weighed(FindingCode::EncodedPayload, severity, location, detail);
        }
        // English sentences under a Caesar shift (rot13 among them), Atbash, ROT47 or written
        // backwards: an instruction inside weighs high, anything else medium.
        let transformed = [
            ("a Caesar shift", decode::shifted_sentences(folded)),
            ("Atbash", decode::atbash_sentences(folded)),
            ("rot47", decode::rot47_lines(folded)),
            ("backwards", decode::reversed_sentences(folded)),
            ("upside down", decode::upside_down(folded)),
        ];
        for (how, sentences) in transformed {
            let Some(first) = sentences.first() else {
                continue;
            };
            let said = Normalized::new(&sentences.join(". "));
            let severity = if self.instructions(&said).is_empty() {
                Severity::Medium
            } else {
                Severity::High
            };
            let detail = format!(
                "{how} reads \"{}\"",
                escaped(first.trim(), MAX_EXCERPT_CHARS)
            );
            self.push_weighed(FindingCode::EncodedPayload, severity, location, detail);
        }
        // Text labelled as written backwards: an instruction inside weighs high, English
        // medium, anything else (an honest "in reverse order: ...") nothing.
        for (plain, english) in decode::labelled_reversals(folded) {
            let said = Normalized::new(&plain);
            let severity = if !self.instructions(&said).is_empty() {
                Severity::High
            } else if english {
                Severity::Medium
            } else {
                continue;
            };
            let detail = format!(
                "labelled backwards, reads \"{}\"",
                escaped(plain.trim(), MAX_EXCERPT_CHARS)
            );
            self.push_weighed(FindingCode::EncodedPayload, severity, location, detail);
        }
        // Leetspeak (`1gn0r3 4ll`): read as letters, only an instruction counts.
        if let Some(plain) = decode::unleet(folded) {
            for (code, detail) in self.instructions(&Normalized::new(&plain)) {
                self.push(code, location, format!("{detail} (read from leetspeak)"));
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
        let properties = path.ends_with(".properties");
        for (key, value) in object {
            let len = path.len();
            let outer = self.takes_private_key;
            self.takes_private_key |= properties && names_private_key(key);
            path.push('.');
            path.push_str(&escaped(key, MAX_EXCERPT_CHARS));
            // Property names and every other key reach the model too.
            self.name(path, key);
            if properties
                && is_copy_recipient(key)
                && let Value::Object(property) = value
            {
                self.fixed_copy_recipient(path, property);
            }
            match value {
                Value::String(text) if TEXT_KEYS.contains(&key.as_str()) => {
                    self.text(path, text, Some(MAX_TEXT_CHARS));
                }
                Value::Array(items) if TEXT_ARRAY_KEYS.contains(&key.as_str()) => {
                    for (i, item) in items.iter().enumerate() {
                        if let Value::String(text) = item {
                            let at = format!("{path}[{i}]");
                            self.text(&at, text, Some(MAX_TEXT_CHARS));
                        }
                    }
                }
                // Structure (types, references, patterns) is the validator's, not text; but
                // a pattern's comments (`(?#...)`) are words a model reads.
                Value::String(text) if STRUCTURAL_KEYS.contains(&key.as_str()) => {
                    if key == "pattern" {
                        for comment in regex_comments(text) {
                            self.text(path, comment, None);
                        }
                    }
                }
                _ => self.value(value, path, depth + 1, deep),
            }
            path.truncate(len);
            self.takes_private_key = outer;
        }
    }

    /// A copy parameter (`bcc`, `cc`) whose schema fills in an address of its own: every
    /// message the tool sends goes to that address too, unless the model overrides it (the
    /// blind copy of a mail server's backdoor).
    fn fixed_copy_recipient(&mut self, path: &str, property: &JsonObject) {
        for key in ["default", "const"] {
            let addresses = match property.get(key) {
                Some(Value::String(text)) => vec![text.as_str()],
                Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                _ => continue,
            };
            if let Some(address) = addresses.into_iter().find(|a| a.contains('@')) {
                let detail = format!(
                    "every message is copied to \"{}\" unless the model says otherwise",
                    escaped(address, MAX_EXCERPT_CHARS)
                );
                self.push(FindingCode::Exfiltration, &format!("{path}.{key}"), detail);
            }
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
            // Defaults, enum values, examples, constants and any other string a model reads;
            // a parameter's name in `required` is that parameter's.
            Value::String(text) => {
                let outer = self.takes_private_key;
                self.takes_private_key |= names_private_key(text);
                self.text(path, text, None);
                self.takes_private_key = outer;
            }
            _ => {}
        }
    }
}

/// Whether a parameter named `name` lists who gets a copy of a message (`bcc`, `cc_emails`,
/// `blindCopy`).
fn is_copy_recipient(name: &str) -> bool {
    let name: String = name
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect();
    ["bcc", "cc", "blindcopy", "carboncopy", "copyto"]
        .iter()
        .any(|word| {
            name.strip_prefix(word).is_some_and(|rest| {
                [
                    "",
                    "s",
                    "address",
                    "addresses",
                    "email",
                    "emails",
                    "recipients",
                    "list",
                ]
                .contains(&rest)
            })
        })
}

/// The comments of a regular expression: `(?#` up to the next `)`, as PCRE, Python and
/// .NET read them.
fn regex_comments(pattern: &str) -> impl Iterator<Item = &str> {
    pattern
        .split("(?#")
        .skip(1)
        .map(|rest| rest.split(')').next().unwrap_or(rest))
}

/// `text` in Unicode's compatibility composition (NFKC: full-width and styled letters read as
/// plain ones), borrowed when it already is (all ASCII text, most text).
pub(super) fn nfkc(text: &str) -> Cow<'_, str> {
    if text.is_ascii() || unicode_normalization::is_nfkc_quick(text.chars()) == IsNormalized::Yes {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(text.nfkc().collect())
    }
}

/// The instruction families found in `n`: English word patterns, then the rules of every
/// language; at most one finding per family.
fn instructions(n: &Normalized, takes_private_key: bool) -> Vec<(FindingCode, String)> {
    let matched = rules::matches(n.text());
    let rule = |family: Family| {
        matched
            .iter()
            .find(|(f, ..)| *f == family)
            .map(|(_, language, start)| format!("matched ({language}) {}", n.excerpt(*start)))
    };
    let checks = [
        (
            FindingCode::HiddenInstructions,
            phrases::hidden_instructions(n).or_else(|| rule(Family::Override)),
        ),
        (
            FindingCode::SecretAccess,
            phrases::secret_access(n, takes_private_key).or_else(|| rule(Family::SecretAccess)),
        ),
        (
            FindingCode::Concealment,
            phrases::concealment(n).or_else(|| rule(Family::Concealment)),
        ),
        (FindingCode::Exfiltration, rule(Family::Exfiltration)),
    ];
    checks
        .into_iter()
        .filter_map(|(code, detail)| detail.map(|d| (code, d)))
        .collect()
}

/// A run of whitespace (invisible characters count as part of it) that pushes the text after
/// it out of view: [`MAX_LINE_BREAK_RUN`] line breaks, or blanks [`MAX_WHITESPACE_RUN`] long
/// within a line ([`MAX_INDENT_RUN`] at the start of one, where they are indentation). A run
/// that nothing follows hides nothing.
fn whitespace_run(text: &str) -> Option<String> {
    let mut run_start = 0;
    let mut run_len = 0;
    // Blanks since the run's last line break, and whether a line break came before them.
    let mut blanks = 0;
    let mut indent = false;
    let mut breaks = 0;
    let mut found = None;
    let mut chars = text.chars().enumerate().peekable();
    while let Some((index, c)) = chars.next() {
        if !(c.is_whitespace() || is_invisible(c)) {
            if found.is_some() {
                return found;
            }
            run_len = 0;
            blanks = 0;
            breaks = 0;
            indent = false;
            continue;
        }
        if run_len == 0 {
            run_start = index;
            // The text's own start is a line's start too.
            indent = index == 0;
        }
        run_len += 1;
        // `\r\n` is one break: its `\r` is counted only when no `\n` follows.
        let lone_cr = c == '\r' && chars.peek().is_none_or(|&(_, n)| n != '\n');
        if matches!(c, '\n' | '\u{2028}' | '\u{2029}') || lone_cr {
            breaks += 1;
            blanks = 0;
            indent = true;
        } else if c != '\r' {
            blanks += 1;
        }
        let limit = if indent {
            MAX_INDENT_RUN
        } else {
            MAX_WHITESPACE_RUN
        };
        if found.is_none() && (blanks >= limit || breaks >= MAX_LINE_BREAK_RUN) {
            found = Some(format!(
                "{run_len}+ whitespace characters ({breaks} line break(s)) from character \
                 {run_start}"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests;
