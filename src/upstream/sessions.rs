//! Upstream sessions of one caller each, for an HTTP server configured with
//! [`Sessions::PerCaller`](crate::config::Sessions): everything the server sends on such a
//! session (sampling and elicitation asked on its standalone stream, log messages) is that
//! caller's, so it reaches that caller and no other, with nothing to guess.
//!
//! A session is opened by its caller's first relayed call (a handshake: the first call pays
//! it), kept while in use, closed once idle for [`IDLE`] (noticed by the next call or by the
//! server's supervisor, at each re-listing tick), and at most [`MAX_SESSIONS`] are open
//! per server: at the bound the least recently used idle one is closed for a new one, and when
//! none is idle the call goes over the shared session (where what names no call is refused
//! unless it can be attributed). A session whose connection ended is opened anew.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use rmcp::{RoleClient, service::RunningService};
use tokio::{sync::OnceCell, time::Instant};

use super::{UpstreamClient, UpstreamError, relay::RelayRegistry, tool_call::CallLink};

/// Caller sessions open at once per server.
pub const MAX_SESSIONS: usize = 128;

/// A caller session unused this long is closed.
pub const IDLE: Duration = Duration::from_secs(300);

/// One caller's live upstream session.
pub(super) struct Live {
    pub service: RunningService<RoleClient, UpstreamClient>,
    pub relays: Arc<RelayRegistry>,
    pub link: Option<CallLink>,
    /// Where the server's refusal of the token is noted (`auth = "oauth"`).
    pub refusals: Option<super::oauth::RefusalNote>,
    /// The resources watched over this session (a user's own, on an `auth = "oauth"`
    /// server); `None` where the shared session watches.
    pub watches: Option<Arc<super::watch::WatchRegistry>>,
}

/// What a caller session holds once connected: [`Live`], or a stand-in in tests.
pub(super) trait Connected: Send + Sync {
    /// The connection ended (the server closed it, or it failed).
    fn is_closed(&self) -> bool;
    /// Ends the connection now.
    fn close(&self);
}

impl Connected for Live {
    fn is_closed(&self) -> bool {
        self.service.is_closed()
    }

    fn close(&self) {
        // Its transport then ends the upstream session with a DELETE.
        self.service.cancellation_token().cancel();
    }
}

struct Session<T: Connected> {
    /// Connected by the first call that needs it; the others wait for that.
    live: OnceCell<T>,
    /// Calls using it right now: an idle session is one with none.
    calls: AtomicUsize,
    used: Mutex<Instant>,
}

impl<T: Connected> Session<T> {
    fn used(&self) -> MutexGuard<'_, Instant> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn idle(&self) -> bool {
        self.calls.load(Ordering::SeqCst) == 0
    }

    fn closed(&self) -> bool {
        self.live.get().is_some_and(T::is_closed)
    }
}

impl<T: Connected> Drop for Session<T> {
    fn drop(&mut self) {
        // Closed now rather than whenever the service notices.
        if let Some(live) = self.live.get() {
            live.close();
        }
    }
}

/// The caller sessions of one server.
pub(super) struct CallerSessions<T: Connected = Live> {
    open: Mutex<HashMap<String, Arc<Session<T>>>>,
    /// Sessions open at once.
    max: usize,
    /// A session unused this long is closed.
    idle: Duration,
}

impl<T: Connected> Default for CallerSessions<T> {
    fn default() -> Self {
        CallerSessions::bounded(MAX_SESSIONS, IDLE)
    }
}

/// One call's use of a caller session; the session counts as idle once every lease is gone.
pub(super) struct Lease<T: Connected = Live> {
    session: Arc<Session<T>>,
}

impl<T: Connected> Lease<T> {
    pub fn live(&self) -> &T {
        self.session
            .live
            .get()
            .expect("a lease is handed out once the session is connected")
    }
}

impl<T: Connected> Drop for Lease<T> {
    fn drop(&mut self) {
        *self.session.used() = Instant::now();
        self.session.calls.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T: Connected> CallerSessions<T> {
    /// At most `max` sessions open, each closed once unused for `idle`.
    pub fn bounded(max: usize, idle: Duration) -> Self {
        CallerSessions {
            open: Mutex::new(HashMap::new()),
            max,
            idle,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Arc<Session<T>>>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `key`'s session, connected with `connect` if it is not yet; `None` when every one of
    /// [`MAX_SESSIONS`] is in use (the call then goes over the shared session). A failed
    /// connection is not kept: the next call tries again.
    pub async fn lease<F, Fut>(
        &self,
        key: &str,
        connect: F,
    ) -> Option<Result<Lease<T>, UpstreamError>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, UpstreamError>>,
    {
        let (session, closing) = {
            let mut open = self.lock();
            let closing = prune(&mut open, self.idle);
            let session = match open.get(key) {
                Some(session) => session.clone(),
                None => {
                    if open.len() >= self.max && !evict_one(&mut open) {
                        return None;
                    }
                    let session = Arc::new(Session {
                        live: OnceCell::new(),
                        calls: AtomicUsize::new(0),
                        used: Mutex::new(Instant::now()),
                    });
                    open.insert(key.to_owned(), session.clone());
                    session
                }
            };
            session.calls.fetch_add(1, Ordering::SeqCst);
            (session, closing)
        };
        // Closed outside the lock: dropping a session's service ends its connection.
        drop(closing);
        let lease = Lease {
            session: session.clone(),
        };
        match session.live.get_or_try_init(connect).await {
            Ok(_) => Some(Ok(lease)),
            Err(err) => {
                drop(lease);
                let mut open = self.lock();
                if open.get(key).is_some_and(|s| Arc::ptr_eq(s, &session)) && session.idle() {
                    open.remove(key);
                }
                Some(Err(err))
            }
        }
    }

    /// Closes the sessions idle past [`IDLE`] or whose connection ended, with no new call
    /// needed to notice (the server's supervisor calls this now and then).
    pub fn prune(&self) {
        let closing = prune(&mut self.lock(), self.idle);
        drop(closing);
    }

    /// How many caller sessions are open.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Closes `key`'s session (its caller's session ended); calls still using it finish
    /// first, as the last lease goes.
    pub fn close(&self, key: &str) {
        let closed = self.lock().remove(key);
        drop(closed);
    }

    /// Closes the sessions whose key `matches`; calls still using one finish first.
    pub fn close_matching(&self, matches: impl Fn(&str) -> bool) {
        let closed: Vec<Arc<Session<T>>> = {
            let mut open = self.lock();
            let keys: Vec<String> = open.keys().filter(|k| matches(k)).cloned().collect();
            keys.iter().filter_map(|k| open.remove(k)).collect()
        };
        drop(closed);
    }

    /// Closes every caller session (the server's shutdown or reconnection).
    pub fn close_all(&self) {
        let all: Vec<Arc<Session<T>>> = self.lock().drain().map(|(_, s)| s).collect();
        drop(all);
    }
}

/// Removes the sessions idle past `idle` and those whose connection ended and that no call
/// uses; returns them, to be dropped (closed) outside the lock.
fn prune<T: Connected>(
    open: &mut HashMap<String, Arc<Session<T>>>,
    idle: Duration,
) -> Vec<Arc<Session<T>>> {
    let now = Instant::now();
    let stale: Vec<String> = open
        .iter()
        .filter(|(_, s)| {
            s.idle() && (s.closed() || now.saturating_duration_since(*s.used()) >= idle)
        })
        .map(|(key, _)| key.clone())
        .collect();
    stale.iter().filter_map(|key| open.remove(key)).collect()
}

/// Closes the least recently used idle session; `false` when every one is in use.
fn evict_one<T: Connected>(open: &mut HashMap<String, Arc<Session<T>>>) -> bool {
    let oldest = open
        .iter()
        .filter(|(_, s)| s.idle())
        .min_by_key(|(_, s)| *s.used())
        .map(|(key, _)| key.clone());
    oldest.and_then(|key| open.remove(&key)).is_some()
}

#[cfg(test)]
#[path = "sessions_tests.rs"]
mod tests;
