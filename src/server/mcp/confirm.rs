//! Write tools the user must confirm, over MCP. A client that declared elicitation is asked
//! with a yes/no form: over its session (`elicitation/create`), or on 2026-07-28 as an input
//! round (the confirmation id travels as `requestState`). On yes, the confirmation is approved
//! as the same caller and the call runs once with the token; otherwise it is discarded. A
//! client that cannot be asked gets a tool error naming the confirmation and how to approve
//! it out of band; once approved, the same caller repeating the same call runs it once (the
//! gate takes the approval by what it is bound to), or the token comes back in `_meta`.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use rmcp::{
    RoleServer,
    model::{
        CallToolResult, ClientResult, ElicitRequest, ElicitRequestParams, ElicitResult,
        ElicitationAction, ElicitationSchema, InputRequest, InputRequiredResult, InputResponses,
        ProtocolVersion, ServerRequest,
    },
    service::{Peer, PeerRequestOptions, RequestContext},
};
use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::convert::error_text;
use crate::{
    gateway::{CallRelay, Gateway, GatewayError, ToolOutput},
    policy::CallContext,
    server::auth::SESSION_HEADER,
    store::rfc3339,
};

/// `tools/call` `_meta` key carrying a confirmation token approved out of band.
pub const TOKEN_META_KEY: &str = "io.mcpgate/confirmationToken";

/// Key of the one input request in an input round.
const INPUT_KEY: &str = "mcpgate_confirm";

/// The form's one field: run the tool or not.
const APPROVE_FIELD: &str = "approve";

/// Most bytes of arguments shown in the form: enough to judge a call, short enough to read;
/// a cut is said.
const MAX_SHOWN_ARGUMENT_BYTES: usize = 2048;

/// Longest `requestState` taken for a confirmation id (ours are 32 hex characters).
const MAX_CONFIRMATION_ID_CHARS: usize = 64;

/// A confirmation the gateway asked for.
#[derive(Debug, Clone)]
pub struct Pending {
    pub id: String,
    /// Canonical id, `server.tool`.
    pub tool: String,
    pub expires_at: std::time::SystemTime,
}

/// How the user can be asked.
pub enum Channel {
    /// `elicitation/create` over the client's session.
    Session(Peer<RoleServer>),
    /// A 2026-07-28 input round: the client asks and calls again.
    InputRound,
    /// The client cannot ask: approval happens out of band.
    OutOfBand,
}

/// What the user said.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    Approved,
    Declined,
    /// No usable answer: why.
    Unanswered(String),
}

impl Answer {
    fn from_result(result: &ElicitResult) -> Answer {
        let yes = result
            .content
            .as_ref()
            .and_then(|c| c.get(APPROVE_FIELD))
            .and_then(Value::as_bool)
            == Some(true);
        match result.action {
            ElicitationAction::Accept if yes => Answer::Approved,
            _ => Answer::Declined,
        }
    }
}

/// How this request's client can be asked, from the capabilities it declared.
pub fn channel(context: &RequestContext<RoleServer>) -> Channel {
    // An elicitation capability naming no mode means form (the 2025-06-18 shape).
    let can_ask = context
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    if !can_ask {
        return Channel::OutOfBand;
    }
    let rounds = context
        .protocol_version()
        .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
    if rounds {
        Channel::InputRound
    } else {
        Channel::Session(context.peer.clone())
    }
}

/// The yes/no form: which tool, with which arguments.
fn form(pending: &Pending, arguments: &Value) -> ElicitRequestParams {
    let shown = serde_json::to_string_pretty(arguments).unwrap_or_else(|_| "{}".to_owned());
    let shown = if shown.len() > MAX_SHOWN_ARGUMENT_BYTES {
        let mut end = MAX_SHOWN_ARGUMENT_BYTES;
        while !shown.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}\n… ({} more bytes)", &shown[..end], shown.len() - end)
    } else {
        shown
    };
    let message = format!(
        "Allow `{}` to run with these arguments?\n\n{shown}\n\n(mcpgate confirmation {}; the \
         answer applies to this one call)",
        pending.tool, pending.id
    );
    let schema = ElicitationSchema::builder()
        .required_bool_with(APPROVE_FIELD, |b| {
            b.title("Run this tool")
                .description("Yes runs the tool once with the arguments shown.")
        })
        .build()
        .expect("the one required field is defined");
    ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    }
}

/// Asks over the session; waits at most `wait` (the confirmation's own lifetime) or until
/// the call is cancelled.
pub async fn ask(
    peer: &Peer<RoleServer>,
    pending: &Pending,
    arguments: &Value,
    wait: Duration,
    cancelled: &CancellationToken,
) -> Answer {
    let request = ServerRequest::ElicitRequest(ElicitRequest::new(form(pending, arguments)));
    let asked = async {
        peer.send_request_with_option(request, PeerRequestOptions::with_timeout(wait))
            .await?
            .await_response()
            .await
    };
    tokio::select! {
        answer = asked => match answer {
            Ok(ClientResult::ElicitResult(result)) => Answer::from_result(&result),
            Ok(_) => Answer::Unanswered("the client answered with something else".to_owned()),
            Err(err) => Answer::Unanswered(format!("the client did not answer: {err}")),
        },
        () = cancelled.cancelled() => Answer::Unanswered("the call was cancelled".to_owned()),
    }
}

/// The input round that asks a 2026-07-28 client.
pub fn input_round(pending: &Pending, arguments: &Value) -> InputRequiredResult {
    let request = InputRequest::Elicitation(ElicitRequest::new(form(pending, arguments)));
    InputRequiredResult::new(
        Some(BTreeMap::from([(INPUT_KEY.to_owned(), request)])),
        Some(pending.id.clone()),
    )
}

/// The answer a 2026-07-28 client brought back with its retry.
pub fn round_answer(responses: Option<&InputResponses>) -> Answer {
    match responses.and_then(|r| r.get(INPUT_KEY)) {
        None => Answer::Unanswered("the retry carried no answer to the confirmation".to_owned()),
        Some(value) => match ElicitResult::deserialize(value) {
            Ok(result) => Answer::from_result(&result),
            Err(_) => Answer::Unanswered("the answer to the confirmation is malformed".to_owned()),
        },
    }
}

/// A `requestState` that can be one of our confirmation ids.
pub fn confirmation_id(request_state: &str) -> Option<&str> {
    let plausible = !request_state.is_empty()
        && request_state.len() <= MAX_CONFIRMATION_ID_CHARS
        && request_state.bytes().all(|b| b.is_ascii_hexdigit());
    plausible.then_some(request_state)
}

/// What came of the user's answer.
pub enum Decided {
    /// Approved: the call ran (or the gate refused it after all), with this outcome.
    Ran(Result<ToolOutput, GatewayError>),
    /// Not approved: the tool error to return; the confirmation is discarded.
    Refused(CallToolResult),
}

/// Acts on the answer: approve and run once (relaying to `relay`), or discard the
/// confirmation. `name` is the name called; approval and the call are made as `ctx`, so a
/// confirmation of another caller, tool or arguments cannot be used.
pub async fn decide(
    gateway: &Gateway,
    ctx: &CallContext,
    name: &str,
    arguments: Value,
    confirmation_id: &str,
    answer: Answer,
    relay: Arc<dyn CallRelay>,
) -> Decided {
    let why = match answer {
        Answer::Approved => {
            let outcome = match gateway.approve(ctx, confirmation_id).await {
                Ok(approval) => {
                    gateway
                        .call_tool_relayed(ctx, name, arguments, Some(&approval.token), Some(relay))
                        .await
                }
                Err(err) => Err(err),
            };
            return Decided::Ran(outcome);
        }
        Answer::Declined => "[confirmation_declined] the user declined".to_owned(),
        Answer::Unanswered(why) => format!("[confirmation_unanswered] {why}"),
    };
    // A confirmation nobody will approve is taken off the pending list at once.
    if let Err(err) = gateway.deny(ctx, confirmation_id).await {
        tracing::debug!(error = %err, "discarding an unapproved confirmation failed");
    }
    Decided::Refused(error_text(format!("{why}; `{name}` was not run")))
}

/// The tool error for a client that cannot ask: what to approve, where, and how to retry.
pub fn out_of_band(pending: &Pending, ctx: &CallContext) -> CallToolResult {
    error_text(format!(
        "[confirmation_required] `{tool}` needs the user's confirmation and this client cannot \
         ask for it. Approve confirmation {id} (pending until {until}) with `POST \
         /api/v1/mcp/confirmations/{id}/approve` using the same credentials and the header \
         `{SESSION_HEADER}: {session}`, then call this tool again with exactly the same \
         arguments: the approval lets that one call run, once. (Or pass the returned \
         `confirmationToken` in the request's `_meta` under `{TOKEN_META_KEY}`.)",
        tool = pending.tool,
        id = pending.id,
        until = rfc3339(pending.expires_at),
        session = ctx.session,
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn accepted(content: Value) -> ElicitResult {
        ElicitResult::new(ElicitationAction::Accept).with_content(content)
    }

    #[test]
    fn only_an_explicit_yes_approves() {
        let yes = accepted(json!({ "approve": true }));
        assert_eq!(Answer::from_result(&yes), Answer::Approved);
        let no = accepted(json!({ "approve": false }));
        assert_eq!(Answer::from_result(&no), Answer::Declined);
        let odd = accepted(json!({ "approve": "yes" }));
        assert_eq!(Answer::from_result(&odd), Answer::Declined);
        let cancel = ElicitResult::new(ElicitationAction::Cancel);
        assert_eq!(Answer::from_result(&cancel), Answer::Declined);
    }

    #[test]
    fn round_answers_are_read_under_our_key() {
        let answers = InputResponses::from([(
            INPUT_KEY.to_owned(),
            json!({ "action": "accept", "content": { "approve": true } }),
        )]);
        assert_eq!(round_answer(Some(&answers)), Answer::Approved);
        let elsewhere = InputResponses::from([(
            "other".to_owned(),
            json!({ "action": "accept", "content": { "approve": true } }),
        )]);
        assert!(matches!(
            round_answer(Some(&elsewhere)),
            Answer::Unanswered(_)
        ));
        let malformed = InputResponses::from([(INPUT_KEY.to_owned(), json!("yes"))]);
        assert!(matches!(
            round_answer(Some(&malformed)),
            Answer::Unanswered(_)
        ));
    }

    #[test]
    fn request_state_must_look_like_a_confirmation_id() {
        assert_eq!(confirmation_id("0a1b2c"), Some("0a1b2c"));
        assert_eq!(confirmation_id(""), None);
        assert_eq!(confirmation_id("../x"), None);
        assert_eq!(confirmation_id(&"a".repeat(65)), None);
    }

    #[test]
    fn the_form_shows_tool_and_arguments_and_cuts_long_ones() {
        let pending = Pending {
            id: "c1".into(),
            tool: "demo.add_note".into(),
            expires_at: std::time::UNIX_EPOCH,
        };
        let ElicitRequestParams::FormElicitationParams { message, .. } =
            form(&pending, &json!({ "title": "t", "body": "é".repeat(3000) }))
        else {
            panic!("a form");
        };
        assert!(message.contains("`demo.add_note`"));
        assert!(message.contains("\"title\": \"t\""));
        assert!(message.contains("more bytes)"));
        assert!(message.len() < MAX_SHOWN_ARGUMENT_BYTES * 2 + 200);
    }
}
