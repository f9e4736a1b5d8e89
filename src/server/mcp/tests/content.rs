//! Resources, templates, prompts and completion of the conformance fixture, proxied through
//! the endpoint to an rmcp client: routing, namespacing, error codes, visibility, audit.

use rmcp::{
    RoleClient, ServiceError,
    model::{
        ArgumentInfo, CompleteRequestParams, ErrorCode, GetPromptRequestParams, JsonObject,
        ReadResourceRequestParams, Reference,
    },
    service::RunningService,
};
use serde_json::{Value, json};

use super::support::{Endpoint, TestClient, WAIT, in_process, initialize, jwt_auth, jwt_for};
use crate::{
    config::{AccessConfig, AuthConfig, Grant, ServerId, TenantAccess},
    fixtures::Fixture,
    store::AuditQuery,
};

type Client = RunningService<RoleClient, TestClient>;

async fn start(auth: AuthConfig, access: Option<AccessConfig>) -> Endpoint {
    let conformance = crate::fixtures::handler(Fixture::Conformance).expect("in-process fixture");
    let demo = in_process("demo", crate::fixtures::demo::DemoServer::new());
    Endpoint::start_servers(auth, vec![in_process("conf", conformance), demo], access).await
}

/// The text of a read's contents or a prompt's messages, as JSON.
fn json_of<T: serde::Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("serializes")
}

async fn read(client: &Client, uri: &str) -> Result<Value, ServiceError> {
    let read = client.read_resource(ReadResourceRequestParams::new(uri));
    let result = tokio::time::timeout(WAIT, read).await.expect("in time")?;
    Ok(json_of(&result.contents))
}

fn error_code<T: std::fmt::Debug>(result: Result<T, ServiceError>) -> ErrorCode {
    match result {
        Err(ServiceError::McpError(error)) => error.code,
        other => panic!("expected a JSON-RPC error, got {other:?}"),
    }
}

fn arguments(value: Value) -> JsonObject {
    value.as_object().cloned().expect("an object")
}

#[tokio::test]
async fn resources_templates_prompts_and_completion_pass_through() {
    let endpoint = start(AuthConfig::Dev, None).await;
    let client = endpoint.connect(TestClient::new(None), initialize()).await;

    let resources = client.list_all_resources().await.expect("resources/list");
    let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
    assert!(uris.contains(&"test://static-text"), "{uris:?}");
    let text = read(&client, "test://static-text").await.expect("read");
    assert_eq!(
        text[0]["text"],
        "This is the content of the static text resource."
    );

    let templates = client
        .list_all_resource_templates()
        .await
        .expect("resources/templates/list");
    assert!(
        templates
            .iter()
            .any(|t| t.uri_template == "test://template/{id}/data")
    );
    let data = read(&client, "test://template/42/data")
        .await
        .expect("read");
    let body: Value =
        serde_json::from_str(data[0]["text"].as_str().expect("text")).expect("JSON data");
    assert_eq!(body["id"], "42");
    assert_eq!(
        error_code(read(&client, "test://nowhere").await),
        ErrorCode::RESOURCE_NOT_FOUND
    );

    let prompts = client.list_all_prompts().await.expect("prompts/list");
    let names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"conf_test_simple_prompt"), "{names:?}");
    let simple = client
        .get_prompt(GetPromptRequestParams::new("conf_test_simple_prompt"))
        .await
        .expect("prompts/get");
    assert_eq!(simple.messages.len(), 1);
    let params = GetPromptRequestParams::new("conf_test_prompt_with_arguments")
        .with_arguments(arguments(json!({ "arg1": "one", "arg2": "two" })));
    let quoted = client.get_prompt(params).await.expect("prompts/get");
    let quoted = json_of(&quoted.messages);
    assert_eq!(
        quoted[0]["content"]["text"],
        "Prompt with arguments: arg1='one', arg2='two'"
    );
    let missing = GetPromptRequestParams::new("conf_test_prompt_with_arguments");
    assert_eq!(
        error_code(client.get_prompt(missing).await),
        ErrorCode::INVALID_PARAMS
    );
    let unknown = GetPromptRequestParams::new("test_simple_prompt");
    assert_eq!(
        error_code(client.get_prompt(unknown).await),
        ErrorCode::INVALID_PARAMS
    );

    let prompt_ref = Reference::for_prompt("conf_test_prompt_with_arguments");
    let completed = client
        .complete(CompleteRequestParams::new(
            prompt_ref,
            ArgumentInfo::new("arg1", "al"),
        ))
        .await
        .expect("completion/complete");
    assert_eq!(completed.completion.values, ["alpha", "alpine"]);
    let template_ref = Reference::for_resource("test://template/{id}/data");
    let ids = client
        .complete(CompleteRequestParams::new(
            template_ref,
            ArgumentInfo::new("id", "1"),
        ))
        .await
        .expect("completion/complete");
    assert_eq!(ids.completion.values, ["1", "123"]);

    let records = endpoint
        .gateway
        .audit_store()
        .query(AuditQuery {
            tool: Some("conf.resource:test://static-text".to_owned()),
            limit: 10,
            ..AuditQuery::default()
        })
        .await
        .expect("audit query");
    let (_, record) = records.first().expect("the read was audited");
    assert_eq!(
        (record.decision.as_str(), record.outcome.as_str()),
        ("allowed", "ok")
    );
    assert_eq!(record.server, "conf");
    assert!(record.result_bytes > 0);
    assert!(record.arguments.is_none());
    let _ = client.cancel().await;
    endpoint.stop().await;
}

#[tokio::test]
async fn a_server_without_grants_shows_nothing() {
    let server = |id: &str| ServerId::new(id).expect("valid id");
    let grant = |user: &str, tool: &str| Grant {
        tenant: "local".into(),
        users: vec![user.into()],
        roles: vec![],
        tools: vec![tool.into()],
    };
    let access = AccessConfig {
        tenants: vec![TenantAccess {
            tenant: "local".into(),
            servers: vec![server("conf"), server("demo")],
            models: None,
        }],
        grants: vec![grant("alice", "conf.*"), grant("bob", "demo.echo")],
        operators: vec![],
    };
    let endpoint = start(jwt_auth(), Some(access)).await;
    let bob = endpoint
        .connect_as(TestClient::new(None), initialize(), &jwt_for("bob"))
        .await;
    let resources = bob.list_all_resources().await.expect("resources/list");
    assert!(resources.is_empty(), "{resources:?}");
    let templates = bob.list_all_resource_templates().await.expect("templates");
    assert!(templates.is_empty(), "{templates:?}");
    let prompts = bob.list_all_prompts().await.expect("prompts/list");
    assert!(prompts.is_empty(), "{prompts:?}");
    // Hidden is indistinguishable from missing.
    assert_eq!(
        error_code(read(&bob, "test://static-text").await),
        ErrorCode::RESOURCE_NOT_FOUND
    );
    let get = GetPromptRequestParams::new("conf_test_simple_prompt");
    assert_eq!(
        error_code(bob.get_prompt(get).await),
        ErrorCode::INVALID_PARAMS
    );

    let alice = endpoint
        .connect_as(TestClient::new(None), initialize(), &jwt_for("alice"))
        .await;
    let text = read(&alice, "test://static-text").await.expect("read");
    assert!(text[0]["text"].as_str().is_some());
    let _ = bob.cancel().await;
    let _ = alice.cancel().await;
    endpoint.stop().await;
}
