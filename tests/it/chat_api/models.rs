//! Several models (`[[llm.models]]`), routed: `GET /chat` lists them, a turn names one or
//! gets the default, a turn that offers tools on a model without them is answered by the
//! tools model (and the event stream says so), and an unknown name is a typed refusal.

use futures::StreamExt as _;
use std::time::{Duration, SystemTime};

use mcpgate::{
    config::{LlmConfig, ModelsConfig, NamedModel, Price},
    store::usage::{Dim, UsageQuery, report},
};
use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Chat, Events, find, refused, user};
use crate::scripted_llm::{Reply, ScriptedLlm, offered};

fn named(name: &str, llm: LlmConfig) -> NamedModel {
    NamedModel {
        name: name.to_owned(),
        llm,
        max_running_turns: None,
        price: None,
    }
}

/// `small` (no tools, its own scripted server, the default) and `big` (tools, the chat's, at
/// most `big_turns` turns at once).
async fn two_models(
    small_replies: Vec<Reply>,
    big_replies: Vec<Reply>,
    big_turns: Option<usize>,
) -> (Chat, ScriptedLlm) {
    let small = ScriptedLlm::start(small_replies).await;
    let small_url = small.base_url();
    let chat = Chat::start(big_replies, move |config| {
        let big = config.llm.clone().expect("the chat's model");
        let mut plain = LlmConfig::new(small_url, "small-model");
        plain.tools = false;
        config.models = ModelsConfig {
            list: vec![
                named("small", plain.clone()),
                NamedModel {
                    max_running_turns: big_turns,
                    price: Some(Price {
                        per_mtok_in: 1.0,
                        per_mtok_out: 2.0,
                        per_mtok_cached: 0.5,
                    }),
                    ..named("big", big)
                },
            ],
            default: Some("small".into()),
            tools_model: Some("big".into()),
        };
        config.llm = Some(plain);
    })
    .await;
    (chat, small)
}

async fn turn(chat: &Chat, body: &Value) -> Vec<(String, Value)> {
    let response = chat.post("/chat", body).await;
    assert_eq!(response.status(), StatusCode::OK);
    Events::new(response.bytes_stream().boxed()).rest().await
}

#[tokio::test]
async fn a_turn_with_tools_on_a_model_without_is_answered_by_the_tools_model() {
    let (chat, small) = two_models(
        vec![Reply::text("small talk")],
        vec![
            Reply::tool_calls(&[("demo_echo", json!({ "text": "hi" }))]),
            Reply::text("echoed"),
            Reply::text("asked for by name"),
        ],
        None,
    )
    .await;

    let listed: Value = chat
        .client
        .get(format!("{}/chat", chat.base))
        .bearer_auth(&chat.token)
        .send()
        .await
        .expect("GET /chat")
        .json()
        .await
        .expect("JSON");
    assert_eq!(
        listed,
        json!({
            "model": "small",
            "tools": false,
            "models": [{ "name": "small", "tools": false }, { "name": "big", "tools": true }],
            "toolsModel": "big",
        })
    );

    // The default has no tools and the turn offers some: `big` answers, and says so.
    let events = turn(&chat, &user("echo hi")).await;
    let session = find(&events, "session");
    assert_eq!(
        (&session["model"], &session["routedFrom"]),
        (&json!("big"), &json!("small")),
        "{session}"
    );
    assert_eq!(find(&events, "final")["message"], "echoed");
    assert!(
        small.requests().is_empty(),
        "the model without tools was not asked"
    );
    assert!(offered(&chat.llm.requests()[0]).contains(&"demo_echo"));

    // No servers, no tools: the default answers.
    let mut plain = user("just talk");
    plain["servers"] = json!([]);
    let events = turn(&chat, &plain).await;
    let session = find(&events, "session");
    assert_eq!(session["model"], "small");
    assert!(session.get("routedFrom").is_none(), "{session}");
    assert_eq!(find(&events, "final")["message"], "small talk");
    assert_eq!(small.requests().len(), 1);
    assert!(offered(&small.requests()[0]).is_empty());

    // Named: that one.
    let mut named = user("you, please");
    named["model"] = json!("big");
    let events = turn(&chat, &named).await;
    assert_eq!(find(&events, "session")["model"], "big");
    assert_eq!(find(&events, "final")["message"], "asked for by name");
    assert_eq!(chat.llm.requests().len(), 3);

    // Unknown: refused before anything runs.
    let mut unknown = user("hi");
    unknown["model"] = json!("huge");
    let (status, error) = refused(&chat, &unknown).await;
    assert_eq!(
        (status, &error["code"]),
        (StatusCode::BAD_REQUEST, &json!("model_not_available")),
        "{error}"
    );
    assert_eq!(small.requests().len() + chat.llm.requests().len(), 4);

    // Each turn's model use is kept, under the model that answered, at its price.
    let query = UsageQuery {
        since: SystemTime::now() - Duration::from_secs(3600),
        until: SystemTime::now() + Duration::from_secs(3600),
        group_by: vec![Dim::Model],
        interval: None,
        tenant: None,
        user: None,
    };
    let report = crate::support::wait_for_async("three turns kept", || {
        let (store, query) = (chat.gateway.usage_store().clone(), query.clone());
        async move {
            let report = report(&store.usage(&query).await.ok()?, &query);
            (report["totals"]["turns"] == 3).then_some(report)
        }
    })
    .await;
    let big = &report["models"][0];
    assert_eq!(
        (&big["model"], &big["turns"], &big["requests"]),
        (&json!("big"), &json!(2), &json!(3)),
        "{report}"
    );
    // Three requests of 11 prompt (4 cached) and 7 completion tokens: 3 × (7×1 + 4×0.5 + 7×2)
    // millionths.
    assert_eq!(big["cachedTokens"], 12);
    assert!(
        (big["cost"].as_f64().expect("cost") - 0.000069).abs() < 1e-12,
        "{big}"
    );
    chat.stop().await;
}

/// A model's own bound on turns at once: a second turn on it is refused while the first
/// runs; another model still takes turns.
#[tokio::test]
async fn a_model_bounds_its_own_turns() {
    let slow = Reply::text("slow answer").chunk_delay(std::time::Duration::from_millis(400));
    let (chat, _small) = two_models(vec![Reply::text("small")], vec![slow], Some(1)).await;
    let mut big = user("slowly");
    big["model"] = json!("big");
    let response = chat.post("/chat", &big).await;
    let mut running = Events::new(response.bytes_stream().boxed());
    running.until("text_delta").await;
    let (status, error) = refused(&chat, &big).await;
    assert_eq!(
        (status, &error["code"]),
        (StatusCode::TOO_MANY_REQUESTS, &json!("too_many_turns"))
    );
    let mut small = user("quick");
    small["servers"] = json!([]);
    let events = turn(&chat, &small).await;
    assert_eq!(find(&events, "final")["message"], "small");
    drop(running);
    chat.stop().await;
}
