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
    gateway::GatewayError,
    policy::CallContext,
    upstream::{UpstreamError, oauth::UserToken},
};

/// The names of an `auth = "oauth"` server's tools one caller sees.
pub(super) type Names = Arc<HashSet<String>>;

struct Listing {
    /// The user session it was listed over (the user and a digest of the token).
    session: String,
    tools: Arc<Vec<Tool>>,
    names: Names,
    at: Instant,
}

#[derive(Default)]
struct Held {
    /// The shared session's tool names, per server, as of the last catalog.
    shared: HashMap<ServerId, Names>,
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

    /// The user's latest list of `server`, and whether it is fresh (listed over this token,
    /// within the TTL).
    fn held_for(&self, server: &ServerId, token: &UserToken) -> Option<(Names, bool)> {
        let held = self.lock();
        let listing = held
            .users
            .get(&(server.clone(), token.user_key().to_owned()))?;
        let fresh = listing.session == token.session && listing.at.elapsed() < self.config.ttl;
        Some((listing.names.clone(), fresh))
    }

    fn shared(&self, server: &ServerId) -> Names {
        self.lock().shared.get(server).cloned().unwrap_or_default()
    }

    /// Keeps `tools` as the user's list, dropping the oldest lists beyond the bound.
    fn keep(&self, server: &ServerId, token: &UserToken, tools: Vec<Tool>) -> Names {
        let names: Names = Arc::new(tools.iter().map(|t| t.name.to_string()).collect());
        let mut held = self.lock();
        held.users.insert(
            (server.clone(), token.user_key().to_owned()),
            Listing {
                session: token.session.clone(),
                tools: Arc::new(tools),
                names: names.clone(),
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
        names
    }
}

impl Gateway {
    /// The tools of every `auth = "oauth"` server `ctx`'s tenant sees that `ctx` sees:
    /// their own list where they are connected, else the shared session's. Found
    /// concurrently; other servers are absent (all their tools are seen).
    pub(super) async fn oauth_views(&self, ctx: &CallContext) -> HashMap<ServerId, Names> {
        let servers: Vec<ServerId> = self
            .config()
            .servers
            .iter()
            .filter(|s| s.oauth.is_some() && self.tenant_sees(ctx, &s.id))
            .map(|s| s.id.clone())
            .collect();
        let views = futures::future::join_all(servers.iter().map(|id| self.oauth_view(ctx, id)));
        let views = views.await;
        servers.into_iter().zip(views).collect()
    }

    async fn oauth_view(&self, ctx: &CallContext, server: &ServerId) -> Names {
        let own = match self.user_token(ctx, server).await {
            Ok(token) => self.own_view(ctx, server, &token).await,
            Err(_) => return self.inner.listings.shared(server),
        };
        match own {
            Ok(Some(names)) => names,
            // Connected, but no list of theirs could be had: none of someone else's either.
            Ok(None) => Names::default(),
            // Refused: no longer connected, as far as they are concerned.
            Err(_) => self.inner.listings.shared(server),
        }
    }

    /// The names `token`'s owner may call on `server`: their fresh list, listed now over
    /// their session when there is none (their last one if listing fails; `None` if there
    /// is none). A refusal of the token is the error to answer with (connect again).
    pub(super) async fn own_view(
        &self,
        ctx: &CallContext,
        server: &ServerId,
        token: &UserToken,
    ) -> Result<Option<Names>, GatewayError> {
        let listings = &self.inner.listings;
        let held = listings.held_for(server, token);
        if let Some((names, true)) = held {
            return Ok(Some(names));
        }
        match self.inner.manager.list_tools_as(server, token).await {
            Ok(tools) => {
                let Some(config) = self.config().server(server) else {
                    return Ok(None);
                };
                let tools: Vec<Tool> = tools
                    .into_iter()
                    .filter(|t| config.exposes(&t.name))
                    .collect();
                let catalog = self.catalog();
                let listed: HashSet<&str> = catalog
                    .tools()
                    .iter()
                    .filter(|t| &t.server == server)
                    .map(|t| t.upstream.name.as_ref())
                    .collect();
                let unseen = tools.iter().any(|t| !listed.contains(t.name.as_ref()));
                drop(listed);
                drop(catalog);
                let names = listings.keep(server, token, tools);
                if unseen {
                    // A tool the catalog lacks: in it before it is shown.
                    self.rebuild_catalog().await;
                }
                Ok(Some(names))
            }
            Err(UpstreamError::TokenRefused(refusal)) => {
                listings.forget(server, token.user_key());
                Err(self.token_refused(ctx, server, refusal).await)
            }
            Err(err) => {
                tracing::debug!(%server, error = %err, "a user's tool list could not be had");
                Ok(held.map(|(names, _)| names))
            }
        }
    }

    /// Forgets `ctx`'s own list of `server` (they disconnected).
    pub(crate) fn forget_listing(&self, ctx: &CallContext, server: &ServerId) {
        self.inner
            .listings
            .forget(server, &UserToken::user_key_of(&ctx.tenant, &ctx.user));
    }
}

/// Whether `tool` is among what `views` let the caller see.
pub(super) fn in_view(views: &HashMap<ServerId, Names>, tool: &CatalogTool) -> bool {
    views
        .get(&tool.server)
        .is_none_or(|names| names.contains(tool.upstream.name.as_ref()))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use zeroize::Zeroizing;

    use super::*;

    fn tool(name: &str) -> Tool {
        Tool::new(name.to_owned(), "a tool", Arc::new(serde_json::Map::new()))
    }

    fn token(user: &str, digest: &str) -> UserToken {
        UserToken::new("acme", user, digest, Zeroizing::new("secret".to_owned()))
    }

    #[tokio::test(start_paused = true)]
    async fn lists_are_fresh_for_one_token_and_the_ttl_and_bounded_in_number() {
        let listings = UserListings::new(&CacheConfig {
            ttl: Duration::from_secs(60),
            max_entries: 2,
        });
        let server = ServerId::new("notes").expect("id");
        let alice = token("alice", "t1");
        listings.keep(&server, &alice, vec![tool("a"), tool("b")]);
        let (names, fresh) = listings.held_for(&server, &alice).expect("held");
        assert!(fresh && names.contains("a") && names.contains("b"));
        // A renewed token lists anew; the old list is still there to fall back on.
        let renewed = token("alice", "t2");
        let (names, fresh) = listings.held_for(&server, &renewed).expect("held");
        assert!(!fresh && names.contains("a"));
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(listings.held_for(&server, &alice).map(|h| h.1), Some(false));

        // The union adds each user's tools once, after the shared session's (users in key
        // order: hashes of their names).
        listings.set_shared(&server, &[tool("a")]);
        listings.keep(&server, &token("bob", "t3"), vec![tool("a"), tool("c")]);
        let mut tools = vec![tool("a")];
        listings.union(&server, &mut tools);
        let mut union: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(union[0], "a");
        union.sort_unstable();
        assert_eq!(union, ["a", "b", "c"]);
        assert!(listings.shared(&server).contains("a"));

        // Beyond the bound the oldest list goes: alice's, kept first.
        tokio::time::advance(Duration::from_secs(1)).await;
        listings.keep(&server, &token("carol", "t4"), vec![tool("d")]);
        assert!(listings.held_for(&server, &alice).is_none());
        assert!(listings.held_for(&server, &token("bob", "t3")).is_some());
        listings.forget(&server, token("carol", "t4").user_key());
        assert!(listings.held_for(&server, &token("carol", "t4")).is_none());
    }
}
