//! The calling MCP client's side of a tool call's relay: the upstream's progress (under the
//! client's own progress token), log messages (at or above the level the client asked for),
//! and sampling, elicitation and roots requests (only those the client declared it can
//! answer) go to the client that made the call. A 2026-07-28 client takes no requests: an
//! upstream's input round is handed back to it, and its retry brings the answers.
#![expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577, but upstream servers still \
              send them and the gateway relays them faithfully"
)]

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::{
    ErrorData, Peer, RoleServer,
    model::{
        ClientCapabilities, ClientResult, CreateMessageRequest, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequest, ElicitRequestParams, ElicitResult, ListRootsRequest,
        ListRootsResult, LoggingLevel, LoggingMessageNotificationParam, Notification,
        ProgressNotificationParam, ProgressToken, ProtocolVersion, RequestId, ServerNotification,
        ServerRequest,
    },
    service::{OriginatingRequestId, PeerRequestOptions, RequestContext, ServiceError},
};
use tokio_util::sync::CancellationToken;

use super::direct::CallStream;
use crate::{
    gateway::{CallRelay, Owner, Resume, covers_elicitation},
    policy::CallContext,
};

/// Relays one `tools/call` of one MCP client.
pub(super) struct ClientRelay {
    peer: Peer<RoleServer>,
    /// The client's `tools/call` id: requests to the client ride that call's stream.
    call: RequestId,
    /// The client's progress token for the call; without one the client asked for no
    /// progress, and none is sent.
    progress_token: Option<ProgressToken>,
    /// The least severe log message relayed; `None` relays all.
    min_level: Option<LoggingLevel>,
    /// Cancelled when the client cancels the call: requests relayed for it stop waiting.
    cancelled: CancellationToken,
    /// What the client declared it can answer: at `initialize`, or with this request on
    /// 2026-07-28.
    capabilities: ClientCapabilities,
    /// Tenant and user: who sees what is relayed.
    owner: Owner,
    /// The caller's conversation (its MCP session), for an upstream session of its own.
    session: String,
    /// The client answers input rounds itself (2026-07-28).
    rounds: bool,
    /// The retry of a round handed back to the client.
    resume: Option<Resume>,
    /// The call's own answer stream, when the call is answered on its request's task
    /// (`direct`): progress goes there instead of through the session.
    stream: Option<CallStream>,
}

impl ClientRelay {
    /// Relays the call `ctx` made with `context`; log messages below the level the request
    /// names (on 2026-07-28) or else `session_level` (set with `logging/setLevel`) are
    /// dropped. `resume`: the call is the retry of a round handed back.
    pub(super) fn for_call(
        context: &RequestContext<RoleServer>,
        ctx: &CallContext,
        session_level: Option<LoggingLevel>,
        resume: Option<Resume>,
    ) -> Arc<dyn CallRelay> {
        let rounds = context
            .protocol_version()
            .is_some_and(|v| v >= ProtocolVersion::V_2026_07_28);
        let owner = Owner::caller(&ctx.tenant, &ctx.user);
        Arc::new(ClientRelay {
            peer: context.peer.clone(),
            call: context.id.clone(),
            progress_token: context.meta.get_progress_token(),
            min_level: context.meta.log_level().or(session_level),
            cancelled: context.ct.clone(),
            capabilities: context.client_capabilities().unwrap_or_default(),
            owner,
            session: ctx.session.clone(),
            rounds,
            resume,
            stream: context.extensions.get::<CallStream>().cloned(),
        })
    }

    /// Sends `request` to the client on its call's stream and waits for the answer (the
    /// upstream side bounds the wait by the call's timeout).
    async fn ask(&self, mut request: ServerRequest) -> Result<ClientResult, ErrorData> {
        insert_origin(&mut request, &self.call);
        let answer = async {
            self.peer
                .send_request_with_option(request, PeerRequestOptions::no_options())
                .await?
                .await_response()
                .await
        };
        let answer = tokio::select! {
            answer = answer => answer,
            () = self.cancelled.cancelled() => {
                return Err(ErrorData::internal_error("the caller cancelled the tool call", None));
            }
        };
        answer.map_err(|err| match err {
            // The client's own refusal goes back to the upstream as the client said it.
            ServiceError::McpError(error) => error,
            other => {
                ErrorData::internal_error(format!("the caller could not be asked: {other}"), None)
            }
        })
    }
}

/// Severity order of the log levels, least severe first (RFC 5424's, as MCP's).
fn severity(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

fn insert_origin(request: &mut ServerRequest, call: &RequestId) {
    let origin = OriginatingRequestId(call.clone());
    match request {
        ServerRequest::CreateMessageRequest(r) => {
            r.extensions.insert(origin);
        }
        ServerRequest::ElicitRequest(r) => {
            r.extensions.insert(origin);
        }
        ServerRequest::ListRootsRequest(r) => {
            r.extensions.insert(origin);
        }
        _ => {}
    }
}

/// The error an upstream gets when the calling client cannot answer a request.
fn not_declared(method: &str, capability: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "{method} is not available: the calling client did not declare the {capability} \
             capability"
        ),
        None,
    )
}

fn unexpected(method: &str) -> ErrorData {
    ErrorData::internal_error(
        format!("the caller answered {method} with another kind of result"),
        None,
    )
}

impl CallRelay for ClientRelay {
    fn progress(&self, mut params: ProgressNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let Some(token) = &self.progress_token else {
                return;
            };
            params.progress_token = token.clone();
            if let Some(stream) = &self.stream {
                let progress = ServerNotification::ProgressNotification(Notification::new(params));
                if !stream.send(progress).await {
                    tracing::debug!("progress not relayed to the caller: it is gone");
                }
            } else if let Err(error) = self.peer.notify_progress(params).await {
                tracing::debug!(%error, "progress not relayed to the caller");
            }
        })
    }

    fn log(&self, params: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if self
                .min_level
                .is_some_and(|min| severity(params.level) < severity(min))
            {
                return;
            }
            // On the call's own stream when it has one (`direct`), so the client reads the
            // message before the answer, as the upstream sent it; else on the session's.
            if let Some(stream) = &self.stream {
                let log = ServerNotification::LoggingMessageNotification(Notification::new(params));
                if !stream.send(log).await {
                    tracing::debug!("log message not relayed to the caller: it is gone");
                }
            } else if let Err(error) = self.peer.notify_logging_message(params).await {
                tracing::debug!(%error, "log message not relayed to the caller");
            }
        })
    }

    fn create_message(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async move {
            const METHOD: &str = "sampling/createMessage";
            if self.capabilities.sampling.is_none() {
                return Err(not_declared(METHOD, "sampling"));
            }
            let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
            match self.ask(request).await? {
                ClientResult::CreateMessageResult(result) => Ok(*result),
                _ => Err(unexpected(METHOD)),
            }
        })
    }

    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(async move {
            const METHOD: &str = "elicitation/create";
            let url = matches!(params, ElicitRequestParams::UrlElicitationParams { .. });
            if !covers_elicitation(&self.capabilities, &params) {
                let capability = if url {
                    "URL elicitation"
                } else {
                    "form elicitation"
                };
                return Err(not_declared(METHOD, capability));
            }
            let request = ServerRequest::ElicitRequest(ElicitRequest::new(params));
            match self.ask(request).await? {
                ClientResult::ElicitResult(result) => Ok(result),
                _ => Err(unexpected(METHOD)),
            }
        })
    }

    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorData>> {
        Box::pin(async move {
            const METHOD: &str = "roots/list";
            if self.capabilities.roots.is_none() {
                return Err(not_declared(METHOD, "roots"));
            }
            let request = ServerRequest::ListRootsRequest(ListRootsRequest::default());
            match self.ask(request).await? {
                ClientResult::ListRootsResult(result) => Ok(result),
                _ => Err(unexpected(METHOD)),
            }
        })
    }

    fn capabilities(&self) -> ClientCapabilities {
        self.capabilities.clone()
    }

    fn owner(&self) -> Owner {
        self.owner.clone()
    }

    fn caller_session(&self) -> Option<String> {
        self.owner.session_key(&self.session)
    }

    fn hands_back_input(&self) -> bool {
        self.rounds
    }

    fn resumes(&self) -> Option<Resume> {
        self.resume.clone()
    }
}
