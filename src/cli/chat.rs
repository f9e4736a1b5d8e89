//! `mcpgate chat "question"`: one turn of the agent loop in this process, through the same
//! gate as every caller. Streams the answer; shows each tool call, with a spinner at a
//! terminal, and its outcome; asks y/N for write tools. `--json` prints the events.

use std::{
    io::{BufRead as _, IsTerminal as _, Write as _},
    process::ExitCode,
    time::{Duration, SystemTime},
};

use anyhow::Context as _;
use futures::StreamExt as _;
use mcpgate::{
    agent::{
        Agent, AgentEvent, ApprovalPolicy, Decision, Metering, ToolChoice, TurnOptions,
        UserTimeZone,
        llm::{LlmClient, Message},
        models,
    },
    gateway::Gateway,
    policy::CallContext,
};
use tokio::sync::mpsc;

/// Exit code of a turn that ended with an error.
const TURN_FAILED: u8 = 1;

/// How often the spinner turns.
const SPIN_EVERY: Duration = Duration::from_millis(100);

/// Characters of arguments and results shown on a tool line.
const SHOWN_CHARS: usize = 120;

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

#[derive(Debug, clap::Args)]
pub struct ChatArgs {
    /// What to ask.
    question: String,
    /// Print each event as a JSON line instead of text.
    #[arg(long)]
    json: bool,
    /// Approve every write tool call without asking (each is still audited as approved).
    #[arg(long)]
    yes: bool,
    /// Make the first round call this function (its model-visible name, e.g. `demo_echo`);
    /// small models call tools reliably only when forced.
    #[arg(long, value_name = "FUNCTION")]
    tool_choice: Option<String>,
    /// The time zone the model is told (IANA name or offset); default: this machine's.
    #[arg(long, value_name = "ZONE")]
    time_zone: Option<String>,
    /// Offer the model only this server's tools (repeatable); default: every server's.
    #[arg(long = "server", value_name = "ID")]
    servers: Vec<String>,
    /// The model to ask, by its name in `[[llm.models]]`; default: `[llm] default`. A turn
    /// that offers tools on a model without them goes to a model with tools.
    #[arg(long, value_name = "NAME")]
    model: Option<String>,
}

pub async fn run(gateway: &Gateway, settle: Duration, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let config = gateway.config();
    if config.llm.is_none() {
        anyhow::bail!(
            "no model is configured: set [llm] in the configuration, or OPENAI_BASE_URL and \
             MCPGATE_MODEL (and OPENAI_API_KEY if the server needs one)"
        );
    }
    let time_zone = match &args.time_zone {
        Some(zone) => UserTimeZone::parse(zone)?,
        None => UserTimeZone::system(),
    };
    gateway.wait_ready(settle).await;
    let ctx = CallContext::local();
    let servers = if args.servers.is_empty() {
        None
    } else {
        Some(gateway.selectable_servers(&ctx, &args.servers).await?)
    };
    let offers_tools = models::offers_tools(gateway, &ctx, servers.as_deref()).await;
    let choice = models::choose(config, &ctx.tenant, args.model.as_deref(), offers_tools).map_err(
        |err| match err {
            models::ModelError::NotAvailable(_) => {
                let names: Vec<String> = models::available(config, &ctx.tenant)
                    .into_iter()
                    .map(|m| m.name)
                    .collect();
                anyhow::anyhow!("{err} (configured: {})", names.join(", "))
            }
            models::ModelError::NoModel => anyhow::anyhow!(err),
        },
    )?;
    if let Some(asked) = &choice.routed_from {
        eprintln!(
            "note: {asked} has no tools; {} answers this turn",
            choice.model.name
        );
    }
    let llm = choice.model.llm.clone();
    let client = LlmClient::new(llm.clone()).context("cannot set up the model client")?;
    let agent = Agent::builder(client, gateway.clone())
        .config(config.agent.clone())
        .tools_supported(llm.tools)
        .build();
    let options = TurnOptions {
        servers,
        time_zone,
        tool_choice: args
            .tool_choice
            .clone()
            .map_or(ToolChoice::Auto, ToolChoice::Force),
        approvals: if args.yes {
            ApprovalPolicy::ApproveAll
        } else {
            ApprovalPolicy::Ask
        },
        ..TurnOptions::default()
    };
    let mut events = agent.run_stream(ctx.clone(), vec![Message::user(&args.question)], options);
    let mut metering = Metering::new(gateway.usage_store().clone(), &choice.model, &ctx);
    let mut screen = Screen::new(args.json, std::io::stdout().is_terminal());
    let mut answers = Answers::default();
    let mut spin = tokio::time::interval(SPIN_EVERY);
    let mut failed = false;
    loop {
        let event = tokio::select! {
            event = events.next() => event,
            _ = spin.tick(), if screen.spinning() => {
                screen.spin();
                continue;
            }
        };
        let Some(event) = event else { break };
        metering.observe(&event);
        screen.show(&event);
        match &event {
            AgentEvent::ApprovalRequired {
                call_id,
                tool,
                arguments,
                expires_at,
                ..
            } => {
                let decision = answers.ask(tool, arguments, expires_at).await;
                if let Err(err) = agent.approvals().decide(&ctx, call_id, decision) {
                    eprintln!("note: the decision came too late: {err}");
                }
            }
            AgentEvent::Error { .. } => failed = true,
            _ => {}
        }
    }
    screen.finish();
    metering.finish().await;
    Ok(if failed {
        ExitCode::from(TURN_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}

/// Takes the user's y/N answers from the terminal.
#[derive(Default)]
struct Answers {
    /// Lines typed at the terminal, read by one thread started at the first question.
    lines: Option<mpsc::Receiver<String>>,
}

impl Answers {
    async fn ask(
        &mut self,
        tool: &str,
        arguments: &serde_json::Value,
        expires_at: &str,
    ) -> Decision {
        if !std::io::stdin().is_terminal() {
            eprintln!(
                "not approved: {tool} needs approval and standard input is not a terminal \
                 (rerun with --yes to approve)"
            );
            return Decision::Deny;
        }
        let lines = self.lines.get_or_insert_with(read_lines);
        // Lines typed before the question are not answers to it. They are dropped before it
        // is shown: a prompt answer typed at once must not be taken for one of them.
        while lines.try_recv().is_ok() {}
        let shown = serde_json::to_string_pretty(arguments).unwrap_or_default();
        eprint!("{tool} needs your approval. It will run with:\n{shown}\nRun it? [y/N] ");
        let _ = std::io::stderr().flush();
        let wait = expiry(expires_at);
        match tokio::time::timeout(wait, lines.recv()).await {
            Ok(Some(line)) if matches!(line.trim(), "y" | "Y" | "yes") => Decision::Approve,
            Ok(_) => Decision::Deny,
            Err(_) => {
                eprintln!("\nno answer before the approval expired: not run");
                Decision::Deny
            }
        }
    }
}

/// Time left until an RFC 3339 instant (none when it cannot be read).
fn expiry(expires_at: &str) -> Duration {
    expires_at
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| SystemTime::try_from(t).ok())
        .and_then(|t| t.duration_since(SystemTime::now()).ok())
        .unwrap_or_default()
}

/// Reads terminal lines on a thread of its own: a read of the terminal cannot be cancelled,
/// and a plain thread (unlike the runtime's blocking pool) does not hold the exit up.
fn read_lines() -> mpsc::Receiver<String> {
    let (sender, receiver) = mpsc::channel(4);
    let spawned = std::thread::Builder::new()
        .name("stdin".to_owned())
        .spawn(move || {
            for line in std::io::stdin().lock().lines() {
                let Ok(line) = line else { return };
                if sender.blocking_send(line).is_err() {
                    return;
                }
            }
        });
    if let Err(err) = spawned {
        eprintln!("cannot read the terminal: {err}");
    }
    receiver
}

/// What the terminal shows: answer text as it streams, a line per tool call and outcome,
/// and (at a terminal) a spinner while calls run.
struct Screen {
    json: bool,
    tty: bool,
    /// Calls running: id and tool.
    running: Vec<(String, String)>,
    frame: usize,
    spinner_drawn: bool,
    /// The cursor is not at the start of a line.
    mid_line: bool,
    /// Answer text was streamed in the current round.
    streamed: bool,
}

impl Screen {
    fn new(json: bool, tty: bool) -> Screen {
        Screen {
            json,
            tty,
            running: Vec::new(),
            frame: 0,
            spinner_drawn: false,
            mid_line: false,
            streamed: false,
        }
    }

    fn spinning(&self) -> bool {
        self.tty && !self.json && !self.running.is_empty()
    }

    fn show(&mut self, event: &AgentEvent) {
        if self.json {
            match serde_json::to_string(event) {
                Ok(line) => println!("{line}"),
                Err(err) => eprintln!("error: cannot print an event: {err}"),
            }
            return;
        }
        match event {
            AgentEvent::RoundStart { .. } => self.streamed = false,
            AgentEvent::TextDelta { text } => {
                self.clear_spinner();
                print!("{text}");
                self.mid_line = !text.ends_with('\n');
                self.streamed = true;
            }
            AgentEvent::ToolCall {
                call_id,
                tool,
                arguments,
                ..
            } => {
                self.line(&format!("→ {tool} {}", cut(&arguments.to_string())));
                self.running.push((call_id.clone(), tool.clone()));
            }
            AgentEvent::ApprovalRequired { .. } => self.end_line(),
            AgentEvent::ToolResult {
                call_id,
                tool,
                result,
                elapsed_ms,
            } => {
                self.done(call_id);
                let text = result["content"]
                    .as_array()
                    .and_then(|parts| parts.iter().find_map(|p| p["text"].as_str()))
                    .map(|t| format!(": {}", cut(t)))
                    .unwrap_or_default();
                self.line(&format!("✓ {tool} ({elapsed_ms} ms){text}"));
            }
            AgentEvent::ToolError {
                call_id,
                tool,
                code,
                message,
                elapsed_ms,
            } => {
                self.done(call_id);
                self.line(&format!(
                    "✗ {tool} ({elapsed_ms} ms) error[{code}]: {}",
                    cut(message)
                ));
            }
            AgentEvent::Final { message, .. } => {
                self.clear_spinner();
                if !self.streamed {
                    print!("{message}");
                    self.mid_line = !message.ends_with('\n');
                }
            }
            AgentEvent::Error { code, message } => {
                self.end_line();
                eprintln!("error[{code}]: {message}");
            }
            AgentEvent::ReasoningDelta { .. }
            | AgentEvent::ToolEta { .. }
            | AgentEvent::ToolProgress { .. }
            | AgentEvent::Done => {}
        }
        let _ = std::io::stdout().flush();
    }

    fn done(&mut self, call_id: &str) {
        self.running.retain(|(id, _)| id != call_id);
    }

    /// A whole line, below any streamed text and instead of the spinner.
    fn line(&mut self, text: &str) {
        self.end_line();
        println!("{text}");
    }

    fn end_line(&mut self) {
        self.clear_spinner();
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
    }

    fn spin(&mut self) {
        if !self.spinning() {
            return;
        }
        if self.mid_line {
            println!();
            self.mid_line = false;
        }
        self.frame = (self.frame + 1) % SPINNER.len();
        let tools: Vec<&str> = self.running.iter().map(|(_, t)| t.as_str()).collect();
        print!("\r\x1b[2K{} {}", SPINNER[self.frame], tools.join(", "));
        let _ = std::io::stdout().flush();
        self.spinner_drawn = true;
    }

    fn clear_spinner(&mut self) {
        if self.spinner_drawn {
            print!("\r\x1b[2K");
            self.spinner_drawn = false;
        }
    }

    fn finish(&mut self) {
        if !self.json {
            self.end_line();
        }
        let _ = std::io::stdout().flush();
    }
}

/// The first line of `text`, at most [`SHOWN_CHARS`] characters.
fn cut(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut shown: String = line.chars().take(SHOWN_CHARS).collect();
    if shown.len() < text.len() {
        shown.push('…');
    }
    shown
}
