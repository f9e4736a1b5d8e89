//! mcpgate: a secure gateway between LLM applications and MCP tool servers.
//!
//! # Layout
//!
//! Dependencies run one way, top to bottom; nothing below imports anything above it.
//!
//! - [`server`]: the HTTP service (`mcpgate serve`): authentication, REST API, chat API, health.
//! - [`agent`]: the LLM tool loop: an OpenAI-compatible client and the rounds of a chat turn.
//! - [`toolset`]: the embedding API: connect one server, get its tools, call them.
//! - [`gateway`]: `Gateway`, the one gate every tool call passes; keeps the catalog fresh.
//! - [`policy`]: access, write classification, confirmations and limits: pure decisions
//!   plus calls into the stores.
//! - [`catalog`]: names, schema repair, fingerprints, the tool-list cache and the immutable
//!   catalog snapshot. Pure: no I/O.
//! - [`upstream`]: connections to MCP servers (stdio, Streamable HTTP, legacy SSE) and the
//!   manager that keeps them healthy.
//! - [`store`]: confirmation, audit and counter stores: memory and SQLite.
//! - [`net`]: the SSRF-safe HTTP client every outbound request goes through.
//! - [`config`]: raw serde types, validation into [`config::Config`], file, JSON and
//!   environment sources.
//! - [`digest`]: hex SHA-256 and random ids.
//! - [`lane`]: threads that each drive a runtime of their own, for serving (used by
//!   [`server`] and [`net`]).
//! - [`demo`]: the built-in demo server (`mcpgate demo-server`).
//! - `fixtures`: edge-case MCP servers for the tests and the benchmark, built only with the
//!   `testkit` feature (which the crate's own tests turn on), never into a release.

pub mod agent;
pub mod catalog;
pub mod config;
pub mod demo;
pub mod digest;
// The test and benchmark servers: built for the crate's own tests and `scripts/bench` only.
#[cfg(any(test, feature = "testkit"))]
pub mod fixtures;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod gateway;
pub mod lane;
pub mod net;
pub mod oauth;
pub mod policy;
pub mod server;
pub mod store;
pub mod toolset;
pub mod upstream;
pub mod webmcp;

// The reference pages' Rust examples, compiled by `cargo test --doc` so they keep up.
#[cfg(doctest)]
#[doc = include_str!("../docs/chat.md")]
struct ChatDocs;
#[cfg(doctest)]
#[doc = include_str!("../docs/library.md")]
struct LibraryDocs;
