//! One `tools/call` request, sent without rmcp's `call_tool` so that its id and progress token
//! are known (for [`super::relay`]), it may carry what the caller can answer, and it is still
//! cancelled upstream when abandoned.

use std::time::Duration;

use rmcp::{
    RoleClient,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
        CancelledNotificationParam, ClientCapabilities, ClientRequest, JsonRpcMessage,
        ProgressToken, RequestId, RequestMetaObject, ServerJsonRpcMessage, ServerResult,
    },
    service::{Peer, PeerRequestOptions, ServiceError},
};

use super::{http_link::HttpLink, line_transport::LineLink, relay::CallGuard};

/// A connection's own way to send tool calls beside rmcp's service loop.
#[derive(Debug, Clone)]
pub(crate) enum CallLink {
    /// A line connection (stdio, in-process).
    Line(LineLink),
    /// A Streamable HTTP connection at 2026-07-28 or later.
    Http(HttpLink),
}

/// Sends a `tools/call` itself rather than through rmcp's `call_tool`, to learn the id and
/// progress token rmcp gives the request (rmcp overwrites any token set in the request's
/// meta). They are registered as soon as rmcp has queued the request, with no await in
/// between, so the upstream's first notification (which must wait for the request to cross
/// the connection) finds them; should this thread be descheduled right there, a progress read
/// before its token is known still holds every call's answer until handled
/// ([`super::relay::RelayRegistry::announce`]). `capabilities`, on 2026-07-28, replace the connection's own in
/// the request's `_meta`: what this call's caller can answer.
///
/// On a line connection (`link`) whose server opened with `initialize`, a call that carries no
/// capabilities of its own is written directly instead ([`send_direct`]): rmcp then adds
/// nothing to such a request but its progress token. On a Streamable HTTP connection at
/// 2026-07-28, a call to a tool that promotes no argument to a header is posted by the
/// caller itself ([`HttpLink::call`]).
pub(super) async fn send_call(
    peer: &Peer<RoleClient>,
    link: Option<&CallLink>,
    params: &mut CallToolRequestParams,
    guard: &CallGuard,
    capabilities: Option<&ClientCapabilities>,
) -> Result<CallToolResponse, ServiceError> {
    match link {
        Some(CallLink::Line(link))
            if capabilities.is_none()
                && peer
                    .peer_info()
                    .is_some_and(|info| info.protocol_version.has_initialize()) =>
        {
            return send_direct(peer, link, params, guard).await;
        }
        Some(CallLink::Http(link)) if link.sends(&params.name) => {
            let answer = link
                .call(peer, params, capabilities, |id, token| {
                    guard.sent(id, token)
                })
                .await?;
            return answer_of(answer);
        }
        _ => {}
    }
    // Every connection counts notifications as it reads them (line and SSE transports
    // themselves, rmcp's Streamable HTTP one through `Announcing`): the answer waits for
    // those read before it.
    // Boxed: rmcp's request and response futures are several KiB, which the direct paths
    // above would otherwise carry and move with every call.
    Box::pin(send_through_rmcp(peer, params, guard, capabilities)).await
}

/// Sends a `tools/call` through rmcp's service loop.
async fn send_through_rmcp(
    peer: &Peer<RoleClient>,
    params: &CallToolRequestParams,
    guard: &CallGuard,
    capabilities: Option<&ClientCapabilities>,
) -> Result<CallToolResponse, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params.clone()));
    let mut options = PeerRequestOptions::no_options();
    if let Some(capabilities) = capabilities {
        let mut meta = RequestMetaObject::new();
        meta.set_client_capabilities(capabilities.clone());
        options = options.with_meta(meta);
    }
    let handle = peer.send_request_with_option(request, options).await?;
    guard.sent(handle.id.clone(), handle.progress_token.clone());
    let abandoned = CancelOnDrop {
        peer: Some(peer.clone()),
        id: handle.id.clone(),
    };
    let result = handle.await_response().await;
    abandoned.disarm();
    response(result?)
}

/// Sends a `tools/call` as rmcp would, but written and answered on the line connection
/// itself rather than through rmcp's service loop; its progress token is its id.
async fn send_direct(
    peer: &Peer<RoleClient>,
    link: &LineLink,
    params: &mut CallToolRequestParams,
    guard: &CallGuard,
) -> Result<CallToolResponse, ServiceError> {
    let mut call = link.register().ok_or(ServiceError::TransportClosed)?;
    guard.sent(call.id.clone(), ProgressToken(call.id.clone()));
    let abandoned = CancelOnDrop {
        peer: Some(peer.clone()),
        id: call.id.clone(),
    };
    let sent = link.send(&call, params).await;
    let answer = match sent {
        Ok(()) => call.answer().await,
        Err(err) => {
            tracing::debug!(error = %err, "writing a tool call to the upstream failed");
            None
        }
    };
    abandoned.disarm();
    answer_of(answer.ok_or(ServiceError::TransportClosed)?)
}

/// A `tools/call` answer (a response or an error) as the kind of response it is.
fn answer_of(answer: ServerJsonRpcMessage) -> Result<CallToolResponse, ServiceError> {
    match answer {
        JsonRpcMessage::Response(answer) => response(answer.result),
        JsonRpcMessage::Error(error) => Err(ServiceError::McpError(error.error)),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// A `tools/call` answer as the kind of response it is.
fn response(result: ServerResult) -> Result<CallToolResponse, ServiceError> {
    match result {
        ServerResult::CallToolResult(result) => Ok(CallToolResponse::Complete(result)),
        ServerResult::InputRequiredResult(round) => Ok(CallToolResponse::InputRequired(round)),
        ServerResult::CreateTaskResult(task) => Ok(CallToolResponse::Task(task)),
        // A tools/call answer without content decodes as an empty result.
        ServerResult::EmptyResult(_) => Ok(CallToolResponse::Complete(CallToolResult::success(
            Vec::new(),
        ))),
        _ => Err(ServiceError::UnexpectedResponse),
    }
}

/// How long telling a server that a call was abandoned may take.
const CANCEL_NOTICE_TIMEOUT: Duration = Duration::from_secs(5);

/// Tells the server a call was abandoned (timed out, or its caller went away) when the
/// call's future is dropped before the answer came, as rmcp's own `call_tool` does.
struct CancelOnDrop {
    peer: Option<Peer<RoleClient>>,
    id: RequestId,
}

impl CancelOnDrop {
    fn disarm(mut self) {
        self.peer = None;
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(peer) = self.peer.take() else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let params = CancelledNotificationParam::new(
            Some(self.id.clone()),
            Some("request abandoned by the caller".to_owned()),
        );
        // Drop cannot await; the notice is one bounded send on the connection's channel.
        runtime.spawn(async move {
            let _ =
                tokio::time::timeout(CANCEL_NOTICE_TIMEOUT, peer.notify_cancelled(params)).await;
        });
    }
}
