//! The agent loop (DESIGN.md "One chat turn"): an OpenAI-compatible model chooses tools,
//! every call goes through [`crate::gateway::Gateway::call_tool`], results go back to the
//! model, for at most `max_rounds` rounds.
//!
//! - [`llm`]: the OpenAI-compatible chat completions client (streaming SSE and plain JSON)
//!   and the tool-call stream accumulator that tolerates real servers' quirks.
//! - [`events`]: the typed event stream a turn emits (`round_start` … `done`).
//! - `runner`: [`Agent`], its builder, [`TurnOptions`], [`Answer`] and [`AgentError`].
//! - `turn`: the rounds of one turn; `executor`: one round's calls, run at once.
//! - [`approvals`]: write tool calls waiting for the user's decision.
//! - `preprompt`, `time_zone`: the system preamble and the user's clock in it.
//! - [`models`]: which of the configured models answers a turn (routing).
//! - `output`: what the model reads of a tool result; `eta`: expected call durations.

pub mod approvals;
mod emitter;
mod eta;
pub mod events;
mod executor;
pub mod llm;
mod metering;
pub mod models;
mod output;
mod preprompt;
mod relay;
mod runner;
mod time_zone;
mod turn;

pub use approvals::{ApprovalError, ApprovalPolicy, Approvals, Decision};
pub use eta::Etas;
pub use events::{AgentEvent, Usage};
pub use executor::{CANCELLED, DENIED_BY_USER};
pub use metering::Metering;
pub use output::marked_app_context;
pub use preprompt::{DEFAULT_PREPROMPT, preprompt};
pub use runner::{Agent, AgentBuilder, AgentError, Answer, ToolChoice, TurnOptions};
pub use time_zone::{TimeZoneError, UserTimeZone};
