//! The one integration-test binary (one link for all tests; see STYLE.md).

mod cli;
mod conformance;
mod conformance_gateway;
mod conformance_server;
mod edge;
mod gate_audit;
mod gate_confirmations;
mod gate_policy;
mod inspector;
mod peers;
mod processes;
mod server;
mod service_extras;
mod support;
mod toolset;
