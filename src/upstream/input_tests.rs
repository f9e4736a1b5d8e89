//! Input rounds against a real rmcp server on 2026-07-28 over an in-memory pipe: each round
//! is answered through the relay and the call sent again with the answers and the state; the
//! server is told what the caller can answer; a round asking for more is refused; rounds are
//! bounded; a caller that answers rounds itself gets the round back.
#![expect(
    deprecated,
    reason = "sampling is deprecated by SEP-2577, but servers still ask for it"
)]

use std::{
    collections::BTreeMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::future::BoxFuture;
use rmcp::{
    ErrorData, RoleClient, RoleServer, ServerHandler, ServiceExt,
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ClientCapabilities, ContentBlock,
        CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult, ElicitRequest,
        ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
        InputRequiredResult, LoggingMessageNotificationParam, ProgressNotificationParam,
        ProtocolVersion, SamplingMessage, ServerCapabilities, ServerConfig,
    },
    service::{ClientLifecycleMode, ClientServiceExt, RequestContext, RunningService},
};
use serde_json::json;

use super::{MAX_ROUNDS, call_tool};
use crate::upstream::{
    UpstreamError, extensions,
    relay::{CallRelay, RelayRegistry},
};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A 2026-07-28 server whose tools ask in rounds.
#[derive(Clone, Default)]
struct Asker {
    calls: Arc<AtomicUsize>,
}

fn form(message: &str) -> InputRequest {
    let schema = ElicitationSchema::builder()
        .required_bool("ok")
        .build()
        .expect("a valid schema");
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.to_owned(),
            requested_schema: schema,
        },
    ))
}

fn round(key: &str, request: InputRequest, state: &str) -> CallToolResponse {
    let requests = BTreeMap::from([(key.to_owned(), request)]);
    CallToolResponse::InputRequired(InputRequiredResult::new(
        Some(requests),
        Some(state.to_owned()),
    ))
}

fn text(text: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(text)]).into()
}

impl ServerHandler for Asker {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let answered = request.input_responses.as_ref();
        let response = match request.name.as_ref() {
            // Two rounds, then the answers and the state it saw.
            "twice" => match (request.request_state.as_deref(), answered) {
                (None, _) => round("first", form("one?"), "s1"),
                (Some("s1"), Some(a)) => {
                    round("second", form(&format!("two after {}", a["first"])), "s2")
                }
                (Some("s2"), Some(a)) => text(format!("done with {}", a["second"])),
                other => text(format!("unexpected retry {other:?}")),
            },
            "forever" => round("again", form("again?"), "s"),
            "sampling" => {
                let params =
                    CreateMessageRequestParams::new(vec![SamplingMessage::user_text("hi")], 10);
                round(
                    "llm",
                    InputRequest::CreateMessage(CreateMessageRequest::new(params)),
                    "s",
                )
            }
            "capabilities" => {
                let declared = context.client_capabilities().unwrap_or_default();
                text(serde_json::to_string(&declared).expect("serializes"))
            }
            other => text(format!("unknown tool {other}")),
        };
        Ok(response)
    }
}

/// A caller declaring elicitation only, accepting every form; or one answering rounds
/// itself.
#[derive(Default)]
struct Caller {
    hands_back: bool,
    asked: Mutex<Vec<String>>,
}

impl CallRelay for Caller {
    fn progress(&self, _params: ProgressNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn log(&self, _params: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("never asked", None)) })
    }

    fn elicit(
        &self,
        params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &params {
            self.asked
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(message.clone());
        }
        Box::pin(async {
            Ok(ElicitResult::new(ElicitationAction::Accept).with_content(json!({ "ok": true })))
        })
    }

    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities::builder().enable_elicitation().build()
    }

    fn hands_back_input(&self) -> bool {
        self.hands_back
    }
}

async fn connect(server: Asker) -> RunningService<RoleClient, ()> {
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let lifecycle = ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        legacy_version: None,
    };
    let client = tokio::time::timeout(TIMEOUT, ().serve_with_lifecycle(client_io, lifecycle))
        .await
        .expect("handshake in time")
        .expect("handshake");
    let version = client.peer_info().map(|i| i.protocol_version.clone());
    assert_eq!(version, Some(ProtocolVersion::V_2026_07_28));
    client
}

async fn call(
    client: &RunningService<RoleClient, ()>,
    name: &'static str,
    relay: Option<Arc<dyn CallRelay>>,
) -> Result<CallToolResult, UpstreamError> {
    let registry = RelayRegistry::new();
    let guard = registry.register(relay.clone(), TIMEOUT);
    call_tool(
        client.peer(),
        None,
        CallToolRequestParams::new(name),
        &guard,
        relay.as_ref(),
    )
    .await
}

fn said(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect()
}

#[tokio::test]
async fn rounds_are_answered_by_the_caller_and_the_call_sent_again() {
    let server = Asker::default();
    let client = connect(server.clone()).await;
    let caller = Arc::new(Caller::default());
    let result = call(&client, "twice", Some(caller.clone()))
        .await
        .expect("completes");
    assert_eq!(
        said(&result),
        r#"done with {"action":"accept","content":{"ok":true}}"#
    );
    let asked = caller.asked.lock().expect("lock").clone();
    assert_eq!(asked[0], "one?");
    assert!(asked[1].starts_with("two after {"), "{asked:?}");
    assert_eq!(server.calls.load(Ordering::SeqCst), 3);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn the_server_is_told_what_each_caller_can_answer() {
    let client = connect(Asker::default()).await;
    let with_caller = call(&client, "capabilities", Some(Arc::new(Caller::default())))
        .await
        .expect("completes");
    let declared: ClientCapabilities = serde_json::from_str(&said(&with_caller)).expect("json");
    assert!(declared.elicitation.is_some());
    assert!(declared.sampling.is_none());
    let alone = call(&client, "capabilities", None)
        .await
        .expect("completes");
    let declared: ClientCapabilities = serde_json::from_str(&said(&alone)).expect("json");
    // Nothing to answer with; the MCP Apps views the gateway passes through, as always.
    let mut only_views = ClientCapabilities::default();
    only_views.extensions = Some(extensions::declared());
    assert_eq!(declared, only_views);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn a_round_asking_more_than_was_declared_is_refused() {
    let client = connect(Asker::default()).await;
    let relayed = call(&client, "sampling", Some(Arc::new(Caller::default()))).await;
    assert!(
        matches!(&relayed, Err(UpstreamError::Protocol(m)) if m.contains("sampling/createMessage")),
        "{relayed:?}"
    );
    let alone = call(&client, "twice", None).await;
    assert!(
        matches!(alone, Err(UpstreamError::Protocol(_))),
        "{alone:?}"
    );
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn rounds_are_bounded() {
    let server = Asker::default();
    let client = connect(server.clone()).await;
    let result = call(&client, "forever", Some(Arc::new(Caller::default()))).await;
    assert!(
        matches!(result, Err(UpstreamError::InputUnanswered { .. })),
        "{result:?}"
    );
    assert_eq!(server.calls.load(Ordering::SeqCst), MAX_ROUNDS);
    client.cancel().await.expect("closed");
}

#[tokio::test]
async fn a_caller_answering_rounds_itself_gets_the_round() {
    let client = connect(Asker::default()).await;
    let caller = Arc::new(Caller {
        hands_back: true,
        ..Caller::default()
    });
    let result = call(&client, "twice", Some(caller.clone())).await;
    let Err(UpstreamError::InputRequired(round)) = result else {
        panic!("expected the round back, got {result:?}");
    };
    assert_eq!(round.request_state.as_deref(), Some("s1"));
    assert!(caller.asked.lock().expect("lock").is_empty());
    client.cancel().await.expect("closed");
}
