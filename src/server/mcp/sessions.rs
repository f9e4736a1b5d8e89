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
    transport::{
        WorkerTransport,
        streamable_http_server::{
            SessionId, SessionManager,
            session::{
                ServerSseMessage,
                local::{LocalSessionManager, LocalSessionManagerError, LocalSessionWorker},
            },
        },
    },
};

use crate::policy::CallContext;

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
        }
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

    /// How long a session may receive nothing before it is closed.
    pub fn idle(&self) -> Option<Duration> {
        self.inner.session_config.keep_alive
    }

    /// Sessions open now.
    pub async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }
}

impl SessionManager for CappedSessions {
    type Error = SessionsError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        // Checked before the inner manager takes its own lock, so concurrent creations can
        // overshoot by at most their number: the cap bounds resources, it is not a quota.
        if self.open().await >= self.max {
            return Err(SessionsError::Full { max: self.max });
        }
        Ok(self.inner.create_session().await?)
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
        let answer = self.inner.initialize_session(id, message).await;
        if answer.is_err() {
            self.openers().remove(id);
        }
        Ok(answer?)
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
}

/// The authenticated caller of a request rmcp received over HTTP: the auth layer's
/// [`CallContext`] in the HTTP request's parts, which rmcp puts in the message's extensions.
fn caller_of(message: &ClientJsonRpcMessage) -> Option<&CallContext> {
    let JsonRpcMessage::Request(request) = message else {
        return None;
    };
    request
        .request
        .extensions()
        .get::<http::request::Parts>()?
        .extensions
        .get::<Arc<CallContext>>()
        .map(Arc::as_ref)
}
