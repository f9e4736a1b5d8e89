//! The agent loop against real upstreams (the `slow` fixture and the demo server as stdio
//! processes, server-everything for images) and the scripted OpenAI-compatible server.
//! Shared harness here; one submodule per concern.

mod approvals;
mod apps;
mod bounds;
mod calls;
mod providers;

use std::time::{Duration, Instant};

use futures::{StreamExt as _, stream::BoxStream};
use mcpgate::{
    agent::{
        Agent, AgentEvent, TurnOptions,
        llm::{LlmClient, Message},
    },
    config::{Config, Confirm, LlmConfig, ServerConfig},
    fixtures::demo::READ_ONLY_TOOLS,
    gateway::Gateway,
    policy::CallContext,
};
use serde_json::{Value, json};

use crate::{
    scripted_llm::{Reply, ScriptedLlm},
    support::{self, WAIT, ctx, fixture, mcpgate_bin, stdio},
};

/// The demo server as a stdio process, writes confirmed (as by default).
pub fn demo() -> ServerConfig {
    let mut demo = stdio("demo", &mcpgate_bin().to_string_lossy(), &["demo-server"]);
    demo.confirm = Confirm::Writes;
    demo.read_only_tools = READ_ONLY_TOOLS.iter().map(|t| (*t).to_owned()).collect();
    demo
}

/// A gateway in front of `slow` and `demo`, a scripted model, and an agent over both.
struct Harness {
    gateway: Gateway,
    llm: ScriptedLlm,
    agent: Agent,
}

impl Harness {
    async fn start(replies: Vec<Reply>) -> Harness {
        Harness::with(replies, |_| {}).await
    }

    /// `tune` adjusts the configuration (agent bounds, confirmation times) first.
    async fn with(replies: Vec<Reply>, tune: impl FnOnce(&mut Config)) -> Harness {
        let llm = ScriptedLlm::start(replies).await;
        let mut config = support::config(vec![fixture("slow", "slow"), demo()]);
        tune(&mut config);
        let agent_config = config.agent.clone();
        let gateway = support::gateway(config).await;
        let model = LlmConfig::new(llm.base_url(), "scripted");
        let client = LlmClient::new(model).expect("the model client builds");
        let agent = Agent::builder(client, gateway.clone())
            .config(agent_config)
            .build();
        Harness {
            gateway,
            llm,
            agent,
        }
    }

    fn stream(&self, question: &str, options: TurnOptions) -> BoxStream<'static, AgentEvent> {
        self.agent
            .run_stream(ctx(), vec![Message::user(question)], options)
    }

    /// Runs a turn to its end and returns its events.
    async fn turn(&self, question: &str) -> Vec<AgentEvent> {
        self.turn_with(question, TurnOptions::default()).await
    }

    async fn turn_with(&self, question: &str, options: TurnOptions) -> Vec<AgentEvent> {
        rest(&mut self.stream(question, options)).await
    }

    /// The JSON of request `index` to the model.
    fn request(&self, index: usize) -> Value {
        self.llm
            .requests()
            .get(index)
            .cloned()
            .unwrap_or_else(|| panic!("no request {index} reached the model"))
    }

    /// Calls a tool directly through the gate as the test caller.
    async fn call(&self, tool: &str, arguments: Value) -> Value {
        let output = self
            .gateway
            .call_tool(&ctx(), tool, arguments, None)
            .await
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        let text = output.text();
        output.structured.unwrap_or_else(|| json!(text))
    }

    async fn stop(self) {
        self.gateway.shutdown().await;
    }
}

/// The function names a model request offered.
fn offered(request: &Value) -> Vec<&str> {
    request["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect()
}

/// Every event left in `events`, bounded by [`WAIT`].
async fn rest(events: &mut BoxStream<'static, AgentEvent>) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(event) = events.next().await {
            out.push(event);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the turn did not end; events so far: {out:#?}"));
    out
}

/// Reads events until `stop` says so; returns them, the last one matched.
async fn until(
    events: &mut BoxStream<'static, AgentEvent>,
    mut stop: impl FnMut(&AgentEvent) -> bool,
) -> Vec<AgentEvent> {
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(event) = events.next().await {
            let found = stop(&event);
            out.push(event);
            if found {
                return;
            }
        }
        panic!("the turn ended first: {out:#?}");
    })
    .await
    .unwrap_or_else(|_| panic!("no such event came; events so far: {out:#?}"));
    out
}

fn kinds(events: &[AgentEvent]) -> Vec<&'static str> {
    events.iter().map(AgentEvent::kind).collect()
}

/// Position of the first event matching `which`.
fn position(events: &[AgentEvent], which: impl Fn(&AgentEvent) -> bool) -> usize {
    events
        .iter()
        .position(which)
        .unwrap_or_else(|| panic!("no such event in {events:#?}"))
}

/// The call id of the `tool_call` event for `tool`.
fn call_id(events: &[AgentEvent], tool: &str) -> String {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolCall {
                call_id, tool: t, ..
            } if t == tool => Some(call_id.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool_call for {tool} in {events:#?}"))
}

/// The `final` message; fails unless the turn ended with one, then `done`.
fn answer(events: &[AgentEvent]) -> String {
    match events {
        [.., AgentEvent::Final { message, .. }, AgentEvent::Done] => message.clone(),
        _ => panic!("the turn did not end with final, done: {events:#?}"),
    }
}

/// The `error` code; fails unless the turn ended with one, then `done`.
fn error_code(events: &[AgentEvent]) -> String {
    match events {
        [.., AgentEvent::Error { code, .. }, AgentEvent::Done] => code.clone(),
        _ => panic!("the turn did not end with error, done: {events:#?}"),
    }
}

/// The `tool_error` of call `id`: (code, message).
fn tool_error(events: &[AgentEvent], id: &str) -> (String, String) {
    events
        .iter()
        .find_map(|e| match e {
            AgentEvent::ToolError {
                call_id,
                code,
                message,
                ..
            } if call_id == id => Some((code.clone(), message.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no tool_error for {id} in {events:#?}"))
}

/// The tool messages of a model request, as (tool_call_id, content), in order.
fn tool_messages(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap_or_default().to_owned(),
                m["content"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Polls `check` (async) until it returns `Some`, bounded by [`WAIT`].
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
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Another user of the same tenant and session.
fn stranger() -> CallContext {
    CallContext {
        user: "mallory".into(),
        ..ctx()
    }
}
