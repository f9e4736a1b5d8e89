//! Input rounds (protocol 2026-07-28) of an upstream, through the endpoint: a session client
//! is asked with requests of its own and the gateway retries the upstream; a 2026-07-28
//! client gets the round handed back under a single-use handle of ours and retries itself; a
//! write the user confirmed stays confirmed across the rounds and runs once; the upstream is
//! told what the caller can answer. Also: log messages of a call reach its client while an
//! earlier call of the same caller still lingers. The conformance fixture is the upstream.
#![expect(
    deprecated,
    reason = "sampling is deprecated by SEP-2577, but the conformance fixture still samples \
              and the gateway relays it"
)]

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::{
    ClientHandler, ErrorData, RoleClient,
    model::{
        CallToolResponse, ClientCapabilities, ClientConfig, CreateMessageRequestParams,
        CreateMessageResult, ElicitRequestParams, ElicitResult, ElicitationAction, Implementation,
        InputRequest, InputResponses, LoggingMessageNotificationParam, ProtocolVersion,
        SamplingMessage,
    },
    service::{
        ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::{
    runs,
    support::{Endpoint, WAIT, call, discover, http, in_process, initialize, text},
};
use crate::{
    config::{AuthConfig, Confirm},
    fixtures::{Fixture, handler},
};

/// What the client's model answers.
const REPLY: &str = "four, says the client's model";

/// A client that samples and fills forms: the gateway's confirmation form with yes, any
/// other form with a contact; it records what it was asked and the log messages it got.
#[derive(Clone)]
struct RoundClient {
    sampling: bool,
    asked: Arc<Mutex<Vec<String>>>,
    logs: Arc<watch::Sender<Vec<String>>>,
}

impl RoundClient {
    fn new(sampling: bool) -> RoundClient {
        RoundClient {
            sampling,
            asked: Arc::default(),
            logs: Arc::new(watch::channel(Vec::new()).0),
        }
    }

    fn asked(&self) -> Vec<String> {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn record(&self, what: String) {
        self.asked
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(what);
    }
}

impl ClientHandler for RoundClient {
    fn get_info(&self) -> ClientConfig {
        let mut capabilities = ClientCapabilities::builder().enable_elicitation().build();
        if self.sampling {
            capabilities = ClientCapabilities::builder()
                .enable_sampling()
                .enable_elicitation()
                .build();
        }
        ClientConfig::new(capabilities, Implementation::new("round-test", "0"))
            .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let prompt: String = params
            .messages
            .iter()
            .flat_map(|m| m.content.iter())
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        self.record(format!("sampling: {prompt}"));
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text(REPLY),
            "test-model".to_owned(),
        ))
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        let ElicitRequestParams::FormElicitationParams { message, .. } = request else {
            return Ok(ElicitResult::new(ElicitationAction::Decline));
        };
        let content = if message.starts_with("Allow `") {
            json!({ "approve": true })
        } else {
            json!({ "username": "ada", "email": "ada@example.test" })
        };
        self.record(format!("form: {message}"));
        Ok(ElicitResult::new(ElicitationAction::Accept).with_content(content))
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = params.data.as_str().unwrap_or_default().to_owned();
        self.logs.send_modify(|logs| logs.push(text));
    }
}

/// The endpoint in front of the conformance fixture on protocol 2026-07-28 (server id
/// `conf`), confirming as `confirm` says.
async fn endpoint(confirm: Confirm) -> Endpoint {
    let fixture = handler(Fixture::Conformance).expect("in-process fixture");
    let mut server = in_process("conf", fixture);
    server.confirm = confirm;
    Endpoint::start_servers(AuthConfig::Dev, vec![server], None).await
}

async fn connect(
    endpoint: &Endpoint,
    client: RoundClient,
    lifecycle: ClientLifecycleMode,
) -> RunningService<RoleClient, RoundClient> {
    let config = StreamableHttpClientTransportConfig::with_uri(endpoint.url())
        .auth_header(endpoint.token.clone());
    let transport = StreamableHttpClientTransport::with_client(http(), config);
    tokio::time::timeout(WAIT, client.serve_with_lifecycle(transport, lifecycle))
        .await
        .expect("handshake within the deadline")
        .expect("handshake succeeds")
}

/// Calls `name`, letting rmcp's client answer any round through its handler.
async fn call_text(
    client: &RunningService<RoleClient, RoundClient>,
    name: &'static str,
    args: Value,
) -> (bool, String) {
    let result = tokio::time::timeout(WAIT, client.call_tool(call(name, args)))
        .await
        .expect("answered within the deadline")
        .expect("no protocol error");
    (result.is_error == Some(true), text(&result))
}

async fn samples_and_elicits(lifecycle: ClientLifecycleMode) {
    let endpoint = endpoint(Confirm::None).await;
    let client = RoundClient::new(true);
    let service = connect(&endpoint, client.clone(), lifecycle).await;
    let (failed, said) = call_text(
        &service,
        "conf_test_sampling",
        json!({ "prompt": "What is 2+2?" }),
    )
    .await;
    assert!(!failed, "{said}");
    assert_eq!(said, format!("LLM response: {REPLY}"));
    let (failed, said) = call_text(
        &service,
        "conf_test_elicitation",
        json!({ "message": "Who are you?" }),
    )
    .await;
    assert!(!failed, "{said}");
    assert!(said.starts_with("User response: action=accept"), "{said}");
    assert!(said.contains("ada@example.test"), "{said}");
    assert_eq!(
        client.asked(),
        ["sampling: What is 2+2?", "form: Who are you?"]
    );
    assert_eq!(runs(&endpoint, "conf.test_sampling").await, 1);
    drop(service);
    endpoint.stop().await;
}

#[tokio::test]
async fn a_session_client_answers_an_upstreams_input_rounds() {
    samples_and_elicits(initialize()).await;
}

#[tokio::test]
async fn a_discover_client_answers_the_rounds_handed_back() {
    samples_and_elicits(discover()).await;
}

#[tokio::test]
async fn a_handed_back_round_is_ours_single_use_and_bound_to_its_call() {
    let endpoint = endpoint(Confirm::None).await;
    let service = connect(&endpoint, RoundClient::new(true), discover()).await;
    let args = json!({ "prompt": "What is 2+2?" });
    let first = service
        .call_tool_once(call("conf_test_sampling", args.clone()))
        .await
        .expect("tools/call");
    let CallToolResponse::InputRequired(round) = first else {
        panic!("expected the upstream's round, got {first:?}");
    };
    let state = round.request_state.expect("a requestState");
    assert!(state.starts_with("mcpgate-round:"), "{state}");
    assert!(
        !state.contains("conformance:"),
        "the upstream's state stays here"
    );
    let requests = round.input_requests.expect("the upstream's requests");
    assert!(matches!(
        requests.get("answer"),
        Some(InputRequest::CreateMessage(_))
    ));

    let answer = serde_json::to_value(CreateMessageResult::new(
        SamplingMessage::assistant_text("by hand"),
        "m".to_owned(),
    ))
    .expect("serializes");
    let retry = |name: &'static str, args: Value| {
        let mut params = call(name, args);
        params.input_responses = Some(InputResponses::from([(
            "answer".to_owned(),
            answer.clone(),
        )]));
        params.request_state = Some(state.clone());
        params
    };
    // Another tool, or other arguments, cannot use the round (and spend it).
    let elsewhere = service
        .call_tool(retry("conf_test_sampling", json!({ "prompt": "other" })))
        .await
        .expect("tools/call");
    assert_eq!(elsewhere.is_error, Some(true));
    assert!(
        text(&elsewhere).starts_with("[input_round_invalid]"),
        "{}",
        text(&elsewhere)
    );

    let round = service
        .call_tool_once(call("conf_test_sampling", args.clone()))
        .await
        .expect("tools/call");
    let CallToolResponse::InputRequired(round) = round else {
        panic!("expected a round, got {round:?}");
    };
    let state = round.request_state.expect("a requestState");
    let retry = |state: &str| {
        let mut params = call("conf_test_sampling", args.clone());
        params.input_responses = Some(InputResponses::from([(
            "answer".to_owned(),
            answer.clone(),
        )]));
        params.request_state = Some(state.to_owned());
        params
    };
    let done = service
        .call_tool_once(retry(&state))
        .await
        .expect("tools/call");
    let CallToolResponse::Complete(done) = done else {
        panic!("expected the result, got {done:?}");
    };
    assert_eq!(text(&done), "LLM response: by hand");
    let replay = service.call_tool(retry(&state)).await.expect("tools/call");
    assert!(
        text(&replay).starts_with("[input_round_invalid]"),
        "{}",
        text(&replay)
    );
    assert_eq!(runs(&endpoint, "conf.test_sampling").await, 1);
    drop(service);
    endpoint.stop().await;
}

#[tokio::test]
async fn the_upstream_is_told_what_the_caller_cannot_answer() {
    let endpoint = endpoint(Confirm::None).await;
    for lifecycle in [initialize(), discover()] {
        let client = RoundClient::new(false);
        let service = connect(&endpoint, client.clone(), lifecycle).await;
        let (failed, said) = call_text(
            &service,
            "conf_test_sampling",
            json!({ "prompt": "What is 2+2?" }),
        )
        .await;
        assert!(failed, "{said}");
        assert!(
            said.contains("the client did not declare the sampling capability"),
            "{said}"
        );
        assert!(client.asked().is_empty());
        drop(service);
    }
    endpoint.stop().await;
}

async fn confirmed_write_with_rounds(lifecycle: ClientLifecycleMode) {
    let endpoint = endpoint(Confirm::All).await;
    let client = RoundClient::new(true);
    let service = connect(&endpoint, client.clone(), lifecycle).await;
    let (failed, said) = call_text(
        &service,
        "conf_test_elicitation",
        json!({ "message": "Who are you?" }),
    )
    .await;
    assert!(!failed, "{said}");
    assert!(said.starts_with("User response: action=accept"), "{said}");
    let asked = client.asked();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert!(
        asked[0].starts_with("form: Allow `conf.test_elicitation`"),
        "{asked:?}"
    );
    assert_eq!(asked[1], "form: Who are you?");
    assert_eq!(runs(&endpoint, "conf.test_elicitation").await, 1);
    drop(service);
    endpoint.stop().await;
}

#[tokio::test]
async fn a_confirmed_write_stays_confirmed_across_rounds_in_a_session() {
    confirmed_write_with_rounds(initialize()).await;
}

#[tokio::test]
async fn a_confirmed_write_stays_confirmed_across_rounds_handed_back() {
    confirmed_write_with_rounds(discover()).await;
}

#[tokio::test]
async fn log_messages_reach_the_caller_while_its_earlier_call_lingers() {
    let endpoint = endpoint(Confirm::None).await;
    let client = RoundClient::new(true);
    let service = connect(&endpoint, client.clone(), initialize()).await;
    let (failed, said) = call_text(&service, "conf_test_simple_text", json!({})).await;
    assert!(!failed, "{said}");
    // At once: the first call still lingers on the upstream connection.
    let (failed, said) = call_text(&service, "conf_test_tool_with_logging", json!({})).await;
    assert!(!failed, "{said}");
    let mut logs = client.logs.subscribe();
    tokio::time::timeout(WAIT, logs.wait_for(|l| l.len() == 3))
        .await
        .expect("the log messages arrive")
        .expect("the client is alive");
    drop(service);
    endpoint.stop().await;
}
