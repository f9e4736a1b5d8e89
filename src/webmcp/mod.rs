//! The WebMCP bridge's registry: pages connected over the bridge's WebSocket
//! (`/api/v1/webmcp/bridge/{clientId}`), the tools each registered, and the calls sent to
//! them. A page is a tool source like an upstream server: the gateway lists its tools as
//! server `webmcp-<name>` and sends calls to it through the one gate; the socket itself is
//! served by [`crate::server`], which feeds what the page says in here.
//!
//! A page belongs to the user whose token connected it; its tools are theirs (and their
//! tenant's, under `visible_to = "tenant"`). The registry outlives a configuration reload,
//! so pages stay connected across one.

pub mod protocol;
mod remote;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use rmcp::model::{CallToolResult, Tool};
use serde_json::{Map, Value};
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::{
    config::{Confirm, PageVisibility, ServerId, WEBMCP_PREFIX, WebMcpConfig},
    policy::{CallContext, Effect},
};

pub use protocol::valid_tool_name;
pub use remote::RemotePage;

/// Most frames waiting to be written to one page: a page that stops reading is not queued
/// without bound (a call finding the queue full fails as not sent).
const OUTBOX: usize = 64;
/// Longest client id: it names the page in URLs and in the invoke API.
const MAX_CLIENT_ID: usize = 64;

/// Who connected a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageOwner {
    pub tenant: String,
    pub user: String,
}

/// What the bridge writes to a page's socket.
#[derive(Debug)]
pub enum Outgoing {
    Text(String),
    /// Close the socket with this code and reason (the page was replaced, or went quiet).
    Close(u16, &'static str),
}

/// Why a page was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejected {
    #[error("a client id is 1 to 64 of A-Z, a-z, 0-9, `_`, `.`, `-`")]
    InvalidClientId,
    #[error("this client id is connected by another user")]
    ClientIdTaken,
    #[error("this user has {0} pages connected, the most allowed")]
    TooManyForUser(usize),
    #[error("the gateway has {0} pages connected, the most allowed")]
    TooMany(usize),
    #[error("the pages' shared registry cannot be reached; try again")]
    Unavailable,
}

impl Rejected {
    /// The reason's code, as the `rejected` frame gives it.
    pub fn code(&self) -> &'static str {
        match self {
            Rejected::InvalidClientId => "invalid_client_id",
            Rejected::ClientIdTaken => "client_id_taken",
            Rejected::TooManyForUser(_) | Rejected::TooMany(_) => "too_many_pages",
            Rejected::Unavailable => "unavailable",
        }
    }
}

/// Why a call to a page did not return a result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// No page holds this client id now; nothing was sent.
    #[error("no page is connected as `{client}`")]
    NotConnected { client: String },
    /// The page went away after the call was sent: it may have acted on it.
    #[error("the page went away before answering; the call may or may not have run")]
    OutcomeUnknown,
    /// The page's answer is not a tool result.
    #[error("the page's answer is not a tool result: {0}")]
    InvalidResult(String),
    /// The page did not answer in time (it was told to cancel).
    #[error("the page did not answer within {after:?}")]
    Timeout { after: Duration },
}

impl PageError {
    pub fn code(&self) -> &'static str {
        match self {
            PageError::NotConnected { .. } => "client_not_connected",
            PageError::OutcomeUnknown => "outcome_unknown",
            PageError::InvalidResult(_) => "invalid_result",
            PageError::Timeout { .. } => "timeout",
        }
    }
}

/// One connected page.
pub struct Page {
    pub server: ServerId,
    pub client_id: String,
    pub owner: PageOwner,
    /// Distinguishes this connection from an earlier or later one of the same client id.
    connection: u64,
    tools: Mutex<Arc<Vec<Tool>>>,
    outbox: mpsc::Sender<Outgoing>,
    /// Calls sent and not answered, by call id: answered only by this socket.
    pending: Mutex<HashMap<String, oneshot::Sender<Value>>>,
    /// Cancelled when the page goes: every pending call fails at once.
    gone: CancellationToken,
}

impl Page {
    /// The tools the page registered last.
    pub fn tools(&self) -> Arc<Vec<Tool>> {
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The page answered `call_id`; `false` when no call of this page waits under that id
    /// (another socket's, finished, or made up): the answer is dropped.
    pub fn answer(&self, call_id: &str, result: Value) -> bool {
        let waiting = self
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(call_id);
        waiting.is_some_and(|tx| tx.send(result).is_ok())
    }

    /// Cancelled when the page goes away.
    pub fn gone(&self) -> &CancellationToken {
        &self.gone
    }
}

/// Every page connected to this instance, and (with Redis) those other instances hold.
pub struct Pages {
    config: WebMcpConfig,
    pages: Mutex<HashMap<ServerId, Arc<Page>>>,
    connections: std::sync::atomic::AtomicU64,
    /// Bumped whenever a page comes, goes or changes its tools.
    changes: watch::Sender<u64>,
    /// Names this process among the instances' page holders (connection numbers restart
    /// with the process).
    process: String,
    /// The shared registry, when the bridge spans instances.
    remote: OnceLock<Arc<remote::Remote>>,
    /// Pages other instances hold, as the registry said last.
    elsewhere: Mutex<HashMap<ServerId, Arc<RemotePage>>>,
    /// A page here came, went or changed its tools since the registry was last told.
    dirty: AtomicBool,
    /// Wakes the registry's follower for a change here.
    wake: Notify,
}

impl Pages {
    pub fn new(config: WebMcpConfig) -> Pages {
        Pages {
            config,
            pages: Mutex::new(HashMap::new()),
            connections: std::sync::atomic::AtomicU64::new(0),
            changes: watch::channel(0).0,
            process: crate::digest::random_hex(8),
            remote: OnceLock::new(),
            elsewhere: Mutex::new(HashMap::new()),
            dirty: AtomicBool::new(false),
            wake: Notify::new(),
        }
    }

    /// Spans the bridge across the instances sharing `redis`: pages held here are recorded
    /// there, others' pages listed here, calls routed to their holder. Once; later calls
    /// (a reload's) change nothing.
    pub fn share(
        self: &Arc<Self>,
        redis: crate::store::redis::Redis,
        events: crate::store::redis::Events,
        stop: CancellationToken,
    ) {
        if self.remote.get().is_some() {
            return;
        }
        let store = crate::store::redis::RedisPages::new(redis);
        let remote = remote::Remote::start(self, store, events, stop);
        let _ = self.remote.set(remote);
    }

    /// The server id the page `client_id` is listed under: the operator's name for it
    /// (`[webmcp.names]`), else its normalized id ([`server_id`]); `None` for an invalid id,
    /// and for one whose normalized id is a name the operator gave another client id.
    pub fn server_for(&self, client_id: &str) -> Option<ServerId> {
        if let Some((_, named)) = self.config.names.iter().find(|(c, _)| c == client_id) {
            return Some(named.clone());
        }
        let id = server_id(client_id)?;
        (!self.config.names.iter().any(|(_, named)| *named == id)).then_some(id)
    }

    /// Whether pages of other instances are reachable from here.
    pub fn shared(&self) -> bool {
        self.remote.get().is_some()
    }

    /// Who holds `page` among the instances: `<instance>/<process>/<connection>`.
    fn holder_of(&self, page: &Page) -> String {
        let instance = self.remote.get().map_or("local", |r| r.instance());
        format!("{instance}/{}/{}", self.process, page.connection)
    }

    /// What the registry says of `page`.
    fn record_of(&self, page: &Page) -> String {
        let record = remote::Record {
            client_id: page.client_id.clone(),
            tenant: page.owner.tenant.clone(),
            user: page.owner.user.clone(),
            tools: page.tools().to_vec(),
        };
        serde_json::to_string(&record).unwrap_or_default()
    }

    /// A local change the registry must hear of.
    fn touched(&self) {
        if self.shared() {
            self.dirty.store(true, Ordering::Release);
            self.wake.notify_one();
        }
    }

    /// The same owner's page took `page`'s id over on another instance: close this one.
    fn replaced(&self, page: &Page) {
        let _ = page
            .outbox
            .try_send(Outgoing::Close(4000, "replaced by a new connection"));
        page.gone.cancel();
    }

    /// The registry's latest view of other instances' pages.
    fn set_elsewhere(
        &self,
        instance: &str,
        entries: Vec<(String, crate::store::redis::PageEntry)>,
    ) {
        let changed = {
            let mut elsewhere = self
                .elsewhere
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let now = remote::read_entries(instance, entries, &elsewhere);
            let same = now.len() == elsewhere.len()
                && now
                    .iter()
                    .all(|(id, page)| elsewhere.get(id).is_some_and(|old| Arc::ptr_eq(old, page)));
            *elsewhere = now;
            !same
        };
        if changed {
            self.changed();
        }
    }

    fn elsewhere(&self, server: &ServerId) -> Option<Arc<RemotePage>> {
        self.elsewhere
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(server)
            .cloned()
    }

    /// Every page's tools for the catalog, by server id: those held here, then those held
    /// elsewhere under ids not held here.
    pub fn listed(&self) -> Vec<(ServerId, Arc<Vec<Tool>>)> {
        let mut listed: Vec<(ServerId, Arc<Vec<Tool>>)> = self
            .all()
            .iter()
            .map(|page| (page.server.clone(), page.tools()))
            .collect();
        let elsewhere = self
            .elsewhere
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for (server, page) in elsewhere.iter() {
            if !listed.iter().any(|(id, _)| id == server) {
                listed.push((server.clone(), page.tools.clone()));
            }
        }
        drop(elsewhere);
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        listed
    }

    /// Who connected the page `server` names, wherever it is held.
    fn owner_of(&self, server: &ServerId) -> Option<PageOwner> {
        match self.get(server) {
            Some(page) => Some(page.owner.clone()),
            None => self.elsewhere(server).map(|page| page.owner.clone()),
        }
    }

    pub fn config(&self) -> &WebMcpConfig {
        &self.config
    }

    /// Changes whenever the set of pages or their tools changed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n += 1);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ServerId, Arc<Page>>> {
        self.pages.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a page that said `hello` as `client_id` for `owner`. The same owner's page
    /// already holding the id (a reload) is replaced: its socket is closed and its pending
    /// calls end `outcome_unknown`. Returns the page and what to write to its socket.
    pub fn attach(
        &self,
        client_id: &str,
        owner: PageOwner,
    ) -> Result<(Arc<Page>, mpsc::Receiver<Outgoing>), Rejected> {
        let server = self
            .server_for(client_id)
            .ok_or(Rejected::InvalidClientId)?;
        let (outbox, rx) = mpsc::channel(OUTBOX);
        let connection = self
            .connections
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let page = Arc::new(Page {
            server: server.clone(),
            client_id: client_id.to_owned(),
            owner,
            connection,
            tools: Mutex::new(Arc::new(Vec::new())),
            outbox,
            pending: Mutex::new(HashMap::new()),
            gone: CancellationToken::new(),
        });
        if self
            .elsewhere(&server)
            .is_some_and(|held| held.owner != page.owner)
        {
            return Err(Rejected::ClientIdTaken);
        }
        let replaced = {
            let mut pages = self.lock();
            if let Some(held) = pages.get(&server)
                && held.owner != page.owner
            {
                return Err(Rejected::ClientIdTaken);
            }
            let replacing = pages.contains_key(&server);
            let of_user = pages
                .values()
                .filter(|p| p.owner == page.owner)
                .count()
                .saturating_sub(usize::from(replacing));
            if of_user >= self.config.max_pages_per_user {
                return Err(Rejected::TooManyForUser(of_user));
            }
            if !replacing && pages.len() >= self.config.max_pages {
                return Err(Rejected::TooMany(pages.len()));
            }
            pages.insert(server, page.clone())
        };
        if let Some(old) = replaced {
            self.replaced(&old);
        }
        self.changed();
        Ok((page, rx))
    }

    /// [`Pages::attach`], and with the bridge shared, the page recorded in the registry
    /// (refused when another owner's page holds the id on another instance, or the registry
    /// cannot be reached).
    pub async fn hello(
        &self,
        client_id: &str,
        owner: PageOwner,
    ) -> Result<(Arc<Page>, mpsc::Receiver<Outgoing>), Rejected> {
        let (page, rx) = self.attach(client_id, owner)?;
        if let Some(remote) = self.remote.get() {
            let claimed = remote
                .claim(
                    &page.server,
                    &page.owner,
                    &self.holder_of(&page),
                    &self.record_of(&page),
                    self.config.heartbeat_timeout,
                )
                .await;
            if let Err(rejected) = claimed {
                self.detach(&page);
                return Err(rejected);
            }
        }
        Ok((page, rx))
    }

    /// The page's new tool list.
    pub fn set_tools(&self, page: &Page, tools: Vec<Tool>) {
        *page.tools.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(tools);
        if self.is_current(page) {
            self.changed();
            self.touched();
        }
    }

    /// The page's socket closed (or was closed): its tools leave the catalog and every call
    /// waiting for it fails now.
    pub fn detach(&self, page: &Page) {
        page.gone.cancel();
        let removed = {
            let mut pages = self.lock();
            let current = pages
                .get(&page.server)
                .is_some_and(|p| p.connection == page.connection);
            current && pages.remove(&page.server).is_some()
        };
        if removed {
            self.changed();
            if let Some(remote) = self.remote.get() {
                let (remote, server, holder) =
                    (remote.clone(), page.server.clone(), self.holder_of(page));
                tokio::spawn(async move { remote.release(&server, &holder).await });
            }
        }
    }

    pub(super) fn is_current(&self, page: &Page) -> bool {
        self.lock()
            .get(&page.server)
            .is_some_and(|p| p.connection == page.connection)
    }

    /// Every connected page (for the catalog).
    pub fn all(&self) -> Vec<Arc<Page>> {
        let mut pages: Vec<_> = self.lock().values().cloned().collect();
        pages.sort_by(|a, b| a.server.cmp(&b.server));
        pages
    }

    /// The page connected as `server`.
    pub fn get(&self, server: &ServerId) -> Option<Arc<Page>> {
        self.lock().get(server).cloned()
    }

    /// Whether `ctx` may see and call the tools of the page `server` names, wherever it is
    /// held.
    pub fn visible(&self, ctx: &CallContext, server: &ServerId) -> bool {
        self.owner_of(server)
            .is_some_and(|owner| self.allows(&owner, &ctx.tenant, &ctx.user))
    }

    /// Whether the caller `tenant`/`user` may use a page of `owner`.
    pub(super) fn allows(&self, owner: &PageOwner, tenant: &str, user: &str) -> bool {
        owner.tenant == tenant
            && (self.config.visible_to == PageVisibility::Tenant || owner.user == user)
    }

    /// Whether calling the page tool `canonical` (definition `tool`) writes: the operator's
    /// lists first, then the page's `readOnlyHint` (a page is its user's own code, so its
    /// claim counts; without it a tool is a write).
    pub fn classify(&self, canonical: &str, tool: &Tool) -> Effect {
        if self.config.write_tools.iter().any(|t| t == canonical) {
            return Effect::Write;
        }
        let claims_read = tool.annotations.as_ref().and_then(|a| a.read_only_hint) == Some(true);
        if claims_read || self.config.read_only_tools.iter().any(|t| t == canonical) {
            Effect::Read
        } else {
            Effect::Write
        }
    }

    /// Whether a call with `effect` needs a confirmation.
    pub fn needs_confirmation(&self, effect: Effect) -> bool {
        match self.config.confirm {
            Confirm::All => true,
            Confirm::Writes => effect == Effect::Write,
            Confirm::None => false,
        }
    }

    /// Sends a call to the page `server` names (here, or through the instance holding it)
    /// and waits for its answer, at most `timeout`. Dropping the future (the caller went
    /// away) tells the page to cancel.
    /// The page is looked up again as the call is sent, and `ctx` checked against whoever
    /// holds the id then: a page that went while the call waited (for a confirmation, a
    /// permit) and whose id another user took is never sent the call.
    pub async fn invoke(
        &self,
        ctx: &CallContext,
        server: &ServerId,
        tool: &str,
        arguments: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, PageError> {
        if let Some(page) = self.get(server).filter(|p| !p.gone.is_cancelled()) {
            if !self.allows(&page.owner, &ctx.tenant, &ctx.user) {
                return Err(not_connected(server));
            }
            return self.invoke_local(&page, tool, arguments, timeout).await;
        }
        if let (Some(remote), Some(page)) = (self.remote.get(), self.elsewhere(server)) {
            if !self.allows(&page.owner, &ctx.tenant, &ctx.user) {
                return Err(not_connected(server));
            }
            return remote.call(ctx, &page, tool, arguments, timeout).await;
        }
        Err(not_connected(server))
    }

    /// [`Pages::invoke`] on a page held here.
    async fn invoke_local(
        &self,
        page: &Arc<Page>,
        tool: &str,
        arguments: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, PageError> {
        let not_connected = || not_connected(&page.server);
        let call_id = crate::digest::random_hex(16);
        let (tx, rx) = oneshot::channel();
        page.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(call_id.clone(), tx);
        let mut waiting = Waiting {
            page,
            call_id: &call_id,
            answered: false,
        };
        if page
            .outbox
            .try_send(Outgoing::Text(protocol::invoke(&call_id, tool, arguments)))
            .is_err()
        {
            // Not sent: the socket is closing or the page stopped reading.
            waiting.answered = true;
            page.pending
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&call_id);
            return Err(not_connected());
        }
        let answer = tokio::select! {
            answer = rx => answer.map_err(|_| PageError::OutcomeUnknown),
            () = page.gone.cancelled() => Err(PageError::OutcomeUnknown),
            () = tokio::time::sleep(timeout) => Err(PageError::Timeout { after: timeout }),
        };
        if answer.is_ok() {
            waiting.answered = true;
        }
        let answer = answer?;
        serde_json::from_value::<CallToolResult>(answer)
            .map_err(|e| PageError::InvalidResult(e.to_string()))
    }
}

/// No page holds `server` now.
pub(super) fn not_connected(server: &ServerId) -> PageError {
    PageError::NotConnected {
        client: server
            .as_str()
            .strip_prefix(WEBMCP_PREFIX)
            .unwrap_or(server.as_str())
            .to_owned(),
    }
}

/// A call sent to a page: if it ends without the page's answer, its id is forgotten and the
/// page told to cancel (the page may still be running it).
struct Waiting<'a> {
    page: &'a Page,
    call_id: &'a str,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let waited = self
            .page
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(self.call_id)
            .is_some();
        if waited && !self.page.gone.is_cancelled() {
            let _ = self
                .page
                .outbox
                .try_send(Outgoing::Text(protocol::cancel(self.call_id)));
        }
    }
}

/// The server id of the page `client_id`: `webmcp-` and the id in lowercase, every other
/// character than a letter or digit as `-`; an id too long for a server id is cut and ends
/// with six hex digits of its hash, so two long ids that start alike stay two pages. `None`
/// for an id that is not 1 to 64 of `A-Z a-z 0-9 _ . -`.
pub fn server_id(client_id: &str) -> Option<ServerId> {
    if !(1..=MAX_CLIENT_ID).contains(&client_id.len())
        || !client_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
    {
        return None;
    }
    let room = 32 - WEBMCP_PREFIX.len();
    let mut name: String = client_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if name.len() > room {
        let hash = crate::digest::sha256_hex(client_id.as_bytes());
        name.truncate(room - 7);
        name = format!("{name}-{}", &hash[..6]);
    }
    ServerId::new(&format!("{WEBMCP_PREFIX}{name}"))
}

/// Whether `server` names a page (not a configured server; configuration refuses the prefix).
pub fn is_page(server: &ServerId) -> bool {
    server.as_str().starts_with(WEBMCP_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(user: &str) -> PageOwner {
        PageOwner {
            tenant: "t".into(),
            user: user.into(),
        }
    }

    fn ctx(tenant: &str, user: &str) -> CallContext {
        CallContext {
            tenant: tenant.into(),
            user: user.into(),
            session: "s".into(),
            roles: Vec::new(),
            request_id: "r".into(),
        }
    }

    #[test]
    fn client_ids_become_server_ids() {
        assert_eq!(
            server_id("Editor_1.tab").expect("valid").as_str(),
            "webmcp-editor-1-tab"
        );
        assert_eq!(
            server_id(&"a".repeat(64)).expect("valid").as_str().len(),
            32
        );
        // Long ids that start alike stay apart; one that fits is unchanged.
        let (long, longer) = (
            server_id("com.example.editor.documents").expect("valid"),
            server_id("com.example.editor.documents2").expect("valid"),
        );
        assert_ne!(long, longer);
        assert!(
            long.as_str().starts_with("webmcp-com-example-editor"),
            "{long}"
        );
        assert_eq!(long.as_str().len(), 32);
        assert_eq!(
            server_id(&"b".repeat(25)).expect("valid").as_str(),
            format!("webmcp-{}", "b".repeat(25))
        );
        assert!(server_id("").is_none());
        assert!(server_id("a/b").is_none());
        assert!(server_id(&"a".repeat(65)).is_none());
    }

    #[tokio::test]
    async fn a_page_is_its_owners_and_answers_only_its_own_calls() {
        let pages = Pages::new(WebMcpConfig {
            max_pages_per_user: 1,
            ..WebMcpConfig::default()
        });
        let (page, mut rx) = pages.attach("editor", owner("ann")).expect("accepted");
        assert_eq!(
            pages.attach("editor", owner("bob")).err(),
            Some(Rejected::ClientIdTaken)
        );
        assert_eq!(
            pages.attach("other", owner("ann")).err(),
            Some(Rejected::TooManyForUser(1))
        );
        assert!(pages.visible(&ctx("t", "ann"), &page.server));
        assert!(!pages.visible(&ctx("t", "bob"), &page.server));
        assert!(!pages.visible(&ctx("u", "ann"), &page.server));

        let server = page.server.clone();
        let none = Map::new();
        let ann = ctx("t", "ann");
        // Checked again as the call is sent: another user's call never reaches the page.
        let refused = pages
            .invoke(
                &ctx("t", "bob"),
                &server,
                "get",
                &none,
                Duration::from_secs(5),
            )
            .await;
        assert!(
            matches!(refused, Err(PageError::NotConnected { .. })),
            "{refused:?}"
        );
        assert!(rx.try_recv().is_err(), "nothing was sent");
        let call = pages.invoke(&ann, &server, "get", &none, Duration::from_secs(5));
        let answer = async {
            let Some(Outgoing::Text(frame)) = rx.recv().await else {
                panic!("no invoke frame");
            };
            let frame: Value = serde_json::from_str(&frame).expect("JSON");
            let id = frame["callId"].as_str().expect("call id").to_owned();
            assert!(!page.answer("made-up", serde_json::json!({})));
            let result = serde_json::json!({"content": [{"type": "text", "text": "hi"}]});
            assert!(page.answer(&id, result.clone()));
            assert!(!page.answer(&id, result), "answered twice");
        };
        let (result, ()) = tokio::join!(call, answer);
        assert_eq!(result.expect("answered").content.len(), 1);

        // Reloaded: the old page's calls end at once, its socket is closed.
        let call = pages.invoke(&ann, &server, "get", &none, Duration::from_secs(5));
        let reload = async {
            let _invoke = rx.recv().await;
            let (_new, _rx) = pages.attach("editor", owner("ann")).expect("replaces");
            assert!(matches!(rx.recv().await, Some(Outgoing::Close(4000, _))));
        };
        let (result, ()) = tokio::join!(call, reload);
        assert_eq!(result.err(), Some(PageError::OutcomeUnknown));
        // The replaced page's going does not remove the new one.
        pages.detach(&page);
        assert!(pages.get(&server).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_not_answered_in_time_is_cancelled() {
        let pages = Pages::new(WebMcpConfig::default());
        let (page, mut rx) = pages.attach("editor", owner("ann")).expect("accepted");
        let outcome = pages
            .invoke(
                &ctx("t", "ann"),
                &page.server,
                "get",
                &Map::new(),
                Duration::from_secs(1),
            )
            .await;
        assert_eq!(
            outcome.err(),
            Some(PageError::Timeout {
                after: Duration::from_secs(1)
            })
        );
        let _invoke = rx.recv().await.expect("invoke");
        let Some(Outgoing::Text(cancel)) = rx.recv().await else {
            panic!("no cancel");
        };
        assert!(cancel.contains("\"cancel\""));
        assert!(page.pending.lock().expect("unpoisoned").is_empty());
        let gone = PageError::NotConnected {
            client: "nobody".into(),
        };
        assert_eq!(
            pages
                .invoke(
                    &ctx("t", "ann"),
                    &server_id("nobody").expect("valid"),
                    "x",
                    &Map::new(),
                    Duration::from_secs(1)
                )
                .await
                .err(),
            Some(gone)
        );
    }

    #[test]
    fn an_operators_name_is_its_clients_alone() {
        let named = server_id("editor").expect("valid");
        let pages = Pages::new(WebMcpConfig {
            names: vec![("com.example.editor.documents".into(), named.clone())],
            ..WebMcpConfig::default()
        });
        assert_eq!(
            pages.server_for("com.example.editor.documents"),
            Some(named)
        );
        // A page whose own id would take the name is refused; others are as usual.
        assert_eq!(pages.server_for("editor"), None);
        assert_eq!(
            pages.attach("editor", owner("ann")).err(),
            Some(Rejected::InvalidClientId)
        );
        assert_eq!(pages.server_for("notes"), server_id("notes"));
        let (page, _rx) = pages
            .attach("com.example.editor.documents", owner("ann"))
            .expect("accepted");
        assert_eq!(page.server.as_str(), "webmcp-editor");
    }
}
