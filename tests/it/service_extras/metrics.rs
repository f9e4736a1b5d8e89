//! `GET /metrics`: calls counted by outcome through the REST API, confirmation decisions,
//! upstream states; and who may read it.

use std::time::Duration;

use axum::http::{Method, StatusCode, header};
use jsonwebtoken::{EncodingKey, Header, encode};
use mcpgate::config::{AuthConfig, Env, JwtAlgorithm, JwtConfig, SecretTemplate};
use serde_json::{Value, json};

use super::{Harness, demo_config, demo_harness};
use crate::support;

const SECRET: &str = "0123456789abcdef0123456789abcdef-metrics-secret";

/// The value of the one sample written exactly as `series` (name and labels).
fn sample(text: &str, series: &str) -> f64 {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .collect();
    assert_eq!(values.len(), 1, "{series} in:\n{text}");
    values[0]
}

#[tokio::test]
async fn calls_and_decisions_are_counted_by_outcome() {
    let harness = demo_harness().await;
    let call = |tool: &str, arguments: Value| json!({ "tool": tool, "arguments": arguments });
    let path = "/api/v1/mcp/tools/call";
    let echo = call("demo.echo", json!({ "message": "hi" }));
    let reply = harness.send(Method::POST, path, Some(&echo)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // A function name counts under the canonical id.
    let by_function = call("demo_echo", json!({ "message": "again" }));
    let reply = harness.send(Method::POST, path, Some(&by_function)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let unknown = harness
        .send(Method::POST, path, Some(&call("demo.nope", json!({}))))
        .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
    let note = call("demo.add_note", json!({ "title": "t", "body": "remember" }));
    let asked = harness.send(Method::POST, path, Some(&note)).await;
    assert_eq!(
        asked.status,
        StatusCode::PRECONDITION_REQUIRED,
        "{}",
        asked.text
    );
    let id = asked.json.expect("JSON")["confirmationId"]
        .as_str()
        .expect("id")
        .to_owned();
    let approve = format!("/api/v1/mcp/confirmations/{id}/approve");
    let approved = harness.send(Method::POST, &approve, None).await;
    assert_eq!(approved.status, StatusCode::OK, "{}", approved.text);
    let again = harness.send(Method::POST, &approve, None).await;
    assert_eq!(again.status, StatusCode::NOT_FOUND);

    let reply = harness.send(Method::GET, "/metrics", None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.headers[header::CONTENT_TYPE],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = &reply.text;
    let calls = |labels: &str| sample(text, &format!("mcpgate_tool_calls_total{{{labels}}}"));
    assert_eq!(calls(r#"server="demo",tool="demo.echo",outcome="ok""#), 2.0);
    assert_eq!(calls(r#"server="",tool="other",outcome="not_found""#), 1.0);
    let asked = r#"server="demo",tool="demo.add_note",outcome="confirmation_required""#;
    assert_eq!(calls(asked), 1.0);
    let latency = r#"mcpgate_tool_call_duration_seconds_count{server="demo"}"#;
    assert_eq!(sample(text, latency), 3.0);
    let decision = |d: &str| {
        sample(
            text,
            &format!("mcpgate_confirmations_total{{decision=\"{d}\"}}"),
        )
    };
    assert_eq!(
        (
            decision("requested"),
            decision("approved"),
            decision("refused")
        ),
        (1.0, 1.0, 1.0)
    );
    assert_eq!(sample(text, "mcpgate_tool_calls_in_flight"), 0.0);
    let ready = r#"mcpgate_upstream_state{server="demo",state="ready"}"#;
    assert_eq!(sample(text, ready), 1.0);
    assert_eq!(sample(text, "mcpgate_catalog_tools"), 6.0);

    let anonymous = harness.send_as(None, Method::GET, "/metrics", None).await;
    assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    harness.stop().await;
}

fn jwt_auth() -> AuthConfig {
    AuthConfig::Jwt(Box::new(JwtConfig {
        algorithms: vec![JwtAlgorithm::Hs256],
        secret: Some(SecretTemplate::new("${JWT_SECRET}")),
        public_keys: vec![],
        jwks_url: None,
        issuer: "https://issuer.test/".into(),
        audience: "mcpgate".into(),
        tenant_claim: "tenant".into(),
        user_claim: "sub".into(),
        roles_claim: "roles".into(),
        default_tenant: None,
        leeway: Duration::from_secs(5),
        protected: None,
    }))
}

fn token(roles: &[&str]) -> String {
    let exp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs()
        + 300;
    let claims = json!({ "iss": "https://issuer.test/", "aud": "mcpgate", "sub": "scraper",
                         "tenant": "local", "roles": roles, "exp": exp });
    let key = EncodingKey::from_secret(SECRET.as_bytes()).expect("key");
    encode(&Header::default(), &claims, &key).expect("token")
}

#[tokio::test]
async fn only_the_admin_and_metrics_roles_read_metrics() {
    let gateway = support::gateway(demo_config()).await;
    let env = Env::from_pairs([("JWT_SECRET", SECRET)]);
    let harness = Harness::start(gateway, jwt_auth(), &env).await;
    let get = |roles: &'static [&'static str], path: &'static str| {
        let token = token(roles);
        let harness = &harness;
        async move {
            harness
                .send_as(Some(&token), Method::GET, path, None)
                .await
                .status
        }
    };
    assert_eq!(get(&[], "/metrics").await, StatusCode::FORBIDDEN);
    assert_eq!(get(&["metrics"], "/metrics").await, StatusCode::OK);
    assert_eq!(get(&["admin"], "/metrics").await, StatusCode::OK);
    // The scraper's role opens nothing else that is admin-only.
    assert_eq!(
        get(&["metrics"], "/api/v1/audit").await,
        StatusCode::FORBIDDEN
    );
    harness.stop().await;
}
