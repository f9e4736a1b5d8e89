//! Rules for `[access]`: tenant, user and role names, the servers each tenant sees, and
//! grants that stay within their tenant's servers.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    AccessConfig, Grant, Operator, ServerId, TenantAccess,
    raw::{RawAccess, RawGrant, RawOperator},
    validate::{Known, Report, join},
};

/// Tenant, user and role names come from tokens and land in every log line and audit record:
/// 128 characters hold any real name (an email address, a UUID, a group path) while keeping a
/// bloated one out of every record.
const MAX_NAME_CHARS: usize = 128;

/// Which servers a tenant sees, for checking its grants.
enum Sees {
    All,
    Only(BTreeSet<ServerId>),
}

/// The validated `[access]`; `*` in a tenant's servers becomes every enabled server, so the
/// policy compares ids only.
pub(super) fn validate(raw: &RawAccess, known: &Known<'_>, report: &mut Report) -> AccessConfig {
    if raw.tenants.is_empty() {
        report.warn(
            "access",
            "lists no tenants: every caller is denied every tool (remove [access] for \
             single-tenant mode)",
        );
    }
    let mut tenants = Vec::new();
    // Every listed tenant; `None` for one whose name or servers are broken (already reported).
    let mut listed: BTreeMap<&str, Option<Sees>> = BTreeMap::new();
    for (name, tenant) in &raw.tenants {
        let at = join("access.tenants", name);
        let name_ok = check_name(name, &at, report);
        let Some(servers) = &tenant.servers else {
            report.problem(
                format!("{at}.servers"),
                "is required: the ids of the servers this tenant sees, or [\"*\"] for all",
            );
            listed.insert(name, None);
            continue;
        };
        let sees = tenant_servers(servers, &format!("{at}.servers"), known, report);
        if name_ok {
            let ids = match &sees {
                Sees::All => known.servers.iter().map(|s| s.id.clone()).collect(),
                Sees::Only(ids) => ids.iter().cloned().collect(),
            };
            tenants.push(TenantAccess {
                tenant: name.clone(),
                servers: ids,
                models: tenant.models.clone(),
            });
        }
        listed.insert(name, name_ok.then_some(sees));
    }
    let grants = raw
        .grants
        .iter()
        .enumerate()
        .filter_map(|(i, grant)| {
            validate_grant(
                grant,
                &format!("access.grants[{i}]"),
                &listed,
                known,
                report,
            )
        })
        .collect();
    let operators = raw
        .operators
        .iter()
        .enumerate()
        .filter_map(|(i, raw)| validate_operator(raw, &format!("access.operators[{i}]"), report))
        .collect();
    AccessConfig {
        tenants,
        grants,
        operators,
    }
}

/// An operator entry: a tenant (listed under `tenants` or not: an operators' tenant need see
/// no server) and the users or roles in it; one with neither would make a whole tenant
/// operators by omission, so it is refused.
fn validate_operator(raw: &RawOperator, at: &str, report: &mut Report) -> Option<Operator> {
    let before = report.problem_count();
    match &raw.tenant {
        None => report.problem(at, "needs `tenant`"),
        Some(tenant) => {
            check_name(tenant, &format!("{at}.tenant"), report);
        }
    }
    let users = names(&raw.users, at, "users", report);
    let roles = names(&raw.roles, at, "roles", report);
    if users.is_empty() && roles.is_empty() {
        report.problem(
            at,
            "names no `users` or `roles`: say which callers of the tenant operate the gateway",
        );
    }
    let tenant = raw.tenant.clone()?;
    (report.problem_count() == before).then_some(Operator {
        tenant,
        users,
        roles,
    })
}

/// The names of a grant's or operator's `field`, each checked.
fn names(items: &Option<Vec<String>>, at: &str, field: &str, report: &mut Report) -> Vec<String> {
    let items = items.as_deref().unwrap_or_default();
    for (i, item) in items.iter().enumerate() {
        check_name(item, &format!("{at}.{field}[{i}]"), report);
    }
    items.to_vec()
}

/// A tenant's `servers`: configured ids (enabled or not), or `*` alone.
fn tenant_servers(items: &[String], at: &str, known: &Known<'_>, report: &mut Report) -> Sees {
    if items.iter().any(|s| s == "*") {
        if items.len() > 1 {
            report.problem(at, "`*` already names every server: give it alone");
        }
        return Sees::All;
    }
    let mut ids = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        match configured(item, known) {
            Some(id) => {
                ids.insert(id);
            }
            None => report.problem(
                format!("{at}[{i}]"),
                format!("`{}` is not a configured server", item.escape_debug()),
            ),
        }
    }
    Sees::Only(ids)
}

fn validate_grant(
    raw: &RawGrant,
    at: &str,
    listed: &BTreeMap<&str, Option<Sees>>,
    known: &Known<'_>,
    report: &mut Report,
) -> Option<Grant> {
    let before = report.problem_count();
    let tenant = match &raw.tenant {
        None => {
            report.problem(at, "needs `tenant`");
            None
        }
        Some(name) => match listed.get(name.as_str()) {
            Some(sees) => sees.as_ref().map(|sees| (name, sees)),
            None => {
                report.problem(
                    format!("{at}.tenant"),
                    format!(
                        "`{}` is not a tenant listed under access.tenants",
                        name.escape_debug()
                    ),
                );
                None
            }
        },
    };
    let users = names(&raw.users, at, "users", report);
    let roles = names(&raw.roles, at, "roles", report);
    let Some(tools) = &raw.tools else {
        report.problem(at, "needs `tools`: `server.*` or `server.tool` patterns");
        return None;
    };
    if tools.is_empty() {
        report.warn(&format!("{at}.tools"), "is empty: this grant gives nothing");
    }
    for (i, pattern) in tools.iter().enumerate() {
        let sees = tenant.map(|(_, sees)| sees);
        check_pattern(pattern, &format!("{at}.tools[{i}]"), sees, known, report);
    }
    let (tenant, _) = tenant?;
    (report.problem_count() == before).then(|| Grant {
        tenant: tenant.clone(),
        users,
        roles,
        tools: tools.clone(),
    })
}

/// `server.*` or `server.tool`, the server configured and (when the tenant is known) one of
/// the tenant's.
fn check_pattern(
    pattern: &str,
    at: &str,
    sees: Option<&Sees>,
    known: &Known<'_>,
    report: &mut Report,
) {
    // The tool part is the upstream name as-is (`*` for all): only its presence is checked.
    let Some((server, _)) = pattern.split_once('.').filter(|(_, tool)| !tool.is_empty()) else {
        report.problem(at, "must be `server.*` or `server.tool`");
        return;
    };
    let Some(id) = configured(server, known) else {
        report.problem(
            at,
            format!("`{}` is not a configured server", server.escape_debug()),
        );
        return;
    };
    if let Some(Sees::Only(ids)) = sees
        && !ids.contains(&id)
    {
        report.problem(
            at,
            format!("server `{server}` is not one of this grant's tenant's servers"),
        );
    }
}

/// `text` as a configured server id, enabled or not.
fn configured(text: &str, known: &Known<'_>) -> Option<ServerId> {
    ServerId::new(text).filter(|id| known.defined.contains_key(id))
}

/// Checks a tenant, user or role name; the message never quotes it, since a control
/// character could forge a log line.
fn check_name(name: &str, at: &str, report: &mut Report) -> bool {
    let message = if name.is_empty() {
        "must not be empty".to_owned()
    } else if name.chars().count() > MAX_NAME_CHARS {
        format!("is longer than {MAX_NAME_CHARS} characters")
    } else if name.chars().any(char::is_control) {
        "holds a control character".to_owned()
    } else if name.trim() != name {
        "starts or ends with whitespace".to_owned()
    } else {
        return true;
    };
    report.problem(at, message);
    false
}
