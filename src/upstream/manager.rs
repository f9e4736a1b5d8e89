//! The upstream manager: one supervised connection per configured server, connected
//! concurrently with per-server deadlines, reconnected with bounded exponential backoff,
//! re-listed on `tools/list_changed` and when the tool list's TTL runs out, shut down cleanly.

use std::{
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::{
        CallToolRequestParams, CallToolResult, CompleteRequestParams, CompleteResult,
        GetPromptRequestParams, GetPromptResult, Prompt, ReadResourceRequestParams,
        ReadResourceResult, Resource, ResourceTemplate, ServerCapabilities, Tool,
    },
    service::{Peer, ServiceError},
};
use tokio::{
    sync::{Notify, watch},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

use super::{
    ConnectOptions, ServerState, UpstreamError,
    cache::{CacheKey, ToolListCache},
    connect,
    connect::{connect_session, connect_user_session},
    input,
    listing::{self, ListBounds, ListRefused},
    relay::{CallRelay, Owner, RelayRegistry},
    sessions::{CallerSessions, Lease, Live},
    tool_call::CallLink,
    watch::{ResourceWatch, UpdateSink, WatchRegistry},
};
use crate::config::{
    CacheConfig, ReconnectConfig, ServerConfig, ServerId, Sessions, TransportConfig,
};

/// Shortest period between TTL re-listings, so a TTL of zero (no caching) cannot spin.
const MIN_RELIST_PERIOD: Duration = Duration::from_secs(1);

/// Shortest period between two re-listings asked for by `tools/list_changed`: a server that
/// announces changes without pause (a bug, or an attack on the gateway's CPU: each listing
/// may be megabytes to parse, scan and fingerprint) gets one listing a second.
const MIN_NOTIFIED_RELIST_GAP: Duration = Duration::from_secs(1);

/// Why a server is down after a call saw its connection die.
const LOST_DURING_A_CALL: &str = "connection lost during a call";

/// How long shutdown waits for supervisors to close their connections and reap children.
const SHUTDOWN_DEADLINE: Duration = Duration::from_secs(10);

/// A server's state as shown to people and APIs.
#[derive(Debug, Clone)]
pub struct ServerStatus {
    pub id: ServerId,
    pub state: ServerState,
    pub last_error: Option<String>,
    /// `stdio`, `streamable-http` or `sse` once connected.
    pub transport: Option<&'static str>,
    /// The last good tool list, if any.
    pub tools: Option<Arc<Vec<Tool>>>,
    /// Whether `tools` may be out of date (the last refresh failed or the connection is down).
    pub stale: bool,
    /// What the sandbox of a stdio server's latest process enforces, as its supervisor said
    /// (`landlock`: `full`, `partial` or `none`; `uid`).
    pub sandbox: Option<serde_json::Value>,
}

#[derive(Debug)]
struct SlotState {
    state: ServerState,
    last_error: Option<String>,
    transport: Option<&'static str>,
    peer: Option<Peer<RoleClient>>,
    /// The connection's own way to send tool calls beside rmcp (a line connection, or
    /// Streamable HTTP at 2026-07-28), if it has one.
    link: Option<CallLink>,
    tools: Option<Arc<Vec<Tool>>>,
    stale: bool,
    /// The supervisor's word on the latest process's sandbox.
    sandbox: Option<super::stdio::SandboxStatus>,
    /// At least one connection attempt has finished (for [`Manager::wait_settled`]).
    settled: bool,
    /// Counts connections, so a caller that saw one connection die marks down that one and
    /// not a newer one.
    connection: u64,
    /// Cancelled by a caller that saw the current connection die: its supervisor then ends
    /// it and connects again. Over HTTP nothing else would tell it, since no process exits
    /// and no pipe closes.
    lost: CancellationToken,
}

impl SlotState {
    fn new() -> SlotState {
        SlotState {
            state: ServerState::Connecting,
            last_error: None,
            transport: None,
            peer: None,
            link: None,
            sandbox: None,
            tools: None,
            stale: false,
            settled: false,
            connection: 0,
            lost: CancellationToken::new(),
        }
    }
}

struct Slot {
    config: ServerConfig,
    /// The cache key: server identity plus a hash of its resolved credentials.
    key: CacheKey,
    state: Mutex<SlotState>,
    tools_changed: Arc<Notify>,
    /// The requests in flight on the connection, for relaying what the server sends
    /// during a call to that call's caller.
    relays: Arc<RelayRegistry>,
    /// The resources callers watch on this server.
    watches: Arc<WatchRegistry>,
    refresh: Notify,
    /// Upstream sessions of one caller each ([`Sessions::PerCaller`] on an HTTP server).
    callers: CallerSessions,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, SlotState> {
        // A poisoned lock only means another thread panicked mid-update of plain data.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

struct Inner {
    slots: Vec<Arc<Slot>>,
    options: ConnectOptions,
    reconnect: ReconnectConfig,
    cache: CacheConfig,
    /// Fresh tool lists; a server is re-listed when its entry expires or is invalidated.
    lists: Mutex<ToolListCache>,
    generation: watch::Sender<u64>,
    cancel: CancellationToken,
    tracker: TaskTracker,
}

impl Inner {
    fn lists(&self) -> MutexGuard<'_, ToolListCache> {
        self.lists
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn bump(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

/// Owns every upstream connection. Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<Inner>,
}

impl Manager {
    /// Starts connecting every server at once; returns immediately.
    pub fn start(
        servers: Vec<ServerConfig>,
        options: ConnectOptions,
        reconnect: ReconnectConfig,
        cache: CacheConfig,
    ) -> Manager {
        let tracker = TaskTracker::new();
        let slots = servers
            .into_iter()
            .map(|config| {
                Arc::new(Slot {
                    key: CacheKey::for_server(&config, &options.env),
                    config,
                    state: Mutex::new(SlotState::new()),
                    tools_changed: Arc::new(Notify::new()),
                    relays: RelayRegistry::new(),
                    watches: WatchRegistry::new(tracker.clone()),
                    refresh: Notify::new(),
                    callers: CallerSessions::default(),
                })
            })
            .collect::<Vec<_>>();
        let inner = Arc::new(Inner {
            slots,
            options,
            reconnect,
            lists: Mutex::new(ToolListCache::new(&cache)),
            cache,
            generation: watch::channel(0).0,
            cancel: CancellationToken::new(),
            tracker,
        });
        for slot in &inner.slots {
            inner.tracker.spawn(supervise(inner.clone(), slot.clone()));
        }
        Manager { inner }
    }

    /// A receiver that changes whenever any server's state or tools change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }

    /// Waits until every server has finished its first connection attempt (successful or
    /// not), or `deadline` passes. Each attempt is itself bounded by its connect deadline.
    pub async fn wait_settled(&self, deadline: Duration) {
        let mut changes = self.changes();
        let settled = async {
            loop {
                if self.inner.slots.iter().all(|s| s.lock().settled) {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(deadline, settled).await;
    }

    /// Waits until `id` is connected, at most `deadline`; returns whether it is.
    pub async fn wait_connected(&self, id: &ServerId, deadline: Duration) -> bool {
        let Some(slot) = self.slot(id) else {
            return false;
        };
        let mut changes = self.changes();
        let connected = async {
            loop {
                if slot.lock().peer.is_some() {
                    return;
                }
                if changes.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(deadline, connected).await;
        slot.lock().peer.is_some()
    }

    /// Every server's status, in configuration order.
    pub fn statuses(&self) -> Vec<ServerStatus> {
        self.inner
            .slots
            .iter()
            .map(|slot| {
                let s = slot.lock();
                ServerStatus {
                    id: slot.config.id.clone(),
                    state: s.state,
                    last_error: s.last_error.clone(),
                    transport: s.transport,
                    tools: s.tools.clone(),
                    stale: s.stale,
                    sandbox: s.sandbox.as_ref().and_then(|status| status.get()),
                }
            })
            .collect()
    }

    /// Asks a server to re-list its tools now (or reconnect at once if it is down).
    pub fn refresh(&self, id: &ServerId) -> bool {
        match self.slot(id) {
            Some(slot) => {
                slot.refresh.notify_one();
                true
            }
            None => false,
        }
    }

    /// Calls a tool, bounded by `timeout`. On timeout the pending request is dropped, which
    /// sends `notifications/cancelled` upstream.
    pub async fn call_tool(
        &self,
        id: &ServerId,
        params: CallToolRequestParams,
        timeout: Duration,
    ) -> Result<CallToolResult, UpstreamError> {
        self.call_tool_relayed(id, params, timeout, None).await
    }

    /// [`Manager::call_tool`], relaying what the server sends during the call (progress,
    /// log messages, sampling and elicitation requests, input rounds) to `relay`. Without a
    /// relay the call still counts as in flight, so nothing of it reaches another call's
    /// caller, and a 2026-07-28 server is told that nothing can be asked.
    pub async fn call_tool_relayed(
        &self,
        id: &ServerId,
        params: CallToolRequestParams,
        timeout: Duration,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> Result<CallToolResult, UpstreamError> {
        self.call_tool_as(id, params, timeout, relay, None).await
    }

    /// [`Manager::call_tool_relayed`] with a user's own token, over a session of that user's
    /// alone: how every call to an `auth = "oauth"` server goes, and only such a server.
    pub async fn call_tool_as(
        &self,
        id: &ServerId,
        params: CallToolRequestParams,
        timeout: Duration,
        relay: Option<Arc<dyn CallRelay>>,
        user: Option<&super::oauth::UserToken>,
    ) -> Result<CallToolResult, UpstreamError> {
        let oauth = self
            .slot(id)
            .is_some_and(|slot| slot.config.oauth.is_some());
        // The session the call goes over: the user's own on an `auth = "oauth"` server (the
        // shared one carries another user's token: never for a call), else the caller's own
        // where one is kept, else the shared one. Only a shared connection's loss marks the
        // server down.
        let (lease, shared) = if oauth {
            let Some(user) = user else {
                return Err(UpstreamError::Unavailable {
                    state: ServerState::AwaitingAuthorization,
                    last_error: Some("the call names no user's token".to_owned()),
                });
            };
            (Some(self.user_session(id, user).await?), None)
        } else {
            let shared = self.call_target(id)?;
            match self.caller_session(id, &shared.0, relay.as_deref()).await? {
                Some(lease) => (Some(lease), None),
                None => (None, Some(shared)),
            }
        };
        let (peer, link, relays, refusals, connection) = match (&lease, shared) {
            (Some(lease), _) => {
                let live = lease.live();
                (
                    live.service.peer().clone(),
                    live.link.clone(),
                    live.relays.clone(),
                    live.refusals.clone(),
                    None,
                )
            }
            (None, shared) => {
                let (peer, connection, link) = shared.ok_or(UpstreamError::ConnectionLost)?;
                (peer, link, self.relays(id), None, Some(connection))
            }
        };
        let guard = relays.register(relay.clone(), timeout);
        let call = async {
            let result =
                input::call_tool(&peer, link.as_ref(), params, &guard, relay.as_ref()).await;
            if relay.is_some() {
                guard.drain().await;
            }
            result
        };
        let outcome = tokio::time::timeout(timeout, call).await;
        drop(guard);
        drop(lease);
        match outcome {
            Err(_) => Err(UpstreamError::Timeout { after: timeout }),
            Ok(Err(err)) => Err(match refusals.and_then(|note| note.take()) {
                // The server refused the user's token: say so, not "connection lost".
                Some(refusal) => UpstreamError::TokenRefused(refusal),
                None => {
                    if let (UpstreamError::ConnectionLost, Some(connection)) = (&err, connection) {
                        self.connection_lost(id, connection);
                    }
                    err
                }
            }),
            Ok(result) => result,
        }
    }

    /// The caller's own upstream session for a relayed call to `id`, when the server keeps
    /// one per caller ([`Sessions::PerCaller`], HTTP only) and the caller is known; `None`:
    /// the shared session (`shared`, up: a caller session is opened beside it, never instead
    /// of it). At the bound of sessions, with every one in use, the call goes over the
    /// shared session.
    async fn caller_session(
        &self,
        id: &ServerId,
        shared: &Peer<RoleClient>,
        relay: Option<&dyn CallRelay>,
    ) -> Result<Option<Lease>, UpstreamError> {
        let Some(slot) = self.slot(id) else {
            return Ok(None);
        };
        let per_caller = slot.config.sessions == Sessions::PerCaller
            && matches!(slot.config.transport, TransportConfig::Http(_))
            // On 2026-07-28 a server asks nothing outside a call's own answer (input rounds),
            // so a session of one's own would buy nothing.
            && shared
                .peer_info()
                .is_some_and(|info| info.protocol_version.has_initialize());
        // Checked before the caller's key is made: most calls need none.
        let Some(key) = relay
            .filter(|_| per_caller)
            .and_then(CallRelay::caller_session)
        else {
            return Ok(None);
        };
        let connect = || async {
            let relays = RelayRegistry::for_one_caller();
            // Tool-list changes and resource updates are the shared session's business.
            let connection = connect_session(
                &slot.config,
                &self.inner.options,
                relays.clone(),
                WatchRegistry::new(self.inner.tracker.clone()),
            )
            .await?;
            Ok(Live {
                service: connection.service,
                relays,
                link: connection.link,
                refusals: connection.refusals,
                watches: None,
            })
        };
        match slot.callers.lease(&key, connect).await {
            Some(lease) => lease.map(Some),
            None => {
                tracing::debug!(server = %id, "every caller session is in use; this call goes over the shared session");
                Ok(None)
            }
        }
    }

    /// The session of `user` on an `auth = "oauth"` server, opened with their token on first
    /// use (and anew when the token changed: the key names its digest).
    async fn user_session(
        &self,
        id: &ServerId,
        user: &super::oauth::UserToken,
    ) -> Result<Lease, UpstreamError> {
        let unavailable = |why: &str| UpstreamError::Unavailable {
            state: ServerState::Degraded,
            last_error: Some(why.to_owned()),
        };
        let slot = self.slot(id).ok_or_else(|| unavailable("not configured"))?;
        let config = super::oauth::with_bearer(&slot.config, &user.secret)
            .ok_or_else(|| unavailable("the user's token cannot be sent as a header"))?;
        let connect = || async {
            let relays = RelayRegistry::for_one_caller();
            let watches = WatchRegistry::new(self.inner.tracker.clone());
            let connection = connect_user_session(
                &config,
                &self.inner.options,
                relays.clone(),
                watches.clone(),
            )
            .await?;
            Ok(Live {
                service: connection.service,
                relays,
                link: connection.link,
                refusals: connection.refusals,
                watches: Some(watches),
            })
        };
        match slot.callers.lease(&user.session, connect).await {
            Some(lease) => lease,
            None => Err(unavailable(
                "every user session of this server is in use; try again shortly",
            )),
        }
    }

    /// Closes the caller sessions of `key` on every server.
    pub fn close_caller_sessions(&self, key: &str) {
        for slot in &self.inner.slots {
            slot.callers.close(key);
        }
    }

    /// How many caller sessions `id` has open.
    pub fn caller_sessions(&self, id: &ServerId) -> usize {
        self.slot(id).map_or(0, |slot| slot.callers.len())
    }

    /// Every tool `id` lists for `user` (all pages), over the user's own session, bounded by
    /// the list deadline: on an `auth = "oauth"` server the list may depend on whose token
    /// it is. A refusal of the token is [`UpstreamError::TokenRefused`].
    pub async fn list_tools_as(
        &self,
        id: &ServerId,
        user: &super::oauth::UserToken,
    ) -> Result<Vec<Tool>, UpstreamError> {
        let (peer, lease) = self.peer_for(id, Some(user)).await?;
        if peer
            .0
            .peer_info()
            .is_none_or(|i| i.capabilities.tools.is_none())
        {
            return Ok(Vec::new());
        }
        let deadline = self.inner.options.limits.list_timeout;
        let bounds = ListBounds::from(&self.inner.options.limits);
        let listed = self
            .request(id, peer, deadline, Owner::Gateway, |peer| async move {
                listing::tools(&peer, bounds).await
            })
            .await
            .and_then(|bounded| bounded.map_err(UpstreamError::from));
        let live = lease.as_ref().map(|lease| lease.live());
        match listed {
            Ok(tools) => {
                if let Some(CallLink::Http(link)) = live.and_then(|l| l.link.as_ref()) {
                    link.listed(&tools);
                }
                Ok(tools)
            }
            Err(err) => Err(
                match live
                    .and_then(|l| l.refusals.as_ref())
                    .and_then(|note| note.take())
                {
                    Some(refusal) => UpstreamError::TokenRefused(refusal),
                    None => err,
                },
            ),
        }
    }

    /// Every resource `id` lists (all pages), bounded by the list deadline; empty when the
    /// server does not offer resources.
    pub async fn list_resources(
        &self,
        id: &ServerId,
        user: Option<&super::oauth::UserToken>,
    ) -> Result<Vec<Resource>, UpstreamError> {
        self.list((id, user), |c| c.resources.is_some(), listing::resources)
            .await
    }

    /// Every resource template `id` lists (all pages), bounded by the list deadline.
    pub async fn list_resource_templates(
        &self,
        id: &ServerId,
        user: Option<&super::oauth::UserToken>,
    ) -> Result<Vec<ResourceTemplate>, UpstreamError> {
        self.list(
            (id, user),
            |c| c.resources.is_some(),
            listing::resource_templates,
        )
        .await
    }

    /// Every prompt `id` lists (all pages), bounded by the list deadline.
    pub async fn list_prompts(
        &self,
        id: &ServerId,
        user: Option<&super::oauth::UserToken>,
    ) -> Result<Vec<Prompt>, UpstreamError> {
        self.list((id, user), |c| c.prompts.is_some(), listing::prompts)
            .await
    }

    /// Reads a resource for `owner`, bounded by `timeout` (as [`Manager::call_tool`]).
    pub async fn read_resource(
        &self,
        id: &ServerId,
        params: ReadResourceRequestParams,
        timeout: Duration,
        (owner, user): (Owner, Option<&super::oauth::UserToken>),
    ) -> Result<ReadResourceResult, UpstreamError> {
        let (peer, _lease) = self.peer_for(id, user).await?;
        self.request(id, peer, timeout, owner, |peer| async move {
            peer.read_resource(params).await
        })
        .await
    }

    /// Watches resource `uri` of `id` for `sink`: the server is subscribed once however many
    /// callers watch, bounded by `timeout`; dropping the watch leaves (the last one out
    /// unsubscribes). A server that does not declare subscriptions is refused at once.
    ///
    /// On an `auth = "oauth"` server the watch is `user`'s own: subscribed over their
    /// session, which it keeps open while it lasts (and which ends it when the server stops
    /// accepting the token the session was opened with).
    pub async fn watch_resource(
        &self,
        id: &ServerId,
        uri: &str,
        sink: UpdateSink,
        (timeout, user): (Duration, Option<&super::oauth::UserToken>),
    ) -> Result<ResourceWatch, UpstreamError> {
        let Some(slot) = self.slot(id) else {
            return Err(UpstreamError::Unavailable {
                state: ServerState::Failed,
                last_error: Some("not configured".to_owned()),
            });
        };
        let ((peer, _), lease) = self.peer_for(id, user).await?;
        let registry = match lease.as_ref().and_then(|l| l.live().watches.clone()) {
            Some(own) => own,
            None => slot.watches.clone(),
        };
        let offered = peer.peer_info().is_some_and(|i| {
            i.capabilities
                .resources
                .as_ref()
                .is_some_and(|r| r.subscribe == Some(true))
        });
        if !offered {
            return Err(UpstreamError::Rpc {
                code: rmcp::model::ErrorCode::METHOD_NOT_FOUND.0,
                message: "the server does not offer resource subscriptions".to_owned(),
            });
        }
        let watch = registry.watch(&peer, uri, sink, timeout).await?;
        Ok(match lease {
            Some(lease) => watch.holding(Box::new(lease)),
            None => watch,
        })
    }

    /// Gets a prompt for `owner`, bounded by `timeout`.
    pub async fn get_prompt(
        &self,
        id: &ServerId,
        params: GetPromptRequestParams,
        timeout: Duration,
        (owner, user): (Owner, Option<&super::oauth::UserToken>),
    ) -> Result<GetPromptResult, UpstreamError> {
        let (peer, _lease) = self.peer_for(id, user).await?;
        self.request(id, peer, timeout, owner, |peer| async move {
            peer.get_prompt(params).await
        })
        .await
    }

    /// Asks for argument completions for `owner`, bounded by `timeout`.
    pub async fn complete(
        &self,
        id: &ServerId,
        params: CompleteRequestParams,
        timeout: Duration,
        (owner, user): (Owner, Option<&super::oauth::UserToken>),
    ) -> Result<CompleteResult, UpstreamError> {
        let (peer, _lease) = self.peer_for(id, user).await?;
        self.request(id, peer, timeout, owner, |peer| async move {
            peer.complete(params).await
        })
        .await
    }

    /// A listing the server's handshake said it offers; asking one that does not would
    /// only earn a method-not-found error.
    async fn list<T, F>(
        &self,
        (id, user): (&ServerId, Option<&super::oauth::UserToken>),
        offered: fn(&ServerCapabilities) -> bool,
        send: F,
    ) -> Result<Vec<T>, UpstreamError>
    where
        F: AsyncFnOnce(
            &Peer<RoleClient>,
            ListBounds,
        ) -> Result<Result<Vec<T>, ListRefused>, ServiceError>,
    {
        let (peer, _lease) = self.peer_for(id, user).await?;
        if !peer.0.peer_info().is_some_and(|i| offered(&i.capabilities)) {
            return Ok(Vec::new());
        }
        let deadline = self.inner.options.limits.list_timeout;
        let bounds = ListBounds::from(&self.inner.options.limits);
        // A listing is the same for every caller: nothing in it is anyone's.
        self.request(id, peer, deadline, Owner::Gateway, async |peer| {
            send(&peer, bounds).await
        })
        .await
        .and_then(|bounded| bounded.map_err(UpstreamError::from))
    }

    /// One request of `owner` on `peer`, bounded by `timeout`, noticing a dead connection.
    async fn request<T, F, Fut>(
        &self,
        id: &ServerId,
        (peer, connection): (Peer<RoleClient>, u64),
        timeout: Duration,
        owner: Owner,
        send: F,
    ) -> Result<T, UpstreamError>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: Future<Output = Result<T, ServiceError>>,
    {
        // Registered only to count: a log message or a server request during this request
        // must not be taken for the only tool call's.
        let _in_flight = self.relays(id).register_request(owner, timeout);
        match tokio::time::timeout(timeout, send(peer)).await {
            Err(_) => Err(UpstreamError::Timeout { after: timeout }),
            Ok(result) => result
                .map_err(UpstreamError::from_service)
                .inspect_err(|err| {
                    if matches!(err, UpstreamError::ConnectionLost) {
                        self.connection_lost(id, connection);
                    }
                }),
        }
    }

    /// A call saw the connection die: stop handing out its peer at once, before the
    /// supervisor notices, so the next call waits for the reconnect instead of failing too.
    fn connection_lost(&self, id: &ServerId, connection: u64) {
        let Some(slot) = self.slot(id) else { return };
        {
            let mut s = slot.lock();
            if s.connection != connection || s.peer.is_none() {
                return;
            }
            s.peer = None;
            s.link = None;
            s.state = ServerState::Degraded;
            s.stale = s.tools.is_some();
            s.last_error = Some(LOST_DURING_A_CALL.to_owned());
            s.lost.cancel();
        }
        self.inner.bump();
    }

    /// Where a request of `user` goes: on an `auth = "oauth"` server, the user's own session
    /// (held by the returned lease; its failures are its own, so it names no shared
    /// connection), and nowhere without a user; elsewhere the shared session.
    async fn peer_for(
        &self,
        id: &ServerId,
        user: Option<&super::oauth::UserToken>,
    ) -> Result<((Peer<RoleClient>, u64), Option<Lease>), UpstreamError> {
        let oauth = self
            .slot(id)
            .is_some_and(|slot| slot.config.oauth.is_some());
        if !oauth {
            return Ok((self.peer(id)?, None));
        }
        let Some(user) = user else {
            return Err(UpstreamError::Unavailable {
                state: ServerState::AwaitingAuthorization,
                last_error: Some("the request names no user's token".to_owned()),
            });
        };
        let lease = self.user_session(id, user).await?;
        let peer = lease.live().service.peer().clone();
        Ok(((peer, USER_SESSION), Some(lease)))
    }

    /// The `capabilities.extensions` `id` declared on its shared session, while connected.
    pub fn server_extensions(&self, id: &ServerId) -> Option<rmcp::model::ExtensionCapabilities> {
        let (peer, _) = self.peer(id).ok()?;
        peer.peer_info()?.capabilities.extensions.clone()
    }

    fn peer(&self, id: &ServerId) -> Result<(Peer<RoleClient>, u64), UpstreamError> {
        self.call_target(id)
            .map(|(peer, connection, _)| (peer, connection))
    }

    /// [`Manager::peer`], with the connection's call link if it has one.
    fn call_target(
        &self,
        id: &ServerId,
    ) -> Result<(Peer<RoleClient>, u64, Option<CallLink>), UpstreamError> {
        let slot = self.slot(id).ok_or_else(|| UpstreamError::Unavailable {
            state: ServerState::Failed,
            last_error: Some("not configured".to_owned()),
        })?;
        let s = slot.lock();
        match (&s.peer, s.state) {
            (Some(peer), ServerState::Ready | ServerState::Degraded) => {
                Ok((peer.clone(), s.connection, s.link.clone()))
            }
            _ => Err(UpstreamError::Unavailable {
                state: s.state,
                last_error: s.last_error.clone(),
            }),
        }
    }

    fn relays(&self, id: &ServerId) -> Arc<RelayRegistry> {
        self.slot(id)
            .map_or_else(RelayRegistry::new, |slot| slot.relays.clone())
    }

    fn slot(&self, id: &ServerId) -> Option<&Arc<Slot>> {
        self.inner.slots.iter().find(|s| &s.config.id == id)
    }

    /// Closes every connection and reaps every child process, bounded by a deadline.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        for slot in &self.inner.slots {
            slot.callers.close_all();
        }
        self.inner.tracker.close();
        if tokio::time::timeout(SHUTDOWN_DEADLINE, self.inner.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("upstream shutdown did not finish within {SHUTDOWN_DEADLINE:?}");
        }
    }
}

/// One server's life: connect, list, serve until the connection drops, back off, again.
async fn supervise(inner: Arc<Inner>, slot: Arc<Slot>) {
    let id = slot.config.id.clone();
    let mut failures: u32 = 0;
    loop {
        // An OAuth server is listed with a connected user's token, and waits for one.
        let config = match listing_config(&inner, &slot).await {
            Listing::Plain => None,
            Listing::As(config) => Some(config),
            Listing::Nobody => {
                awaiting_authorization(&inner, &slot);
                tokio::select! {
                    () = slot.refresh.notified() => {}
                    () = inner.cancel.cancelled() => return,
                }
                continue;
            }
        };
        let attempt = tokio::select! {
            result = connect(
                config.as_deref().unwrap_or(&slot.config),
                &inner.options,
                slot.tools_changed.clone(),
                slot.relays.clone(),
                slot.watches.clone(),
            ) => result,
            () = inner.cancel.cancelled() => return,
        };
        match attempt {
            Ok(connection) => {
                failures = 0;
                let lost = serve(&inner, &slot, connection).await;
                match lost {
                    None => return,
                    Some(reason) => {
                        tracing::warn!(server = %id, error = %reason, "upstream connection lost");
                        mark_down(&inner, &slot, reason);
                    }
                }
            }
            Err(err) => {
                tracing::warn!(server = %id, error = %err, "upstream connection failed");
                mark_down(&inner, &slot, err.to_string());
                failures += 1;
            }
        }
        if failures > inner.reconnect.max_attempts {
            slot.lock().state = ServerState::Failed;
            inner.bump();
            tokio::select! {
                () = slot.refresh.notified() => failures = 0,
                () = inner.cancel.cancelled() => return,
            }
            continue;
        }
        let delay = backoff(&inner.reconnect, failures);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = slot.refresh.notified() => {}
            () = inner.cancel.cancelled() => return,
        }
    }
}

/// The connection number of requests on a user's own session: never a shared connection's,
/// so losing it marks nothing down.
const USER_SESSION: u64 = u64::MAX;

/// How the shared session of a server is opened.
enum Listing {
    /// With its configured headers alone.
    Plain,
    /// With a connected user's token (an `auth = "oauth"` server).
    As(Box<ServerConfig>),
    /// Not at all: an `auth = "oauth"` server nobody has connected.
    Nobody,
}

async fn listing_config(inner: &Inner, slot: &Slot) -> Listing {
    if slot.config.oauth.is_none() {
        return Listing::Plain;
    }
    let Some(tokens) = &inner.options.listing_tokens else {
        return Listing::Nobody;
    };
    match tokens.0.listing_token(&slot.config.id).await {
        Some(token) => match super::oauth::with_bearer(&slot.config, &token) {
            Some(config) => Listing::As(Box::new(config)),
            None => Listing::Nobody,
        },
        None => Listing::Nobody,
    }
}

fn awaiting_authorization(inner: &Inner, slot: &Slot) {
    {
        let mut s = slot.lock();
        s.peer = None;
        s.link = None;
        s.state = ServerState::AwaitingAuthorization;
        s.last_error = Some(
            "no user has connected an account yet: connect at GET \
             /api/v1/mcp/servers/{id}/connect"
                .replace("{id}", slot.config.id.as_str()),
        );
        s.settled = true;
    }
    inner.bump();
}

/// Delay before reconnect attempt `failures` (1-based): doubles from the initial delay up to
/// the maximum. No jitter: one gateway reconnecting its own upstreams is no thundering herd,
/// and deterministic delays keep tests exact.
fn backoff(config: &ReconnectConfig, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1));
    config
        .initial_delay
        .saturating_mul(factor)
        .min(config.max_delay)
}

fn mark_down(inner: &Inner, slot: &Slot, reason: String) {
    // A server that went away took its caller sessions with it.
    slot.callers.close_all();
    // Whatever the server lists after it comes back must be asked afresh.
    inner.lists().invalidate(&slot.key);
    {
        let mut s = slot.lock();
        s.peer = None;
        s.link = None;
        s.state = if s.tools.is_some() {
            ServerState::Degraded
        } else {
            ServerState::Failed
        };
        s.stale = s.tools.is_some();
        s.last_error = Some(reason);
        s.settled = true;
    }
    inner.bump();
}

/// Serves one live connection. Returns `None` on shutdown, or why the connection was lost.
async fn serve(inner: &Inner, slot: &Slot, connection: super::Connection) -> Option<String> {
    let super::Connection {
        service,
        child,
        transport,
        framing,
        link,
        refusals: _,
    } = connection;
    let peer = service.peer().clone();
    let lost_by_a_call = CancellationToken::new();
    {
        let mut s = slot.lock();
        s.lost = lost_by_a_call.clone();
        s.peer = Some(peer.clone());
        s.link = link;
        s.transport = Some(transport);
        s.sandbox = child.as_ref().map(super::stdio::ChildGuard::sandbox_status);
        s.connection += 1;
    }
    relist(inner, slot, &peer, true).await;
    slot.watches
        .renew(&peer, inner.options.limits.list_timeout)
        .await;
    let stop = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    let mut ttl = tokio::time::interval(inner.cache.ttl.max(MIN_RELIST_PERIOD));
    ttl.tick().await;
    // A re-list a `tools/list_changed` asked for, waiting for its turn: the first one after a
    // quiet spell runs at once, the next no sooner than MIN_NOTIFIED_RELIST_GAP after it.
    // Notifications meanwhile merge into one (a server that sends thousands a second costs
    // one listing a gap, not one per notification).
    let mut notified_relist: Option<Instant> = None;
    let mut last_notified_relist: Option<Instant> = None;
    let (lost, by_a_call) = loop {
        tokio::select! {
            _ = &mut waiting => break (true, false),
            () = lost_by_a_call.cancelled() => {
                stop.cancel();
                let _ = waiting.await;
                break (true, true);
            }
            () = slot.tools_changed.notified(), if notified_relist.is_none() => {
                let now = Instant::now();
                let turn = last_notified_relist.map_or(now, |last| last + MIN_NOTIFIED_RELIST_GAP);
                notified_relist = Some(turn.max(now));
            }
            () = tokio::time::sleep_until(notified_relist.unwrap_or_else(Instant::now)),
                if notified_relist.is_some() =>
            {
                notified_relist = None;
                last_notified_relist = Some(Instant::now());
                inner.lists().invalidate_server(&slot.config.id);
                relist(inner, slot, &peer, false).await;
            }
            () = slot.refresh.notified() => {
                inner.lists().invalidate(&slot.key);
                relist(inner, slot, &peer, false).await;
            }
            _ = ttl.tick() => {
                slot.callers.prune();
                let fresh = inner.lists().get(&slot.key, Instant::now().into_std()).is_some();
                if !fresh {
                    relist(inner, slot, &peer, false).await;
                }
            }
            () = inner.cancel.cancelled() => {
                stop.cancel();
                let _ = waiting.await;
                break (false, false);
            }
        }
    };
    let ended = match child {
        Some(child) => child.shutdown().await,
        None => None,
    };
    // Why, in order: a framing fault; how the process ended by itself (a call that saw the
    // connection die may get there first, but the exit, a CPU limit say, is the cause); the
    // call that saw it.
    lost.then(|| {
        framing
            .and_then(|f| f.get())
            .or_else(|| ended.map(|how| format!("connection closed by the server: {how}")))
            .or_else(|| by_a_call.then(|| LOST_DURING_A_CALL.to_owned()))
            .unwrap_or_else(|| "connection closed by the server".to_owned())
    })
}

/// Lists all pages of tools, bounded by the list deadline; a failure keeps the last good
/// list and marks it stale. Announces a change (and so a catalog rebuild) only when the
/// listing changed the server's tools or state, or when `connected` (a new connection is a
/// change in itself, which [`Manager::wait_connected`] waits for).
async fn relist(inner: &Inner, slot: &Slot, peer: &Peer<RoleClient>, connected: bool) {
    let deadline = inner.options.limits.list_timeout;
    let bounds = ListBounds::from(&inner.options.limits);
    let result = match tokio::time::timeout(deadline, listing::tools(peer, bounds)).await {
        Err(_) => Err(format!("tools/list did not answer within {deadline:?}")),
        Ok(Err(err)) => Err(UpstreamError::from_service(err).to_string()),
        Ok(Ok(Err(refused))) => Err(refused.to_string()),
        Ok(Ok(Ok(tools))) => Ok(tools),
    };
    let changed = {
        let mut s = slot.lock();
        let listed = match result {
            Ok(tools) => {
                if let Some(CallLink::Http(link)) = &s.link {
                    link.listed(&tools);
                }
                Ok(Arc::new(tools))
            }
            Err(reason) => {
                tracing::warn!(server = %slot.config.id, error = %reason, "listing tools failed");
                Err(reason)
            }
        };
        let fresh = listed.is_ok();
        let changed = record_listing(&mut s, listed);
        // The list kept (the earlier one when nothing changed) is the one cached.
        if fresh && let Some(tools) = &s.tools {
            inner
                .lists()
                .insert(slot.key.clone(), tools.clone(), Instant::now().into_std());
        }
        changed
    };
    if changed || connected {
        inner.bump();
    }
}

/// Records a listing's outcome in the slot: the new tools, or why listing failed (the last
/// good tools kept, marked stale). Returns whether anything shown of the server changed.
fn record_listing(s: &mut SlotState, listed: Result<Arc<Vec<Tool>>, String>) -> bool {
    s.settled = true;
    let before = (s.state, s.stale, s.last_error.take());
    let tools_changed = match listed {
        Ok(tools) => {
            let changed = s.tools.as_deref() != Some(&*tools);
            if changed {
                s.tools = Some(tools);
            }
            s.state = ServerState::Ready;
            s.stale = false;
            changed
        }
        Err(reason) => {
            s.state = ServerState::Degraded;
            s.stale = s.tools.is_some();
            s.last_error = Some(reason);
            false
        }
    };
    tools_changed
        || (before.0, before.1, before.2.as_deref()) != (s.state, s.stale, s.last_error.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let config = ReconnectConfig {
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(1),
            max_attempts: 5,
        };
        let delays: Vec<_> = (1..=6).map(|n| backoff(&config, n).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(backoff(&config, 200), Duration::from_secs(1));
    }

    fn tools(names: &[&str]) -> Arc<Vec<Tool>> {
        let schema = Arc::new(serde_json::Map::new());
        Arc::new(
            names
                .iter()
                .map(|name| Tool::new(name.to_string(), "A tool.", schema.clone()))
                .collect(),
        )
    }

    #[test]
    fn a_listing_that_changes_nothing_is_not_announced() {
        let mut slot = SlotState::new();
        assert!(record_listing(&mut slot, Ok(tools(&["a", "b"]))));
        assert!(slot.settled);
        assert_eq!(slot.state, ServerState::Ready);

        // The same tools again (a TTL or manual re-list): nothing to rebuild.
        assert!(!record_listing(&mut slot, Ok(tools(&["a", "b"]))));
        assert_eq!(slot.tools.as_deref(), Some(&*tools(&["a", "b"])));

        // A changed list, in any way, is announced.
        assert!(record_listing(&mut slot, Ok(tools(&["a", "c"]))));
        assert_eq!(slot.tools.as_deref(), Some(&*tools(&["a", "c"])));
        let mut described = (*tools(&["a", "c"])).clone();
        described[1].description = Some("A changed tool.".into());
        assert!(record_listing(&mut slot, Ok(Arc::new(described))));
    }

    #[test]
    fn a_failed_listing_is_announced_once_and_its_recovery_too() {
        let mut slot = SlotState::new();
        assert!(record_listing(&mut slot, Ok(tools(&["a"]))));

        assert!(record_listing(&mut slot, Err("no answer".into())));
        assert_eq!(slot.state, ServerState::Degraded);
        assert!(slot.stale);
        assert_eq!(slot.last_error.as_deref(), Some("no answer"));
        assert_eq!(
            slot.tools.as_deref(),
            Some(&*tools(&["a"])),
            "the last good list is kept"
        );

        // The same failure again changes nothing shown; another reason does.
        assert!(!record_listing(&mut slot, Err("no answer".into())));
        assert!(record_listing(&mut slot, Err("refused".into())));

        // The same tools as before the failure: the server is ready and fresh again.
        assert!(record_listing(&mut slot, Ok(tools(&["a"]))));
        assert_eq!(slot.state, ServerState::Ready);
        assert!(!slot.stale);
        assert_eq!(slot.last_error, None);
    }

    #[test]
    fn a_first_listing_that_fails_is_announced() {
        let mut slot = SlotState::new();
        assert!(record_listing(&mut slot, Err("no answer".into())));
        assert!(slot.settled);
        assert_eq!(slot.state, ServerState::Degraded);
        assert!(!slot.stale, "no tools to be stale");
    }
}
