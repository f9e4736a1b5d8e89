//! The newline-delimited JSON-RPC transport to a stdio (or in-process) upstream. Sending is
//! rmcp's own; receiving reads lines here so that the message a gateway receives most, a
//! tool call's result, is decoded straight into its type. rmcp decodes every server result
//! through an untagged enum of twenty kinds, trying each in turn (a tool call's result comes
//! sixteenth) and building an error for every miss: about 45k instructions per call, a sixth
//! of the gateway's whole cost of a call. Everything else, and any result that is not plainly
//! a tool call's, is decoded as rmcp decodes it, with rmcp's rules for what is skipped.

use rmcp::{
    RoleClient,
    model::{
        CallToolResult, ErrorData, JsonRpcMessage, JsonRpcResponse, JsonRpcVersion2_0, RequestId,
        ServerResult,
    },
    service::{RxJsonRpcMessage, TxJsonRpcMessage},
    transport::{Transport, async_rw::AsyncRwTransport},
};
use serde::{Deserialize, de::IgnoredAny};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};

/// Reads lines of at most `max_line` bytes (longer ones are dropped, as rmcp drops them) and
/// writes through rmcp's transport.
pub(super) struct LineTransport<R, W: AsyncWrite> {
    read: BufReader<R>,
    /// The line being read; kept across cancelled reads (`receive` is polled in a `select!`).
    line: Vec<u8>,
    max_line: usize,
    /// Dropping the rest of a line that was too long.
    discarding: bool,
    write: AsyncRwTransport<RoleClient, tokio::io::Empty, W>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub(super) fn new(read: R, write: W, max_line: usize) -> LineTransport<R, W> {
        LineTransport {
            read: BufReader::new(read),
            line: Vec::new(),
            max_line,
            discarding: false,
            write: AsyncRwTransport::new_client(tokio::io::empty(), write),
        }
    }

    /// Reads until a whole line is in `self.line`. Cancel-safe: bytes are moved from the
    /// reader's buffer into `self.line` with no await in between.
    async fn read_line(&mut self) -> Line {
        loop {
            let (used, step) = {
                let available = match self.read.fill_buf().await {
                    Ok(available) => available,
                    Err(err) => return Line::Failed(err),
                };
                if available.is_empty() {
                    return Line::End;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |at| at + 1);
                if self.discarding {
                    (
                        take,
                        if newline.is_some() {
                            Step::Resume
                        } else {
                            Step::More
                        },
                    )
                } else if self.line.len().saturating_add(take) > self.max_line {
                    self.line.clear();
                    self.discarding = newline.is_none();
                    (take, Step::TooLong)
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (
                        take,
                        if newline.is_some() {
                            Step::Done
                        } else {
                            Step::More
                        },
                    )
                }
            };
            self.read.consume(used);
            match step {
                Step::Done => return Line::Read,
                Step::TooLong => return Line::TooLong,
                Step::Resume => self.discarding = false,
                Step::More => {}
            }
        }
    }
}

enum Line {
    Read,
    TooLong,
    End,
    Failed(std::io::Error),
}

enum Step {
    Done,
    More,
    Resume,
    TooLong,
}

impl<R, W> Transport<RoleClient> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.write.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            match self.read_line().await {
                Line::Read => {}
                Line::TooLong => {
                    tracing::error!(
                        max_line_bytes = self.max_line,
                        "an upstream message exceeded the line length limit; dropped"
                    );
                    continue;
                }
                Line::End => return None,
                Line::Failed(err) => {
                    tracing::error!(error = %err, "reading from the upstream failed");
                    return None;
                }
            }
            let decoded = decode(trim(&self.line));
            self.line.clear();
            match decoded {
                Decoded::Message(message) => return Some(message),
                Decoded::Skip => {}
                Decoded::Invalid => {
                    // Well-formed JSON that is no JSON-RPC message: answered as rmcp answers
                    // it. The send is a task of its own, so that a cancelled receive cannot
                    // cut the answer short.
                    let answer = TxJsonRpcMessage::<RoleClient>::error(
                        ErrorData::invalid_request("Invalid request", None),
                        None,
                    );
                    tokio::spawn(self.write.send(answer));
                }
            }
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.write.close()
    }
}

/// The line without its newline, carriage return or UTF-8 byte order mark.
fn trim(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

#[derive(Debug)]
#[expect(
    clippy::large_enum_variant,
    reason = "made and taken apart at once; boxing would add an allocation per message"
)]
enum Decoded {
    Message(RxJsonRpcMessage<RoleClient>),
    /// Empty, not JSON, or a notification rmcp ignores.
    Skip,
    /// JSON that is not a message.
    Invalid,
}

fn decode(line: &[u8]) -> Decoded {
    if line.is_empty() {
        return Decoded::Skip;
    }
    if let Some(message) = call_result(line) {
        return Decoded::Message(message);
    }
    match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
        Ok(message) => Decoded::Message(message),
        Err(err) => match err.classify() {
            // Not JSON: nothing to correlate an answer with, and answering garbage can start
            // an error storm.
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                tracing::debug!(error = %err, "ignoring an unparsable upstream message");
                Decoded::Skip
            }
            serde_json::error::Category::Data | serde_json::error::Category::Io => {
                if ignored_notification(line) {
                    Decoded::Skip
                } else {
                    tracing::debug!(error = %err, "an upstream message is no JSON-RPC message");
                    Decoded::Invalid
                }
            }
        },
    }
}

/// A response whose result has a tool call result's fields and no others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Response<'a> {
    #[expect(dead_code, reason = "checked by deserializing: must be \"2.0\"")]
    jsonrpc: JsonRpcVersion2_0,
    id: RequestId,
    #[serde(borrow)]
    result: &'a RawValue,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CallResultFields<'a> {
    #[expect(dead_code, reason = "present: required of the fast path")]
    content: IgnoredAny,
    #[serde(default, rename = "structuredContent")]
    _structured_content: Option<IgnoredAny>,
    #[serde(default, rename = "isError")]
    _is_error: Option<IgnoredAny>,
    #[serde(default, rename = "_meta")]
    _meta: Option<IgnoredAny>,
    #[serde(default, borrow)]
    result_type: Option<&'a str>,
}

/// `line` decoded as a tool call's result, if it plainly is one: a response whose result has
/// `content`, only the fields of a tool call's result, and no `resultType` but `complete`.
/// rmcp's untagged decoding gives such a result the same type; anything else is left to it.
fn call_result(line: &[u8]) -> Option<RxJsonRpcMessage<RoleClient>> {
    let response: Response<'_> = serde_json::from_slice(line).ok()?;
    let fields: CallResultFields<'_> = serde_json::from_str(response.result.get()).ok()?;
    if fields.result_type.is_some_and(|kind| kind != "complete") {
        return None;
    }
    let result: CallToolResult = serde_json::from_str(response.result.get()).ok()?;
    Some(JsonRpcMessage::Response(JsonRpcResponse {
        jsonrpc: JsonRpcVersion2_0,
        id: response.id,
        result: ServerResult::CallToolResult(result),
    }))
}

/// Notifications rmcp skips rather than answers when they do not decode: any with a method
/// outside MCP's, and non-standard `notifications/...`.
fn ignored_notification(line: &[u8]) -> bool {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else {
        return false;
    };
    let Some(method) = value.get("method").and_then(serde_json::Value::as_str) else {
        return false;
    };
    (value.get("id").is_none() && !standard_method(method))
        || (method.starts_with("notifications/") && !standard_notification(method))
}

fn standard_method(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "server/discover"
            | "prompts/get"
            | "prompts/list"
            | "resources/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "resources/templates/list"
            | "subscriptions/listen"
            | "tools/call"
            | "tools/list"
            | "completion/complete"
            | "elicitation/create"
            | "logging/setLevel"
            | "roots/list"
            | "sampling/createMessage"
    ) || standard_notification(method)
}

fn standard_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/initialized"
            | "notifications/message"
            | "notifications/progress"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
            | "notifications/roots/list_changed"
            | "notifications/subscriptions/acknowledged"
            | "notifications/tools/list_changed"
    )
}

#[cfg(test)]
#[path = "line_transport_tests.rs"]
mod tests;
