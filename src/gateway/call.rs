//! The call path, DESIGN.md "One tool call": resolve, access, quarantine, arguments,
//! confirmation, limits, upstream, result shaping, audit, in that order, for every caller.

use std::{sync::Arc, time::Duration};

use rmcp::model::CallToolRequestParams;
use serde_json::{Map, Value};

use super::{
    Gateway, GatewayError, ToolOutput, apps,
    audit::{Attempt, append_detached},
    result::shape_sized,
};
use crate::{
    catalog::{CatalogTool, ToolStatus, args_hash},
    config::{Config, ServerConfig, ServerId},
    policy::{CallContext, Effect, classify, needs_confirmation},
    store::{Approved, AuditRecord, Binding, Pending},
    upstream::{CallRelay, UpstreamError},
};

/// How long a retried read waits for its server to come back before giving up.
const RETRY_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// A call's audit attempt while the call runs. The call's future may be dropped before it
/// finished, when its caller goes away (an HTTP client disconnecting drops the request's
/// handler); the attempt is audited then all the same, as `abandoned`, for the upstream may
/// already have acted on it.
struct Running<'a> {
    gateway: &'a Gateway,
    attempt: Attempt,
    finished: bool,
}

impl Running<'_> {
    /// The record of the call that finished with `outcome`.
    fn finish(mut self, outcome: &Result<ToolOutput, GatewayError>) -> AuditRecord {
        self.finished = true;
        self.attempt
            .finish(outcome, &self.gateway.inner.config.audit)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if !self.finished {
            append_detached(self.gateway.inner.audit.clone(), self.attempt.abandoned());
        }
    }
}

impl Gateway {
    /// Calls a tool by canonical id (`server.tool`) or function name (`server_tool`) as `ctx`,
    /// with a confirmation token when the tool needs one. Every attempt is audited.
    pub async fn call_tool(
        &self,
        ctx: &CallContext,
        name: &str,
        arguments: Value,
        confirmation: Option<&str>,
    ) -> Result<ToolOutput, GatewayError> {
        self.call_tool_measured(ctx, name, arguments, confirmation)
            .await
            .0
    }

    /// [`Gateway::call_tool`], relaying what the upstream sends while the call runs
    /// (progress, log messages, sampling and elicitation requests) to `relay`, the caller's
    /// side; the same gate, audit and limits apply.
    pub async fn call_tool_relayed(
        &self,
        ctx: &CallContext,
        name: &str,
        arguments: Value,
        confirmation: Option<&str>,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> Result<ToolOutput, GatewayError> {
        self.call_measured(ctx, name, arguments, confirmation, relay)
            .await
            .0
    }

    /// [`Gateway::call_tool`], also returning the time spent waiting for the upstream (so
    /// the HTTP layer can report the gateway's own overhead).
    pub async fn call_tool_measured(
        &self,
        ctx: &CallContext,
        name: &str,
        arguments: Value,
        confirmation: Option<&str>,
    ) -> (Result<ToolOutput, GatewayError>, Duration) {
        self.call_measured(ctx, name, arguments, confirmation, None)
            .await
    }

    async fn call_measured(
        &self,
        ctx: &CallContext,
        name: &str,
        arguments: Value,
        confirmation: Option<&str>,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> (Result<ToolOutput, GatewayError>, Duration) {
        let call = Call {
            name,
            confirmation,
            relay,
            app: None,
        };
        self.call_gated(ctx, call, arguments).await
    }

    /// The gate for `call`, audited whatever happens.
    pub(super) async fn call_gated(
        &self,
        ctx: &CallContext,
        call: Call<'_>,
        arguments: Value,
    ) -> (Result<ToolOutput, GatewayError>, Duration) {
        let mut running = Running {
            gateway: self,
            attempt: Attempt::start(ctx, call.name, self.inner.clock.now()),
            finished: false,
        };
        // Boxed: the gate's future is large (it holds the upstream call's), and the server
        // moves its handler's future several times before polling it.
        let outcome = Box::pin(self.call_inner(ctx, call, arguments, &mut running.attempt)).await;
        let upstream_time = running.attempt.upstream_time();
        let record = running.finish(&outcome);
        let outcome = match self.inner.audit.append(record).await {
            Ok(()) => outcome,
            Err(err) => {
                tracing::error!(error = %err, "audit record could not be written");
                // An acknowledged call has its record: without one, report failure.
                Err(GatewayError::StoreUnavailable {
                    what: "the audit log",
                })
            }
        };
        (outcome, upstream_time)
    }

    async fn call_inner(
        &self,
        ctx: &CallContext,
        call: Call<'_>,
        arguments: Value,
        attempt: &mut Attempt,
    ) -> Result<ToolOutput, GatewayError> {
        let Call {
            name,
            confirmation,
            relay,
            app,
        } = call;
        if let Some((_, view)) = app {
            attempt.via_app(view);
        }
        let mut catalog = self.catalog();
        let not_found = || GatewayError::NotFound {
            name: name.to_owned(),
        };
        // 1, 2: resolve; a tool the caller may not use does not exist for them.
        if self.resolve(&catalog, ctx, name).is_none() {
            // The caller's own lists may name tools the catalog has not seen yet.
            let views = self.oauth_views(ctx).await;
            catalog = self.catalog();
            // A tool of an `auth = "oauth"` server nobody's account has listed: connecting
            // is what the caller needs, so say that, not "unknown".
            if self.resolve(&catalog, ctx, name).is_none()
                && let Some((server, _)) = name.split_once('.')
                && let Some(id) = views.keys().find(|id| id.as_str() == server)
                && self.inner.access.allows(ctx, id, name)
            {
                self.user_token(ctx, id).await?;
            }
        }
        // A tool of the caller's own server (`[user_servers]`) is in their catalog alone.
        if self.resolve(&catalog, ctx, name).is_none()
            && name.starts_with(crate::config::USER_SERVER_PREFIX)
            && let Some(own) = self.user_catalog(ctx).await
        {
            catalog = own;
        }
        if self.resolve(&catalog, ctx, name).is_none()
            && name.starts_with(crate::config::USER_SERVER_PREFIX)
            && let Some(err) = self.user_server_wants_account(ctx, name).await
        {
            return Err(err);
        }
        let tool = self.resolve(&catalog, ctx, name).ok_or_else(not_found)?;
        attempt.tool(tool);
        // An App reaches only its own server's tools that are meant for apps; to it, nothing
        // else exists.
        if let Some((server, _)) = app
            && (&tool.server != server || !apps::visible_to(&tool.upstream, apps::Caller::App))
        {
            return Err(not_found());
        }
        let config = self.config();
        // A page's tool has no server configuration: `[webmcp]` says how it is treated.
        // A user's own server's settings travel with its tools.
        let server = match crate::webmcp::is_page(&tool.server) {
            true => None,
            false => Some(
                tool.settings
                    .as_deref()
                    .or_else(|| config.server(&tool.server))
                    .ok_or_else(not_found)?,
            ),
        };
        // 3: pins and scan.
        match &tool.status {
            ToolStatus::Quarantined { reason } => {
                return Err(GatewayError::Quarantined {
                    tool: tool.canonical.clone(),
                    reason: reason.clone(),
                });
            }
            ToolStatus::Pending => {
                return Err(GatewayError::PendingReview {
                    tool: tool.canonical.clone(),
                });
            }
            ToolStatus::Ok | ToolStatus::Stale => {}
        }
        // 4: arguments.
        let arguments = self.check_arguments(tool, arguments, config, attempt)?;
        // The caller's own account, where the server wants one: checked before a write is
        // confirmed, so nobody approves a call that cannot run.
        let mut user = match server.and_then(|s| s.oauth.as_ref()) {
            Some(_) => {
                let token = self.user_token(ctx, &tool.server).await?;
                // Only what the server lists for this user's token is theirs to call.
                if let Some(names) = self.own_view(ctx, &tool.server, &token).await?
                    && !names.contains(tool.upstream.name.as_ref())
                {
                    return Err(not_found());
                }
                Some(token)
            }
            None => None,
        };
        // 5: confirmation for writes.
        let pages = &self.inner.pages;
        let effect = match server {
            Some(server) => classify(server, &tool.upstream),
            None => pages.classify(&tool.canonical, &tool.upstream),
        };
        attempt.effect(effect);
        let confirm = match server {
            Some(server) => needs_confirmation(server, effect),
            None => pages.needs_confirmation(effect),
        };
        if confirm {
            // Asking may take longer than the token's renewal margin: fetched again after.
            user = None;
            let hash = args_hash(&Value::Object(arguments.clone()));
            let binding = Binding {
                tenant: ctx.tenant.clone(),
                user: ctx.user.clone(),
                session: ctx.session.clone(),
                tool: tool.canonical.clone(),
                fingerprint: tool.fingerprint.as_str().to_owned(),
                args_hash: hash,
            };
            match confirmation {
                // Approved out of band and repeated by the same caller: taken once.
                None if self.take_approval(&binding, attempt).await? => {}
                None => return Err(self.ask_confirmation(binding, attempt).await),
                Some(token) => self.redeem(token, &binding, attempt).await?,
            }
        }
        // 6: limits.
        let limits = &config.call_limits;
        // A user's own server is theirs alone: its server-wide limits are counted apart from
        // every other user's server of the same name.
        let limited = match tool.settings {
            Some(_) => super::user_servers::limit_id(ctx, &tool.server),
            None => tool.server.clone(),
        };
        let _permit = self.admit(ctx, &limited, limits, effect).await?;
        // 7: the upstream.
        attempt.allowed();
        let timeout = match server {
            Some(server) => call_timeout(config, server, tool),
            None => pages.config().call_timeout,
        };
        let upstream_started = std::time::Instant::now();
        let result = self
            .call_upstream((ctx, tool, user), arguments, timeout, effect, config, relay)
            .await;
        attempt.upstream_time_add(upstream_started.elapsed());
        let result = result?;
        // 8: shape.
        let (output, size) = shape_sized(
            &tool.canonical,
            tool.server.as_str(),
            result,
            config.limits.max_result_bytes,
            limits,
            tool.upstream.output_schema.is_some(),
        )?;
        attempt.result_bytes(size);
        Ok(output)
    }

    fn check_arguments(
        &self,
        tool: &CatalogTool,
        arguments: Value,
        config: &Config,
        attempt: &mut Attempt,
    ) -> Result<Map<String, Value>, GatewayError> {
        let invalid = |reason: String| GatewayError::InvalidArguments { reason };
        let not_an_object = |other: &Value| {
            invalid(format!(
                "arguments must be a JSON object, not {}",
                crate::policy::type_name(other)
            ))
        };
        // Kept as a `Value` until validated: the validator takes one.
        let arguments = match arguments {
            Value::Null => Value::Object(Map::new()),
            other => other,
        };
        let Value::Object(map) = &arguments else {
            return Err(not_an_object(&arguments));
        };
        let size = crate::policy::check_value(map, config.call_limits.max_argument_bytes)
            .map_err(|e| invalid(e.to_string()))?;
        attempt.argument_bytes(size);
        // Argument values are kept only for tools named for it (and only if the tool reads,
        // which `finish` checks): no canonical copy on the hot path otherwise.
        if config.audit.log_arguments_for.contains(&tool.canonical) {
            attempt.arguments(map);
        }
        let schema = self.schema_for(tool);
        match schema.as_ref() {
            Ok(compiled) => compiled
                .validate_value(&arguments)
                .map_err(|e| invalid(e.to_string()))?,
            Err(reason) => {
                return Err(invalid(format!(
                    "the tool's input schema is unusable: {reason}"
                )));
            }
        }
        match arguments {
            Value::Object(map) => Ok(map),
            other => Err(not_an_object(&other)),
        }
    }

    /// Stores a pending confirmation and returns the error that tells the caller about it.
    async fn ask_confirmation(&self, binding: Binding, attempt: &mut Attempt) -> GatewayError {
        let now = self.inner.clock.now();
        let pending = Pending {
            id: crate::digest::random_hex(16),
            created_at: now,
            expires_at: now + self.inner.config.confirmations.pending_ttl,
            binding,
        };
        attempt.confirmation(&pending.id);
        let error = GatewayError::ConfirmationRequired {
            confirmation_id: pending.id.clone(),
            tool: pending.binding.tool.clone(),
            args_hash: pending.binding.args_hash.clone(),
            expires_at: pending.expires_at,
        };
        match self.inner.confirmations.insert_pending(pending).await {
            Ok(()) => error,
            Err(err) => super::confirm::store_error(err),
        }
    }

    /// Consumes a confirmation token: exactly once, and only for the exact call it was
    /// approved for.
    async fn redeem(
        &self,
        token: &str,
        binding: &Binding,
        attempt: &mut Attempt,
    ) -> Result<(), GatewayError> {
        let hash = crate::digest::sha256_hex(token.as_bytes());
        let approved: Option<Approved> = self
            .inner
            .confirmations
            .take_token(&hash, self.inner.clock.now())
            .await
            .map_err(|err| {
                tracing::error!(error = %err, "cannot read the confirmation store");
                GatewayError::StoreUnavailable {
                    what: "the confirmation store",
                }
            })?;
        let approved = approved.ok_or(GatewayError::ConfirmationInvalid {
            reason: "unknown, already used or expired",
        })?;
        attempt.confirmation(&approved.confirmation_id);
        let b = &approved.binding;
        let reason = if (&b.tenant, &b.user, &b.session)
            != (&binding.tenant, &binding.user, &binding.session)
        {
            Some("approved for another user or session")
        } else if b.tool != binding.tool {
            Some("approved for another tool")
        } else if b.fingerprint != binding.fingerprint {
            Some("the tool's definition changed since approval")
        } else if b.args_hash != binding.args_hash {
            Some("approved for other arguments")
        } else {
            None
        };
        match reason {
            Some(reason) => Err(GatewayError::ConfirmationInvalid { reason }),
            None => Ok(()),
        }
    }

    /// Calls the upstream; reads are retried on connection failures, writes only when the
    /// request was certainly not sent (the server was not connected), so a confirmed write
    /// reaches the upstream at most once.
    async fn call_upstream(
        &self,
        (ctx, tool, mut fetched): (
            &CallContext,
            &CatalogTool,
            Option<crate::upstream::oauth::UserToken>,
        ),
        arguments: Map<String, Value>,
        timeout: Duration,
        effect: Effect,
        config: &Config,
        relay: Option<Arc<dyn CallRelay>>,
    ) -> Result<rmcp::model::CallToolResult, GatewayError> {
        if crate::webmcp::is_page(&tool.server) {
            // Never retried: the page may have acted before it went away.
            return self
                .inner
                .pages
                .invoke(
                    ctx,
                    &tool.server,
                    tool.upstream.name.as_ref(),
                    &arguments,
                    timeout,
                )
                .await
                .map_err(|err| match err {
                    crate::webmcp::PageError::Timeout { after } => GatewayError::Timeout { after },
                    source => GatewayError::Page {
                        server: tool.server.to_string(),
                        source,
                    },
                });
        }
        if tool.settings.is_some() {
            // A user's own server: over their own session, never retried (it is theirs to
            // retry, and every one of its tools may write).
            let params =
                CallToolRequestParams::new(tool.upstream.name.clone()).with_arguments(arguments);
            return self
                .call_user_server(ctx, &tool.server, params, timeout, relay)
                .await;
        }
        let mut retries_left = config.call_limits.retries;
        let oauth = config
            .server(&tool.server)
            .is_some_and(|server| server.oauth.is_some());
        loop {
            let params = CallToolRequestParams::new(tool.upstream.name.clone())
                .with_arguments(arguments.clone());
            // The token fetched before, for the first attempt; a fresh look for a retry.
            let user = match (oauth, fetched.take()) {
                (true, Some(user)) => Some(user),
                (true, None) => Some(self.user_token(ctx, &tool.server).await?),
                (false, _) => None,
            };
            match self
                .inner
                .manager
                .call_tool_as(&tool.server, params, timeout, relay.clone(), user.as_ref())
                .await
            {
                Ok(result) => return Ok(result),
                Err(UpstreamError::TokenRefused(refusal)) if oauth => {
                    return Err(self.token_refused(ctx, &tool.server, refusal).await);
                }
                Err(err) => {
                    let not_sent = matches!(err, UpstreamError::Unavailable { .. });
                    let lost = matches!(err, UpstreamError::ConnectionLost);
                    let retry = retries_left > 0 && (not_sent || (lost && effect == Effect::Read));
                    if !retry {
                        return Err(match err {
                            UpstreamError::Timeout { after } => GatewayError::Timeout { after },
                            source => GatewayError::Upstream {
                                server: tool.server.to_string(),
                                source,
                            },
                        });
                    }
                    retries_left -= 1;
                    self.inner
                        .manager
                        .wait_connected(&tool.server, RETRY_RECONNECT_WAIT)
                        .await;
                }
            }
        }
    }
}

impl Gateway {
    /// The server refused the caller's token: the connection wants more scope, or is no
    /// longer accepted; either way the caller connects again.
    pub(super) async fn token_refused(
        &self,
        ctx: &CallContext,
        server: &crate::config::ServerId,
        refusal: crate::upstream::oauth::Refusal,
    ) -> GatewayError {
        use crate::upstream::oauth::Refusal;
        let Some(connections) = self.connections() else {
            return GatewayError::Upstream {
                server: server.to_string(),
                source: UpstreamError::TokenRefused(refusal),
            };
        };
        let key = crate::oauth::ConnectionKey {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            server: server.to_string(),
        };
        let scope = match &refusal {
            Refusal::InsufficientScope { scope } => Some(scope.clone().unwrap_or_default()),
            Refusal::Unauthorized => None,
        };
        tracing::info!(server = %server, scope = ?scope, "the server refused a user's token");
        match connections.refused(&key, scope.as_deref()).await {
            Ok(err) | Err(err) => GatewayError::from_oauth(server.as_str(), err),
        }
    }

    /// The tool `name` (canonical or function name) in `catalog`, if `ctx` may use it.
    fn resolve<'c>(
        &self,
        catalog: &'c crate::catalog::Catalog,
        ctx: &CallContext,
        name: &str,
    ) -> Option<&'c CatalogTool> {
        catalog
            .by_canonical(name)
            .or_else(|| catalog.by_function_name(name))
            .filter(|t| self.may_use(ctx, t))
    }

    /// The caller's token for an `auth = "oauth"` server, refreshed if it is about to expire.
    pub(super) async fn user_token(
        &self,
        ctx: &CallContext,
        server: &crate::config::ServerId,
    ) -> Result<crate::upstream::oauth::UserToken, GatewayError> {
        let Some(connections) = self.connections() else {
            return Err(GatewayError::from_oauth(
                server.as_str(),
                crate::oauth::OAuthError::AuthorizationRequired {
                    server: server.to_string(),
                },
            ));
        };
        let key = crate::oauth::ConnectionKey {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            server: server.to_string(),
        };
        let token = connections
            .access_token(&key)
            .await
            .map_err(|err| GatewayError::from_oauth(server.as_str(), err))?;
        Ok(crate::upstream::oauth::UserToken::new(
            &ctx.tenant,
            &ctx.user,
            &token.digest,
            token.secret,
        ))
    }
}

/// What the caller asked for, besides the arguments.
pub(super) struct Call<'a> {
    pub name: &'a str,
    pub confirmation: Option<&'a str>,
    pub relay: Option<Arc<dyn CallRelay>>,
    /// An MCP App's call: the server whose view made it, and the view.
    pub app: Option<(&'a ServerId, &'a str)>,
}

pub(super) fn limit_error(e: crate::policy::LimitExceeded) -> GatewayError {
    GatewayError::LimitExceeded {
        limit: e.limit.describe().to_string(),
        retry_after: e.retry_after,
    }
}

fn call_timeout(config: &Config, server: &ServerConfig, tool: &CatalogTool) -> Duration {
    server
        .tool_timeouts
        .iter()
        .find(|(name, _)| name == tool.upstream.name.as_ref())
        .map(|(_, t)| *t)
        .or(server.call_timeout)
        .unwrap_or(config.limits.call_timeout)
}
