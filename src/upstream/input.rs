//! Input rounds (protocol 2026-07-28, "multi round-trip requests"): a server that needs
//! something from its client while serving a call (a sampling, an elicitation, the roots)
//! answers the call with an "input required" result instead of sending a request; the client
//! gets the answers and sends the call again with them and the server's `requestState`.
//!
//! The gateway is its upstreams' client: each round's requests go to the caller through its
//! [`CallRelay`] and the call is sent again, at most [`MAX_ROUNDS`] times. A caller that
//! answers rounds itself (a 2026-07-28 client) gets the round handed back instead
//! ([`UpstreamError::InputRequired`]), and its retry carries the answers
//! ([`CallRelay::resumes`]). Either way the server is told with each call what the caller
//! can answer, and a round asking for anything else is refused.

use std::{sync::Arc, time::Duration};

use futures::future::join_all;
use rmcp::{
    ErrorData, RoleClient,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities,
        ElicitRequestParams, InputRequest, InputRequiredResult, InputResponses, ProtocolVersion,
    },
    service::Peer,
};
use serde_json::Value;

use super::{
    UpstreamError,
    relay::{CallGuard, CallRelay},
    tool_call::{CallLink, send_call},
};

/// Most rounds one call may take (rmcp's own client takes as many): a server that keeps
/// asking cannot hold a call, or its caller's attention, without end.
pub const MAX_ROUNDS: usize = 10;

/// Most requests one round may carry.
const MAX_REQUESTS_PER_ROUND: usize = 16;

/// Pause before resending a round that asked nothing (only `requestState`): the server is
/// waiting on something of its own; doubled each time, at most [`MAX_STATE_ONLY_PAUSE`].
const STATE_ONLY_PAUSE: Duration = Duration::from_millis(50);
const MAX_STATE_ONLY_PAUSE: Duration = Duration::from_millis(250);

/// Sends `params` as a `tools/call` and drives its input rounds through `relay`.
pub(super) async fn call_tool(
    peer: &Peer<RoleClient>,
    link: Option<&CallLink>,
    mut params: CallToolRequestParams,
    guard: &CallGuard,
    relay: Option<&Arc<dyn CallRelay>>,
) -> Result<CallToolResult, UpstreamError> {
    let capabilities = answerable(relay);
    // Older revisions learn the client's capabilities once, at `initialize`.
    let per_call = peer
        .peer_info()
        .is_some_and(|info| info.protocol_version >= ProtocolVersion::V_2026_07_28)
        .then(|| capabilities.clone());
    if let Some(resume) = relay.and_then(|r| r.resumes()) {
        params.input_responses = Some(resume.responses);
        params.request_state = resume.state;
    }
    let mut quiet_rounds = 0u32;
    for _ in 0..MAX_ROUNDS {
        let response = send_call(peer, link, &mut params, guard, per_call.as_ref())
            .await
            .map_err(UpstreamError::from_service)?;
        let round = match response {
            CallToolResponse::Complete(result) => return Ok(result),
            CallToolResponse::InputRequired(round) => round,
            CallToolResponse::Task(_) => {
                return Err(UpstreamError::Protocol(
                    "the server answered with a task, which the gateway did not ask for".to_owned(),
                ));
            }
            _ => {
                return Err(UpstreamError::Protocol(
                    "the server answered tools/call with an unknown kind of result".to_owned(),
                ));
            }
        };
        check(&round, &capabilities)?;
        if relay.is_some_and(|r| r.hands_back_input()) {
            return Err(UpstreamError::InputRequired(Box::new(round)));
        }
        let InputRequiredResult {
            input_requests,
            request_state,
            ..
        } = round;
        let requests = input_requests.unwrap_or_default();
        if requests.is_empty() {
            let pause = STATE_ONLY_PAUSE
                .saturating_mul(1 << quiet_rounds.min(3))
                .min(MAX_STATE_ONLY_PAUSE);
            quiet_rounds += 1;
            tokio::time::sleep(pause).await;
        } else {
            quiet_rounds = 0;
        }
        let responses = answer(relay, requests).await?;
        params.input_responses = (!responses.is_empty()).then_some(responses);
        params.request_state = request_state;
    }
    Err(UpstreamError::InputUnanswered {
        reason: format!("the server still asked for input after {MAX_ROUNDS} rounds"),
    })
}

/// What the caller can answer, as the server is told: sampling, elicitation and roots only;
/// and the MCP Apps extension, as on every connection.
fn answerable(relay: Option<&Arc<dyn CallRelay>>) -> ClientCapabilities {
    let mut capabilities = ClientCapabilities::default();
    capabilities.extensions = Some(super::extensions::declared());
    if let Some(declared) = relay.map(|r| r.capabilities()) {
        capabilities.sampling = declared.sampling;
        capabilities.elicitation = declared.elicitation;
        capabilities.roots = declared.roots;
    }
    capabilities
}

/// The round asks at most [`MAX_REQUESTS_PER_ROUND`] things, each of which the caller
/// declared it can answer (the server was told; asking anything else breaks the protocol).
fn check(
    round: &InputRequiredResult,
    capabilities: &ClientCapabilities,
) -> Result<(), UpstreamError> {
    let requests = round.input_requests.as_ref();
    if requests.is_none_or(|r| r.is_empty()) && round.request_state.is_none() {
        return Err(UpstreamError::Protocol(
            "the server's input round asks for nothing and carries no state".to_owned(),
        ));
    }
    let requests = requests
        .map(|r| r.values().collect::<Vec<_>>())
        .unwrap_or_default();
    if requests.len() > MAX_REQUESTS_PER_ROUND {
        return Err(UpstreamError::Protocol(format!(
            "the server's input round asks {} things, more than {MAX_REQUESTS_PER_ROUND}",
            requests.len()
        )));
    }
    for request in requests {
        let (method, declared) = match request {
            InputRequest::CreateMessage(_) => {
                ("sampling/createMessage", capabilities.sampling.is_some())
            }
            InputRequest::Elicitation(r) => {
                ("elicitation/create", elicits(capabilities, &r.params))
            }
            InputRequest::ListRoots(_) => ("roots/list", capabilities.roots.is_some()),
            _ => ("an unknown request", false),
        };
        if !declared {
            return Err(UpstreamError::Protocol(format!(
                "the server's input round asks for {method}, which its client did not declare"
            )));
        }
    }
    Ok(())
}

/// Whether `capabilities` cover this kind of elicitation; a declaration naming no mode
/// covers forms.
pub fn elicits(capabilities: &ClientCapabilities, params: &ElicitRequestParams) -> bool {
    let url = matches!(params, ElicitRequestParams::UrlElicitationParams { .. });
    capabilities.elicitation.as_ref().is_some_and(|modes| {
        if url {
            modes.url.is_some()
        } else {
            modes.form.is_some() || modes.url.is_none()
        }
    })
}

/// Asks the caller everything the round asks, all at once; the answers under the server's
/// keys. A request the caller does not answer fails the call: a round has no place for an
/// error, and asking again would only ask again.
async fn answer(
    relay: Option<&Arc<dyn CallRelay>>,
    requests: rmcp::model::InputRequests,
) -> Result<InputResponses, UpstreamError> {
    if requests.is_empty() {
        return Ok(InputResponses::new());
    }
    // Without a caller nothing was declared, and `check` refused every request.
    let Some(relay) = relay else {
        return Err(UpstreamError::InputUnanswered {
            reason: "no caller can answer".to_owned(),
        });
    };
    let asked = requests.into_iter().map(|(key, request)| async move {
        let (method, answer) = match request {
            InputRequest::CreateMessage(r) => (
                "sampling/createMessage",
                relay.create_message(r.params).await.and_then(to_json),
            ),
            InputRequest::Elicitation(r) => (
                "elicitation/create",
                relay.elicit(r.params).await.and_then(to_json),
            ),
            InputRequest::ListRoots(_) => {
                ("roots/list", relay.list_roots().await.and_then(to_json))
            }
            _ => (
                "an unknown request",
                Err(ErrorData::invalid_request("not supported", None)),
            ),
        };
        answer
            .map(|value| (key, value))
            .map_err(|error| UpstreamError::InputUnanswered {
                reason: format!("{method}: {}", error.message),
            })
    });
    join_all(asked).await.into_iter().collect()
}

fn to_json<T: serde::Serialize>(result: T) -> Result<Value, ErrorData> {
    serde_json::to_value(result)
        .map_err(|e| ErrorData::internal_error(format!("the answer does not serialize: {e}"), None))
}

#[cfg(test)]
#[path = "input_tests.rs"]
mod tests;
