//! The gateway: the one gate every tool call passes, and the catalog it keeps fresh.

mod call;
mod error;

use std::{
    path::PathBuf,
    sync::{Arc, RwLock},
    time::Duration,
};

use tokio_util::{sync::CancellationToken, task::TaskTracker};

pub use call::ToolOutput;
pub use error::GatewayError;

use crate::{
    catalog::{Catalog, ServerTools},
    config::{Config, Env},
    upstream::{ConnectOptions, Manager, ServerStatus},
};

/// What the gateway needs from its surroundings besides configuration.
#[derive(Debug, Clone, Default)]
pub struct GatewayOptions {
    /// Environment for `${VAR}` references and the variables children inherit.
    pub env: Env,
    /// The `mcpgate` binary, run as supervisor of stdio servers (see
    /// [`crate::upstream::supervisor`]); `None` runs them directly.
    pub supervisor: Option<PathBuf>,
}

struct Inner {
    config: Arc<Config>,
    manager: Manager,
    catalog: RwLock<Arc<Catalog>>,
    cancel: CancellationToken,
    tasks: TaskTracker,
}

/// The gateway. Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

impl Gateway {
    /// Starts connecting every configured server and keeps the catalog in step with them.
    /// Returns at once; see [`Gateway::wait_ready`].
    pub fn start(config: Config, options: GatewayOptions) -> Gateway {
        let connect = ConnectOptions {
            env: options.env,
            limits: config.limits.clone(),
            supervisor: options.supervisor,
        };
        let manager = Manager::start(
            config.servers.clone(),
            connect,
            config.reconnect.clone(),
            config.cache.clone(),
        );
        let inner = Arc::new(Inner {
            config: Arc::new(config),
            manager,
            catalog: RwLock::new(Arc::new(Catalog::build(Vec::new()))),
            cancel: CancellationToken::new(),
            tasks: TaskTracker::new(),
        });
        let gateway = Gateway { inner };
        let follower = gateway.clone();
        gateway
            .inner
            .tasks
            .spawn(async move { follower.follow_upstreams().await });
        gateway
    }

    /// Waits until every server finished its first connection attempt (each bounded by its
    /// connect deadline), or `deadline`; then the catalog reflects them.
    pub async fn wait_ready(&self, deadline: Duration) {
        self.inner.manager.wait_settled(deadline).await;
        self.rebuild_catalog();
    }

    /// The current catalog snapshot (immutable; refreshes swap in a new one).
    pub fn catalog(&self) -> Arc<Catalog> {
        self.inner
            .catalog
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Every server's state, in id order.
    pub fn servers(&self) -> Vec<ServerStatus> {
        self.inner.manager.statuses()
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// A receiver that changes whenever upstream state or tools change.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.manager.changes()
    }

    /// Asks a server to re-list its tools (or reconnect now). `false` if no such server.
    pub fn refresh(&self, server: &crate::config::ServerId) -> bool {
        self.inner.manager.refresh(server)
    }

    /// Closes every upstream connection and reaps every child process.
    pub async fn shutdown(&self) {
        self.inner.cancel.cancel();
        self.inner.tasks.close();
        self.inner.manager.shutdown().await;
        self.inner.tasks.wait().await;
    }

    async fn follow_upstreams(&self) {
        let mut changes = self.inner.manager.changes();
        loop {
            self.rebuild_catalog();
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = self.inner.cancel.cancelled() => return,
            }
        }
    }

    /// Builds a new snapshot from every server's last good tools (allow/deny lists applied)
    /// and swaps it in whole.
    fn rebuild_catalog(&self) {
        let servers = self
            .inner
            .manager
            .statuses()
            .into_iter()
            .filter_map(|status| {
                let tools = status.tools?;
                let config = self.inner.config.server(&status.id)?;
                let tools = tools
                    .iter()
                    .filter(|t| config.exposes(&t.name))
                    .cloned()
                    .collect();
                Some(ServerTools {
                    server: status.id,
                    tools,
                    stale: status.stale,
                })
            })
            .collect();
        let catalog = Arc::new(Catalog::build(servers));
        *self
            .inner
            .catalog
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = catalog;
    }
}
