//! An upstream's SSE stream (legacy SSE and Streamable HTTP responses), each event bounded:
//! the events do not depend on how the bytes were cut into pieces, and no event's data is
//! longer than the bound.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::upstream_sse_events;

#[derive(Arbitrary, Debug)]
struct Input {
    limit: u16,
    cuts: Vec<u8>,
    data: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let limit = 1 + usize::from(input.limit % 4096);
    let whole = upstream_sse_events(vec![input.data.clone()], limit);
    let mut pieces = Vec::new();
    let mut rest = input.data.as_slice();
    for cut in input.cuts.iter().map(|c| usize::from(*c).max(1)) {
        if rest.is_empty() {
            break;
        }
        let (piece, after) = rest.split_at(cut.min(rest.len()));
        pieces.push(piece.to_vec());
        rest = after;
    }
    if !rest.is_empty() {
        pieces.push(rest.to_vec());
    }
    let cut = upstream_sse_events(pieces, limit);
    assert_eq!(whole, cut);
    for (_, data) in whole.iter().flatten() {
        assert!(data.as_ref().is_none_or(|d| d.len() <= limit));
    }
});
