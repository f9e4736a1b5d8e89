//! `mcpgate serve`: the gateway as an HTTP service. Prints where to go and how to
//! authenticate; Ctrl-C (or SIGTERM) drains in-flight requests and reaps every upstream.

use std::{io::Write as _, net::SocketAddr, process::ExitCode, sync::Arc};

use anyhow::Context as _;
use mcpgate::{
    config::{AuthConfig, Env},
    gateway::{Gateway, GatewayOptions},
    server::{AppState, auth::Authenticator},
};
use tokio::net::TcpListener;

pub async fn run(
    explicit: Option<&std::path::Path>,
    listen: Option<SocketAddr>,
) -> anyhow::Result<ExitCode> {
    let loaded = super::load(explicit)?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let mut config = loaded.config;
    if let Some(listen) = listen {
        config.service = config.service.with_listen(listen)?;
    }
    let settle = super::settle_deadline(&config);
    let env = Env::from_process();
    let service = Arc::new(config.service.clone());
    let auth = Authenticator::new(&service.auth, &env, service.listen, service.production)
        .await
        .context("authentication is not set up safely")?;
    let listener = TcpListener::bind(service.listen)
        .await
        .with_context(|| format!("cannot listen on {}", service.listen))?;
    let addr = listener.local_addr()?;
    let gateway = Gateway::start(
        config,
        GatewayOptions {
            env,
            supervisor: std::env::current_exe().ok(),
            ..GatewayOptions::default()
        },
    )
    .await?;
    // Requests wait in the listen queue meanwhile: what the banner promises works at once.
    gateway.wait_ready(settle).await;
    banner(addr, &service.auth, auth.dev_token())?;
    let state = AppState::new(gateway.clone(), Arc::new(auth), service);
    let result = mcpgate::server::serve(listener, state, async {
        let signal = super::shutdown_signal().await;
        eprintln!("{signal}: shutting down");
    })
    .await;
    gateway.shutdown().await;
    result.context("the HTTP server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// Tells a new user where the API is and which token to send.
fn banner(addr: SocketAddr, auth: &AuthConfig, dev_token: Option<&str>) -> std::io::Result<()> {
    let base = format!("http://{addr}");
    let mut out = std::io::stdout().lock();
    writeln!(out, "mcpgate is serving on {base}")?;
    writeln!(out, "  REST API   {base}/api/v1/mcp/tools")?;
    writeln!(
        out,
        "  MCP        {base}/mcp   (Streamable HTTP, same bearer token)"
    )?;
    writeln!(out, "  health     {base}/healthz   readiness {base}/readyz")?;
    match (auth, dev_token) {
        (AuthConfig::Dev, Some(token)) => {
            writeln!(out, "  token      {token}")?;
            writeln!(
                out,
                "  try        curl -H 'Authorization: Bearer {token}' {base}/api/v1/mcp/tools"
            )?;
        }
        (AuthConfig::None, _) => {
            writeln!(
                out,
                "  WARNING    authentication is OFF (auth mode \"none\", loopback only)"
            )?;
        }
        _ => writeln!(out, "  auth       Authorization: Bearer <JWT>")?,
    }
    writeln!(out, "Press Ctrl-C to stop.")?;
    out.flush()
}
