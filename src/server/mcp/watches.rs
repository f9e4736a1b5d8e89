//! One MCP session's resource subscriptions: the URIs it watches (bounded), and the task that
//! forwards their `notifications/resources/updated` to the session's client. Closing the
//! session drops its watches, and the last watcher of a URI unsubscribes upstream.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use rmcp::{ErrorData, Peer, RoleServer, model::ResourceUpdatedNotificationParam};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::gateway::{ResourceWatch, UpdateSink};

/// Most resources one session may watch: each costs an entry here and a place in the
/// upstream's reference count; a client watching more is doing something else than
/// following the resources it shows. Sessions are capped too, which bounds the total.
pub const MAX_SESSION_WATCHES: usize = 100;

/// Updates queued for one session's client before new ones are dropped: a client that stops
/// reading must not grow our memory; it re-reads the resource on the next update it gets.
const UPDATE_QUEUE: usize = 64;

#[derive(Default)]
struct State {
    by_uri: HashMap<String, ResourceWatch>,
    /// Made with the first subscription, with the forwarding task reading its other end.
    sink: Option<UpdateSink>,
}

/// The resources one session watches.
#[derive(Default, Clone)]
pub struct SessionWatches {
    state: Arc<Mutex<State>>,
}

impl SessionWatches {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means another thread panicked while editing a plain map.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn contains(&self, uri: &str) -> bool {
        self.lock().by_uri.contains_key(uri)
    }

    /// Refuses a new URI once the session watches [`MAX_SESSION_WATCHES`].
    pub fn check_room(&self) -> Result<(), ErrorData> {
        if self.lock().by_uri.len() >= MAX_SESSION_WATCHES {
            return Err(too_many());
        }
        Ok(())
    }

    /// Where this session's updates go; the first call starts forwarding them to `peer`
    /// until `alive` is cancelled (the session ended).
    pub fn sink(&self, peer: &Peer<RoleServer>, alive: &CancellationToken) -> UpdateSink {
        let mut state = self.lock();
        if let Some(sink) = &state.sink {
            return sink.clone();
        }
        let (sink, updates) = mpsc::channel(UPDATE_QUEUE);
        state.sink = Some(sink.clone());
        tokio::spawn(forward(self.clone(), peer.clone(), updates, alive.clone()));
        sink
    }

    /// Keeps `watch` of `uri` (a concurrent subscription to the same URI leaves one). Over
    /// the cap (concurrent subscriptions raced past the check), the watch is dropped.
    pub fn insert(&self, uri: &str, watch: ResourceWatch) -> Result<(), ErrorData> {
        let mut state = self.lock();
        if !state.by_uri.contains_key(uri) && state.by_uri.len() >= MAX_SESSION_WATCHES {
            return Err(too_many());
        }
        state.by_uri.insert(uri.to_owned(), watch);
        Ok(())
    }

    /// Stops watching `uri`: no update of it reaches the client after this returns.
    pub fn remove(&self, uri: &str) {
        let removed = self.lock().by_uri.remove(uri);
        drop(removed);
    }
}

fn too_many() -> ErrorData {
    ErrorData::invalid_request(
        format!("this session already watches {MAX_SESSION_WATCHES} resources; unsubscribe first"),
        None,
    )
}

/// Sends each queued update to the client, unless the session stopped watching its URI
/// meanwhile.
async fn forward(
    watches: SessionWatches,
    peer: Peer<RoleServer>,
    mut updates: mpsc::Receiver<String>,
    alive: CancellationToken,
) {
    loop {
        let uri = tokio::select! {
            () = alive.cancelled() => return,
            uri = updates.recv() => match uri {
                Some(uri) => uri,
                None => return,
            },
        };
        if !watches.contains(&uri) {
            continue;
        }
        let params = ResourceUpdatedNotificationParam::new(uri);
        if let Err(error) = peer.notify_resource_updated(params).await {
            tracing::debug!(%error, "resource update not relayed; the client is gone");
            return;
        }
    }
}
