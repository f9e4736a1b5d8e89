//! A model's SSE stream, parsed by the agent: the events do not depend on how the bytes
//! were cut into pieces.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mcpgate::fuzzing::model_sse_events;

#[derive(Arbitrary, Debug)]
struct Input {
    cuts: Vec<u8>,
    data: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let whole = model_sse_events(&[&input.data]);
    let mut pieces: Vec<&[u8]> = Vec::new();
    let mut rest = input.data.as_slice();
    for cut in input.cuts.iter().map(|c| usize::from(*c)) {
        let (piece, after) = rest.split_at(cut.min(rest.len()));
        pieces.push(piece);
        rest = after;
    }
    pieces.push(rest);
    let cut = model_sse_events(&pieces);
    // Errors may come at different points; the events before them may not differ.
    match (&whole, &cut) {
        (Ok(a), Ok(b)) => assert_eq!(a, b),
        (Err(_), Err(_)) => {}
        _ => panic!("cutting changed the outcome: {whole:?} / {cut:?}"),
    }
});
