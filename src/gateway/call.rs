//! The call path: resolve the name, check the arguments, call the upstream with its deadline,
//! shape the result.

use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use serde_json::Value;

use super::{Gateway, GatewayError};
use crate::{
    catalog::CatalogTool,
    config::{Config, ServerConfig},
    upstream::UpstreamError,
};

/// A successful tool result.
#[derive(Debug, Clone)]
pub struct ToolOutput {
    /// Canonical id `server.tool`.
    pub tool: String,
    pub server: String,
    pub result: CallToolResult,
}

impl ToolOutput {
    /// The text parts of the result, joined by newlines.
    pub fn text(&self) -> String {
        text_of(&self.result.content)
    }
}

fn text_of(content: &[ContentBlock]) -> String {
    content
        .iter()
        .filter_map(|c| match c {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

impl Gateway {
    /// Calls a tool by canonical id (`server.tool`) or function name (`server_tool`).
    pub async fn call_tool(
        &self,
        name: &str,
        arguments: Value,
    ) -> Result<ToolOutput, GatewayError> {
        let catalog = self.catalog();
        let tool = catalog
            .by_canonical(name)
            .or_else(|| catalog.by_function_name(name))
            .ok_or_else(|| GatewayError::NotFound {
                name: name.to_owned(),
            })?;
        let arguments = match arguments {
            Value::Object(map) => map,
            Value::Null => serde_json::Map::new(),
            other => {
                return Err(GatewayError::InvalidArguments {
                    reason: format!("arguments must be a JSON object, not {}", kind(&other)),
                });
            }
        };
        let config = self.config();
        let server = config
            .server(&tool.server)
            .ok_or_else(|| GatewayError::NotFound {
                name: name.to_owned(),
            })?;
        let timeout = call_timeout(config, server, tool);
        let params =
            CallToolRequestParams::new(tool.upstream.name.clone()).with_arguments(arguments);
        let result = self
            .inner
            .manager
            .call_tool(&tool.server, params, timeout)
            .await
            .map_err(|source| match source {
                UpstreamError::Timeout { after } => GatewayError::Timeout { after },
                source => GatewayError::Upstream {
                    server: tool.server.to_string(),
                    source,
                },
            })?;
        shape(config, tool, result)
    }
}

fn call_timeout(config: &Config, server: &ServerConfig, tool: &CatalogTool) -> Duration {
    server
        .tool_timeouts
        .iter()
        .find(|(name, _)| name == tool.upstream.name.as_ref())
        .map(|(_, t)| *t)
        .or(server.call_timeout)
        .unwrap_or(config.limits.call_timeout)
}

fn shape(
    config: &Config,
    tool: &CatalogTool,
    result: CallToolResult,
) -> Result<ToolOutput, GatewayError> {
    let size = serde_json::to_vec(&result)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    let limit = config.limits.max_result_bytes;
    if size > limit {
        return Err(GatewayError::ResultTooLarge { size, limit });
    }
    if result.is_error == Some(true) {
        return Err(GatewayError::ToolError {
            message: text_of(&result.content),
        });
    }
    Ok(ToolOutput {
        tool: tool.canonical.clone(),
        server: tool.server.to_string(),
        result,
    })
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
