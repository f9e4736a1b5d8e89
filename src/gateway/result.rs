//! Result shaping: an MCP tool result becomes a controlled structure with typed, bounded
//! parts; `isError` results become errors; oversize results become a typed error or a result
//! visibly marked truncated, never silently cut JSON passed as success.

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents};
use serde::Serialize;
use serde_json::Value;

use super::GatewayError;
use crate::config::{CallLimits, ResultOverflow};

/// Longest error text taken from an `isError` result: enough to explain, too short to smuggle
/// a whole result through the error path.
const MAX_ERROR_TEXT: usize = 4096;

/// One part of a tool result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    Text {
        text: String,
    },
    Image {
        #[serde(rename = "mimeType")]
        mime_type: String,
        data: String,
    },
    Audio {
        #[serde(rename = "mimeType")]
        mime_type: String,
        data: String,
    },
    /// An embedded resource: text or base64 blob.
    Resource {
        uri: String,
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
    ResourceLink {
        uri: String,
        name: String,
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A binary part left out because it was over `max_binary_bytes` or did not fit the result
    /// budget; says what it was.
    Omitted {
        kind: &'static str,
        #[serde(rename = "mimeType", skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        bytes: usize,
        reason: &'static str,
    },
}

/// A successful tool result.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// Canonical id `server.tool`.
    pub tool: String,
    pub server: String,
    pub content: Vec<Part>,
    pub structured: Option<Value>,
    /// The upstream result's `_meta`, passed on to MCP clients as it came (an MCP App's
    /// view data lives there); not part of the REST shape.
    pub meta: Option<rmcp::model::MetaObject>,
    /// Whether parts were cut or left out to fit `max_result_bytes`.
    pub truncated: bool,
}

impl ToolOutput {
    /// The text parts, joined by newlines.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The controlled structure every API returns: `{ ok, tool, server, data }`.
    pub fn to_json(&self) -> Value {
        serde_json::to_value(self.json_view()).unwrap_or(Value::Null)
    }

    /// [`ToolOutput::to_json`] as a borrowed view, serialized straight into a response
    /// without building a [`Value`] (and copying every part) first.
    pub fn json_view(&self) -> OutputJson<'_> {
        OutputJson {
            ok: true,
            tool: &self.tool,
            server: &self.server,
            data: DataJson {
                content: &self.content,
                truncated: self.truncated,
                structured_content: self.structured.as_ref(),
            },
        }
    }

    /// Bytes of the shaped data as serialized.
    pub fn size(&self) -> usize {
        data_size(&self.content, self.structured.as_ref())
    }
}

/// `{ ok, tool, server, data }` of a [`ToolOutput`], borrowed (see [`ToolOutput::json_view`]).
#[derive(Debug, Serialize)]
pub struct OutputJson<'a> {
    ok: bool,
    tool: &'a str,
    server: &'a str,
    data: DataJson<'a>,
}

#[derive(Debug, Serialize)]
struct DataJson<'a> {
    content: &'a [Part],
    truncated: bool,
    #[serde(rename = "structuredContent", skip_serializing_if = "Option::is_none")]
    structured_content: Option<&'a Value>,
}

/// Shapes an upstream result under the result limits; returns it with its
/// [`ToolOutput::size`] (measured once: a large result is not serialized again to learn it).
///
/// A result over the limit of a tool that declares an output schema is never cut, whatever
/// `result_overflow` says: cutting drops its structured content, and a client holding the
/// schema would take the rest for an invalid result. It is `result_too_large` instead.
pub fn shape_sized(
    tool: &str,
    server: &str,
    result: CallToolResult,
    max_result_bytes: usize,
    limits: &CallLimits,
    has_output_schema: bool,
) -> Result<(ToolOutput, usize), GatewayError> {
    if result.is_error == Some(true) {
        let message = text_of(&result.content);
        return Err(GatewayError::ToolError {
            message: cut(&message, MAX_ERROR_TEXT).0,
        });
    }
    let content: Vec<Part> = result
        .content
        .into_iter()
        .map(|block| part(block, limits.max_binary_bytes))
        .collect();
    let mut output = ToolOutput {
        tool: tool.to_owned(),
        server: server.to_owned(),
        content,
        structured: result.structured_content,
        meta: result.meta,
        truncated: false,
    };
    let size = output.size();
    if size <= max_result_bytes {
        return Ok((output, size));
    }
    match limits.result_overflow {
        _ if has_output_schema => Err(GatewayError::ResultTooLarge {
            size,
            limit: max_result_bytes,
        }),
        ResultOverflow::Error => Err(GatewayError::ResultTooLarge {
            size,
            limit: max_result_bytes,
        }),
        ResultOverflow::Truncate => {
            truncate(&mut output, max_result_bytes);
            let size = output.size();
            Ok((output, size))
        }
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

fn part(block: ContentBlock, max_binary: usize) -> Part {
    let omitted = |kind, mime_type, bytes| Part::Omitted {
        kind,
        mime_type,
        bytes,
        reason: "over max_binary_bytes",
    };
    match block {
        ContentBlock::Text(t) => Part::Text { text: t.text },
        ContentBlock::Image(i) if i.data.len() > max_binary => {
            omitted("image", Some(i.mime_type), i.data.len())
        }
        ContentBlock::Image(i) => Part::Image {
            mime_type: i.mime_type,
            data: i.data,
        },
        ContentBlock::Audio(a) if a.data.len() > max_binary => {
            omitted("audio", Some(a.mime_type), a.data.len())
        }
        ContentBlock::Audio(a) => Part::Audio {
            mime_type: a.mime_type,
            data: a.data,
        },
        ContentBlock::Resource(r) => match r.resource {
            ResourceContents::TextResourceContents {
                uri,
                mime_type,
                text,
                ..
            } => Part::Resource {
                uri,
                mime_type,
                text: Some(text),
                blob: None,
            },
            ResourceContents::BlobResourceContents {
                mime_type, blob, ..
            } if blob.len() > max_binary => omitted("resource", mime_type, blob.len()),
            ResourceContents::BlobResourceContents {
                uri,
                mime_type,
                blob,
                ..
            } => Part::Resource {
                uri,
                mime_type,
                text: None,
                blob: Some(blob),
            },
            _ => unsupported("resource"),
        },
        ContentBlock::ResourceLink(link) => Part::ResourceLink {
            uri: link.uri,
            name: link.name,
            mime_type: link.mime_type,
        },
        _ => unsupported("content"),
    }
}

/// A content kind newer than this gateway: said, not passed on unchecked.
fn unsupported(kind: &'static str) -> Part {
    Part::Omitted {
        kind,
        mime_type: None,
        bytes: 0,
        reason: "unsupported content type",
    }
}

fn data_size(content: &[Part], structured: Option<&Value>) -> usize {
    json_len(content).saturating_add(structured.map_or(0, json_len))
}

/// Bytes of `value` as JSON, counted without building the text.
fn json_len<T: Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = ByteCounter(0);
    serde_json::to_writer(&mut counter, value).map_or(usize::MAX, |()| counter.0)
}

/// A writer that only counts.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 = self.0.saturating_add(buf.len());
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Cuts the output to fit `limit` bytes: structured content goes first (it cannot be cut
/// without breaking it), then binary parts that do not fit are omitted and text is cut at a
/// character boundary. Marks the output truncated.
fn truncate(output: &mut ToolOutput, limit: usize) {
    output.truncated = true;
    output.structured = None;
    // JSON escaping can grow text; budget on the serialized size of each part.
    let mut budget = limit;
    let mut kept = Vec::with_capacity(output.content.len());
    for part in output.content.drain(..) {
        let size = json_len(&part);
        if size <= budget {
            budget -= size;
            kept.push(part);
            continue;
        }
        match part {
            Part::Text { text } if budget > 64 => {
                // Leave room for the JSON wrapping and escapes: cut by half of what is left,
                // then check again.
                let mut cut_to = budget / 2;
                loop {
                    let candidate = Part::Text {
                        text: cut(&text, cut_to).0,
                    };
                    let size = json_len(&candidate);
                    if size <= budget || cut_to == 0 {
                        budget = budget.saturating_sub(size);
                        kept.push(candidate);
                        break;
                    }
                    cut_to /= 2;
                }
            }
            Part::Image { mime_type, data } => kept.push(Part::Omitted {
                kind: "image",
                mime_type: Some(mime_type),
                bytes: data.len(),
                reason: "over max_result_bytes",
            }),
            Part::Audio { mime_type, data } => kept.push(Part::Omitted {
                kind: "audio",
                mime_type: Some(mime_type),
                bytes: data.len(),
                reason: "over max_result_bytes",
            }),
            Part::Resource {
                mime_type,
                text,
                blob,
                ..
            } => kept.push(Part::Omitted {
                kind: "resource",
                mime_type,
                bytes: text.map_or(0, |t| t.len()) + blob.map_or(0, |b| b.len()),
                reason: "over max_result_bytes",
            }),
            _ => {}
        }
    }
    output.content = kept;
}

/// The longest prefix of `text` of at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (text[..end].to_owned(), true)
}

#[cfg(test)]
mod tests {
    use rmcp::model::ContentBlock;
    use serde_json::json;

    use super::*;

    fn shape(
        tool: &str,
        server: &str,
        result: CallToolResult,
        max_result_bytes: usize,
        limits: &CallLimits,
    ) -> Result<ToolOutput, GatewayError> {
        let shaped = shape_sized(tool, server, result, max_result_bytes, limits, false);
        if let Ok((output, size)) = &shaped {
            assert_eq!(*size, output.size(), "the size returned is the output's");
        }
        shaped.map(|(output, _)| output)
    }

    #[test]
    fn the_output_json_is_the_documented_shape() {
        for structured in [None, Some(json!({ "k": [1, "two"] }))] {
            let output = ToolOutput {
                tool: "s.t".to_owned(),
                server: "s".to_owned(),
                content: vec![
                    Part::Text {
                        text: "a \"quoted\"\nline".to_owned(),
                    },
                    unsupported("content"),
                ],
                structured,
                meta: None,
                truncated: true,
            };
            let mut data = json!({
                "content": [
                    { "type": "text", "text": "a \"quoted\"\nline" },
                    serde_json::to_value(&output.content[1]).expect("a part serializes"),
                ],
                "truncated": true,
            });
            if let Some(structured) = &output.structured {
                data["structuredContent"] = structured.clone();
            }
            let expected = json!({ "ok": true, "tool": "s.t", "server": "s", "data": data });
            assert_eq!(output.to_json(), expected);
            // Key order matters to readers of the raw text: `structuredContent` only when set.
            let text = serde_json::to_string(&output.json_view()).expect("serializes");
            assert_eq!(text, expected.to_string());
        }
    }

    fn result(content: Vec<ContentBlock>) -> CallToolResult {
        CallToolResult::success(content)
    }

    fn limits(overflow: ResultOverflow) -> CallLimits {
        CallLimits {
            result_overflow: overflow,
            max_binary_bytes: 100,
            ..CallLimits::default()
        }
    }

    #[test]
    fn shapes_parts_and_keeps_structure() {
        let mut r = result(vec![
            ContentBlock::text("hello"),
            ContentBlock::image("aGk=", "image/png"),
        ]);
        r.structured_content = Some(json!({ "n": 1 }));
        let out = shape("s.t", "s", r, 10_000, &limits(ResultOverflow::Error)).expect("ok");
        assert_eq!(out.text(), "hello");
        let json = out.to_json();
        assert_eq!(json["ok"], true);
        assert_eq!(json["tool"], "s.t");
        assert_eq!(json["data"]["content"][1]["type"], "image");
        assert_eq!(json["data"]["structuredContent"]["n"], 1);
        assert_eq!(json["data"]["truncated"], false);
    }

    #[test]
    fn is_error_becomes_a_tool_error() {
        let r = CallToolResult::error(vec![ContentBlock::text("boom")]);
        let err = shape("s.t", "s", r, 10_000, &limits(ResultOverflow::Error)).expect_err("error");
        assert_eq!(err.code(), "tool_error");
        assert!(err.to_string().contains("boom"));
    }

    #[test]
    fn big_binary_parts_are_omitted_and_typed() {
        let big = "A".repeat(200);
        let r = result(vec![
            ContentBlock::image(big.clone(), "image/png"),
            ContentBlock::audio(big, "audio/wav"),
        ]);
        let out = shape("s.t", "s", r, 10_000, &limits(ResultOverflow::Error)).expect("ok");
        assert!(matches!(
            &out.content[0],
            Part::Omitted {
                kind: "image",
                bytes: 200,
                ..
            }
        ));
        assert!(matches!(
            &out.content[1],
            Part::Omitted { kind: "audio", .. }
        ));
    }

    #[test]
    fn oversize_is_an_error_or_marked_truncated() {
        let text = "é".repeat(1000);
        let r = || result(vec![ContentBlock::text(text.clone())]);
        let err = shape("s.t", "s", r(), 500, &limits(ResultOverflow::Error)).expect_err("too big");
        assert_eq!(err.code(), "result_too_large");
        let out = shape("s.t", "s", r(), 500, &limits(ResultOverflow::Truncate)).expect("cut");
        assert!(out.truncated);
        assert!(out.size() <= 500, "{}", out.size());
        assert!(!out.text().is_empty());
        assert!(text.starts_with(&out.text()));
        assert_eq!(out.to_json()["data"]["truncated"], true);
    }

    #[test]
    fn a_tool_with_an_output_schema_is_refused_rather_than_cut() {
        let mut big = result(vec![ContentBlock::text("x".repeat(1000))]);
        big.structured_content = Some(json!({ "text": "x".repeat(1000) }));
        let truncate = limits(ResultOverflow::Truncate);
        let err = shape_sized("s.t", "s", big.clone(), 500, &truncate, true)
            .expect_err("not cut: its structured content would go");
        assert_eq!(err.code(), "result_too_large");
        let (cut, _) = shape_sized("s.t", "s", big, 500, &truncate, false).expect("cut");
        assert!(cut.truncated && cut.structured.is_none(), "{cut:?}");
        // Within the limit, its structured content and `_meta` come through as they came.
        let mut small = result(vec![ContentBlock::text("ok")]);
        small.structured_content = Some(json!({ "n": 1 }));
        small.meta = serde_json::from_value(json!({ "app": { "state": 2 } })).ok();
        let (out, _) = shape_sized("s.t", "s", small.clone(), 500, &truncate, true).expect("fits");
        assert_eq!(out.structured, small.structured_content);
        assert_eq!(out.meta, small.meta);
        assert!(
            out.to_json().get("_meta").is_none(),
            "not part of the REST shape"
        );
    }
}
