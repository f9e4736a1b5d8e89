//! The protocol extensions the gateway declares to every upstream: MCP Apps views
//! (`io.modelcontextprotocol/ui`), which its page renders and its endpoint passes through.

use rmcp::model::ExtensionCapabilities;
use serde_json::{Map, json};

/// The MCP Apps extension's id in `capabilities.extensions`.
pub const APPS_EXTENSION: &str = "io.modelcontextprotocol/ui";

/// The MIME type of an app's HTML view.
pub const APP_MIME: &str = "text/html;profile=mcp-app";

/// What the gateway declares to upstreams, on every connection and every request: it renders
/// MCP Apps views (its page is a host) and passes them through to its clients intact.
/// Declared always, not only for clients that declared it: a connection is shared by all
/// callers, and a client that renders no views ignores `_meta` as the extension requires.
pub fn declared() -> ExtensionCapabilities {
    let mut extensions = ExtensionCapabilities::new();
    let mut apps = Map::new();
    apps.insert("mimeTypes".to_owned(), json!([APP_MIME]));
    extensions.insert(APPS_EXTENSION.to_owned(), apps);
    extensions
}
