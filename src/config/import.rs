//! Importing the MCP servers people already have configured in their desktop clients (Claude
//! Desktop, Cursor, VS Code, Windsurf) as mcpgate servers: read leniently (each client adds
//! fields of its own), ids normalized, every `env` and header value turned into a `${VAR}`
//! reference (never copied), secret-looking arguments removed, written as TOML.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use serde_json::Value;

/// The clients whose configurations are found in their documented places.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Claude,
    Cursor,
    VsCode,
    Windsurf,
}

impl Client {
    pub const ALL: [Client; 4] = [
        Client::Claude,
        Client::Cursor,
        Client::VsCode,
        Client::Windsurf,
    ];

    pub fn parse(text: &str) -> Option<Client> {
        match text {
            "claude" => Some(Client::Claude),
            "cursor" => Some(Client::Cursor),
            "vscode" => Some(Client::VsCode),
            "windsurf" => Some(Client::Windsurf),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Client::Claude => "claude",
            Client::Cursor => "cursor",
            Client::VsCode => "vscode",
            Client::Windsurf => "windsurf",
        }
    }

    /// Where the client keeps its MCP servers, per its documentation: under `home` (Linux,
    /// macOS, and Windows' `%APPDATA%` as `appdata`) and, for the editors, the project folder
    /// `cwd`.
    pub fn locations(self, home: &Path, appdata: Option<&Path>, cwd: &Path) -> Vec<PathBuf> {
        let mut out = match self {
            Client::Claude => vec![
                home.join(".config/Claude/claude_desktop_config.json"),
                home.join("Library/Application Support/Claude/claude_desktop_config.json"),
            ],
            Client::Cursor => vec![home.join(".cursor/mcp.json"), cwd.join(".cursor/mcp.json")],
            Client::VsCode => vec![
                home.join(".config/Code/User/mcp.json"),
                home.join("Library/Application Support/Code/User/mcp.json"),
                cwd.join(".vscode/mcp.json"),
            ],
            Client::Windsurf => vec![home.join(".codeium/windsurf/mcp_config.json")],
        };
        if let Some(appdata) = appdata {
            match self {
                Client::Claude => out.push(appdata.join("Claude/claude_desktop_config.json")),
                Client::VsCode => out.push(appdata.join("Code/User/mcp.json")),
                _ => {}
            }
        }
        out
    }
}

/// One server as imported: its TOML table, and what the user must still do.
#[derive(Debug, Clone, PartialEq)]
pub struct Imported {
    pub id: String,
    /// Where it was found (the file), for the listing.
    pub source: String,
    /// `stdio`, `streamable-http` or `sse`.
    pub transport: &'static str,
    /// The command, or the URL.
    pub target: String,
    pub table: toml::Table,
    /// Environment variables the gateway reads for this server, each with what to put in it
    /// (never the value itself).
    pub variables: Vec<(String, String)>,
    /// Things the user should know (a field not imported, an argument removed).
    pub notes: Vec<String>,
}

/// Why a file could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{file}: not JSON ({reason})")]
    NotJson { file: String, reason: String },
    #[error("{file}: no `mcpServers` or `servers` object")]
    NoServers { file: String },
}

/// The servers of a client's configuration `text` (JSON; VS Code's comments and trailing
/// commas are tolerated), named after `source`. `taken` holds ids already used (by earlier
/// files), and gains these.
pub fn import(
    text: &str,
    source: &str,
    taken: &mut BTreeSet<String>,
) -> Result<Vec<Imported>, ImportError> {
    let value: Value = serde_json::from_str(text)
        .or_else(|_| serde_json::from_str(&relaxed(text)))
        .map_err(|e| ImportError::NotJson {
            file: source.to_owned(),
            reason: e.to_string(),
        })?;
    let servers = value
        .get("mcpServers")
        .or_else(|| value.get("servers"))
        .or_else(|| value.get("mcp").and_then(|m| m.get("servers")))
        .and_then(Value::as_object)
        .ok_or_else(|| ImportError::NoServers {
            file: source.to_owned(),
        })?;
    let mut out = Vec::new();
    for (key, server) in servers {
        let Some(server) = server.as_object() else {
            continue;
        };
        let id = unique_id(&normalized_id(key), taken);
        out.push(one(&id, key, server, source));
    }
    Ok(out)
}

fn one(id: &str, key: &str, server: &serde_json::Map<String, Value>, source: &str) -> Imported {
    let mut table = toml::Table::new();
    let mut variables = Vec::new();
    let mut notes = Vec::new();
    if id != key {
        notes.push(format!("`{key}` is imported as `{id}`"));
    }
    let text = |field: &str| server.get(field).and_then(Value::as_str).map(str::to_owned);
    let url = text("url").or_else(|| text("serverUrl"));
    let kind = text("type").or_else(|| text("transport"));
    let (transport, target) = if let Some(url) = url {
        let transport = match kind.as_deref() {
            Some("sse") => "sse",
            _ if url.trim_end_matches('/').ends_with("/sse") => "sse",
            _ => "streamable-http",
        };
        table.insert("url".into(), url.clone().into());
        table.insert("transport".into(), transport.into());
        if let Some(headers) = server.get("headers").and_then(Value::as_object) {
            let mut out = toml::Table::new();
            for (name, value) in headers {
                let variable = variable_name(id, name);
                let reference = reference(value.as_str().unwrap_or_default(), &variable);
                if reference.1 {
                    variables.push((
                        variable.clone(),
                        format!("the value of header `{name}` of server `{key}` in {source}"),
                    ));
                }
                out.insert(name.clone(), reference.0.into());
            }
            if !out.is_empty() {
                table.insert("headers".into(), out.into());
            }
        }
        (transport, url)
    } else {
        let command = text("command").unwrap_or_default();
        table.insert("command".into(), command.clone().into());
        let args: Vec<String> = server
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let (args, removed) = without_secrets(&args);
        if !removed.is_empty() {
            let positions: Vec<String> = removed.iter().map(ToString::to_string).collect();
            notes.push(format!(
                "arguments {} looked like a secret and were removed: pass it through `env` \
                 instead",
                positions.join(", ")
            ));
        }
        if !args.is_empty() {
            table.insert(
                "args".into(),
                toml::Value::Array(args.into_iter().map(Into::into).collect()),
            );
        }
        if let Some(cwd) = text("cwd") {
            table.insert("cwd".into(), cwd.into());
        }
        if let Some(env) = server.get("env").and_then(Value::as_object) {
            let mut out = toml::Table::new();
            for (name, value) in env {
                let variable = variable_name(id, name);
                let reference = reference(value.as_str().unwrap_or_default(), &variable);
                if reference.1 {
                    variables.push((
                        variable.clone(),
                        format!("the value of `{name}` for server `{key}` in {source}"),
                    ));
                }
                out.insert(name.clone(), reference.0.into());
            }
            if !out.is_empty() {
                table.insert("env".into(), out.into());
            }
        }
        ("stdio", command)
    };
    if server.get("disabled").and_then(Value::as_bool) == Some(true) {
        table.insert("enabled".into(), false.into());
    }
    for field in server.keys() {
        if !KNOWN_FIELDS.contains(&field.as_str()) {
            notes.push(format!("`{field}` is not imported"));
        }
    }
    Imported {
        id: id.to_owned(),
        source: source.to_owned(),
        transport,
        target,
        table,
        variables,
        notes,
    }
}

/// Fields read above, or meaningless to a gateway (the clients' own approval lists).
const KNOWN_FIELDS: [&str; 10] = [
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "serverUrl",
    "type",
    "transport",
    "headers",
    "disabled",
];

/// `value` as written in the file: a reference it already is (`${VAR}`, VS Code's
/// `${env:VAR}`), kept; anything else replaced by `${variable}`. The flag says whether the
/// user must set `variable`.
fn reference(value: &str, variable: &str) -> (String, bool) {
    let trimmed = value.trim();
    if let Some(name) = trimmed
        .strip_prefix("${env:")
        .or_else(|| trimmed.strip_prefix("${"))
        .and_then(|rest| rest.strip_suffix('}'))
        .filter(|name| {
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        })
    {
        return (format!("${{{name}}}"), false);
    }
    (format!("${{{variable}}}"), true)
}

/// `SERVER_KEY` in upper case, every other character than a letter or digit as `_`.
fn variable_name(id: &str, key: &str) -> String {
    format!("{id}_{key}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Option names whose value is a secret.
const SECRET_WORDS: [&str; 6] = ["token", "key", "secret", "password", "passwd", "auth"];

/// `args` with secret-looking values removed (the value of `--api-key X`, `--token=X`, a long
/// random-looking word); the 1-based positions removed.
fn without_secrets(args: &[String]) -> (Vec<String>, Vec<usize>) {
    let secret_option = |arg: &str| {
        let name = arg.trim_start_matches('-').to_ascii_lowercase();
        arg.starts_with('-') && SECRET_WORDS.iter().any(|w| name.contains(w))
    };
    let mut kept = Vec::with_capacity(args.len());
    let mut removed = Vec::new();
    let mut after_option = false;
    for (i, arg) in args.iter().enumerate() {
        if after_option && !arg.starts_with('-') {
            // The option goes with its value: left alone it would take the next argument.
            kept.pop();
            removed.extend([i, i + 1]);
            after_option = false;
            continue;
        }
        after_option = false;
        if let Some((option, _)) = arg.split_once('=')
            && secret_option(option)
        {
            kept.push(format!("{option}=SECRET-REMOVED"));
            removed.push(i + 1);
            continue;
        }
        if secret_option(arg) {
            after_option = true;
        } else if looks_random(arg) {
            removed.push(i + 1);
            continue;
        }
        kept.push(arg.clone());
    }
    (kept, removed)
}

/// A word like an API key: long, no path or URL, letters and digits mixed.
fn looks_random(arg: &str) -> bool {
    arg.len() >= 24
        && !arg.contains(['/', '.', ' ', ':', '@'])
        && arg.bytes().any(|b| b.is_ascii_digit())
        && arg.bytes().any(|b| b.is_ascii_alphabetic())
        && arg
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A server id from a client's key: lower case, `_`, `.` and spaces as `-`, other characters
/// dropped, starting with a letter, at most 32 characters.
pub fn normalized_id(key: &str) -> String {
    let mut id: String = key
        .chars()
        .filter_map(|c| match c {
            'a'..='z' | '0'..='9' | '-' => Some(c),
            'A'..='Z' => Some(c.to_ascii_lowercase()),
            '_' | '.' | ' ' => Some('-'),
            _ => None,
        })
        .collect();
    while id.contains("--") {
        id = id.replace("--", "-");
    }
    let id = id.trim_matches('-');
    let mut id = if id.starts_with(|c: char| c.is_ascii_lowercase()) {
        id.to_owned()
    } else {
        format!("s-{id}").trim_end_matches('-').to_owned()
    };
    id.truncate(32);
    id.trim_end_matches('-').to_owned()
}

fn unique_id(id: &str, taken: &mut BTreeSet<String>) -> String {
    let mut candidate = id.to_owned();
    let mut n = 2;
    while taken.contains(&candidate) {
        let suffix = format!("-{n}");
        let mut base = id.to_owned();
        base.truncate(32 - suffix.len());
        candidate = format!("{}{suffix}", base.trim_end_matches('-'));
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

/// JSON with comments (`//`, `/* */`) and trailing commas, as VS Code writes it, made JSON.
fn relaxed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for next in chars.by_ref() {
                    if next == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for next in chars.by_ref() {
                    if last == '*' && next == '/' {
                        break;
                    }
                    last = next;
                }
            }
            _ => out.push(c),
        }
    }
    // Trailing commas: a comma whose next non-space character closes.
    let mut cleaned = String::with_capacity(out.len());
    let bytes: Vec<char> = out.chars().collect();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            cleaned.push(c);
            if c == '\\' && i + 1 < bytes.len() {
                cleaned.push(bytes[i + 1]);
                i += 1;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            cleaned.push(c);
        } else if c == ',' {
            let next = bytes[i + 1..].iter().find(|c| !c.is_whitespace());
            if !matches!(next, Some('}' | ']')) {
                cleaned.push(c);
            }
        } else {
            cleaned.push(c);
        }
        i += 1;
    }
    cleaned
}

/// The TOML of `servers`: a comment naming the variables to set, then `[servers.<id>]`
/// tables.
pub fn to_toml(servers: &[Imported]) -> String {
    let mut out =
        String::from("# Imported by `mcpgate import`. Secrets are not copied: set these\n");
    out.push_str("# environment variables before starting the gateway. stdio servers run\n");
    out.push_str("# sandboxed: see [sandbox] in docs/configuration.md (as root, set run_as).\n");
    let variables: BTreeMap<&str, &str> = servers
        .iter()
        .flat_map(|s| {
            s.variables
                .iter()
                .map(|(v, what)| (v.as_str(), what.as_str()))
        })
        .collect();
    if variables.is_empty() {
        out.push_str("#   (none)\n");
    }
    for (variable, what) in &variables {
        out.push_str(&format!("#   {variable}: {what}\n"));
    }
    let mut servers_table = toml::Table::new();
    for server in servers {
        servers_table.insert(server.id.clone(), server.table.clone().into());
    }
    let mut root = toml::Table::new();
    root.insert("servers".into(), servers_table.into());
    out.push('\n');
    out.push_str(&toml::to_string(&root).unwrap_or_default());
    out
}

#[cfg(test)]
#[path = "import_tests.rs"]
mod tests;
