//! Import of `mcpServers` JSON, the format of Claude Desktop, Cursor and VS Code (whose key
//! is `servers`), into server entries.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::{
    raw::{RawServer, RawServerSandbox, RawTransport, UniqueMap},
    validate::{Entry, FieldCase, Report, join},
};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpFile {
    #[serde(rename = "mcpServers")]
    mcp_servers: Option<UniqueMap<Value>>,
    /// VS Code's spelling.
    servers: Option<UniqueMap<Value>>,
    /// VS Code's prompted inputs: accepted only when empty, since nobody is there to prompt.
    inputs: Option<Vec<Value>>,
}

/// One server as those applications write it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct McpServer {
    command: Option<String>,
    args: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    cwd: Option<String>,
    url: Option<String>,
    headers: Option<BTreeMap<String, String>>,
    #[serde(rename = "type")]
    kind: Option<RawTransport>,
    /// Cline and others park a server this way.
    disabled: Option<bool>,
    /// mcpgate's own: the stdio sandbox (camelCase fields), since such a file has no
    /// `[sandbox]` section.
    sandbox: Option<RawServerSandbox>,
}

/// The servers of an `mcpServers` document; `label` names the file in problems.
pub(super) fn entries(text: &str, label: &str, report: &mut Report) -> Vec<Entry> {
    let file: McpFile = match serde_json::from_str(text) {
        Ok(file) => file,
        Err(e) => {
            report.problem(label, e.to_string());
            return Vec::new();
        }
    };
    if file.inputs.is_some_and(|inputs| !inputs.is_empty()) {
        report.problem(
            "inputs",
            "prompted inputs are not supported: reference the gateway's environment as \
             \"${NAME}\" instead",
        );
    }
    let (prefix, servers) = match (file.mcp_servers, file.servers) {
        (Some(servers), None) => ("mcpServers", servers),
        (None, Some(servers)) => ("servers", servers),
        (Some(_), Some(_)) => {
            report.problem(label, "has both `mcpServers` and `servers`: keep one");
            return Vec::new();
        }
        (None, None) => {
            report.problem(label, "has no `mcpServers` object");
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for (key, value) in servers.0 {
        let path = join(prefix, &key);
        if !value.is_object() {
            report.problem(path, "must be an object");
            continue;
        }
        match serde_json::from_value::<McpServer>(value) {
            Ok(server) => out.push(Entry {
                key,
                path,
                normalize: true,
                case: FieldCase::Camel,
                server: server.into_raw(),
            }),
            Err(e) => report.problem(path, e.to_string()),
        }
    }
    out
}

impl McpServer {
    fn into_raw(self) -> RawServer {
        RawServer {
            enabled: self.disabled.map(|disabled| !disabled),
            transport: self.kind,
            command: self.command,
            args: self.args,
            env: self.env,
            cwd: self.cwd,
            url: self.url,
            headers: self.headers,
            sandbox: self.sandbox,
            ..RawServer::default()
        }
    }
}
