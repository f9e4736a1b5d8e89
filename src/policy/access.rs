//! Access: which servers a tenant sees and which tools its users and roles may use (a tool a
//! caller may not use is invisible to them, exactly like one that does not exist), and who
//! administers what: a tenant's admin its own tenant, an operator the whole gateway.

use crate::config::{AccessConfig, Operator, ServerId};

use super::CallContext;

/// The role of a tenant's administrator (of the whole gateway in single-tenant mode).
pub const ADMIN_ROLE: &str = "admin";
/// A role that may read `/metrics` and nothing else admin-only, for a scraper's token.
pub const METRICS_ROLE: &str = "metrics";

/// What a caller administers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    /// Nothing.
    None,
    /// Its own tenant: that tenant's audit records, and the servers the tenant sees.
    Tenant,
    /// The whole gateway: reload, every server, every tenant's audit.
    Operator,
}

/// Access decisions over the configured tenants and grants.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `None`: single-tenant mode, everything is visible to every caller.
    config: Option<AccessConfig>,
}

impl Access {
    pub fn new(config: Option<AccessConfig>) -> Access {
        Access { config }
    }

    /// Whether `ctx` may see and call the tool `canonical` (`server.tool`) of `server`.
    /// Fails closed: an unknown tenant, a server outside the tenant's list, or no matching
    /// grant all hide the tool.
    pub fn allows(&self, ctx: &CallContext, server: &ServerId, canonical: &str) -> bool {
        let Some(config) = &self.config else {
            return true;
        };
        let tenant_sees_server = config
            .tenants
            .iter()
            .any(|t| t.tenant == ctx.tenant && t.servers.contains(server));
        tenant_sees_server
            && config.grants.iter().any(|grant| {
                grant.tenant == ctx.tenant
                    && applies_to(grant, ctx)
                    && grant.tools.iter().any(|p| matches(p, server, canonical))
            })
    }

    /// Whether `ctx` may see anything of `server` besides tools (resources, prompts): the
    /// tenant lists the server and some grant of the caller names `server.*` or one of its
    /// tools. Fails closed like [`Access::allows`].
    pub fn allows_server(&self, ctx: &CallContext, server: &ServerId) -> bool {
        let Some(config) = &self.config else {
            return true;
        };
        let tenant_sees_server = config
            .tenants
            .iter()
            .any(|t| t.tenant == ctx.tenant && t.servers.contains(server));
        tenant_sees_server
            && config.grants.iter().any(|grant| {
                grant.tenant == ctx.tenant
                    && applies_to(grant, ctx)
                    && grant.tools.iter().any(|p| names_server(p, server))
            })
    }

    /// What `ctx` administers. Without `[access]` the `admin` role operates the gateway (one
    /// tenant, nothing to keep apart). With it, the configured operators operate it, and the
    /// `admin` role administers only its own tenant, which must be a listed one: a tenant
    /// unknown to the configuration administers nothing.
    pub fn administers(&self, ctx: &CallContext) -> Admin {
        let Some(config) = &self.config else {
            return if ctx.has_role(ADMIN_ROLE) {
                Admin::Operator
            } else {
                Admin::None
            };
        };
        if config.operators.iter().any(|o| operates(o, ctx)) {
            Admin::Operator
        } else if ctx.has_role(ADMIN_ROLE) && config.tenants.iter().any(|t| t.tenant == ctx.tenant)
        {
            Admin::Tenant
        } else {
            Admin::None
        }
    }

    /// Whether `ctx` may read `/metrics`, whose labels name every tenant's servers and tools:
    /// an operator, or the `metrics` role. With `[access]` that role counts only in a tenant
    /// named by an operator entry, so a tenant cannot grant it to itself.
    pub fn reads_metrics(&self, ctx: &CallContext) -> bool {
        if self.administers(ctx) == Admin::Operator {
            return true;
        }
        ctx.has_role(METRICS_ROLE)
            && self
                .config
                .as_ref()
                .is_none_or(|config| config.operators.iter().any(|o| o.tenant == ctx.tenant))
    }

    /// Whether `ctx`'s tenant is one the configuration lists (any, in single-tenant mode).
    pub fn knows_tenant(&self, ctx: &CallContext) -> bool {
        self.config
            .as_ref()
            .is_none_or(|config| config.tenants.iter().any(|t| t.tenant == ctx.tenant))
    }

    /// Whether `server` is one `ctx`'s tenant sees (every server in single-tenant mode): the
    /// servers a tenant's admin administers.
    pub fn tenant_sees(&self, ctx: &CallContext, server: &ServerId) -> bool {
        let Some(config) = &self.config else {
            return true;
        };
        config
            .tenants
            .iter()
            .any(|t| t.tenant == ctx.tenant && t.servers.contains(server))
    }
}

/// The tenant is matched exactly, then the user or a role.
fn operates(operator: &Operator, ctx: &CallContext) -> bool {
    operator.tenant == ctx.tenant
        && (operator.users.contains(&ctx.user) || operator.roles.iter().any(|r| ctx.has_role(r)))
}

/// `server.*` or `server.tool`: the part before the first `.` is the server id.
fn names_server(pattern: &str, server: &ServerId) -> bool {
    pattern
        .split_once('.')
        .is_some_and(|(prefix, _)| prefix == server.as_str())
}

fn applies_to(grant: &crate::config::Grant, ctx: &CallContext) -> bool {
    (grant.users.is_empty() && grant.roles.is_empty())
        || grant.users.contains(&ctx.user)
        || grant.roles.iter().any(|r| ctx.has_role(r))
}

/// `server.*` matches every tool of `server`; anything else must equal the canonical id.
fn matches(pattern: &str, server: &ServerId, canonical: &str) -> bool {
    match pattern.strip_suffix(".*") {
        Some(prefix) => prefix == server.as_str(),
        None => pattern == canonical,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Grant, TenantAccess};

    fn id(s: &str) -> ServerId {
        ServerId::new(s).expect("valid id")
    }

    fn ctx(tenant: &str, user: &str, roles: &[&str]) -> CallContext {
        CallContext {
            tenant: tenant.into(),
            user: user.into(),
            session: "s".into(),
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            request_id: "r".into(),
        }
    }

    fn access() -> Access {
        Access::new(Some(AccessConfig {
            tenants: vec![
                TenantAccess {
                    tenant: "acme".into(),
                    servers: vec![id("github"), id("time")],
                    models: None,
                },
                TenantAccess {
                    tenant: "other".into(),
                    servers: vec![id("time")],
                    models: None,
                },
            ],
            grants: vec![
                Grant {
                    tenant: "acme".into(),
                    users: vec![],
                    roles: vec![],
                    tools: vec!["time.get_current_time".into()],
                },
                Grant {
                    tenant: "acme".into(),
                    users: vec!["alice".into()],
                    roles: vec!["dev".into()],
                    tools: vec!["github.*".into()],
                },
                // A grant for a server the tenant does not see grants nothing.
                Grant {
                    tenant: "other".into(),
                    users: vec![],
                    roles: vec![],
                    tools: vec!["github.*".into()],
                },
            ],
            operators: vec![],
        }))
    }

    #[test]
    fn a_tenants_admin_administers_its_tenant_and_operators_the_gateway() {
        let mut config = match access() {
            Access { config: Some(c) } => c,
            Access { config: None } => unreachable!("access() configures tenants"),
        };
        config.operators = vec![
            Operator {
                tenant: "ops".into(),
                users: vec![],
                roles: vec!["operator".into()],
            },
            Operator {
                tenant: "acme".into(),
                users: vec!["root".into()],
                roles: vec![],
            },
        ];
        let a = Access::new(Some(config));
        assert_eq!(
            a.administers(&ctx("acme", "ann", &["admin"])),
            Admin::Tenant
        );
        assert_eq!(a.administers(&ctx("acme", "ann", &[])), Admin::None);
        assert_eq!(a.administers(&ctx("acme", "root", &[])), Admin::Operator);
        assert_eq!(
            a.administers(&ctx("ops", "olga", &["operator"])),
            Admin::Operator
        );
        // The operator role opens nothing in another tenant, nor the user name elsewhere.
        assert_eq!(
            a.administers(&ctx("acme", "ann", &["operator"])),
            Admin::None
        );
        assert_eq!(
            a.administers(&ctx("other", "root", &["admin"])),
            Admin::Tenant
        );
        // A tenant the configuration does not list administers nothing.
        assert_eq!(
            a.administers(&ctx("nobody", "ann", &["admin"])),
            Admin::None
        );
        assert_eq!(a.administers(&ctx("ACME", "root", &["admin"])), Admin::None);

        assert!(a.reads_metrics(&ctx("ops", "olga", &["operator"])));
        assert!(a.reads_metrics(&ctx("ops", "scraper", &["metrics"])));
        assert!(!a.reads_metrics(&ctx("other", "scraper", &["metrics"])));
        assert!(!a.reads_metrics(&ctx("other", "ann", &["admin"])));

        assert!(a.tenant_sees(&ctx("other", "u", &[]), &id("time")));
        assert!(!a.tenant_sees(&ctx("other", "u", &[]), &id("github")));
        assert!(!a.tenant_sees(&ctx("ops", "olga", &["operator"]), &id("time")));
    }

    #[test]
    fn without_access_the_admin_role_operates_the_gateway() {
        let a = Access::new(None);
        assert_eq!(a.administers(&ctx("x", "y", &["admin"])), Admin::Operator);
        assert_eq!(a.administers(&ctx("x", "y", &["metrics"])), Admin::None);
        assert!(a.reads_metrics(&ctx("x", "y", &["metrics"])));
        assert!(a.reads_metrics(&ctx("x", "y", &["admin"])));
        assert!(!a.reads_metrics(&ctx("x", "y", &[])));
        assert!(a.tenant_sees(&ctx("x", "y", &[]), &id("any")));
    }

    #[test]
    fn single_tenant_mode_allows_everything() {
        assert!(Access::new(None).allows(&ctx("x", "y", &[]), &id("any"), "any.tool"));
    }

    #[test]
    fn grants_by_user_role_and_everyone() {
        let a = access();
        let (github, time) = (id("github"), id("time"));
        assert!(a.allows(&ctx("acme", "bob", &[]), &time, "time.get_current_time"));
        assert!(!a.allows(&ctx("acme", "bob", &[]), &time, "time.convert_time"));
        assert!(!a.allows(&ctx("acme", "bob", &[]), &github, "github.create_issue"));
        assert!(a.allows(&ctx("acme", "alice", &[]), &github, "github.create_issue"));
        assert!(a.allows(&ctx("acme", "carol", &["dev"]), &github, "github.search"));
        // `github.*` does not match a server whose id merely starts with `github`.
        assert!(!a.allows(
            &ctx("acme", "alice", &[]),
            &id("github-two"),
            "github-two.x"
        ));
    }

    #[test]
    fn a_server_is_visible_with_a_grant_naming_it() {
        let a = access();
        let (github, time) = (id("github"), id("time"));
        assert!(Access::new(None).allows_server(&ctx("x", "y", &[]), &github));
        // One granted tool of `time` is enough; `github.*` only for alice and devs.
        assert!(a.allows_server(&ctx("acme", "bob", &[]), &time));
        assert!(!a.allows_server(&ctx("acme", "bob", &[]), &github));
        assert!(a.allows_server(&ctx("acme", "alice", &[]), &github));
        assert!(!a.allows_server(&ctx("acme", "alice", &[]), &id("github-two")));
        // A grant for a server the tenant does not list shows nothing of it.
        assert!(!a.allows_server(&ctx("other", "u", &[]), &github));
        assert!(!a.allows_server(&ctx("nobody", "alice", &["dev"]), &time));
    }

    #[test]
    fn unknown_tenants_and_unlisted_servers_see_nothing() {
        let a = access();
        assert!(!a.allows(
            &ctx("nobody", "alice", &["dev"]),
            &id("time"),
            "time.get_current_time"
        ));
        assert!(!a.allows(&ctx("other", "u", &[]), &id("github"), "github.search"));
        // Tenants are matched exactly, not by prefix or case.
        assert!(!a.allows(&ctx("ACME", "alice", &[]), &id("github"), "github.search"));
    }
}
