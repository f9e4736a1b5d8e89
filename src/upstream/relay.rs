//! Relaying what an upstream sends during a tool call (progress, log messages, sampling and
//! elicitation requests) to the caller that made the call, and the caller's answers back.
//!
//! Each connection has a [`RelayRegistry`]: every request in flight on it is registered for
//! its duration (a [`CallGuard`] ends it). Progress is routed by the upstream request's
//! progress token; a request the transport ties to one of our requests (Streamable HTTP marks
//! the stream it arrived on) goes to that call; anything else goes to the one call known,
//! and only when exactly one is known, so nothing reaches another caller.
//!
//! rmcp hands each notification to its own task, so one sent just before a call's answer can
//! be handled just after it: ended calls linger for [`LINGER`] so their last progress and log
//! messages still find their caller (and count as known, so none reaches a newer call of
//! someone else). A log message carries nothing that ties it to a request, so it goes to the
//! one running call when every other call known is its owner's too ([`RelayRegistry::for_log`]).
//!
//! On 2026-07-28 a server does not send requests: it answers a call with an input round
//! (see [`super::input`]), which the relay answers the same way, or hands back to a caller
//! that answers rounds itself.
#![expect(
    deprecated,
    reason = "sampling and logging are deprecated by SEP-2577, but servers still send them \
              and the gateway relays them faithfully"
)]

use std::{
    collections::{BTreeSet, VecDeque},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use futures::future::BoxFuture;
use rmcp::{
    ErrorData,
    model::{
        ClientCapabilities, CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams,
        ElicitResult, GetExtensions, InputResponses, JsonRpcMessage, ListRootsResult,
        LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken, RequestId,
        ServerJsonRpcMessage, ServerNotification,
    },
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Where one tool call's upstream traffic goes: the caller's side of the relay.
pub trait CallRelay: Send + Sync {
    /// A `notifications/progress` for the call (its token is the upstream's; the relay
    /// substitutes its caller's own).
    fn progress(&self, params: ProgressNotificationParam) -> BoxFuture<'_, ()>;
    /// A `notifications/message` sent while the call ran.
    fn log(&self, params: LoggingMessageNotificationParam) -> BoxFuture<'_, ()>;
    /// A `sampling/createMessage` the upstream asked during the call.
    fn create_message(
        &self,
        params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>>;
    /// An `elicitation/create` the upstream asked during the call.
    fn elicit(&self, params: ElicitRequestParams)
    -> BoxFuture<'_, Result<ElicitResult, ErrorData>>;

    /// A `roots/list` the upstream asked during the call. None by default: a caller that
    /// does not say it has roots is not asked for them.
    fn list_roots(&self) -> BoxFuture<'_, Result<ListRootsResult, ErrorData>> {
        Box::pin(async { Err(unroutable("roots/list")) })
    }

    /// What the caller can answer (its sampling, elicitation and roots capabilities). A
    /// 2026-07-28 server is told with each call, so it asks only for what can be answered;
    /// nothing by default.
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities::default()
    }

    /// Who sees what is relayed. A log message that cannot be tied to one call reaches the
    /// only running call only when every other request known is its owner's too (or the
    /// gateway's own). Unknown by default: then it is nobody else's.
    fn owner(&self) -> Owner {
        Owner::Unknown
    }

    /// Which caller's upstream session the call may go over, on a server with a session per
    /// caller ([`crate::config::Sessions::PerCaller`]): one key per caller and conversation.
    /// By default the owner's (one session per tenant and user); `None` (an unknown owner)
    /// keeps the call on the shared session.
    fn caller_session(&self) -> Option<String> {
        match self.owner() {
            Owner::Caller(key) => Some(key),
            Owner::Gateway | Owner::Unknown => None,
        }
    }

    /// `true` when the caller answers input rounds itself (a 2026-07-28 client, which takes
    /// no requests): an upstream's round is then handed back to it
    /// ([`super::UpstreamError::InputRequired`]) instead of being answered through this relay.
    fn hands_back_input(&self) -> bool {
        false
    }

    /// The caller's answers to a round handed back earlier, with the upstream's state, to
    /// send with this call (the retry of that round).
    fn resumes(&self) -> Option<Resume> {
        None
    }
}

/// Whose request one registered request is, for log messages that name no request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// The gateway's own (listing): nothing in it is any caller's.
    Gateway,
    /// One caller's: tenant and user, as an opaque key.
    Caller(String),
    /// Not known: its messages are nobody else's.
    Unknown,
}

impl Owner {
    /// The owner of `tenant`'s `user`'s requests.
    pub fn caller(tenant: &str, user: &str) -> Owner {
        // The tenant's length first: no tenant and user pair can read as another.
        Owner::Caller(format!("{}:{tenant}{user}", tenant.len()))
    }

    /// The key of this owner's upstream session for its conversation `session`
    /// ([`CallRelay::caller_session`]); `None` unless the owner is a caller.
    pub fn session_key(&self, session: &str) -> Option<String> {
        match self {
            // The owner's key is length-prefixed, and its length is written first too.
            Owner::Caller(key) => Some(format!("{}:{key}{session}", key.len())),
            Owner::Gateway | Owner::Unknown => None,
        }
    }
}

/// The retry of an input round the caller answered: what goes back to the upstream.
#[derive(Debug, Clone, Default)]
pub struct Resume {
    /// The caller's answers, under the upstream's keys.
    pub responses: InputResponses,
    /// The upstream's `requestState`, exactly as it sent it.
    pub state: Option<String>,
}

/// A relay found for one upstream message, with the bounds of the call it belongs to.
#[derive(Clone)]
pub struct Routed {
    pub relay: Arc<dyn CallRelay>,
    /// Counts the call's notifications being relayed, so its answer can wait for them.
    busy: Arc<Busy>,
    /// Cancelled when the call ends (answered, timed out or abandoned): a relayed request
    /// must not outlive it.
    pub ended: CancellationToken,
    /// What is left of the call's own timeout bounds a relayed request.
    pub timeout: Duration,
}

/// How long an ended call still receives its late notifications.
const LINGER: Duration = Duration::from_secs(2);

/// Longest a progress notification waits for a call to record its token
/// ([`RelayRegistry::by_token_when_sent`]): a call's task descheduled between queueing its
/// request and recording the token runs again well within it.
const TOKEN_WAIT: Duration = Duration::from_secs(2);

/// Most ended calls kept lingering per connection, so a flood of short calls cannot grow
/// the list; the oldest go first.
const MAX_LINGERING: usize = 64;

/// Notifications of one call being relayed right now, and the order they were read in.
#[derive(Default)]
struct Busy {
    count: AtomicU64,
    idle: Notify,
    /// The next ticket handed out as a notification is read ([`RelayRegistry::announce`]).
    tickets: AtomicU64,
    /// Which tickets are done: a notification is relayed only after every one read before it
    /// (rmcp hands each to a task of its own, which may run in any order).
    turn: Mutex<Turn>,
    turned: Notify,
}

#[derive(Default)]
struct Turn {
    /// Every ticket below this one is done.
    next: u64,
    /// Tickets done before an earlier one.
    early: BTreeSet<u64>,
}

impl Busy {
    fn turn(&self) -> MutexGuard<'_, Turn> {
        self.turn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ticket `ticket` is done (relayed, or dropped unrelayed).
    fn finish(&self, ticket: u64) {
        {
            let mut turn = self.turn();
            turn.early.insert(ticket);
            loop {
                let next = turn.next;
                if !turn.early.remove(&next) {
                    break;
                }
                turn.next += 1;
            }
        }
        self.turned.notify_waiters();
    }

    /// Until every notification read before `ticket` is done.
    async fn until_turn(&self, ticket: u64) {
        loop {
            let turned = self.turned.notified();
            tokio::pin!(turned);
            turned.as_mut().enable();
            if self.turn().next >= ticket {
                return;
            }
            turned.await;
        }
    }

    fn is_idle(&self) -> bool {
        self.count.load(Ordering::SeqCst) == 0
    }

    async fn until_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.is_idle() {
                return;
            }
            notified.await;
        }
    }
}

/// A notification read and not yet relayed ([`RelayRegistry::announce`]), with its place in
/// the order its call's notifications were read; it travels in the notification's
/// extensions to the handler, which relays it in its turn ([`notify`]) and drops it once
/// relayed.
#[derive(Clone)]
pub(super) struct Announced(Arc<Ticket>);

struct Ticket {
    _relaying: Relaying,
    busy: Arc<Busy>,
    number: u64,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.busy.finish(self.number);
    }
}

/// One notification being relayed; ending it may let the call's answer go.
struct Relaying(Arc<Busy>);

impl Relaying {
    fn start(busy: &Arc<Busy>) -> Relaying {
        busy.count.fetch_add(1, Ordering::SeqCst);
        Relaying(busy.clone())
    }
}

impl Drop for Relaying {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

struct Entry {
    key: u64,
    owner: Owner,
    busy: Arc<Busy>,
    /// The upstream request's id and progress token, once sent.
    request: Option<(RequestId, ProgressToken)>,
    relay: Option<Arc<dyn CallRelay>>,
    ended: CancellationToken,
    deadline: tokio::time::Instant,
}

/// The requests in flight on one upstream connection. Shared by the connection's client
/// handler and the manager.
#[derive(Default)]
pub struct RelayRegistry {
    entries: Mutex<Entries>,
    next: AtomicU64,
    /// Progress read for no known token, until handled: every call's answer waits for
    /// these too ([`RelayRegistry::announce`]).
    unrouted: Arc<Busy>,
    /// Told whenever a call records the token it was sent with ([`CallGuard::sent`]).
    sent: Notify,
    /// Every request on the connection is one caller's (its own upstream session): what
    /// names no call goes to that caller's latest call.
    one_caller: bool,
}

/// Running requests in the order they were registered (their keys ascend), and ended ones
/// with the time they ended, in that order, so that forgetting the expired is a few pops from
/// the front rather than a pass over every entry on every call.
#[derive(Default)]
struct Entries {
    running: Vec<Entry>,
    lingering: VecDeque<(tokio::time::Instant, Entry)>,
}

impl Entries {
    fn len(&self) -> usize {
        self.running.len() + self.lingering.len()
    }

    fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.running
            .iter()
            .chain(self.lingering.iter().map(|(_, entry)| entry))
    }

    fn running_mut(&mut self, key: u64) -> Option<&mut Entry> {
        let at = self.running.binary_search_by_key(&key, |e| e.key).ok()?;
        Some(&mut self.running[at])
    }

    /// Moves the running request `key` to the lingering ones.
    fn end(&mut self, key: u64) {
        if let Ok(at) = self.running.binary_search_by_key(&key, |e| e.key) {
            let entry = self.running.remove(at);
            self.lingering
                .push_back((tokio::time::Instant::now(), entry));
        }
    }

    /// Forgets ended calls past [`LINGER`], and the oldest beyond [`MAX_LINGERING`].
    fn prune(&mut self) {
        let now = tokio::time::Instant::now();
        while let Some((ended_at, _)) = self.lingering.front() {
            let expired = now.saturating_duration_since(*ended_at) >= LINGER;
            if !expired && self.lingering.len() <= MAX_LINGERING {
                break;
            }
            self.lingering.pop_front();
        }
    }
}

impl RelayRegistry {
    pub fn new() -> Arc<RelayRegistry> {
        Arc::new(RelayRegistry::default())
    }

    /// The registry of a connection only one caller uses (an upstream session of its own):
    /// a request or log message that names no call is that caller's, and goes to its latest
    /// running call (or, for a log, its latest ended one), however many it has.
    pub fn for_one_caller() -> Arc<RelayRegistry> {
        Arc::new(RelayRegistry {
            one_caller: true,
            ..RelayRegistry::default()
        })
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        // A poisoned lock only means another thread panicked while editing a plain list.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers a tool call about to be sent (with a relay for a relayed call, without for
    /// anything else: it still counts as in flight). Removed when the guard drops.
    pub fn register(
        self: &Arc<Self>,
        relay: Option<Arc<dyn CallRelay>>,
        timeout: Duration,
    ) -> CallGuard {
        let owner = relay.as_ref().map_or(Owner::Unknown, |r| r.owner());
        self.add(relay, owner, timeout)
    }

    /// Registers another request of `owner` about to be sent, only so that it counts.
    pub fn register_request(self: &Arc<Self>, owner: Owner, timeout: Duration) -> CallGuard {
        self.add(None, owner, timeout)
    }

    fn add(
        self: &Arc<Self>,
        relay: Option<Arc<dyn CallRelay>>,
        owner: Owner,
        timeout: Duration,
    ) -> CallGuard {
        let ended = CancellationToken::new();
        let mut entries = self.lock();
        // Taken under the lock, so running entries stay in key order.
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        entries.prune();
        let busy = Arc::new(Busy::default());
        entries.running.push(Entry {
            key,
            owner,
            busy: busy.clone(),
            request: None,
            relay,
            ended: ended.clone(),
            deadline: tokio::time::Instant::now() + timeout,
        });
        drop(entries);
        CallGuard {
            registry: self.clone(),
            key,
            ended,
            busy,
        }
    }

    /// The relay of the call (running or lingering) whose upstream request carries `token`.
    pub fn by_token(&self, token: &ProgressToken) -> Option<Routed> {
        self.find(|e| e.request.as_ref().is_some_and(|(_, t)| t == token))
    }

    /// [`RelayRegistry::by_token`] for a progress notification being handled: when no call
    /// has `token` yet but a relayed call is still to record its token (rmcp queued the
    /// request and the upstream answered with progress before the calling task ran on: a
    /// busy machine), waits for it, at most [`TOKEN_WAIT`], rather than drop the progress.
    pub async fn by_token_when_sent(&self, token: &ProgressToken) -> Option<Routed> {
        let deadline = tokio::time::Instant::now() + TOKEN_WAIT;
        loop {
            let sent = self.sent.notified();
            tokio::pin!(sent);
            sent.as_mut().enable();
            if let Some(route) = self.by_token(token) {
                return Some(route);
            }
            let unsent = self
                .lock()
                .running
                .iter()
                .any(|e| e.relay.is_some() && e.request.is_none());
            if !unsent || tokio::time::timeout_at(deadline, sent).await.is_err() {
                return None;
            }
        }
    }

    /// Counts `notification` as being relayed, for the call it will be relayed to, until the
    /// returned value is dropped. The transport calls this as it reads the notification:
    /// rmcp hands each notification to a task of its own, which may start only after the
    /// call's answer, read next, has reached the call; counted from the read, the answer
    /// waits for it ([`CallGuard::drain`]).
    ///
    /// Progress whose token no call has yet counts for every call of the connection: a call
    /// sent through rmcp learns its token only once rmcp has queued the request, and a
    /// thread descheduled right there (a busy machine) can let the upstream's first progress
    /// be read before the token is known. Its handler finds the call by then.
    pub(super) fn announce(&self, notification: &ServerNotification) -> Option<Announced> {
        let busy = match notification {
            ServerNotification::ProgressNotification(n) => self
                .by_token(&n.params.progress_token)
                .map_or_else(|| self.unrouted.clone(), |route| route.busy),
            ServerNotification::LoggingMessageNotification(_) => self.for_log()?.busy,
            _ => return None,
        };
        let number = busy.tickets.fetch_add(1, Ordering::SeqCst);
        Some(Announced(Arc::new(Ticket {
            _relaying: Relaying::start(&busy),
            busy,
            number,
        })))
    }

    /// [`RelayRegistry::announce`] for `message` if it is a notification, the count carried in
    /// its extensions to the handler.
    pub(super) fn announce_in(&self, message: &mut ServerJsonRpcMessage) {
        if let JsonRpcMessage::Notification(notification) = message
            && let Some(announced) = self.announce(&notification.notification)
        {
            notification.notification.extensions_mut().insert(announced);
        }
    }

    /// The relay of the running call whose upstream request has id `id`.
    pub fn by_request(&self, id: &RequestId) -> Option<Routed> {
        let entries = self.lock();
        entries
            .running
            .iter()
            .find(|e| e.request.as_ref().is_some_and(|(r, _)| r == id))
            .and_then(routed)
    }

    /// The relay of the only call that can be meant, if it has one. `running` asks for a
    /// call still running, as a request does (it needs an answer, and an ended call's
    /// handler is done asking): exactly one running call, whatever ended before it. Otherwise
    /// the only call known, running or ended.
    pub fn sole(&self, running: bool) -> Option<Routed> {
        let mut entries = self.lock();
        entries.prune();
        if self.one_caller {
            return latest(&entries, running);
        }
        match (entries.running.as_slice(), entries.lingering.front()) {
            ([only], _) if running => routed(only),
            ([only], None) => routed(only),
            ([], Some((_, only))) if !running && entries.lingering.len() == 1 => routed(only),
            _ => None,
        }
    }

    /// The relay a log message goes to: the only request known, as
    /// [`RelayRegistry::sole`]; else the only running one, when every other request known
    /// (lingering ones) is the same caller's or the gateway's own, so a late message of an
    /// ended request reaches no one but its own caller.
    pub fn for_log(&self) -> Option<Routed> {
        let mut entries = self.lock();
        entries.prune();
        if self.one_caller {
            return latest(&entries, false);
        }
        if entries.len() == 1 {
            return entries.iter().next().and_then(routed);
        }
        let [call] = entries.running.as_slice() else {
            return None;
        };
        let Owner::Caller(owner) = &call.owner else {
            return None;
        };
        let alone = entries.iter().all(|e| match &e.owner {
            Owner::Gateway => true,
            Owner::Caller(other) => other == owner,
            Owner::Unknown => false,
        });
        if alone { routed(call) } else { None }
    }

    /// How many requests are running.
    pub fn in_flight(&self) -> usize {
        self.lock().running.len()
    }

    fn find(&self, matches: impl Fn(&Entry) -> bool) -> Option<Routed> {
        let mut entries = self.lock();
        entries.prune();
        entries.iter().find(|e| matches(e)).and_then(routed)
    }
}

impl std::fmt::Debug for RelayRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayRegistry")
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

/// How long relaying one notification to its caller may take: a caller that stops reading
/// must not pin the task rmcp gave the notification.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most characters of an unrelayed upstream log message written to our own log: an
/// upstream's log is untrusted text and must not flood ours.
const MAX_LOGGED_CHARS: usize = 512;

/// Relays one notification of the call `route` found, bounded by [`NOTIFY_TIMEOUT`]; the
/// call's answer waits for it ([`CallGuard::drain`]). `announced`, what the transport said
/// as it read the notification: it is handed to the caller (`relay` is called) only after
/// the call's notifications read before it.
pub(super) async fn notify<'a>(
    route: &'a Routed,
    announced: Option<&Announced>,
    relay: impl FnOnce(&'a dyn CallRelay) -> BoxFuture<'a, ()>,
) {
    let _relaying = Relaying::start(&route.busy);
    let in_turn = async {
        if let Some(Announced(ticket)) = announced
            && Arc::ptr_eq(&ticket.busy, &route.busy)
        {
            ticket.busy.until_turn(ticket.number).await;
        }
        relay(route.relay.as_ref()).await;
    };
    if tokio::time::timeout(NOTIFY_TIMEOUT, in_turn).await.is_err() {
        tracing::debug!("relaying a notification to its caller timed out; dropped");
    }
}

/// Relays one request and waits for the answer, at most what is left of the call's
/// timeout and never after the call ended.
pub(super) async fn ask<T>(
    route: &Routed,
    answer: BoxFuture<'_, Result<T, ErrorData>>,
) -> Result<T, ErrorData> {
    tokio::select! {
        answer = tokio::time::timeout(route.timeout, answer) => answer.unwrap_or_else(|_| {
            Err(ErrorData::internal_error(
                "the caller did not answer within the tool call's timeout",
                None,
            ))
        }),
        () = route.ended.cancelled() => Err(ErrorData::internal_error(
            "the tool call this request belongs to has ended",
            None,
        )),
    }
}

/// The error a server gets for a request no caller can answer.
pub(super) fn unroutable(method: &str) -> ErrorData {
    ErrorData::invalid_request(
        format!(
            "{method} is not available: the gateway cannot tell which caller's tool call this \
             request belongs to, or that caller cannot answer it"
        ),
        None,
    )
}

/// Writes a log message no caller receives to our own log, cut short and with control
/// characters escaped.
pub(super) fn log_locally(params: &LoggingMessageNotificationParam) {
    let data = match &params.data {
        serde_json::Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let data = sanitize(&data);
    let logger = params.logger.as_deref().map(sanitize);
    tracing::info!(level = ?params.level, logger, %data, "upstream log message");
}

fn sanitize(text: &str) -> String {
    let cut: String = text.chars().take(MAX_LOGGED_CHARS).collect();
    let mut clean: String = cut.chars().flat_map(char::escape_debug).collect();
    if text.chars().nth(MAX_LOGGED_CHARS).is_some() {
        clean.push('…');
    }
    clean
}

/// The latest running call with a relay, else (unless `running`) the latest ended one.
fn latest(entries: &Entries, running: bool) -> Option<Routed> {
    let ended = entries.lingering.iter().rev().map(|(_, entry)| entry);
    let ended = ended.filter(|_| !running);
    entries.running.iter().rev().chain(ended).find_map(routed)
}

fn routed(entry: &Entry) -> Option<Routed> {
    let relay = entry.relay.clone()?;
    Some(Routed {
        relay,
        busy: entry.busy.clone(),
        ended: entry.ended.clone(),
        timeout: entry
            .deadline
            .saturating_duration_since(tokio::time::Instant::now()),
    })
}

/// Keeps one request registered as running; dropping it (the call ended, however) cancels
/// what was relayed for it and leaves it lingering.
pub struct CallGuard {
    registry: Arc<RelayRegistry>,
    key: u64,
    ended: CancellationToken,
    busy: Arc<Busy>,
}

impl CallGuard {
    /// Before the call's answer goes to its caller: lets the notifications the server sent
    /// before the answer reach the caller first, as they would directly. Bounded by
    /// [`NOTIFY_TIMEOUT`], whose timer is armed only when a notification is still being
    /// relayed.
    pub async fn drain(&self) {
        let unrouted = &self.registry.unrouted;
        if self.busy.is_idle() && unrouted.is_idle() {
            return;
        }
        let idle = async {
            for busy in [&self.busy, unrouted] {
                busy.until_idle().await;
            }
        };
        let _ = tokio::time::timeout(NOTIFY_TIMEOUT, idle).await;
    }

    /// Records the id and progress token the request was sent with.
    pub fn sent(&self, id: RequestId, token: ProgressToken) {
        if let Some(entry) = self.registry.lock().running_mut(self.key) {
            entry.request = Some((id, token));
        }
        self.registry.sent.notify_waiters();
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.ended.cancel();
        let mut entries = self.registry.lock();
        entries.end(self.key);
        entries.prune();
    }
}

#[cfg(test)]
#[path = "relay_tests.rs"]
mod tests;
