//! The agent's stream accumulator: any sequence of chunks (JSON values, tool-call deltas
//! among them) never panics, and never yields a tool call that no chunk streamed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mcpgate::agent::llm::Accumulator;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let chunks: Vec<Value> = serde_json::Deserializer::from_slice(data)
        .into_iter::<Value>()
        .map_while(Result::ok)
        .take(256)
        .collect();
    let mut accumulator = Accumulator::new();
    for chunk in &chunks {
        if accumulator.push_chunk(chunk).is_err() {
            return;
        }
    }
    let streamed_calls = chunks.iter().any(|c| c.to_string().contains("tool_calls"));
    let completion = accumulator.finish();
    if !streamed_calls {
        assert!(
            completion.tool_calls.is_empty(),
            "{:?} from {chunks:?}",
            completion.tool_calls
        );
    }
    // A name may come in fragments (providers stream it so), which the accumulator joins:
    // the first minutes of fuzzing showed that, so no check that it appears whole.
});
