//! The client entry point for the MCP conformance suite's client mode: the runner starts a
//! scenario server and runs `mcpgate conformance-client URL` with `MCP_CONFORMANCE_SCENARIO`
//! set. We connect through the whole gateway stack (config, SSRF-checked client, catalog, the
//! one call path) so the suite checks what users run.

use std::{process::ExitCode, time::Duration};

use anyhow::Context as _;
use mcpgate::{
    config::{
        Config, Confirm, HttpConfig, HttpKind, PinsConfig, ReconnectConfig, ServerConfig, ServerId,
        StateConfig, TransportConfig,
    },
    gateway::{Gateway, GatewayOptions},
    policy::CallContext,
};
use serde_json::json;

/// The scenario servers answer at once; this only bounds a broken run.
const READY_DEADLINE: Duration = Duration::from_secs(20);

pub async fn run(url: &str) -> anyhow::Result<ExitCode> {
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
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
    let config = Config {
        servers: vec![server],
        state: StateConfig::Memory,
        pins: PinsConfig::none(),
        reconnect: ReconnectConfig {
            max_attempts: 0,
            ..ReconnectConfig::default()
        },
        ..Config::default()
    };
    let gateway = Gateway::start(config, GatewayOptions::default()).await?;
    gateway.wait_ready(READY_DEADLINE).await;
    let outcome = scenario_steps(&gateway, &scenario).await;
    gateway.shutdown().await;
    outcome.map(|()| ExitCode::SUCCESS)
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
