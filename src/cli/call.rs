//! `mcpgate call server.tool '<json>'`: one call through the gateway; prints the result or a
//! typed, readable error.

use std::process::ExitCode;

use anyhow::Context as _;
use mcpgate::gateway::Gateway;
use rmcp::model::ContentBlock;
use serde_json::Value;

/// Exit code for a call that reached the gateway but did not succeed.
const CALL_FAILED: u8 = 1;

pub fn parse_arguments(raw: &str) -> anyhow::Result<Value> {
    let value: Value = serde_json::from_str(raw).context("the arguments are not valid JSON")?;
    anyhow::ensure!(
        value.is_object(),
        "the arguments must be a JSON object, like '{{\"a\": 1}}'"
    );
    Ok(value)
}

pub async fn run(gateway: &Gateway, tool: &str, arguments: Value, as_json: bool) -> ExitCode {
    match gateway.call_tool(tool, arguments).await {
        Ok(output) => {
            if as_json {
                match serde_json::to_string_pretty(&output.result) {
                    Ok(text) => println!("{text}"),
                    Err(err) => eprintln!("error: cannot print the result: {err}"),
                }
                return ExitCode::SUCCESS;
            }
            for part in &output.result.content {
                match part {
                    ContentBlock::Text(text) => println!("{}", text.text),
                    ContentBlock::Image(image) => {
                        println!(
                            "[image {} , {} base64 bytes]",
                            image.mime_type,
                            image.data.len()
                        )
                    }
                    ContentBlock::Audio(audio) => {
                        println!(
                            "[audio {}, {} base64 bytes]",
                            audio.mime_type,
                            audio.data.len()
                        )
                    }
                    ContentBlock::Resource(_) => println!("[embedded resource]"),
                    ContentBlock::ResourceLink(link) => println!("[resource link {}]", link.uri),
                    _ => println!("[other content]"),
                }
            }
            if let Some(structured) = &output.result.structured_content {
                println!("{structured}");
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("error[{}]: {err}", err.code());
            ExitCode::from(CALL_FAILED)
        }
    }
}
