//! rmcp's in-memory session manager with a cap on open sessions: each session holds a task
//! and its channels until the client deletes it or it idles out, so an authenticated client
//! must not be able to open them without end.

use std::time::Duration;

use futures::Stream;
use rmcp::{
    model::{ClientJsonRpcMessage, ServerJsonRpcMessage},
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

/// [`LocalSessionManager`], refusing new sessions beyond a cap.
#[derive(Debug)]
pub struct CappedSessions {
    inner: LocalSessionManager,
    max: usize,
}

impl CappedSessions {
    /// At most `max` sessions, each closed once it received nothing for `idle`.
    pub fn new(max: usize, idle: Duration) -> CappedSessions {
        let mut inner = LocalSessionManager::default();
        inner.session_config.keep_alive = Some(idle);
        CappedSessions { inner, max }
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
        Ok(self.inner.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.inner.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
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
