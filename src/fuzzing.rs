//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`): the parsers and checks
//! that are not public API, behind thin functions that run them as the gateway does. Nothing
//! else uses this module; the feature is off in every build but the fuzzers'.

use std::{
    path::{Path, PathBuf},
    pin::Pin,
    task::{Context, Poll},
};

use bytes::Bytes;
use futures::StreamExt as _;
use rmcp::transport::Transport as _;
use serde_json::Value;
use tokio::io::{AsyncRead, ReadBuf};

use crate::upstream::line_transport::{Decoded, LineTransport, decode, trim};

/// One decoded upstream line, as the stdio and Streamable HTTP clients decode it: the message
/// as JSON when it is one, `None` when it is skipped or answered as invalid.
pub fn decode_upstream_line(line: &[u8]) -> Option<Value> {
    match decode(trim(line)) {
        Decoded::Message(message) => serde_json::to_value(&message).ok(),
        Decoded::Skip | Decoded::Invalid => None,
    }
}

/// What a stdio upstream's line framer yields, as JSON, for `input` arriving in pieces of
/// the sizes `chunks` gives (cycled; a zero is one byte), with lines of at most `max_line`
/// bytes.
pub fn frame_upstream_lines(input: &[u8], chunks: &[u8], max_line: usize) -> Vec<Value> {
    let reader = Chunked {
        data: input.to_vec(),
        at: 0,
        sizes: chunks.iter().map(|&n| usize::from(n).max(1)).collect(),
        next: 0,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().build() {
        Ok(runtime) => runtime,
        Err(_) => return Vec::new(),
    };
    runtime.block_on(async move {
        let mut transport = LineTransport::new(reader, tokio::io::sink(), max_line);
        let mut out = Vec::new();
        while let Some(message) = transport.receive().await {
            out.extend(serde_json::to_value(&message).ok());
        }
        out
    })
}

/// A reader that hands out its bytes in pieces of the given sizes.
struct Chunked {
    data: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
    next: usize,
}

impl AsyncRead for Chunked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let size = if this.sizes.is_empty() {
            this.data.len()
        } else {
            this.sizes[this.next % this.sizes.len()]
        };
        this.next = this.next.wrapping_add(1);
        let end = this
            .data
            .len()
            .min(this.at.saturating_add(size))
            .min(this.at.saturating_add(buf.remaining()));
        buf.put_slice(&this.data[this.at..end]);
        this.at = end;
        Poll::Ready(Ok(()))
    }
}

/// An SSE event as the upstream SSE reader yields it: its `event` and `data`, or the error
/// that ended the stream.
pub type SseItem = Result<(Option<String>, Option<String>), String>;

/// The events of an upstream SSE body arriving in `chunks`, each event bounded by `limit`
/// bytes on the wire, up to and including the first error.
pub fn upstream_sse_events(chunks: Vec<Vec<u8>>, limit: usize) -> Vec<SseItem> {
    let bytes = futures::stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<Bytes, sse_stream::Error>(Bytes::from(chunk))),
    );
    let mut events = crate::upstream::sse::bounded_events(bytes, limit);
    futures::executor::block_on(async move {
        let mut out = Vec::new();
        while let Some(item) = events.next().await {
            match item {
                Ok(event) => out.push(Ok((event.event, event.data))),
                Err(error) => {
                    out.push(Err(error.to_string()));
                    break;
                }
            }
        }
        out
    })
}

/// The `data` of each event of a model's SSE stream arriving in `chunks`, the unfinished
/// last event included, or the parser's error.
pub fn model_sse_events(chunks: &[&[u8]]) -> Result<Vec<String>, String> {
    let mut parser = crate::agent::llm::sse::SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        out.extend(parser.push(chunk).map_err(|e| e.to_string())?);
    }
    out.extend(parser.finish().map_err(|e| e.to_string())?);
    Ok(out)
}

/// Loads `text` as a configuration file named `name` (its extension says TOML or
/// `mcpServers` JSON) in `folder`, with an empty environment: a problem report or nothing.
pub fn load_config_text(folder: &Path, name: &str, text: &[u8]) -> Result<(), String> {
    let path: PathBuf = folder.join(name);
    std::fs::write(&path, text).map_err(|e| format!("writing the file: {e}"))?;
    let env = crate::config::Env::from_pairs(Vec::<(String, String)>::new());
    crate::config::load(Some(&path), folder, &env, Path::new("/nonexistent/mcpgate"))
        .map(|_| ())
        .map_err(|e| e.to_string())
}
