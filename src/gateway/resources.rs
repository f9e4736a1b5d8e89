//! Upstream resources and resource templates through the gate: listed for callers who may
//! see their server, routed by URI (exact listing first, then level-1 templates), size
//! capped, watched for updates, and audited like calls.

use std::{
    collections::{HashMap, HashSet},
    future::Future,
    sync::{Arc, LazyLock, Mutex},
    time::{Instant, SystemTime},
};

use rmcp::model::{
    ErrorCode, ReadResourceRequestParams, ReadResourceResult, Resource, ResourceContents,
    ResourceTemplate,
};
use serde::Serialize;

use super::{
    Gateway, apps,
    audit::{ABANDONED, abandoned_decision, append_detached, clean},
};
use crate::{
    config::ServerId,
    policy::CallContext,
    store::{AuditRecord, AuditStore},
    upstream::{
        Manager, UpstreamError,
        watch::{ResourceWatch, UpdateSink},
    },
};

/// Longest string kept in an audit field or an error message (URIs and names come from
/// callers and upstreams).
const MAX_FIELD_CHARS: usize = 256;

/// Colliding URIs remembered so each is logged once; past this many, the set stops growing
/// (a server listing endless colliding URIs cannot grow our memory, only repeat warnings).
const MAX_REPORTED_COLLISIONS: usize = 1024;

/// URIs already logged as listed by more than one server.
static REPORTED_COLLISIONS: LazyLock<Mutex<HashSet<String>>> =
    LazyLock::new(|| Mutex::new(HashSet::new()));

/// Why a resource, prompt or completion request did not succeed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ContentError {
    /// No visible server offers this resource (hidden ones are indistinguishable on purpose).
    #[error("unknown resource `{uri}`")]
    ResourceNotFound { uri: String },
    /// No visible server offers this prompt.
    #[error("unknown prompt `{name}`")]
    PromptNotFound { name: String },
    /// More than one visible server offers this URI, so it cannot be routed.
    #[error("`{uri}` is offered by more than one server and cannot be routed")]
    Ambiguous { uri: String },
    /// The request's parameters are not acceptable (to the gateway or the upstream).
    #[error("invalid parameters: {reason}")]
    InvalidParams { reason: String },
    /// The result is larger than `max_result_bytes` (a view's, than `max_view_bytes`).
    #[error("the result is {size} bytes, over the {limit}-byte limit")]
    ResultTooLarge { size: usize, limit: usize },
    /// The upstream did not answer in time.
    #[error("the server did not answer within {after:?}")]
    Timeout { after: std::time::Duration },
    /// The upstream could not serve the request.
    #[error("upstream `{server}`: {source}")]
    Upstream {
        server: String,
        source: UpstreamError,
    },
    /// The audit log could not be written: the answer is withheld (fail closed).
    #[error("{what} is unavailable; the request was refused")]
    StoreUnavailable { what: &'static str },
    /// The server wants the caller's own account (`auth = "oauth"`), not connected.
    #[error("{message}")]
    AuthorizationRequired { message: String },
}

impl ContentError {
    /// A stable, machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            ContentError::ResourceNotFound { .. } => "resource_not_found",
            ContentError::PromptNotFound { .. } => "prompt_not_found",
            ContentError::Ambiguous { .. } => "ambiguous",
            ContentError::InvalidParams { .. } => "invalid_params",
            ContentError::ResultTooLarge { .. } => "result_too_large",
            ContentError::Timeout { .. } => "timeout",
            ContentError::Upstream { source, .. } => source.code(),
            ContentError::StoreUnavailable { .. } => "store_unavailable",
            ContentError::AuthorizationRequired { .. } => "authorization_required",
        }
    }

    /// From an upstream failure: its "not found" and "invalid params" answers keep their
    /// meaning (with the upstream's message cut and escaped), everything else stays an
    /// upstream error.
    pub(super) fn upstream(
        server: &ServerId,
        err: UpstreamError,
        not_found: impl FnOnce() -> ContentError,
    ) -> ContentError {
        match err {
            UpstreamError::Timeout { after } => ContentError::Timeout { after },
            UpstreamError::Rpc { code, .. } if code == ErrorCode::RESOURCE_NOT_FOUND.0 => {
                not_found()
            }
            UpstreamError::Rpc { code, message } if code == ErrorCode::INVALID_PARAMS.0 => {
                ContentError::InvalidParams {
                    reason: clean(&message, MAX_FIELD_CHARS),
                }
            }
            source => ContentError::Upstream {
                server: server.to_string(),
                source,
            },
        }
    }
}

/// One resource, prompt or completion request on its way to an audit record. Dropped before
/// it finished (its caller went away), it is audited all the same, as `abandoned`.
pub(super) struct ContentAttempt {
    started: Instant,
    time: SystemTime,
    ctx: CallContext,
    /// `resource:<uri>` or `prompt:<name>`; prefixed by the server once routed.
    target: String,
    server: Option<ServerId>,
    /// `complete` for completions; reads and gets have none.
    detail: Option<&'static str>,
    argument_bytes: u64,
    /// Where the record goes; `None` once it was written by `finish`.
    audit: Option<Arc<dyn AuditStore>>,
}

impl ContentAttempt {
    pub fn start(gateway: &Gateway, ctx: &CallContext, target: String) -> ContentAttempt {
        ContentAttempt {
            started: Instant::now(),
            time: gateway.inner.clock.now(),
            ctx: ctx.clone(),
            target,
            server: None,
            detail: None,
            argument_bytes: 0,
            audit: Some(gateway.inner.audit.clone()),
        }
    }

    pub fn routed(&mut self, server: &ServerId, target: String) {
        self.server = Some(server.clone());
        self.target = target;
    }

    pub fn detail(&mut self, detail: &'static str) {
        self.detail = Some(detail);
    }

    pub fn argument_bytes(&mut self, size: usize) {
        self.argument_bytes = size as u64;
    }

    /// Writes the record; without it, the answer is not given.
    pub async fn finish<T>(
        mut self,
        gateway: &Gateway,
        outcome: Result<(T, usize), ContentError>,
    ) -> Result<T, ContentError> {
        self.audit = None;
        let (outcome, result_bytes) = match outcome {
            Ok((value, size)) => (Ok(value), size as u64),
            Err(err) => (Err(err), 0),
        };
        // Routed means the request went upstream: like a tool call that reached its server.
        let decision = if self.server.is_some() && !matches!(&outcome, Err(e) if is_denial(e)) {
            "allowed"
        } else {
            "denied"
        };
        let code = outcome.as_ref().map_or_else(|e| e.code(), |_| "ok");
        let record = self.record(decision, code, result_bytes);
        match gateway.inner.audit.append(record).await {
            Ok(()) => outcome,
            Err(err) => {
                tracing::error!(error = %err, "audit record could not be written");
                Err(ContentError::StoreUnavailable {
                    what: "the audit log",
                })
            }
        }
    }

    fn record(&self, decision: &str, outcome: &str, result_bytes: u64) -> AuditRecord {
        let server = self.server.as_ref().map(ServerId::as_str).unwrap_or("");
        let tool = match &self.server {
            Some(server) => format!("{server}.{}", self.target),
            None => self.target.clone(),
        };
        AuditRecord {
            time: self.time,
            request_id: clean(&self.ctx.request_id, MAX_FIELD_CHARS),
            tenant: clean(&self.ctx.tenant, MAX_FIELD_CHARS),
            user: clean(&self.ctx.user, MAX_FIELD_CHARS),
            session: clean(&self.ctx.session, MAX_FIELD_CHARS),
            server: server.to_owned(),
            tool: clean(&tool, MAX_FIELD_CHARS),
            decision: decision.to_owned(),
            confirmation_id: None,
            outcome: outcome.to_owned(),
            duration_ms: self
                .started
                .elapsed()
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX),
            argument_bytes: self.argument_bytes,
            result_bytes,
            fingerprint: None,
            arguments: None,
            detail: self.detail.map(str::to_owned),
        }
    }
}

impl Drop for ContentAttempt {
    fn drop(&mut self) {
        let Some(audit) = self.audit.take() else {
            return;
        };
        let decision = abandoned_decision(self.server.is_some());
        append_detached(audit, self.record(decision, ABANDONED, 0));
    }
}

/// Refused by the gateway before the upstream saw the request.
fn is_denial(err: &ContentError) -> bool {
    matches!(
        err,
        ContentError::Ambiguous { .. } | ContentError::InvalidParams { .. }
    )
}

/// `value` with its serialized size, or `ResultTooLarge` over `limit` bytes.
pub(super) fn bounded<T: Serialize>(value: T, limit: usize) -> Result<(T, usize), ContentError> {
    let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
    if size > limit {
        return Err(ContentError::ResultTooLarge { size, limit });
    }
    Ok((value, size))
}

/// Logs, once per URI, that more than one server lists it.
fn report_collision(uri: &str) {
    let mut reported = REPORTED_COLLISIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if reported.len() < MAX_REPORTED_COLLISIONS && reported.insert(uri.to_owned()) {
        tracing::warn!(uri = %clean(uri, MAX_FIELD_CHARS),
            "a resource URI is listed by more than one server; reads of it are refused");
    }
}

/// Whether `uri` is an expansion of `template` under RFC 6570 level 1: each `{var}` stands
/// for a non-empty run of unreserved characters and percent escapes (what simple expansion
/// produces), literals match exactly. Operators and lists (`{+x}`, `{a,b}`) never match.
pub(super) fn template_matches(template: &str, uri: &str) -> bool {
    let mut parts = template.split('{');
    let Some(mut rest) = uri.strip_prefix(parts.next().unwrap_or_default()) else {
        return false;
    };
    for part in parts {
        let Some((var, literal)) = part.split_once('}') else {
            return false;
        };
        if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return false;
        }
        let end = if literal.is_empty() {
            rest.len()
        } else {
            match rest.find(literal) {
                Some(end) => end,
                None => return false,
            }
        };
        let value = &rest[..end];
        let unreserved = |c: char| c.is_ascii_alphanumeric() || "-._~%".contains(c);
        if value.is_empty() || !value.chars().all(unreserved) {
            return false;
        }
        rest = &rest[end + literal.len()..];
    }
    rest.is_empty()
}

impl Gateway {
    /// Whether `server` is configured and `ctx` may see it (some of its tools, its resources
    /// and prompts); a hidden server and an unknown one are alike to the caller.
    pub fn sees_server(&self, ctx: &CallContext, server: &ServerId) -> bool {
        self.config().server(server).is_some() && self.inner.access.allows_server(ctx, server)
    }

    /// The servers whose resources and prompts `ctx` may see, in configuration order; only
    /// `scope` when one is given (an endpoint serving a single server).
    pub(super) fn content_servers(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
    ) -> Vec<ServerId> {
        self.config()
            .servers
            .iter()
            .map(|s| s.id.clone())
            .filter(|id| scope.is_none_or(|only| only == id))
            .filter(|id| self.inner.access.allows_server(ctx, id))
            .collect()
    }

    /// The caller's own token for `server` when it has `auth = "oauth"` (`None` otherwise).
    pub(super) async fn content_user(
        &self,
        ctx: &CallContext,
        server: &ServerId,
    ) -> Result<Option<crate::upstream::oauth::UserToken>, ContentError> {
        if self
            .config()
            .server(server)
            .is_none_or(|s| s.oauth.is_none())
        {
            return Ok(None);
        }
        self.user_token(ctx, server).await.map(Some).map_err(|err| {
            ContentError::AuthorizationRequired {
                message: err.to_string(),
            }
        })
    }

    /// Deadline of one read, get or completion on `server`: its call timeout.
    pub(super) fn content_timeout(&self, server: &ServerId) -> std::time::Duration {
        let config = self.config();
        config
            .server(server)
            .and_then(|s| s.call_timeout)
            .unwrap_or(config.limits.call_timeout)
    }

    /// Lists something of every server `ctx` may see, concurrently (each bounded by the list
    /// deadline). A server that fails is left out and logged, as a degraded server's tools.
    pub(super) async fn per_server<T, F, Fut>(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        what: &'static str,
        list: F,
    ) -> Vec<(ServerId, Vec<T>)>
    where
        F: Fn(Manager, ServerId, Option<crate::upstream::oauth::UserToken>) -> Fut,
        Fut: Future<Output = Result<Vec<T>, UpstreamError>>,
    {
        // A server that wants the caller's own account is listed as the caller, and left out
        // for a caller who has not connected it.
        let mut servers = Vec::new();
        let mut users = Vec::new();
        for id in self.content_servers(ctx, scope) {
            match self.content_user(ctx, &id).await {
                Ok(user) => {
                    servers.push(id);
                    users.push(user);
                }
                Err(_) => continue,
            }
        }
        let lists = servers
            .iter()
            .zip(users)
            .map(|(id, user)| list(self.inner.manager.clone(), id.clone(), user));
        let results = futures::future::join_all(lists).await;
        servers
            .into_iter()
            .zip(results)
            .filter_map(|(id, result)| match result {
                Ok(items) => Some((id, items)),
                Err(err) => {
                    tracing::warn!(server = %id, error = %err, "listing {what} failed");
                    None
                }
            })
            .collect()
    }

    /// The resources `ctx` may see (of `scope` only, when given), URIs as the upstreams
    /// list them, except MCP Apps views (`ui://`) in the merged view, under their server
    /// (see [`super::apps`]); a view every tool naming which is hidden from `ctx` is left
    /// out. A URI listed by more than one server is left out (it cannot be routed).
    pub async fn list_resources(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
    ) -> Vec<Resource> {
        let mut lists = self
            .per_server(ctx, scope, "resources", |m, id, user| async move {
                m.list_resources(&id, user.as_ref()).await
            })
            .await;
        let views = self.views(ctx).await;
        for (server, items) in &mut lists {
            let hidden = views.hidden(server);
            items.retain(|r| !hidden.contains(&r.uri));
            if scope.is_none() {
                for resource in items.iter_mut() {
                    resource.uri = apps::merged_uri(server, &resource.uri);
                }
            }
        }
        let unique: HashSet<String> = owners(&lists, |r: &Resource| r.uri.as_str())
            .into_iter()
            .filter(|(_, servers)| servers.len() == 1)
            .map(|(uri, _)| uri.to_owned())
            .collect();
        lists
            .into_iter()
            .flat_map(|(_, items)| items)
            .filter(|r| {
                let routable = unique.contains(&r.uri);
                if !routable {
                    report_collision(&r.uri);
                }
                routable
            })
            .collect()
    }

    /// The resource templates `ctx` may see (of `scope` only, when given), `uriTemplate` as
    /// the upstreams list it (a `ui://` one under its server in the merged view).
    pub async fn list_resource_templates(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
    ) -> Vec<ResourceTemplate> {
        self.per_server(ctx, scope, "resource templates", |m, id, user| async move {
            m.list_resource_templates(&id, user.as_ref()).await
        })
        .await
        .into_iter()
        .flat_map(|(server, items)| {
            items.into_iter().map(move |mut template| {
                if scope.is_none() {
                    template.uri_template = apps::merged_uri(&server, &template.uri_template);
                }
                template
            })
        })
        .collect()
    }

    /// What decides which MCP Apps views `ctx` may see: the catalog's tools and `ctx`'s own.
    async fn views(&self, ctx: &CallContext) -> Views {
        Views {
            visible: self.list_tools(ctx).await,
            catalog: self.catalog(),
        }
    }

    /// Where a read or watch of `uri` goes, and the URI the upstream knows: a merged view's
    /// `ui://<server>/<rest>` to that server (when `ctx` sees it) as `ui://<rest>`, anything
    /// else routed by listing and templates. A view hidden from `ctx` is not found.
    async fn route_read(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
    ) -> Result<(ServerId, String), ContentError> {
        let not_found = || ContentError::ResourceNotFound {
            uri: clean(uri, MAX_FIELD_CHARS),
        };
        let (server, upstream) = match scope {
            None if apps::is_view(uri) => {
                let (server, upstream) = apps::from_merged(uri).ok_or_else(not_found)?;
                if !self.content_servers(ctx, Some(&server)).contains(&server) {
                    return Err(not_found());
                }
                (server, upstream)
            }
            _ => (self.route_uri(ctx, scope, uri).await?, uri.to_owned()),
        };
        if apps::is_view(&upstream) && self.views(ctx).await.hidden(&server).contains(&upstream) {
            return Err(not_found());
        }
        Ok((server, upstream))
    }

    /// Reads `uri` from the one visible server (within `scope`, when given) that lists it,
    /// or else whose template matches it; audited as `server.resource:<uri>`, bounded by
    /// `max_result_bytes` (an MCP Apps view, `ui://`, by `max_view_bytes`).
    pub async fn read_resource(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
    ) -> Result<ReadResourceResult, ContentError> {
        let mut attempt = ContentAttempt::start(self, ctx, format!("resource:{uri}"));
        let outcome = self.read_inner(ctx, scope, uri, &mut attempt).await;
        attempt.finish(self, outcome).await
    }

    async fn read_inner(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
        attempt: &mut ContentAttempt,
    ) -> Result<(ReadResourceResult, usize), ContentError> {
        let (server, upstream) = self.route_read(ctx, scope, uri).await?;
        attempt.routed(&server, format!("resource:{upstream}"));
        let not_found = || ContentError::ResourceNotFound {
            uri: clean(uri, MAX_FIELD_CHARS),
        };
        let user = self.content_user(ctx, &server).await?;
        let mut result = self
            .inner
            .manager
            .read_resource(
                &server,
                ReadResourceRequestParams::new(upstream.as_str()),
                self.content_timeout(&server),
                (
                    crate::upstream::Owner::caller(&ctx.tenant, &ctx.user),
                    user.as_ref(),
                ),
            )
            .await
            .map_err(|e| ContentError::upstream(&server, e, not_found))?;
        if scope.is_none() {
            for contents in &mut result.contents {
                if let ResourceContents::TextResourceContents { uri, .. }
                | ResourceContents::BlobResourceContents { uri, .. } = contents
                {
                    *uri = apps::merged_uri(&server, uri);
                }
            }
        }
        let limits = &self.config().limits;
        let limit = if apps::is_view(&upstream) {
            limits.max_view_bytes
        } else {
            limits.max_result_bytes
        };
        bounded(result, limit)
    }

    /// Watches `uri` for `ctx`, its updates going to `sink`: routed like a read (visible
    /// servers only, collisions refused), the upstream subscribed once per URI whoever
    /// watches; audited as `server.subscribe:<uri>`. Dropping the watch ends it.
    pub async fn watch_resource(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
        sink: UpdateSink,
    ) -> Result<ResourceWatch, ContentError> {
        let mut attempt = ContentAttempt::start(self, ctx, format!("subscribe:{uri}"));
        let outcome = self.watch_inner(ctx, scope, uri, sink, &mut attempt).await;
        attempt.finish(self, outcome).await
    }

    async fn watch_inner(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
        sink: UpdateSink,
        attempt: &mut ContentAttempt,
    ) -> Result<(ResourceWatch, usize), ContentError> {
        let (server, upstream) = self.route_read(ctx, scope, uri).await?;
        attempt.routed(&server, format!("subscribe:{upstream}"));
        let not_found = || ContentError::ResourceNotFound {
            uri: clean(uri, MAX_FIELD_CHARS),
        };
        // On an `auth = "oauth"` server, the caller's own watch over their own session.
        let user = self.content_user(ctx, &server).await?;
        let watch = self
            .inner
            .manager
            .watch_resource(
                &server,
                &upstream,
                sink,
                (self.content_timeout(&server), user.as_ref()),
            )
            .await
            .map_err(|e| ContentError::upstream(&server, e, not_found))?;
        Ok((watch, 0))
    }

    /// The one visible server listing the template `uri` (as a completion names it), else
    /// the one offering `uri` as a resource.
    pub(super) async fn route_template(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
    ) -> Result<ServerId, ContentError> {
        let templates = self
            .per_server(ctx, scope, "resource templates", |m, id, user| async move {
                m.list_resource_templates(&id, user.as_ref()).await
            })
            .await;
        match owners(&templates, |t: &ResourceTemplate| t.uri_template.as_str()).get(uri) {
            Some(servers) => only(servers, uri),
            None => self.route_uri(ctx, scope, uri).await,
        }
    }

    /// The one visible server offering `uri`: listed exactly, else by a matching template.
    pub(super) async fn route_uri(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        uri: &str,
    ) -> Result<ServerId, ContentError> {
        let resources = self
            .per_server(ctx, scope, "resources", |m, id, user| async move {
                m.list_resources(&id, user.as_ref()).await
            })
            .await;
        if let Some(servers) = owners(&resources, |r: &Resource| r.uri.as_str()).get(uri) {
            return only(servers, uri);
        }
        let templates = self
            .per_server(ctx, scope, "resource templates", |m, id, user| async move {
                m.list_resource_templates(&id, user.as_ref()).await
            })
            .await;
        let matching: Vec<&ServerId> = templates
            .iter()
            .filter(|(_, items)| items.iter().any(|t| template_matches(&t.uri_template, uri)))
            .map(|(id, _)| id)
            .collect();
        match matching.as_slice() {
            [] => Err(ContentError::ResourceNotFound {
                uri: clean(uri, MAX_FIELD_CHARS),
            }),
            servers => only(servers, uri),
        }
    }
}

/// The catalog's tools and a caller's, which decide the MCP Apps views the caller may see.
struct Views {
    visible: Vec<crate::catalog::CatalogTool>,
    catalog: Arc<crate::catalog::Catalog>,
}

impl Views {
    /// The upstream URIs of `server`'s views hidden from the caller.
    fn hidden(&self, server: &ServerId) -> HashSet<String> {
        apps::hidden_views(server, self.catalog.tools(), &self.visible)
    }
}

/// Which servers list each key (a URI or template), every server once.
pub(super) fn owners<'a, T>(
    lists: &'a [(ServerId, Vec<T>)],
    key: impl Fn(&'a T) -> &'a str,
) -> HashMap<&'a str, Vec<&'a ServerId>> {
    let mut owners: HashMap<&str, Vec<&ServerId>> = HashMap::new();
    for (server, items) in lists {
        for item in items {
            let servers = owners.entry(key(item)).or_default();
            if !servers.contains(&server) {
                servers.push(server);
            }
        }
    }
    owners
}

/// The single server of `servers`; more than one is a collision, refused and logged once.
pub(super) fn only(servers: &[&ServerId], uri: &str) -> Result<ServerId, ContentError> {
    match servers {
        [one] => Ok((*one).clone()),
        _ => {
            report_collision(uri);
            Err(ContentError::Ambiguous {
                uri: clean(uri, MAX_FIELD_CHARS),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_one_templates_match_simple_expansions_only() {
        let t = "test://template/{id}/data";
        assert!(template_matches(t, "test://template/42/data"));
        assert!(template_matches(t, "test://template/a%20b/data"));
        assert!(!template_matches(t, "test://template//data"));
        assert!(!template_matches(t, "test://template/4/2/data"));
        assert!(!template_matches(t, "test://template/42/data/more"));
        assert!(!template_matches(t, "test://other/42/data"));
        assert!(template_matches("db://{schema}/{table}", "db://main/users"));
        assert!(!template_matches("db://{+path}", "db://a"));
        assert!(!template_matches("db://{a,b}", "db://x"));
        assert!(template_matches("plain://uri", "plain://uri"));
        assert!(!template_matches("broken://{id", "broken://x"));
    }

    #[test]
    fn a_uri_of_two_servers_is_refused() {
        let (a, b) = (
            ServerId::new("a").expect("valid"),
            ServerId::new("b").expect("valid"),
        );
        let lists = vec![
            (a.clone(), vec!["x://1", "x://2", "x://2"]),
            (b.clone(), vec!["x://2"]),
        ];
        let owners = owners(&lists, |s: &&str| *s);
        assert_eq!(only(&owners["x://1"], "x://1").expect("one owner"), a);
        assert_eq!(owners["x://2"], vec![&a, &b]);
        assert!(matches!(
            only(&owners["x://2"], "x://2"),
            Err(ContentError::Ambiguous { .. })
        ));
    }
}
