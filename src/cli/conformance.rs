//! The client entry point for the MCP conformance suite's client mode: the runner starts a
//! scenario server and runs `mcpgate conformance-client URL` with `MCP_CONFORMANCE_SCENARIO`
//! set. We connect through the whole gateway stack (config, SSRF-checked client, catalog, the
//! one call path) so the suite checks what users run.
//!
//! The `auth/*` scenarios put an authorization server in front of their MCP server: the
//! server is configured with `auth = "oauth"` (a pre-registered client when the scenario's
//! context names one), a user connects as users do (the connect route's work, the
//! authorization URL followed as a browser would, the callback's work with what comes back),
//! and the scenario's calls go with that user's token.

use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use mcpgate::{
    config::{
        Config, Confirm, Env, HttpConfig, HttpKind, OAuthConfig, PinsConfig, ReconnectConfig,
        SecretTemplate, ServerConfig, ServerId, StateConfig, TransportConfig, UpstreamOAuth,
    },
    gateway::{Gateway, GatewayOptions},
    oauth::ConnectionKey,
    policy::CallContext,
};
use serde_json::json;

/// The scenario servers answer at once; this only bounds a broken run.
const READY_DEADLINE: Duration = Duration::from_secs(20);

/// Where the suite's authorization servers send the user back: never visited (the URL is
/// read from the last redirect), so any loopback address does.
const PUBLIC_URL: &str = "http://127.0.0.1:9";
/// The Client ID Metadata Document URL the suite's scenarios take as the client's.
const CLIENT_METADATA_URL: &str = "https://conformance-test.local/client-metadata.json";

pub async fn run(url: &str) -> anyhow::Result<ExitCode> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let context: serde_json::Value = std::env::var("MCP_CONFORMANCE_CONTEXT")
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    let auth = scenario.starts_with("auth/");
    let url = url::Url::parse(url).context("the server URL is not a valid URL")?;
    let id = ServerId::new("conformance").context("static id")?;
    let mut server = ServerConfig::new(
        id.clone(),
        TransportConfig::Http(HttpConfig {
            url,
            kind: HttpKind::Streamable,
            headers: Vec::new(),
        }),
    );
    // The suite's servers listen on localhost over plain HTTP.
    server.allow_private = true;
    server.allow_http = true;
    // The suite plays the user: its scenarios call tools without an approval step.
    server.confirm = Confirm::None;
    let mut env = vec![(
        "MCPGATE_OAUTH_KEY".to_owned(),
        mcpgate::digest::random_hex(32),
    )];
    if auth {
        let mut oauth = UpstreamOAuth::default();
        if let Some(id) = context["client_id"].as_str() {
            env.push(("CONFORMANCE_CLIENT_ID".to_owned(), id.to_owned()));
            oauth.client_id = Some(SecretTemplate::new("${CONFORMANCE_CLIENT_ID}"));
        }
        if let Some(secret) = context["client_secret"].as_str() {
            env.push(("CONFORMANCE_CLIENT_SECRET".to_owned(), secret.to_owned()));
            oauth.client_secret = Some(SecretTemplate::new("${CONFORMANCE_CLIENT_SECRET}"));
        }
        server.oauth = Some(oauth);
    }
    let mut config = Config {
        servers: vec![server],
        state: StateConfig::Memory,
        pins: PinsConfig::none(),
        reconnect: ReconnectConfig {
            max_attempts: 0,
            ..ReconnectConfig::default()
        },
        oauth: OAuthConfig {
            keys: vec![SecretTemplate::new("${MCPGATE_OAUTH_KEY}")],
            // Where a gateway of the suite's publishes its client metadata: the client id
            // the suite's `auth/basic-cimd` scenario checks for.
            client_metadata_url: Some(url::Url::parse(CLIENT_METADATA_URL).context("static URL")?),
            ..OAuthConfig::default()
        },
        ..Config::default()
    };
    config.service.public_url = Some(url::Url::parse(PUBLIC_URL).context("static URL")?);
    let options = GatewayOptions {
        env: Env::from_pairs(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        ..GatewayOptions::default()
    };
    let gateway = Gateway::start(config, options).await?;
    gateway.wait_ready(READY_DEADLINE).await;
    let outcome = async {
        if auth {
            connect_user(&gateway, &id).await?;
            call_as_user(&gateway, &id).await?;
        }
        scenario_steps(&gateway, &scenario).await
    }
    .await;
    gateway.shutdown().await;
    outcome.map(|()| ExitCode::SUCCESS)
}

/// Calls the server's first tool as the connected user; when the server wants more scope
/// for it (a step-up), the user connects again, as the error tells them to, and calls again.
async fn call_as_user(gateway: &Gateway, id: &ServerId) -> anyhow::Result<()> {
    let ctx = CallContext::local();
    let Some(tool) = gateway
        .list_tools(&ctx)
        .await
        .into_iter()
        .find(|t| &t.server == id)
    else {
        return Ok(());
    };
    for _ in 0..2 {
        match gateway
            .call_tool(&ctx, &tool.canonical, json!({}), None)
            .await
        {
            Err(mcpgate::gateway::GatewayError::AuthorizationRequired { message, .. }) => {
                println!("{message}");
                connect_user(gateway, id).await?;
            }
            // Whatever the tool makes of empty arguments: the authorization held.
            _ => return Ok(()),
        }
    }
    Ok(())
}

/// Connects the local user's account on `id`, as the connect route and the callback do, the
/// authorization URL followed like a browser (redirects within the authorization server),
/// then waits for the server to be listed with that account.
async fn connect_user(gateway: &Gateway, id: &ServerId) -> anyhow::Result<()> {
    let connections = gateway.connections().context("no OAuth server")?;
    let ctx = CallContext::local();
    let key = ConnectionKey {
        tenant: ctx.tenant.clone(),
        user: ctx.user.clone(),
        server: id.to_string(),
    };
    let mut next = connections.begin(&key).await?;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()?;
    let back = loop {
        if next.starts_with(connections.redirect_uri()) {
            break next;
        }
        let response = client.get(&next).send().await?;
        let location = response
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .with_context(|| {
                format!("the authorization endpoint answered {}", response.status())
            })?;
        next = url::Url::parse(&next)?.join(location)?.to_string();
    };
    let back = url::Url::parse(&back)?;
    let param = |name: &str| {
        back.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    if let Some(error) = param("error") {
        anyhow::bail!("the authorization server refused: {error}");
    }
    let (code, state) = (
        param("code").context("no code")?,
        param("state").context("no state")?,
    );
    connections
        .complete(&state, &code, param("iss").as_deref())
        .await?;
    gateway.refresh(id);
    let deadline = tokio::time::Instant::now() + READY_DEADLINE;
    // Listed by the upstream manager, and in the catalog the calls are resolved against
    // (rebuilt after the listing, not with it).
    let ctx = CallContext::local();
    while tokio::time::Instant::now() < deadline {
        let listed = gateway
            .servers()
            .into_iter()
            .find(|s| &s.id == id)
            .and_then(|s| s.tools);
        let in_catalog = gateway
            .list_tools(&ctx)
            .await
            .iter()
            .any(|t| &t.server == id);
        if listed.is_some_and(|tools| tools.is_empty() || in_catalog) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the server was not listed with the connected account")
}

async fn scenario_steps(gateway: &Gateway, scenario: &str) -> anyhow::Result<()> {
    let status = gateway.servers().into_iter().next().context("no server")?;
    anyhow::ensure!(
        status.tools.is_some(),
        "not connected: {}",
        status
            .last_error
            .unwrap_or_else(|| status.state.to_string())
    );
    if scenario == "tools_call" {
        let output = gateway
            .call_tool(
                &CallContext::local(),
                "conformance.add_numbers",
                json!({ "a": 5, "b": 3 }),
                None,
            )
            .await?;
        println!("{}", output.text());
    }
    Ok(())
}
