//! JWT verification through the public `Authenticator`: real tokens signed with the test keys
//! in `../testdata` (generated with `openssl` for these tests only; they protect nothing).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{HeaderMap, HeaderValue, Uri, header::AUTHORIZATION};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode, get_current_timestamp};
use serde_json::{Value, json};

use super::JwtVerifier;
use crate::{
    config::{AuthConfig, Env, JwtAlgorithm, JwtConfig, SecretTemplate},
    server::auth::{
        AuthCode, AuthFailure, AuthSetupError, Authenticator, Mode,
        jwks::{JwksError, JwksSource},
    },
};

const SECRET: &str = "0123456789abcdef0123456789abcdef-test-only";
const ISSUER: &str = "https://issuer.test";
const AUDIENCE: &str = "mcpgate";
const RSA_PRIVATE: &[u8] = include_bytes!("../testdata/rsa_private.pem");
const RSA_PUBLIC: &[u8] = include_bytes!("../testdata/rsa_public.pem");
const EC_PRIVATE: &[u8] = include_bytes!("../testdata/ec_private.pem");
const JWKS: &str = include_str!("../testdata/jwks.json");
/// base64url of `{"alg":"none"}` and `{"alg":"none","typ":"JWT"}`.
const NONE_HEADERS: [&str; 2] = ["eyJhbGciOiJub25lIn0", "eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0"];

fn testdata(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("src/server/auth/testdata")
        .join(name)
}

fn config(algorithms: &[JwtAlgorithm]) -> JwtConfig {
    let hs = algorithms.contains(&JwtAlgorithm::Hs256);
    let mut public_keys = Vec::new();
    if algorithms.contains(&JwtAlgorithm::Rs256) {
        public_keys.push(testdata("rsa_public.pem"));
    }
    if algorithms.contains(&JwtAlgorithm::Es256) {
        public_keys.push(testdata("ec_public.pem"));
    }
    JwtConfig {
        algorithms: algorithms.to_vec(),
        secret: hs.then(|| SecretTemplate::new("${JWT_SECRET}")),
        public_keys,
        jwks_url: None,
        issuer: ISSUER.to_owned(),
        audience: AUDIENCE.to_owned(),
        tenant_claim: "tenant".to_owned(),
        user_claim: "sub".to_owned(),
        roles_claim: "roles".to_owned(),
        default_tenant: None,
        leeway: Duration::from_secs(30),
        protected: None,
    }
}

fn env_with(secret: &str) -> Env {
    Env::from_pairs([("JWT_SECRET", secret)])
}

fn listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 8080))
}

async fn setup(
    cfg: JwtConfig,
    env: &Env,
    production: bool,
) -> Result<Authenticator, AuthSetupError> {
    Authenticator::new(&AuthConfig::Jwt(Box::new(cfg)), env, listen(), production).await
}

async fn authenticator(algorithms: &[JwtAlgorithm]) -> Authenticator {
    setup(config(algorithms), &env_with(SECRET), true)
        .await
        .expect("valid JWT setup")
}

fn claims() -> Value {
    json!({
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "alice",
        "tenant": "acme",
        "roles": ["reader", "writer"],
        "exp": get_current_timestamp() + 300,
    })
}

fn with(mut claims: Value, key: &str, value: Value) -> Value {
    claims[key] = value;
    claims
}

fn without(mut claims: Value, key: &str) -> Value {
    claims.as_object_mut().expect("object").remove(key);
    claims
}

fn sign(alg: Algorithm, kid: Option<&str>, claims: &Value) -> String {
    let key = match alg {
        Algorithm::HS256 => EncodingKey::from_secret(SECRET.as_bytes()).expect("secret"),
        Algorithm::RS256 => EncodingKey::from_rsa_pem(RSA_PRIVATE).expect("rsa key"),
        _ => EncodingKey::from_ec_pem(EC_PRIVATE).expect("ec key"),
    };
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    encode(&header, claims, &key).expect("signs")
}

fn check(auth: &Authenticator, token: &str) -> Result<crate::policy::CallContext, AuthFailure> {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).expect("ascii token");
    headers.insert(AUTHORIZATION, value);
    auth.authenticate(&headers, &Uri::from_static("/api/tools"), "req-1")
}

fn refused(auth: &Authenticator, token: &str, code: AuthCode) -> AuthFailure {
    let err = check(auth, token).expect_err("token must be refused");
    assert_eq!(err.code(), code, "{err}");
    // Nothing of the token or its claims' values reaches the caller.
    for secret in [token, "alice", "acme", "reader"] {
        assert!(!err.message().contains(secret), "{err}");
        assert!(!err.www_authenticate().contains(secret));
    }
    err
}

#[tokio::test]
async fn valid_tokens_map_claims_to_the_context() {
    let auth = authenticator(&[
        JwtAlgorithm::Hs256,
        JwtAlgorithm::Rs256,
        JwtAlgorithm::Es256,
    ])
    .await;
    for alg in [Algorithm::HS256, Algorithm::RS256, Algorithm::ES256] {
        let ctx = check(&auth, &sign(alg, None, &claims())).expect("valid token");
        assert_eq!(
            (ctx.tenant.as_str(), ctx.user.as_str()),
            ("acme", "alice"),
            "{alg:?}"
        );
        assert_eq!(ctx.roles, ["reader", "writer"]);
        assert_eq!(ctx.session, "default");
        assert_eq!(ctx.request_id, "req-1");
    }
    let with_sid = with(claims(), "sid", json!("sess-7"));
    let ctx = check(&auth, &sign(Algorithm::RS256, None, &with_sid)).expect("valid");
    assert_eq!(ctx.session, "sess-7");
}

#[tokio::test]
async fn expiry_honours_the_leeway_and_nothing_more() {
    let auth = authenticator(&[JwtAlgorithm::Hs256]).await;
    let now = get_current_timestamp();
    let within = with(claims(), "exp", json!(now - 10));
    check(&auth, &sign(Algorithm::HS256, None, &within)).expect("10 s late is within 30 s");
    let beyond = with(claims(), "exp", json!(now - 120));
    let err = refused(
        &auth,
        &sign(Algorithm::HS256, None, &beyond),
        AuthCode::ExpiredToken,
    );
    assert_eq!(
        err.www_authenticate(),
        "Bearer realm=\"mcpgate\", error=\"invalid_token\", error_description=\"token has expired\""
    );
    assert_eq!(err.status(), http::StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn not_before_is_checked_when_present() {
    let auth = authenticator(&[JwtAlgorithm::Rs256]).await;
    let now = get_current_timestamp();
    let future = with(claims(), "nbf", json!(now + 600));
    refused(
        &auth,
        &sign(Algorithm::RS256, None, &future),
        AuthCode::TokenNotYetValid,
    );
    let past = with(claims(), "nbf", json!(now - 600));
    check(&auth, &sign(Algorithm::RS256, None, &past)).expect("nbf in the past");
}

#[tokio::test]
async fn issuer_audience_and_subject_are_required_and_matched() {
    let auth = authenticator(&[JwtAlgorithm::Rs256]).await;
    let cases = [
        (with(claims(), "aud", json!("someone-else")), "audience"),
        (with(claims(), "iss", json!("https://evil.test")), "issuer"),
        (without(claims(), "aud"), "`aud`"),
        (without(claims(), "iss"), "`iss`"),
        (without(claims(), "sub"), "`sub`"),
        (without(claims(), "exp"), "`exp`"),
    ];
    for (claims, expected) in cases {
        let err = refused(
            &auth,
            &sign(Algorithm::RS256, None, &claims),
            AuthCode::InvalidToken,
        );
        assert!(err.message().contains(expected), "{err}");
    }
    let no_tenant = without(claims(), "tenant");
    let err = refused(
        &auth,
        &sign(Algorithm::RS256, None, &no_tenant),
        AuthCode::InvalidClaims,
    );
    assert!(err.message().contains("`tenant`"), "{err}");
}

#[tokio::test]
async fn unsigned_and_confused_algorithm_tokens_are_refused() {
    let rs_only = authenticator(&[JwtAlgorithm::Rs256]).await;
    let both = authenticator(&[JwtAlgorithm::Hs256, JwtAlgorithm::Rs256]).await;
    let signed = sign(Algorithm::RS256, None, &claims());
    let payload = signed.split('.').nth(1).expect("three parts");
    for header in NONE_HEADERS {
        let unsigned = format!("{header}.{payload}.");
        refused(&rs_only, &unsigned, AuthCode::InvalidToken);
        refused(&both, &unsigned, AuthCode::InvalidToken);
    }
    // HS256 keyed with the RSA public key's PEM bytes, which an attacker can read.
    let confused_key = EncodingKey::from_secret(RSA_PUBLIC).expect("key");
    let confused = encode(&Header::new(Algorithm::HS256), &claims(), &confused_key).expect("signs");
    let err = refused(&rs_only, &confused, AuthCode::InvalidToken);
    assert!(err.message().contains("algorithm"), "{err}");
    refused(&both, &confused, AuthCode::InvalidToken);
    // ES256 is not accepted by `rs_only`, however valid its signature.
    refused(
        &rs_only,
        &sign(Algorithm::ES256, None, &claims()),
        AuthCode::InvalidToken,
    );
    let tampered = format!("{}x", sign(Algorithm::RS256, None, &claims()));
    refused(&rs_only, &tampered, AuthCode::InvalidToken);
}

#[tokio::test]
async fn oversized_tokens_are_refused_before_parsing() {
    let auth = authenticator(&[JwtAlgorithm::Hs256]).await;
    let padded = with(claims(), "padding", json!("p".repeat(9 * 1024)));
    let err = check(&auth, &sign(Algorithm::HS256, None, &padded)).expect_err("too large");
    assert_eq!(err.code(), AuthCode::TokenTooLarge);
}

#[tokio::test]
async fn setup_refuses_weak_or_inconsistent_configuration() {
    let hs = || config(&[JwtAlgorithm::Hs256]);
    let short = env_with("0123456789abcdef");
    let err = setup(hs(), &short, true).await.expect_err("weak");
    assert!(
        matches!(err, AuthSetupError::WeakSecret { len: 16, min: 32 }),
        "{err}"
    );
    assert!(!err.to_string().contains("0123456789abcdef"));
    setup(hs(), &short, false)
        .await
        .expect("allowed outside production");
    let unset = setup(hs(), &Env::default(), false).await;
    assert!(matches!(
        unset,
        Err(AuthSetupError::SecretUnresolved { .. })
    ));

    let mut lax = hs();
    lax.leeway = Duration::from_secs(31);
    let err = setup(lax, &env_with(SECRET), false).await;
    assert!(matches!(err, Err(AuthSetupError::LeewayTooLarge { .. })));

    let mut private = config(&[JwtAlgorithm::Rs256]);
    private.public_keys = vec![testdata("rsa_private.pem")];
    let err = setup(private, &Env::default(), false)
        .await
        .expect_err("private key refused");
    assert!(
        err.to_string().contains("private key") && !err.to_string().contains("MII"),
        "{err}"
    );

    let mut mismatched = config(&[JwtAlgorithm::Es256]);
    mismatched.public_keys = vec![testdata("rsa_public.pem")];
    let err = setup(mismatched, &Env::default(), false).await;
    assert!(matches!(err, Err(AuthSetupError::KeyFile { .. })));

    let mut keyless = config(&[JwtAlgorithm::Rs256]);
    keyless.public_keys.clear();
    let err = setup(keyless, &Env::default(), false).await;
    assert!(matches!(
        err,
        Err(AuthSetupError::NoPublicKeys { algorithm: "RS256" })
    ));
}

/// Serves the test JWKS without a network.
struct StaticJwks;

impl JwksSource for StaticJwks {
    fn fetch(&self) -> BoxFuture<'_, Result<Bytes, JwksError>> {
        Box::pin(async { Ok(Bytes::from_static(JWKS.as_bytes())) })
    }
}

#[tokio::test]
async fn jwks_keys_are_chosen_by_kid() {
    let mut cfg = config(&[JwtAlgorithm::Rs256, JwtAlgorithm::Es256]);
    cfg.public_keys.clear();
    let verifier =
        JwtVerifier::with_jwks_source(&cfg, &Env::default(), true, Some(Arc::new(StaticJwks)))
            .await
            .expect("JWKS setup");
    let auth = Authenticator {
        mode: Mode::Jwt(Box::new(verifier)),
        protected: None,
    };
    for (alg, kid) in [
        (Algorithm::RS256, "test-rsa-1"),
        (Algorithm::ES256, "test-ec-1"),
    ] {
        let ctx = check(&auth, &sign(alg, Some(kid), &claims())).expect("known kid");
        assert_eq!(ctx.tenant, "acme");
    }
    check(&auth, &sign(Algorithm::RS256, None, &claims())).expect("no kid: every RS256 key");
    // The RSA key under the EC key's id: the kid is known, the key does not verify.
    refused(
        &auth,
        &sign(Algorithm::RS256, Some("test-ec-1"), &claims()),
        AuthCode::InvalidToken,
    );
    refused(
        &auth,
        &sign(Algorithm::RS256, Some("rotated-2"), &claims()),
        AuthCode::UnknownKey,
    );
}

fn protected_config() -> JwtConfig {
    JwtConfig {
        protected: Some(crate::config::ProtectedResourceConfig {
            resource: url::Url::parse("https://gw.test/mcp").expect("url"),
            authorization_servers: vec![ISSUER.to_owned()],
            scopes: vec!["mcp".to_owned(), "tools".to_owned()],
        }),
        ..config(&[JwtAlgorithm::Hs256])
    }
}

fn check_at(
    auth: &Authenticator,
    token: &str,
    path: &'static str,
) -> Result<crate::policy::CallContext, AuthFailure> {
    let mut headers = HeaderMap::new();
    let value = HeaderValue::from_str(&format!("Bearer {token}")).expect("ascii token");
    headers.insert(AUTHORIZATION, value);
    auth.authenticate(&headers, &Uri::from_static(path), "req-1")
}

#[tokio::test]
async fn a_protected_mcp_takes_tokens_for_its_resource_with_its_scopes() {
    let auth = setup(protected_config(), &env_with(SECRET), true)
        .await
        .expect("valid setup");
    let for_resource = with(claims(), "aud", json!("https://gw.test/mcp"));
    let scoped = with(for_resource.clone(), "scope", json!("tools mcp extra"));
    for path in ["/mcp", "/mcp/time", "/api/v1/mcp/tools"] {
        check_at(&auth, &sign(Algorithm::HS256, None, &scoped), path).expect(path);
    }
    // The configured audience is still accepted (the API's tokens).
    let api_token = with(claims(), "scope", json!("mcp tools"));
    check_at(&auth, &sign(Algorithm::HS256, None, &api_token), "/mcp").expect("audience");
    // Another resource's token is refused everywhere (RFC 8707).
    let other = with(scoped.clone(), "aud", json!("https://other.test/mcp"));
    for path in ["/mcp", "/api/v1/mcp/tools"] {
        let err = check_at(&auth, &sign(Algorithm::HS256, None, &other), path)
            .expect_err("another audience");
        assert_eq!(err.code(), AuthCode::InvalidToken, "{path}");
    }
    // A scope short: 403 on /mcp, naming what is missing; the API does not ask for scopes.
    let short = with(for_resource, "scp", json!(["mcp"]));
    let err = check_at(&auth, &sign(Algorithm::HS256, None, &short), "/mcp/time")
        .expect_err("scope missing");
    assert_eq!(err.code(), AuthCode::InsufficientScope);
    assert_eq!(err.status(), http::StatusCode::FORBIDDEN);
    assert!(err.message().ends_with(": tools"), "{}", err.message());
    check_at(
        &auth,
        &sign(Algorithm::HS256, None, &short),
        "/api/v1/mcp/tools",
    )
    .expect("no scopes on the API");
    // Every challenge points at the metadata and names the scopes.
    assert_eq!(
        auth.challenge(&err),
        "Bearer realm=\"mcpgate\", error=\"insufficient_scope\", error_description=\"the \
         token lacks the scope this endpoint requires: tools\", resource_metadata=\"https://gw.\
         test/.well-known/oauth-protected-resource/mcp\", scope=\"mcp tools\""
    );
    let missing = auth
        .authenticate(&HeaderMap::new(), &Uri::from_static("/mcp"), "req-1")
        .expect_err("no token");
    assert!(
        auth.challenge(&missing)
            .starts_with("Bearer realm=\"mcpgate\", resource_metadata=\"https://gw.test/"),
        "{}",
        auth.challenge(&missing)
    );
    let document = auth.protected_resource().expect("protected").document();
    assert_eq!(
        document,
        &json!({
            "resource": "https://gw.test/mcp",
            "authorization_servers": [ISSUER],
            "bearer_methods_supported": ["header"],
            "resource_name": "mcpgate",
            "scopes_supported": ["mcp", "tools"],
        })
    );
    let protected = auth.protected_resource().expect("protected");
    for (rest, served) in [
        ("", true),
        ("/mcp", true),
        ("/mcp/time", true),
        ("/mcp/time/x", false),
        ("/mcp/", false),
        ("/api", false),
    ] {
        assert_eq!(protected.serves(rest), served, "{rest}");
    }
}
