//! `mcpgate call server.tool '<json>'`: one call through the gateway; prints the result or a
//! typed, readable error.

use std::process::ExitCode;

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use mcpgate::{
    gateway::{Gateway, GatewayError, Part},
    policy::CallContext,
};
use serde_json::Value;

/// Exit code for a call that reached the gateway but did not succeed.
const CALL_FAILED: u8 = 1;

/// Parses the arguments as the gate does: size cap, duplicate keys refused, an object.
pub fn parse_arguments(gateway: &Gateway, raw: &str) -> anyhow::Result<Value> {
    let limit = gateway.config().call_limits.max_argument_bytes;
    let map = mcpgate::policy::parse_arguments(raw, limit)
        .map_err(|e| anyhow::anyhow!("the arguments are not acceptable: {e}"))?;
    Ok(Value::Object(map))
}

pub async fn run(
    gateway: &Gateway,
    tool: &str,
    arguments: Value,
    as_json: bool,
    yes: bool,
) -> ExitCode {
    let ctx = CallContext::local();
    let mut outcome = gateway.call_tool(&ctx, tool, arguments.clone(), None).await;
    if let Err(GatewayError::ConfirmationRequired {
        confirmation_id,
        tool: canonical,
        ..
    }) = &outcome
    {
        let approved = yes || confirm_at_terminal(canonical, &arguments);
        let ctx = ctx.next_request();
        if approved {
            outcome = match gateway.approve(&ctx, confirmation_id).await {
                Ok(approval) => {
                    gateway
                        .call_tool(&ctx.next_request(), tool, arguments, Some(&approval.token))
                        .await
                }
                Err(err) => Err(err),
            };
        } else {
            if let Err(err) = gateway.deny(&ctx, confirmation_id).await {
                eprintln!("error[{}]: {err}", err.code());
            }
            eprintln!("not approved: {canonical} was not run (rerun with --yes to approve)");
            return ExitCode::from(CALL_FAILED);
        }
    }
    match outcome {
        Ok(output) => {
            if as_json {
                match serde_json::to_string_pretty(&output.to_json()) {
                    Ok(text) => println!("{text}"),
                    Err(err) => eprintln!("error: cannot print the result: {err}"),
                }
                return ExitCode::SUCCESS;
            }
            for part in &output.content {
                match part {
                    Part::Text { text } => println!("{text}"),
                    Part::Image { mime_type, data } | Part::Audio { mime_type, data } => {
                        println!("[{mime_type}, {} bytes of base64]", data.len())
                    }
                    Part::Resource {
                        uri,
                        text: Some(text),
                        ..
                    } => println!("[{uri}]\n{text}"),
                    Part::Resource { uri, .. } => println!("[resource {uri}]"),
                    Part::ResourceLink { uri, name, .. } => println!("[link {name}: {uri}]"),
                    Part::Omitted {
                        kind,
                        bytes,
                        reason,
                        ..
                    } => {
                        println!("[{kind} of {bytes} bytes omitted: {reason}]")
                    }
                }
            }
            if let Some(structured) = &output.structured {
                println!("{structured}");
            }
            if output.truncated {
                eprintln!("note: the result was truncated to fit max_result_bytes");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error[{}]: {err}", err.code());
            ExitCode::from(CALL_FAILED)
        }
    }
}

/// Asks at the terminal whether to run a call that needs confirmation; no terminal, no.
fn confirm_at_terminal(tool: &str, arguments: &Value) -> bool {
    if !std::io::stdin().is_terminal() {
        return false;
    }
    let shown = serde_json::to_string_pretty(arguments).unwrap_or_default();
    eprint!("{tool} needs confirmation. It will run with:\n{shown}\nRun it? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    if std::io::stdin().lock().read_line(&mut answer).is_err() {
        return false;
    }
    matches!(answer.trim(), "y" | "Y" | "yes")
}
