//! Tests of `[access]`: tenants, grants, and the names and servers they may use.

use super::*;

/// Three servers: two enabled, one disabled.
const SERVERS: &str = r#"
    [servers.github]
    command = "g"
    [servers.time]
    command = "t"
    [servers.off]
    command = "o"
    enabled = false
"#;

fn with_servers(access: &str) -> String {
    format!("{SERVERS}\n{access}")
}

fn problems(access: &str) -> Vec<String> {
    let err = load_file("c.toml", &with_servers(access), &Env::default()).expect_err("invalid");
    err.problems
        .iter()
        .map(|p| format!("{}: {}", p.path, p.message))
        .collect()
}

fn access(access: &str) -> (AccessConfig, Vec<String>) {
    let loaded = load_file("c.toml", &with_servers(access), &Env::default()).expect("loads");
    let config = loaded.config.access.expect("access section present");
    (config, loaded.warnings)
}

fn id(s: &str) -> ServerId {
    ServerId::new(s).expect("valid id")
}

#[test]
fn without_an_access_section_the_gateway_is_single_tenant() {
    let loaded = load_file("c.toml", SERVERS, &Env::default()).expect("loads");
    assert_eq!(loaded.config.access, None);
}

#[test]
fn an_empty_access_section_denies_everyone_and_says_so() {
    let (config, warnings) = access("[access]\n");
    assert_eq!(config, AccessConfig::default());
    assert_eq!(warnings.len(), 1);
    assert!(
        warnings[0].starts_with("access: lists no tenants"),
        "{warnings:?}"
    );
}

#[test]
fn tenants_are_sorted_and_star_means_every_enabled_server() {
    let (config, warnings) = access(
        r#"
        [access.tenants.zeta]
        servers = ["*"]
        [access.tenants.acme]
        servers = ["time", "github", "off", "time"]
        [access.tenants.empty]
        servers = []
        [[access.grants]]
        tenant = "acme"
        tools = ["github.*", "off.x"]
        [[access.grants]]
        tenant = "zeta"
        roles = ["ops"]
        tools = ["off.*", "time.get_current_time", "github.a.b"]
    "#,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    let tenants: Vec<(&str, &[ServerId])> = config
        .tenants
        .iter()
        .map(|t| (t.tenant.as_str(), t.servers.as_slice()))
        .collect();
    assert_eq!(
        tenants,
        [
            ("acme", &[id("github"), id("off"), id("time")][..]),
            ("empty", &[][..]),
            ("zeta", &[id("github"), id("time")][..]),
        ]
    );
    assert_eq!(config.grants.len(), 2);
    assert_eq!(
        config.grants[0],
        Grant {
            tenant: "acme".to_owned(),
            users: vec![],
            roles: vec![],
            tools: vec!["github.*".to_owned(), "off.x".to_owned()],
        }
    );
    assert_eq!(config.grants[1].roles, ["ops"]);
    assert_eq!(config.grants[1].tools[2], "github.a.b");
}

#[test]
fn grants_must_name_listed_tenants_and_their_servers() {
    let got = problems(
        r#"
        [access.tenants.acme]
        servers = ["time"]
        [[access.grants]]
        tenant = "globex"
        tools = ["time.*"]
        [[access.grants]]
        tenant = "acme"
        tools = ["time.now", "nope.*", "github.search", "time", "time.", "Time.now"]
    "#,
    );
    assert_eq!(
        got,
        [
            "access.grants[0].tenant: `globex` is not a tenant listed under access.tenants",
            "access.grants[1].tools[1]: `nope` is not a configured server",
            "access.grants[1].tools[2]: server `github` is not one of this grant's tenant's \
             servers",
            "access.grants[1].tools[3]: must be `server.*` or `server.tool`",
            "access.grants[1].tools[4]: must be `server.*` or `server.tool`",
            "access.grants[1].tools[5]: `Time` is not a configured server",
        ]
    );
}

#[test]
fn tenants_must_name_configured_servers() {
    let got = problems(
        r#"
        [access.tenants.acme]
        servers = ["time", "nope", "GitHub"]
        [access.tenants.all]
        servers = ["*", "time"]
        [access.tenants.bare]
    "#,
    );
    assert_eq!(
        got,
        [
            "access.tenants.acme.servers[1]: `nope` is not a configured server",
            "access.tenants.acme.servers[2]: `GitHub` is not a configured server",
            "access.tenants.all.servers: `*` already names every server: give it alone",
            "access.tenants.bare.servers: is required: the ids of the servers this tenant \
             sees, or [\"*\"] for all",
        ]
    );
}

#[test]
fn grants_need_a_tenant_and_tools_and_warn_when_empty() {
    let got = problems(
        r#"
        [access.tenants.acme]
        servers = ["time"]
        [[access.grants]]
        tools = ["time.*"]
        [[access.grants]]
        tenant = "acme"
        users = ["alice"]
    "#,
    );
    assert_eq!(
        got,
        [
            "access.grants[0]: needs `tenant`",
            "access.grants[1]: needs `tools`: `server.*` or `server.tool` patterns",
        ]
    );

    let (config, warnings) = access(
        "[access.tenants.acme]\nservers = []\n[[access.grants]]\ntenant = \"acme\"\ntools = []\n",
    );
    assert_eq!(config.grants.len(), 1);
    assert_eq!(
        warnings,
        ["access.grants[0].tools: is empty: this grant gives nothing"]
    );

    let got = problems("[[access.grants]]\ntenant = \"acme\"\ntools = []\nteam = \"x\"\n");
    assert!(got[0].contains("unknown field `team`"), "{got:?}");
}

#[test]
fn tenant_user_and_role_names_are_bounded_and_printable() {
    let longest = "n".repeat(128);
    let (config, _) = access(&format!(
        "[access.tenants.{longest}]\nservers = []\n[[access.grants]]\ntenant = \"{longest}\"\n\
         users = [\"{longest}\", \"alice@example.com\"]\nroles = [\"dept/dev ops\"]\ntools = []\n"
    ));
    assert_eq!(config.tenants[0].tenant, longest);
    assert_eq!(config.grants[0].users[0], longest);

    let too_long = "n".repeat(129);
    let got = problems(&format!(
        r#"
        [access.tenants."{too_long}"]
        servers = []
        [access.tenants." acme"]
        servers = []
        [access.tenants.""]
        servers = []
        [access.tenants.ok]
        servers = []
        [[access.grants]]
        tenant = "ok"
        users = ["", "ali\u0007ce", "bob "]
        roles = ["{too_long}", "dev\n"]
        tools = []
    "#
    ));
    assert_eq!(
        got,
        [
            "access.tenants.\"\": must not be empty",
            "access.tenants.\" acme\": starts or ends with whitespace",
            format!("access.tenants.{too_long}: is longer than 128 characters").as_str(),
            "access.grants[0].users[0]: must not be empty",
            "access.grants[0].users[1]: holds a control character",
            "access.grants[0].users[2]: starts or ends with whitespace",
            "access.grants[0].roles[0]: is longer than 128 characters",
            "access.grants[0].roles[1]: holds a control character",
        ]
    );
}

#[test]
fn a_control_character_in_a_tenant_key_is_escaped_in_the_path() {
    let got = problems("[access.tenants.\"a\\u001b[31mb\"]\nservers = []\n");
    assert_eq!(
        got,
        ["access.tenants.\"a\\u{1b}[31mb\": holds a control character"]
    );
}

#[test]
fn access_may_name_servers_added_by_the_environment() {
    let json = r#"{"clock": {"command": "c"}}"#;
    let env = env(&[(external_env::SERVERS_JSON, json)]);
    let text = "[access.tenants.acme]\nservers = [\"clock\"]\n[[access.grants]]\n\
                tenant = \"acme\"\ntools = [\"clock.*\"]\n";
    let loaded = load_file("c.toml", text, &env).expect("loads");
    let access = loaded.config.access.expect("access present");
    assert_eq!(access.tenants[0].servers, [id("clock")]);
    assert_eq!(access.grants[0].tools, ["clock.*"]);
}

#[test]
fn operators_name_a_tenant_and_its_users_or_roles() {
    // The operators' tenant need not be listed under `tenants`: it may see no server.
    let (config, warnings) = access(
        r#"
        [access.tenants.acme]
        servers = ["time"]
        [[access.operators]]
        tenant = "ops"
        roles = ["operator"]
        [[access.operators]]
        tenant = "acme"
        users = ["root@acme.example"]
    "#,
    );
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(
        config.operators,
        [
            Operator {
                tenant: "ops".to_owned(),
                users: vec![],
                roles: vec!["operator".to_owned()],
            },
            Operator {
                tenant: "acme".to_owned(),
                users: vec!["root@acme.example".to_owned()],
                roles: vec![],
            },
        ]
    );

    let got = problems(
        r#"
        [access.tenants.acme]
        servers = ["time"]
        [[access.operators]]
        roles = ["operator"]
        [[access.operators]]
        tenant = "ops"
        [[access.operators]]
        tenant = ""
        users = ["bob\n"]
    "#,
    );
    assert_eq!(
        got,
        [
            "access.operators[0]: needs `tenant`",
            "access.operators[1]: names no `users` or `roles`: say which callers of the \
             tenant operate the gateway",
            "access.operators[2].tenant: must not be empty",
            "access.operators[2].users[0]: holds a control character",
        ]
    );
    let got = problems("[[access.operators]]\ntenant = \"ops\"\nroles = [\"op\"]\nrole = \"x\"\n");
    assert!(got[0].contains("unknown field `role`"), "{got:?}");
}
