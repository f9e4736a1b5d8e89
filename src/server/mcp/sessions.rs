//! rmcp's in-memory session manager with a cap on open sessions: each session holds a task
//! and its channels until the client deletes it or it idles out, so an authenticated client
//! must not be able to open them without end.
//!
//! It also knows who opened each session, from the moment rmcp makes its id at `initialize`
//! until the session is closed (rmcp closes every session through its manager, whatever
//! ended it): the endpoint refuses any other caller that names the session, before the
//! client has even sent `notifications/initialized`.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use futures::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, GetExtensions as _, JsonRpcMessage, ServerJsonRpcMessage},
    transport::streamable_http_server::{
        SessionId, SessionManager,
        session::{
            ServerSseMessage,
            local::{LocalSessionManager, LocalSessionManagerError},
        },
    },
};

use axum::{
    body::Body,
    extract::Request,
    http::StatusCode,
    response::{IntoResponse as _, Response},
};
use http_body_util::BodyExt as _;
use rmcp::{
    model::{ClientNotification, InitializedNotification},
    transport::streamable_http_server::session::{
        RestoreOutcome, SessionRestoreMarker, SessionState, SessionStore, SessionStoreError,
    },
};

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::answers::{self, Routed, Tag};
use crate::{
    policy::CallContext,
    server::ApiError,
    store::redis::{Event, Events, RedisSessions},
};

/// Most MCP sessions open at once. A session costs a task and a few small channels, and
/// idles out (`[server] mcp_session_idle`, 5 minutes) when its client vanishes; a thousand covers
/// many users with several clients each while bounding what one misbehaving client can hold.
pub const MAX_SESSIONS: usize = 1024;

/// Why a session operation failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionsError {
    #[error("too many open MCP sessions (at most {max}); close one or retry later")]
    Full { max: usize },
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
}

/// Who opened a session.
#[derive(Debug)]
struct Opener {
    tenant: String,
    user: String,
}

/// [`LocalSessionManager`], refusing new sessions beyond a cap, and knowing who opened each.
#[derive(Debug)]
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
    openers: Mutex<HashMap<SessionId, Opener>>,
    /// Shared with other instances: see [`CappedSessions::shared`].
    completes_handshakes: bool,
    /// Tags the ids of the requests sessions send, when shared: see [`super::answers`].
    tag: Option<Tag>,
}

impl CappedSessions {
    /// At most `max` sessions, each closed once it received nothing for `idle`.
    pub fn new(max: usize, idle: Duration) -> CappedSessions {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        CappedSessions {
            inner,
            max,
            openers: Mutex::default(),
            completes_handshakes: false,
            tag: None,
        }
    }

    /// Sessions shared with other instances behind a load balancer, where any message of a
    /// client may reach any instance. Their handshake is complete once `initialize` is
    /// answered: the client's `notifications/initialized` may reach another instance, and
    /// the session here must not wait for it for ever (a later `initialized` changes
    /// nothing: the handler acts on the first). The requests they send carry ids naming
    /// this endpoint, so that an answer reaching another instance finds its way back.
    pub fn shared(mut self) -> CappedSessions {
        self.completes_handshakes = true;
        self.tag = Some(Tag::new());
        self
    }

    /// The tag in the ids of the requests this endpoint's sessions send, when shared.
    pub fn tag(&self) -> Option<&Tag> {
        self.tag.as_ref()
    }

    fn openers(&self) -> MutexGuard<'_, HashMap<SessionId, Opener>> {
        self.openers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether session `id` was opened by a caller other than `caller` (another tenant or
    /// user); `false` for a session not known here.
    pub fn opened_by_another(&self, id: &str, caller: &CallContext) -> bool {
        self.openers()
            .get(id)
            .is_some_and(|o| (&o.tenant, &o.user) != (&caller.tenant, &caller.user))
    }

    /// Whether session `id` is open in this process.
    pub async fn is_here(&self, id: &str) -> bool {
        self.inner.sessions.read().await.contains_key(id)
    }

    /// Who opened session `id` here, if it is here.
    fn opener(&self, id: &str) -> Option<(String, String)> {
        self.openers()
            .get(id)
            .map(|o| (o.tenant.clone(), o.user.clone()))
    }

    /// How long a session may receive nothing before it is closed.
    pub fn idle(&self) -> Option<Duration> {
        self.inner.session_config.keep_alive
    }

    /// Hands a client's answer, forwarded by the instance it reached, to session `id`.
    async fn answered(&self, id: String, message: &str) {
        let message = match serde_json::from_str::<ClientJsonRpcMessage>(message) {
            Ok(message) => message,
            Err(err) => {
                tracing::debug!(error = %err, "a forwarded MCP answer is not a message");
                return;
            }
        };
        if let Err(err) = self
            .inner
            .accept_message(&SessionId::from(id), message)
            .await
        {
            tracing::debug!(error = %err, "a forwarded MCP answer found no session");
        }
    }

    /// Sessions open now.
    pub async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    /// Whether no session can be made now.
    pub async fn full(&self) -> bool {
        self.open().await >= self.max
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }
}

impl SessionManager for CappedSessions {
    type Error = SessionsError;
    type Transport = Routed;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Checked before the inner manager takes its own lock, so concurrent creations can
        // overshoot by at most their number: the cap bounds resources, it is not a quota.
        if self.full().await {
            return Err(SessionsError::Full { max: self.max });
        }
        let (id, transport) = self.inner.create_session().await?;
        Ok((id, Routed::new(transport, self.tag.clone())))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        // Known before the answer names the session to its client. Without a caller (the
        // auth layer did not run) the handler refuses `initialize` itself.
        if let Some(caller) = caller_of(&message) {
            let opener = Opener {
                tenant: caller.tenant.clone(),
                user: caller.user.clone(),
            };
            self.openers().insert(id.clone(), opener);
        }
        let parts = parts_of(&message).cloned();
        let restoring = matches!(&message, JsonRpcMessage::Request(r)
            if r.request.extensions().get::<SessionRestoreMarker>().is_some());
        let answer = self.inner.initialize_session(id, message).await;
        if answer.is_err() {
            self.openers().remove(id);
        }
        let answer = answer?;
        if self.completes_handshakes && !restoring {
            // As the client would send it, over a request naming the session.
            let mut initialized = ClientJsonRpcMessage::notification(
                ClientNotification::InitializedNotification(InitializedNotification::default()),
            );
            if let Some(mut parts) = parts
                && let Ok(value) = http::HeaderValue::from_str(id)
            {
                parts.headers.insert("mcp-session-id", value);
                initialized.insert_extension(parts);
            }
            self.inner.accept_message(id, initialized).await?;
        }
        Ok(answer)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.openers().remove(id);
        Ok(self.inner.close_session(id).await?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_stream(id, message).await?)
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        Ok(self.inner.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.inner.resume(id, last_event_id).await?)
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        if self.full().await {
            return Err(SessionsError::Full { max: self.max });
        }
        Ok(match self.inner.restore_session(id).await? {
            RestoreOutcome::Restored(transport) => {
                RestoreOutcome::Restored(Routed::new(transport, self.tag.clone()))
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }
}

/// The sessions of one endpoint, shared by every instance through Redis: rmcp stores a
/// session's `initialize` after the handshake and restores the session from it on an
/// instance that does not have it; the record also names who opened the session, which
/// [`SharedSessions::refusal`] checks before anything is restored.
pub struct SharedSessions {
    records: RedisSessions,
    sessions: Arc<CappedSessions>,
    events: Option<Events>,
    view: String,
    max_body_bytes: usize,
}

impl SharedSessions {
    /// Sessions of `view` (`merged` or a server id); with `events`, a session a client ends on
    /// one instance is closed on the others, and a client's answer to a request sent here
    /// reaches its session wherever the client posted it, until `stop`.
    pub fn new(
        records: RedisSessions,
        sessions: Arc<CappedSessions>,
        events: Option<Events>,
        view: &str,
        max_body_bytes: usize,
        stop: &CancellationToken,
    ) -> SharedSessions {
        if let Some(events) = &events {
            let mut received = events.subscribe();
            let (sessions, view, stop) = (sessions.clone(), view.to_owned(), stop.clone());
            tokio::spawn(async move {
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => return,
                        event = received.recv() => event,
                    };
                    match event {
                        Ok(Event::McpSessionClosed { view: closed, id }) if closed == view => {
                            if let Err(err) = sessions.close_session(&SessionId::from(id)).await {
                                tracing::debug!(error = %err, "an MCP session did not close");
                            }
                        }
                        Ok(Event::McpAnswer {
                            tag,
                            session,
                            message,
                        }) if sessions.tag().is_some_and(|own| own.as_str() == tag) => {
                            sessions.answered(session, &message).await;
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                        Err(broadcast::error::RecvError::Closed) => return,
                    }
                }
            });
        }
        SharedSessions {
            records,
            sessions,
            events,
            view: view.to_owned(),
            max_body_bytes,
        }
    }

    /// Sends on a client's answer (a `POST` to session `id`) to a request another instance
    /// sent, to that instance: `202 Accepted`, as rmcp answers an answer, or 503 when the
    /// other instances cannot be told. Anything else comes back, its body read, for rmcp.
    pub async fn forward_answer(&self, id: &str, request: Request) -> Result<Response, Request> {
        let (Some(events), Some(tag)) = (&self.events, self.sessions.tag()) else {
            return Err(request);
        };
        if request.method() != http::Method::POST
            || !super::direct::is_json(request.headers().get(http::header::CONTENT_TYPE))
        {
            return Err(request);
        }
        let (parts, body) = request.into_parts();
        let Ok(collected) = http_body_util::Limited::new(body, self.max_body_bytes)
            .collect()
            .await
        else {
            return Ok((
                StatusCode::BAD_REQUEST,
                "the request body could not be read",
            )
                .into_response());
        };
        let bytes = collected.to_bytes();
        let Some(to) = answers::foreign_tag(&bytes, tag) else {
            return Err(Request::from_parts(parts, Body::from(bytes)));
        };
        let event = Event::McpAnswer {
            tag: to,
            session: id.to_owned(),
            message: String::from_utf8_lossy(&bytes).into_owned(),
        };
        Ok(match events.publish(event).await {
            Ok(()) => StatusCode::ACCEPTED.into_response(),
            Err(err) => {
                tracing::error!(error = %err, "an MCP client's answer cannot be sent on");
                unavailable("the MCP session store is unavailable")
            }
        })
    }

    /// Tells the other instances that the client ended session `id` here.
    pub async fn ended(&self, id: &str) {
        if let Some(events) = &self.events {
            let event = Event::McpSessionClosed {
                view: self.view.clone(),
                id: id.to_owned(),
            };
            if let Err(err) = events.publish(event).await {
                tracing::warn!(error = %err, "the other instances were not told a session ended");
            }
        }
    }

    /// The refusal of a request naming a session that is not here, when its record says
    /// another caller opened it (403, as for a session here), or the record cannot be read
    /// (503). `None`: let rmcp serve it (and restore it, if there is a record).
    pub async fn refusal(&self, id: &str, caller: Option<&CallContext>) -> Option<Response> {
        if self.sessions.is_here(id).await {
            return None;
        }
        match self.records.get(id).await {
            Ok(Some(record)) => {
                let owner = (record["tenant"].as_str(), record["user"].as_str());
                let same = caller
                    .is_some_and(|c| owner == (Some(c.tenant.as_str()), Some(c.user.as_str())));
                (!same).then(super::direct::not_owner)
            }
            Ok(None) => None,
            Err(err) => {
                tracing::error!(error = %err, "an MCP session record cannot be read");
                Some(unavailable("the MCP session store is unavailable"))
            }
        }
    }
}

fn unavailable(message: &str) -> Response {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        message,
    )
    .into_response()
}

fn store_error(err: crate::store::StoreError) -> SessionStoreError {
    Box::new(err)
}

#[async_trait::async_trait]
impl SessionStore for SharedSessions {
    async fn load(&self, session_id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(record) = self.records.get(session_id).await.map_err(store_error)? else {
            return Ok(None);
        };
        let state = serde_json::from_value(record["state"].clone())?;
        Ok(Some(state))
    }

    async fn store(&self, session_id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        // Known since `initialize` (see `initialize_session`); a session nobody opened is
        // not shared.
        let Some((tenant, user)) = self.sessions.opener(session_id) else {
            return Ok(());
        };
        let record = serde_json::json!({ "state": state, "tenant": tenant, "user": user });
        self.records
            .put(session_id, &record)
            .await
            .map_err(store_error)
    }

    async fn delete(&self, session_id: &str) -> Result<(), SessionStoreError> {
        self.records.delete(session_id).await.map_err(store_error)
    }
}

/// The HTTP request's parts, which rmcp puts in a request message's extensions.
fn parts_of(message: &ClientJsonRpcMessage) -> Option<&http::request::Parts> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    request.request.extensions().get::<http::request::Parts>()
}

/// The authenticated caller of a request rmcp received over HTTP: the auth layer's
/// [`CallContext`] in the HTTP request's parts.
fn caller_of(message: &ClientJsonRpcMessage) -> Option<&CallContext> {
    parts_of(message)?
        .extensions
        .get::<Arc<CallContext>>()
        .map(Arc::as_ref)
}
