//! Configuration reload of `mcpgate serve` (`POST /api/v1/admin/reload`, SIGHUP): the file
//! is read and validated again, a new gateway is started from it and swapped in whole, and
//! the old one is shut down once the requests still using it are done.

use std::{
    net::SocketAddr,
    ops::Deref,
    path::PathBuf,
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use axum::{
    Extension, Json, Router,
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::post,
};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::{
    sync::CancellationToken,
    task::{TaskTracker, task_tracker::TaskTrackerToken},
};

use super::{ApiError, AppState, rest::require_operator};
use crate::{
    config::{ServerId, StateConfig, load_with_embedded_state},
    gateway::{Gateway, GatewayOptions, StartError},
    policy::CallContext,
};

/// Where the running service's configuration came from, so a reload reads it the same way.
#[derive(Debug, Clone)]
pub struct ReloadSource {
    /// `--config` as given; `None` looks for `./mcpgate.toml` again, else the embedded default.
    pub explicit: Option<PathBuf>,
    pub cwd: PathBuf,
    /// This binary (the embedded default runs it as its demo server).
    pub exe: PathBuf,
    pub embedded_state: StateConfig,
    /// `--listen`, applied again so the reloaded service settings compare equal.
    pub listen: Option<SocketAddr>,
    /// For the new gateway; its `env` also resolves `${VAR}` references in the file.
    pub options: GatewayOptions,
}

/// What a reload changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReloadOutcome {
    pub added: Vec<ServerId>,
    pub removed: Vec<ServerId>,
    /// Servers in both; reconnected all the same (the new gateway has its own connections).
    pub kept: Vec<ServerId>,
    /// Tools in the new catalog when it was swapped in.
    pub tools: usize,
    pub warnings: Vec<String>,
}

/// Why a reload changed nothing; the running configuration stays in every case.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the service was not started from a configuration that can be read again")]
    Unavailable,
    #[error("the configuration has {} problem(s)", problems.len())]
    Invalid { problems: Vec<String> },
    #[error("settings that only a restart applies changed: [{}]", sections.join("], ["))]
    RestartRequired { sections: Vec<&'static str> },
    #[error("the new configuration could not be started: {0}")]
    Start(#[from] StartError),
    #[error("the service is shutting down")]
    Stopping,
    #[error("the reload task failed")]
    Interrupted,
}

/// The running gateway, replaced whole by a reload. Requests take a [`Lease`] per request;
/// a replaced gateway is shut down when its last lease is gone.
pub struct LiveGateway {
    current: RwLock<Generation>,
    /// One reload at a time, so an older file can never replace a newer one.
    reloading: tokio::sync::Mutex<()>,
    /// Reloads under way and replaced gateways draining; shutdown waits for them.
    tasks: TaskTracker,
    /// Cuts drains short at shutdown and refuses reloads after it.
    stopping: CancellationToken,
    /// Counts the gateways put in service by reloads.
    swapped: watch::Sender<u64>,
    /// The runtime the first gateway was made on, where reloads start theirs: a request
    /// asking for a reload may be served on a [lane](crate::lane), which is for serving.
    home: Option<tokio::runtime::Handle>,
}

struct Generation {
    gateway: Gateway,
    leases: TaskTracker,
}

/// A gateway for the length of one request: while any lease on it lives, a replaced
/// gateway keeps its upstream connections.
pub struct Lease {
    gateway: Gateway,
    _lease: TaskTrackerToken,
}

impl Deref for Lease {
    type Target = Gateway;

    fn deref(&self) -> &Gateway {
        &self.gateway
    }
}

impl LiveGateway {
    pub fn new(gateway: Gateway) -> LiveGateway {
        LiveGateway {
            current: RwLock::new(Generation {
                gateway,
                leases: TaskTracker::new(),
            }),
            reloading: tokio::sync::Mutex::new(()),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            swapped: watch::Sender::new(0),
            home: tokio::runtime::Handle::try_current().ok(),
        }
    }

    /// The gateway now in service; hold the lease while using it.
    pub fn current(&self) -> Lease {
        // Plain data behind the lock: a panic elsewhere cannot leave it half-written.
        let current = self.current.read().unwrap_or_else(PoisonError::into_inner);
        Lease {
            gateway: current.gateway.clone(),
            _lease: current.leases.token(),
        }
    }

    /// Puts `gateway` in service; the one replaced is shut down when its leases are gone, or
    /// after `drain` (no request outlives the request deadline), or at shutdown.
    fn swap(&self, gateway: Gateway, drain: Duration) {
        let fresh = Generation {
            gateway,
            leases: TaskTracker::new(),
        };
        let old = std::mem::replace(
            &mut *self.current.write().unwrap_or_else(PoisonError::into_inner),
            fresh,
        );
        old.leases.close();
        self.swapped.send_modify(|n| *n += 1);
        let stopping = self.stopping.clone();
        self.tasks.spawn(async move {
            tokio::select! {
                () = old.leases.wait() => {}
                () = stopping.cancelled() => {}
                () = tokio::time::sleep(drain) => tracing::warn!(
                    "requests on the previous configuration still running after {drain:?}; \
                     closing its upstream connections"
                ),
            }
            old.gateway.shutdown().await;
        });
    }

    /// A receiver that changes whenever a reload puts a new gateway in service (whose own
    /// [`Gateway::changes`] then take over).
    pub fn swaps(&self) -> watch::Receiver<u64> {
        self.swapped.subscribe()
    }

    /// Shuts the gateway in service down, and any replaced one still draining; a reload
    /// under way finishes first, later ones are refused.
    pub async fn shutdown(&self) {
        self.stopping.cancel();
        let no_reload = self.reloading.lock().await;
        self.tasks.close();
        let gateway = self
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .gateway
            .clone();
        gateway.shutdown().await;
        // Released first: a reload task waiting for it must run to its refusal for the
        // tracker to empty.
        drop(no_reload);
        self.tasks.wait().await;
    }
}

/// Reads the configuration `source` names again and, when it is valid and needs no
/// restart, puts a gateway started from it in service. Runs to its end even if the caller
/// stops waiting (a dropped request must not leave a half-started gateway behind).
pub async fn reload(state: &AppState, source: &ReloadSource) -> Result<ReloadOutcome, ReloadError> {
    let task_state = state.clone();
    let source = source.clone();
    let task = async move { apply(&task_state, &source).await };
    let live = &state.gateway;
    let task = match &live.home {
        Some(home) => live.tasks.spawn_on(task, home),
        None => live.tasks.spawn(task),
    };
    let result = task.await.unwrap_or(Err(ReloadError::Interrupted));
    state.metrics.reload(result.is_ok());
    match &result {
        Ok(outcome) => tracing::info!(
            added = ?outcome.added,
            removed = ?outcome.removed,
            tools = outcome.tools,
            "configuration reloaded"
        ),
        Err(ReloadError::Invalid { problems }) => {
            tracing::warn!(?problems, "configuration not reloaded");
        }
        Err(err) => tracing::warn!(error = %err, "configuration not reloaded"),
    }
    result
}

async fn apply(state: &AppState, source: &ReloadSource) -> Result<ReloadOutcome, ReloadError> {
    let live = &state.gateway;
    let _one_at_a_time = live.reloading.lock().await;
    if live.stopping.is_cancelled() {
        return Err(ReloadError::Stopping);
    }
    let invalid = |err: crate::config::ConfigError| ReloadError::Invalid {
        problems: err
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect(),
    };
    // A bounded read (the loader caps the file at 1 MiB) of a local file: short enough not
    // to need a blocking thread.
    let loaded = load_with_embedded_state(
        source.explicit.as_deref(),
        &source.cwd,
        &source.options.env,
        &source.exe,
        source.embedded_state.clone(),
    )
    .map_err(invalid)?;
    let mut config = loaded.config;
    if let Some(listen) = source.listen {
        config.service = config.service.with_listen(listen).map_err(invalid)?;
    }
    let (stores, previous) = {
        let old = live.current();
        let mut sections = Vec::new();
        if config.service != *state.service {
            sections.push("server");
        }
        if config.state != old.config().state || config.shared != old.config().shared {
            sections.push("state");
        }
        // The audit writer's sync level is set when the stores open.
        if config.audit.sync != old.config().audit.sync {
            sections.push("audit.sync");
        }
        // Connected pages outlive a reload, under the bridge's settings they connected with.
        if config.webmcp != old.config().webmcp {
            sections.push("webmcp");
        }
        if !sections.is_empty() {
            return Err(ReloadError::RestartRequired { sections });
        }
        (old.stores(), old.config().servers.clone())
    };
    let ids = |servers: &[crate::config::ServerConfig]| -> Vec<ServerId> {
        servers.iter().map(|s| s.id.clone()).collect()
    };
    let (old_ids, new_ids) = (ids(&previous), ids(&config.servers));
    let settle = config
        .settle_deadline()
        .min(state.service.request_timeout / 2);
    // Same stores: pending confirmations, tokens and the audit log carry over.
    let fresh = Gateway::start_with_stores(config, source.options.clone(), stores)?;
    fresh.wait_ready(settle).await;
    let tools = fresh.catalog().len();
    live.swap(fresh, state.service.request_timeout);
    Ok(ReloadOutcome {
        added: new_ids
            .iter()
            .filter(|id| !old_ids.contains(id))
            .cloned()
            .collect(),
        removed: old_ids
            .iter()
            .filter(|id| !new_ids.contains(id))
            .cloned()
            .collect(),
        kept: new_ids
            .iter()
            .filter(|id| old_ids.contains(id))
            .cloned()
            .collect(),
        tools,
        warnings: loaded.warnings,
    })
}

/// `POST /admin/reload` (under `/api/v1`, authenticated).
pub fn routes() -> Router<AppState> {
    Router::new().route("/admin/reload", post(reload_handler))
}

async fn reload_handler(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
) -> Result<Response, ApiError> {
    require_operator(&state.gateway.current(), &ctx)?;
    let result = match &state.reload {
        Some(source) => reload(&state, source).await,
        None => Err(ReloadError::Unavailable),
    };
    let outcome = result.map_err(ApiError::from)?;
    let ids = |ids: &[ServerId]| -> Vec<String> { ids.iter().map(ServerId::to_string).collect() };
    Ok(Json(json!({
        "ok": true,
        "added": ids(&outcome.added),
        "removed": ids(&outcome.removed),
        "kept": ids(&outcome.kept),
        "tools": outcome.tools,
        "warnings": outcome.warnings,
    }))
    .into_response())
}

impl From<ReloadError> for ApiError {
    fn from(err: ReloadError) -> ApiError {
        let message = err.to_string();
        let (status, code, extra) = match err {
            ReloadError::Unavailable => (StatusCode::CONFLICT, "reload_unavailable", None),
            ReloadError::Invalid { problems } => (
                StatusCode::BAD_REQUEST,
                "invalid_config",
                Some(json!({ "problems": problems })),
            ),
            // The pin file is part of the configuration an operator fixes.
            ReloadError::Start(start) => (
                StatusCode::BAD_REQUEST,
                "invalid_config",
                Some(json!({ "problems": [start.to_string()] })),
            ),
            ReloadError::RestartRequired { sections } => (
                StatusCode::CONFLICT,
                "restart_required",
                Some(json!({ "sections": sections })),
            ),
            ReloadError::Stopping => (StatusCode::SERVICE_UNAVAILABLE, "shutting_down", None),
            ReloadError::Interrupted => (StatusCode::INTERNAL_SERVER_ERROR, "reload_failed", None),
        };
        let mut api = ApiError::new(status, code, message);
        api.extra = extra.map(Box::new);
        api
    }
}
