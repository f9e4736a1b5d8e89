//! One MCP `tools/call` through the gate: the call with the client's relay; a write the user
//! must confirm (asked over the session, in an input round, or out of band); an upstream's
//! input round handed back to a 2026-07-28 client, and the retry that answers it.
#![expect(
    deprecated,
    reason = "logging/setLevel is deprecated by SEP-2577, but session clients still set a level"
)]

use std::sync::Arc;

use rmcp::{
    ErrorData, RoleServer,
    model::{CallToolResponse, InputRequiredResult, InputResponses, LoggingLevel},
    service::RequestContext,
};
use serde_json::Value;

use super::{
    confirm::{self, Channel, Decided, Pending},
    convert,
    relay::ClientRelay,
    rounds::{CallKey, Continued, Rounds},
};
use crate::{
    gateway::{CallRelay, Gateway, GatewayError, Resume, ToolOutput, UpstreamError},
    policy::CallContext,
    server::metrics::Metrics,
};

/// Longest tool name quoted back in an error.
const MAX_SHOWN_NAME_CHARS: usize = 64;

/// One `tools/call` of one client.
pub(super) struct ToolCall<'a> {
    pub gateway: &'a Gateway,
    pub metrics: &'a Metrics,
    pub rounds: &'a Rounds,
    pub ctx: CallContext,
    /// The name to call the gateway with (canonical id or function name).
    pub name: String,
    pub arguments: Value,
    pub context: &'a RequestContext<RoleServer>,
    /// The least severe upstream log message relayed (the session's `logging/setLevel`).
    pub log_level: Option<LoggingLevel>,
}

fn shown(name: &str) -> String {
    let cut: String = name.chars().take(MAX_SHOWN_NAME_CHARS).collect();
    format!("{cut:?}")
}

impl ToolCall<'_> {
    /// Runs the call; `request_state` and `input_responses` make it the retry of a round
    /// (one of an upstream's handed back, or our own confirmation round).
    pub async fn run(
        &self,
        request_state: Option<&str>,
        input_responses: Option<InputResponses>,
    ) -> Result<CallToolResponse, ErrorData> {
        let Some(state) = request_state else {
            return self.first().await;
        };
        let fingerprint = self.fingerprint();
        let key = CallKey {
            name: &self.name,
            fingerprint: &fingerprint,
            arguments: &self.arguments,
        };
        if let Some(taken) = self.rounds.take_any(state, &self.ctx, key).await {
            return match taken {
                Ok(continued) => {
                    let responses = input_responses.unwrap_or_default();
                    self.resume(continued, responses).await
                }
                Err(err) => Ok(convert::error_text(format!("[{}] {err}", err.code())).into()),
            };
        }
        // The retry of a confirmation round: the state is the confirmation id we sent.
        let Some(id) = confirm::confirmation_id(state) else {
            return Ok(convert::error_text(
                "[confirmation_invalid] requestState is not a confirmation or an input round \
                 this gateway issued",
            )
            .into());
        };
        let answer = confirm::round_answer(input_responses.as_ref());
        self.decided(id, answer).await
    }

    /// The client's relay for this call; `resume`: the retry of a round handed back.
    fn relay(&self, resume: Option<Resume>) -> Arc<dyn CallRelay> {
        ClientRelay::for_call(self.context, &self.ctx, self.log_level, resume)
    }

    /// The call as the client made it, with a token from `_meta` if it brought one.
    async fn first(&self) -> Result<CallToolResponse, ErrorData> {
        let token = self
            .context
            .meta
            .get(confirm::TOKEN_META_KEY)
            .and_then(Value::as_str);
        let timer = self.metrics.start_call(self.gateway, &self.name);
        let outcome = self
            .gateway
            .call_tool_relayed(
                &self.ctx,
                &self.name,
                self.arguments.clone(),
                token,
                Some(self.relay(None)),
            )
            .await;
        timer.finish(&outcome);
        match outcome {
            Err(GatewayError::ConfirmationRequired {
                confirmation_id,
                tool,
                expires_at,
                ..
            }) => {
                let pending = Pending {
                    id: confirmation_id,
                    tool,
                    expires_at,
                };
                self.confirm(&pending).await
            }
            other => self.finish(other).await,
        }
    }

    /// Asks the user to confirm the call, the way the client allows.
    async fn confirm(&self, pending: &Pending) -> Result<CallToolResponse, ErrorData> {
        match confirm::channel(self.context) {
            Channel::InputRound => Ok(confirm::input_round(pending, &self.arguments).into()),
            Channel::Session(peer) => {
                let wait = self.gateway.config().confirmations.pending_ttl;
                let answer =
                    confirm::ask(&peer, pending, &self.arguments, wait, &self.context.ct).await;
                self.decided(&pending.id, answer).await
            }
            Channel::OutOfBand => Ok(confirm::out_of_band(pending, &self.ctx).into()),
        }
    }

    /// Acts on the user's answer to confirmation `id`.
    async fn decided(
        &self,
        id: &str,
        answer: confirm::Answer,
    ) -> Result<CallToolResponse, ErrorData> {
        let decided = confirm::decide(
            self.gateway,
            &self.ctx,
            &self.name,
            self.arguments.clone(),
            id,
            answer,
            self.relay(None),
        )
        .await;
        match decided {
            Decided::Ran(outcome) => self.finish(outcome).await,
            Decided::Refused(result) => Ok(result.into()),
        }
    }

    /// The retry of an upstream's round: the client's answers and the upstream's state go
    /// back with the call. A call the user confirmed before the upstream asked is the same
    /// call: the gate's new confirmation is approved on the strength of that answer (the
    /// round was single use and bound to this caller, tool, definition and arguments).
    async fn resume(
        &self,
        continued: Continued,
        responses: InputResponses,
    ) -> Result<CallToolResponse, ErrorData> {
        let resume = Resume {
            responses,
            state: continued.upstream_state,
        };
        let relay = self.relay(Some(resume));
        let outcome = self
            .gateway
            .call_tool_relayed(
                &self.ctx,
                &self.name,
                self.arguments.clone(),
                None,
                Some(relay.clone()),
            )
            .await;
        let outcome = match outcome {
            Err(GatewayError::ConfirmationRequired {
                confirmation_id, ..
            }) if continued.confirmed => {
                match self.gateway.approve(&self.ctx, &confirmation_id).await {
                    Ok(approval) => {
                        self.gateway
                            .call_tool_relayed(
                                &self.ctx,
                                &self.name,
                                self.arguments.clone(),
                                Some(&approval.token),
                                Some(relay),
                            )
                            .await
                    }
                    Err(err) => Err(err),
                }
            }
            Err(GatewayError::ConfirmationRequired {
                confirmation_id,
                tool,
                expires_at,
                ..
            }) => {
                let pending = Pending {
                    id: confirmation_id,
                    tool,
                    expires_at,
                };
                return self.confirm(&pending).await;
            }
            other => other,
        };
        self.finish(outcome).await
    }

    /// The response for a call's outcome (a confirmation still asked for is an error here:
    /// the call was confirmed already, or cannot be).
    async fn finish(
        &self,
        outcome: Result<ToolOutput, GatewayError>,
    ) -> Result<CallToolResponse, ErrorData> {
        match outcome {
            Ok(output) => Ok(convert::success(output).into()),
            // A protocol error, as the MCP specification lists unknown tools: the client
            // called a name it was not offered (or no longer is; list_changed said so).
            Err(GatewayError::NotFound { .. }) => Err(ErrorData::invalid_params(
                format!("unknown tool {}", shown(&self.name)),
                None,
            )),
            Err(GatewayError::Upstream {
                source: UpstreamError::InputRequired(round),
                ..
            }) => Ok(self.hand_back(*round).await),
            Err(err) => Ok(convert::failure(&err).into()),
        }
    }

    /// Hands the upstream's round to the client under a handle of ours.
    async fn hand_back(&self, round: InputRequiredResult) -> CallToolResponse {
        let catalog = self.gateway.catalog();
        let tool = catalog
            .by_canonical(&self.name)
            .or_else(|| catalog.by_function_name(&self.name));
        // The round came from the upstream, so the call passed the gate: a write that needs
        // confirmation was confirmed.
        let confirmed = tool.is_some_and(|t| self.gateway.requires_confirmation(t));
        drop(catalog);
        let fingerprint = self.fingerprint();
        let key = CallKey {
            name: &self.name,
            fingerprint: &fingerprint,
            arguments: &self.arguments,
        };
        let continued = Continued {
            upstream_state: round.request_state,
            confirmed,
        };
        let ttl = self.gateway.config().confirmations.pending_ttl;
        match self
            .rounds
            .hand_out_any(&self.ctx, key, continued, ttl)
            .await
        {
            Ok(handle) => InputRequiredResult::new(round.input_requests, Some(handle)).into(),
            Err(err) => convert::error_text(format!("[{}] {err}", err.code())).into(),
        }
    }

    /// The called tool's definition fingerprint now (empty if the tool is gone, which the
    /// gate then reports).
    fn fingerprint(&self) -> String {
        let catalog = self.gateway.catalog();
        catalog
            .by_canonical(&self.name)
            .or_else(|| catalog.by_function_name(&self.name))
            .map(|t| t.fingerprint.as_str().to_owned())
            .unwrap_or_default()
    }
}
