//! The gate's policies through `Gateway::call_tool` against real upstreams: call limits,
//! result and argument bounds, timeouts, tool errors, access, allow/deny lists, pins and the
//! poisoning scan. Shared helpers here; one submodule per policy family.

mod access;
mod definitions;
mod limits;
mod results;

use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use mcpgate::{
    config::{Confirm, InProcess, ServerConfig, TransportConfig},
    fixtures::demo::{DemoServer, READ_ONLY_TOOLS},
    gateway::{Gateway, GatewayError, ToolOutput},
    policy::CallContext,
};
use rmcp::{ServerHandler, ServiceExt as _};
use serde_json::Value;

use crate::support::{WAIT, ctx, fixture, id};

/// Byte buffer of an in-process pipe: one message rarely waits on it (as in the embedding
/// API's own factory).
const PIPE_BUFFER: usize = 64 * 1024;

/// How often [`eventually`] looks again.
const POLL: Duration = Duration::from_millis(20);

/// A server run in this test process from `handler` (a fresh serving task per connection),
/// writes confirmed, nothing marked read-only yet.
fn in_process<H: ServerHandler + Clone>(id_: &str, handler: H) -> ServerConfig {
    let factory = move || {
        let (client, server) = tokio::io::duplex(PIPE_BUFFER);
        let handler = handler.clone();
        // Ends when the gateway closes its end of the pipe.
        tokio::spawn(async move {
            if let Ok(running) = handler.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        client
    };
    let mut server = ServerConfig::new(
        id(id_),
        TransportConfig::InProcess(InProcess(Arc::new(factory))),
    );
    server.confirm = Confirm::Writes;
    server
}

fn names(tools: &[&str]) -> Vec<String> {
    tools.iter().map(|t| (*t).to_owned()).collect()
}

/// The demo server in process, its read tools marked so only notes changes need confirming.
fn demo(id_: &str) -> ServerConfig {
    let mut server = in_process(id_, DemoServer::new());
    server.read_only_tools = names(READ_ONLY_TOOLS);
    server
}

/// The `slow` fixture as a process, all its tools marked read-only.
fn slow() -> ServerConfig {
    let mut server = fixture("slow", "slow");
    server.confirm = Confirm::Writes;
    server.read_only_tools = names(&["echo", "sleep", "sleep_stats"]);
    server
}

/// [`ctx`]'s tenant and session, as another user.
fn caller(user: &str) -> CallContext {
    CallContext {
        user: user.to_owned(),
        ..ctx()
    }
}

/// What the slow fixture counted of its `sleep` calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct SleepStats {
    started: u64,
    completed: u64,
    cancelled: u64,
    in_flight: u64,
}

/// Asks the slow fixture, through the gate as `who`, what became of its sleeps.
async fn sleep_stats(gw: &Gateway, who: &CallContext) -> SleepStats {
    let output = gw
        .call_tool(who, "slow.sleep_stats", Value::Null, None)
        .await
        .expect("sleep_stats answers");
    let stats = output.structured.expect("sleep_stats is structured");
    let count = |key: &str| {
        stats[key]
            .as_u64()
            .unwrap_or_else(|| panic!("`{key}` is a count in {stats}"))
    };
    SleepStats {
        started: count("started"),
        completed: count("completed"),
        cancelled: count("cancelled"),
        in_flight: count("in_flight"),
    }
}

/// Like `support::wait_for`, for conditions that take a call to check.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(start.elapsed() < WAIT, "timed out waiting for {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// Calls a write tool the way a person does: asked, approved, called again with the token.
async fn call_confirmed(gw: &Gateway, who: &CallContext, name: &str, args: Value) -> ToolOutput {
    let confirmation_id = match gw.call_tool(who, name, args.clone(), None).await {
        Err(GatewayError::ConfirmationRequired {
            confirmation_id, ..
        }) => confirmation_id,
        other => panic!("`{name}` should ask for confirmation, got {other:?}"),
    };
    let approval = gw
        .approve(who, &confirmation_id)
        .await
        .expect("the caller approves their own confirmation");
    gw.call_tool(who, name, args, Some(&approval.token))
        .await
        .unwrap_or_else(|err| panic!("confirmed `{name}` fails: {err}"))
}

/// Canonical ids of tools, in catalog order.
fn canonical_ids(tools: &[mcpgate::catalog::CatalogTool]) -> Vec<&str> {
    tools.iter().map(|t| t.canonical.as_str()).collect()
}
