//! Administration with two tenants over real HTTP: a tenant's admin sees and acts on its own
//! tenant only, a configured operator on the whole gateway, a tenant the configuration does
//! not know sees nothing, and another tenant's confirmation is not found.

use mcpgate::config::{AccessConfig, Config, Grant, Operator, TenantAccess};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Service, demo_config_with, json_of, jwt, jwt_auth, now};
use crate::support::id;

/// Tenant `a` sees `alpha`, tenant `b` sees `beta`; everyone in a tenant may use all of its
/// server; callers of tenant `ops` with the `operator` role operate the gateway.
pub(super) fn two_tenants() -> Config {
    let mut config = demo_config_with(&["alpha", "beta"]);
    let everyone = |tenant: &str, server: &str| Grant {
        tenant: tenant.into(),
        users: vec![],
        roles: vec![],
        tools: vec![format!("{server}.*")],
    };
    config.access = Some(AccessConfig {
        tenants: vec![
            TenantAccess {
                tenant: "a".into(),
                servers: vec![id("alpha")],
                models: None,
            },
            TenantAccess {
                tenant: "b".into(),
                servers: vec![id("beta")],
                models: None,
            },
        ],
        grants: vec![everyone("a", "alpha"), everyone("b", "beta")],
        operators: vec![Operator {
            tenant: "ops".into(),
            users: vec![],
            roles: vec!["operator".into()],
        }],
    });
    config
}

/// A token for `user` of `tenant` with `roles`.
pub(super) fn token(tenant: &str, user: &str, roles: &[&str]) -> String {
    jwt(json!({
        "iss": "https://issuer.test/", "aud": "mcpgate", "exp": now() + 300,
        "tenant": tenant, "sub": user, "roles": roles,
    }))
}

impl Service {
    pub(super) async fn get_as(&self, token: &str, path: &str) -> (StatusCode, Value) {
        let response = self.client.get(self.url(path)).bearer_auth(token);
        json_of(response.send().await.expect("sent")).await
    }

    pub(super) async fn post_as(
        &self,
        token: &str,
        path: &str,
        body: Value,
    ) -> (StatusCode, Value) {
        let response = self.client.post(self.url(path)).bearer_auth(token);
        json_of(response.json(&body).send().await.expect("sent")).await
    }

    /// The status of `GET /metrics` (text, not JSON).
    async fn metrics_as(&self, token: &str) -> StatusCode {
        let response = self.client.get(self.url("/metrics")).bearer_auth(token);
        response.send().await.expect("sent").status()
    }

    /// Asks for `server.add_note` as `token`'s caller; the confirmation id.
    pub(super) async fn ask_as(&self, token: &str, server: &str) -> String {
        let call = json!({
            "tool": format!("{server}.add_note"),
            "arguments": {"title": "t", "body": "b"},
        });
        let (status, body) = self.post_as(token, "/api/v1/mcp/tools/call", call).await;
        assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{body}");
        body["confirmationId"]
            .as_str()
            .expect("a confirmation id")
            .to_owned()
    }
}

/// The tenants of the audit records in `body`, each once, sorted.
fn tenants_of(body: &Value) -> Vec<String> {
    let mut tenants: Vec<String> = body["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["tenant"].as_str().expect("tenant").to_owned())
        .collect();
    tenants.sort();
    tenants.dedup();
    tenants
}

/// The ids of the servers in `body`.
fn server_ids(body: &Value) -> Vec<&str> {
    body["servers"]
        .as_array()
        .expect("servers")
        .iter()
        .map(|s| s["id"].as_str().expect("id"))
        .collect()
}

#[tokio::test]
async fn a_tenants_admin_administers_its_tenant_and_an_operator_the_gateway() {
    let service = Service::start(two_tenants(), jwt_auth()).await;
    let alice = token("a", "alice", &[]);
    let ann = token("a", "ann", &["admin"]);
    let bob = token("b", "bob", &[]);
    let olga = token("ops", "olga", &["operator"]);
    let echo =
        |server: &str| json!({"tool": format!("{server}.echo"), "arguments": {"message": "hi"}});
    for (who, server) in [(&alice, "alpha"), (&bob, "beta")] {
        let (status, body) = service
            .post_as(who, "/api/v1/mcp/tools/call", echo(server))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }

    // Tenant a's admin: a's audit only, whatever the query names.
    let (status, own) = service.get_as(&ann, "/api/v1/audit").await;
    assert_eq!(status, StatusCode::OK, "{own}");
    assert_eq!(tenants_of(&own), ["a"]);
    for query in ["?tenant=b", "?tenant=b&user=bob", "?user=bob"] {
        let (status, body) = service.get_as(&ann, &format!("/api/v1/audit{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        assert_eq!(body["records"], json!([]), "{query}: {body}");
    }
    // Its tenant's servers, refreshed; b's server is not found; no reload, no metrics.
    let (_, servers) = service.get_as(&ann, "/api/v1/mcp/servers").await;
    assert_eq!(server_ids(&servers), ["alpha"]);
    let refresh = |server: &str| format!("/api/v1/mcp/servers/{server}/refresh");
    let (status, _) = service.post_as(&ann, &refresh("alpha"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = service.post_as(&ann, &refresh("beta"), json!({})).await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::NOT_FOUND, &json!("not_found"))
    );
    let (status, body) = service
        .post_as(&ann, "/api/v1/admin/reload", json!({}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::FORBIDDEN, &json!("forbidden"))
    );
    assert_eq!(service.metrics_as(&ann).await, StatusCode::FORBIDDEN);
    // The operator's role, given by tenant a to its own admin, operates nothing.
    let ann_as_operator = token("a", "ann", &["admin", "operator", "metrics"]);
    let (status, _) = service
        .post_as(&ann_as_operator, "/api/v1/admin/reload", json!({}))
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, body) = service
        .get_as(&ann_as_operator, "/api/v1/audit?tenant=b")
        .await;
    assert_eq!(body["records"], json!([]), "{body}");
    assert_eq!(
        service.metrics_as(&ann_as_operator).await,
        StatusCode::FORBIDDEN
    );

    // The operator: every tenant's audit, or one tenant's; every server; refresh; reload
    // (which this service, started without a file, cannot do: past the role check).
    let (status, all) = service.get_as(&olga, "/api/v1/audit").await;
    assert_eq!(status, StatusCode::OK, "{all}");
    assert_eq!(tenants_of(&all), ["a", "b"]);
    let (_, only_b) = service.get_as(&olga, "/api/v1/audit?tenant=b").await;
    assert_eq!(tenants_of(&only_b), ["b"]);
    let (_, servers) = service.get_as(&olga, "/api/v1/mcp/servers").await;
    assert_eq!(server_ids(&servers), ["alpha", "beta"]);
    let (status, _) = service.post_as(&olga, &refresh("beta"), json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = service
        .post_as(&olga, "/api/v1/admin/reload", json!({}))
        .await;
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::CONFLICT, &json!("reload_unavailable"))
    );
    assert_eq!(service.metrics_as(&olga).await, StatusCode::OK);
    assert_eq!(
        service
            .metrics_as(&token("ops", "scraper", &["metrics"]))
            .await,
        StatusCode::OK
    );

    // A tenant unknown to the configuration sees nothing, admin or not.
    let carl = token("c", "carl", &["admin"]);
    let (status, _) = service.get_as(&carl, "/api/v1/audit").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, servers) = service.get_as(&carl, "/api/v1/mcp/servers").await;
    assert_eq!(servers["servers"], json!([]));
    let (_, tools) = service.get_as(&carl, "/api/v1/mcp/tools").await;
    assert_eq!(tools["tools"], json!([]));
    let (status, _) = service.post_as(&carl, &refresh("alpha"), json!({})).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(service.metrics_as(&carl).await, StatusCode::FORBIDDEN);
    service.stop().await;
}

#[tokio::test]
async fn another_tenants_confirmation_is_not_found() {
    let service = Service::start(two_tenants(), jwt_auth()).await;
    let bob = token("b", "bob", &[]);
    let ann = token("a", "ann", &["admin"]);
    let decide = |id: &str, how: &str| format!("/api/v1/mcp/confirmations/{id}/{how}");
    for how in ["approve", "deny"] {
        let id = service.ask_as(&bob, "beta").await;
        let (status, probe) = service.post_as(&ann, &decide(&id, how), json!({})).await;
        assert_eq!(
            (status, &probe["code"]),
            (StatusCode::NOT_FOUND, &json!("not_found")),
            "{how}: {probe}"
        );
        // The same answer as for an id that never existed: nothing to probe.
        let (status, unknown) = service
            .post_as(&ann, &decide("0123456789abcdef", how), json!({}))
            .await;
        assert_eq!((status, &unknown), (StatusCode::NOT_FOUND, &probe), "{how}");
        // Seen in another tenant's hands, the confirmation is gone for its owner too.
        let (status, _) = service
            .post_as(&bob, &decide(&id, "approve"), json!({}))
            .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{how}");
    }
    // Tenant a's admin finds no trace of b's tool in a's audit.
    let (_, audit) = service.get_as(&ann, "/api/v1/audit").await;
    let records = audit["records"].as_array().expect("records");
    assert!(!records.is_empty(), "the refusals are on record: {audit}");
    for record in records {
        assert_eq!(record["tenant"], "a", "{record}");
        assert_ne!(record["tool"], "beta.add_note", "{record}");
    }
    service.stop().await;
}
