//! Pages held by other instances (`[state] redis`): behind a load balancer a page's socket
//! is held by one instance and a call of its tools may reach another. Each instance records
//! the pages it holds in Redis ([`RedisPages`]), refreshed every heartbeat, so they expire
//! within `heartbeat_timeout` of their instance's death; reads every record (on each heartbeat
//! and when told of a change), so other instances' pages are in its catalog; and sends a call
//! of such a page to its holder's inbox, where the holder runs it on the page and answers in
//! the caller's inbox.
//!
//! A call sent elsewhere whose answer does not come (the holder died, the page went, the wait
//! ran out) ends `outcome_unknown`: the page may have acted. One that reached nobody (the
//! holder is not listening) ends `client_not_connected`: nothing was sent.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use rmcp::model::{CallToolResult, Tool};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use super::{PageError, PageOwner, Pages};
use crate::{
    config::ServerId,
    store::redis::{Claim, Event, Events, PageEntry, RedisPages},
};

/// How much longer than the call's own timeout a caller waits for the holder's answer (the
/// holder enforces the timeout itself and answers `timeout`).
const REPLY_GRACE: Duration = Duration::from_secs(5);

/// The shortest time between two rounds of writing and reading the registry.
const FOLLOW_SETTLE: Duration = Duration::from_millis(50);

/// What an instance writes about a page it holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Record {
    pub client_id: String,
    pub tenant: String,
    pub user: String,
    pub tools: Vec<Tool>,
}

/// A page another instance holds, as its record says.
pub struct RemotePage {
    pub server: ServerId,
    pub owner: PageOwner,
    /// `<instance>/<process>/<connection>`.
    pub holder: String,
    pub tools: Arc<Vec<Tool>>,
    /// Cancelled when its record goes or another connection holds it: calls waiting for it end.
    gone: CancellationToken,
}

impl RemotePage {
    fn instance(&self) -> &str {
        self.holder.split('/').next().unwrap_or_default()
    }
}

/// The messages of the instances' inboxes.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Message {
    Call {
        call_id: String,
        reply_to: String,
        server: String,
        holder: String,
        /// The caller, checked by the holder against the page's owner too.
        tenant: String,
        user: String,
        tool: String,
        arguments: Map<String, Value>,
        timeout_ms: u64,
    },
    Cancel {
        call_id: String,
    },
    Reply {
        call_id: String,
        outcome: Answer,
    },
}

/// A call's end as the holder tells it.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
enum Answer {
    Ok { result: Value },
    NotConnected,
    OutcomeUnknown,
    InvalidResult { message: String },
    Timeout { after_ms: u64 },
}

impl Answer {
    fn of(result: Result<CallToolResult, PageError>) -> Answer {
        match result {
            Ok(result) => match serde_json::to_value(&result) {
                Ok(result) => Answer::Ok { result },
                Err(err) => Answer::InvalidResult {
                    message: err.to_string(),
                },
            },
            Err(PageError::NotConnected { .. }) => Answer::NotConnected,
            Err(PageError::OutcomeUnknown) => Answer::OutcomeUnknown,
            Err(PageError::InvalidResult(message)) => Answer::InvalidResult { message },
            Err(PageError::Timeout { after }) => Answer::Timeout {
                after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX),
            },
        }
    }

    /// The call's end, as a call of the page `server` names.
    fn into_result(self, server: &ServerId) -> Result<CallToolResult, PageError> {
        match self {
            Answer::Ok { result } => {
                serde_json::from_value(result).map_err(|e| PageError::InvalidResult(e.to_string()))
            }
            Answer::NotConnected => Err(super::not_connected(server)),
            Answer::OutcomeUnknown => Err(PageError::OutcomeUnknown),
            Answer::InvalidResult { message } => Err(PageError::InvalidResult(message)),
            Answer::Timeout { after_ms } => Err(PageError::Timeout {
                after: Duration::from_millis(after_ms),
            }),
        }
    }
}

/// This instance's side of the shared registry.
pub struct Remote {
    store: RedisPages,
    events: Events,
    /// Calls sent elsewhere, waiting for their answer, by call id.
    waiting: Mutex<HashMap<String, oneshot::Sender<Answer>>>,
    /// Calls from elsewhere running on pages here, by call id (a cancel ends them).
    serving: Mutex<HashMap<String, CancellationToken>>,
    subscribed: watch::Receiver<bool>,
}

impl Remote {
    /// Starts following the registry and this instance's inbox for `pages`, until `stop`.
    pub(super) fn start(
        pages: &Arc<Pages>,
        store: RedisPages,
        events: Events,
        stop: CancellationToken,
    ) -> Arc<Remote> {
        let (subscribed_tx, subscribed) = watch::channel(false);
        let remote = Arc::new(Remote {
            store,
            events,
            waiting: Mutex::new(HashMap::new()),
            serving: Mutex::new(HashMap::new()),
            subscribed,
        });
        let (inbox, weak) = (remote.clone(), Arc::downgrade(pages));
        let inbox_stop = stop.clone();
        tokio::spawn(async move {
            let store = inbox.store.clone();
            store
                .listen(inbox_stop, subscribed_tx, |payload| {
                    inbox.received(&weak, &payload);
                })
                .await;
        });
        let (follower, weak) = (remote.clone(), Arc::downgrade(pages));
        tokio::spawn(async move { follower.follow(weak, stop).await });
        remote
    }

    pub(super) fn instance(&self) -> &str {
        self.store.instance()
    }

    /// Records a page that said `hello` here; `ClientIdTaken` when another owner's page holds
    /// the id on another instance.
    pub(super) async fn claim(
        &self,
        server: &ServerId,
        owner: &PageOwner,
        holder: &str,
        record: &str,
        ttl: Duration,
    ) -> Result<(), super::Rejected> {
        let owner_key = (owner.tenant.as_str(), owner.user.as_str());
        match self
            .store
            .claim(server.as_str(), owner_key, holder, record, ttl)
            .await
        {
            Ok(Claim::Claimed) => {
                self.announce().await;
                Ok(())
            }
            Ok(Claim::Taken) => Err(super::Rejected::ClientIdTaken),
            Err(err) => {
                tracing::warn!(error = %err, "a page could not be recorded in Redis");
                Err(super::Rejected::Unavailable)
            }
        }
    }

    /// Removes a page that left here.
    pub(super) async fn release(&self, server: &ServerId, holder: &str) {
        if let Err(err) = self.store.release(server.as_str(), holder).await {
            tracing::warn!(error = %err, "a page's record could not be removed (it expires)");
        }
        self.announce().await;
    }

    async fn announce(&self) {
        if let Err(err) = self.events.publish(Event::PagesChanged).await {
            tracing::warn!(error = %err, "the other instances could not be told of a page");
        }
    }

    /// Refreshes the records of the pages held here, and reads everyone's: on each heartbeat,
    /// on a local change, and when another instance says its pages changed.
    async fn follow(&self, pages: std::sync::Weak<Pages>, stop: CancellationToken) {
        let Some(heartbeat) = pages.upgrade().map(|p| p.config.heartbeat) else {
            return;
        };
        let mut tick = tokio::time::interval(heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut events = self.events.subscribe();
        loop {
            let Some(pages) = pages.upgrade() else { return };
            tokio::select! {
                () = stop.cancelled() => return,
                _ = tick.tick() => {}
                () = pages.wake.notified() => {}
                event = events.recv() => match event {
                    Ok(Event::PagesChanged)
                    | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Ok(_) => continue,
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                },
            }
            let announce = pages.dirty.swap(false, std::sync::atomic::Ordering::AcqRel);
            let ttl = pages.config.heartbeat_timeout;
            for page in pages.all() {
                if page.gone().is_cancelled() || !pages.is_current(&page) {
                    continue;
                }
                let holder = pages.holder_of(&page);
                let owner = (page.owner.tenant.as_str(), page.owner.user.as_str());
                let record = pages.record_of(&page);
                match self
                    .store
                    .refresh(page.server.as_str(), owner, &holder, &record, ttl)
                    .await
                {
                    Ok(true) => {
                        // It left while its record was being written: no ghost stays.
                        if page.gone().is_cancelled() || !pages.is_current(&page) {
                            let _ = self.store.release(page.server.as_str(), &holder).await;
                        }
                    }
                    Ok(false) => {
                        // The same user's page connected to another instance under this id.
                        tracing::info!(server = %page.server, "a page moved to another instance");
                        pages.replaced(&page);
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "a page's record could not be refreshed");
                    }
                }
            }
            if announce {
                self.announce().await;
            }
            match self.store.list().await {
                Ok(entries) => pages.set_elsewhere(self.instance(), entries),
                Err(err) => tracing::warn!(error = %err, "the pages' registry could not be read"),
            }
            drop(pages);
            // Changes arriving meanwhile gather: however often pages change, here or
            // elsewhere, the registry is written and read at most this often.
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(FOLLOW_SETTLE) => {}
            }
        }
    }

    /// Sends a call of `page`'s `tool` to the instance holding it and waits for the answer.
    pub(super) async fn call(
        &self,
        ctx: &crate::policy::CallContext,
        page: &RemotePage,
        tool: &str,
        arguments: &Map<String, Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, PageError> {
        let not_connected = || super::not_connected(&page.server);
        if !*self.subscribed.borrow() || page.gone.is_cancelled() {
            // The answer could not be heard, or the page is gone: send nothing.
            return Err(not_connected());
        }
        let call_id = crate::digest::random_hex(16);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(call_id.clone(), tx);
        let mut guard = Sent {
            remote: self,
            call_id: &call_id,
            instance: page.instance().to_owned(),
            cancel: false,
        };
        let message = Message::Call {
            call_id: call_id.clone(),
            reply_to: self.instance().to_owned(),
            server: page.server.as_str().to_owned(),
            holder: page.holder.clone(),
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            tool: tool.to_owned(),
            arguments: arguments.clone(),
            timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        };
        let text =
            serde_json::to_string(&message).map_err(|e| PageError::InvalidResult(e.to_string()))?;
        tracing::debug!(server = %page.server, holder = %page.holder, %call_id, "a page call sent to its holder");
        // From here the call may be delivered: a caller that gives up says so.
        guard.cancel = true;
        match self.store.send(page.instance(), &text).await {
            Ok(true) => {}
            Ok(false) => {
                guard.cancel = false;
                return Err(not_connected());
            }
            // Perhaps delivered: the page may run it.
            Err(_) => return Err(PageError::OutcomeUnknown),
        }
        let outcome = tokio::select! {
            outcome = rx => outcome.map_err(|_| PageError::OutcomeUnknown),
            () = page.gone.cancelled() => Err(PageError::OutcomeUnknown),
            () = tokio::time::sleep(timeout + REPLY_GRACE) => Err(PageError::OutcomeUnknown),
        };
        let outcome = outcome?;
        guard.cancel = false;
        outcome.into_result(&page.server)
    }

    fn received(self: &Arc<Self>, pages: &std::sync::Weak<Pages>, payload: &str) {
        let Ok(message) = serde_json::from_str::<Message>(payload) else {
            tracing::debug!("an unreadable inbox message was ignored");
            return;
        };
        match message {
            Message::Reply { call_id, outcome } => {
                let waiting = self
                    .waiting
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&call_id);
                if let Some(waiting) = waiting {
                    let _ = waiting.send(outcome);
                }
            }
            Message::Cancel { call_id } => {
                let serving = self
                    .serving
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&call_id);
                if let Some(serving) = serving {
                    serving.cancel();
                }
            }
            Message::Call {
                call_id,
                reply_to,
                server,
                holder,
                tenant,
                user,
                tool,
                arguments,
                timeout_ms,
            } => {
                let Some(pages) = pages.upgrade() else { return };
                let remote = self.clone();
                // Registered before the call runs, so a cancel right behind it is not lost.
                let cancelled = CancellationToken::new();
                self.serving
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(call_id.clone(), cancelled.clone());
                tokio::spawn(async move {
                    let page = ServerId::new(&server)
                        .and_then(|id| pages.get(&id))
                        .filter(|page| pages.holder_of(page) == holder)
                        .filter(|page| pages.allows(&page.owner, &tenant, &user));
                    let outcome = match page {
                        None => Some(Err(PageError::NotConnected { client: server })),
                        Some(page) => {
                            let timeout = Duration::from_millis(timeout_ms);
                            tokio::select! {
                                result = pages.invoke_local(&page, &tool, &arguments, timeout) => Some(result),
                                // The caller gave up: dropping the call tells the page.
                                () = cancelled.cancelled() => None,
                            }
                        }
                    };
                    remote
                        .serving
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&call_id);
                    let Some(outcome) = outcome else { return };
                    let reply = Message::Reply {
                        call_id,
                        outcome: Answer::of(outcome),
                    };
                    if let Ok(text) = serde_json::to_string(&reply)
                        && let Err(err) = remote.store.send(&reply_to, &text).await
                    {
                        tracing::warn!(error = %err, "a page's answer could not be sent back");
                    }
                });
            }
        }
    }
}

/// A call sent elsewhere: if it ends without the answer, its waiter is removed and (once
/// sent) the holder told to cancel.
struct Sent<'a> {
    remote: &'a Remote,
    call_id: &'a str,
    instance: String,
    cancel: bool,
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        self.remote
            .waiting
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(self.call_id);
        if !self.cancel {
            return;
        }
        let message = Message::Cancel {
            call_id: self.call_id.to_owned(),
        };
        if let Ok(text) = serde_json::to_string(&message) {
            let (store, instance) = (self.remote.store.clone(), self.instance.clone());
            tokio::spawn(async move {
                let _ = store.send(&instance, &text).await;
            });
        }
    }
}

/// Other instances' pages from the registry's `entries`, those held by `instance` left out;
/// an entry unchanged keeps its page (and the calls waiting for it).
pub(super) fn read_entries(
    instance: &str,
    entries: Vec<(String, PageEntry)>,
    before: &HashMap<ServerId, Arc<RemotePage>>,
) -> HashMap<ServerId, Arc<RemotePage>> {
    let mine = format!("{instance}/");
    let mut now = HashMap::new();
    for (server, entry) in entries {
        if entry.holder.starts_with(&mine) {
            continue;
        }
        let Some(server) = ServerId::new(&server) else {
            continue;
        };
        let Ok(record) = serde_json::from_str::<Record>(&entry.record) else {
            tracing::debug!(%server, "an unreadable page record was ignored");
            continue;
        };
        let owner = PageOwner {
            tenant: record.tenant,
            user: record.user,
        };
        // The same connection's record: its page is kept when nothing changed, and calls
        // waiting for it keep waiting when only its tools did.
        let same = before
            .get(&server)
            .filter(|old| old.holder == entry.holder && old.owner == owner);
        let page = match same {
            Some(old) if *old.tools == record.tools => old.clone(),
            _ => Arc::new(RemotePage {
                server: server.clone(),
                owner,
                holder: entry.holder,
                tools: Arc::new(record.tools),
                gone: same.map_or_else(CancellationToken::new, |old| old.gone.clone()),
            }),
        };
        now.insert(server, page);
    }
    for (server, old) in before {
        let kept = now
            .get(server)
            .is_some_and(|page| page.holder == old.holder && page.owner == old.owner);
        if !kept {
            old.gone.cancel();
        }
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(holder: &str, user: &str, tools: &[&str]) -> PageEntry {
        let tools: Vec<Tool> = tools
            .iter()
            .map(|name| {
                Tool::new(
                    name.to_string(),
                    "d",
                    Arc::new(serde_json::Map::from_iter([(
                        "type".to_owned(),
                        Value::from("object"),
                    )])),
                )
            })
            .collect();
        let record = Record {
            client_id: "editor".into(),
            tenant: "t".into(),
            user: user.into(),
            tools,
        };
        PageEntry {
            holder: holder.into(),
            record: serde_json::to_string(&record).expect("JSON"),
        }
    }

    fn id(server: &str) -> ServerId {
        ServerId::new(server).expect("an id")
    }

    #[test]
    fn the_registry_read_keeps_unchanged_pages_and_ends_moved_ones() {
        let entries = vec![
            ("webmcp-editor".to_owned(), entry("a/p/1", "ann", &["get"])),
            ("webmcp-mine".to_owned(), entry("b/p/7", "ann", &["get"])),
            ("webmcp-notes".to_owned(), entry("a/p/2", "bob", &["get"])),
            (
                "not a server id".to_owned(),
                entry("a/p/3", "bob", &["get"]),
            ),
            (
                "webmcp-broken".to_owned(),
                PageEntry {
                    holder: "a/p/4".into(),
                    record: "{".into(),
                },
            ),
        ];
        // Pages held by this instance (b) and unreadable entries are left out.
        let first = read_entries("b", entries, &HashMap::new());
        let mut servers: Vec<&str> = first.keys().map(ServerId::as_str).collect();
        servers.sort_unstable();
        assert_eq!(servers, ["webmcp-editor", "webmcp-notes"]);
        assert_eq!(first[&id("webmcp-notes")].owner.user, "bob");
        assert_eq!(first[&id("webmcp-editor")].instance(), "a");

        // Unchanged: the same page. New tools under the same holder: calls keep waiting.
        // Moved to another holder, or gone: calls waiting for it end.
        let editor = first[&id("webmcp-editor")].clone();
        let notes = first[&id("webmcp-notes")].clone();
        let second = read_entries(
            "b",
            vec![
                (
                    "webmcp-editor".to_owned(),
                    entry("a/p/1", "ann", &["get", "set"]),
                ),
                ("webmcp-extra".to_owned(), entry("c/p/1", "cy", &["get"])),
            ],
            &first,
        );
        assert_eq!(second[&id("webmcp-editor")].tools.len(), 2);
        assert!(!editor.gone.is_cancelled(), "same holder, new tools");
        assert!(notes.gone.is_cancelled(), "gone from the registry");
        let third = read_entries(
            "b",
            vec![(
                "webmcp-editor".to_owned(),
                entry("c/q/9", "ann", &["get", "set"]),
            )],
            &second,
        );
        assert!(editor.gone.is_cancelled(), "moved to another holder");
        assert!(!third[&id("webmcp-editor")].gone.is_cancelled());
        let fourth = read_entries("b", vec![], &third);
        assert!(fourth.is_empty());
        assert!(third[&id("webmcp-editor")].gone.is_cancelled());
    }

    #[test]
    fn answers_cross_instances_intact() {
        let result: CallToolResult = serde_json::from_value(serde_json::json!({
            "content": [{"type": "text", "text": "hi"}], "structuredContent": {"a": 1}
        }))
        .expect("a result");
        let cases = vec![
            Ok(result),
            Err(PageError::NotConnected {
                client: "editor".into(),
            }),
            Err(PageError::OutcomeUnknown),
            Err(PageError::InvalidResult("no content".into())),
            Err(PageError::Timeout {
                after: Duration::from_millis(1500),
            }),
        ];
        let server = id("webmcp-editor");
        for case in cases {
            let text = serde_json::to_string(&Answer::of(case.clone())).expect("JSON");
            let back: Answer = serde_json::from_str(&text).expect("read back");
            assert_eq!(back.into_result(&server), case, "{text}");
        }
    }
}
