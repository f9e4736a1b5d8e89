//! Gateway types into MCP types: a catalog tool as the endpoint lists it, a shaped result as
//! a `CallToolResult`, a gateway error as a tool error the model can read.

use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock, Resource, ResourceContents, Tool};

use crate::{
    catalog::CatalogTool,
    gateway::{GatewayError, Part, ToolOutput, apps},
};

/// Said after the parts when the gateway cut the result to fit `max_result_bytes`.
const TRUNCATED_NOTE: &str = "[mcpgate: the result was truncated to fit the size limit]";

/// A catalog tool as the merged view lists it: the function name, the repaired input schema,
/// and the upstream's title, description, annotations, output schema, icons and `_meta`
/// (where an MCP App names its view, rewritten to the merged view's `ui://<server>/...`,
/// see [`crate::gateway::apps`]). A result the gateway would have to cut to fit the limits is
/// refused rather than cut when the tool has an output schema (see
/// [`crate::gateway::shape_sized`]), so a client holding the schema never receives a result
/// that breaks it.
pub fn tool(catalog_tool: &CatalogTool) -> Tool {
    let upstream = &catalog_tool.upstream;
    let mut tool = Tool::new_with_raw(
        catalog_tool.function_name.clone(),
        upstream.description.clone(),
        catalog_tool.input_schema.clone(),
    );
    tool.title = upstream.title.clone();
    tool.annotations = upstream.annotations.clone();
    tool.output_schema = upstream.output_schema.clone();
    tool.icons = upstream.icons.clone();
    tool.meta = upstream
        .meta
        .as_ref()
        .map(|meta| apps::merged_meta(&catalog_tool.server, meta));
    tool
}

/// A successful call.
pub fn success(output: ToolOutput) -> CallToolResult {
    let mut content: Vec<ContentBlock> = output.content.into_iter().map(block).collect();
    if output.truncated {
        content.push(ContentBlock::text(TRUNCATED_NOTE));
    }
    let mut result = CallToolResult::success(content);
    result.structured_content = output.structured;
    result.meta = output.meta;
    result
}

/// A tool error (`isError: true`) whose text says what happened: `[code] message`.
pub fn failure(err: &GatewayError) -> CallToolResult {
    let mut text = format!("[{}] {err}", err.code());
    if let GatewayError::LimitExceeded {
        retry_after: Some(after),
        ..
    } = err
    {
        text.push_str(&format!(" (retry in {} s)", whole_seconds(*after)));
    }
    error_text(text)
}

/// A tool error with the given text.
pub fn error_text(text: impl Into<String>) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

/// Rounded up: a client retrying at the floor would be refused again.
fn whole_seconds(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

fn block(part: Part) -> ContentBlock {
    match part {
        Part::Text { text } => ContentBlock::text(text),
        Part::Image { mime_type, data } => ContentBlock::image(data, mime_type),
        Part::Audio { mime_type, data } => ContentBlock::audio(data, mime_type),
        Part::Resource {
            uri,
            mime_type,
            text,
            blob,
        } => {
            let contents = match blob {
                Some(blob) => ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    meta: None,
                },
                None => ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text: text.unwrap_or_default(),
                    meta: None,
                },
            };
            ContentBlock::resource(contents)
        }
        Part::ResourceLink {
            uri,
            name,
            mime_type,
        } => {
            let mut link = Resource::new(uri, name);
            link.mime_type = mime_type;
            ContentBlock::resource_link(link)
        }
        Part::Omitted {
            kind,
            mime_type,
            bytes,
            reason,
        } => {
            let mime = mime_type.map(|m| format!(" ({m})")).unwrap_or_default();
            ContentBlock::text(format!(
                "[mcpgate: {kind}{mime} of {bytes} bytes left out: {reason}]"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parts_map_to_content_blocks() {
        let output = ToolOutput {
            tool: "demo.x".into(),
            server: "demo".into(),
            content: vec![
                Part::Text { text: "hi".into() },
                Part::Image {
                    mime_type: "image/png".into(),
                    data: "AAAA".into(),
                },
                Part::Resource {
                    uri: "file:///a".into(),
                    mime_type: None,
                    text: Some("body".into()),
                    blob: None,
                },
                Part::ResourceLink {
                    uri: "file:///b".into(),
                    name: "b".into(),
                    mime_type: Some("text/plain".into()),
                },
                Part::Omitted {
                    kind: "audio",
                    mime_type: Some("audio/wav".into()),
                    bytes: 9,
                    reason: "over max_binary_bytes",
                },
            ],
            structured: Some(json!({ "sum": 3 })),
            meta: serde_json::from_value(json!({ "ui": { "view": "chart" } })).ok(),
            truncated: true,
        };
        let result = success(output);
        assert_eq!(result.is_error, Some(false));
        assert_eq!(result.structured_content, Some(json!({ "sum": 3 })));
        let meta = serde_json::to_value(&result.meta).expect("serializes");
        assert_eq!(
            meta,
            json!({ "ui": { "view": "chart" } }),
            "result _meta as it came"
        );
        let wire = serde_json::to_value(&result.content).expect("serializes");
        assert_eq!(wire[0], json!({ "type": "text", "text": "hi" }));
        assert_eq!(wire[1]["type"], "image");
        assert_eq!(wire[2]["resource"]["text"], "body");
        assert_eq!(wire[3]["type"], "resource_link");
        assert_eq!(wire[3]["mimeType"], "text/plain");
        assert_eq!(
            wire[4]["text"],
            "[mcpgate: audio (audio/wav) of 9 bytes left out: over max_binary_bytes]"
        );
        assert_eq!(wire[5]["text"], TRUNCATED_NOTE);
    }

    #[test]
    fn errors_carry_their_code_and_retry_hint() {
        let limit = failure(&GatewayError::LimitExceeded {
            limit: "user rate".into(),
            retry_after: Some(Duration::from_millis(1500)),
        });
        assert_eq!(limit.is_error, Some(true));
        let text = &limit.content[0].as_text().expect("text").text;
        assert_eq!(
            text,
            "[limit_exceeded] limit exceeded: user rate (retry in 2 s)"
        );
    }
}
