//! Tests of `[server.auth]` and the `MCPGATE_JWT_*` variables, fed from TOML as written.

use std::path::PathBuf;

use super::*;
use crate::config::raw::RawFile;

/// A strong HS256 key (32 bytes) and a weak one.
const STRONG: &str = "0123456789abcdef0123456789abcdef";
const WEAK: &str = "short-key";
/// The required fields of JWT mode, for sections that test something else.
const IDENTITY: &str = "issuer = \"https://issuer.example.com/\"\naudience = \"mcpgate\"\n";

struct Checked {
    auth: AuthConfig,
    problems: Vec<String>,
    warnings: Vec<String>,
}

/// Validates the auth of `text` (a whole file, `[server] production` included).
fn check(text: &str, env: &[(&str, &str)]) -> Checked {
    let file: RawFile = toml::from_str(text).expect("test TOML parses");
    let env = Env::from_pairs(env.iter().copied());
    let mut report = Report::default();
    let production = file.server.production.unwrap_or(false);
    let auth = validate(
        file.server.auth.as_ref(),
        (production, file.access.is_none()),
        (&env, None),
        Path::new("/etc/mcpgate"),
        &mut report,
    );
    let warnings = report.warnings().to_vec();
    let problems = match report.finish() {
        Ok(_) => Vec::new(),
        Err(e) => e
            .problems
            .iter()
            .map(|p| format!("{}: {}", p.path, p.message))
            .collect(),
    };
    Checked {
        auth,
        problems,
        warnings,
    }
}

/// `[server.auth]` with `mode = "jwt"`, `body` and the identity fields.
fn jwt_section(body: &str) -> String {
    format!("[server.auth]\nmode = \"jwt\"\n{IDENTITY}{body}\n")
}

fn jwt_of(checked: &Checked) -> &JwtConfig {
    assert_eq!(checked.problems, Vec::<String>::new());
    match &checked.auth {
        AuthConfig::Jwt(jwt) => jwt,
        other => panic!("expected jwt, got {other:?}"),
    }
}

fn problems(text: &str) -> Vec<String> {
    check(text, &[("K", STRONG)]).problems
}

#[test]
fn a_full_jwt_section_is_read() {
    let text = r#"
        [server.auth]
        mode = "jwt"
        algorithms = ["HS256", "RS256", "ES256"]
        secret = "${JWT_KEY}"
        public_keys = ["keys/issuer.pem", "/abs/other.pem"]
        jwks_url = "https://issuer.example.com/.well-known/jwks.json"
        issuer = "https://issuer.example.com/"
        audience = "mcpgate"
        tenant_claim = "org"
        user_claim = "email"
        roles_claim = "groups"
        leeway = "10s"
    "#;
    let checked = check(text, &[("JWT_KEY", STRONG)]);
    assert_eq!(checked.warnings, Vec::<String>::new());
    let want = JwtConfig {
        algorithms: vec![
            JwtAlgorithm::Hs256,
            JwtAlgorithm::Rs256,
            JwtAlgorithm::Es256,
        ],
        secret: Some(SecretTemplate::new("${JWT_KEY}")),
        public_keys: vec![
            PathBuf::from("/etc/mcpgate/keys/issuer.pem"),
            PathBuf::from("/abs/other.pem"),
        ],
        jwks_url: Some(
            Url::parse("https://issuer.example.com/.well-known/jwks.json").expect("url"),
        ),
        issuer: "https://issuer.example.com/".to_owned(),
        audience: "mcpgate".to_owned(),
        tenant_claim: "org".to_owned(),
        user_claim: "email".to_owned(),
        roles_claim: "groups".to_owned(),
        // No [access]: a token without `org` is of the default tenant.
        default_tenant: Some("default".to_owned()),
        leeway: Duration::from_secs(10),
        protected: None,
    };
    assert_eq!(jwt_of(&checked), &want);
}

#[test]
fn jwt_mode_defaults_to_hs256_standard_claims_and_30s_leeway() {
    let checked = check(&jwt_section("secret = \"${K}\""), &[("K", STRONG)]);
    let jwt = jwt_of(&checked);
    assert_eq!(jwt.algorithms, [JwtAlgorithm::Hs256]);
    assert_eq!(
        (
            jwt.tenant_claim.as_str(),
            jwt.user_claim.as_str(),
            jwt.roles_claim.as_str()
        ),
        ("tenant", "sub", "roles")
    );
    assert_eq!(jwt.leeway, Duration::from_secs(30));
    assert!(jwt.public_keys.is_empty() && jwt.jwks_url.is_none());
}

#[test]
fn modes_dev_and_none_are_read() {
    assert_eq!(check("", &[]).auth, AuthConfig::Dev);
    assert_eq!(
        check("[server.auth]\nmode = \"dev\"", &[]).auth,
        AuthConfig::Dev
    );
    assert_eq!(
        check("[server.auth]\nmode = \"none\"", &[]).auth,
        AuthConfig::None
    );
}

#[test]
fn mcpgate_jwt_secret_selects_jwt_and_keeps_only_the_reference() {
    let env = [
        (JWT_SECRET, STRONG),
        (JWT_ISSUER, "https://issuer.example.com/"),
        (JWT_AUDIENCE, "mcpgate"),
    ];
    let checked = check("", &env);
    let jwt = jwt_of(&checked);
    assert_eq!(jwt.algorithms, [JwtAlgorithm::Hs256]);
    let secret = jwt.secret.as_ref().expect("secret reference");
    assert_eq!(secret.as_written(), "${MCPGATE_JWT_SECRET}");
    assert!(!format!("{:?}", checked.auth).contains(STRONG));
    assert_eq!(jwt.issuer, "https://issuer.example.com/");
    assert_eq!(jwt.audience, "mcpgate");

    // A section without `mode` still configures the selected JWT mode.
    let checked = check("[server.auth]\ntenant_claim = \"org\"", &env);
    assert_eq!(jwt_of(&checked).tenant_claim, "org");
    let text = "[server.auth]\nalgorithms = [\"RS256\"]\njwks_url = \"https://i.example/jwks\"";
    let checked = check(text, &env);
    assert_eq!(jwt_of(&checked).secret, None, "HS256 is not listed");

    // A written mode wins, and an empty variable selects nothing.
    let checked = check("[server.auth]\nmode = \"dev\"", &env);
    assert_eq!((checked.auth, checked.problems), (AuthConfig::Dev, vec![]));
    assert_eq!(
        checked.warnings,
        ["MCPGATE_JWT_SECRET: is ignored: server.auth.mode selects \"dev\""]
    );
    let checked = check("", &[(JWT_SECRET, " ")]);
    assert_eq!((checked.auth, checked.warnings), (AuthConfig::Dev, vec![]));
}

#[test]
fn issuer_and_audience_are_required_and_the_environment_wins() {
    let found = check("", &[(JWT_SECRET, STRONG)]).problems;
    assert_eq!(
        found,
        [
            "server.auth.issuer: is required for mode = \"jwt\": write it here or set \
             MCPGATE_JWT_ISSUER",
            "server.auth.audience: is required for mode = \"jwt\": write it here or set \
             MCPGATE_JWT_AUDIENCE",
        ]
    );
    let text = "[server.auth]\nmode = \"jwt\"\nsecret = \"${K}\"\nissuer = \"file-iss\"\n\
                audience = \"file-aud\"";
    let jwt = |env: &[(&str, &str)]| {
        let mut env = env.to_vec();
        env.push(("K", STRONG));
        let checked = check(text, &env);
        let jwt = jwt_of(&checked);
        (jwt.issuer.clone(), jwt.audience.clone())
    };
    assert_eq!(jwt(&[]), ("file-iss".to_owned(), "file-aud".to_owned()));
    assert_eq!(
        jwt(&[(JWT_ISSUER, "env-iss"), (JWT_AUDIENCE, "env-aud")]),
        ("env-iss".to_owned(), "env-aud".to_owned())
    );
    assert_eq!(
        jwt(&[(JWT_ISSUER, ""), (JWT_AUDIENCE, "env-aud")]),
        ("file-iss".to_owned(), "env-aud".to_owned())
    );

    let found = check(text, &[("K", STRONG), (JWT_ISSUER, "a\u{7}b")]).problems;
    assert_eq!(found, ["MCPGATE_JWT_ISSUER: holds a control character"]);
}

#[test]
fn hs256_needs_a_secret_written_as_one_reference() {
    let found = problems(&jwt_section(""));
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with(
            "server.auth.secret: is required for HS256: write secret = \"${MCPGATE_JWT_SECRET}\""
        ),
        "{found:?}"
    );
    for bad in [
        "hunter2-literal-key-0123456789abcdef",
        "Bearer ${K}",
        "${K}${L}",
        " ${K}",
    ] {
        let found = problems(&jwt_section(&format!("secret = \"{bad}\"")));
        assert_eq!(found.len(), 1, "{bad}: {found:?}");
        assert!(found[0].starts_with("server.auth.secret: must be one `${NAME}` reference"));
        assert!(!found[0].contains("hunter2") && !found[0].contains("Bearer"));
    }
    let found = problems(&jwt_section("secret = \"${A-B}\""));
    assert_eq!(found.len(), 1);
    assert!(found[0].contains("invalid variable name"), "{found:?}");
}

#[test]
fn rs256_and_es256_need_public_keys_or_a_jwks_url() {
    for algorithm in ["RS256", "ES256"] {
        for keys in ["", "public_keys = []"] {
            let found = problems(&jwt_section(&format!(
                "algorithms = [\"{algorithm}\"]\n{keys}"
            )));
            assert_eq!(
                found,
                [
                    "server.auth.public_keys: RS256 and ES256 need public_keys (PEM files) or jwks_url"
                ]
            );
        }
        for keys in [
            "public_keys = [\"k.pem\"]",
            "jwks_url = \"https://i.example/jwks\"",
        ] {
            let text = jwt_section(&format!("algorithms = [\"{algorithm}\"]\n{keys}"));
            let checked = check(&text, &[]);
            assert_eq!(checked.problems, Vec::<String>::new(), "{text}");
        }
    }
    let found = problems(&jwt_section(
        "algorithms = [\"RS256\"]\npublic_keys = [\"\", \"a\\u0000b\"]",
    ));
    assert_eq!(
        found,
        [
            "server.auth.public_keys[0]: must be a file path (non-empty, no NUL)",
            "server.auth.public_keys[1]: must be a file path (non-empty, no NUL)",
        ]
    );
}

#[test]
fn key_material_for_an_algorithm_not_listed_is_refused() {
    let text = jwt_section(
        "algorithms = [\"RS256\"]\njwks_url = \"https://i.example/j\"\nsecret = \"${K}\"",
    );
    assert_eq!(
        problems(&text),
        ["server.auth.secret: is only used by HS256, which algorithms does not list"]
    );
    let text = jwt_section("secret = \"${K}\"\npublic_keys = [\"k.pem\"]");
    assert_eq!(
        problems(&text),
        [
            "server.auth.public_keys: is only used by RS256 and ES256, which algorithms does not list"
        ]
    );
    let text = jwt_section("secret = \"${K}\"\njwks_url = \"https://i.example/j\"");
    assert_eq!(
        problems(&text),
        ["server.auth.jwks_url: is only used by RS256 and ES256, which algorithms does not list"]
    );
}

#[test]
fn algorithms_are_pinned_known_names() {
    let found = problems(&jwt_section("secret = \"${K}\"\nalgorithms = []"));
    assert_eq!(
        found,
        ["server.auth.algorithms: must list at least one of HS256, RS256, ES256"]
    );
    let text = r#"secret = "${K}"
        algorithms = ["none", "NONE", "HS512", "hs256", "HS256", "HS256"]"#;
    let found = problems(&jwt_section(text));
    let none = "never accepted";
    let expected: [(usize, &str); 5] = [
        (0, none),
        (1, none),
        (2, "is not supported: use HS256, RS256 or ES256"),
        (3, "is not supported"),
        (5, "is listed twice"),
    ];
    assert_eq!(found.len(), expected.len(), "{found:?}");
    for (problem, (index, text)) in found.iter().zip(expected) {
        assert!(
            problem.starts_with(&format!("server.auth.algorithms[{index}]: ")),
            "{problem}"
        );
        assert!(problem.contains(text), "{problem}");
    }
}

#[test]
fn jwks_url_must_be_https_without_credentials_and_is_never_echoed() {
    let base = "algorithms = [\"RS256\"]\n";
    for (url, message) in [
        (
            "http://issuer.example.com/jwks",
            "must use https (http only to a loopback address, outside production)",
        ),
        // A name, even `localhost`, could resolve elsewhere: loopback means an address.
        (
            "http://localhost:9000/jwks",
            "must use https (http only to a loopback address, outside production)",
        ),
        (
            "http://u:pw1234@127.0.0.1:9000/jwks",
            "must use https (http only to a loopback address, outside production)",
        ),
        (
            "https://u:pw1234@issuer.example.com/jwks",
            "must not carry a user name or password",
        ),
        ("not a url", "is not a URL"),
    ] {
        let found = problems(&jwt_section(&format!("{base}jwks_url = \"{url}\"")));
        assert_eq!(found, [format!("server.auth.jwks_url: {message}")], "{url}");
    }
}

#[test]
fn identities_and_claim_names_must_be_plain_text() {
    let text = r#"
        [server.auth]
        mode = "jwt"
        secret = "${K}"
        issuer = ""
        audience = "aud\n"
        tenant_claim = ""
        user_claim = " sub"
        roles_claim = "ro\u0007les"
    "#;
    assert_eq!(
        problems(text),
        [
            "server.auth.issuer: must not be empty",
            "server.auth.audience: holds a control character",
            "server.auth.tenant_claim: must not be empty",
            "server.auth.user_claim: starts or ends with whitespace, which tokens never carry",
            "server.auth.roles_claim: holds a control character",
        ]
    );
}

#[test]
fn leeway_is_at_most_30_seconds() {
    for (value, want) in [("0", Duration::ZERO), ("\"30s\"", Duration::from_secs(30))] {
        let checked = check(
            &jwt_section(&format!("secret = \"${{K}}\"\nleeway = {value}")),
            &[("K", STRONG)],
        );
        assert_eq!(jwt_of(&checked).leeway, want);
    }
    for value in ["\"31s\"", "\"1m\""] {
        let found = problems(&jwt_section(&format!(
            "secret = \"${{K}}\"\nleeway = {value}"
        )));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("server.auth.leeway: must be between 0ns and 30s"),
            "{found:?}"
        );
    }
}

#[test]
fn jwt_fields_outside_jwt_mode_are_refused() {
    let text = r#"
        [server.auth]
        mode = "dev"
        algorithms = ["HS256"]
        secret = "${K}"
        public_keys = []
        jwks_url = "https://i.example/j"
        issuer = "i"
        audience = "a"
        tenant_claim = "t"
        user_claim = "u"
        roles_claim = "r"
        leeway = 1
    "#;
    let found = problems(text);
    let fields = [
        "algorithms",
        "secret",
        "public_keys",
        "jwks_url",
        "issuer",
        "audience",
        "tenant_claim",
        "user_claim",
        "roles_claim",
        "leeway",
    ];
    let want: Vec<String> = fields
        .iter()
        .map(|f| {
            format!("server.auth.{f}: is only used with mode = \"jwt\", and the mode is \"dev\"")
        })
        .collect();
    assert_eq!(found, want);
    let found = problems("[server.auth]\nmode = \"none\"\nissuer = \"i\"");
    assert_eq!(
        found,
        ["server.auth.issuer: is only used with mode = \"jwt\", and the mode is \"none\""]
    );
}

#[test]
fn weak_and_unset_secrets_warn_and_production_refuses_weak_ones() {
    let section = jwt_section("secret = \"${K}\"");
    let checked = check(&section, &[("K", WEAK)]);
    assert_eq!(checked.problems, Vec::<String>::new());
    assert_eq!(checked.warnings.len(), 1);
    assert!(
        checked.warnings[0].starts_with("server.auth.secret: the key is shorter than 32 bytes"),
        "{:?}",
        checked.warnings
    );

    let production = format!("[server]\nproduction = true\n{section}");
    let found = check(&production, &[("K", WEAK)]).problems;
    assert_eq!(found.len(), 1);
    assert!(
        found[0].ends_with("production = true refuses it"),
        "{found:?}"
    );
    assert!(!found[0].contains(WEAK));
    let found = check(&production, &[("K", "")]).problems;
    assert_eq!(found.len(), 1, "an empty key is weak: {found:?}");
    let checked = check(&production, &[("K", STRONG)]);
    assert_eq!((checked.problems, checked.warnings), (vec![], vec![]));

    let checked = check(&production, &[]);
    assert_eq!(checked.problems, Vec::<String>::new());
    assert_eq!(
        checked.warnings,
        [
            "server.auth.secret: environment variable `K` is not set; mcpgate serve cannot \
          verify tokens until it is"
        ]
    );

    let env = [(JWT_SECRET, WEAK), (JWT_ISSUER, "i"), (JWT_AUDIENCE, "a")];
    let found = check("[server]\nproduction = true", &env).problems;
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("MCPGATE_JWT_SECRET: the key is shorter"),
        "{found:?}"
    );
}

#[test]
fn a_token_without_a_tenant_has_the_default_one_only_without_access() {
    let single = check(&jwt_section("secret = \"${K}\""), &[("K", STRONG)]);
    assert_eq!(jwt_of(&single).default_tenant.as_deref(), Some("default"));
    let named = check(
        &jwt_section("secret = \"${K}\"\ndefault_tenant = \"acme\""),
        &[("K", STRONG)],
    );
    assert_eq!(jwt_of(&named).default_tenant.as_deref(), Some("acme"));

    let tenants = "[access.tenants.acme]\nservers = []\n";
    let multi = check(
        &format!("{tenants}{}", jwt_section("secret = \"${K}\"")),
        &[("K", STRONG)],
    );
    assert_eq!(
        jwt_of(&multi).default_tenant,
        None,
        "with [access] a token names its tenant"
    );
    let refused = problems(&format!(
        "{tenants}{}",
        jwt_section("secret = \"${K}\"\ndefault_tenant = \"acme\"")
    ));
    assert_eq!(
        refused,
        [
            "server.auth.default_tenant: applies only without [access]: with tenants configured, \
          a token must name its tenant"
        ]
    );
    let bad = problems(&jwt_section("secret = \"${K}\"\ndefault_tenant = \" x\""));
    assert_eq!(
        bad,
        ["server.auth.default_tenant: starts or ends with whitespace, which tokens never carry"]
    );
}
