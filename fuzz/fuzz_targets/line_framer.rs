//! The stdio line framer with bounded lines: whatever the pieces the bytes arrive in, it
//! yields exactly the messages of the lines that end in a newline and fit the bound, in
//! order (a reference model: split at newlines, drop the long lines, decode the rest).
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::{decode_upstream_line, frame_upstream_lines};

#[derive(Arbitrary, Debug)]
struct Input {
    max_line: u16,
    chunks: Vec<u8>,
    data: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let max_line = 1 + usize::from(input.max_line % 2048);
    let framed = frame_upstream_lines(&input.data, &input.chunks, max_line);
    let mut expected = Vec::new();
    let mut lines = input.data.split(|b| *b == b'\n').peekable();
    while let Some(line) = lines.next() {
        // The last piece has no newline after it: the stream ended inside it.
        if lines.peek().is_none() {
            break;
        }
        if line.len() + 1 <= max_line {
            expected.extend(decode_upstream_line(line));
        }
    }
    assert_eq!(framed, expected);
});
