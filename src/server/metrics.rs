//! Prometheus metrics of `mcpgate serve` (calls, latency, calls in flight, upstream states,
//! confirmation decisions, reloads), written by hand in text exposition format 0.0.4 and
//! served at `GET /metrics` to callers with the admin or metrics role.

use std::{
    collections::{BTreeMap, HashMap},
    sync::{
        Arc, Mutex, MutexGuard,
        atomic::{AtomicU64, Ordering},
    },
    time::Instant,
};

use axum::{
    Extension, Router,
    extract::State,
    http::{StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};

use super::{ApiError, AppState};
use crate::{
    agent::AgentEvent,
    gateway::{Gateway, GatewayError, ServerState, ToolOutput},
    policy::CallContext,
};

/// A role that may read `/metrics` and nothing else admin-only, for a scraper's token.
pub use crate::policy::METRICS_ROLE;

/// The media type of text exposition format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Upper bounds of the latency buckets, in seconds: from a local stdio tool (a few ms) to
/// the default request deadline (120 s); slower calls land in `+Inf` only.
const LATENCY_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];

/// Most `(server, tool, outcome)` call series kept. Tool names come from upstreams, and one
/// that keeps renaming its tools must not grow memory or every scrape without bound: past
/// this, new series count under `tool="other"`.
const MAX_CALL_SERIES: usize = 10_000;

/// The `tool` label of a name that matched no catalog tool (or of overflow). Canonical ids
/// always hold a `.`, so no tool is named this.
pub const OTHER_TOOL: &str = "other";

/// Outcome labels: `ok`, every code [`GatewayError::code`] returns, `cancelled` for calls
/// whose request was dropped (client gone, request deadline) or chat turn cancelled,
/// `denied_by_user` for a chat approval declined, and `other` for a code added to the
/// gateway but not yet here.
pub const OUTCOMES: &[&str] = &[
    "ok",
    "not_found",
    "invalid_arguments",
    "quarantined",
    "pending_review",
    "confirmation_required",
    "confirmation_invalid",
    "limit_exceeded",
    "tool_error",
    "result_too_large",
    "timeout",
    "store_unavailable",
    "upstream_connect_failed",
    "upstream_connect_timeout",
    "upstream_handshake_failed",
    "upstream_framing",
    "upstream_unavailable",
    "upstream_connection_lost",
    "upstream_error",
    "upstream_http_error",
    "upstream_protocol_error",
    "input_required",
    "upstream_input_unanswered",
    "cancelled",
    // The chat loop's own: the user declined a write tool; the model's arguments were not
    // valid JSON after its retries.
    "denied_by_user",
    "invalid_json_arguments",
    "other",
];

/// Every upstream state, each exported as its own 0/1 series.
const STATES: [ServerState; 4] = [
    ServerState::Connecting,
    ServerState::Ready,
    ServerState::Degraded,
    ServerState::Failed,
];

/// What happened to a confirmation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// A call needed one and got `confirmation_required`.
    Requested,
    Approved,
    Denied,
    /// Approving or denying was refused: unknown, expired, or another caller's.
    Refused,
}

impl Decision {
    const ALL: [Decision; 4] = [
        Decision::Requested,
        Decision::Approved,
        Decision::Denied,
        Decision::Refused,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Decision::Requested => "requested",
            Decision::Approved => "approved",
            Decision::Denied => "denied",
            Decision::Refused => "refused",
        }
    }
}

/// The metrics registry: shared by every handler, independent of which gateway (before or
/// after a reload) served a call.
#[derive(Debug, Default)]
pub struct Metrics {
    in_flight: AtomicU64,
    series: Mutex<Series>,
}

#[derive(Debug, Default)]
struct Series {
    calls: BTreeMap<(String, String, &'static str), u64>,
    latency: BTreeMap<String, Histogram>,
    confirmations: BTreeMap<&'static str, u64>,
    /// Reloads by result: `applied` or `rejected`.
    reloads: BTreeMap<&'static str, u64>,
}

#[derive(Debug, Default)]
struct Histogram {
    /// Observations per bucket (not cumulative; rendering sums them).
    buckets: [u64; LATENCY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        if let Some(i) = LATENCY_BUCKETS.iter().position(|le| seconds <= *le) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }
}

/// One call being measured; dropping it unfinished counts the call as `cancelled`.
#[must_use = "finish the timer with the call's outcome"]
pub struct CallTimer<'a> {
    metrics: &'a Metrics,
    /// `None` when the name matched no catalog tool.
    server: Option<String>,
    tool: String,
    started: Instant,
    finished: bool,
}

impl CallTimer<'_> {
    /// Records the call's outcome and latency.
    pub fn finish(mut self, outcome: &Result<ToolOutput, GatewayError>) {
        let label = match outcome {
            Ok(_) => "ok",
            Err(err) => outcome_label(err.code()),
        };
        if matches!(outcome, Err(GatewayError::ConfirmationRequired { .. })) {
            self.metrics.confirmation(Decision::Requested);
        }
        self.record(label);
    }

    fn record(&mut self, outcome: &'static str) {
        self.finished = true;
        let elapsed = self.started.elapsed().as_secs_f64();
        let tool = std::mem::take(&mut self.tool);
        self.metrics
            .observe(self.server.as_deref(), tool, outcome, elapsed);
    }
}

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.record("cancelled");
        }
        self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The tool calls of one chat turn, counted from its events; calls still open when the turn
/// ends (its stream dropped) count as `cancelled`.
pub struct AgentCalls {
    metrics: Arc<Metrics>,
    /// Users' own servers exist (`[user_servers]`): their names and tools are the users',
    /// counted as [`OTHER_TOOL`] on no server, as on the other routes.
    user_servers: bool,
    /// Call id → (server, tool label) of calls started and not yet finished.
    open: HashMap<String, (Option<String>, String)>,
}

impl AgentCalls {
    pub fn observe(&mut self, event: &AgentEvent) {
        match event {
            AgentEvent::ToolCall {
                call_id,
                tool,
                server,
                ..
            } => {
                // The event names a tool the catalog does not have by the model's own name.
                let own = self.user_servers
                    && server
                        .as_deref()
                        .is_some_and(|s| s.starts_with(crate::config::USER_SERVER_PREFIX));
                let (server, label) = match server {
                    Some(_) if own => (None, OTHER_TOOL.to_owned()),
                    Some(_) => (server.clone(), tool.clone()),
                    None => (None, OTHER_TOOL.to_owned()),
                };
                if self.open.insert(call_id.clone(), (server, label)).is_none() {
                    self.metrics.in_flight.fetch_add(1, Ordering::Relaxed);
                }
            }
            AgentEvent::ToolResult {
                call_id,
                elapsed_ms,
                ..
            } => self.finish(call_id, "ok", *elapsed_ms),
            AgentEvent::ToolError {
                call_id,
                code,
                elapsed_ms,
                ..
            } => self.finish(call_id, outcome_label(code), *elapsed_ms),
            _ => {}
        }
    }

    fn finish(&mut self, call_id: &str, outcome: &'static str, elapsed_ms: u64) {
        if let Some((server, tool)) = self.open.remove(call_id) {
            self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
            if outcome == "confirmation_required" {
                self.metrics.confirmation(Decision::Requested);
            }
            let seconds = elapsed_ms as f64 / 1000.0;
            self.metrics
                .observe(server.as_deref(), tool, outcome, seconds);
        }
    }
}

impl Drop for AgentCalls {
    fn drop(&mut self) {
        for (_, (server, tool)) in std::mem::take(&mut self.open) {
            self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.metrics
                .observe(server.as_deref(), tool, "cancelled", 0.0);
        }
    }
}

/// The label for a gateway error code: itself if listed in [`OUTCOMES`], else `other`.
fn outcome_label(code: &str) -> &'static str {
    OUTCOMES
        .iter()
        .copied()
        .find(|known| *known == code)
        .unwrap_or("other")
}

impl Metrics {
    /// Counts one finished call of `tool` (a canonical id, or [`OTHER_TOOL`]) on `server`
    /// (`None`: the name matched no catalog tool, so no latency is kept for it).
    fn observe(&self, server: Option<&str>, tool: String, outcome: &'static str, seconds: f64) {
        let mut series = self.lock();
        let key = (server.unwrap_or("").to_owned(), tool, outcome);
        let key = if series.calls.contains_key(&key) || series.calls.len() < MAX_CALL_SERIES {
            key
        } else {
            (key.0, OTHER_TOOL.to_owned(), outcome)
        };
        *series.calls.entry(key).or_default() += 1;
        if let Some(server) = server {
            series
                .latency
                .entry(server.to_owned())
                .or_default()
                .observe(seconds);
        }
    }

    /// Follows one chat turn's events: its tool calls count like REST and MCP calls (in
    /// flight from `tool_call` to `tool_result` or `tool_error`, then by outcome and time).
    pub fn agent_calls(self: &Arc<Self>, user_servers: bool) -> AgentCalls {
        AgentCalls {
            metrics: self.clone(),
            user_servers,
            open: HashMap::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Series> {
        // Plain counters: a panic mid-update leaves nothing worth refusing to read.
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts measuring a call of `name` (canonical id or function name) through `gateway`;
    /// the tool label is its canonical id when the catalog has it, else [`OTHER_TOOL`].
    pub fn start_call(&self, gateway: &Gateway, name: &str) -> CallTimer<'_> {
        let catalog = gateway.catalog();
        let tool = catalog
            .by_canonical(name)
            .or_else(|| catalog.by_function_name(name));
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        CallTimer {
            metrics: self,
            server: tool.map(|t| t.server.to_string()),
            tool: tool.map_or_else(|| OTHER_TOOL.to_owned(), |t| t.canonical.clone()),
            started: Instant::now(),
            finished: false,
        }
    }

    fn confirmation(&self, decision: Decision) {
        *self
            .lock()
            .confirmations
            .entry(decision.as_str())
            .or_default() += 1;
    }

    /// Counts an approve or deny attempt by its result: `decision` when it went through,
    /// [`Decision::Refused`] when the confirmation was not the caller's to decide (store
    /// failures are not decisions and are not counted).
    pub fn decided<T>(&self, decision: Decision, result: &Result<T, GatewayError>) {
        match result {
            Ok(_) => self.confirmation(decision),
            Err(GatewayError::ConfirmationNotFound) => {
                self.confirmation(Decision::Refused);
            }
            Err(_) => {}
        }
    }

    /// Counts a configuration reload attempt.
    pub fn reload(&self, applied: bool) {
        let result = if applied { "applied" } else { "rejected" };
        *self.lock().reloads.entry(result).or_default() += 1;
    }

    /// Everything, in text exposition format 0.0.4; upstream states and the catalog size are
    /// read from `gateway` now.
    pub fn render(&self, gateway: &Gateway) -> String {
        let upstreams: Vec<(String, ServerState)> = gateway
            .servers()
            .into_iter()
            .map(|s| (s.id.to_string(), s.state))
            .collect();
        self.render_with(&upstreams, gateway.catalog().len())
    }

    fn render_with(&self, upstreams: &[(String, ServerState)], catalog_tools: usize) -> String {
        let series = self.lock();
        let mut w = Exposition::default();
        w.family(
            "mcpgate_tool_calls_total",
            "counter",
            "Tool calls through the gate by server, tool (canonical id, or \"other\") and outcome.",
        );
        for ((server, tool, outcome), count) in &series.calls {
            let labels = [
                ("server", server.as_str()),
                ("tool", tool),
                ("outcome", outcome),
            ];
            w.sample("", &labels, count);
        }
        w.family(
            "mcpgate_tool_call_duration_seconds",
            "histogram",
            "Time of a tool call through the gate, policy checks included, by server.",
        );
        for (server, histogram) in &series.latency {
            let mut cumulative = 0;
            for (le, n) in LATENCY_BUCKETS.iter().zip(histogram.buckets) {
                cumulative += n;
                w.sample(
                    "_bucket",
                    &[("server", server), ("le", &le.to_string())],
                    cumulative,
                );
            }
            w.sample(
                "_bucket",
                &[("server", server), ("le", "+Inf")],
                histogram.count,
            );
            w.sample("_sum", &[("server", server)], histogram.sum);
            w.sample("_count", &[("server", server)], histogram.count);
        }
        w.family(
            "mcpgate_tool_calls_in_flight",
            "gauge",
            "Tool calls under way.",
        );
        w.sample("", &[], self.in_flight.load(Ordering::Relaxed));
        w.family(
            "mcpgate_upstream_state",
            "gauge",
            "1 for each upstream server's current connection state, 0 for the others.",
        );
        for (server, current) in upstreams {
            for state in STATES {
                let labels = [("server", server.as_str()), ("state", state.as_str())];
                w.sample("", &labels, u8::from(*current == state));
            }
        }
        w.family(
            "mcpgate_catalog_tools",
            "gauge",
            "Tools in the catalog, whatever their status.",
        );
        w.sample("", &[], catalog_tools);
        w.family(
            "mcpgate_confirmations_total",
            "counter",
            "Confirmations by decision: requested, approved, denied, refused.",
        );
        for decision in Decision::ALL {
            let count = series.confirmations.get(decision.as_str()).unwrap_or(&0);
            w.sample("", &[("decision", decision.as_str())], count);
        }
        w.family(
            "mcpgate_config_reloads_total",
            "counter",
            "Configuration reloads by result: applied, or rejected (the running one kept).",
        );
        for result in ["applied", "rejected"] {
            let count = series.reloads.get(result).unwrap_or(&0);
            w.sample("", &[("result", result)], count);
        }
        w.out
    }
}

/// Text exposition format 0.0.4, one metric family after the other.
#[derive(Default)]
struct Exposition {
    out: String,
    family: &'static str,
}

impl Exposition {
    fn family(&mut self, name: &'static str, kind: &str, help: &str) {
        self.family = name;
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        self.out += &format!("# HELP {name} {help}\n# TYPE {name} {kind}\n");
    }

    /// A sample of the current family; `suffix` is `_bucket`, `_sum` or `_count` for a
    /// histogram, else empty.
    fn sample(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(self.family);
        self.out.push_str(suffix);
        for (i, (label, value)) in labels.iter().enumerate() {
            self.out.push(if i == 0 { '{' } else { ',' });
            let value = value
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            self.out += &format!("{label}=\"{value}\"");
        }
        if !labels.is_empty() {
            self.out.push('}');
        }
        self.out += &format!(" {value}\n");
    }
}

/// `GET /metrics` (authenticated).
pub fn routes() -> Router<AppState> {
    Router::new().route("/metrics", get(serve_metrics))
}

/// Tool names and call volumes map what every tenant uses: only an operator or the metrics
/// role reads them (see [`crate::policy::Access::reads_metrics`]).
async fn serve_metrics(
    State(state): State<AppState>,
    Extension(ctx): Extension<Arc<CallContext>>,
) -> Result<Response, ApiError> {
    let gateway = state.gateway.current();
    if !gateway.reads_metrics(&ctx) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "this needs a gateway operator or the metrics role",
        ));
    }
    let body = state.metrics.render(&gateway);
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response())
}

#[cfg(test)]
mod tests;
