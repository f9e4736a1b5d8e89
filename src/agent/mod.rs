//! The agent loop (DESIGN.md "One chat turn"): an OpenAI-compatible model chooses tools,
//! every call goes through [`crate::gateway::Gateway::call_tool`], results go back to the
//! model, for at most `max_rounds` rounds.
//!
//! - [`llm`]: the OpenAI-compatible chat completions client (streaming SSE and plain JSON)
//!   and the tool-call stream accumulator that tolerates real servers' quirks.
//! - [`events`]: the typed event stream a turn emits (`round_start` … `done`).

pub mod events;
pub mod llm;

pub use events::{AgentEvent, Usage};
