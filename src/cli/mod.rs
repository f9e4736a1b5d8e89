//! Command-line parsing and dispatch: `tools`, `call`, `chat`, `config check`, `demo-server`,
//! and the hidden helpers (`supervise`, `fixture`, `conformance-client`).

mod audit;
#[cfg(feature = "testkit")]
mod bench;
mod call;
mod chat;
#[cfg(feature = "testkit")]
mod conformance;
mod import;
mod pin;
mod scan;
mod serve;
mod tools;
mod usage;

use std::{ffi::OsString, path::PathBuf, process::ExitCode, time::Duration};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use mcpgate::{
    config::{self, Env, Loaded},
    gateway::{Gateway, GatewayOptions},
};

/// A secure gateway between LLM applications and MCP tool servers.
#[derive(Debug, Parser)]
#[command(name = "mcpgate", version, about)]
struct Cli {
    /// Configuration file: TOML, or an `mcpServers` JSON file. Default: ./mcpgate.toml if it
    /// exists, else the embedded defaults (the built-in demo server).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Log filter (tracing env-filter syntax); also read from MCPGATE_LOG.
    #[arg(long, global = true, env = "MCPGATE_LOG", default_value = "warn")]
    log: String,
    /// Write logs as JSON lines.
    #[arg(long, global = true)]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway as an HTTP service: REST API, health, audit (see the banner it prints).
    Serve {
        /// Address to listen on (also MCPGATE_LISTEN; default 127.0.0.1:8080).
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// List the merged tool catalog and each server's state.
    Tools {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Call a tool: `mcpgate call server.tool '{"arg": 1}'`.
    Call {
        /// Canonical id (`server.tool`) or function name (`server_tool`).
        tool: String,
        /// Arguments as a JSON object.
        #[arg(default_value = "{}")]
        arguments: String,
        /// Print the whole result as JSON.
        #[arg(long)]
        json: bool,
        /// Approve a confirmation without asking (the call is still audited as approved).
        #[arg(long)]
        yes: bool,
    },
    /// Ask the configured model (`[llm]`, or OPENAI_BASE_URL and MCPGATE_MODEL) one question;
    /// its tool calls go through the gateway.
    Chat(chat::ChatArgs),
    /// Record every tool's fingerprint in the pin file (or compare with `--check`).
    Pin {
        /// Compare the live catalog with the pin file; exit 1 on any difference.
        #[arg(long, conflicts_with = "tool")]
        check: bool,
        /// Pin only this tool (`server.tool`): accept its live definition, audited as yours.
        #[arg(long, value_name = "SERVER.TOOL")]
        tool: Option<String>,
    },
    /// Show the audit log: who called what, with whose approval.
    Audit(audit::AuditArgs),
    /// Sum the audit log and chat turns: calls, errors, latency, confirmations, tokens, cost.
    Usage(usage::UsageArgs),
    /// Scan tool definitions for poisoning: a file of definitions, or `--server ID`'s live
    /// tools. Exit 1 when any has a high-severity finding.
    Scan(scan::ScanArgs),
    /// Import the MCP servers configured in Claude Desktop, Cursor, VS Code or Windsurf (or a
    /// file): shown, and written as mcpgate servers with secrets as `${VAR}` references.
    Import(import::ImportArgs),
    /// Configuration commands.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Run the built-in demo MCP server on stdin/stdout.
    DemoServer,
    /// Run a stdio server under supervision (used by the gateway itself).
    #[command(hide = true)]
    Supervise {
        #[arg(long)]
        parent: u32,
        /// The sandbox to enter first (JSON, from the gateway).
        #[arg(long)]
        sandbox: Option<String>,
        #[arg(last = true, required = true)]
        command: Vec<OsString>,
    },
    /// Run an edge-case MCP server on stdin/stdout (used by the tests).
    #[cfg(feature = "testkit")]
    #[command(hide = true)]
    Fixture {
        name: String,
        /// Serve Streamable HTTP at `/mcp` on this loopback address instead of stdio.
        #[arg(long, value_name = "ADDR")]
        http: Option<std::net::SocketAddr>,
    },
    /// The MCP client entry point the conformance suite drives: connects to URL and runs the
    /// scenario named in MCP_CONFORMANCE_SCENARIO.
    #[cfg(feature = "testkit")]
    #[command(hide = true)]
    ConformanceClient { url: String },
    /// Benchmark the gateway against direct calls and peer gateways (see scripts/bench).
    #[cfg(feature = "testkit")]
    #[command(hide = true)]
    Bench(Box<bench::BenchArgs>),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate the configuration and report every problem with its field path.
    Check,
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Supervise {
        parent,
        sandbox,
        command,
    } = cli.command
    {
        // Synchronous on purpose: no runtime, no threads but the one that waits for signals
        // (started after the sandbox, which Landlock applies to the calling thread).
        let mut command = command.into_iter();
        let program = command.next().unwrap_or_default();
        let code = mcpgate::upstream::supervisor::run(
            parent,
            sandbox.as_deref(),
            program,
            command.collect(),
        );
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // `serve` starts logging once its configuration is read (`[server] log_json`).
    if !matches!(cli.command, Command::Serve { .. }) {
        init_logging(&cli.log, cli.log_json);
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if matches!(cli.command, Command::Serve { .. }) {
        // The lanes serve; this runtime keeps the upstreams, supervision and signals.
        runtime.worker_threads(1);
    }
    let runtime = match runtime.enable_all().build() {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(70);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(filter: &str, json: bool) {
    // rmcp logs whole JSON-RPC messages (arguments, results) at debug and trace: keep it at
    // warn unless the filter names it, so raising our own level never logs call contents.
    let filter = if filter.contains("rmcp") {
        filter.to_owned()
    } else {
        format!("{filter},rmcp=warn")
    };
    // Its OAuth client logs authorization codes at debug: capped at info whatever is asked
    // (the last directive for a target wins).
    let filter = format!("{filter},rmcp::transport::auth=info");
    let filter = tracing_subscriber::EnvFilter::try_new(&filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve { listen } => {
            serve::run(cli.config.as_deref(), listen, &cli.log, cli.log_json).await
        }
        Command::DemoServer => {
            mcpgate::demo::serve_stdio().await?;
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "testkit")]
        Command::Fixture { name, http } => {
            let fixture = mcpgate::fixtures::Fixture::parse(&name)
                .with_context(|| format!("no fixture named `{name}`"))?;
            match http {
                None => mcpgate::fixtures::serve_stdio(fixture).await?,
                Some(addr) => {
                    anyhow::ensure!(addr.ip().is_loopback(), "fixtures serve loopback only");
                    let listener = tokio::net::TcpListener::bind(addr).await?;
                    let stop = tokio_util::sync::CancellationToken::new();
                    let on_signal = stop.clone();
                    tokio::spawn(async move {
                        shutdown_signal().await;
                        on_signal.cancel();
                    });
                    mcpgate::fixtures::serve_http(fixture, listener, stop).await?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        #[cfg(feature = "testkit")]
        Command::ConformanceClient { url } => conformance::run(&url).await,
        #[cfg(feature = "testkit")]
        Command::Bench(args) => {
            // Stopped by a signal, the run is dropped, and with it every process it started
            // (each is killed on drop): the gateways under test, the upstreams, the peers.
            tokio::select! {
                outcome = bench::run(*args) => outcome,
                signal = shutdown_signal() => {
                    eprintln!("{signal}: benchmark stopped");
                    Ok(ExitCode::from(130))
                }
            }
        }
        Command::Config {
            command: ConfigCommand::Check,
        } => {
            let loaded = load(cli.config.as_deref())?;
            // What the gateway would refuse at start, checked as whoever runs the check.
            let problems = loaded
                .config
                .sandbox_problems(nix::unistd::geteuid().as_raw());
            if !problems.is_empty() {
                return Err(config::ConfigError { problems }.into());
            }
            for warning in &loaded.warnings {
                println!("warning: {warning}");
            }
            let shared = &loaded.config.shared;
            if shared.any() {
                // Reached as `serve` would reach them, now, from this environment; nothing
                // is written to them.
                let env = config::Env::from_process();
                let answers = mcpgate::gateway::SharedStores::probe(shared, &env).await;
                let answers = match answers {
                    Ok(answers) => answers,
                    Err(err) if shared.require_shared => anyhow::bail!("{err}"),
                    Err(err) => {
                        println!("warning: {err}");
                        Vec::new()
                    }
                };
                for (name, answer) in &answers {
                    match answer {
                        Ok(()) => println!("{name}: answers"),
                        Err(err) => println!("{name}: {err}"),
                    }
                }
                if shared.require_shared && answers.iter().any(|(_, a)| a.is_err()) {
                    anyhow::bail!(
                        "a shared store does not answer and `state.require_shared` is set"
                    );
                }
            }
            println!(
                "configuration OK ({}): {} server(s)",
                source_name(&loaded.source),
                loaded.config.servers.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Tools { json } => {
            let (gateway, settle) = start(cli.config.as_deref()).await?;
            let work = async {
                gateway.wait_ready(settle).await;
                tools::print(&gateway, json).map(|()| ExitCode::SUCCESS)
            };
            until_signal(&gateway, work).await
        }
        Command::Call {
            tool,
            arguments,
            json,
            yes,
        } => {
            let (gateway, settle) = start(cli.config.as_deref()).await?;
            let arguments = match call::parse_arguments(&gateway, &arguments) {
                Ok(arguments) => arguments,
                Err(err) => {
                    gateway.shutdown().await;
                    return Err(err);
                }
            };
            let work = async {
                gateway.wait_ready(settle).await;
                Ok(call::run(&gateway, &tool, arguments, json, yes).await)
            };
            until_signal(&gateway, work).await
        }
        Command::Chat(args) => {
            let (gateway, settle) = start(cli.config.as_deref()).await?;
            let work = chat::run(&gateway, settle, args);
            until_signal(&gateway, work).await
        }
        Command::Pin { check, tool } => {
            let (gateway, settle) = start(cli.config.as_deref()).await?;
            let work = async {
                gateway.wait_ready(settle).await;
                pin::run(&gateway, check, tool.as_deref()).await
            };
            until_signal(&gateway, work).await
        }
        Command::Audit(args) => {
            let loaded = load(cli.config.as_deref())?;
            audit::run(&loaded.config, args).await
        }
        Command::Usage(args) => {
            let loaded = load(cli.config.as_deref())?;
            usage::run(&loaded.config, args).await
        }
        Command::Import(args) => import::run(&args),
        Command::Scan(args) => match &args.server {
            None => scan::scan_file(&args),
            Some(server) => {
                let (gateway, settle) = start(cli.config.as_deref()).await?;
                let server = server.clone();
                let work = async {
                    gateway.wait_ready(settle).await;
                    scan::scan_server(&gateway, &server, args.json)
                };
                until_signal(&gateway, work).await
            }
        },
        Command::Supervise { .. } => Ok(ExitCode::SUCCESS),
    }
}

fn source_name(source: &config::ConfigSource) -> String {
    match source {
        config::ConfigSource::File(path) => path.display().to_string(),
        config::ConfigSource::Embedded => "embedded defaults".to_owned(),
    }
}

fn load(explicit: Option<&std::path::Path>) -> anyhow::Result<Loaded> {
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    let exe = std::env::current_exe().context("cannot locate the mcpgate binary")?;
    // Without a file, state (audit, confirmations) goes to ./mcpgate.db.
    Ok(config::load_with_embedded_state(
        explicit,
        &cwd,
        &Env::from_process(),
        &exe,
        config::StateConfig::default(),
    )?)
}

/// Runs `work`, or stops at SIGINT/SIGTERM; either way the gateway is shut down after, so
/// every upstream process is reaped.
async fn until_signal(
    gateway: &Gateway,
    work: impl Future<Output = anyhow::Result<ExitCode>>,
) -> anyhow::Result<ExitCode> {
    let outcome = tokio::select! {
        outcome = work => outcome,
        signal = shutdown_signal() => {
            eprintln!("{signal}: shutting down");
            Ok(ExitCode::from(130))
        }
    };
    gateway.shutdown().await;
    outcome
}

/// Resolves at the first SIGINT or SIGTERM, naming it.
async fn shutdown_signal() -> &'static str {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = tokio::signal::ctrl_c() => "SIGINT",
        },
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            "SIGINT"
        }
    }
}

/// Loads configuration and starts the gateway; returns it with how long to wait for every
/// server's first try.
async fn start(explicit: Option<&std::path::Path>) -> anyhow::Result<(Gateway, Duration)> {
    let loaded = load(explicit)?;
    for warning in &loaded.warnings {
        tracing::warn!("{warning}");
    }
    let settle = loaded.config.settle_deadline();
    let gateway = Gateway::start(
        loaded.config,
        GatewayOptions {
            env: Env::from_process(),
            supervisor: std::env::current_exe().ok(),
            ..GatewayOptions::default()
        },
    )
    .await?;
    Ok((gateway, settle))
}
