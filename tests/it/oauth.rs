//! OAuth with a real authorization server (npm `oidc-provider`): `/mcp` as a protected
//! resource that an MCP client signs in to on its own (rmcp's OAuth client: discovery from the
//! 401, dynamic registration, PKCE, RFC 8707 `resource`), with no token pasted by hand.

mod provider;

use std::time::Duration;

use rmcp::{
    ServiceExt as _,
    transport::{
        StreamableHttpClientTransport,
        auth::{AuthClient, AuthorizationRequest, OAuthState},
        streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};

use self::provider::{AuthServer, form_body, sign_in_and_consent};
use crate::support::{ServedBinary, free_port, mcpgate_bin};

/// Where the client says its authorization codes go; never visited (the test reads the
/// code from the authorization server's last redirect).
const REDIRECT_URI: &str = "http://127.0.0.1:9/callback";
/// A service of the same organisation with tokens for another resource.
const OTHER_CLIENT: &str = "other-service";
const OTHER_SECRET: &str = "other-service-secret-for-tests-only";
const OTHER_RESOURCE: &str = "https://other.example/mcp";

/// The authorization server, and the gateway in front of the demo server with `/mcp` a
/// protected resource of it (requiring `scope`).
async fn protected_gateway(dir: &std::path::Path) -> (AuthServer, ServedBinary, String) {
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let resource = format!("{base}/mcp");
    let issuer = AuthServer::start(
        &json!({
            resource.clone(): { "scope": "mcp", "ttl": 300 },
            OTHER_RESOURCE: { "scope": "mcp", "ttl": 300 },
        }),
        &json!([{
            "client_id": OTHER_CLIENT,
            "client_secret": OTHER_SECRET,
            "grant_types": ["client_credentials"],
            "redirect_uris": [],
            "response_types": [],
        }]),
    )
    .await;
    let sandbox = crate::support::sandbox_section(&[], &[]);
    let config = format!(
        r#"
{sandbox}
[server]
public_url = "{base}"
[server.auth]
mode = "jwt"
algorithms = ["RS256"]
issuer = "{issuer}"
jwks_url = "{issuer}/jwks"
scopes = ["mcp"]

[state]
database = "memory"

[servers.demo]
command = "{bin}"
args = ["demo-server"]
read_only_tools = ["echo", "add", "time_now", "list_notes"]
"#,
        issuer = issuer.issuer,
        bin = mcpgate_bin().display(),
    );
    let listen = format!("127.0.0.1:{port}");
    let served = ServedBinary::start(dir, Some(&config), &[("MCPGATE_LISTEN", &listen)]).await;
    assert_eq!(served.base, base);
    served.wait_ready().await;
    (issuer, served, resource)
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client")
}

#[tokio::test]
async fn an_mcp_client_signs_in_through_the_gateways_401_and_lists_tools() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (issuer, served, resource) = protected_gateway(dir.path()).await;

    // The 401 names the metadata; the metadata names the issuer and the resource.
    let refused = http()
        .post(&resource)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}))
        .send()
        .await
        .expect("answers");
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", served.base);
    assert_eq!(
        challenge,
        format!("Bearer realm=\"mcpgate\", resource_metadata=\"{metadata_url}\", scope=\"mcp\"")
    );
    for url in [
        metadata_url.clone(),
        format!("{}/.well-known/oauth-protected-resource", served.base),
        format!(
            "{}/.well-known/oauth-protected-resource/mcp/demo",
            served.base
        ),
    ] {
        let response = http()
            .get(&url)
            .header("origin", "https://client.example")
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 200, "{url}");
        assert_eq!(response.headers()["access-control-allow-origin"], "*");
        let document: Value = response.json().await.expect("json");
        assert_eq!(document["resource"], resource.as_str());
        assert_eq!(document["authorization_servers"], json!([issuer.issuer]));
        assert_eq!(document["scopes_supported"], json!(["mcp"]));
    }

    // rmcp's client: discovery from the challenge, registration, PKCE, the resource.
    let mut state = OAuthState::new(resource.as_str(), None)
        .await
        .expect("an OAuth client");
    state
        .start_authorization(
            AuthorizationRequest::new(REDIRECT_URI)
                .with_client_name("mcpgate test client")
                .with_challenge(challenge),
        )
        .await
        .expect("discovery and registration");
    let authorization_url = state.get_authorization_url().await.expect("a URL");
    let authorization = url::Url::parse(&authorization_url).expect("url");
    let query: std::collections::HashMap<_, _> = authorization.query_pairs().collect();
    assert_eq!(
        query.get("resource").map(|r| r.as_ref()),
        Some(resource.as_str())
    );
    assert_eq!(
        query.get("code_challenge_method").map(|m| m.as_ref()),
        Some("S256")
    );
    let callback = sign_in_and_consent(&authorization_url, "alice").await;
    assert!(callback.starts_with(REDIRECT_URI), "{callback}");
    state
        .handle_callback_url(&callback)
        .await
        .expect("the code is exchanged");

    let manager = state
        .into_authorization_manager()
        .expect("an authorized manager");
    let token = manager.get_access_token().await.expect("a token");
    let transport = StreamableHttpClientTransport::with_client(
        AuthClient::new(reqwest::Client::new(), manager),
        StreamableHttpClientTransportConfig::with_uri(resource.as_str()),
    );
    let client = ().serve(transport).await.expect("initialized through the gateway");
    let tools = client.list_all_tools().await.expect("tools listed");
    assert!(
        tools.iter().any(|tool| tool.name == "demo_echo"),
        "{:?}",
        tools.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    client.cancel().await.expect("closed");

    // The same token works on the API: its audience is this gateway's resource.
    let listed = http()
        .get(format!("{}/api/v1/mcp/tools", served.base))
        .bearer_auth(&token)
        .send()
        .await
        .expect("answers");
    assert_eq!(listed.status(), 200);

    // A token the same authorization server issued for another resource is refused.
    let other: Value = http()
        .post(format!("{}/token", issuer.issuer))
        .basic_auth(OTHER_CLIENT, Some(OTHER_SECRET))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form_body([
            ("grant_type", "client_credentials"),
            ("resource", OTHER_RESOURCE),
            ("scope", "mcp"),
        ]))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    let other = other["access_token"]
        .as_str()
        .expect("a token for the other resource");
    for url in [
        resource.clone(),
        format!("{}/api/v1/mcp/tools", served.base),
    ] {
        let response = http()
            .post(&url)
            .bearer_auth(other)
            .header("accept", "application/json, text/event-stream")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .send()
            .await
            .expect("answers");
        assert_eq!(response.status(), 401, "{url}");
        let challenge = response.headers()["www-authenticate"]
            .to_str()
            .expect("ascii");
        assert!(challenge.contains("error=\"invalid_token\""), "{challenge}");
        assert!(
            challenge.contains("token audience does not name this gateway"),
            "{challenge}"
        );
    }
    drop(served);
}
