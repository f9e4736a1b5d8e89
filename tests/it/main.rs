//! The one integration-test binary (one link for all tests; see STYLE.md).

mod cli;
mod conformance;
mod edge;
mod peers;
mod processes;
mod support;
mod toolset;
