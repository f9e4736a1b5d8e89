//! The gateway: the one gate every tool call passes, and the catalog it keeps fresh.

pub mod apps;
mod audit;
mod call;
mod confirm;
mod error;
mod listings;
mod pins;
mod prompts;
pub mod resources;
mod result;
mod review;
mod selection;
mod shared;
pub mod user_servers;
mod view;

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use audit::AccountChange;
pub use confirm::Approval;
pub use error::GatewayError;
pub use pins::{AcceptedPin, PinError, PinReview};
pub use result::{Part, ToolOutput};
pub use selection::{MAX_SELECTED_SERVERS, SelectionError};
pub use shared::{SharedError, SharedStores, StoreHealth};
pub use user_servers::{
    NewUserServer, ReadOnlyEntry, ReadOnlyMark, UserServerError, UserServerInfo, is_user_server,
};
// The vocabulary the gateway's callers speak of what happens below it: a call's relay (what
// an upstream sends during it, and the caller's answers), resource watches, server states and
// upstream failures. Callers name them through the gateway, never `upstream` itself, so a
// new kind of tool source is added below the gateway without touching them.
pub use crate::upstream::{
    CallRelay, Owner, Resume, ServerState, ServerStatus, UpstreamError, covers_elicitation,
    watch::{ResourceWatch, UpdateSink},
};

use crate::{
    catalog::{Catalog, CatalogTool, Fingerprint, PinStatus, Pins, PinsError, ServerTools},
    config::{AuditSync, Config, Env, ServerId, StateConfig},
    policy::{
        Access, Admin, CallContext, Clock, CompiledSchema, Limiter, classify, needs_confirmation,
    },
    store::{AuditStore, ConfirmationStore, StoreError, open_sqlite_with},
    upstream::{ConnectOptions, Manager},
};

/// How often expired confirmations are swept from the store.
const PURGE_EVERY: Duration = Duration::from_secs(60);
/// How often new audit records are folded into the usage rollups.
const ROLL_EVERY: Duration = Duration::from_secs(10);
/// Chunks folded per tick at most (each a short write transaction).
const MAX_ROLLS_PER_TICK: usize = 20;

/// What the gateway needs from its surroundings besides configuration.
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// Environment for `${VAR}` references and the variables children inherit.
    pub env: Env,
    /// The `mcpgate` binary, run as supervisor of stdio servers (see
    /// [`crate::upstream::supervisor`]); `None` runs them directly.
    pub supervisor: Option<PathBuf>,
    /// The wall clock confirmations expire by.
    pub clock: Clock,
}

/// The confirmation and audit stores the gateway writes to, and the shared ones.
#[derive(Clone)]
pub struct Stores {
    pub confirmations: Arc<dyn ConfirmationStore>,
    pub audit: Arc<dyn AuditStore>,
    /// Users' upstream OAuth connections (sealed).
    pub oauth: Arc<dyn crate::oauth::OAuthStore>,
    pub shared: SharedStores,
    /// Connected browser pages (the WebMCP bridge); `None`: the gateway starts its own. A
    /// gateway started by a reload keeps the pages of the one it replaces.
    pub pages: Option<Arc<crate::webmcp::Pages>>,
    /// Requests sent with an `Idempotency-Key` (PostgreSQL when shared, SQLite, else memory).
    pub idempotency: Arc<dyn crate::store::IdempotencyStore>,
    /// Usage, summed from the audit log's store and chat turns' model use.
    pub usage: Arc<dyn crate::store::UsageStore>,
}

impl Stores {
    /// Stores in memory, gone with the process.
    pub fn memory() -> Stores {
        let audit = Arc::new(crate::store::MemoryAudit::new());
        Stores {
            confirmations: Arc::new(crate::store::MemoryConfirmations::new()),
            usage: Arc::new(crate::store::MemoryUsage::new(audit.clone())),
            audit,
            oauth: Arc::new(crate::oauth::MemoryOAuth::default()),
            shared: SharedStores::default(),
            pages: None,
            idempotency: Arc::new(crate::store::MemoryIdempotency::default()),
        }
    }

    /// Opens the stores `state` names (SQLite file, or memory); `audit_sync` says when the
    /// SQLite audit log's records reach the disk.
    pub async fn open_embedded(
        state: &StateConfig,
        audit_sync: AuditSync,
    ) -> Result<Stores, StoreError> {
        match state {
            StateConfig::Memory => Ok(Stores::memory()),
            StateConfig::Sqlite { path } => {
                let stores = open_sqlite_with(path, audit_sync).await?;
                Ok(Stores {
                    confirmations: stores.confirmations(),
                    audit: stores.audit(),
                    oauth: stores.oauth(),
                    shared: SharedStores::default(),
                    pages: None,
                    idempotency: stores.idempotency(),
                    usage: stores.usage(),
                })
            }
        }
    }

    /// The stores `config` names: Redis for confirmations (and limits) and PostgreSQL for
    /// the audit log where configured, the embedded ones for the rest. Secrets in the URLs
    /// come from `env`.
    pub async fn open(config: &Config, env: &crate::config::Env) -> Result<Stores, StartError> {
        let shared = SharedStores::open(&config.shared, env).await?;
        let needs_embedded = shared.redis.is_none() || shared.postgres.is_none();
        let mut stores = if needs_embedded {
            Stores::open_embedded(&config.state, config.audit.sync).await?
        } else {
            // Replaced below where shared, the rest of no use beyond the process.
            Stores::memory()
        };
        let instance = &config.shared.instance;
        if let Some(pool) = &shared.postgres {
            // Users' connections are made on one instance and used on all.
            stores.oauth = Arc::new(crate::store::postgres::PgOAuth::new(pool.clone()));
            stores.usage = Arc::new(crate::store::postgres::PgUsage::new(pool.clone()));
            // A retry may reach any instance, and a kept answer must outlive them all.
            stores.idempotency = Arc::new(crate::store::postgres::PgIdempotency::new(pool.clone()));
            stores.audit = Arc::new(crate::store::postgres::PgAudit::new(
                pool.clone(),
                instance,
                config.audit.sync,
                config.shared.connect_timeout,
                config.shared.command_timeout,
            ));
        }
        if let Some(redis) = &shared.redis {
            let consumed = shared
                .postgres
                .clone()
                .map(|pool| Arc::new(crate::store::postgres::Consumed::new(pool, instance)));
            stores.confirmations = Arc::new(crate::store::redis::RedisConfirmations::new(
                redis.clone(),
                consumed,
            ));
        }
        stores.shared = shared;
        Ok(stores)
    }
}

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the state store: {0}")]
    Store(#[from] StoreError),
    #[error("cannot set up OAuth connections: {0}")]
    OAuth(#[from] crate::oauth::SetupError),
    #[error("cannot read the pin file: {0}")]
    Pins(#[from] PinsError),
    #[error("cannot use the shared stores: {0}")]
    Shared(#[from] SharedError),
    #[error("{0}")]
    UserServers(String),
    #[error("cannot set up the model reviewing definitions: {0}")]
    Review(String),
}

struct Inner {
    config: Arc<Config>,
    manager: Manager,
    catalog: RwLock<Arc<Catalog>>,
    pins: RwLock<Option<Arc<Pins>>>,
    access: Access,
    limiter: Limiter,
    shared: SharedStores,
    confirmations: Arc<dyn ConfirmationStore>,
    audit: Arc<dyn AuditStore>,
    oauth_store: Arc<dyn crate::oauth::OAuthStore>,
    idempotency: Arc<dyn crate::store::IdempotencyStore>,
    usage: Arc<dyn crate::store::UsageStore>,
    /// Users' connections to `auth = "oauth"` servers; `None` without such servers.
    connections: Option<Arc<crate::oauth::Connections>>,
    clock: Clock,
    /// Compiled input schemas by fingerprint; rebuilt with each catalog, so bounded by it.
    schemas: Mutex<HashMap<Fingerprint, Arc<Result<CompiledSchema, String>>>>,
    /// Definition changes already reported under `on_change = "warn"`, so each is logged and
    /// audited once.
    /// (Keyed also by whether a model flagged it: its verdict comes later than the rules'.)
    reported_changes: Mutex<HashSet<(Fingerprint, bool)>>,
    /// Users' own tool lists of `auth = "oauth"` servers.
    listings: listings::UserListings,
    /// Browser pages' tools (WebMCP).
    pages: Arc<crate::webmcp::Pages>,
    /// Servers users added for themselves; `None` unless `[user_servers]` is enabled.
    user_servers: Option<user_servers::UserServers>,
    /// One rebuild at a time, so an older snapshot can never replace a newer one.
    rebuilding: tokio::sync::Mutex<()>,
    /// One pin file write at a time (see [`Gateway::accept_pin`]).
    pin_writes: tokio::sync::Mutex<()>,
    /// Bumped after each new catalog snapshot is swapped in (see [`Gateway::changes`]).
    swaps: tokio::sync::watch::Sender<u64>,
    /// The model's second opinion on definitions (`[scan] model_review`).
    review: Option<review::Reviewer>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// The gateway. Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

impl Gateway {
    /// Opens the stores named by the configuration and starts the gateway.
    pub async fn start(config: Config, options: GatewayOptions) -> Result<Gateway, StartError> {
        let stores = Stores::open(&config, &options.env).await?;
        let shared_pins = stores.shared.pins.is_some();
        let gateway = Gateway::start_with_stores(config, options, stores)?;
        if shared_pins {
            gateway.reload_pins().await;
        }
        Ok(gateway)
    }

    /// Starts connecting every configured server and keeps the catalog in step with them.
    /// Returns at once; see [`Gateway::wait_ready`].
    pub fn start_with_stores(
        config: Config,
        options: GatewayOptions,
        stores: Stores,
    ) -> Result<Gateway, StartError> {
        let pins = match config.pins.path() {
            Some(path) => Pins::load(path)?.map(Arc::new),
            None => None,
        };
        let user_server_rules =
            config
                .user_servers
                .enabled
                .then(|| crate::oauth::connections::UserServerRules {
                    allow_loopback: config.user_servers.allow_loopback,
                    allowed_hosts: config.user_servers.allowed_hosts.clone(),
                });
        let connections = crate::oauth::Connections::with_user_servers(
            &config.servers,
            (&config.oauth, config.service.public_url.as_ref()),
            stores.oauth.clone(),
            &options.env,
            user_server_rules,
        )?
        .map(Arc::new);
        let connect = ConnectOptions {
            env: options.env,
            limits: config.limits.clone(),
            supervisor: options.supervisor,
            listing_tokens: connections.clone().map(|c| {
                crate::upstream::oauth::ListingTokensHandle(
                    c as Arc<dyn crate::upstream::oauth::ListingTokens>,
                )
            }),
        };
        let user_servers = user_servers::UserServers::new(
            &config,
            &connect,
            stores.oauth.clone(),
            connections.clone(),
        )
        .map_err(StartError::UserServers)?;
        let manager = Manager::start(
            config.servers.clone(),
            connect,
            config.reconnect.clone(),
            config.cache.clone(),
        );
        let pages = stores
            .pages
            .unwrap_or_else(|| Arc::new(crate::webmcp::Pages::new(config.webmcp.clone())));
        // Behind a load balancer a page's socket and a call of its tools may reach different
        // instances: with Redis, the bridge spans them.
        if pages.config().enabled()
            && let (Some(redis), Some(events)) = (&stores.shared.redis, &stores.shared.events)
        {
            pages.share(redis.clone(), events.clone(), stores.shared.stopping());
        }
        let review = review::Reviewer::new(&config).map_err(StartError::Review)?;
        let inner = Arc::new(Inner {
            review,
            listings: listings::UserListings::new(&config.cache),
            pages,
            user_servers,
            access: Access::new(config.access.clone()),
            config: Arc::new(config),
            manager,
            catalog: RwLock::new(Arc::new(Catalog::default())),
            pins: RwLock::new(pins),
            limiter: Limiter::default(),
            shared: stores.shared,
            confirmations: stores.confirmations,
            audit: stores.audit,
            oauth_store: stores.oauth,
            idempotency: stores.idempotency,
            usage: stores.usage,
            connections,
            clock: options.clock,
            schemas: Mutex::new(HashMap::new()),
            reported_changes: Mutex::new(HashSet::new()),
            rebuilding: tokio::sync::Mutex::new(()),
            pin_writes: tokio::sync::Mutex::new(()),
            swaps: tokio::sync::watch::channel(0).0,
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        let gateway = Gateway { inner };
        let follower = gateway.clone();
        gateway
            .inner
            .tasks
            .spawn(async move { follower.follow_upstreams().await });
        let sweeper = gateway.clone();
        gateway
            .inner
            .tasks
            .spawn(async move { sweeper.purge_expired().await });
        let roller = gateway.clone();
        gateway
            .inner
            .tasks
            .spawn(async move { roller.roll_usage().await });
        let follower = gateway.clone();
        gateway
            .inner
            .tasks
            .spawn(async move { follower.follow_instances().await });
        if gateway.inner.review.is_some() {
            let reviewer = gateway.clone();
            gateway
                .inner
                .tasks
                .spawn(async move { reviewer.review_definitions().await });
        }
        Ok(gateway)
    }

    /// Waits until every server finished its first connection attempt (each bounded by its
    /// connect deadline), or `deadline`; then the catalog reflects them.
    pub async fn wait_ready(&self, deadline: Duration) {
        self.inner.manager.wait_settled(deadline).await;
        self.rebuild_catalog().await;
    }

    /// The current catalog snapshot, every tool (operators' view).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// The tools `ctx` may see, with their status (quarantined and pending ones included, for
    /// people to review; see [`Gateway::model_tools`] for what a model is offered).
    /// Of an `auth = "oauth"` server, a connected caller sees the tools the server lists
    /// for their own token; others see what it lists for the shared session.
    pub async fn list_tools(&self, ctx: &CallContext) -> Vec<CatalogTool> {
        // Found first: a user's list may add tools to the catalog.
        let views = self.oauth_views(ctx).await;
        let catalog = self.catalog();
        let mut tools: Vec<CatalogTool> = catalog
            .tools()
            .iter()
            .filter(|t| self.may_use(ctx, t))
            .filter(|t| listings::in_view(&views, t))
            .cloned()
            .collect();
        // The caller's own servers' tools, theirs alone.
        if let Some(own) = self.user_catalog(ctx).await {
            tools.extend(own.tools().iter().cloned());
        }
        tools
    }

    /// The settings of the MCP Apps extension as `scope`'s server declared it, or without a
    /// scope, as the first configured server declaring it did: what an endpoint forwards to
    /// its clients (the gateway passes no other extension's methods, so forwards no other).
    pub fn apps_extension(&self, scope: Option<&ServerId>) -> Option<rmcp::model::JsonObject> {
        let config = self.config();
        config
            .servers
            .iter()
            .map(|s| &s.id)
            .filter(|id| scope.is_none_or(|only| only == *id))
            .find_map(|id| {
                self.inner
                    .manager
                    .server_extensions(id)?
                    .remove(apps::EXTENSION)
            })
    }

    /// The tools a model acting for `ctx` is offered: visible and usable.
    pub async fn model_tools(&self, ctx: &CallContext) -> Vec<CatalogTool> {
        let mut tools = self.list_tools(ctx).await;
        tools.retain(|t| t.status.is_usable());
        tools
    }

    /// Whether calling `tool` needs a confirmation token (its server's `confirm` policy and the
    /// tool's read/write classification).
    pub fn requires_confirmation(&self, tool: &CatalogTool) -> bool {
        if crate::webmcp::is_page(&tool.server) {
            let pages = &self.inner.pages;
            return pages.needs_confirmation(pages.classify(&tool.canonical, &tool.upstream));
        }
        tool.settings
            .as_deref()
            .or_else(|| self.config().server(&tool.server))
            .is_some_and(|s| needs_confirmation(s, classify(s, &tool.upstream)))
    }

    /// Whether `ctx` may see and call `tool`: a page's tools by the page's owner (see
    /// [`crate::webmcp::Pages::visible`]), a server's by `[access]`.
    pub(crate) fn may_use(&self, ctx: &CallContext, tool: &CatalogTool) -> bool {
        if crate::webmcp::is_page(&tool.server) {
            self.inner.pages.visible(ctx, &tool.server)
        } else if tool.settings.is_some() {
            // A user's own server's tools come only from that user's own catalog.
            self.knows_tenant(ctx)
        } else {
            self.inner.access.allows(ctx, &tool.server, &tool.canonical)
        }
    }

    /// Connected browser pages (the WebMCP bridge).
    pub fn pages(&self) -> &Arc<crate::webmcp::Pages> {
        &self.inner.pages
    }

    /// Every server's state, in id order.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.inner.manager.statuses()
    }

    /// What a stdio server's sandbox lets it do and what the kernel enforced of it (see
    /// [`crate::upstream::sandbox::describe`]); `None` for other servers.
    pub fn sandbox_of(&self, status: &ServerStatus) -> Option<serde_json::Value> {
        match &self.config().server(&status.id)?.transport {
            crate::config::TransportConfig::Stdio(stdio) => Some(
                crate::upstream::sandbox::describe(&stdio.sandbox, status.sandbox.as_ref()),
            ),
            _ => None,
        }
    }

    /// What `ctx` administers under this configuration (see [`Access::administers`]).
    pub fn administers(&self, ctx: &CallContext) -> Admin {
        self.inner.access.administers(ctx)
    }

    /// Whether `ctx` may read `/metrics` (see [`Access::reads_metrics`]).
    pub fn reads_metrics(&self, ctx: &CallContext) -> bool {
        self.inner.access.reads_metrics(ctx)
    }

    /// Whether `ctx`'s tenant is one this gateway serves (any, without `[access]`).
    pub fn knows_tenant(&self, ctx: &CallContext) -> bool {
        self.inner.access.knows_tenant(ctx)
    }

    /// Whether `server` is one of the servers `ctx`'s tenant sees.
    pub fn tenant_sees(&self, ctx: &CallContext, server: &crate::config::ServerId) -> bool {
        self.inner.access.tenant_sees(ctx, server)
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The stores this gateway writes to; a gateway started by a reload shares them.
    pub fn stores(&self) -> Stores {
        Stores {
            confirmations: self.inner.confirmations.clone(),
            audit: self.inner.audit.clone(),
            oauth: self.inner.oauth_store.clone(),
            shared: self.inner.shared.clone(),
            pages: Some(self.inner.pages.clone()),
            idempotency: self.inner.idempotency.clone(),
            usage: self.inner.usage.clone(),
        }
    }

    /// Usage: the audit log's sums and chat turns' model use.
    pub fn usage_store(&self) -> &Arc<dyn crate::store::UsageStore> {
        &self.inner.usage
    }

    /// Users' connections to `auth = "oauth"` servers; `None` when no server has it.
    pub fn connections(&self) -> Option<&Arc<crate::oauth::Connections>> {
        self.inner.connections.as_ref()
    }

    /// Whether each shared store answers now (none for a single instance).
    pub async fn shared_health(&self) -> Vec<StoreHealth> {
        self.inner.shared.health().await
    }

    /// Requests sent with an `Idempotency-Key` (the REST call route's).
    pub fn idempotency_store(&self) -> &Arc<dyn crate::store::IdempotencyStore> {
        &self.inner.idempotency
    }

    /// The audit log (for `mcpgate audit` and the API).
    pub fn audit_store(&self) -> &Arc<dyn AuditStore> {
        &self.inner.audit
    }

    /// A receiver that changes whenever a catalog snapshot is swapped in (after upstream
    /// state or tools changed): what it sees then is the new catalog.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.swaps.subscribe()
    }

    /// How many upstream sessions of one caller each `server` has open
    /// ([`crate::config::Sessions::PerCaller`]).
    pub fn caller_sessions(&self, server: &crate::config::ServerId) -> usize {
        self.inner.manager.caller_sessions(server)
    }

    /// Closes every upstream session opened for the caller session `key` alone
    /// ([`CallRelay::caller_session`]): its downstream session ended.
    pub fn close_caller_sessions(&self, key: &str) {
        self.inner.manager.close_caller_sessions(key);
    }

    /// Asks a server to re-list its tools (or reconnect now). `false` if no such server.
    /// What the refresh finds changed reaches the other instances with the catalog swap.
    pub fn refresh(&self, server: &crate::config::ServerId) -> bool {
        self.inner.manager.refresh(server)
    }

    /// A user connected an account on `server` (`auth = "oauth"`): it is listed now, here and,
    /// told through the shared events, on every other instance (one that waited for a first
    /// connection has nothing to compare a catalog change with).
    pub async fn account_connected(&self, server: &crate::config::ServerId) {
        self.inner.manager.refresh(server);
        self.announce(crate::store::redis::Event::Refreshed {
            server: server.to_string(),
        })
        .await;
    }

    /// The pins in force (`None` without a pin file).
    pub fn pins(&self) -> Option<Arc<Pins>> {
        self.inner
            .pins
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the pins (after `mcpgate pin` wrote a new file) and rebuilds the catalog.
    pub async fn set_pins(&self, pins: Option<Pins>) {
        *self
            .inner
            .pins
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = pins.map(Arc::new);
        self.rebuild_catalog().await;
    }

    /// Closes every upstream connection and reaps every child process.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        self.inner.manager.shutdown().await;
        if let Some(servers) = &self.inner.user_servers {
            servers.shutdown().await;
        }
        self.inner.tasks.wait().await;
    }

    async fn follow_upstreams(&self) {
        /// How long page changes gather before the catalog is rebuilt for them.
        const PAGE_SETTLE: std::time::Duration = std::time::Duration::from_millis(50);
        let mut changes = self.inner.manager.changes();
        let mut pages = self.inner.pages.changes();
        loop {
            self.rebuild_catalog().await;
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                changed = pages.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    // A burst of page changes (a page registering its tools one by one, or
                    // a hostile page changing them without pause) is one rebuild: pages
                    // cannot make the gateway rebuild its catalog more often than this.
                    tokio::time::sleep(PAGE_SETTLE).await;
                    pages.borrow_and_update();
                }
                () = self.inner.cancel.cancelled() => return,
            }
        }
    }

    /// Folds new audit records into the usage rollups, a chunk at a time, until none is
    /// left, every [`ROLL_EVERY`]; a long backlog (a first start on a large log) is folded
    /// over several ticks.
    async fn roll_usage(&self) {
        let mut every = tokio::time::interval(ROLL_EVERY);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    for _ in 0..MAX_ROLLS_PER_TICK {
                        match self.inner.usage.roll().await {
                            Ok(0) => break,
                            Ok(_) => tokio::task::yield_now().await,
                            Err(err) => {
                                tracing::warn!(error = %err, "folding usage failed");
                                break;
                            }
                        }
                    }
                }
                () = self.inner.cancel.cancelled() => return,
            }
        }
    }

    async fn purge_expired(&self) {
        let mut every = tokio::time::interval(PURGE_EVERY);
        loop {
            tokio::select! {
                _ = every.tick() => {
                    let now = self.inner.clock.now();
                    if let Err(err) = self.inner.confirmations.purge_expired(now).await {
                        tracing::warn!(error = %err, "purging expired confirmations failed");
                    }
                    if let Some(before) = self
                        .inner
                        .config
                        .audit
                        .retention
                        .and_then(|keep| now.checked_sub(keep))
                    {
                        if let Err(err) = self.inner.audit.purge_before(before).await {
                            tracing::warn!(error = %err, "purging old audit records failed");
                        }
                        if let Err(err) = self.inner.usage.purge_before(before).await {
                            tracing::warn!(error = %err, "purging old usage failed");
                        }
                    }
                    if let Some(servers) = &self.inner.user_servers {
                        servers.prune();
                    }
                    if let Err(err) = self.inner.idempotency.purge(now).await {
                        tracing::warn!(error = %err, "purging expired idempotency keys failed");
                    }
                    // Sign-ins nobody finished: their sealed verifiers go too.
                    if let Some(connections) = &self.inner.connections
                        && let Err(err) = connections.purge_expired().await
                    {
                        tracing::warn!(error = %err, "purging unfinished OAuth sign-ins failed");
                    }
                }
                () = self.inner.cancel.cancelled() => return,
            }
        }
    }

    /// Builds a new snapshot from every server's last good tools (allow/deny lists applied,
    /// pins compared, definitions scanned) and swaps it in whole.
    async fn rebuild_catalog(&self) {
        let _one_at_a_time = self.inner.rebuilding.lock().await;
        let servers = self
            .inner
            .manager
            .statuses()
            .into_iter()
            .filter_map(|status| {
                let config = self.inner.config.server(&status.id)?;
                // An `auth = "oauth"` server's tools: the shared session's and every user's.
                let tools = match (status.tools, config.oauth.is_some()) {
                    (Some(tools), _) => tools,
                    (None, true) => Default::default(),
                    (None, false) => return None,
                };
                let mut tools: Vec<_> = tools
                    .iter()
                    .filter(|t| config.exposes(&t.name))
                    .cloned()
                    .collect();
                if config.oauth.is_some() {
                    self.inner.listings.set_shared(&status.id, &tools);
                    self.inner.listings.union(&status.id, &mut tools);
                    if tools.is_empty() {
                        return None;
                    }
                }
                let mut list = ServerTools::new(status.id, tools, status.stale);
                list.on_change = config.on_change;
                list.scan = config.scan;
                list.overrides = config.overrides.clone();
                Some(list)
            })
            .collect::<Vec<_>>();
        let mut servers = servers;
        // Pages' tools, listed like a server's (scanned, fingerprinted, pinned).
        let scan = self.inner.pages.config().scan;
        for (server, tools) in self.inner.pages.listed() {
            if tools.is_empty() {
                continue;
            }
            let mut list = ServerTools::new(server, tools.to_vec(), false);
            list.scan = scan;
            servers.push(list);
        }
        servers.sort_by(|a, b| a.server.cmp(&b.server));
        let pins = self.pins();
        let catalog = Arc::new(match &self.inner.review {
            Some(review) => {
                Catalog::build_reviewed(servers, pins.as_deref(), &review.verdicts, review.blocks)
            }
            None => Catalog::build_with_pins(servers, pins.as_deref()),
        });
        self.compile_schemas(&catalog);
        self.report_changes(&catalog).await;
        let previous = std::mem::replace(
            &mut *self
                .inner
                .catalog
                .write()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
            catalog.clone(),
        );
        self.inner.swaps.send_modify(|n| *n += 1);
        if self.inner.shared.events.is_some() {
            // Pages' changes reach the other instances through the pages' registry.
            for server in changed_servers(&previous, &catalog)
                .into_iter()
                .filter(|server| !server.starts_with(crate::config::WEBMCP_PREFIX))
            {
                self.announce(crate::store::redis::Event::Refreshed { server })
                    .await;
            }
        }
    }

    /// Compiles each tool's input schema once per definition, dropping those of tools gone.
    fn compile_schemas(&self, catalog: &Catalog) {
        let mut schemas = self.inner.schemas.lock().unwrap_or_else(|p| p.into_inner());
        let mut fresh = HashMap::with_capacity(catalog.len());
        for tool in catalog.tools() {
            let compiled = schemas.remove(&tool.fingerprint).unwrap_or_else(|| {
                Arc::new(CompiledSchema::new(&tool.input_schema).map_err(|e| e.to_string()))
            });
            fresh.insert(tool.fingerprint.clone(), compiled);
        }
        *schemas = fresh;
    }

    fn schema_for(&self, tool: &CatalogTool) -> Arc<Result<CompiledSchema, String>> {
        let mut schemas = self.inner.schemas.lock().unwrap_or_else(|p| p.into_inner());
        schemas
            .entry(tool.fingerprint.clone())
            .or_insert_with(|| {
                Arc::new(CompiledSchema::new(&tool.input_schema).map_err(|e| e.to_string()))
            })
            .clone()
    }

    /// Logs and audits, once each, definitions that differ from their pins and tools with
    /// scan findings (under warn policies they stay usable, so this is how anyone learns).
    async fn report_changes(&self, catalog: &Catalog) {
        let mut new_reports = Vec::new();
        {
            let mut reported = self
                .inner
                .reported_changes
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            for tool in catalog.tools() {
                let changed = matches!(tool.pin, PinStatus::Changed { .. });
                let flagged = tool
                    .findings
                    .iter()
                    .any(|f| f.code == crate::catalog::FindingCode::ModelReview);
                if (changed || !tool.findings.is_empty())
                    && reported.insert((tool.fingerprint.clone(), flagged))
                {
                    new_reports.push(tool.clone());
                }
            }
        }
        for tool in new_reports {
            audit::report_definition(self, &tool).await;
        }
    }
}

/// Servers whose tool definitions differ between two snapshots, among those the earlier one
/// had tools of (a server's first listing is news to no one: every instance lists it).
fn changed_servers(before: &Catalog, after: &Catalog) -> Vec<String> {
    use std::collections::BTreeMap;
    let fingerprints = |catalog: &Catalog| {
        let mut by_server: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for tool in catalog.tools() {
            by_server
                .entry(tool.server.as_str().to_owned())
                .or_default()
                .push(tool.fingerprint.as_str().to_owned());
        }
        by_server
    };
    let (before, after) = (fingerprints(before), fingerprints(after));
    before
        .iter()
        .filter(|(server, tools)| after.get(*server).is_some_and(|now| now != *tools))
        .map(|(server, _)| server.clone())
        .collect()
}
