//! How a catalog tool is shown by the APIs and the CLI: one JSON shape everywhere.

use serde_json::{Value, json};

use super::Gateway;
use crate::catalog::{CatalogTool, ToolStatus};

impl Gateway {
    /// `name`, `functionName`, `title`, `description`, `inputSchema`, `server`,
    /// `requiresConfirmation`, `fingerprint`, `status`, `statusReason`, `overridden`, `findings`.
    pub fn tool_json(&self, tool: &CatalogTool) -> Value {
        json!({
            "name": tool.canonical,
            "functionName": tool.function_name,
            "title": tool.upstream.title,
            "description": tool.upstream.description,
            "inputSchema": &*tool.input_schema,
            "source": if crate::webmcp::is_page(&tool.server) { "webmcp" } else { "mcp" },
            "server": tool.server.as_str(),
            "requiresConfirmation": self.requires_confirmation(tool),
            "fingerprint": tool.fingerprint.as_str(),
            "status": tool.status.as_str(),
            "statusReason": match &tool.status {
                ToolStatus::Quarantined { reason } => Some(reason.as_str()),
                _ => None,
            },
            // What the upstream itself says, when the operator's override replaced it.
            "overridden": tool.received.as_ref().map(|own| json!({
                "title": own.title,
                "description": own.description,
            })),
            "findings": tool.findings.iter().map(|f| json!({
                "code": f.code.as_str(),
                "severity": f.severity.as_str(),
                "location": f.location,
                "detail": f.detail,
            })).collect::<Vec<_>>(),
        })
    }
}
