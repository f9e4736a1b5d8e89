//! The one integration-test binary (one link for all tests; see STYLE.md).

mod agent_loop;
mod chat_api;
mod chat_cli;
mod cli;
mod config_runs;
mod conformance;
mod conformance_gateway;
mod conformance_server;
mod docs;
mod edge;
mod faithful;
mod gate_audit;
mod gate_confirmations;
mod gate_policy;
mod inspector;
mod layers;
mod llm_client;
mod page;
mod peers;
mod processes;
mod sandbox;
mod scripted_llm;
mod server;
mod service_extras;
mod support;
mod toolset;
