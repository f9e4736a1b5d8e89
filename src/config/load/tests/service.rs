//! Tests of `mcpgate serve`'s settings as loaded: the documented `[server]`, the embedded
//! default with the `MCPGATE_*` environment, and `[server]` problems among the others.

use crate::config::{AuthConfig, JwtAlgorithm, JwtConfig, SecretTemplate, ServiceConfig};

use super::*;

const KEY: &str = "0123456789abcdef0123456789abcdef";

fn jwt(loaded: &Loaded) -> &JwtConfig {
    match &loaded.config.service.auth {
        AuthConfig::Jwt(jwt) => jwt,
        other => panic!("expected jwt, got {other:?}"),
    }
}

#[test]
fn the_documented_example_sets_up_the_service_with_jwt() {
    let dir = TempDir::new().expect("temp dir");
    std::fs::write(dir.path().join("mcpgate.toml"), documented_example()).expect("write");
    let loaded = load(None, dir.path(), &env(EXAMPLE_ENV), Path::new(EXE)).expect("loads");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let jwt_config = JwtConfig {
        algorithms: vec![JwtAlgorithm::Hs256, JwtAlgorithm::Rs256],
        secret: Some(SecretTemplate::new("${MCPGATE_JWT_SECRET}")),
        public_keys: vec![dir.path().join("keys/issuer.pem")],
        jwks_url: Some(
            url::Url::parse("https://issuer.example.com/.well-known/jwks.json").expect("url"),
        ),
        issuer: "https://issuer.example.com/".to_owned(),
        audience: "mcpgate".to_owned(),
        tenant_claim: "tenant".to_owned(),
        user_claim: "sub".to_owned(),
        roles_claim: "roles".to_owned(),
        default_tenant: None,
        leeway: Duration::from_secs(30),
        protected: None,
    };
    let want = ServiceConfig {
        auth: AuthConfig::Jwt(Box::new(jwt_config)),
        ..ServiceConfig::default()
    };
    assert_eq!(loaded.config.service, want);
}

#[test]
fn the_embedded_default_serves_dev_on_loopback_unless_the_environment_says_otherwise() {
    let loaded = load_env(&Env::default()).expect("loads");
    assert_eq!(loaded.config.service, ServiceConfig::default());

    let loaded = load_env(&env(&[
        ("MCPGATE_LISTEN", "0.0.0.0:9443"),
        ("MCPGATE_JWT_SECRET", KEY),
        ("MCPGATE_JWT_ISSUER", "https://issuer.example.com/"),
        ("MCPGATE_JWT_AUDIENCE", "mcpgate"),
    ]))
    .expect("loads");
    assert_eq!(loaded.source, ConfigSource::Embedded);
    assert_eq!(ids(&loaded), ["demo"]);
    let service = &loaded.config.service;
    assert_eq!(service.listen, "0.0.0.0:9443".parse().expect("address"));
    let jwt = jwt(&loaded);
    assert_eq!(
        jwt.secret.as_ref().map(SecretTemplate::as_written),
        Some("${MCPGATE_JWT_SECRET}")
    );
    assert_eq!(
        (jwt.issuer.as_str(), jwt.audience.as_str()),
        ("https://issuer.example.com/", "mcpgate")
    );
    assert!(
        !format!("{loaded:?}").contains(KEY),
        "the key is never copied"
    );
    assert_eq!(
        loaded.warnings,
        [
            "server.allowed_hosts: is empty, so only loopback Host names are accepted, but \
          listen is not a loopback address: list the names clients use to reach the gateway"
        ]
    );

    let err = load_env(&env(&[("MCPGATE_LISTEN", "0.0.0.0:8080")])).expect_err("dev in public");
    assert_eq!(paths(&err), ["MCPGATE_LISTEN"]);
    let err = load_env(&env(&[("MCPGATE_JWT_SECRET", KEY)])).expect_err("no issuer");
    assert_eq!(paths(&err), ["server.auth.issuer", "server.auth.audience"]);
}

#[test]
fn the_environment_wins_over_the_file() {
    let text = r#"
        [server]
        listen = "127.0.0.1:7000"
        [server.auth]
        mode = "jwt"
        secret = "${GATE_KEY}"
        issuer = "file-issuer"
        audience = "file-audience"
    "#;
    let loaded = load_file("c.toml", text, &env(&[("GATE_KEY", KEY)])).expect("loads");
    assert_eq!(loaded.config.service.listen.port(), 7000);
    assert_eq!(jwt(&loaded).issuer, "file-issuer");

    let environment = env(&[
        ("GATE_KEY", KEY),
        ("MCPGATE_LISTEN", "127.0.0.1:7001"),
        ("MCPGATE_JWT_ISSUER", "env-issuer"),
        ("MCPGATE_JWT_AUDIENCE", "env-audience"),
        (
            "MCPGATE_JWT_SECRET",
            "ignored-because-secret-is-written-0123",
        ),
    ]);
    let loaded = load_file("c.toml", text, &environment).expect("loads");
    assert_eq!(loaded.config.service.listen.port(), 7001);
    let jwt = jwt(&loaded);
    assert_eq!(
        (jwt.issuer.as_str(), jwt.audience.as_str()),
        ("env-issuer", "env-audience")
    );
    assert_eq!(
        jwt.secret.as_ref().map(SecretTemplate::as_written),
        Some("${GATE_KEY}")
    );
}

#[test]
fn public_keys_are_relative_to_the_config_folder() {
    let dir = TempDir::new().expect("temp dir");
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let text = "[server.auth]\nmode = \"jwt\"\nalgorithms = [\"ES256\"]\n\
                public_keys = [\"keys/a.pem\"]\nissuer = \"i\"\naudience = \"a\"\n";
    std::fs::write(dir.path().join("sub/gate.toml"), text).expect("write");
    let loaded = load(
        Some(Path::new("sub/gate.toml")),
        dir.path(),
        &Env::default(),
        Path::new(EXE),
    )
    .expect("loads");
    assert_eq!(
        jwt(&loaded).public_keys,
        [dir.path().join("sub/keys/a.pem")]
    );
}

#[test]
fn server_problems_are_reported_with_every_other_problem() {
    let text = r#"
        [limits]
        call_timeout = "2h"
        [server]
        listen = "0.0.0.0:80"
        max_body_bytes = 1
        production = true
        [server.auth]
        mode = "none"
        [servers.a]
        command = "x"
        url = "https://example.com"
    "#;
    let err = load_file("c.toml", text, &Env::default()).expect_err("invalid");
    assert_eq!(
        paths(&err),
        [
            "limits.call_timeout",
            "servers.a",
            "server.auth.mode",
            "server.listen",
            "server.max_body_bytes",
        ]
    );
}

#[test]
fn a_misplaced_server_table_or_unknown_mode_is_a_file_error() {
    let err = load_file(
        "c.toml",
        "[server.time]\ncommand = \"t\"\n",
        &Env::default(),
    )
    .expect_err("servers, not server");
    assert!(
        err.problems[0].message.contains("unknown field `time`"),
        "{err}"
    );
    let err = load_file(
        "c.toml",
        "[server.auth]\nmode = \"basic\"\n",
        &Env::default(),
    )
    .expect_err("unknown mode");
    assert!(
        err.problems[0].message.contains("unknown variant `basic`"),
        "{err}"
    );
}

/// A JWT `[server]` with `public_url` and `extra` in `[server.auth]`, keys from a loopback JWKS.
fn protected_toml(public_url: &str, extra: &str, production: bool) -> String {
    format!(
        "[server]\npublic_url = \"{public_url}\"\nproduction = {production}\n\
         [server.auth]\nmode = \"jwt\"\nalgorithms = [\"RS256\"]\n\
         jwks_url = \"http://127.0.0.1:9000/jwks\"\nissuer = \"http://127.0.0.1:9000\"\n{extra}"
    )
}

#[test]
fn a_public_url_makes_mcp_a_protected_resource_of_the_issuer() {
    let loaded = load_file(
        "c.toml",
        &protected_toml("http://127.0.0.1:8080/", "scopes = [\"mcp\"]", false),
        &Env::default(),
    )
    .expect("loads");
    let service = &loaded.config.service;
    assert_eq!(
        service.public_url.as_ref().map(url::Url::as_str),
        Some("http://127.0.0.1:8080/")
    );
    let config = jwt(&loaded);
    let protected = config.protected.as_ref().expect("a protected resource");
    assert_eq!(protected.resource.as_str(), "http://127.0.0.1:8080/mcp");
    // The issuer exactly as written: clients compare it with the server's own.
    assert_eq!(protected.authorization_servers, ["http://127.0.0.1:9000"]);
    assert_eq!(protected.scopes, ["mcp"]);
    // The audience, not written, is the resource.
    assert_eq!(config.audience, "http://127.0.0.1:8080/mcp");
    assert_eq!(
        loaded.warnings,
        [
            "server.auth.jwks_url: uses plain http to a loopback address: accepted outside \
          production only"
        ]
    );

    let written = load_file(
        "c.toml",
        &protected_toml(
            "https://gw.example.com",
            "audience = \"mcpgate\"\nauthorization_servers = [\"https://idp.example.com/\"]",
            false,
        ),
        &Env::default(),
    )
    .expect("loads");
    let config = jwt(&written);
    let protected = config.protected.as_ref().expect("a protected resource");
    assert_eq!(protected.resource.as_str(), "https://gw.example.com/mcp");
    assert_eq!(
        protected.authorization_servers,
        ["https://idp.example.com/"]
    );
    assert_eq!(config.audience, "mcpgate");
}

#[test]
fn protected_resource_settings_are_checked() {
    let cases = [
        (
            protected_toml("http://gw.example.com", "", false),
            "server.public_url: must use https: plain http is accepted for loopback hosts only",
        ),
        (
            protected_toml("https://gw.example.com/tools", "", false),
            "server.public_url: must be an origin only",
        ),
        (
            protected_toml("https://user@gw.example.com", "", false),
            "server.public_url: must be an origin only",
        ),
        (
            protected_toml("http://127.0.0.1:8080", "", true),
            "server.public_url: must use https: production = true refuses plain http",
        ),
        (
            protected_toml("https://gw.example.com", "", true),
            "server.auth.jwks_url: must use https (http only to a loopback address, outside \
             production)",
        ),
        (
            protected_toml("https://gw.example.com", "scopes = [\"a b\"]", false),
            "server.auth.scopes[0]: must be an OAuth scope",
        ),
        (
            protected_toml("https://gw.example.com", "scopes = [\"a\", \"a\"]", false),
            "server.auth.scopes[1]: is listed twice",
        ),
        (
            protected_toml(
                "https://gw.example.com",
                "authorization_servers = [\"http://idp.example.com\"]",
                false,
            ),
            "server.auth.authorization_servers[0]: must use https",
        ),
        (
            protected_toml(
                "https://gw.example.com",
                "authorization_servers = []",
                false,
            ),
            "server.auth.authorization_servers: must name at least one issuer URL",
        ),
        (
            "[server.auth]\nmode = \"jwt\"\nissuer = \"i\"\naudience = \"a\"\n\
             secret = \"${K}\"\nscopes = [\"mcp\"]\n"
                .to_owned(),
            "server.auth.scopes: needs server.public_url",
        ),
        (
            "[server]\npublic_url = \"https://gw.example.com\"\n[server.auth]\nmode = \
             \"jwt\"\nissuer = \"not-a-url\"\nsecret = \"${K}\"\n"
                .to_owned(),
            "server.auth.authorization_servers: is needed: the issuer is not an https URL",
        ),
        (
            "[server.auth]\nmode = \"dev\"\nscopes = [\"mcp\"]\n".to_owned(),
            "server.auth.scopes: is only used with mode = \"jwt\"",
        ),
    ];
    for (text, expected) in cases {
        let found = problems(&text);
        assert!(
            found.iter().any(|p| p.starts_with(expected)),
            "{expected}\nin {found:?}\nof {text}"
        );
    }
}
