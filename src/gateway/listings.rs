//! Each user's own tool list of an `auth = "oauth"` server. Such a server may list different
//! tools for different tokens (scopes, plans, workspaces), so a connected user sees the
//! tools the server lists for them, and may call only those; a user who has not connected
//! sees what the shared session lists (so a chat can offer to connect), and can call none.
//!
//! The catalog of such a server is the union of the shared session's list and every user's
//! list held here, fingerprinted, pinned and scanned like any other; each user's view is the
//! part of it their own list names.

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    sync::{Arc, Mutex, MutexGuard},
};

use rmcp::model::Tool;
use tokio::time::Instant;

use super::Gateway;
use crate::{
    catalog::CatalogTool,
    config::{CacheConfig, ServerId},
    policy::CallContext,
    upstream::{UpstreamError, oauth::UserToken},
};

/// What of an `auth = "oauth"` server's tools one caller sees.
#[derive(Debug, Clone)]
pub(super) enum View {
    /// Not connected: the shared session's tools (none of which they can call).
    Shared,
    /// Connected: the tools their own token lists.
    Own(Arc<HashSet<String>>),
    /// Connected, but their list could not be had and none was known: nothing.
    Hidden,
}

struct Listing {
    /// The user session it was listed over (the user and a digest of the token).
    session: String,
    tools: Arc<Vec<Tool>>,
    names: Arc<HashSet<String>>,
    at: Instant,
}

#[derive(Default)]
struct Held {
    /// The shared session's tool names, per server, as of the last catalog.
    shared: HashMap<ServerId, Arc<HashSet<String>>>,
    /// Each user's latest list, by server and user (never by token).
    users: BTreeMap<(ServerId, String), Listing>,
}

/// Users' tool lists, bounded in age (re-listed after the tool-list cache's TTL) and in
/// entries (the oldest dropped first).
pub(super) struct UserListings {
    config: CacheConfig,
    held: Mutex<Held>,
}

impl UserListings {
    pub(super) fn new(config: &CacheConfig) -> UserListings {
        UserListings {
            config: config.clone(),
            held: Mutex::new(Held::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Held> {
        self.held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Notes the shared session's list of `server` (at each catalog rebuild).
    pub(super) fn set_shared(&self, server: &ServerId, tools: &[Tool]) {
        let names = tools.iter().map(|t| t.name.to_string()).collect();
        self.lock().shared.insert(server.clone(), Arc::new(names));
    }

    /// The tools of `server` every user's list adds to the shared session's `tools`, each
    /// name once (the shared session's definition first, then users' in key order).
    pub(super) fn union(&self, server: &ServerId, tools: &mut Vec<Tool>) {
        let held = self.lock();
        let mut seen: HashSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
        for ((id, _), listing) in held.users.range((server.clone(), String::new())..) {
            if id != server {
                break;
            }
            for tool in listing.tools.iter() {
                if seen.insert(tool.name.to_string()) {
                    tools.push(tool.clone());
                }
            }
        }
    }

    /// Forgets what `user` (a [`UserToken::user_key`]) listed of `server`.
    pub(super) fn forget(&self, server: &ServerId, user: &str) {
        self.lock().users.remove(&(server.clone(), user.to_owned()));
    }

    fn fresh(&self, server: &ServerId, token: &UserToken) -> Option<Arc<HashSet<String>>> {
        let held = self.lock();
        let listing = held
            .users
            .get(&(server.clone(), token.user_key().to_owned()))?;
        (listing.session == token.session && listing.at.elapsed() < self.config.ttl)
            .then(|| listing.names.clone())
    }

    /// Any list of the user's, however old or over whichever token.
    fn last(&self, server: &ServerId, token: &UserToken) -> Option<Arc<HashSet<String>>> {
        self.lock()
            .users
            .get(&(server.clone(), token.user_key().to_owned()))
            .map(|l| l.names.clone())
    }

    fn shared(&self, server: &ServerId) -> Arc<HashSet<String>> {
        self.lock().shared.get(server).cloned().unwrap_or_default()
    }

    /// Keeps `tools` as the user's list; true when it names a tool no list held before.
    fn keep(&self, server: &ServerId, token: &UserToken, tools: Vec<Tool>) -> bool {
        let names: HashSet<String> = tools.iter().map(|t| t.name.to_string()).collect();
        let mut held = self.lock();
        let known = |name: &String| {
            held.shared.get(server).is_some_and(|s| s.contains(name))
                || held
                    .users
                    .iter()
                    .any(|((id, _), l)| id == server && l.names.contains(name))
        };
        let new = names.iter().any(|n| !known(n));
        held.users.insert(
            (server.clone(), token.user_key().to_owned()),
            Listing {
                session: token.session.clone(),
                tools: Arc::new(tools),
                names: Arc::new(names),
                at: Instant::now(),
            },
        );
        while held.users.len() > self.config.max_entries.max(1) {
            // Ties on time fall back to key order, so eviction never depends on hashing.
            let oldest = held
                .users
                .iter()
                .min_by(|a, b| (a.1.at, a.0).cmp(&(b.1.at, b.0)))
                .map(|(k, _)| k.clone());
            match oldest {
                Some(oldest) => held.users.remove(&oldest),
                None => break,
            };
        }
        new
    }
}

impl Gateway {
    /// What `ctx` sees of `server`, an `auth = "oauth"` server: their own list when they
    /// are connected (listed over their session when none is fresh), else the shared one.
    pub(super) async fn oauth_view(&self, ctx: &CallContext, server: &ServerId) -> View {
        match self.user_token(ctx, server).await {
            Ok(token) => self.own_view(ctx, server, &token).await,
            Err(_) => View::Shared,
        }
    }

    /// [`Gateway::oauth_view`] with the caller's token already at hand.
    pub(super) async fn own_view(
        &self,
        ctx: &CallContext,
        server: &ServerId,
        token: &UserToken,
    ) -> View {
        let listings = &self.inner.listings;
        if let Some(names) = listings.fresh(server, token) {
            return View::Own(names);
        }
        match self.inner.manager.list_tools_as(server, token).await {
            Ok(tools) => {
                let tools = match self.config().server(server) {
                    Some(config) => tools
                        .into_iter()
                        .filter(|t| config.exposes(&t.name))
                        .collect(),
                    None => Vec::new(),
                };
                if listings.keep(server, token, tools) {
                    // A tool no list named before: in the catalog before it is shown.
                    self.rebuild_catalog().await;
                }
                listings
                    .fresh(server, token)
                    .map_or(View::Hidden, View::Own)
            }
            Err(UpstreamError::TokenRefused(refusal)) => {
                // Expired or wanting more scope: the caller connects again.
                let _ = self.token_refused(ctx, server, refusal).await;
                listings.forget(server, token.user_key());
                View::Shared
            }
            Err(err) => {
                tracing::debug!(%server, error = %err, "a user's tool list could not be had");
                listings.last(server, token).map_or(View::Hidden, View::Own)
            }
        }
    }

    /// Forgets `ctx`'s own list of `server` (they disconnected).
    pub(crate) fn forget_listing(&self, ctx: &CallContext, server: &ServerId) {
        self.inner
            .listings
            .forget(server, &UserToken::user_key_of(&ctx.tenant, &ctx.user));
    }

    /// The `auth = "oauth"` servers `ctx`'s tenant sees.
    pub(super) fn oauth_servers(&self, ctx: &CallContext) -> Vec<ServerId> {
        self.config()
            .servers
            .iter()
            .filter(|s| s.oauth.is_some() && self.tenant_sees(ctx, &s.id))
            .map(|s| s.id.clone())
            .collect()
    }

    /// The views of every `auth = "oauth"` server among `servers`, found concurrently.
    pub(super) async fn oauth_views(
        &self,
        ctx: &CallContext,
        servers: impl IntoIterator<Item = ServerId>,
    ) -> HashMap<ServerId, View> {
        let config = self.config();
        let wanted: Vec<ServerId> = servers
            .into_iter()
            .collect::<HashSet<_>>()
            .into_iter()
            .filter(|id| config.server(id).is_some_and(|s| s.oauth.is_some()))
            .collect();
        let views =
            futures::future::join_all(wanted.iter().map(|id| self.oauth_view(ctx, id))).await;
        wanted.into_iter().zip(views).collect()
    }

    /// Lists, for `ctx`, every `auth = "oauth"` server their tenant sees; true when there
    /// was any (the catalog may have grown).
    pub(super) async fn may_list_more(&self, ctx: &CallContext) -> bool {
        let oauth = self.oauth_servers(ctx);
        let any = !oauth.is_empty();
        self.oauth_views(ctx, oauth).await;
        any
    }

    /// Whether `tool` is in what `views` let the caller see (every tool of other servers).
    pub(super) fn in_view(&self, views: &HashMap<ServerId, View>, tool: &CatalogTool) -> bool {
        match views.get(&tool.server) {
            None => true,
            Some(View::Shared) => self
                .inner
                .listings
                .shared(&tool.server)
                .contains(tool.upstream.name.as_ref()),
            Some(View::Own(names)) => names.contains(tool.upstream.name.as_ref()),
            Some(View::Hidden) => false,
        }
    }
}
