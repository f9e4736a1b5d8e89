//! An input round an upstream asks of a 2026-07-28 client, handed back by one instance, is
//! answered through another, once.
#![expect(
    deprecated,
    reason = "sampling is deprecated by SEP-2577, but the conformance fixture still samples"
)]

use rmcp::{
    ClientHandler,
    model::{
        CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig,
        CreateMessageResult, Implementation, InputResponses, JsonObject, ProtocolVersion,
        SamplingMessage,
    },
    service::{ClientLifecycleMode, ClientServiceExt as _, RunningService},
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::json;

use super::{Cluster, token};
use crate::support::WAIT;

/// A 2026-07-28 client that can sample (so the upstream may ask it to) and answers rounds
/// itself.
#[derive(Clone)]
struct Sampler;

impl ClientHandler for Sampler {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(Default::default());
        ClientConfig::new(capabilities, Implementation::new("cluster-rounds", "1"))
    }
}

async fn client(
    cluster: &Cluster,
    i: usize,
    bearer: &str,
) -> RunningService<rmcp::RoleClient, Sampler> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", cluster.base(i)))
        .auth_header(bearer.to_owned());
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let transport = StreamableHttpClientTransport::with_client(http, config);
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: None,
    };
    tokio::time::timeout(WAIT, Sampler.serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("discovered in time")
        .expect("discovered")
}

fn call(state: Option<&str>) -> CallToolRequestParams {
    let mut arguments = JsonObject::new();
    arguments.insert("prompt".into(), json!("What is 2+2?"));
    let mut params = CallToolRequestParams::new("conf_test_sampling").with_arguments(arguments);
    if let Some(state) = state {
        let answer = serde_json::to_value(CreateMessageResult::new(
            SamplingMessage::assistant_text("by hand"),
            "m".to_owned(),
        ))
        .expect("serializes");
        params.input_responses = Some(InputResponses::from([("answer".to_owned(), answer)]));
        params.request_state = Some(state.to_owned());
    }
    params
}

fn text(response: &CallToolResponse) -> String {
    let CallToolResponse::Complete(result) = response else {
        return String::new();
    };
    serde_json::to_value(result)
        .ok()
        .and_then(|v| v["content"][0]["text"].as_str().map(str::to_owned))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_round_handed_back_on_one_instance_is_answered_on_another_once() {
    let cluster = Cluster::start().await;
    let alice = token("acme", "alice");
    let on_a = client(&cluster, 0, &alice).await;
    let on_b = client(&cluster, 1, &alice).await;
    let on_c = client(&cluster, 2, &alice).await;

    let first = on_a.call_tool_once(call(None)).await.expect("tools/call");
    let CallToolResponse::InputRequired(round) = first else {
        panic!("expected the upstream's round, got {first:?}");
    };
    let state = round.request_state.expect("a requestState");
    assert!(state.starts_with("mcpgate-round:"), "{state}");

    let done = on_b
        .call_tool_once(call(Some(&state)))
        .await
        .expect("tools/call");
    assert!(
        matches!(done, CallToolResponse::Complete(_)),
        "answered through another instance: {done:?}"
    );
    assert_eq!(text(&done), "LLM response: by hand");
    let replay = on_c
        .call_tool_once(call(Some(&state)))
        .await
        .expect("tools/call");
    assert!(
        text(&replay).starts_with("[input_round_invalid]"),
        "single use across instances: {replay:?}"
    );
    drop((on_a, on_b, on_c));
    cluster.stop().await;
}
