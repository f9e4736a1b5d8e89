//! Remote MCP servers users add for themselves (`[user_servers]`, off by default): kept per
//! user in the OAuth store (header values sealed like tokens), checked at the strictest SSRF
//! rules whatever the server-wide settings, listed for their owner alone as `user-<name>`,
//! scanned and fingerprinted like any server, every tool a write that needs confirmation
//! unless its owner marked that very definition read-only, and called through the one gate.

use std::{
    collections::{BTreeMap, HashMap},
    net::IpAddr,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use rmcp::model::{CallToolRequestParams, CallToolResult, Tool};
use serde::Serialize;
use tokio::time::Instant;
use url::{Host, Url};
use zeroize::Zeroizing;

use super::{AccountChange, Gateway, GatewayError};
use crate::{
    catalog::{Catalog, Fingerprint, ServerTools},
    config::{
        Confirm, HttpConfig, HttpKind, OnChange, SecretTemplate, ServerConfig, ServerId,
        ServerSource, TransportConfig, USER_SERVER_PREFIX, UserServersConfig,
    },
    net::{Lookup, NetError, NetPolicy, SystemLookup, ValidatingResolver},
    oauth::{
        AccessToken, ConnectionKey, OAuthStore, RecordId, UserServerAdded, UserServerRow, Vault,
        VaultError,
    },
    policy::CallContext,
    store::StoreError,
    upstream::{
        CallRelay, ConnectOptions, UpstreamError,
        user_servers::{Target, UserServerSessions},
    },
};

/// Most headers one server is given.
pub const MAX_HEADERS: usize = 16;
/// Longest header value.
const MAX_HEADER_VALUE: usize = 8192;
/// Longest URL.
const MAX_URL: usize = 2048;
/// Longest name: the id `user-<name>` is a server id (32 characters at most).
const MAX_NAME: usize = 32 - USER_SERVER_PREFIX.len();
/// What a sealed header set is bound to.
const SEALED_KIND: &str = "user_server_headers";
/// Headers the gateway sets itself, or that would change what the request is.
const RESERVED_HEADERS: [&str; 14] = [
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "mcp-method",
    "mcp-name",
];

/// A server as a user asks to add it.
#[derive(Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewUserServer {
    pub name: String,
    pub url: String,
    /// Header name to value: the user's own secrets (an API key), sealed at rest and never
    /// shown back.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// `"oauth"`: each call carries the user's own token from the server's authorization
    /// server (connected at `/api/v1/me/servers/{name}/connect`); `"none"` (the default):
    /// the headers alone.
    #[serde(default)]
    pub auth: Option<String>,
}

impl std::fmt::Debug for NewUserServer {
    /// Header names only: their values are the user's secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewUserServer")
            .field("name", &self.name)
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("auth", &self.auth)
            .finish()
    }
}

/// A tool to mark read-only: by name, and the fingerprint of the definition the user looked
/// at (if given, the mark is refused when the server's definition is another by now).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(untagged)]
pub enum ReadOnlyEntry {
    Name(String),
    Seen { name: String, fingerprint: String },
}

/// [`ReadOnlyEntry`], as the gateway takes it.
#[derive(Debug, Clone)]
pub struct ReadOnlyMark {
    pub name: String,
    pub fingerprint: Option<String>,
}

impl From<ReadOnlyEntry> for ReadOnlyMark {
    fn from(entry: ReadOnlyEntry) -> ReadOnlyMark {
        match entry {
            ReadOnlyEntry::Name(name) => ReadOnlyMark {
                name,
                fingerprint: None,
            },
            ReadOnlyEntry::Seen { name, fingerprint } => ReadOnlyMark {
                name,
                fingerprint: Some(fingerprint),
            },
        }
    }
}

/// A user's server as they see it: never a header value.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct UserServerInfo {
    pub name: String,
    /// `user-<name>`: the server id in the owner's catalog.
    pub server: String,
    pub url: String,
    /// The names of the headers sent (their values are not shown).
    pub headers: Vec<String>,
    /// Tools marked read-only (no confirmation) whose definition is still the one marked.
    pub read_only: Vec<String>,
    /// Tools the server listed for this user last, if any.
    pub tools: Option<usize>,
    /// Why the last listing failed, if it did.
    pub error: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// `"oauth"` or `"none"`.
    pub auth: &'static str,
    /// With `auth = "oauth"`: the caller's connection (`status`: `connected`, `expired` or
    /// `none`) and the route that connects it.
    pub authorization: Option<serde_json::Value>,
}

/// Why a user's server could not be added, changed or removed.
#[derive(Debug, thiserror::Error)]
pub enum UserServerError {
    #[error("adding your own servers is not enabled on this gateway")]
    Disabled,
    #[error(
        "a name is 1 to {MAX_NAME} of lowercase letters, digits and `-`, starting with a letter"
    )]
    InvalidName,
    #[error("the URL is not usable: {0}")]
    InvalidUrl(String),
    /// The SSRF guard's reason: a scheme, a user name in the URL, a blocked address.
    #[error("the URL is refused: {0}")]
    Refused(String),
    #[error("host `{0}` is not one the operator allows servers on")]
    HostNotAllowed(String),
    #[error("header {0}")]
    InvalidHeader(String),
    #[error("you have a server named `{0}` already")]
    NameTaken(String),
    #[error("you have {0} servers, the most allowed; remove one first")]
    TooMany(usize),
    #[error("you have no server named `{0}`")]
    NotFound(String),
    #[error("server `{server}` lists no tool `{tool}`")]
    UnknownTool { server: String, tool: String },
    #[error("the server could not be used: {0}")]
    Unreachable(String),
    #[error("the server store is unavailable: {0}")]
    Store(#[from] StoreError),
    #[error("the server's secrets cannot be sealed or opened: {0}")]
    Vault(#[from] VaultError),
    #[error("`auth` is \"oauth\" or \"none\"")]
    InvalidAuth,
    #[error("tool `{0}` changed since you saw it: look at it again before marking it")]
    DefinitionChanged(String),
    #[error(
        "OAuth for your own servers needs the gateway's [server] public_url (where \
         authorization servers send you back)"
    )]
    OAuthUnavailable,
    #[error("server `{0}` does not use OAuth: there is nothing to connect")]
    NotOAuth(String),
    #[error("{0}")]
    OAuth(#[from] crate::oauth::OAuthError),
}

impl UserServerError {
    /// The stable code of each kind, for the API.
    pub fn code(&self) -> &'static str {
        match self {
            UserServerError::Disabled => "not_found",
            UserServerError::InvalidName => "invalid_name",
            UserServerError::InvalidUrl(_) => "invalid_url",
            UserServerError::Refused(_) => "url_refused",
            UserServerError::HostNotAllowed(_) => "host_not_allowed",
            UserServerError::InvalidHeader(_) => "invalid_header",
            UserServerError::NameTaken(_) => "name_taken",
            UserServerError::TooMany(_) => "too_many_servers",
            UserServerError::NotFound(_) => "unknown_server",
            UserServerError::UnknownTool { .. } => "unknown_tool",
            UserServerError::Unreachable(_) => "server_unreachable",
            UserServerError::Store(_) | UserServerError::Vault(_) => "store_unavailable",
            UserServerError::InvalidAuth => "bad_request",
            UserServerError::DefinitionChanged(_) => "definition_changed",
            UserServerError::OAuthUnavailable => "oauth_unavailable",
            UserServerError::NotOAuth(_) => "not_oauth",
            UserServerError::OAuth(err) => err.code(),
        }
    }
}

/// What a user's server keeps sealed: its headers, and whether it wants the user's OAuth
/// token (kept with them so the store holds nothing about it in the clear).
#[derive(serde::Serialize, serde::Deserialize)]
struct Sealed {
    headers: Vec<(String, String)>,
    #[serde(default)]
    oauth: bool,
}

/// One of a user's servers, opened: its header values in the clear, in memory only.
struct Opened {
    id: ServerId,
    row: UserServerRow,
    url: Url,
    headers: Vec<(String, Zeroizing<String>)>,
    /// Tool name to the fingerprint of the definition its owner marked read-only.
    read_only: BTreeMap<String, String>,
    /// Calls carry the user's own OAuth token.
    oauth: bool,
    /// Names the session: the address and the headers, so a server removed and added again
    /// differently never reuses an old session.
    key: String,
}

/// A tool list read from a user's server, and when; after a failure, the list before it (if
/// any) and why.
struct Listed {
    tools: Option<Arc<Vec<Tool>>>,
    at: Instant,
    error: Option<String>,
}

/// What a user's catalog was built from: the operator's catalog it was checked beside, and
/// per server its tool list (the same `Arc` while the list is fresh), staleness and marks.
/// Held, not just compared by address, so an address can never be reused under it.
/// One server's input to its owner's catalog: its tools, whether stale, its read-only marks.
type BuiltFrom = (Arc<Vec<Tool>>, bool, BTreeMap<String, String>);

struct Built {
    beside: Arc<Catalog>,
    lists: Vec<BuiltFrom>,
    catalog: Arc<Catalog>,
}

impl Built {
    fn same(&self, beside: &Arc<Catalog>, lists: &[BuiltFrom]) -> bool {
        Arc::ptr_eq(&self.beside, beside)
            && self.lists.len() == lists.len()
            && self
                .lists
                .iter()
                .zip(lists)
                .all(|(a, b)| Arc::ptr_eq(&a.0, &b.0) && a.1 == b.1 && a.2 == b.2)
    }
}

/// How long a server that failed to list is not asked again: a black-holed address would
/// otherwise hold each of its owner's listings for the whole connect deadline.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(15);

/// Every user's servers on this instance: their sessions and last tool lists.
pub(super) struct UserServers {
    config: UserServersConfig,
    store: Arc<dyn OAuthStore>,
    vault: Vault,
    sessions: UserServerSessions,
    /// By owner and session key.
    lists: Mutex<HashMap<(String, String), Listed>>,
    /// By owner, their catalog as built last: rebuilt only when a list, a mark or the
    /// operator's catalog changed (building scans beside the whole operator's catalog, too
    /// much for every listing and call).
    built: Mutex<HashMap<String, Built>>,
    /// How long a tool list is used before the server is asked again.
    ttl: Duration,
    list_timeout: Duration,
    lookup: Arc<dyn Lookup>,
    /// Users' OAuth connections, their own servers' included; `None` without a
    /// `public_url` (then no user server may use OAuth).
    connections: Option<Arc<crate::oauth::Connections>>,
    /// Random, this process's alone: salts the session keys made from header values.
    salt: String,
}

impl UserServers {
    /// `None` when `[user_servers]` is off. Fails when it is on and the keys cannot make a
    /// vault (`config check` says why before that).
    pub(super) fn new(
        config: &crate::config::Config,
        options: &ConnectOptions,
        store: Arc<dyn OAuthStore>,
        connections: Option<Arc<crate::oauth::Connections>>,
    ) -> Result<Option<UserServers>, String> {
        let settings = &config.user_servers;
        if !settings.enabled {
            return Ok(None);
        }
        let vault = Vault::from_config(&config.oauth.keys, &options.env)
            .map_err(|reason| format!("[user_servers] needs [oauth] keys: {reason}"))?;
        let options = ConnectOptions {
            // Nothing of the gateway's environment is the users': their headers are literal.
            env: crate::config::Env::default(),
            limits: options.limits.clone(),
            supervisor: None,
            listing_tokens: None,
        };
        Ok(Some(UserServers {
            sessions: UserServerSessions::new(
                options,
                settings.max_open_per_user,
                settings.idle_close,
            ),
            config: settings.clone(),
            store,
            vault,
            lists: Mutex::new(HashMap::new()),
            built: Mutex::new(HashMap::new()),
            ttl: config.cache.ttl,
            list_timeout: config.limits.list_timeout,
            lookup: Arc::new(SystemLookup),
            connections,
            salt: crate::digest::random_hex(16),
        }))
    }

    fn lists(&self) -> MutexGuard<'_, HashMap<(String, String), Listed>> {
        self.lists.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes idle sessions and forgets old tool lists (the gateway's sweeper calls this now
    /// and then): a list is kept as a fallback for a while after it is due, not for ever.
    pub(super) fn prune(&self) {
        self.sessions.prune();
        let keep = self.ttl.max(RETRY_AFTER_FAILURE) * 2 + Duration::from_secs(600);
        self.lists().retain(|_, listed| listed.at.elapsed() < keep);
        // A built catalog holds lists that may be gone now: built again when next asked.
        self.built.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    pub(super) async fn shutdown(&self) {
        self.sessions.shutdown().await;
    }

    /// What a server's sealed headers are bound to: whose, which name and which address (a
    /// row moved to another user or pointed elsewhere no longer opens, so its secrets are
    /// never sent anywhere but where their owner added them).
    fn record_id<'a>(ctx: &'a CallContext, name: &'a str, url: &'a str) -> RecordId<'a> {
        RecordId {
            kind: SEALED_KIND,
            parts: vec![&ctx.tenant, &ctx.user, name, url],
        }
    }

    /// `ctx`'s servers, opened; a row that no longer opens (a key removed) is skipped with a
    /// warning, never shown with a wrong secret.
    async fn opened(&self, ctx: &CallContext) -> Result<Vec<Opened>, UserServerError> {
        let rows = self.store.user_servers(&ctx.tenant, &ctx.user).await?;
        let mut opened = Vec::with_capacity(rows.len());
        for row in rows {
            match self.open(ctx, row) {
                Ok(server) => opened.push(server),
                Err(reason) => tracing::warn!(%reason, "a user's server cannot be opened; skipped"),
            }
        }
        Ok(opened)
    }

    fn open(&self, ctx: &CallContext, row: UserServerRow) -> Result<Opened, String> {
        let id = ServerId::new(&format!("{USER_SERVER_PREFIX}{}", row.name))
            .ok_or("its name is not a valid id")?;
        let url = Url::parse(&row.url).map_err(|_| "its URL does not parse")?;
        // The rules as they are now: a host taken off the operator's list, or the override
        // turned off, stops the server from then on.
        let scheme_ok = url.scheme() == "https"
            || (self.config.allow_loopback
                && url.scheme() == "http"
                && url.host().is_some_and(|h| is_loopback_host(&h)));
        if !scheme_ok || !self.config.host_allowed(url.host_str().unwrap_or("")) {
            return Err(format!(
                "`{id}` is no longer allowed by [user_servers] (scheme or host)"
            ));
        }
        let plain = Zeroizing::new(
            self.vault
                .open(&Self::record_id(ctx, &row.name, &row.url), &row.sealed)
                .map_err(|e| e.to_string())?,
        );
        let sealed: Sealed =
            serde_json::from_slice(&plain).map_err(|_| "its sealed headers do not parse")?;
        let oauth = sealed.oauth;
        let headers: Vec<(String, Zeroizing<String>)> = sealed
            .headers
            .into_iter()
            .map(|(name, value)| (name, Zeroizing::new(value)))
            .collect();
        let read_only: BTreeMap<String, String> =
            serde_json::from_str(&row.read_only).unwrap_or_default();
        // Salted with this process's own secret: the key never leaves the process, and
        // nothing about a header's value can be guessed from it.
        let mut digest_input = Zeroizing::new(format!("{}\n{url}\n", self.salt));
        for (name, value) in &headers {
            digest_input.push_str(&format!("{name}\0{}\n", value.as_str()));
        }
        let key = format!(
            "{id}#{}",
            &crate::digest::sha256_hex(digest_input.as_bytes())[..16]
        );
        Ok(Opened {
            id,
            row,
            url,
            headers,
            read_only,
            oauth,
            key,
        })
    }

    /// The server as connected: its address and headers, at the strictest network rules
    /// (the tests' loopback override aside).
    fn server_config(&self, server: &Opened, token: Option<&AccessToken>) -> ServerConfig {
        let mut headers: Vec<(String, SecretTemplate)> = server
            .headers
            .iter()
            .filter(|(name, _)| token.is_none() || !name.eq_ignore_ascii_case("authorization"))
            .map(|(name, value)| (name.clone(), SecretTemplate::new(value.as_str())))
            .collect();
        if let Some(token) = token {
            headers.push((
                "Authorization".to_owned(),
                SecretTemplate::new(format!("Bearer {}", token.secret.as_str())),
            ));
        }
        let mut config = self.settings(server, Vec::new());
        if token.is_some() {
            // The server's refusal of the token is noted for the call that met it.
            config.oauth = Some(crate::config::UpstreamOAuth::default());
        }
        config.transport = TransportConfig::Http(HttpConfig {
            url: server.url.clone(),
            kind: HttpKind::Streamable,
            headers,
        });
        config
    }

    /// The server's settings as the gate reads them (no headers): confirmation for every
    /// write, writes unless marked, the configured scan reaction and deadlines.
    fn settings(&self, server: &Opened, read_only_tools: Vec<String>) -> ServerConfig {
        let mut config = ServerConfig::new(
            server.id.clone(),
            TransportConfig::Http(HttpConfig {
                url: server.url.clone(),
                kind: HttpKind::Streamable,
                headers: Vec::new(),
            }),
        );
        // Loopback alone under the tests' override: every other private range stays shut.
        let loopback = self.config.allow_loopback;
        config.allow_private = false;
        config.allow_loopback = loopback;
        config.allow_http = loopback && server.url.scheme() == "http";
        config.confirm = Confirm::Writes;
        config.trust_annotations = false;
        config.read_only_tools = read_only_tools;
        config.on_change = OnChange::Warn;
        config.scan = self.config.scan;
        config.connect_timeout = Some(self.config.connect_timeout);
        config.call_timeout = Some(self.config.call_timeout);
        config.source = ServerSource::User;
        config
    }

    /// The caller's token for `server` when it uses OAuth (`Ok(None)` when it does not).
    async fn token(
        &self,
        ctx: &CallContext,
        server: &Opened,
    ) -> Result<Option<AccessToken>, crate::oauth::OAuthError> {
        if !server.oauth {
            return Ok(None);
        }
        let Some(connections) = &self.connections else {
            return Err(crate::oauth::OAuthError::AuthorizationRequired {
                server: server.id.to_string(),
            });
        };
        connections
            .access_token(&connection_key(ctx, &server.id))
            .await
            .map(Some)
    }

    /// The session's key: the server's, and the token's digest (a new token, a new session).
    fn session_key(server: &Opened, token: Option<&AccessToken>) -> String {
        match token {
            Some(token) => format!("{}#{}", server.key, token.digest),
            None => server.key.clone(),
        }
    }

    /// The server's tools: the last list while fresh, else listed again (bounded by the
    /// connect and list deadlines); on failure the last list, marked stale, and the server is
    /// not asked again for [`RETRY_AFTER_FAILURE`].
    async fn tools(
        &self,
        ctx: &CallContext,
        server: &Opened,
    ) -> (Option<Arc<Vec<Tool>>>, bool, Option<String>) {
        let owner = &owner_key(ctx);
        // Of a server that wants the user's account, nothing is listed before they connect.
        let token = match self.token(ctx, server).await {
            Ok(token) => token,
            Err(err) => {
                let err = GatewayError::from_user_server_oauth(server.id.as_str(), err);
                return (None, false, Some(err.to_string()));
            }
        };
        let session = Self::session_key(server, token.as_ref());
        let cache_key = (owner.to_owned(), session.clone());
        if let Some(listed) = self.lists().get(&cache_key) {
            let age = listed.at.elapsed();
            match &listed.error {
                None if age < self.ttl => return (listed.tools.clone(), false, None),
                Some(reason) if age < RETRY_AFTER_FAILURE => {
                    return (listed.tools.clone(), true, Some(reason.clone()));
                }
                _ => {}
            }
        }
        let config = self.server_config(server, token.as_ref());
        let target = Target {
            owner,
            key: &session,
            server: &config,
        };
        let listed = self.sessions.list_tools(&target, self.list_timeout).await;
        let mut lists = self.lists();
        let previous = lists.get(&cache_key).and_then(|l| l.tools.clone());
        let (entry, answer) = match listed {
            Ok(tools) => {
                let tools = Some(Arc::new(tools));
                let entry = Listed {
                    tools: tools.clone(),
                    at: Instant::now(),
                    error: None,
                };
                (entry, (tools, false, None))
            }
            Err(err) => {
                let reason = err.to_string();
                let entry = Listed {
                    tools: previous.clone(),
                    at: Instant::now(),
                    error: Some(reason.clone()),
                };
                (entry, (previous, true, Some(reason)))
            }
        };
        lists.insert(cache_key, entry);
        answer
    }

    /// `ctx`'s own catalog: their servers' tools, scanned and fingerprinted, each carrying
    /// its server's settings. Empty when they have none (or the store cannot be read: the
    /// failure is logged, and their servers are missing until it can).
    pub(super) async fn catalog(&self, ctx: &CallContext, beside: Arc<Catalog>) -> Arc<Catalog> {
        let servers = match self.opened(ctx).await {
            Ok(servers) => servers,
            Err(err) => {
                tracing::warn!(error = %err, "reading a user's servers failed");
                return Arc::default();
            }
        };
        if servers.is_empty() {
            return Arc::default();
        }
        let lists = futures::future::join_all(servers.iter().map(|s| self.tools(ctx, s))).await;
        let mut inputs = Vec::with_capacity(servers.len());
        let mut listed = Vec::with_capacity(servers.len());
        for (server, (tools, stale, _)) in servers.iter().zip(lists) {
            let Some(tools) = tools else { continue };
            inputs.push((tools.clone(), stale, server.read_only.clone()));
            listed.push((server, tools, stale));
        }
        let owner = owner_key(ctx);
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(last) = built.get(&owner)
            && last.same(&beside, &inputs)
        {
            return last.catalog.clone();
        }
        drop(built);
        let all = listed
            .into_iter()
            .map(|(server, tools, stale)| {
                let read_only = marked_read_only(&server.read_only, &tools);
                let mut list = ServerTools::new(server.id.clone(), tools.to_vec(), stale);
                list.scan = self.config.scan;
                list.settings = Some(Arc::new(self.settings(server, read_only)));
                list
            })
            .collect();
        // Against the operator's catalog too: a user's server telling how a configured tool
        // must be used is shadowing, whoever added it.
        let catalog = Arc::new(Catalog::build_beside(all, &beside));
        built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        built.insert(
            owner,
            Built {
                beside,
                lists: inputs,
                catalog: catalog.clone(),
            },
        );
        catalog
    }

    async fn infos(&self, ctx: &CallContext) -> Result<Vec<UserServerInfo>, UserServerError> {
        let servers = self.opened(ctx).await?;
        let lists = futures::future::join_all(servers.iter().map(|s| self.tools(ctx, s))).await;
        let mut out = Vec::with_capacity(servers.len());
        for (server, (tools, _, error)) in servers.iter().zip(lists) {
            let mut shown = info(server, tools.as_deref(), error);
            shown.authorization = self.authorization(ctx, server).await;
            out.push(shown);
        }
        Ok(out)
    }

    /// The caller's connection to `server`, as the API shows it (`None` without OAuth).
    async fn authorization(&self, ctx: &CallContext, server: &Opened) -> Option<serde_json::Value> {
        if !server.oauth {
            return None;
        }
        let connect = format!("/api/v1/me/servers/{}/connect", server.row.name);
        let status = match &self.connections {
            Some(connections) => connections
                .status(&connection_key(ctx, &server.id))
                .await
                .ok()
                .flatten(),
            None => None,
        };
        Some(match status {
            Some(info) => serde_json::json!({
                "status": info.status, "scopes": info.scopes, "issuer": info.issuer,
                "connectedAt": info.connected_at, "connect": connect,
            }),
            None => serde_json::json!({ "status": "none", "connect": connect }),
        })
    }

    /// Starts connecting the caller's account on their server `name`: the authorization
    /// server's URL to send them to.
    async fn connect(&self, ctx: &CallContext, name: &str) -> Result<String, UserServerError> {
        let (server, connections) = self.oauth_server(ctx, name).await?;
        Ok(connections.begin(&connection_key(ctx, &server.id)).await?)
    }

    /// Ends the caller's connection on their server `name` (tokens revoked where the
    /// authorization server can); whether there was one.
    async fn disconnect(&self, ctx: &CallContext, name: &str) -> Result<bool, UserServerError> {
        let (server, connections) = self.oauth_server(ctx, name).await?;
        let removed = connections
            .disconnect(&connection_key(ctx, &server.id))
            .await?;
        self.forget(&owner_key(ctx), &server.id);
        Ok(removed)
    }

    async fn oauth_server(
        &self,
        ctx: &CallContext,
        name: &str,
    ) -> Result<(Opened, &Arc<crate::oauth::Connections>), UserServerError> {
        let server = self
            .opened(ctx)
            .await?
            .into_iter()
            .find(|s| s.row.name == name)
            .ok_or_else(|| UserServerError::NotFound(shown(name)))?;
        if !server.oauth {
            return Err(UserServerError::NotOAuth(server.id.to_string()));
        }
        let connections = self
            .connections
            .as_ref()
            .ok_or(UserServerError::OAuthUnavailable)?;
        Ok((server, connections))
    }

    /// Checks a new server, then connects to it and lists its tools (so a mistyped address
    /// is said now, not at the first call); stores it only then.
    async fn add(
        &self,
        ctx: &CallContext,
        new: NewUserServer,
    ) -> Result<UserServerInfo, UserServerError> {
        let name = valid_name(&new.name)?;
        let url = self.check_url(&new.url).await?;
        let headers = valid_headers(&new.headers)?;
        let oauth = match new.auth.as_deref() {
            None | Some("none") => false,
            Some("oauth") => true,
            Some(_) => return Err(UserServerError::InvalidAuth),
        };
        if oauth && self.connections.is_none() {
            return Err(UserServerError::OAuthUnavailable);
        }
        let plain = Zeroizing::new(
            serde_json::to_vec(&Sealed { headers, oauth })
                .map_err(|e| UserServerError::InvalidHeader(e.to_string()))?,
        );
        let url_text = url.to_string();
        let sealed = self
            .vault
            .seal(&Self::record_id(ctx, &name, &url_text), &plain)?;
        let row = UserServerRow {
            name: name.clone(),
            url: url_text,
            sealed,
            read_only: "{}".to_owned(),
            created_at: now_micros(),
        };
        let server = self
            .open(ctx, row.clone())
            .map_err(UserServerError::InvalidUrl)?;
        // Checked before connecting (the store checks again as it adds).
        let rows = self.store.user_servers(&ctx.tenant, &ctx.user).await?;
        if rows.iter().any(|r| r.name == name) {
            return Err(UserServerError::NameTaken(name));
        }
        if rows.len() >= self.config.max_per_user {
            return Err(UserServerError::TooMany(self.config.max_per_user));
        }
        let owner = owner_key(ctx);
        let (tools, _, error) = match server.oauth {
            // Its tools are listed once the user connects their account.
            true => (None, false, None),
            false => self.tools(ctx, &server).await,
        };
        if let Some(reason) = error {
            self.forget(&owner, &server.id);
            return Err(UserServerError::Unreachable(reason));
        }
        match self
            .store
            .add_user_server(&ctx.tenant, &ctx.user, &row, self.config.max_per_user)
            .await?
        {
            UserServerAdded::Added => Ok(info(&server, tools.as_deref(), None)),
            UserServerAdded::NameTaken => Err(UserServerError::NameTaken(name)),
            UserServerAdded::Full => {
                self.forget(&owner, &server.id);
                Err(UserServerError::TooMany(self.config.max_per_user))
            }
        }
    }

    /// Closes the server's sessions and forgets its lists on this instance.
    fn forget(&self, owner: &str, id: &ServerId) {
        let prefix = format!("{id}#");
        self.sessions.close(owner, &prefix);
        self.lists()
            .retain(|(o, key), _| !(o == owner && key.starts_with(&prefix)));
    }

    async fn remove(&self, ctx: &CallContext, name: &str) -> Result<ServerId, UserServerError> {
        let not_found = || UserServerError::NotFound(shown(name));
        let id = ServerId::new(&format!("{USER_SERVER_PREFIX}{name}")).ok_or_else(not_found)?;
        let key = ConnectionKey {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            server: name.to_owned(),
        };
        // Its OAuth connection goes first (revoked where it can be), while its address is
        // still known.
        if let Some(connections) = &self.connections {
            let key = connection_key(ctx, &id);
            if let Err(err) = connections.disconnect(&key).await {
                // Not revoked (its server is out of reach): removed all the same, so no token
                // of it is ever sent to a server added later under the name.
                tracing::info!(
                    code = err.code(),
                    "a user's server's tokens were not revoked"
                );
                connections.forget(&key).await?;
            }
        }
        let removed = self.store.delete_user_server(&key).await?;
        self.forget(&owner_key(ctx), &id);
        if removed { Ok(id) } else { Err(not_found()) }
    }

    async fn mark_read_only(
        &self,
        ctx: &CallContext,
        name: &str,
        tools: &[ReadOnlyMark],
    ) -> Result<UserServerInfo, UserServerError> {
        let server = self
            .opened(ctx)
            .await?
            .into_iter()
            .find(|s| s.row.name == name)
            .ok_or_else(|| UserServerError::NotFound(shown(name)))?;
        let (listed, _, error) = self.tools(ctx, &server).await;
        let listed = listed.unwrap_or_default();
        let mut marks = BTreeMap::new();
        for mark in tools {
            let definition = listed
                .iter()
                .find(|t| t.name.as_ref() == mark.name.as_str())
                .ok_or_else(|| UserServerError::UnknownTool {
                    server: server.id.to_string(),
                    tool: shown(&mark.name),
                })?;
            let now = Fingerprint::of(definition).as_str().to_owned();
            // The definition the user saw, if they say which: not one the server swapped in
            // since.
            if mark.fingerprint.as_ref().is_some_and(|seen| *seen != now) {
                return Err(UserServerError::DefinitionChanged(shown(&mark.name)));
            }
            marks.insert(mark.name.clone(), now);
        }
        let text = serde_json::to_string(&marks).unwrap_or_else(|_| "{}".to_owned());
        let key = ConnectionKey {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            server: name.to_owned(),
        };
        if !self.store.set_user_server_read_only(&key, &text).await? {
            return Err(UserServerError::NotFound(shown(name)));
        }
        let server = Opened {
            read_only: marks,
            ..server
        };
        Ok(info(&server, Some(&listed), error))
    }

    /// Checks `text` at the strictest rules: `https`, no user name, a host the operator
    /// allows, and every address it resolves to public (no loopback, private, link-local or
    /// metadata address, whatever the server-wide settings say). The connection checks its
    /// peer again when it is made, so a name that resolves differently later gains nothing.
    async fn check_url(&self, text: &str) -> Result<Url, UserServerError> {
        if text.len() > MAX_URL {
            return Err(UserServerError::InvalidUrl(format!(
                "longer than {MAX_URL} characters"
            )));
        }
        let url =
            Url::parse(text.trim()).map_err(|e| UserServerError::InvalidUrl(e.to_string()))?;
        // As the operator's list spells hosts: IPv6 in brackets.
        let Some(host) = url.host_str().map(str::to_owned) else {
            return Err(UserServerError::Refused(NetError::MissingHost.to_string()));
        };
        let loopback_http = self.config.allow_loopback && url.scheme() == "http";
        let strict = NetPolicy::default();
        let policy = NetPolicy {
            allow_http: loopback_http,
            ..NetPolicy::default()
        };
        crate::net::check_url(&url, &policy).or_else(|err| match err {
            // The tests' override: a loopback literal is checked below like any address.
            NetError::Blocked { addr, .. } if self.config.allow_loopback && addr.is_loopback() => {
                Ok(())
            }
            err => Err(UserServerError::Refused(err.to_string())),
        })?;
        if !self.config.host_allowed(&host) {
            return Err(UserServerError::HostNotAllowed(host));
        }
        let lookup_policy = NetPolicy {
            allow_private: true,
            ..NetPolicy::default()
        };
        let resolver = ValidatingResolver::new(Arc::new(lookup_policy), self.lookup.clone());
        let addrs = resolver
            .resolve_checked(url.host_str().unwrap_or_default().trim_matches(['[', ']']))
            .await
            .map_err(|err| UserServerError::Refused(err.to_string()))?;
        for ip in addrs {
            check_address(ip, &strict, self.config.allow_loopback)?;
        }
        if loopback_http {
            // Plain http only to loopback, even under the tests' override.
            if !url.host().is_some_and(|h| is_loopback_host(&h)) {
                return Err(UserServerError::Refused(
                    NetError::Scheme {
                        scheme: "http".to_owned(),
                    }
                    .to_string(),
                ));
            }
        }
        Ok(url)
    }

    /// Calls `tool` of `ctx`'s server `server` over their own session, with their token
    /// where it wants one.
    async fn call(
        &self,
        ctx: &CallContext,
        server: &ServerId,
        params: CallToolRequestParams,
        timeout: Duration,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> Result<CallToolResult, CallFailure> {
        let unavailable = |why: String| {
            CallFailure::Upstream(UpstreamError::Unavailable {
                state: crate::upstream::ServerState::Failed,
                last_error: Some(why),
            })
        };
        let opened = self
            .opened(ctx)
            .await
            .map_err(|err| unavailable(err.to_string()))?;
        let found = opened
            .iter()
            .find(|s| &s.id == server)
            .ok_or_else(|| unavailable("the server was removed".to_owned()))?;
        let token = self.token(ctx, found).await.map_err(CallFailure::Token)?;
        let config = self.server_config(found, token.as_ref());
        let owner = owner_key(ctx);
        let session = Self::session_key(found, token.as_ref());
        let target = Target {
            owner: &owner,
            key: &session,
            server: &config,
        };
        self.sessions
            .call_tool(&target, params, timeout, relay)
            .await
            .map_err(CallFailure::Upstream)
    }
}

/// Why a call to a user's server did not reach it or failed there.
enum CallFailure {
    /// The user's token could not be had (not connected, expired, a renewal refused).
    Token(crate::oauth::OAuthError),
    Upstream(UpstreamError),
}

/// Refuses `ip` unless public; under the tests' override a loopback address passes.
fn check_address(
    ip: IpAddr,
    strict: &NetPolicy,
    allow_loopback: bool,
) -> Result<(), UserServerError> {
    if allow_loopback && ip.is_loopback() {
        return Ok(());
    }
    strict
        .check_ip(ip)
        .map_err(|err| UserServerError::Refused(err.to_string()))
}

fn is_loopback_host(host: &Host<&str>) -> bool {
    match host {
        Host::Domain(name) => name.eq_ignore_ascii_case("localhost"),
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => ip.is_loopback(),
    }
}

/// The names among `tools` whose definition is still the one marked read-only.
fn marked_read_only(marks: &BTreeMap<String, String>, tools: &[Tool]) -> Vec<String> {
    tools
        .iter()
        .filter(|tool| {
            marks
                .get(tool.name.as_ref())
                .is_some_and(|marked| *marked == Fingerprint::of(tool).as_str())
        })
        .map(|tool| tool.name.to_string())
        .collect()
}

fn info(server: &Opened, tools: Option<&Vec<Tool>>, error: Option<String>) -> UserServerInfo {
    UserServerInfo {
        name: server.row.name.clone(),
        server: server.id.to_string(),
        url: server.row.url.clone(),
        headers: server
            .headers
            .iter()
            .map(|(name, _)| name.clone())
            .collect(),
        read_only: tools
            .map(|tools| marked_read_only(&server.read_only, tools))
            .unwrap_or_default(),
        tools: tools.map(Vec::len),
        error,
        created_at: crate::store::rfc3339(
            UNIX_EPOCH + Duration::from_micros(u64::try_from(server.row.created_at).unwrap_or(0)),
        ),
        auth: if server.oauth { "oauth" } else { "none" },
        authorization: None,
    }
}

fn owner_key(ctx: &CallContext) -> String {
    format!("{}\0{}", ctx.tenant, ctx.user)
}

fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// A name shown back: cut short, anything but printable ASCII as `?`.
fn shown(name: &str) -> String {
    name.chars()
        .take(40)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

fn valid_name(name: &str) -> Result<String, UserServerError> {
    let ok = (1..=MAX_NAME).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok && ServerId::new(&format!("{USER_SERVER_PREFIX}{name}")).is_some() {
        Ok(name.to_owned())
    } else {
        Err(UserServerError::InvalidName)
    }
}

/// Header names and values as HTTP takes them, none the gateway sets itself, and no value
/// that could read as a `${VAR}` reference to the gateway's own environment. Messages name
/// the header, never its value.
fn valid_headers(
    headers: &BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, UserServerError> {
    if headers.len() > MAX_HEADERS {
        return Err(UserServerError::InvalidHeader(format!(
            "count: at most {MAX_HEADERS} headers"
        )));
    }
    let mut out = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let bad = |why: &str| UserServerError::InvalidHeader(format!("`{}`: {why}", shown(name)));
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(bad("not a valid header name"));
        }
        if RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
            return Err(bad("set by the gateway itself"));
        }
        if value.is_empty() || value.len() > MAX_HEADER_VALUE {
            return Err(bad(&format!(
                "the value must be 1 to {MAX_HEADER_VALUE} bytes"
            )));
        }
        if !value
            .bytes()
            .all(|b| b == b' ' || b == b'\t' || (0x21..=0x7e).contains(&b))
            || http::HeaderValue::from_str(value).is_err()
        {
            return Err(bad("the value must be printable ASCII"));
        }
        if value.contains("${") {
            return Err(bad("the value may not contain `${`"));
        }
        out.push((name.clone(), value.clone()));
    }
    Ok(out)
}

impl Gateway {
    /// Whether users may add their own servers here.
    pub fn user_servers_enabled(&self) -> bool {
        self.inner.user_servers.is_some()
    }

    /// The feature, for a caller of a tenant this gateway serves.
    fn user_servers_for(&self, ctx: &CallContext) -> Result<&UserServers, UserServerError> {
        self.inner
            .user_servers
            .as_ref()
            .filter(|_| self.knows_tenant(ctx))
            .ok_or(UserServerError::Disabled)
    }

    /// The servers `ctx` added, with what each lists for them now.
    pub async fn my_servers(
        &self,
        ctx: &CallContext,
    ) -> Result<Vec<UserServerInfo>, UserServerError> {
        self.user_servers_for(ctx)?.infos(ctx).await
    }

    /// Adds a server for `ctx` alone (see [`UserServers::add`]), and audits it as theirs.
    pub async fn add_my_server(
        &self,
        ctx: &CallContext,
        new: NewUserServer,
    ) -> Result<UserServerInfo, UserServerError> {
        let added = self.user_servers_for(ctx)?.add(ctx, new).await?;
        self.audit_user_server(ctx, &added.server, AccountChange::ServerAdded)
            .await;
        Ok(added)
    }

    /// Removes `ctx`'s server `name` and closes its connection on this instance (on the
    /// others it closes when idle, and no call reaches it: each call reads the user's servers
    /// from the store).
    pub async fn remove_my_server(
        &self,
        ctx: &CallContext,
        name: &str,
    ) -> Result<(), UserServerError> {
        let id = self.user_servers_for(ctx)?.remove(ctx, name).await?;
        self.audit_user_server(ctx, id.as_str(), AccountChange::ServerRemoved)
            .await;
        Ok(())
    }

    /// Marks `tools` of `ctx`'s server `name` read-only (replacing the marks before): their
    /// current definitions are called without confirmation; a changed definition needs it
    /// again.
    pub async fn mark_my_server_read_only(
        &self,
        ctx: &CallContext,
        name: &str,
        tools: &[ReadOnlyMark],
    ) -> Result<UserServerInfo, UserServerError> {
        self.user_servers_for(ctx)?
            .mark_read_only(ctx, name, tools)
            .await
    }

    async fn audit_user_server(&self, ctx: &CallContext, server: &str, change: AccountChange) {
        let key = ConnectionKey {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            server: server.to_owned(),
        };
        self.audit_account(&key, &ctx.request_id, change).await;
    }

    /// `ctx`'s own servers' tools; empty when the feature is off or they have none.
    pub(super) async fn user_catalog(&self, ctx: &CallContext) -> Option<Arc<Catalog>> {
        let servers = self.inner.user_servers.as_ref()?;
        if !self.knows_tenant(ctx) {
            return None;
        }
        let catalog = servers.catalog(ctx, self.catalog()).await;
        (!catalog.is_empty()).then_some(catalog)
    }

    /// Calls a tool of `ctx`'s own server.
    pub(super) async fn call_user_server(
        &self,
        ctx: &CallContext,
        server: &ServerId,
        params: CallToolRequestParams,
        timeout: Duration,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> Result<CallToolResult, GatewayError> {
        let servers = self
            .inner
            .user_servers
            .as_ref()
            .ok_or_else(|| GatewayError::NotFound {
                name: server.to_string(),
            })?;
        match servers.call(ctx, server, params, timeout, relay).await {
            Ok(result) => Ok(result),
            Err(CallFailure::Token(err)) => {
                Err(GatewayError::from_user_server_oauth(server.as_str(), err))
            }
            Err(CallFailure::Upstream(UpstreamError::TokenRefused(refusal))) => {
                let err = self.token_refused(ctx, server, refusal).await;
                Err(err.with_own_connect_route())
            }
            Err(CallFailure::Upstream(UpstreamError::Timeout { after })) => {
                Err(GatewayError::Timeout { after })
            }
            Err(CallFailure::Upstream(source)) => Err(GatewayError::Upstream {
                server: server.to_string(),
                source,
            }),
        }
    }

    /// Why `ctx` cannot call `name` (a canonical `user-<name>.tool`) when the cause is their
    /// account: the tool is of their own server that wants their OAuth account and they have
    /// not connected it (or the connection expired), so nothing of it is listed for them.
    pub(super) async fn user_server_wants_account(
        &self,
        ctx: &CallContext,
        name: &str,
    ) -> Option<GatewayError> {
        let servers = self.inner.user_servers.as_ref()?;
        let (server, _) = name.split_once('.')?;
        let opened = servers.opened(ctx).await.ok()?;
        let found = opened.iter().find(|s| s.oauth && s.id.as_str() == server)?;
        let err = servers.token(ctx, found).await.err()?;
        Some(GatewayError::from_user_server_oauth(server, err))
    }

    /// Starts connecting `ctx`'s account on their server `name` (`auth = "oauth"`): the URL
    /// to send them to.
    pub async fn connect_my_server(
        &self,
        ctx: &CallContext,
        name: &str,
    ) -> Result<String, UserServerError> {
        self.user_servers_for(ctx)?.connect(ctx, name).await
    }

    /// Ends `ctx`'s connection on their server `name`; whether there was one.
    pub async fn disconnect_my_server(
        &self,
        ctx: &CallContext,
        name: &str,
    ) -> Result<bool, UserServerError> {
        let removed = self.user_servers_for(ctx)?.disconnect(ctx, name).await?;
        if removed {
            let key = ConnectionKey {
                tenant: ctx.tenant.clone(),
                user: ctx.user.clone(),
                server: format!("{USER_SERVER_PREFIX}{name}"),
            };
            self.audit_account(&key, &ctx.request_id, AccountChange::Disconnected)
                .await;
        }
        Ok(removed)
    }
}

/// The id a user's own server's calls are limited under: `user-` and a digest of whose and
/// which server, so one user's server (busy, slow, hung) never holds another user's server of
/// the same name.
pub(super) fn limit_id(ctx: &CallContext, server: &ServerId) -> ServerId {
    let owner = format!("{}\0{}\0{}", ctx.tenant, ctx.user, server);
    let digest = crate::digest::sha256_hex(owner.as_bytes());
    ServerId::new(&format!("{USER_SERVER_PREFIX}{}", &digest[..24]))
        .unwrap_or_else(|| server.clone())
}

fn connection_key(ctx: &CallContext, server: &ServerId) -> ConnectionKey {
    ConnectionKey {
        tenant: ctx.tenant.clone(),
        user: ctx.user.clone(),
        server: server.to_string(),
    }
}

/// Whether `server` names a user's own server (configuration refuses the prefix while the
/// feature is on).
pub fn is_user_server(server: &ServerId) -> bool {
    server.as_str().starts_with(USER_SERVER_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_lowercase_ids() {
        assert_eq!(valid_name("github").expect("valid"), "github");
        assert_eq!(valid_name("my-tools-2").expect("valid"), "my-tools-2");
        for bad in [
            "",
            "Git",
            "1abc",
            "a_b",
            "a.b",
            &"a".repeat(MAX_NAME + 1),
            "ä",
        ] {
            assert!(
                matches!(valid_name(bad), Err(UserServerError::InvalidName)),
                "{bad:?}"
            );
        }
        assert!(valid_name(&"a".repeat(MAX_NAME)).is_ok());
    }

    #[test]
    fn headers_are_checked_without_quoting_values() {
        let one = |name: &str, value: &str| {
            valid_headers(&BTreeMap::from([(name.to_owned(), value.to_owned())]))
        };
        assert!(one("Authorization", "Bearer abc").is_ok());
        assert!(one("X-Api-Key", "k1").is_ok());
        for (name, value) in [
            ("Host", "evil"),
            ("mcp-session-id", "x"),
            ("bad name", "x"),
            ("X-Key", ""),
            ("X-Key", "line\r\nbreak"),
            ("X-Key", "caf\u{e9}"),
            ("X-Key", "${MCPGATE_OAUTH_KEY}"),
        ] {
            let err = one(name, value).expect_err(name);
            assert_eq!(err.code(), "invalid_header");
            if value.len() > 2 {
                assert!(!err.to_string().contains(value), "{err}");
            }
        }
        let many: BTreeMap<String, String> = (0..=MAX_HEADERS)
            .map(|i| (format!("x-h{i}"), "v".to_owned()))
            .collect();
        assert!(valid_headers(&many).is_err());
    }

    #[test]
    fn each_users_server_is_limited_apart_under_a_valid_id() {
        let ctx = |user: &str| CallContext {
            tenant: "t".into(),
            user: user.into(),
            session: "s".into(),
            roles: vec![],
            request_id: "r".into(),
        };
        let notes = ServerId::new("user-notes").expect("valid");
        let (alice, bob) = (
            limit_id(&ctx("alice"), &notes),
            limit_id(&ctx("bob"), &notes),
        );
        assert_ne!(alice, bob);
        assert_ne!(alice, notes);
        assert_eq!(alice, limit_id(&ctx("alice"), &notes), "the same each time");
        assert!(alice.as_str().starts_with(USER_SERVER_PREFIX));
    }

    #[test]
    fn a_new_server_debugs_without_its_header_values() {
        let new = NewUserServer {
            name: "n".into(),
            url: "https://mcp.example.com/mcp".into(),
            headers: BTreeMap::from([("X-Api-Key".to_owned(), "hunter2-secret".to_owned())]),
            auth: None,
        };
        let shown = format!("{new:?}");
        assert!(shown.contains("X-Api-Key"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
}
