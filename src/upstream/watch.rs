//! Resource subscriptions on one upstream server, shared by every caller: the upstream is
//! subscribed once per URI however many callers watch it (a reference count), each
//! `notifications/resources/updated` goes to every caller watching that URI, the last
//! caller to leave unsubscribes upstream, and a reconnect subscribes the new connection.
//!
//! Sessions of 2024-11-05 to 2025-11-25 use `resources/subscribe` and deliver updates to
//! [`super::UpstreamClient`]; on 2026-07-28 each URI gets its own `subscriptions/listen`
//! stream, cancelled when the last caller leaves.
#![expect(
    deprecated,
    reason = "resources/subscribe is legacy in 2026-07-28, but most servers still speak it"
)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use rmcp::{
    RoleClient,
    model::{
        ProtocolVersion, ServerNotification, SubscribeRequestParams, SubscriptionFilter,
        UnsubscribeRequestParams,
    },
    service::Peer,
};
use tokio::sync::mpsc;
use tokio_util::{
    sync::{CancellationToken, DropGuard},
    task::TaskTracker,
};

use super::UpstreamError;

/// Most URIs one connection keeps subscribed upstream at once: each holds an upstream
/// subscription (on 2026-07-28, a stream); callers together may not make the gateway hold
/// more of them on one server.
pub const MAX_WATCHED_URIS: usize = 1024;

/// Where one caller's updates go: the URI of each updated resource. Bounded by its maker;
/// an update that does not fit is dropped (the caller re-reads the resource on the next).
pub type UpdateSink = mpsc::Sender<String>;

/// How the upstream is subscribed to one URI.
enum Upstream {
    /// `resources/subscribe` on this peer; `resources/unsubscribe` when the last caller leaves.
    Legacy(Peer<RoleClient>),
    /// A `subscriptions/listen` stream, cancelled (by its task) when this guard drops.
    Listen { _stop: DropGuard },
}

struct Watched {
    sinks: Vec<(u64, UpdateSink)>,
    upstream: Upstream,
}

/// The URIs watched on one upstream server. Kept across reconnects of its connection.
pub struct WatchRegistry {
    watched: Mutex<HashMap<String, Watched>>,
    /// Serializes subscribing and unsubscribing upstream, so a URI is never subscribed twice
    /// nor unsubscribed while a new caller arrives.
    changes: tokio::sync::Mutex<()>,
    next: AtomicU64,
    /// Tracks unsubscriptions sent after a caller left, so shutdown waits for them.
    tracker: TaskTracker,
}

impl std::fmt::Debug for WatchRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WatchRegistry")
            .field("uris", &self.lock().len())
            .finish()
    }
}

impl WatchRegistry {
    pub fn new(tracker: TaskTracker) -> Arc<WatchRegistry> {
        Arc::new(WatchRegistry {
            watched: Mutex::new(HashMap::new()),
            changes: tokio::sync::Mutex::new(()),
            next: AtomicU64::new(0),
            tracker,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Watched>> {
        // A poisoned lock only means another thread panicked while editing a plain map.
        self.watched
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Tells every caller watching `uri` that it changed.
    pub fn updated(&self, uri: &str) {
        let watched = self.lock();
        let Some(entry) = watched.get(uri) else {
            return;
        };
        for (_, sink) in &entry.sinks {
            if sink.try_send(uri.to_owned()).is_err() {
                tracing::debug!("a resource update was not queued for a caller; dropped");
            }
        }
    }

    /// Adds `sink` as a watcher of `uri`, subscribing upstream on `peer` first if nobody
    /// watched it yet (bounded by `timeout`).
    pub(super) async fn watch(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
        uri: &str,
        sink: UpdateSink,
        timeout: Duration,
    ) -> Result<ResourceWatch, UpstreamError> {
        let _changes = self.changes.lock().await;
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(entry) = self.lock().get_mut(uri) {
            entry.sinks.push((key, sink));
            return Ok(self.guard(uri, key));
        }
        if self.lock().len() >= MAX_WATCHED_URIS {
            return Err(UpstreamError::Rpc {
                code: rmcp::model::ErrorCode::INVALID_REQUEST.0,
                message: format!("at most {MAX_WATCHED_URIS} resources are watched per server"),
            });
        }
        let upstream = tokio::time::timeout(timeout, self.subscribe(peer, uri))
            .await
            .map_err(|_| UpstreamError::Timeout { after: timeout })??;
        self.lock().insert(
            uri.to_owned(),
            Watched {
                sinks: vec![(key, sink)],
                upstream,
            },
        );
        Ok(self.guard(uri, key))
    }

    /// Subscribes a new connection (after a reconnect) to every URI still watched, all
    /// within `timeout`: the old connection's subscriptions died with it. A URI the server
    /// now refuses stays watched without updates, and is logged.
    pub(super) async fn renew(self: &Arc<Self>, peer: &Peer<RoleClient>, timeout: Duration) {
        let _changes = self.changes.lock().await;
        let uris: Vec<String> = self.lock().keys().cloned().collect();
        let renew = async {
            for uri in uris {
                match self.subscribe(peer, &uri).await {
                    Ok(upstream) => {
                        if let Some(entry) = self.lock().get_mut(&uri) {
                            entry.upstream = upstream;
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "a watched resource could not be subscribed again");
                    }
                }
            }
        };
        if tokio::time::timeout(timeout, renew).await.is_err() {
            tracing::warn!("renewing resource subscriptions did not finish within {timeout:?}");
        }
    }

    fn guard(self: &Arc<Self>, uri: &str, key: u64) -> ResourceWatch {
        ResourceWatch {
            hold: None,
            registry: self.clone(),
            uri: uri.to_owned(),
            key,
        }
    }

    async fn subscribe(
        self: &Arc<Self>,
        peer: &Peer<RoleClient>,
        uri: &str,
    ) -> Result<Upstream, UpstreamError> {
        let modern = peer
            .peer_info()
            .is_some_and(|i| i.protocol_version == ProtocolVersion::V_2026_07_28);
        if !modern {
            peer.subscribe(SubscribeRequestParams::new(uri))
                .await
                .map_err(UpstreamError::from_service)?;
            return Ok(Upstream::Legacy(peer.clone()));
        }
        let filter = SubscriptionFilter::builder()
            .resource_subscription(uri)
            .build();
        let mut subscription = peer
            .listen(filter)
            .await
            .map_err(UpstreamError::from_service)?;
        let accepted = subscription
            .acknowledged()
            .resource_subscriptions
            .as_ref()
            .is_some_and(|uris| uris.iter().any(|u| u == uri));
        if !accepted {
            return Err(UpstreamError::Protocol(
                "the server did not accept a subscription to this resource".to_owned(),
            ));
        }
        let stop = CancellationToken::new();
        let registry = Arc::downgrade(self);
        let ended = stop.clone();
        self.tracker.spawn(async move {
            loop {
                let next = tokio::select! {
                    () = ended.cancelled() => return,
                    next = subscription.next() => next,
                };
                let update = match next {
                    Ok(Some(ServerNotification::ResourceUpdatedNotification(update))) => update,
                    Ok(Some(_)) => continue,
                    // The stream ended (the connection, or the server, closed it).
                    Ok(None) | Err(_) => return,
                };
                match registry.upgrade() {
                    Some(registry) => registry.updated(&update.params.uri),
                    None => return,
                }
            }
        });
        Ok(Upstream::Listen {
            _stop: stop.drop_guard(),
        })
    }

    /// Removes the watcher `key` of `uri`; the last one out unsubscribes upstream.
    fn leave(self: &Arc<Self>, uri: &str, key: u64) {
        let empty = {
            let mut watched = self.lock();
            let Some(entry) = watched.get_mut(uri) else {
                return;
            };
            entry.sinks.retain(|(k, _)| *k != key);
            entry.sinks.is_empty()
        };
        if !empty {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left (shutdown): the connection goes with it.
            self.lock().remove(uri);
            return;
        };
        let registry = self.clone();
        let uri = uri.to_owned();
        let task = async move {
            let _changes = registry.changes.lock().await;
            let removed = {
                let mut watched = registry.lock();
                match watched.get(&uri) {
                    // A caller came back while this waited: the subscription stays.
                    Some(entry) if !entry.sinks.is_empty() => None,
                    _ => watched.remove(&uri),
                }
            };
            if let Some(Watched {
                upstream: Upstream::Legacy(peer),
                ..
            }) = removed
            {
                let unsubscribe = peer.unsubscribe(UnsubscribeRequestParams::new(uri));
                if let Ok(Err(error)) = tokio::time::timeout(UNSUBSCRIBE_TIMEOUT, unsubscribe).await
                {
                    tracing::debug!(%error, "resources/unsubscribe failed upstream");
                }
            }
        };
        self.tracker.spawn_on(task, &runtime);
    }
}

/// How long an upstream gets to acknowledge an unsubscription nobody waits for.
const UNSUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(10);

/// One caller watching one URI; dropping it stops the caller's updates at once.
pub struct ResourceWatch {
    registry: Arc<WatchRegistry>,
    uri: String,
    key: u64,
    /// What must live as long as the watch: the user's own session it was made on.
    hold: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl ResourceWatch {
    /// This watch, keeping `hold` alive until it ends (left first, then `hold` dropped).
    pub(super) fn holding(mut self, hold: Box<dyn std::any::Any + Send + Sync>) -> ResourceWatch {
        self.hold = Some(hold);
        self
    }
}

impl std::fmt::Debug for ResourceWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceWatch")
            .field("uri", &self.uri)
            .finish()
    }
}

impl Drop for ResourceWatch {
    fn drop(&mut self) {
        self.registry.leave(&self.uri, self.key);
    }
}
