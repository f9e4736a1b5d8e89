//! Upstream prompts and argument completion through the gate: prompts namespaced like tools
//! (`server_prompt`, looked up in a table, never parsed back), or under their own names when
//! a single server is in scope; audited like calls.

use rmcp::model::{
    CompleteRequestParams, CompleteResult, GetPromptRequestParams, GetPromptResult, JsonObject,
    Prompt, Reference,
};

use super::{
    Gateway,
    resources::{ContentAttempt, ContentError, bounded},
};
use crate::{catalog::function_names, config::ServerId, policy::CallContext};

/// A prompt as the endpoint offers it.
struct Entry {
    /// The namespaced name callers use.
    name: String,
    server: ServerId,
    /// The upstream's prompt, its own name kept.
    prompt: Prompt,
}

impl Gateway {
    /// Every prompt `ctx` may see, namespaced: names depend only on the set of
    /// `(server, prompt)` pairs listed, as tool function names do. With a `scope`, only that
    /// server's prompts, under their upstream names (one server cannot collide with another).
    async fn prompt_table(&self, ctx: &CallContext, scope: Option<&ServerId>) -> Vec<Entry> {
        let lists = self
            .per_server(ctx, scope, "prompts", |m, id, user| async move {
                m.list_prompts(&id, user.as_ref()).await
            })
            .await;
        if scope.is_some() {
            return lists
                .into_iter()
                .flat_map(|(server, prompts)| {
                    prompts.into_iter().map(move |prompt| Entry {
                        name: prompt.name.clone(),
                        server: server.clone(),
                        prompt,
                    })
                })
                .collect();
        }
        let pairs: Vec<(ServerId, Prompt)> = lists
            .into_iter()
            .flat_map(|(id, prompts)| prompts.into_iter().map(move |p| (id.clone(), p)))
            .collect();
        let ids: Vec<(ServerId, String)> = pairs
            .iter()
            .map(|(id, p)| (id.clone(), p.name.clone()))
            .collect();
        function_names(&ids)
            .into_iter()
            .zip(pairs)
            .map(|(name, (server, prompt))| Entry {
                name,
                server,
                prompt,
            })
            .collect()
    }

    /// The prompts `ctx` may see, under their namespaced names (upstream names in a `scope`).
    pub async fn list_prompts(&self, ctx: &CallContext, scope: Option<&ServerId>) -> Vec<Prompt> {
        self.prompt_table(ctx, scope)
            .await
            .into_iter()
            .map(|entry| {
                let mut prompt = entry.prompt;
                prompt.name = entry.name;
                prompt
            })
            .collect()
    }

    /// Gets the prompt `name` (namespaced, or the upstream name in a `scope`) with
    /// `arguments`; audited as `server.prompt:<upstream name>` (argument values are never
    /// recorded).
    pub async fn get_prompt(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        name: &str,
        arguments: Option<JsonObject>,
    ) -> Result<GetPromptResult, ContentError> {
        let mut attempt = ContentAttempt::start(self, ctx, format!("prompt:{name}"));
        let outcome = self
            .get_inner(ctx, scope, name, arguments, &mut attempt)
            .await;
        attempt.finish(self, outcome).await
    }

    async fn get_inner(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        name: &str,
        arguments: Option<JsonObject>,
        attempt: &mut ContentAttempt,
    ) -> Result<(GetPromptResult, usize), ContentError> {
        if let Some(arguments) = &arguments {
            attempt.argument_bytes(self.check_prompt_arguments(arguments)?);
        }
        let (server, upstream) = self.resolve_prompt(ctx, scope, name).await?;
        attempt.routed(&server, format!("prompt:{upstream}"));
        let mut params = GetPromptRequestParams::new(upstream);
        params.arguments = arguments;
        let user = self.content_user(ctx, &server).await?;
        let result = self
            .inner
            .manager
            .get_prompt(
                &server,
                params,
                self.content_timeout(&server),
                (
                    crate::upstream::Owner::caller(&ctx.tenant, &ctx.user),
                    user.as_ref(),
                ),
            )
            .await
            .map_err(|e| ContentError::upstream(&server, e, || not_found(name)))?;
        bounded(result, self.config().limits.max_result_bytes)
    }

    /// Completes an argument of a prompt (named as [`Gateway::list_prompts`] names it) or
    /// resource template, within `scope` when given; audited as the prompt or resource with
    /// detail `complete`.
    pub async fn complete(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        params: CompleteRequestParams,
    ) -> Result<CompleteResult, ContentError> {
        let target = match &params.r#ref {
            Reference::Prompt(p) => format!("prompt:{}", p.name),
            Reference::Resource(r) => format!("resource:{}", r.uri),
            _ => "complete".to_owned(),
        };
        let mut attempt = ContentAttempt::start(self, ctx, target);
        attempt.detail("complete");
        let outcome = self.complete_inner(ctx, scope, params, &mut attempt).await;
        attempt.finish(self, outcome).await
    }

    async fn complete_inner(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        mut params: CompleteRequestParams,
        attempt: &mut ContentAttempt,
    ) -> Result<(CompleteResult, usize), ContentError> {
        let limit = self.config().call_limits.max_argument_bytes;
        let size = serde_json::to_vec(&params).map_or(usize::MAX, |v| v.len());
        if size > limit {
            return Err(ContentError::InvalidParams {
                reason: format!("the request is {size} bytes, over the {limit}-byte limit"),
            });
        }
        attempt.argument_bytes(size);
        let (server, not_found): (ServerId, ContentError) = match &mut params.r#ref {
            Reference::Prompt(prompt) => {
                let (server, upstream) = self.resolve_prompt(ctx, scope, &prompt.name).await?;
                let missing = not_found(&prompt.name);
                attempt.routed(&server, format!("prompt:{upstream}"));
                prompt.name = upstream;
                (server, missing)
            }
            Reference::Resource(resource) => {
                let server = self.route_template(ctx, scope, &resource.uri).await?;
                attempt.routed(&server, format!("resource:{}", resource.uri));
                let missing = ContentError::ResourceNotFound {
                    uri: super::audit::clean(&resource.uri, MAX_NAME_CHARS),
                };
                (server, missing)
            }
            _ => {
                return Err(ContentError::InvalidParams {
                    reason: "unknown kind of completion reference".to_owned(),
                });
            }
        };
        let user = self.content_user(ctx, &server).await?;
        let result = self
            .inner
            .manager
            .complete(
                &server,
                params,
                self.content_timeout(&server),
                (
                    crate::upstream::Owner::caller(&ctx.tenant, &ctx.user),
                    user.as_ref(),
                ),
            )
            .await
            .map_err(|e| ContentError::upstream(&server, e, || not_found))?;
        bounded(result, self.config().limits.max_result_bytes)
    }

    /// The server and upstream name of the prompt `name` (as listed in `scope`).
    async fn resolve_prompt(
        &self,
        ctx: &CallContext,
        scope: Option<&ServerId>,
        name: &str,
    ) -> Result<(ServerId, String), ContentError> {
        self.prompt_table(ctx, scope)
            .await
            .into_iter()
            .find(|entry| entry.name == name)
            .map(|entry| (entry.server, entry.prompt.name))
            .ok_or_else(|| not_found(name))
    }

    /// The size of `arguments`, checked like a tool call's (bounded, no duplicate keys).
    fn check_prompt_arguments(&self, arguments: &JsonObject) -> Result<usize, ContentError> {
        crate::policy::check_value(arguments, self.config().call_limits.max_argument_bytes).map_err(
            |e| ContentError::InvalidParams {
                reason: e.to_string(),
            },
        )
    }
}

/// Longest prompt name or URI quoted back in an error.
const MAX_NAME_CHARS: usize = 256;

fn not_found(name: &str) -> ContentError {
    ContentError::PromptNotFound {
        name: super::audit::clean(name, MAX_NAME_CHARS),
    }
}
