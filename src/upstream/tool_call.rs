//! One `tools/call` request, sent without rmcp's `call_tool` so that its id and progress token
//! are known (for [`super::relay`]), it may carry what the caller can answer, and it is still
//! cancelled upstream when abandoned.

use std::time::Duration;

use rmcp::{
    RoleClient,
    model::{
        CallToolRequest, CallToolRequestParams, CallToolResponse, CallToolResult,
        CancelledNotificationParam, ClientCapabilities, ClientRequest, RequestId,
        RequestMetaObject, ServerResult,
    },
    service::{Peer, PeerRequestOptions, ServiceError},
};

use super::relay::CallGuard;

/// Sends a `tools/call` itself rather than through rmcp's `call_tool`, to learn the id and
/// progress token rmcp gives the request (rmcp overwrites any token set in the request's
/// meta). They are registered as soon as rmcp has queued the request, with no await in
/// between, so the upstream's first notification (which must wait for the request to cross
/// the connection) finds them. `capabilities`, on 2026-07-28, replace the connection's own in
/// the request's `_meta`: what this call's caller can answer.
pub(super) async fn send_call(
    peer: &Peer<RoleClient>,
    params: CallToolRequestParams,
    guard: &CallGuard,
    capabilities: Option<ClientCapabilities>,
) -> Result<CallToolResponse, ServiceError> {
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let mut options = PeerRequestOptions::no_options();
    if let Some(capabilities) = capabilities {
        let mut meta = RequestMetaObject::new();
        meta.set_client_capabilities(capabilities);
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
    match result? {
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
