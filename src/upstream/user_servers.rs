//! Connections to the remote servers users add for themselves (`[user_servers]`): one
//! session per user and server, opened on first use, closed when idle or removed, at most
//! `max_open` per user at once on this instance (at the bound the least recently used idle
//! one is closed for a new one). Each user's sessions are theirs alone: one user's broken
//! server holds only that user's own requests, each bounded by its deadline.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::Duration,
};

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use tokio_util::task::TaskTracker;

use super::{
    CallRelay, ConnectOptions, ServerState, UpstreamError,
    connect::connect_user_session,
    input,
    relay::{Owner, RelayRegistry},
    sessions::{CallerSessions, Lease, Live},
    tool_call::CallLink,
    watch::WatchRegistry,
};
use crate::config::ServerConfig;

/// The server's refusal of the user's token, when that is why `err` happened.
fn refused_or(live: &Live, err: UpstreamError) -> UpstreamError {
    match live.refusals.as_ref().and_then(|note| note.take()) {
        Some(refusal) => UpstreamError::TokenRefused(refusal),
        None => err,
    }
}

/// Every user's sessions with the servers they added.
pub struct UserServerSessions {
    options: ConnectOptions,
    tracker: TaskTracker,
    /// By owner (tenant and user), that user's sessions by server key.
    owners: Mutex<HashMap<String, Arc<CallerSessions>>>,
    max_open: usize,
    idle: Duration,
}

/// Which session: whose, and the server as connected (its key names the address and the
/// headers, so a server removed and added again with others never reuses the old session).
pub struct Target<'a> {
    pub owner: &'a str,
    pub key: &'a str,
    pub server: &'a ServerConfig,
}

impl UserServerSessions {
    pub fn new(options: ConnectOptions, max_open: usize, idle: Duration) -> UserServerSessions {
        UserServerSessions {
            options,
            tracker: TaskTracker::new(),
            owners: Mutex::new(HashMap::new()),
            max_open,
            idle,
        }
    }

    fn owners(&self) -> MutexGuard<'_, HashMap<String, Arc<CallerSessions>>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sessions(&self, owner: &str) -> Arc<CallerSessions> {
        self.owners()
            .entry(owner.to_owned())
            .or_insert_with(|| Arc::new(CallerSessions::bounded(self.max_open, self.idle)))
            .clone()
    }

    async fn lease(&self, target: &Target<'_>) -> Result<Lease, UpstreamError> {
        let connect = || async {
            let relays = RelayRegistry::for_one_caller();
            let watches = WatchRegistry::new(self.tracker.clone());
            let connection =
                connect_user_session(target.server, &self.options, relays.clone(), watches).await?;
            Ok(Live {
                service: connection.service,
                relays,
                link: connection.link,
                refusals: connection.refusals,
                watches: None,
            })
        };
        match self.sessions(target.owner).lease(target.key, connect).await {
            Some(lease) => lease,
            None => Err(UpstreamError::Unavailable {
                state: ServerState::Degraded,
                last_error: Some(format!(
                    "all {} of your servers' connections are in use; try again shortly",
                    self.max_open
                )),
            }),
        }
    }

    /// Every tool the server lists (all pages), bounded by `deadline` besides the connect
    /// deadline.
    pub async fn list_tools(
        &self,
        target: &Target<'_>,
        deadline: Duration,
    ) -> Result<Vec<Tool>, UpstreamError> {
        let lease = self.lease(target).await?;
        let live = lease.live();
        let peer = live.service.peer().clone();
        if peer
            .peer_info()
            .is_none_or(|i| i.capabilities.tools.is_none())
        {
            return Ok(Vec::new());
        }
        let _in_flight = live.relays.register_request(Owner::Gateway, deadline);
        let bounds = super::listing::ListBounds::from(&self.options.limits);
        let listed = super::listing::tools(&peer, bounds);
        let tools = match tokio::time::timeout(deadline, listed).await {
            Err(_) => return Err(UpstreamError::Timeout { after: deadline }),
            Ok(listed) => listed
                .map_err(UpstreamError::from_service)
                .map_err(|err| refused_or(live, err))??,
        };
        if let Some(CallLink::Http(link)) = &live.link {
            link.listed(&tools);
        }
        Ok(tools)
    }

    /// Calls a tool over the user's session, bounded by `timeout`, relaying what the server
    /// sends during the call to `relay`.
    pub async fn call_tool(
        &self,
        target: &Target<'_>,
        params: CallToolRequestParams,
        timeout: Duration,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> Result<CallToolResult, UpstreamError> {
        let lease = self.lease(target).await?;
        let live = lease.live();
        let peer = live.service.peer().clone();
        let guard = live.relays.register(relay.clone(), timeout);
        let call = async {
            let result =
                input::call_tool(&peer, live.link.as_ref(), params, &guard, relay.as_ref()).await;
            if relay.is_some() {
                guard.drain().await;
            }
            result
        };
        let outcome = tokio::time::timeout(timeout, call).await;
        drop(guard);
        match outcome {
            Err(_) => Err(UpstreamError::Timeout { after: timeout }),
            Ok(Err(err)) => Err(refused_or(live, err)),
            Ok(result) => result,
        }
    }

    /// Closes every session of `owner` whose key starts with `prefix` (a server removed).
    pub fn close(&self, owner: &str, prefix: &str) {
        let sessions = self.owners().get(owner).cloned();
        if let Some(sessions) = sessions {
            sessions.close_matching(|key| key.starts_with(prefix));
        }
    }

    /// How many sessions `owner` has open on this instance.
    pub fn open(&self, owner: &str) -> usize {
        self.owners().get(owner).map_or(0, |s| s.len())
    }

    /// Closes the sessions idle too long, and forgets owners with none left.
    pub fn prune(&self) {
        let all: Vec<Arc<CallerSessions>> = self.owners().values().cloned().collect();
        for sessions in &all {
            sessions.prune();
        }
        self.owners().retain(|_, sessions| sessions.len() > 0);
    }

    /// Closes every session.
    pub async fn shutdown(&self) {
        let all: Vec<Arc<CallerSessions>> = self.owners().drain().map(|(_, s)| s).collect();
        for sessions in all {
            sessions.close_all();
        }
        self.tracker.close();
        self.tracker.wait().await;
    }
}
