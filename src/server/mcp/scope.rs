//! The per-server view `/mcp/{server}`: one server's tools under their upstream names, and
//! those names mapped back to canonical ids through the catalog (never parsed), so every call
//! still goes through the gate as `server.tool`.

use rmcp::{ErrorData, model::Tool};

use super::convert;
use crate::{catalog::CatalogTool, config::ServerId, gateway::Gateway, policy::CallContext};

/// Longest tool name quoted back in an error.
const MAX_SHOWN_NAME_CHARS: usize = 64;

/// Said after what the endpoint serves: the same on every view.
const GATED: &str = "Requests are checked by the gateway's policy; write tools need the \
                     user's confirmation.";

/// The `instructions` of `initialize`: what this view serves and how it names things.
pub fn instructions(scope: Option<&ServerId>) -> String {
    match scope {
        None => format!(
            "Tools and prompts of the MCP servers behind this mcpgate gateway, named \
             `server_tool` and `server_prompt`, and their resources under their own URIs \
             (MCP Apps views, `ui://`, under `ui://server/`). {GATED}"
        ),
        Some(server) => format!(
            "Tools, prompts and resources of the MCP server `{server}` behind this mcpgate \
             gateway, under their own names. {GATED}"
        ),
    }
}

/// The tools an endpoint offers from `tools` (the caller's usable ones): all of them under
/// their function names, or with a `scope`, that server's only, under their upstream names
/// with their `_meta` as the upstream wrote it (views under the upstream's own URIs).
pub fn tools(scope: Option<&ServerId>, tools: &[CatalogTool]) -> Vec<Tool> {
    match scope {
        None => tools.iter().map(convert::tool).collect(),
        Some(server) => tools
            .iter()
            .filter(|t| &t.server == server)
            .map(|t| {
                let mut tool = convert::tool(t);
                tool.name = t.upstream.name.clone();
                tool.meta = t.upstream.meta.clone();
                tool
            })
            .collect(),
    }
}

/// The name to hand to [`Gateway::call_tool`] for `name` as `ctx` called it: unchanged
/// without a scope; in one, the canonical id of the scoped server's tool of that upstream
/// name, among the tools `ctx` may see. Any other name is an unknown tool, never looked up
/// elsewhere, and a hidden tool is refused exactly like a missing one.
pub async fn gateway_name(
    scope: Option<&ServerId>,
    gateway: &Gateway,
    ctx: &CallContext,
    name: &str,
) -> Result<String, ErrorData> {
    let Some(server) = scope else {
        return Ok(name.to_owned());
    };
    gateway
        .list_tools(ctx)
        .await
        .into_iter()
        .find(|t| &t.server == server && t.upstream.name == name)
        .map(|t| t.canonical)
        .ok_or_else(|| {
            let cut: String = name.chars().take(MAX_SHOWN_NAME_CHARS).collect();
            ErrorData::invalid_params(format!("unknown tool {cut:?}"), None)
        })
}
