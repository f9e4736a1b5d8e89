//! A WebMCP page's socket on one instance, its tools called through the others: listed
//! there, refused to other users, writes confirmed anywhere and run once on the page; the
//! holding instance killed with SIGKILL mid-call → the caller elsewhere gets
//! `outcome_unknown` within the registry's bound; the page reconnects to another instance and
//! its tools work again.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::{Cluster, answer, token};
use crate::{
    server::webmcp::{ORIGIN, TestPage, editor_tools, title_result},
    support::{WAIT, wait_for_async},
};

/// The bridge on for the test pages' origin, with a short heartbeat: a dead instance's pages
/// expire from the registry within a second.
const BRIDGE: &str = r#"
[webmcp]
allowed_origins = ["ORIGIN"]
heartbeat = "200ms"
heartbeat_timeout = "1s"
call_timeout = "60s"
"#;

async fn call_at(
    client: &reqwest::Client,
    base: &str,
    bearer: &str,
    body: Value,
) -> (StatusCode, Value) {
    let request = client
        .post(format!("{base}/api/v1/mcp/tools/call"))
        .bearer_auth(bearer);
    answer(request.json(&body)).await
}

/// [`call_at`] on its own task, so a page can answer what it sends.
fn spawn_call_at(
    client: &reqwest::Client,
    base: impl AsRef<str>,
    bearer: &str,
    body: Value,
) -> tokio::task::JoinHandle<(StatusCode, Value)> {
    let (client, base, bearer) = (client.clone(), base.as_ref().to_owned(), bearer.to_owned());
    tokio::spawn(async move { call_at(&client, &base, &bearer, body).await })
}

/// Waits until the caller of `bearer` sees `tool` listed at `base`.
async fn wait_listed(client: &reqwest::Client, base: &str, bearer: &str, tool: &str) {
    wait_for_async(&format!("{tool} listed at {base}"), || async {
        let request = client
            .get(format!("{base}/api/v1/mcp/tools"))
            .bearer_auth(bearer);
        let (_, body) = answer(request).await;
        body["tools"]
            .as_array()?
            .iter()
            .any(|t| t["name"] == tool)
            .then_some(())
    })
    .await;
}

/// The editor's tools and one more named `extra`, which tells a registration apart.
fn tools_and(extra: &str) -> Value {
    let mut tools = editor_tools();
    if let Some(list) = tools.as_array_mut() {
        list.push(json!({"name": extra, "description": "A marker.",
                         "annotations": {"readOnlyHint": true}}));
    }
    tools
}

#[tokio::test]
async fn a_page_held_by_one_instance_serves_callers_of_the_others() {
    let cluster = Cluster::start_with(&BRIDGE.replace("ORIGIN", ORIGIN), &[]).await;
    let (ann, bob) = (token("acme", "ann"), token("acme", "bob"));
    let bases: Vec<String> = (0..3).map(|i| cluster.base(i).to_owned()).collect();
    let client = cluster.client.clone();
    let read = json!({"tool": "webmcp-editor.get_title", "arguments": {}});

    // The page connects to a; b lists its tools and calls them.
    let mut page = TestPage::open_at(&bases[0], "editor", &ann).await;
    page.register(editor_tools()).await;
    wait_listed(&client, &bases[1], &ann, "webmcp-editor.get_title").await;
    let call = spawn_call_at(&client, bases[1].clone(), &ann, read.clone());
    let (call_id, tool, _) = page.invoked().await;
    assert_eq!(tool, "get_title");
    page.answer(&call_id, title_result("Draft")).await;
    let (status, body) = call.await.expect("the call's task");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["structuredContent"], json!({"title": "Draft"}));

    // A caller on b who gives up: the holder tells the page to cancel that call.
    let call = spawn_call_at(&client, &bases[1], &ann, read.clone());
    let (call_id, _, _) = page.invoked().await;
    call.abort();
    let cancel = page.next().await;
    assert_eq!(
        (&cancel["type"], &cancel["callId"]),
        (&json!("cancel"), &json!(call_id)),
        "{cancel}"
    );

    // The AX-compatible route on c reaches the page too, once c has learned of it (the
    // registration reaches each instance as an event: on a busy machine c may not know yet).
    wait_listed(&client, &bases[2], &ann, "webmcp-editor.get_title").await;
    let invoke = tokio::spawn({
        let (client, base, ann) = (client.clone(), bases[2].clone(), ann.clone());
        async move {
            let request = client
                .post(format!("{base}/api/v1/webmcp/invoke"))
                .bearer_auth(&ann)
                .json(&json!({"clientId": "editor", "tool": "get_title"}));
            answer(request).await
        }
    });
    let (call_id, _, _) = page.invoked().await;
    page.answer(&call_id, title_result("Draft")).await;
    let (status, body) = invoke.await.expect("the invoke's task");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["result"]["data"], json!({"title": "Draft"}));

    // Another user's page cannot take the id on another instance.
    let mut taker = TestPage::connect_at(&bases[2], "editor", &bob).await;
    let refused = taker.hello().await;
    assert_eq!(
        (&refused["type"], &refused["reason"]),
        (&json!("rejected"), &json!("client_id_taken")),
        "{refused}"
    );
    drop(taker);

    // Another user of the tenant: not found on every instance.
    for base in &bases {
        let (status, body) = call_at(&client, base, &bob, read.clone()).await;
        assert_eq!(
            (status, &body["code"]),
            (StatusCode::NOT_FOUND, &json!("not_found")),
            "{base}"
        );
    }

    // A write asked on b, approved on c, run once on the page through b.
    let write = json!({"tool": "webmcp-editor.set_title", "arguments": {"title": "Final"}});
    let (status, held) = call_at(&client, &bases[1], &ann, write.clone()).await;
    assert_eq!(status, StatusCode::PRECONDITION_REQUIRED, "{held}");
    let id = held["confirmationId"].as_str().expect("an id");
    let (status, approval) = cluster
        .post(
            2,
            &format!("/api/v1/mcp/confirmations/{id}/approve"),
            &ann,
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{approval}");
    let mut confirmed = write;
    confirmed["confirmationToken"] = approval["confirmationToken"].clone();
    let call = spawn_call_at(&client, &bases[1], &ann, confirmed);
    let (call_id, tool, arguments) = page.invoked().await;
    assert_eq!(
        (tool.as_str(), &arguments),
        ("set_title", &json!({"title": "Final"}))
    );
    page.answer(&call_id, title_result("Final")).await;
    let (status, body) = call.await.expect("the call's task");
    assert_eq!(status, StatusCode::OK, "{body}");

    // a dies mid-call: the caller on b learns the outcome is unknown, within the bound.
    let mut instances = cluster.instances;
    let call = spawn_call_at(&client, bases[1].clone(), &ann, read.clone());
    let _ = page.invoked().await;
    instances.remove(0).kill().await;
    let (status, body) = tokio::time::timeout(WAIT, call)
        .await
        .expect("the caller is answered within the bound")
        .expect("the call's task");
    assert_eq!(
        (status, &body["code"]),
        (StatusCode::BAD_GATEWAY, &json!("outcome_unknown")),
        "{body}"
    );
    drop(page);

    // The page reconnects to b: its tools work again, from b and from c.
    let mut page = TestPage::open_at(&bases[1], "editor", &ann).await;
    page.register(tools_and("since_reconnect")).await;
    // The new tool listed on c: c reads the page's new record, not a's expired one.
    wait_listed(&client, &bases[2], &ann, "webmcp-editor.since_reconnect").await;
    for base in [&bases[2], &bases[1]] {
        let call = spawn_call_at(&client, base.clone(), &ann, read.clone());
        let (call_id, _, _) = page.invoked().await;
        page.answer(&call_id, title_result("Final")).await;
        let (status, body) = call.await.expect("the call's task");
        assert_eq!(status, StatusCode::OK, "{base}: {body}");
        assert_eq!(body["data"]["structuredContent"], json!({"title": "Final"}));
    }
    // The same user's page connecting to c under the id takes it over: b closes its socket.
    let mut moved = TestPage::open_at(&bases[2], "editor", &ann).await;
    assert_eq!(page.next().await, json!({"closed": 4000}));
    moved.register(tools_and("since_move")).await;
    wait_listed(&client, &bases[1], &ann, "webmcp-editor.since_move").await;
    let call = spawn_call_at(&client, bases[1].clone(), &ann, read.clone());
    let (call_id, _, _) = moved.invoked().await;
    moved.answer(&call_id, title_result("Moved")).await;
    let (status, body) = call.await.expect("the call's task");
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["structuredContent"], json!({"title": "Moved"}));
    drop(moved);
    for instance in instances {
        instance.stop().await;
    }
    let mut redis = cluster.redis;
    redis.kill().await;
    cluster.postgres.stop().await;
}

#[tokio::test]
async fn pages_survive_a_redis_that_lost_their_records() {
    let mut cluster = Cluster::start_with(&BRIDGE.replace("ORIGIN", ORIGIN), &[]).await;
    let ann = token("acme", "ann");
    let bases: Vec<String> = (0..2).map(|i| cluster.base(i).to_owned()).collect();
    let client = cluster.client.clone();
    let mut page = TestPage::open_at(&bases[0], "editor", &ann).await;
    page.register(editor_tools()).await;
    wait_listed(&client, &bases[1], &ann, "webmcp-editor.get_title").await;

    // Redis restarts empty: the page's record is gone, not taken over. The holder writes it
    // again, keeps the page's socket, and the other instance routes to it again.
    cluster.redis.kill().await;
    cluster.redis.run().await;
    let read = json!({"tool": "webmcp-editor.get_title", "arguments": {}});
    let deadline = tokio::time::Instant::now() + WAIT;
    let answered = loop {
        assert!(
            tokio::time::Instant::now() < deadline,
            "b never reached the page again"
        );
        let call = spawn_call_at(&client, bases[1].clone(), &ann, read.clone());
        // Answer the call if it reaches the page; a refusal (not listed or routable yet) is
        // retried.
        let reached = tokio::time::timeout(std::time::Duration::from_secs(2), page.next()).await;
        if let Ok(invoke) = reached {
            assert_eq!(
                invoke["type"], "invoke",
                "the page kept its socket: {invoke}"
            );
            let call_id = invoke["callId"].as_str().expect("a call id").to_owned();
            page.answer(&call_id, title_result("Draft")).await;
        }
        let (status, body) = call.await.expect("the call's task");
        if status == StatusCode::OK {
            break body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(
        answered["data"]["structuredContent"],
        json!({"title": "Draft"})
    );
    drop(page);
    cluster.stop().await;
}
