//! The bridge's messages: JSON text frames, each an object with a `type`. What a page sends is
//! untrusted: read into typed messages, validated against the `[webmcp]` bounds, and refused
//! with a typed error (never a panic) otherwise.

use std::{borrow::Cow, collections::HashSet, sync::Arc};

use rmcp::model::{Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::config::WebMcpConfig;

/// The protocol's version, in `hello` and the subprotocol name.
pub const VERSION: u32 = 1;
/// The WebSocket subprotocol the bridge speaks; the page offers it beside its token.
pub const SUBPROTOCOL: &str = "mcpgate.webmcp.v1";
/// Prefix of the subprotocol that carries the page's bearer token (browsers cannot set an
/// `Authorization` header on a WebSocket, and a URL would put the token in logs).
pub const TOKEN_SUBPROTOCOL_PREFIX: &str = "mcpgate.bearer.";

/// The `_meta` key of a page tool whose page said its output holds content from others
/// (`untrustedContentHint`): the chat's model reads that output marked as data.
pub const UNTRUSTED_CONTENT: &str = "io.mcpgate/untrustedContent";

/// Whether `tool`'s page said its output holds content from others.
pub fn untrusted_content(tool: &Tool) -> bool {
    tool.meta
        .as_ref()
        .and_then(|meta| meta.0.get(UNTRUSTED_CONTENT))
        .and_then(Value::as_bool)
        == Some(true)
}

/// Longest tool name, as the WebMCP draft and the bridge allow it.
const MAX_TOOL_NAME: usize = 128;
/// Longest call id a page may answer with (the gateway's are 32 hex digits).
const MAX_CALL_ID: usize = 64;

/// What a page sends.
#[derive(Debug)]
pub enum FromPage {
    Hello,
    /// The page's whole tool list (`tools`, and `tools_changed` after a change).
    Tools(Vec<Tool>),
    Result {
        call_id: String,
        result: Value,
    },
    Ping,
    Pong,
}

/// A message refused, with the typed code the page is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
}

impl Refused {
    fn new(code: &'static str, message: impl Into<String>) -> Refused {
        Refused {
            code,
            message: message.into(),
        }
    }

    /// The `error` frame that tells the page.
    pub fn frame(&self) -> String {
        json!({ "type": "error", "code": self.code, "message": self.message }).to_string()
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Raw {
    Hello {},
    Tools {
        tools: Vec<Value>,
    },
    ToolsChanged {
        tools: Vec<Value>,
    },
    Result {
        #[serde(rename = "callId")]
        call_id: String,
        result: Value,
    },
    Ping {},
    Pong {},
}

/// Reads one text frame.
pub fn read(text: &str, config: &WebMcpConfig) -> Result<FromPage, Refused> {
    if text.len() > config.max_frame_bytes {
        return Err(Refused::new(
            "frame_too_large",
            format!(
                "the message is {} bytes, over the {}-byte limit",
                text.len(),
                config.max_frame_bytes
            ),
        ));
    }
    let value: Value = serde_json::from_str(text)
        .map_err(|e| Refused::new("malformed", format!("not JSON: {e}")))?;
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| Refused::new("malformed", "a message is an object with a `type`"))?
        .to_owned();
    let kind = kind.as_str();
    const KNOWN: &[&str] = &["hello", "tools", "tools_changed", "result", "ping", "pong"];
    if !KNOWN.contains(&kind) {
        return Err(Refused::new(
            "unknown_type",
            format!("unknown message type `{}`", shown(kind)),
        ));
    }
    let raw: Raw = serde_json::from_value(value)
        .map_err(|e| Refused::new("malformed", format!("a `{kind}` message: {e}")))?;
    Ok(match raw {
        Raw::Hello {} => FromPage::Hello,
        Raw::Tools { tools } | Raw::ToolsChanged { tools } => {
            FromPage::Tools(tool_list(tools, config)?)
        }
        Raw::Result { call_id, result } if call_id.len() <= MAX_CALL_ID => {
            FromPage::Result { call_id, result }
        }
        Raw::Result { .. } => return Err(Refused::new("malformed", "the callId is too long")),
        Raw::Ping {} => FromPage::Ping,
        Raw::Pong {} => FromPage::Pong,
    })
}

/// Whether `name` is a page tool's name: 1 to 128 of `A-Z a-z 0-9 _ . -`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A page's tool list, each definition checked; the whole list is refused if one is wrong
/// (a page that meant to register it learns which, instead of half a list silently).
fn tool_list(tools: Vec<Value>, config: &WebMcpConfig) -> Result<Vec<Tool>, Refused> {
    if tools.len() > config.max_tools {
        return Err(Refused::new(
            "too_many_tools",
            format!(
                "{} tools; a page registers at most {}",
                tools.len(),
                config.max_tools
            ),
        ));
    }
    let mut names = HashSet::new();
    let mut out = Vec::with_capacity(tools.len());
    for (i, value) in tools.into_iter().enumerate() {
        let tool = tool(value, config).map_err(|mut refused| {
            refused.message = format!("tools[{i}]: {}", refused.message);
            refused
        })?;
        if !names.insert(tool.name.clone()) {
            return Err(Refused::new(
                "invalid_tool",
                format!("tools[{i}]: `{}` is registered twice", tool.name),
            ));
        }
        out.push(tool);
    }
    Ok(out)
}

fn tool(value: Value, config: &WebMcpConfig) -> Result<Tool, Refused> {
    let invalid = |message: String| Refused::new("invalid_tool", message);
    let Value::Object(mut map) = value else {
        return Err(invalid("a tool is an object".into()));
    };
    let text = |map: &mut Map<String, Value>, field: &str| match map.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!("`{field}` must be a string"))),
    };
    let name = text(&mut map, "name")?.unwrap_or_default();
    if !valid_tool_name(&name) {
        return Err(invalid(format!(
            "`name` must be 1 to {MAX_TOOL_NAME} of A-Z, a-z, 0-9, `_`, `.`, `-` (got `{}`)",
            shown(&name)
        )));
    }
    let description = text(&mut map, "description")?.unwrap_or_default();
    if description.trim().is_empty() {
        return Err(invalid(format!(
            "`{name}`: `description` must not be empty"
        )));
    }
    if description.len() > config.max_schema_bytes {
        return Err(invalid(format!(
            "`{name}`: the description is over {} bytes",
            config.max_schema_bytes
        )));
    }
    let title = text(&mut map, "title")?;
    let schema = match map.remove("inputSchema") {
        None | Some(Value::Null) => {
            let mut empty = Map::new();
            empty.insert("type".into(), "object".into());
            empty
        }
        Some(Value::Object(schema)) => schema,
        Some(_) => {
            return Err(invalid(format!(
                "`{name}`: `inputSchema` must be an object"
            )));
        }
    };
    let size = serde_json::to_vec(&schema)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > config.max_schema_bytes {
        return Err(Refused::new(
            "schema_too_large",
            format!(
                "`{name}`: the input schema is {size} bytes, over the {}-byte limit",
                config.max_schema_bytes
            ),
        ));
    }
    let hints = match map.remove("annotations") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(hints)) => hints,
        Some(_) => {
            return Err(invalid(format!(
                "`{name}`: `annotations` must be an object"
            )));
        }
    };
    let hint = |field: &str| match hints.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(invalid(format!("`{name}`: `{field}` must be a boolean"))),
    };
    let read_only = hint("readOnlyHint")?;
    let untrusted = hint("untrustedContentHint")?;
    let consequential = hint("consequentialHint")?;
    let mut tool = Tool::new(Cow::Owned(name), Cow::Owned(description), Arc::new(schema));
    tool.title = title;
    if read_only.is_some() || consequential == Some(true) {
        let mut annotations = ToolAnnotations::new();
        // A consequential action is a write, whatever else the page claims.
        annotations.read_only_hint = if consequential == Some(true) {
            Some(false)
        } else {
            read_only
        };
        annotations.destructive_hint = consequential.filter(|c| *c);
        tool.annotations = Some(annotations);
    }
    if untrusted == Some(true) {
        let mut meta = Map::new();
        meta.insert(UNTRUSTED_CONTENT.to_owned(), Value::Bool(true));
        tool.meta = Some(rmcp::model::MetaObject(meta));
    }
    Ok(tool)
}

/// The `invoke` frame for a call.
pub fn invoke(call_id: &str, tool: &str, arguments: &Map<String, Value>) -> String {
    json!({ "type": "invoke", "callId": call_id, "tool": tool, "arguments": arguments }).to_string()
}

/// The `cancel` frame for a call the caller gave up on.
pub fn cancel(call_id: &str) -> String {
    json!({ "type": "cancel", "callId": call_id }).to_string()
}

/// An untrusted string quoted in a message: short, and without control characters.
fn shown(text: &str) -> String {
    text.chars()
        .take(64)
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> WebMcpConfig {
        WebMcpConfig {
            max_tools: 3,
            max_schema_bytes: 300,
            max_frame_bytes: 2000,
            ..WebMcpConfig::default()
        }
    }

    fn code(text: &str) -> &'static str {
        read(text, &config()).expect_err(text).code
    }

    #[test]
    fn bad_frames_get_typed_refusals() {
        assert_eq!(code("{not json"), "malformed");
        assert_eq!(code("[1,2]"), "malformed");
        assert_eq!(code(r#"{"type":"explode"}"#), "unknown_type");
        assert_eq!(code(r#"{"type":"result","result":{}}"#), "malformed");
        assert_eq!(
            code(&format!("\"{}\"", "x".repeat(3000))),
            "frame_too_large"
        );
        let tool = |name: &str| json!({"name": name, "description": "d"});
        let many = json!({"type": "tools", "tools": [tool("a"), tool("b"), tool("c"), tool("d")]});
        assert_eq!(code(&many.to_string()), "too_many_tools");
        let twice = json!({"type": "tools", "tools": [tool("a"), tool("a")]});
        assert_eq!(code(&twice.to_string()), "invalid_tool");
        for bad in [
            json!({"name": "", "description": "d"}),
            json!({"name": "a b", "description": "d"}),
            json!({"name": "x".repeat(129), "description": "d"}),
            json!({"name": "a", "description": " "}),
            json!({"name": "a"}),
            json!({"name": "a", "description": "d", "inputSchema": []}),
            json!({"name": "a", "description": "d", "annotations": {"readOnlyHint": "yes"}}),
        ] {
            let frame = json!({"type": "tools_changed", "tools": [bad]}).to_string();
            assert_eq!(code(&frame), "invalid_tool", "{frame}");
        }
        let big = json!({"name": "a", "description": "d",
                         "inputSchema": {"type": "object", "description": "x".repeat(400)}});
        assert_eq!(
            code(&json!({"type": "tools", "tools": [big]}).to_string()),
            "schema_too_large"
        );
    }

    #[test]
    fn tools_keep_the_pages_read_only_claim() {
        let frame = json!({"type": "tools", "tools": [
            {"name": "get_block", "description": "Reads a block", "title": "Get",
             "annotations": {"readOnlyHint": true, "untrustedContentHint": true}},
            {"name": "doc.insert-block", "description": "Inserts",
             "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}},
        ]});
        let FromPage::Tools(tools) = read(&frame.to_string(), &config()).expect("valid") else {
            panic!("not a tool list");
        };
        assert_eq!(tools[0].name, "get_block");
        assert_eq!(tools[0].title.as_deref(), Some("Get"));
        assert_eq!(
            tools[0].annotations.as_ref().and_then(|a| a.read_only_hint),
            Some(true)
        );
        assert!(tools[1].annotations.is_none());
        assert_eq!(tools[1].input_schema["type"], "object");
        assert!(valid_tool_name("a.b-c_D9"));
        assert!(!valid_tool_name("a/b"));
        // The untrusted-content claim is kept for the model; the other tool carries none.
        assert!(untrusted_content(&tools[0]));
        assert!(!untrusted_content(&tools[1]));
    }

    #[test]
    fn a_consequential_action_is_a_write_whatever_else_it_claims() {
        let frame = json!({"type": "tools", "tools": [
            {"name": "transfer", "description": "Moves money",
             "annotations": {"readOnlyHint": true, "consequentialHint": true}},
        ]});
        let FromPage::Tools(tools) = read(&frame.to_string(), &config()).expect("valid") else {
            panic!("not a tool list");
        };
        let annotations = tools[0].annotations.as_ref().expect("annotations");
        assert_eq!(annotations.read_only_hint, Some(false));
        assert_eq!(annotations.destructive_hint, Some(true));
        for bad in ["untrustedContentHint", "consequentialHint", "readOnlyHint"] {
            let frame = json!({"type": "tools", "tools": [
                {"name": "x", "description": "d", "annotations": {bad: "yes"}},
            ]});
            assert_eq!(
                read(&frame.to_string(), &config()).err().map(|r| r.code),
                Some("invalid_tool"),
                "{bad}"
            );
        }
    }
}
