//! A small server-sent events parser for model streams: yields the `data` of each event.
//! It holds at most one unfinished line and one event; the caller caps the bytes it feeds.

use super::LlmError;

/// Incremental SSE parser (lines end in `\n`, `\r\n` or `\r`; comments and fields other than
/// `data` are skipped).
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    /// The last byte fed was a `\r`: a `\n` right after it ends no second line.
    after_cr: bool,
}

impl SseParser {
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds bytes; returns the `data` of every event they complete, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, LlmError> {
        let mut events = Vec::new();
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(data) = self.line_done(&line)? {
                        events.push(data);
                    }
                }
                _ => self.line.push(byte),
            }
        }
        Ok(events)
    }

    /// The end of the stream: an event not closed by a blank line still counts.
    pub fn finish(&mut self) -> Result<Option<String>, LlmError> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty()
            && let Some(data) = self.line_done(&line)?
        {
            return Ok(Some(data));
        }
        Ok(self.data.take())
    }

    fn line_done(&mut self, line: &[u8]) -> Result<Option<String>, LlmError> {
        if line.is_empty() {
            return Ok(self.data.take());
        }
        let line = std::str::from_utf8(line)
            .map_err(|_| LlmError::bad_response("the stream is not UTF-8"))?;
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        if field == "data" {
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(stream: &str, size: usize) -> Vec<String> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for piece in stream.as_bytes().chunks(size) {
            out.extend(parser.push(piece).expect("valid stream"));
        }
        out.extend(parser.finish().expect("valid end"));
        out
    }

    #[test]
    fn events_in_any_split_and_line_ending() {
        let stream = ": keep-alive\n\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:{\"b\":2}\rdata: more\r\rdata: [DONE]\n\n";
        for size in 1..stream.len() {
            assert_eq!(
                parse_in_pieces(stream, size),
                ["{\"a\":1}", "{\"b\":2}\nmore", "[DONE]"],
                "split every {size} bytes"
            );
        }
    }

    #[test]
    fn a_last_event_without_blank_line_counts() {
        assert_eq!(parse_in_pieces("data: x\n\ndata: y", 3), ["x", "y"]);
        assert!(SseParser::new().push(b"data: \xff\n").is_err());
    }
}
