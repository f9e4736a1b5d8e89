//! The MCP server handler: every request acts as the caller its HTTP request authenticated
//! (the `CallContext` the auth layer put in the request's extensions); tools are listed and
//! called, resources read and watched, prompts got and arguments completed through the
//! gateway only.
#![expect(
    deprecated,
    reason = "logging/setLevel and resources/subscribe are deprecated by SEP-2577 and \
              2026-07-28, but session clients still use them"
)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, OnceLock, PoisonError},
};

use rmcp::{
    ErrorData, Peer, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, CancelledNotificationParam, CompleteRequestParams,
        CompleteResult, ErrorCode, Extensions, GetPromptRequestParams, GetPromptResponse,
        Implementation, InitializeRequestParams, InitializeResult, ListPromptsResult,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse, RequestId,
        ServerCapabilities, ServerConfig, SetLevelRequestParams, SubscribeRequestParams,
        SubscriptionFilter, UnsubscribeRequestParams,
    },
    service::{NotificationContext, RequestContext, SubscriptionContext},
    transport::streamable_http_server::SessionId,
};
use serde_json::Value;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{
    call::ToolCall, changes::Follower, content, direct::Direct, rounds::Rounds, scope,
    watches::SessionWatches,
};
use crate::{config::ServerId, gateway::Owner, policy::CallContext, server::AppState};

/// Header carrying the MCP session id (set by rmcp on `initialize`, sent back by clients).
/// A `HeaderName`, not a `&str`: a lookup by string parses the name first.
pub(super) const SESSION_ID_HEADER: http::HeaderName =
    http::HeaderName::from_static("mcp-session-id");

/// The MCP session id the HTTP request behind `extensions` named, if any.
fn session_of(extensions: &Extensions) -> Option<&str> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|p| p.headers.get(&SESSION_ID_HEADER))
        .and_then(|v| v.to_str().ok())
}

/// One handler per MCP session (rmcp's factory makes one per `initialize`), or per request
/// on 2026-07-28, which has no sessions.
pub struct GatewayServer {
    /// What a `tools/call` needs, shared with [`Direct`] once the session is initialized.
    core: Arc<SessionCore>,
    /// Made at `initialize`, run from `notifications/initialized`: announces tool changes
    /// to the session.
    follower: Mutex<Option<Follower>>,
    /// The resources this session watches.
    watches: SessionWatches,
    /// The endpoint's sessions whose calls are answered directly; this session is in it from
    /// `notifications/initialized` until this handler is dropped.
    direct: Arc<Direct>,
    /// This session's id, once it is in `direct`.
    session_id: OnceLock<SessionId>,
    /// Cancelled when rmcp drops this handler (the session ended) or on shutdown; stops the
    /// session's list-changed follower.
    alive: CancellationToken,
    _alive: DropGuard,
}

/// The part of a session's handler that a `tools/call` needs.
pub struct SessionCore {
    state: AppState,
    /// `/mcp/{server}`: only this server's tools, prompts and resources, under their
    /// upstream names; `None` on `/mcp`, the merged, namespaced catalog.
    scope: Option<ServerId>,
    /// The caller that opened this session with `initialize`. Later requests on the session
    /// must come from the same tenant and user: a session id that leaks does not let another
    /// caller act in it (or send its user confirmation prompts). Unset without a session.
    owner: OnceLock<CallContext>,
    /// The least severe upstream log message relayed to this session's client, as it set
    /// with `logging/setLevel`; everything until it does. Per session, never forwarded
    /// upstream: upstream connections are shared by all callers.
    log_level: Mutex<Option<LoggingLevel>>,
    /// Input rounds handed back to 2026-07-28 clients, shared by every handler of the
    /// endpoint (each 2026-07-28 request has its own handler).
    rounds: Arc<Rounds>,
    /// The session's client, from `notifications/initialized` on.
    pub(super) peer: OnceLock<Peer<RoleServer>>,
    /// The calls [`Direct`] is answering, by request id: rmcp's session does not know them,
    /// so the client's `notifications/cancelled` reaches them through here.
    direct_calls: Mutex<HashMap<RequestId, CancellationToken>>,
}

/// The code of the error a cancelled call answers with, where an answer still goes (as
/// JSON-RPC implementations name a request cancelled by its sender).
const REQUEST_CANCELLED: ErrorCode = ErrorCode(-32800);

/// A call [`Direct`] is answering, cancellable by id until dropped.
pub(super) struct DirectCall<'a> {
    core: &'a SessionCore,
    id: RequestId,
}

impl Drop for DirectCall<'_> {
    fn drop(&mut self) {
        self.core.direct_calls().remove(&self.id);
    }
}

impl std::ops::Deref for GatewayServer {
    type Target = SessionCore;

    fn deref(&self) -> &SessionCore {
        &self.core
    }
}

impl GatewayServer {
    pub fn new(
        state: AppState,
        scope: Option<ServerId>,
        rounds: Arc<Rounds>,
        direct: Arc<Direct>,
        alive: CancellationToken,
    ) -> GatewayServer {
        GatewayServer {
            core: Arc::new(SessionCore {
                state,
                scope,
                rounds,
                owner: OnceLock::new(),
                log_level: Mutex::new(None),
                peer: OnceLock::new(),
                direct_calls: Mutex::default(),
            }),
            follower: Mutex::new(None),
            watches: SessionWatches::default(),
            direct,
            session_id: OnceLock::new(),
            _alive: alive.clone().drop_guard(),
            alive,
        }
    }
}

impl Drop for GatewayServer {
    fn drop(&mut self) {
        if let Some(id) = self.session_id.get() {
            self.direct.remove(id);
            // The session ended: so do the upstream sessions opened for it alone.
            if let Some(owner) = self.owner.get()
                && let Some(key) = Owner::caller(&owner.tenant, &owner.user).session_key(id)
            {
                self.state.gateway.current().close_caller_sessions(&key);
            }
        }
    }
}

/// Why a request naming another caller's session is refused.
pub(super) const NOT_OWNER: &str = "this MCP session was opened by another caller";

impl SessionCore {
    /// Whether this session was opened by a caller other than `caller` (another tenant or
    /// user).
    pub(super) fn opened_by_another(&self, caller: &CallContext) -> bool {
        self.owner
            .get()
            .is_some_and(|owner| (&owner.tenant, &owner.user) != (&caller.tenant, &caller.user))
    }

    /// The caller of this request; in a session, its session is the MCP session.
    fn caller(&self, extensions: &Extensions) -> Result<CallContext, ErrorData> {
        let mut ctx = authenticated(extensions)?;
        if self.opened_by_another(&ctx) {
            return Err(ErrorData::invalid_request(NOT_OWNER, None));
        }
        if self.owner.get().is_some()
            && let Some(session) = session_of(extensions)
        {
            ctx.session = session.to_owned();
        }
        Ok(ctx)
    }

    fn direct_calls(&self) -> std::sync::MutexGuard<'_, HashMap<RequestId, CancellationToken>> {
        self.direct_calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a call [`Direct`] answers, so that the client can cancel it by `id`
    /// (`cancel` is its context's token); the registration ends with the returned guard.
    pub(super) fn answering(&self, id: RequestId, cancel: CancellationToken) -> DirectCall<'_> {
        self.direct_calls().insert(id.clone(), cancel);
        DirectCall { core: self, id }
    }

    /// `tools/call`, whether rmcp's session loop or [`Direct`] received it. A call the
    /// client cancels (`notifications/cancelled`) stops: its future is dropped, so the
    /// upstream is told and the audit records it abandoned.
    pub(super) async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        tokio::select! {
            biased;
            () = context.ct.cancelled() => Err(ErrorData::new(
                REQUEST_CANCELLED,
                "the call was cancelled by the client",
                None,
            )),
            answer = self.run_call(request, &context) => answer,
        }
    }

    async fn run_call(
        &self,
        request: CallToolRequestParams,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        // One lease for the whole call, confirmation rounds included.
        let lease = self.state.gateway.current();
        let gateway = &*lease;
        let name = scope::gateway_name(self.scope.as_ref(), gateway, &ctx, &request.name).await?;
        let log_level = *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let call = ToolCall {
            gateway,
            metrics: &self.state.metrics,
            rounds: &self.rounds,
            ctx,
            name,
            arguments: Value::Object(request.arguments.unwrap_or_default()),
            context,
            log_level,
        };
        call.run(request.request_state.as_deref(), request.input_responses)
            .await
    }
}

/// The `CallContext` the auth layer attached to the HTTP request; none means the layer did
/// not run, and nothing is served (fail closed).
fn authenticated(extensions: &Extensions) -> Result<CallContext, ErrorData> {
    extensions
        .get::<http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<Arc<CallContext>>())
        .map(|ctx| CallContext::clone(ctx))
        .ok_or_else(|| {
            ErrorData::internal_error("the request carries no authenticated caller", None)
        })
}

impl ServerHandler for GatewayServer {
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_prompts()
            .enable_completions()
            .build();
        // MCP Apps, as the upstream declared it (see `Gateway::apps_extension`).
        if let Some(apps) = self
            .state
            .gateway
            .current()
            .apps_extension(self.scope.as_ref())
        {
            let mut extensions = rmcp::model::ExtensionCapabilities::new();
            extensions.insert(crate::gateway::apps::EXTENSION.to_owned(), apps);
            capabilities.extensions = Some(extensions);
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("mcpgate", env!("CARGO_PKG_VERSION")))
            .with_instructions(scope::instructions(self.scope.as_ref()))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let ctx = authenticated(&context.extensions)?;
        let follower = Follower::new(self.state.gateway.clone(), ctx.clone()).await;
        *self.follower.lock().unwrap_or_else(PoisonError::into_inner) = Some(follower);
        // rmcp runs `initialize` once per handler; a second one could not change the owner.
        let _ = self.owner.set(ctx);
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let taken = self
            .follower
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(follower) = taken else {
            return;
        };
        let peer = context.peer;
        if let Some(session) = session_of(&context.extensions) {
            let id: SessionId = session.into();
            let _ = self.core.peer.set(peer.clone());
            self.direct.insert(id.clone(), &self.core);
            let _ = self.session_id.set(id);
        }
        // Ends with the session (the handler's drop cancels `alive`), on shutdown, or when
        // the client is gone.
        tokio::spawn(follower.run(self.alive.clone().cancelled_owned(), move || {
            let peer = peer.clone();
            async move { peer.notify_tool_list_changed().await.is_ok() }
        }));
    }

    async fn on_cancelled(
        &self,
        notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        // rmcp cancels the calls its own loop runs; these are the ones answered directly.
        // Only the session's owner reaches here: the endpoint refuses any other caller
        // naming the session ([`Direct::answer`]).
        let Some(id) = notification.request_id else {
            return;
        };
        if let Some(cancel) = self.direct_calls().get(&id) {
            cancel.cancel();
        }
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(SubscriptionFilter::builder().tools_list_changed().build())
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let ctx = self.caller(&context.request_context().extensions)?;
        if context.accepted().tools_list_changed == Some(true) {
            let stop = async {
                tokio::select! {
                    () = context.cancelled() => {}
                    () = self.alive.cancelled() => {}
                }
            };
            let sink = context.sink().clone();
            Follower::new(self.state.gateway.clone(), ctx)
                .await
                .run(stop, move || {
                    let sink = sink.clone();
                    async move { sink.notify_tool_list_changed().await.is_ok() }
                })
                .await;
        } else {
            context.cancelled().await;
        }
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        let tools = self.state.gateway.current().model_tools(&ctx).await;
        Ok(ListToolsResult::with_all_items(scope::tools(
            self.scope.as_ref(),
            &tools,
        )))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.core.call_tool(request, context).await
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        let prompts = self
            .state
            .gateway
            .current()
            .list_prompts(&ctx, self.scope.as_ref())
            .await;
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        self.state
            .gateway
            .current()
            .get_prompt(&ctx, self.scope.as_ref(), &request.name, request.arguments)
            .await
            .map(Into::into)
            .map_err(content::error)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        self.state
            .gateway
            .current()
            .complete(&ctx, self.scope.as_ref(), request)
            .await
            .map_err(content::error)
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        let resources = self
            .state
            .gateway
            .current()
            .list_resources(&ctx, self.scope.as_ref())
            .await;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        let templates = self
            .state
            .gateway
            .current()
            .list_resource_templates(&ctx, self.scope.as_ref())
            .await;
        Ok(ListResourceTemplatesResult::with_all_items(templates))
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&context.extensions)?;
        *self
            .log_level
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(request.level);
        Ok(())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        if self.watches.contains(&request.uri) {
            return Ok(());
        }
        self.watches.check_room()?;
        let sink = self.watches.sink(&context.peer, &self.alive);
        let watch = self
            .state
            .gateway
            .current()
            .watch_resource(&ctx, self.scope.as_ref(), &request.uri, sink)
            .await
            .map_err(content::error)?;
        self.watches.insert(&request.uri, watch)
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.caller(&context.extensions)?;
        self.watches.remove(&request.uri);
        Ok(())
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let ctx = self.caller(&context.extensions)?;
        self.state
            .gateway
            .current()
            .read_resource(&ctx, self.scope.as_ref(), &request.uri)
            .await
            .map(Into::into)
            .map_err(content::error)
    }
}
