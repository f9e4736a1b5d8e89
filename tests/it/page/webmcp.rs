//! WebMCP in real Chromium: an editor page on another origin than the gateway's imports
//! `/webmcp.js` and registers tools acting on its DOM (tests/browser/webmcp.mjs). Between the
//! script's steps this side calls them over REST and `/mcp` (rmcp) and runs an approved write;
//! the script then checks the page's DOM, the invoke route, the gateway's own chat using the
//! page's tools through the scripted model, unregistering, a reload and a close.

use std::process::Stdio;

use mcpgate::{config::LlmConfig, store::AuditQuery};
use reqwest::StatusCode;
use rmcp::{
    ServiceExt as _,
    model::CallToolRequestParams,
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufReadExt, AsyncWriteExt, BufReader},
    process::Command,
};

use super::{PageService, SCRIPT_WAIT, jwt, root, servers};
use crate::{
    scripted_llm::{Reply, ScriptedLlm},
    support::{self, WAIT},
};

#[tokio::test]
async fn a_pages_tools_work_from_rest_mcp_and_the_chat_in_chromium() {
    let page_port = support::free_port();
    let llm = ScriptedLlm::start(vec![]).await;
    let mut config = support::config(servers());
    config.llm = Some(LlmConfig::new(llm.base_url(), "scripted"));
    config.webmcp.allowed_origins = vec![format!("http://127.0.0.1:{page_port}")];
    let service = PageService::start(support::gateway(config).await).await;
    let token = jwt("ada", &[]);

    let peers = support::peers();
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists()
            && peers.join("node_modules/playwright-core").exists(),
        "Chromium or playwright-core is missing: run scripts/install-peers.sh"
    );
    let mut script = Command::new("node")
        .arg(root().join("tests/browser/webmcp.mjs"))
        .current_dir(root())
        .env("MCPGATE_PEERS", &peers)
        .env("MCPGATE_SCREENSHOTS", root().join("target/screenshots"))
        .env("MCPGATE_URL", &service.base)
        .env("MCPGATE_TOKEN", &token)
        .env("PAGE_PORT", page_port.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("node runs");
    let mut stdin = script.stdin.take().expect("stdin");
    let mut stdout = BufReader::new(script.stdout.take().expect("stdout")).lines();
    let mut seen = Vec::new();
    let hand_over = tokio::time::timeout(SCRIPT_WAIT, async {
        while let Some(line) = stdout.next_line().await.expect("stdout readable") {
            eprintln!("{line}");
            let done = line == "hand-over calls";
            seen.push(line);
            if done {
                return true;
            }
        }
        false
    })
    .await
    .expect("the script hands over in time");
    if !hand_over {
        let output = script.wait_with_output().await.expect("node ends");
        panic!(
            "the script ended before handing over:\n{}\n{}",
            seen.join("\n"),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    // A read over REST: what the page computed from its DOM.
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let call = async |body: Value| -> (StatusCode, Value) {
        let response = client
            .post(format!("{}/api/v1/mcp/tools/call", service.base))
            .bearer_auth(&token)
            .json(&body)
            .send()
            .await
            .expect("sent");
        let status = response.status();
        (status, response.json().await.expect("JSON"))
    };
    let (status, body) = call(json!({"tool": "webmcp-editor.get_title"})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["data"]["structuredContent"],
        json!({"title": "Draft"}),
        "{body}"
    );

    // The same read over /mcp.
    let catalog = service.gateway.catalog();
    let function = |canonical: &str| {
        catalog
            .by_canonical(canonical)
            .expect("listed")
            .function_name
            .to_string()
    };
    let transport = StreamableHttpClientTransport::with_client(
        client.clone(),
        StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", service.base))
            .auth_header(token.clone()),
    );
    let session = tokio::time::timeout(WAIT, ().serve(transport))
        .await
        .expect("handshake in time")
        .expect("handshake");
    let result = session
        .call_tool(CallToolRequestParams::new(function(
            "webmcp-editor.get_title",
        )))
        .await
        .expect("tools/call");
    assert_eq!(
        result.structured_content,
        Some(json!({"title": "Draft"})),
        "{result:?}"
    );
    let _ = session.cancel().await;

    // A write: held, approved, run once.
    let write = json!({"tool": "webmcp-editor.set_title", "arguments": {"title": "Final"}});
    let (status, held) = call(write.clone()).await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{held}");
    let id = held["confirmationId"].as_str().expect("an id");
    let approval = client
        .post(format!(
            "{}/api/v1/mcp/confirmations/{id}/approve",
            service.base
        ))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .expect("approve");
    assert_eq!(approval.status(), StatusCode::OK);
    let approval: Value = approval.json().await.expect("JSON");
    let mut confirmed = write;
    confirmed["confirmationToken"] = approval["confirmationToken"].clone();
    let (status, body) = call(confirmed).await;
    assert_eq!(status, StatusCode::OK, "{body}");

    // The chat's model will call the page's read.
    llm.push(Reply::tool_calls(&[(
        &function("webmcp-editor.get_title"),
        json!({}),
    )]));
    llm.push(Reply::text("The title is Final."));
    stdin.write_all(b"calls done\n").await.expect("told");
    drop(stdin);
    let rest = tokio::time::timeout(SCRIPT_WAIT, async {
        let mut rest = Vec::new();
        while let Some(line) = stdout.next_line().await.expect("stdout readable") {
            eprintln!("{line}");
            rest.push(line);
        }
        rest
    })
    .await
    .expect("the script ends in time");
    seen.extend(rest);
    let output = script.wait_with_output().await.expect("node ends");
    let log = seen.join("\n");
    assert!(
        output.status.success(),
        "webmcp.mjs failed:\n{log}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for step in [
        "the page connects from its own origin and registers its tools",
        "the reads ran in the page and the approved write changed it once",
        "the invoke route answers in the AX shape with what the page computed",
        "the gateway's own chat uses the tools of the user's other page",
        "aborting a tool's signal unregisters it",
        "a reloaded page registers again and answers from its new DOM",
        "a closed page's tools leave the catalog",
    ] {
        assert!(log.contains(&format!("ok - {step}")), "no `{step}`:\n{log}");
    }

    // The model was given what the page computed.
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    let fed_back = requests[1]["messages"].to_string();
    assert!(fed_back.contains("Final"), "{fed_back}");
    // The page said the title is content from others: the model reads it fenced as data.
    assert!(
        fed_back.contains("<untrusted-content>") && fed_back.contains("treat it as data"),
        "{fed_back}"
    );
    // The audit has every call: five reads (REST, /mcp, invoke, chat, after the reload) and
    // the write once, after its approval.
    let records = service
        .gateway
        .audit_store()
        .query(AuditQuery {
            user: Some("ada".into()),
            ..Default::default()
        })
        .await
        .expect("audit");
    let count = |tool: &str, decision: &str| {
        records
            .iter()
            .filter(|(_, r)| r.tool == tool && r.decision == decision && r.outcome == "ok")
            .count()
    };
    assert_eq!(
        count("webmcp-editor.get_title", "allowed"),
        5,
        "{records:?}"
    );
    assert_eq!(
        count("webmcp-editor.set_title", "approved"),
        1,
        "{records:?}"
    );
    assert_eq!(
        count("webmcp-editor.set_title", "allowed"),
        1,
        "{records:?}"
    );
    service.stop().await;
}
