//! Dev and no-auth modes, and what every mode reads from a request: the bearer header, the
//! session header, and tokens in the query string.

use std::net::SocketAddr;

use http::{HeaderMap, HeaderValue, StatusCode, Uri};

use super::*;

fn loopback() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn any_address() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 8080))
}

async fn dev() -> Authenticator {
    Authenticator::new(&AuthConfig::Dev, &Env::default(), loopback(), false)
        .await
        .expect("dev mode on loopback")
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        let name = http::HeaderName::from_bytes(name.as_bytes()).expect("header name");
        map.append(name, HeaderValue::from_str(value).expect("header value"));
    }
    map
}

fn api() -> Uri {
    Uri::from_static("/api/tools")
}

#[tokio::test]
async fn dev_mode_accepts_its_token_as_the_local_admin() {
    let auth = dev().await;
    let token = auth.dev_token().expect("dev token").to_owned();
    assert_eq!(token.len(), 64);
    assert_ne!(
        dev().await.dev_token(),
        Some(token.as_str()),
        "random per start"
    );
    assert!(!format!("{auth:?}").contains(&token));

    let bearer = format!("Bearer {token}");
    let ctx = auth
        .authenticate(&headers(&[("authorization", &bearer)]), &api(), "r1")
        .expect("dev token accepted");
    assert_eq!((ctx.tenant.as_str(), ctx.user.as_str()), ("local", "dev"));
    assert_eq!(
        (ctx.roles.as_slice(), ctx.session.as_str()),
        (&["admin".to_owned()][..], "default")
    );
    assert_eq!(ctx.request_id, "r1");

    let with_session = headers(&[("authorization", &bearer), (SESSION_HEADER, "chat-42")]);
    let ctx = auth
        .authenticate(&with_session, &api(), "r2")
        .expect("accepted");
    assert_eq!(ctx.session, "chat-42");

    let lowercase = format!("bearer {token}");
    auth.authenticate(&headers(&[("authorization", &lowercase)]), &api(), "r3")
        .expect("the scheme is case-insensitive");

    let wrong = auth
        .authenticate(&headers(&[("authorization", "Bearer nope")]), &api(), "r4")
        .expect_err("wrong token");
    assert_eq!(wrong.code(), AuthCode::InvalidToken);
    assert!(!wrong.message().contains(&token));
}

#[tokio::test]
async fn dev_and_none_modes_stay_local_and_out_of_production() {
    for config in [AuthConfig::Dev, AuthConfig::None] {
        let err = Authenticator::new(&config, &Env::default(), any_address(), false)
            .await
            .expect_err("0.0.0.0 refused");
        assert!(matches!(err, AuthSetupError::NotLoopback { .. }), "{err}");
        assert!(err.to_string().contains("0.0.0.0:8080"), "{err}");
        let err = Authenticator::new(&config, &Env::default(), loopback(), true)
            .await
            .expect_err("production refused");
        assert!(
            matches!(err, AuthSetupError::NotInProduction { .. }),
            "{err}"
        );
    }
    let ipv6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 8080));
    Authenticator::new(&AuthConfig::Dev, &Env::default(), ipv6, false)
        .await
        .expect("[::1] is loopback");
}

#[tokio::test]
async fn none_mode_makes_everyone_the_anonymous_local_caller() {
    let auth = Authenticator::new(&AuthConfig::None, &Env::default(), loopback(), false)
        .await
        .expect("none on loopback");
    assert_eq!(auth.dev_token(), None);
    let ctx = auth
        .authenticate(&HeaderMap::new(), &api(), "r1")
        .expect("no credentials needed");
    assert_eq!(
        (ctx.tenant.as_str(), ctx.user.as_str()),
        ("local", "anonymous")
    );
    assert!(ctx.roles.is_empty());
    assert_eq!(ctx.session, "default");
}

#[tokio::test]
async fn tokens_in_the_query_string_are_refused_even_with_a_header() {
    let auth = dev().await;
    let bearer = format!("Bearer {}", auth.dev_token().expect("dev"));
    let good = headers(&[("authorization", &bearer)]);
    for uri in [
        "/api/tools?access_token=abc",
        "/api/tools?x=1&token=abc",
        "/mcp?JWT=abc",
        "/api/tools?access%5Ftoken=abc",
    ] {
        let err = auth
            .authenticate(&good, &Uri::from_static(uri), "r")
            .expect_err(uri);
        assert_eq!(err.code(), AuthCode::TokenInQuery, "{uri}");
        assert_eq!(err.status(), StatusCode::BAD_REQUEST);
        assert!(err.www_authenticate().contains("error=\"invalid_request\""));
        assert!(!err.message().contains("abc"));
    }
    auth.authenticate(&good, &Uri::from_static("/api/tools?cursor=token"), "r")
        .expect("a value that merely says `token` is fine");
}

#[tokio::test]
async fn the_authorization_header_must_be_one_bearer_credential() {
    let auth = dev().await;
    let missing = auth
        .authenticate(&HeaderMap::new(), &api(), "r")
        .expect_err("missing");
    assert_eq!(missing.code(), AuthCode::MissingToken);
    assert_eq!(missing.www_authenticate(), "Bearer realm=\"mcpgate\"");
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);

    let token = auth.dev_token().expect("dev").to_owned();
    let bearer = format!("Bearer {token}");
    let cases: [&[(&str, &str)]; 4] = [
        &[("authorization", "Basic YWxhZGRpbjpvcGVuc2VzYW1l")],
        &[("authorization", "Bearer")],
        &[("authorization", "Bearer  ")],
        &[("authorization", &bearer), ("authorization", &bearer)],
    ];
    for case in cases {
        let err = auth
            .authenticate(&headers(case), &api(), "r")
            .expect_err("malformed");
        assert_eq!(err.code(), AuthCode::InvalidRequest, "{case:?}");
    }
    let huge = format!("Bearer {}", "a".repeat(MAX_TOKEN_BYTES + 1));
    let err = auth
        .authenticate(&headers(&[("authorization", &huge)]), &api(), "r")
        .expect_err("too large");
    assert_eq!(err.code(), AuthCode::TokenTooLarge);
}

#[tokio::test]
async fn session_headers_are_bounded_printable_ascii() {
    let auth = Authenticator::new(&AuthConfig::None, &Env::default(), loopback(), false)
        .await
        .expect("none");
    let long = "s".repeat(MAX_IDENTITY_CHARS + 1);
    for bad in [
        &[(SESSION_HEADER, "")][..],
        &[(SESSION_HEADER, "a b")],
        &[(SESSION_HEADER, &long)],
        &[(SESSION_HEADER, "a"), (SESSION_HEADER, "b")],
    ] {
        let err = auth
            .authenticate(&headers(bad), &api(), "r")
            .expect_err("bad session");
        assert_eq!(err.code(), AuthCode::InvalidRequest);
    }
    let exact = "s".repeat(MAX_IDENTITY_CHARS);
    let ctx = auth
        .authenticate(&headers(&[(SESSION_HEADER, &exact)]), &api(), "r")
        .expect("128 characters");
    assert_eq!(ctx.session, exact);
}

#[test]
fn error_descriptions_stay_within_the_quoted_string_grammar() {
    let failure = AuthFailure::new(AuthCode::InvalidClaims, "claim `a\"b\\c` is bad\n\u{e9}");
    assert_eq!(
        failure.www_authenticate(),
        "Bearer realm=\"mcpgate\", error=\"invalid_token\", \
         error_description=\"claim `a'b'c` is bad\""
    );
    assert_eq!(failure.code().as_str(), "invalid_claims");
}
