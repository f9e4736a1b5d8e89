//! The embedding API of the loop: an [`Agent`] (a model client, a gateway and the loop's
//! bounds) runs chat turns, as a stream of events or to a final answer.

use std::{sync::Arc, time::SystemTime};

use futures::{FutureExt as _, StreamExt as _, stream::BoxStream};
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::{
    AgentEvent, Usage,
    approvals::{ApprovalPolicy, Approvals},
    emitter::Emitter,
    eta::Etas,
    llm::{LlmClient, Message},
    time_zone::UserTimeZone,
    turn::Turn,
};
use crate::{
    config::{AgentConfig, ServerId},
    gateway::Gateway,
    policy::CallContext,
};

/// Runs chat turns: the model picks tools, every call goes through the gateway's gate as
/// the turn's caller. Cheap to clone.
///
/// ```no_run
/// # async fn demo(gateway: mcpgate::gateway::Gateway) -> Result<(), Box<dyn std::error::Error>> {
/// use mcpgate::{
///     agent::{Agent, ApprovalPolicy, TurnOptions, llm::{LlmClient, Message}},
///     config::LlmConfig,
///     policy::CallContext,
/// };
///
/// let model = LlmConfig::new("http://127.0.0.1:8200/v1".parse()?, "smollm2");
/// let agent = Agent::builder(LlmClient::new(model)?, gateway).build();
/// let options = TurnOptions {
///     approvals: ApprovalPolicy::DenyAll,
///     ..TurnOptions::default()
/// };
/// let answer = agent
///     .run(CallContext::local(), vec![Message::user("What time is it?")], options)
///     .await?;
/// println!("{}", answer.message);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Agent {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub llm: Arc<LlmClient>,
    pub gateway: Gateway,
    pub config: AgentConfig,
    /// The model does function calling; `false` gives plain generation (no tools offered).
    pub tools_supported: bool,
    pub approvals: Arc<Approvals>,
    pub etas: Arc<Etas>,
}

/// Builds an [`Agent`]; every setting but the client and the gateway has a default.
pub struct AgentBuilder {
    inner: Inner,
}

impl AgentBuilder {
    /// The loop's bounds and preamble (default: [`AgentConfig::default`]).
    pub fn config(mut self, config: AgentConfig) -> AgentBuilder {
        self.inner.config = config;
        self
    }

    /// Whether the model supports function calling (default `true`); without it, turns are
    /// plain generation and no tool is offered.
    pub fn tools_supported(mut self, supported: bool) -> AgentBuilder {
        self.inner.tools_supported = supported;
        self
    }

    /// The registry pending approvals wait in; share it with whatever takes the user's
    /// decisions (default: a registry of this agent's own).
    pub fn approvals(mut self, approvals: Arc<Approvals>) -> AgentBuilder {
        self.inner.approvals = approvals;
        self
    }

    /// The record of recent call durations `tool_eta` comes from (share it between agents
    /// built per request).
    pub fn etas(mut self, etas: Arc<Etas>) -> AgentBuilder {
        self.inner.etas = etas;
        self
    }

    pub fn build(self) -> Agent {
        Agent {
            inner: Arc::new(self.inner),
        }
    }
}

/// A forced first tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (`tool_choice: "auto"`) in every round.
    Auto,
    /// The first round must call this function (its model-visible name), later rounds are
    /// `auto`. Small models call tools reliably only when forced.
    Force(String),
}

/// Per-turn settings.
#[derive(Debug, Clone)]
pub struct TurnOptions {
    /// The zone the preamble's date and time are shown in (default UTC).
    pub time_zone: UserTimeZone,
    /// The clock the preamble reads (default: now).
    pub now: Option<SystemTime>,
    /// Sampling options passed to the model as given (`temperature`, `top_p`, `max_tokens`,
    /// `seed`, ...).
    pub sampling: Map<String, Value>,
    pub tool_choice: ToolChoice,
    pub approvals: ApprovalPolicy,
    /// Cancels the turn: the model request stops, running tool calls are cancelled upstream,
    /// and the turn ends with a `cancelled` error.
    pub cancel: CancellationToken,
    /// Only these servers' tools are offered to the model (and callable by it); `None`:
    /// every tool the caller may use. Check the ids with
    /// [`Gateway::selectable_servers`](crate::gateway::Gateway::selectable_servers).
    pub servers: Option<Vec<ServerId>>,
}

impl Default for TurnOptions {
    fn default() -> Self {
        TurnOptions {
            time_zone: UserTimeZone::utc(),
            now: None,
            sampling: Map::new(),
            tool_choice: ToolChoice::Auto,
            approvals: ApprovalPolicy::Ask,
            cancel: CancellationToken::new(),
            servers: None,
        }
    }
}

/// The model's answer at the end of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub message: String,
    /// Summed over the turn's model requests, when the server reported usage.
    pub usage: Option<Usage>,
}

/// Why a turn ended without an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AgentError {
    #[error("the turn was cancelled")]
    Cancelled,
    /// A model request failed; `code` is the client's (`llm_unreachable`, `llm_timeout`, ...).
    #[error("{message}")]
    Model { code: String, message: String },
    /// The model repeated the same call (same tool, arguments and result) too often.
    #[error(
        "`{tool}` was called {times} times with the same arguments and gave the same result; \
         the turn was stopped"
    )]
    RepeatedCall { tool: String, times: u32 },
    /// The model's tool arguments were not valid JSON, again after the retries.
    #[error(
        "the model sent tool arguments that are not valid JSON {times} times (e.g. cut off at its \
         length limit); the turn was stopped"
    )]
    InvalidToolArguments { times: u32 },
}

impl AgentError {
    /// A stable, machine-readable code (the `error` event's `code`).
    pub fn code(&self) -> &str {
        match self {
            AgentError::Cancelled => "cancelled",
            AgentError::Model { code, .. } => code,
            AgentError::RepeatedCall { .. } => "repeated_call",
            AgentError::InvalidToolArguments { .. } => "invalid_tool_arguments",
        }
    }
}

impl Agent {
    /// An agent calling through `gateway` with the model `llm`.
    pub fn builder(llm: impl Into<Arc<LlmClient>>, gateway: Gateway) -> AgentBuilder {
        AgentBuilder {
            inner: Inner {
                llm: llm.into(),
                gateway,
                config: AgentConfig::default(),
                tools_supported: true,
                approvals: Arc::new(Approvals::default()),
                etas: Arc::new(Etas::new()),
            },
        }
    }

    /// Where approvals of this agent's turns wait: decide them with
    /// [`Approvals::decide`] as the turn's caller.
    pub fn approvals(&self) -> &Arc<Approvals> {
        &self.inner.approvals
    }

    pub fn gateway(&self) -> &Gateway {
        &self.inner.gateway
    }

    /// Runs one turn as `ctx` on the conversation `messages` (the preamble is added in
    /// front); the events end with `done`. Dropping the stream cancels the turn.
    pub fn run_stream(
        &self,
        ctx: CallContext,
        messages: Vec<Message>,
        options: TurnOptions,
    ) -> BoxStream<'static, AgentEvent> {
        let (emitter, receiver) = Emitter::channel();
        let turn = Turn::new(self.inner.clone(), ctx, options, emitter);
        // The turn is driven by whoever reads the stream (no detached task): its events
        // and its end arrive in order, and dropping the stream drops the turn with its
        // tool calls.
        let driver = async move { turn.run_to_events(messages).await }
            .into_stream()
            .filter_map(|()| futures::future::ready(None::<AgentEvent>));
        let events = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|event| (event, receiver))
        });
        futures::stream::select(events, driver).boxed()
    }

    /// Runs one turn to its answer. No events are delivered: with
    /// [`ApprovalPolicy::Ask`], a write tool waits in [`Agent::approvals`] until decided or
    /// expired; use [`Agent::run_stream`] to show the user what happens.
    pub async fn run(
        &self,
        ctx: CallContext,
        messages: Vec<Message>,
        options: TurnOptions,
    ) -> Result<Answer, AgentError> {
        Turn::new(self.inner.clone(), ctx, options, Emitter::none())
            .run(messages)
            .await
    }
}
