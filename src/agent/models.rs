//! Which model answers a turn (`[[llm.models]]`): the one the client names, else the
//! default, among those the caller's tenant may use; and, as chat-ui's router does, a turn
//! that offers tools on a model without them goes to a model with tools (`[llm] tools_model`,
//! else the first such), so the tools are not silently dropped.

use crate::{
    catalog::CatalogTool,
    config::{Config, NamedModel, ServerId},
    gateway::{Gateway, apps},
    policy::CallContext,
};

/// The model a turn runs on, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelChoice {
    pub model: NamedModel,
    /// The model the client asked for (or the default) when another answers instead.
    pub routed_from: Option<String>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error("no model is configured: set [llm] (or OPENAI_BASE_URL and MCPGATE_MODEL)")]
    NoModel,
    /// Unknown, or not one the tenant may use: one answer for both, so names of other
    /// tenants' models are not confirmed.
    #[error("model {0:?} is not available")]
    NotAvailable(String),
}

impl ModelError {
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::NoModel => "no_model",
            ModelError::NotAvailable(_) => "model_not_available",
        }
    }
}

/// The models `tenant` may use, in configuration order (the `[llm]` one alone, named by its
/// model, without `[[llm.models]]`).
pub fn available(config: &Config, tenant: &str) -> Vec<NamedModel> {
    let all = if config.models.list.is_empty() {
        config
            .llm
            .iter()
            .map(|llm| NamedModel {
                name: llm.model.clone(),
                llm: llm.clone(),
                max_running_turns: None,
                price: None,
            })
            .collect()
    } else {
        config.models.list.clone()
    };
    let allowed = config
        .access
        .as_ref()
        .and_then(|a| a.tenants.iter().find(|t| t.tenant == tenant))
        .and_then(|t| t.models.as_ref());
    match allowed {
        Some(names) => all
            .into_iter()
            .filter(|m| names.contains(&m.name))
            .collect(),
        None => all,
    }
}

/// The default model's name for `tenant`: the configured default when the tenant may use
/// it, else the first it may.
pub fn default_name(config: &Config, models: &[NamedModel]) -> Option<String> {
    let wanted = config.models.default.as_deref();
    models
        .iter()
        .find(|m| Some(m.name.as_str()) == wanted)
        .or_else(|| models.first())
        .map(|m| m.name.clone())
}

/// The model for a turn of `tenant` that asked for `requested` (`None`: the default) and
/// offers tools when `offers_tools`.
pub fn choose(
    config: &Config,
    tenant: &str,
    requested: Option<&str>,
    offers_tools: bool,
) -> Result<ModelChoice, ModelError> {
    let models = available(config, tenant);
    let name = match requested {
        Some(name) => name.to_owned(),
        None => default_name(config, &models).ok_or(ModelError::NoModel)?,
    };
    let Some(asked) = models.iter().find(|m| m.name == name) else {
        return Err(if models.is_empty() && requested.is_none() {
            ModelError::NoModel
        } else {
            ModelError::NotAvailable(name)
        });
    };
    if !offers_tools || asked.llm.tools {
        return Ok(ModelChoice {
            model: asked.clone(),
            routed_from: None,
        });
    }
    let configured = config.models.tools_model.as_deref();
    let with_tools = models
        .iter()
        .find(|m| m.llm.tools && Some(m.name.as_str()) == configured)
        .or_else(|| models.iter().find(|m| m.llm.tools));
    Ok(match with_tools {
        Some(model) => ModelChoice {
            model: model.clone(),
            routed_from: Some(asked.name.clone()),
        },
        // No model with tools for this tenant: the turn runs without them, as before.
        None => ModelChoice {
            model: asked.clone(),
            routed_from: None,
        },
    })
}

/// Of `tools` (the caller's usable ones), those a turn limited to `servers` offers the model,
/// and the rest.
pub(crate) fn offered(
    tools: Vec<CatalogTool>,
    servers: Option<&[ServerId]>,
) -> (Vec<CatalogTool>, Vec<CatalogTool>) {
    tools.into_iter().partition(|t| {
        servers.is_none_or(|only| only.contains(&t.server))
            && apps::visible_to(&t.upstream, apps::Caller::Model)
    })
}

/// Whether a turn of `ctx` limited to `servers` would offer the model any tool.
pub async fn offers_tools(
    gateway: &Gateway,
    ctx: &CallContext,
    servers: Option<&[ServerId]>,
) -> bool {
    let (offered, _) = offered(gateway.model_tools(ctx).await, servers);
    !offered.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{AccessConfig, LlmConfig, ModelsConfig, TenantAccess};

    fn model(name: &str, tools: bool) -> NamedModel {
        let mut llm = LlmConfig::new(
            url::Url::parse("http://127.0.0.1:9/v1").expect("url"),
            format!("{name}-id"),
        );
        llm.tools = tools;
        NamedModel {
            name: name.to_owned(),
            llm,
            max_running_turns: None,
            price: None,
        }
    }

    fn config(list: Vec<NamedModel>, default: Option<&str>, tools_model: Option<&str>) -> Config {
        Config {
            llm: list.first().map(|m| m.llm.clone()),
            models: ModelsConfig {
                list,
                default: default.map(str::to_owned),
                tools_model: tools_model.map(str::to_owned),
            },
            ..Config::default()
        }
    }

    fn chosen(choice: Result<ModelChoice, ModelError>) -> (String, Option<String>) {
        let choice = choice.expect("a model");
        (choice.model.name, choice.routed_from)
    }

    #[test]
    fn the_named_model_else_the_default() {
        let config = config(
            vec![model("small", true), model("big", true)],
            Some("big"),
            None,
        );
        assert_eq!(
            chosen(choose(&config, "t", None, true)),
            ("big".into(), None)
        );
        assert_eq!(
            chosen(choose(&config, "t", Some("small"), true)),
            ("small".into(), None)
        );
        assert_eq!(
            choose(&config, "t", Some("huge"), true),
            Err(ModelError::NotAvailable("huge".into()))
        );
        assert_eq!(
            choose(&Config::default(), "t", None, true),
            Err(ModelError::NoModel)
        );
    }

    #[test]
    fn a_turn_with_tools_on_a_model_without_goes_to_the_tools_model() {
        let list = vec![
            model("chat", false),
            model("first-tools", true),
            model("tools", true),
        ];
        let routed = config(list.clone(), None, Some("tools"));
        assert_eq!(
            chosen(choose(&routed, "t", None, true)),
            ("tools".into(), Some("chat".into()))
        );
        // Without tools to offer, the asked model answers.
        assert_eq!(
            chosen(choose(&routed, "t", None, false)),
            ("chat".into(), None)
        );
        // No tools_model: the first with tools.
        let first = config(list, None, None);
        assert_eq!(
            chosen(choose(&first, "t", Some("chat"), true)),
            ("first-tools".into(), Some("chat".into()))
        );
        // None with tools at all: the asked model, without tools.
        let none = config(vec![model("chat", false)], None, None);
        assert_eq!(
            chosen(choose(&none, "t", None, true)),
            ("chat".into(), None)
        );
    }

    #[test]
    fn a_tenant_uses_only_its_models_and_routing_stays_within_them() {
        let mut config = config(
            vec![
                model("chat", false),
                model("tools", true),
                model("other", true),
            ],
            Some("tools"),
            Some("tools"),
        );
        config.access = Some(AccessConfig {
            tenants: vec![TenantAccess {
                tenant: "acme".into(),
                servers: Vec::new(),
                models: Some(vec!["chat".into(), "other".into()]),
            }],
            ..AccessConfig::default()
        });
        // The default is not acme's: its first model is.
        assert_eq!(
            chosen(choose(&config, "acme", None, false)),
            ("chat".into(), None)
        );
        assert_eq!(
            choose(&config, "acme", Some("tools"), false),
            Err(ModelError::NotAvailable("tools".into()))
        );
        // Routed to a model acme may use, not to the configured tools_model.
        assert_eq!(
            chosen(choose(&config, "acme", None, true)),
            ("other".into(), Some("chat".into()))
        );
        // A tenant without a list uses every model.
        assert_eq!(available(&config, "globex").len(), 3);
    }
}
