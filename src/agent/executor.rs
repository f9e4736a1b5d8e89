//! One round's tool calls, run at once through the gate: events as each call progresses and
//! finishes (completion order), what the model reads of each in call order, write tools
//! paused for the user's decision, and cancellation that reaches the upstream calls.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use serde_json::Value;
use tokio::{
    sync::mpsc,
    task::{Id, JoinSet},
    time::Instant,
};
use tokio_util::sync::CancellationToken;

use super::{
    AgentEvent,
    approvals::{ApprovalPolicy, Approvals, Decision},
    emitter::Emitter,
    eta::Etas,
    output::{ImageNames, error_text, result_text},
    relay::{ProgressRelay, Signal},
};
use crate::{
    gateway::{CallRelay, Gateway, GatewayError, ToolOutput},
    policy::CallContext,
    store::rfc3339,
};

/// Progress and approval notices from running calls waiting for the round to pass them on;
/// progress beyond it is dropped (a newer notice follows), approvals wait for room.
const SIGNAL_BUFFER: usize = 256;

/// Tool error code of a call the user declined or did not answer in time.
pub const DENIED_BY_USER: &str = "denied_by_user";

/// Tool error code of a call stopped because the turn was cancelled.
pub const CANCELLED: &str = "cancelled";

/// A tool call as the round will make it.
#[derive(Debug, Clone)]
pub(crate) struct PlannedCall {
    /// Unique within the turn.
    pub call_id: String,
    /// The name the model used: the gate resolves it (and refuses what it does not know).
    pub name: String,
    /// The canonical id when the name resolved in the caller's catalog, else `name`.
    pub tool: String,
    pub server: Option<String>,
    pub arguments: Value,
    /// The tool's MCP Apps view (merged-view URI), when it has one.
    pub view: Option<String>,
    /// Answered without reaching the gate (e.g. over the per-round call limit).
    pub refused: Option<ToolFailure>,
}

/// Why a call did not give a result: a stable code and a message the model reads.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ToolFailure {
    pub code: String,
    pub message: String,
}

impl ToolFailure {
    pub(crate) fn new(code: &str, message: impl Into<String>) -> ToolFailure {
        ToolFailure {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

impl From<GatewayError> for ToolFailure {
    fn from(err: GatewayError) -> ToolFailure {
        ToolFailure::new(err.code(), err.to_string())
    }
}

/// The round was cancelled; unfinished calls were stopped (and told so upstream).
#[derive(Debug)]
pub(crate) struct Cancelled;

/// What a round needs from its turn.
pub(crate) struct Round<'a> {
    pub gateway: &'a Gateway,
    pub ctx: &'a CallContext,
    pub approvals: &'a Arc<Approvals>,
    pub policy: ApprovalPolicy,
    pub etas: &'a Etas,
    pub events: &'a Emitter,
    pub cancel: &'a CancellationToken,
    /// Characters of each call's output the model reads.
    pub max_chars: usize,
}

impl Round<'_> {
    /// Runs `calls` at once and returns what the model reads of each, in call order.
    pub(crate) async fn run(
        &self,
        calls: &[PlannedCall],
        images: &mut ImageNames,
    ) -> Result<Vec<String>, Cancelled> {
        let mut texts: Vec<Option<String>> = vec![None; calls.len()];
        let mut started = vec![Instant::now(); calls.len()];
        let (signal_sender, mut signals) = mpsc::channel(SIGNAL_BUFFER);
        let mut running = JoinSet::new();
        let mut tasks: HashMap<Id, usize> = HashMap::new();
        for (index, call) in calls.iter().enumerate() {
            if let Some(failure) = &call.refused {
                texts[index] = Some(self.failed(call, failure, Duration::ZERO).await);
                continue;
            }
            if call.server.is_some()
                && let Some(expected) = self.etas.expected(&call.tool)
            {
                self.events
                    .emit(AgentEvent::ToolEta {
                        call_id: call.call_id.clone(),
                        expected_ms: millis(expected),
                    })
                    .await;
            }
            let task = CallTask {
                gateway: self.gateway.clone(),
                ctx: self.ctx.clone(),
                approvals: self.approvals.clone(),
                policy: self.policy,
                signals: signal_sender.clone(),
                index,
                call: call.clone(),
            };
            started[index] = Instant::now();
            let handle = running.spawn(task.run());
            tasks.insert(handle.id(), index);
        }
        drop(signal_sender);
        while !running.is_empty() {
            tokio::select! {
                biased;
                () = self.cancel.cancelled() => {
                    // Dropping the calls cancels them upstream; wait until they are dropped.
                    running.abort_all();
                    while running.join_next().await.is_some() {}
                    for (index, call) in calls.iter().enumerate() {
                        if texts[index].is_none() {
                            let failure = ToolFailure::new(CANCELLED, "the turn was cancelled");
                            texts[index] =
                                Some(self.failed(call, &failure, started[index].elapsed()).await);
                        }
                    }
                    return Err(Cancelled);
                }
                Some(signal) = signals.recv() => self.forward(signal, calls, &texts).await,
                Some(joined) = running.join_next_with_id() => {
                    let (index, done) = match joined {
                        Ok((id, done)) => (tasks.remove(&id).unwrap_or(done.index), Some(done)),
                        Err(error) => (tasks.remove(&error.id()).unwrap_or(usize::MAX), None),
                    };
                    let Some(call) = calls.get(index) else { continue };
                    texts[index] = Some(match done {
                        Some(done) => self.finish(call, done, images).await,
                        None => {
                            let failure =
                                ToolFailure::new("internal", "the call failed unexpectedly");
                            self.failed(call, &failure, started[index].elapsed()).await
                        }
                    });
                }
            }
        }
        Ok(texts
            .into_iter()
            .map(|text| text.unwrap_or_else(|| error_text("internal", "no outcome", 100)))
            .collect())
    }

    /// Emits a finished call's event; returns what the model reads of it.
    async fn finish(&self, call: &PlannedCall, done: Done, images: &mut ImageNames) -> String {
        match done.result {
            Ok(output) => {
                if let Some(took) = done.sample {
                    self.etas.record(&output.tool, took);
                }
                let mut text = result_text(&output, images, self.max_chars);
                let untrusted = self
                    .gateway
                    .catalog()
                    .by_canonical(&output.tool)
                    .is_some_and(|t| crate::webmcp::protocol::untrusted_content(&t.upstream));
                if untrusted {
                    text = crate::agent::output::marked_untrusted(&output.tool, &text);
                }
                self.events
                    .emit(AgentEvent::ToolResult {
                        call_id: call.call_id.clone(),
                        tool: call.tool.clone(),
                        result: result_data(&output),
                        elapsed_ms: millis(done.elapsed),
                    })
                    .await;
                text
            }
            Err(failure) => self.failed(call, &failure, done.elapsed).await,
        }
    }

    async fn failed(&self, call: &PlannedCall, failure: &ToolFailure, took: Duration) -> String {
        self.events
            .emit(AgentEvent::ToolError {
                call_id: call.call_id.clone(),
                tool: call.tool.clone(),
                code: failure.code.clone(),
                message: failure.message.clone(),
                elapsed_ms: millis(took),
            })
            .await;
        error_text(&failure.code, &failure.message, self.max_chars)
    }

    /// Passes a running call's notice on; progress after the call's result is dropped.
    async fn forward(&self, signal: Signal, calls: &[PlannedCall], texts: &[Option<String>]) {
        match signal {
            Signal::Progress {
                index,
                progress,
                total,
                message,
            } => {
                let (Some(call), Some(None)) = (calls.get(index), texts.get(index)) else {
                    return;
                };
                self.events
                    .emit(AgentEvent::ToolProgress {
                        call_id: call.call_id.clone(),
                        progress,
                        total,
                        message,
                    })
                    .await;
            }
            Signal::Approval {
                index,
                confirmation_id,
                tool,
                expires_at,
            } => {
                let Some(call) = calls.get(index) else { return };
                let server = self
                    .gateway
                    .catalog()
                    .by_canonical(&tool)
                    .map(|t| t.server.to_string())
                    .or_else(|| call.server.clone())
                    .unwrap_or_default();
                self.events
                    .emit(AgentEvent::ApprovalRequired {
                        call_id: call.call_id.clone(),
                        confirmation_id,
                        tool,
                        server,
                        arguments: call.arguments.clone(),
                        expires_at: rfc3339(expires_at),
                    })
                    .await;
            }
        }
    }
}

/// The shaped result without the envelope: `content`, `truncated`, `structuredContent`.
fn result_data(output: &ToolOutput) -> Value {
    let mut envelope = output.to_json();
    envelope["data"].take()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// How one call ended.
struct Done {
    index: usize,
    elapsed: Duration,
    /// How long the successful gate call took (for the ETA record), approval wait excluded.
    sample: Option<Duration>,
    result: Result<ToolOutput, ToolFailure>,
}

/// One call, run as its own task so it goes on while the turn's reader is busy; aborting
/// the task drops the gate call, which cancels it upstream.
struct CallTask {
    gateway: Gateway,
    ctx: CallContext,
    approvals: Arc<Approvals>,
    policy: ApprovalPolicy,
    signals: mpsc::Sender<Signal>,
    index: usize,
    call: PlannedCall,
}

impl CallTask {
    async fn run(self) -> Done {
        let started = Instant::now();
        let relay: Arc<dyn CallRelay> =
            Arc::new(ProgressRelay::new(self.index, self.signals.clone()));
        let first = self
            .gateway
            .call_tool_relayed(
                &self.ctx,
                &self.call.name,
                self.call.arguments.clone(),
                None,
                Some(relay.clone()),
            )
            .await;
        let (result, sample) = match first {
            Ok(output) => (Ok(output), Some(started.elapsed())),
            Err(GatewayError::ConfirmationRequired {
                confirmation_id,
                tool,
                expires_at,
                ..
            }) => {
                self.after_decision(relay, confirmation_id, tool, expires_at)
                    .await
            }
            Err(err) => (Err(err.into()), None),
        };
        Done {
            index: self.index,
            elapsed: started.elapsed(),
            sample,
            result,
        }
    }

    /// Waits for the user's decision, then calls with the confirmation token or reports
    /// the refusal.
    async fn after_decision(
        &self,
        relay: Arc<dyn CallRelay>,
        confirmation_id: String,
        tool: String,
        expires_at: SystemTime,
    ) -> (Result<ToolOutput, ToolFailure>, Option<Duration>) {
        let decision = match self.policy {
            ApprovalPolicy::ApproveAll => Some(Decision::Approve),
            ApprovalPolicy::DenyAll => Some(Decision::Deny),
            ApprovalPolicy::Ask => match self.ask(&confirmation_id, tool, expires_at).await {
                Ok(decision) => decision,
                Err(failure) => return (Err(failure), None),
            },
        };
        match decision {
            Some(Decision::Approve) => {
                let approval = match self.gateway.approve(&self.ctx, &confirmation_id).await {
                    Ok(approval) => approval,
                    Err(err) => return (Err(err.into()), None),
                };
                let started = Instant::now();
                let result = self
                    .gateway
                    .call_tool_relayed(
                        &self.ctx,
                        &self.call.name,
                        self.call.arguments.clone(),
                        Some(&approval.token),
                        Some(relay),
                    )
                    .await;
                let sample = result.is_ok().then(|| started.elapsed());
                (result.map_err(ToolFailure::from), sample)
            }
            Some(Decision::Deny) => {
                if let Err(err) = self.gateway.deny(&self.ctx, &confirmation_id).await {
                    tracing::debug!(error = %err, "denying a declined confirmation failed");
                }
                let declined = ToolFailure::new(
                    DENIED_BY_USER,
                    "the user declined this call; it was not run. Do not retry it unless the \
                     user asks.",
                );
                (Err(declined), None)
            }
            None => {
                let expired = ToolFailure::new(
                    DENIED_BY_USER,
                    "the user declined this call: no approval came before it expired; it was \
                     not run.",
                );
                (Err(expired), None)
            }
        }
    }

    /// Asks the user through an `approval_required` event; `None` when no decision came
    /// before the confirmation expired.
    async fn ask(
        &self,
        confirmation_id: &str,
        tool: String,
        expires_at: SystemTime,
    ) -> Result<Option<Decision>, ToolFailure> {
        let mut pending = self
            .approvals
            .register(&self.ctx, &self.call.call_id)
            .map_err(|e| ToolFailure::new(e.code(), e.to_string()))?;
        let asked = Signal::Approval {
            index: self.index,
            confirmation_id: confirmation_id.to_owned(),
            tool,
            expires_at,
        };
        if self.signals.send(asked).await.is_err() {
            return Ok(None);
        }
        let wait = expires_at
            .duration_since(SystemTime::now())
            .unwrap_or_default();
        Ok(tokio::time::timeout(wait, pending.decision())
            .await
            .ok()
            .flatten())
    }
}
