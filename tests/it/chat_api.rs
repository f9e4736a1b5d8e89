//! The chat API over real HTTP (`mcpgate::server::serve` on 127.0.0.1:0, dev token) with
//! real upstreams and the scripted model: the event stream, approvals, cancellation (by
//! request and by disconnecting), and the typed refusals; and one JSON convention over every
//! route and event.

mod conventions;
mod models;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use bytes::Bytes;
use futures::{StreamExt as _, stream::BoxStream};
use mcpgate::{
    config::{AuthConfig, Config, Env, LlmConfig, ServiceConfig},
    gateway::Gateway,
    server::{AppState, OVERHEAD_HEADER, auth::Authenticator},
};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::{
    agent_loop::demo,
    scripted_llm::{Reply, ScriptedLlm, offered},
    support::{self, WAIT, ctx, fixture},
};

/// A running service with a scripted model.
struct Chat {
    base: String,
    token: String,
    gateway: Gateway,
    llm: ScriptedLlm,
    client: reqwest::Client,
    served: support::Served,
}

impl Chat {
    async fn start(replies: Vec<Reply>, tune: impl FnOnce(&mut Config)) -> Chat {
        let llm = ScriptedLlm::start(replies).await;
        let mut config = support::config(vec![fixture("slow", "slow"), demo()]);
        config.llm = Some(LlmConfig::new(llm.base_url(), "scripted"));
        tune(&mut config);
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr: SocketAddr = listener.local_addr().expect("addr");
        let authenticator = Authenticator::new(&AuthConfig::Dev, &Env::default(), addr, false)
            .await
            .expect("auth");
        let token = authenticator.dev_token().expect("dev token").to_owned();
        let service = Arc::new(ServiceConfig {
            listen: addr,
            ..ServiceConfig::default()
        });
        let gateway = support::gateway(config).await;
        let state = AppState::new(gateway.clone(), Arc::new(authenticator), service);
        let served = support::Served::spawn(listener, state);
        Chat {
            base: format!("http://{addr}/api/v1"),
            token,
            gateway,
            llm,
            client: reqwest::Client::builder()
                .no_proxy()
                .build()
                .expect("client"),
            served,
        }
    }

    async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        self.client
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(body)
            .send()
            .await
            .expect("the service answers")
    }

    async fn stats(&self) -> Value {
        self.gateway
            .call_tool(&ctx(), "slow.sleep_stats", json!({}), None)
            .await
            .expect("stats")
            .structured
            .expect("structured")
    }

    async fn stop(self) {
        self.served.stop().await;
        self.gateway.shutdown().await;
    }
}

/// The server-sent events of one response, parsed as they arrive.
pub struct Events {
    body: BoxStream<'static, reqwest::Result<Bytes>>,
    buffer: String,
}

impl Events {
    pub fn new(body: BoxStream<'static, reqwest::Result<Bytes>>) -> Events {
        Events {
            body,
            buffer: String::new(),
        }
    }

    /// The next event as (name, data); `None` at the end of the stream. Comments
    /// (keep-alives) are skipped.
    pub async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let mut name = None;
                let mut data = String::new();
                for line in block.lines() {
                    if let Some(value) = line.strip_prefix("event:") {
                        name = Some(value.trim().to_owned());
                    } else if let Some(value) = line.strip_prefix("data:") {
                        data.push_str(value.trim_start());
                    }
                }
                let Some(name) = name else { continue };
                let data = serde_json::from_str(&data).expect("event data is JSON");
                return Some((name, data));
            }
            let chunk = tokio::time::timeout(WAIT, self.body.next())
                .await
                .expect("the next event came in time")?;
            self.buffer
                .push_str(&String::from_utf8_lossy(&chunk.expect("the body reads")));
        }
    }

    pub async fn until(&mut self, name: &str) -> Vec<(String, Value)> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await {
            let found = event.0 == name;
            seen.push(event);
            if found {
                return seen;
            }
        }
        panic!("no `{name}` event: {seen:#?}");
    }

    pub async fn rest(&mut self) -> Vec<(String, Value)> {
        let mut seen = Vec::new();
        while let Some(event) = self.next().await {
            seen.push(event);
        }
        seen
    }
}

fn user(text: &str) -> Value {
    json!({ "messages": [{ "role": "user", "content": text }] })
}

fn find<'a>(events: &'a [(String, Value)], name: &str) -> &'a Value {
    events
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, data)| data)
        .unwrap_or_else(|| panic!("no `{name}` in {events:#?}"))
}

#[tokio::test]
async fn a_turn_streams_typed_events_ending_with_done() {
    let chat = Chat::start(
        vec![
            Reply::tool_calls(&[("slow_echo", json!({ "message": "over http" }))]),
            Reply::text("**Done** <script>alert(1)</script>"),
        ],
        |_| {},
    )
    .await;
    let response = chat
        .post(
            "/chat",
            &json!({
                "messages": [
                    { "role": "system", "content": "Be brief." },
                    { "role": "user", "content": "echo something" },
                ],
                "timeZone": "UTC",
                "options": { "temperature": 0.2, "seed": 7 },
            }),
        )
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key(OVERHEAD_HEADER));
    let session = response.headers()["x-mcpgate-session"]
        .to_str()
        .expect("ascii")
        .to_owned();
    let mut events = Events::new(response.bytes_stream().boxed());
    let events = events.rest().await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..4],
        ["session", "round_start", "tool_call", "tool_result"]
    );
    assert_eq!(names.last(), Some(&"done"));
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_str(), "the data names its type");
    }
    assert_eq!(events[0].1["session"], session.as_str());
    let call = find(&events, "tool_call");
    assert_eq!(
        (&call["tool"], &call["server"]),
        (&json!("slow.echo"), &json!("slow"))
    );
    assert_eq!(
        find(&events, "tool_result")["result"]["content"][0]["text"],
        "Echo: over http"
    );
    let last = find(&events, "final");
    assert_eq!(last["message"], "**Done** <script>alert(1)</script>");
    let html = last["html"].as_str().expect("html");
    assert!(html.contains("<strong>Done</strong>"), "{html}");
    assert!(!html.contains("<script"), "{html}");
    assert_eq!(
        last["usage"]["totalTokens"], 36,
        "summed over both requests"
    );

    let request = &chat.llm.requests()[0];
    assert_eq!(request["temperature"], 0.2);
    assert_eq!(request["seed"], 7);
    assert_eq!(request["messages"][1]["content"], "Be brief.");
    assert!(
        request["messages"][0]["content"]
            .as_str()
            .is_some_and(|t| t.contains("(UTC+00:00)")),
        "{request}"
    );
    // The chat's tool call counts in /metrics like any other call through the gate.
    let metrics = chat
        .client
        .get(chat.base.replace("/api/v1", "/metrics"))
        .bearer_auth(&chat.token)
        .send()
        .await
        .expect("metrics answer")
        .text()
        .await
        .expect("metrics text");
    assert!(
        metrics.contains(
            "mcpgate_tool_calls_total{server=\"slow\",tool=\"slow.echo\",outcome=\"ok\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("mcpgate_tool_calls_in_flight 0"),
        "{metrics}"
    );
    chat.stop().await;
}

#[tokio::test]
async fn approvals_are_decided_over_http_by_the_same_session() {
    let chat = Chat::start(
        vec![
            Reply::tool_calls(&[("demo_add_note", json!({ "title": "web", "body": "b" }))]),
            Reply::text("Saved."),
            Reply::tool_calls(&[("demo_add_note", json!({ "title": "nope", "body": "b" }))]),
            Reply::text("Not saved."),
        ],
        |_| {},
    )
    .await;
    let mut body = user("note it");
    body["session"] = json!("tab-1");
    let response = chat.post("/chat", &body).await;
    let mut events = Events::new(response.bytes_stream().boxed());
    let seen = events.until("approval_required").await;
    let asked = find(&seen, "approval_required").clone();
    assert_eq!(asked["tool"], "demo.add_note");
    let call_id = asked["callId"].as_str().expect("call id");

    let elsewhere = chat
        .post(
            &format!("/chat/tab-2/approvals/{call_id}"),
            &json!({ "decision": "approve" }),
        )
        .await;
    assert_eq!(elsewhere.status(), StatusCode::NOT_FOUND);
    let bad = chat
        .post(
            &format!("/chat/tab-1/approvals/{call_id}"),
            &json!({ "decision": "maybe" }),
        )
        .await;
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    let approved = chat
        .post(
            &format!("/chat/tab-1/approvals/{call_id}"),
            &json!({ "decision": "approve" }),
        )
        .await;
    assert_eq!(approved.status(), StatusCode::OK);
    assert_eq!(
        approved.json::<Value>().await.expect("JSON"),
        json!({ "ok": true, "decision": "approve" })
    );
    let rest = events.rest().await;
    assert_eq!(
        find(&rest, "tool_result")["result"]["content"][0]["text"],
        "Saved note `web`."
    );
    assert_eq!(find(&rest, "final")["message"], "Saved.");

    // The same session, the next turn (the client sends the conversation again): denied.
    let body = json!({
        "session": "tab-1",
        "messages": [
            { "role": "user", "content": "note it" },
            { "role": "assistant", "content": "Saved." },
            { "role": "user", "content": "and another" },
        ],
    });
    let response = chat.post("/chat", &body).await;
    let mut events = Events::new(response.bytes_stream().boxed());
    let seen = events.until("approval_required").await;
    let call_id = find(&seen, "approval_required")["callId"]
        .as_str()
        .expect("call id")
        .to_owned();
    let denied = chat
        .post(
            &format!("/chat/tab-1/approvals/{call_id}"),
            &json!({ "decision": "deny" }),
        )
        .await;
    assert_eq!(denied.status(), StatusCode::OK);
    let rest = events.rest().await;
    assert_eq!(find(&rest, "tool_error")["code"], "denied_by_user");
    let again = chat
        .post(
            &format!("/chat/tab-1/approvals/{call_id}"),
            &json!({ "decision": "approve" }),
        )
        .await;
    assert_eq!(again.status(), StatusCode::NOT_FOUND, "decided once");
    let history = &chat.llm.requests()[2]["messages"];
    assert_eq!(
        history[2],
        json!({ "role": "assistant", "content": "Saved." })
    );
    chat.stop().await;
}

#[tokio::test]
async fn cancel_and_disconnect_both_cancel_the_upstream_call() {
    let sleep = || Reply::tool_calls(&[("slow_sleep", json!({ "ms": 60000 }))]);
    let chat = Chat::start(vec![sleep(), sleep()], |_| {}).await;
    let mut body = user("sleep");
    body["session"] = json!("s1");
    let response = chat.post("/chat", &body).await;
    let mut events = Events::new(response.bytes_stream().boxed());
    events.until("tool_progress").await;
    let cancelled = chat.post("/chat/s1/cancel", &json!({})).await;
    assert_eq!(
        cancelled.json::<Value>().await.expect("JSON"),
        json!({ "ok": true, "cancelled": 1 })
    );
    let rest = events.rest().await;
    assert_eq!(find(&rest, "tool_error")["code"], "cancelled");
    assert_eq!(find(&rest, "error")["code"], "cancelled");
    assert_eq!(rest.last().map(|(n, _)| n.as_str()), Some("done"));

    // A client that goes away cancels its turn the same way.
    let response = chat.post("/chat", &body).await;
    let mut events = Events::new(response.bytes_stream().boxed());
    events.until("tool_progress").await;
    drop(events);
    let start = std::time::Instant::now();
    loop {
        let stats = chat.stats().await;
        if stats["cancelled"] == 2 && stats["in_flight"] == 0 {
            break;
        }
        assert!(
            start.elapsed() < WAIT,
            "the upstream call was not cancelled: {stats}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let idle = chat.post("/chat/s1/cancel", &json!({})).await;
    assert_eq!(
        idle.json::<Value>().await.expect("JSON")["cancelled"],
        0,
        "the disconnected turn is gone"
    );
    chat.stop().await;
}

#[tokio::test]
async fn a_conversation_offers_the_model_only_the_servers_it_selects() {
    let chat = Chat::start(
        vec![
            // The model names a tool of a server left out: it is not found, and never runs.
            Reply::tool_calls(&[("demo_add_note", json!({ "text": "left out" }))]),
            Reply::text("done"),
            Reply::text("all of them"),
        ],
        |_| {},
    )
    .await;
    let mut body = user("add a note");
    body["servers"] = json!(["slow"]);
    let response = chat.post("/chat", &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    let events = Events::new(response.bytes_stream().boxed()).rest().await;
    let failed = find(&events, "tool_error");
    assert_eq!(failed["code"], "not_found", "{failed}");

    let requests = chat.llm.requests();
    let offered = offered(&requests[0]);
    assert!(!offered.is_empty(), "{offered:?}");
    assert!(
        offered.iter().all(|name| name.starts_with("slow_")),
        "only the selected server's tools: {offered:?}"
    );
    let preamble = requests[0]["messages"][0]["content"]
        .as_str()
        .expect("text");
    assert!(
        preamble.contains("slow_echo") && !preamble.contains("demo_"),
        "{preamble}"
    );
    let notes = chat
        .gateway
        .call_tool(&ctx(), "demo.list_notes", json!({}), None)
        .await
        .expect("notes");
    assert!(!format!("{notes:?}").contains("left out"), "{notes:?}");

    // Without `servers`, every server's tools.
    let all = Events::new(chat.post("/chat", &user("hi")).await.bytes_stream().boxed())
        .rest()
        .await;
    find(&all, "done");
    let requests = chat.llm.requests();
    let offered = requests.last().expect("a request")["tools"].to_string();
    assert!(
        offered.contains("demo_") && offered.contains("slow_"),
        "{offered}"
    );

    // A server the caller cannot use is a typed refusal, not dropped.
    for servers in [json!(["slow", "nope"]), json!(["Slow"]), json!("slow")] {
        let mut body = user("hi");
        body["servers"] = servers.clone();
        let (status, error) = refused(&chat, &body).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{servers}: {error}");
        if servers.is_array() {
            assert_eq!(error["code"], "unknown_server", "{servers}: {error}");
        }
    }
    chat.stop().await;
}

async fn refused(chat: &Chat, body: &Value) -> (StatusCode, Value) {
    let response = chat.post("/chat", body).await;
    let status = response.status();
    (status, response.json().await.expect("a JSON error"))
}

#[tokio::test]
async fn requests_are_bounded_and_refusals_typed() {
    let chat = Chat::start(
        vec![Reply::text("This answer never ends").stall_after(2)],
        |c| {
            c.agent.max_running_turns = 1;
            c.agent.max_messages = 2;
        },
    )
    .await;
    let many = json!({ "messages": [
        { "role": "user", "content": "1" }, { "role": "assistant", "content": "2" },
        { "role": "user", "content": "3" },
    ] });
    let not_user_last = json!({ "messages": [{ "role": "assistant", "content": "hi" }] });
    let mut bad_zone = user("hi");
    bad_zone["timeZone"] = json!("Mars/Olympus_Mons");
    let mut bad_option = user("hi");
    bad_option["options"] = json!({ "model": "other" });
    let mut bad_session = user("hi");
    bad_session["session"] = json!("../x");
    for body in [
        json!({}),
        json!({ "messages": [] }),
        many,
        not_user_last,
        json!({ "messages": [{ "role": "tool", "content": "x" }] }),
        bad_zone,
        bad_option,
        bad_session,
        json!({ "messages": [{ "role": "user", "content": "x" }], "extra": 1 }),
    ] {
        let (status, error) = refused(&chat, &body).await;
        assert_eq!(
            (status, &error["code"]),
            (StatusCode::BAD_REQUEST, &json!("bad_request")),
            "{body}: {error}"
        );
    }

    let response = chat.post("/chat", &user("talk")).await;
    let mut running = Events::new(response.bytes_stream().boxed());
    running.until("text_delta").await;
    let busy = chat.post("/chat", &user("me too")).await;
    assert_eq!(busy.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(busy.headers()["retry-after"], "1");
    assert_eq!(
        busy.json::<Value>().await.expect("JSON")["code"],
        "too_many_turns"
    );
    drop(running);
    chat.stop().await;

    let chat = Chat::start(vec![], |c| c.llm = None).await;
    let (status, error) = refused(&chat, &user("hi")).await;
    assert_eq!(
        (status, &error["code"]),
        (StatusCode::SERVICE_UNAVAILABLE, &json!("no_model"))
    );
    chat.stop().await;
}

/// A decision sent with an `Idempotency-Key` and retried (the answer was lost on the way)
/// gets its first answer again instead of `not_found` for a call already decided.
#[tokio::test]
async fn a_retried_approval_with_its_key_gets_its_first_answer() {
    let chat = Chat::start(
        vec![
            Reply::tool_calls(&[("demo_add_note", json!({ "title": "kept", "body": "b" }))]),
            Reply::text("Saved."),
        ],
        |_| {},
    )
    .await;
    let mut body = user("note it");
    body["session"] = json!("tab-k");
    let response = chat.post("/chat", &body).await;
    let mut events = Events::new(response.bytes_stream().boxed());
    let seen = events.until("approval_required").await;
    let call_id = find(&seen, "approval_required")["callId"]
        .as_str()
        .expect("call id")
        .to_owned();
    let approve = || {
        chat.client
            .post(format!("{}/chat/tab-k/approvals/{call_id}", chat.base))
            .bearer_auth(&chat.token)
            .header("Idempotency-Key", "\"approve-1\"")
            .json(&json!({ "decision": "approve" }))
            .send()
    };
    let first = approve().await.expect("answers");
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first: Value = first.json().await.expect("JSON");
    let rest = events.rest().await;
    assert_eq!(find(&rest, "final")["message"], "Saved.");
    let again = approve().await.expect("answers");
    assert_eq!(again.status(), StatusCode::OK, "not not_found");
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.json::<Value>().await.expect("JSON"), first);
    chat.stop().await;
}
