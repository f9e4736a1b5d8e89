//! JWT parsing and claim checks, through the gateway's authenticator: any header and claims,
//! signed with the configured key. A token it accepts has the issuer, an audience naming the
//! gateway, an expiry not past, a start not ahead, and string subject and tenant claims (a
//! reference check written here); an unsigned or garbage token is never accepted.
#![no_main]

use std::{
    sync::OnceLock,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mcpgate::{
    config::{AuthConfig, Env, JwtAlgorithm, JwtConfig, SecretTemplate},
    server::auth::Authenticator,
};
use serde_json::Value;

const SECRET: &str = "0123456789abcdef0123456789abcdef-fuzz-secret";
const ISSUER: &str = "https://issuer.test/";
const LEEWAY: u64 = 5;

fn authenticator() -> &'static Authenticator {
    static AUTH: OnceLock<Authenticator> = OnceLock::new();
    AUTH.get_or_init(|| {
        let config = AuthConfig::Jwt(Box::new(JwtConfig {
            algorithms: vec![JwtAlgorithm::Hs256],
            secret: Some(SecretTemplate::new("${JWT_SECRET}")),
            public_keys: vec![],
            jwks_url: None,
            issuer: ISSUER.into(),
            audience: "mcpgate".into(),
            tenant_claim: "tenant".into(),
            user_claim: "sub".into(),
            roles_claim: "roles".into(),
            default_tenant: None,
            leeway: Duration::from_secs(LEEWAY),
            protected: None,
        }));
        let env = Env::from_pairs([("JWT_SECRET", SECRET)]);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime
            .block_on(Authenticator::new(
                &config,
                &env,
                "127.0.0.1:0".parse().expect("an address"),
                false,
            ))
            .expect("the authenticator")
    })
}

#[derive(Arbitrary, Debug)]
struct Input {
    /// Signed with the key (claims from `claims`), or sent as it is.
    signed: bool,
    claims: Vec<u8>,
    raw: String,
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn accepted(claims: &Value) -> bool {
    let now = now() as f64;
    let number = |name: &str| claims.get(name).and_then(Value::as_f64);
    let aud_ok = match claims.get("aud") {
        Some(Value::String(aud)) => aud == "mcpgate",
        Some(Value::Array(auds)) => auds.iter().any(|a| a == "mcpgate"),
        _ => false,
    };
    claims.get("iss").and_then(Value::as_str) == Some(ISSUER)
        && aud_ok
        && number("exp").is_some_and(|exp| exp + LEEWAY as f64 >= now)
        && claims
            .get("nbf")
            .is_none_or(|nbf| nbf.as_f64().is_some_and(|nbf| nbf <= now + LEEWAY as f64))
        && claims.get("sub").is_some_and(Value::is_string)
        && claims.get("tenant").is_some_and(Value::is_string)
}

fuzz_target!(|input: Input| {
    let auth = authenticator();
    let (token, claims) = if input.signed {
        let Ok(mut claims) = serde_json::from_slice::<Value>(&input.claims) else {
            return;
        };
        // Half the inputs get claims that would pass, so the checks past the signature run.
        if let Value::Object(map) = &mut claims
            && map.is_empty()
        {
            map.insert("iss".into(), ISSUER.into());
            map.insert("aud".into(), "mcpgate".into());
            map.insert("sub".into(), "someone".into());
            map.insert("tenant".into(), "local".into());
            map.insert("exp".into(), (now() + 60).into());
        }
        let key = jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()).expect("an HMAC key");
        let Ok(token) = jsonwebtoken::encode(&jsonwebtoken::Header::default(), &claims, &key)
        else {
            return;
        };
        (token, Some(claims))
    } else {
        (input.raw, None)
    };
    let Ok(value) = http::HeaderValue::from_str(&format!("Bearer {token}")) else {
        return;
    };
    let mut headers = http::HeaderMap::new();
    headers.insert(http::header::AUTHORIZATION, value);
    let uri: http::Uri = "/api/v1/tools".parse().expect("a path");
    let result = auth.authenticate(&headers, &uri, "fuzz");
    match claims {
        Some(claims) => {
            if result.is_ok() {
                assert!(accepted(&claims), "accepted {claims}");
            }
        }
        None => assert!(result.is_err(), "an unsigned token was accepted: {token}"),
    }
});
