//! `mcpgate serve`: the gateway as an HTTP service. Prints where to go and how to
//! authenticate; SIGHUP reloads the configuration; Ctrl-C (or SIGTERM) drains in-flight
//! requests and reaps every upstream.
//!
//! HTTP is served on [lanes](mcpgate::lane) (`[server] threads`, one per core by default);
//! the runtime this runs on keeps the rest: upstream connections and their supervision,
//! reloads, signals. The lanes outlive the gateway's shutdown, since tasks a request left
//! on them may still be needed until the upstreams are closed.

use std::{io::Write as _, net::SocketAddr, path::Path, process::ExitCode, sync::Arc};

use anyhow::Context as _;
use mcpgate::{
    config::{self, AuthConfig, Env},
    gateway::{Gateway, GatewayOptions},
    lane::Lanes,
    server::{
        AppState,
        auth::Authenticator,
        reload::{ReloadError, ReloadSource, reload},
        sandbox::Sandbox,
    },
};
use tokio::{
    net::TcpListener,
    signal::unix::{Signal, SignalKind, signal},
};
use tokio_util::sync::CancellationToken;

pub async fn run(
    explicit: Option<&std::path::Path>,
    listen: Option<SocketAddr>,
    log_filter: &str,
    log_json: bool,
) -> anyhow::Result<ExitCode> {
    // Caught from the start: a SIGHUP sent once the banner shows must reload, not kill.
    let hangups = signal(SignalKind::hangup()).context("cannot catch SIGHUP")?;
    let loaded = super::load(explicit)?;
    super::init_logging(log_filter, log_json || loaded.config.service.log_json);
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let mut config = loaded.config;
    if let Some(listen) = listen {
        config.service = config.service.with_listen(listen)?;
    }
    let settle = config.settle_deadline();
    let env = Env::from_process();
    let service = Arc::new(config.service.clone());
    let auth = Authenticator::new(&service.auth, &env, service.listen, service.production)
        .await
        .context("authentication is not set up safely")?;
    let listener = TcpListener::bind(service.listen)
        .await
        .with_context(|| format!("cannot listen on {}", service.listen))?
        .into_std()?;
    let addr = listener.local_addr()?;
    // The MCP Apps sandbox: another port, so another origin than the page's.
    let apps_listen = service
        .apps_listen
        .unwrap_or_else(|| SocketAddr::new(addr.ip(), 0));
    let sandbox_listener = TcpListener::bind(apps_listen)
        .await
        .with_context(|| format!("cannot listen on {apps_listen} for the apps sandbox"))?;
    let sandbox = Sandbox {
        port: sandbox_listener.local_addr()?.port(),
        origin: service.apps_origin.clone(),
    };
    let lanes = Lanes::start(service.threads).context("cannot start the serving threads")?;
    let options = GatewayOptions {
        env,
        supervisor: std::env::current_exe().ok(),
        clock: clock(),
    };
    let gateway = Gateway::start(config, options.clone()).await?;
    // Requests wait in the listen queue meanwhile: what the banner promises works at once.
    gateway.wait_ready(settle).await;
    let apps_at = sandbox
        .origin_for(Some(&addr.to_string()))
        .unwrap_or_default();
    banner(
        (addr, &apps_at),
        &service.auth,
        auth.dev_token(),
        gateway.config(),
    )?;
    // Read again exactly as `super::load` read it.
    let source = ReloadSource {
        explicit: explicit.map(Path::to_path_buf),
        cwd: std::env::current_dir().context("cannot read the working directory")?,
        exe: std::env::current_exe().context("cannot locate the mcpgate binary")?,
        embedded_state: config::StateConfig::default(),
        listen,
        options,
    };
    let state = AppState::new(gateway, Arc::new(auth), service)
        .with_reload(source)
        .with_sandbox(sandbox);
    let stop_sandbox = CancellationToken::new();
    let sandbox_served = tokio::spawn(mcpgate::server::sandbox::serve(
        sandbox_listener,
        stop_sandbox.clone(),
    ));
    let live = state.gateway.clone();
    let stop_reloads = CancellationToken::new();
    let reloads = tokio::spawn(reload_on_hangup(
        state.clone(),
        hangups,
        stop_reloads.clone(),
    ));
    let result = mcpgate::server::serve_on(&lanes, listener, state, async {
        let signal = super::shutdown_signal().await;
        eprintln!("{signal}: shutting down");
    })
    .await;
    stop_reloads.cancel();
    let _ = reloads.await;
    stop_sandbox.cancel();
    let _ = sandbox_served.await;
    live.shutdown().await;
    live.current().stores().shared.close();
    lanes.stop().await;
    result.context("the HTTP server failed")?;
    Ok(ExitCode::SUCCESS)
}

/// The wall clock. Test builds read `MCPGATE_TESTKIT_CLOCK_OFFSET_SECS` (signed seconds), so
/// a test can run one instance of several with its clock set wrong.
fn clock() -> mcpgate::policy::Clock {
    #[cfg(feature = "testkit")]
    if let Some(offset) = std::env::var("MCPGATE_TESTKIT_CLOCK_OFFSET_SECS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
    {
        return mcpgate::policy::Clock::offset(offset);
    }
    mcpgate::policy::Clock::system()
}

/// Reloads the configuration at each SIGHUP, until `stop`.
async fn reload_on_hangup(state: AppState, mut hangups: Signal, stop: CancellationToken) {
    let Some(source) = state.reload.clone() else {
        return;
    };
    loop {
        tokio::select! {
            received = hangups.recv() => if received.is_none() { return },
            () = stop.cancelled() => return,
        }
        match reload(&state, &source).await {
            Ok(outcome) => eprintln!(
                "SIGHUP: configuration reloaded ({} server(s) added, {} removed, {} tools)",
                outcome.added.len(),
                outcome.removed.len(),
                outcome.tools
            ),
            Err(ReloadError::Invalid { problems }) => {
                eprintln!("SIGHUP: configuration not reloaded; the running one is kept:");
                for problem in problems {
                    eprintln!("  {problem}");
                }
            }
            Err(err) => eprintln!("SIGHUP: configuration not reloaded: {err}"),
        }
    }
}

/// Tells a new user where the API is and which token to send.
fn banner(
    (addr, apps_at): (SocketAddr, &str),
    auth: &AuthConfig,
    dev_token: Option<&str>,
    config: &mcpgate::config::Config,
) -> std::io::Result<()> {
    let base = format!("http://{addr}");
    let mut out = std::io::stdout().lock();
    writeln!(out, "mcpgate is serving on {base}")?;
    let servers: Vec<String> = config
        .servers
        .iter()
        .map(|s| format!("{} (from {})", s.id, s.source.as_str()))
        .collect();
    if servers.is_empty() {
        writeln!(out, "  servers    none configured")?;
    } else {
        writeln!(out, "  servers    {}", servers.join(", "))?;
    }
    writeln!(out, "  page       {base}/")?;
    writeln!(
        out,
        "  apps       {apps_at}   (the page's MCP Apps sandbox, another origin)"
    )?;
    writeln!(out, "  REST API   {base}/api/v1/mcp/tools")?;
    writeln!(
        out,
        "  MCP        {base}/mcp   (Streamable HTTP, same bearer token)"
    )?;
    writeln!(out, "  health     {base}/healthz   readiness {base}/readyz")?;
    writeln!(
        out,
        "  API docs   {base}/api/v1/openapi.json   metrics {base}/metrics"
    )?;
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
