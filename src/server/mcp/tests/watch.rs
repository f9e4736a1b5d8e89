//! `logging/setLevel` and resource subscriptions through the endpoint: a session's level
//! filters the upstream log messages relayed to it; subscribers of a resource get its
//! updates until they unsubscribe, whether the upstream speaks `resources/subscribe`
//! (2025-11-25) or `subscriptions/listen` (2026-07-28); a hidden server's resource cannot be
//! subscribed. The conformance fixture is the upstream, in process.
#![expect(
    deprecated,
    reason = "logging and resources/subscribe are deprecated by SEP-2577 and 2026-07-28, but \
              session clients still use them and the gateway serves them"
)]

use std::{borrow::Cow, sync::Arc, time::Duration};

use rmcp::{
    ClientHandler, ErrorData, RoleClient, RoleServer, ServerHandler,
    model::{
        CallToolRequestParams, CallToolResponse, ClientCapabilities, ClientConfig, Implementation,
        ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, LoggingLevel,
        LoggingMessageNotificationParam, PaginatedRequestParams, ProtocolVersion,
        ReadResourceRequestParams, ReadResourceResponse, ResourceUpdatedNotificationParam,
        ServerConfig, SetLevelRequestParams, SubscribeRequestParams, SubscriptionFilter,
        UnsubscribeRequestParams,
    },
    service::{
        ClientServiceExt, NotificationContext, RequestContext, RunningService, SubscriptionContext,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::json;
use tokio::sync::watch;

use super::support::{Endpoint, WAIT, call, http, in_process, initialize, jwt_auth, jwt_for};
use crate::{
    config::{AccessConfig, AuthConfig, Confirm, Grant, ServerId, TenantAccess},
    fixtures::{Fixture, FixtureHandler, handler},
};

const WATCHED: &str = "test://watched-resource";

/// How often the 2026-07-28 upstream announces a change of each subscribed resource.
const LISTEN_PERIOD: Duration = Duration::from_millis(200);

/// What a client saw: log texts and resource updates, each bump of `changed` one more.
#[derive(Clone)]
struct Watcher {
    logs: Arc<watch::Sender<Vec<String>>>,
    updates: Arc<watch::Sender<usize>>,
}

impl Watcher {
    fn new() -> Watcher {
        Watcher {
            logs: Arc::new(watch::channel(Vec::new()).0),
            updates: Arc::new(watch::channel(0).0),
        }
    }

    fn updates(&self) -> usize {
        *self.updates.borrow()
    }

    async fn wait_updates(&self, at_least: usize) {
        let mut updates = self.updates.subscribe();
        let waited = tokio::time::timeout(WAIT, updates.wait_for(|n| *n >= at_least)).await;
        assert!(
            waited.is_ok_and(|r| r.is_ok()),
            "{at_least} updates did not arrive"
        );
    }

    async fn wait_logs(&self, at_least: usize) -> Vec<String> {
        let mut logs = self.logs.subscribe();
        let waited = tokio::time::timeout(WAIT, logs.wait_for(|l| l.len() >= at_least)).await;
        assert!(
            waited.is_ok_and(|r| r.is_ok()),
            "log messages did not arrive"
        );
        self.logs.borrow().clone()
    }
}

impl ClientHandler for Watcher {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("watch-test", "0"),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = params.data.as_str().unwrap_or_default().to_owned();
        self.logs.send_modify(|l| l.push(text));
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if params.uri == WATCHED {
            self.updates.send_modify(|n| *n += 1);
        }
    }
}

/// The conformance fixture, answering as a 2025-11-25 server (`resources/subscribe`), or as
/// a 2026-07-28 one whose `subscriptions/listen` announces a change of each subscribed
/// resource every [`LISTEN_PERIOD`] (the fixture itself answers none there).
#[derive(Clone)]
struct Upstream {
    fixture: FixtureHandler,
    modern: bool,
    /// Upstream subscriptions begun and ended (`resources/subscribe` and `unsubscribe`, or
    /// `subscriptions/listen` streams opened and closed), over all connections.
    subscriptions: Arc<watch::Sender<(usize, usize)>>,
}

impl Upstream {
    fn new(modern: bool) -> Upstream {
        Upstream {
            fixture: handler(Fixture::Conformance).expect("in-process fixture"),
            modern,
            subscriptions: Arc::new(watch::channel((0, 0)).0),
        }
    }

    fn begun(&self) -> usize {
        self.subscriptions.borrow().0
    }

    async fn wait_ended(&self, ended: usize) {
        let mut subscriptions = self.subscriptions.subscribe();
        let waited = tokio::time::timeout(WAIT, subscriptions.wait_for(|(_, e)| *e >= ended)).await;
        assert!(
            waited.is_ok_and(|r| r.is_ok()),
            "the upstream subscription did not end"
        );
    }
}

impl ServerHandler for Upstream {
    fn get_info(&self) -> ServerConfig {
        self.fixture.get_info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        if self.modern {
            self.fixture.supported_protocol_versions()
        } else {
            Cow::Borrowed(ProtocolVersion::known_up_to(&ProtocolVersion::V_2025_11_25))
        }
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        self.fixture.list_tools(request, context).await
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        self.fixture.call_tool(request, context).await
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.fixture.list_resources(request, context).await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        self.fixture.list_resource_templates(request, context).await
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        self.fixture.read_resource(request, context).await
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.send_modify(|(begun, _)| *begun += 1);
        self.fixture.subscribe(request, context).await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscriptions.send_modify(|(_, ended)| *ended += 1);
        self.fixture.unsubscribe(request, context).await
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.fixture.set_level(request, context).await
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        Some(requested.supported_by(&self.get_info().capabilities))
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        let uris = context
            .accepted()
            .resource_subscriptions
            .clone()
            .unwrap_or_default();
        let mut ticks = tokio::time::interval(LISTEN_PERIOD);
        self.subscriptions.send_modify(|(begun, _)| *begun += 1);
        let _ended = EndCount(self.subscriptions.clone());
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                _ = ticks.tick() => {
                    for uri in &uris {
                        if context.sink().notify_resource_updated(uri.clone()).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }
}

/// Counts a `subscriptions/listen` stream as ended when its handler returns.
struct EndCount(Arc<watch::Sender<(usize, usize)>>);

impl Drop for EndCount {
    fn drop(&mut self) {
        self.0.send_modify(|(_, ended)| *ended += 1);
    }
}

/// The endpoint in front of [`Upstream`] (server id `conf`), with `access` rules.
async fn endpoint(upstream: &Upstream, auth: AuthConfig, access: Option<AccessConfig>) -> Endpoint {
    let mut server = in_process("conf", upstream.clone());
    server.confirm = Confirm::None;
    let mut demo = in_process("demo", crate::fixtures::demo::DemoServer::new());
    demo.confirm = Confirm::None;
    Endpoint::start_servers(auth, vec![server, demo], access).await
}

async fn connect(
    endpoint: &Endpoint,
    token: &str,
) -> (Watcher, RunningService<RoleClient, Watcher>) {
    let watcher = Watcher::new();
    let config =
        StreamableHttpClientTransportConfig::with_uri(endpoint.url()).auth_header(token.to_owned());
    let transport = StreamableHttpClientTransport::with_client(http(), config);
    let service = tokio::time::timeout(
        WAIT,
        watcher
            .clone()
            .serve_with_lifecycle(transport, initialize()),
    )
    .await
    .expect("handshake within the deadline")
    .expect("handshake succeeds");
    (watcher, service)
}

async fn subscribe(service: &RunningService<RoleClient, Watcher>, uri: &str) -> Result<(), String> {
    tokio::time::timeout(WAIT, service.subscribe(SubscribeRequestParams::new(uri)))
        .await
        .expect("an answer within the deadline")
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_session_level_filters_relayed_log_messages() {
    // Two upstreams: a connection's log messages go to a caller only while its call is the
    // one known there (ended calls linger two seconds), so each call has its own.
    let upstream = |id| {
        let mut server = in_process(id, Upstream::new(true));
        server.confirm = Confirm::None;
        server
    };
    let servers = vec![upstream("quiet"), upstream("loud")];
    let endpoint = Endpoint::start_servers(AuthConfig::Dev, servers, None).await;
    let (watcher, service) = connect(&endpoint, &endpoint.token).await;
    let info = service.peer_info().expect("initialized");
    assert!(info.capabilities.logging.is_some(), "logging is declared");
    let set = |level| service.set_level(SetLevelRequestParams::new(level));
    set(LoggingLevel::Warning).await.expect("logging/setLevel");
    let quiet = service
        .call_tool(call("quiet_test_tool_with_logging", json!({})))
        .await
        .expect("tools/call");
    assert_eq!(quiet.is_error, Some(false));
    set(LoggingLevel::Info).await.expect("logging/setLevel");
    service
        .call_tool(call("loud_test_tool_with_logging", json!({})))
        .await
        .expect("tools/call");
    // The fixture logs three info messages per call: only the second call's got through
    // (the first call's, had they passed, would have come first).
    let logs = watcher.wait_logs(3).await;
    assert_eq!(
        logs,
        [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed"
        ]
    );
    drop(service);
    endpoint.stop().await;
}

/// Two sessions subscribe; one unsubscribes and gets nothing more while the other, the
/// witness, sees the resource change twice.
async fn updates_follow_subscriptions(modern: bool) {
    let upstream = Upstream::new(modern);
    let endpoint = endpoint(&upstream, AuthConfig::Dev, None).await;
    let info_caps = {
        let (_, probe) = connect(&endpoint, &endpoint.token).await;
        probe.peer_info().expect("initialized").capabilities.clone()
    };
    assert_eq!(
        info_caps.resources.and_then(|r| r.subscribe),
        Some(true),
        "subscriptions are declared"
    );
    let (ada, ada_service) = connect(&endpoint, &endpoint.token).await;
    let (witness, witness_service) = connect(&endpoint, &endpoint.token).await;
    subscribe(&ada_service, WATCHED)
        .await
        .expect("ada subscribes");
    // Twice is once: the session already watches it.
    subscribe(&ada_service, WATCHED).await.expect("again");
    subscribe(&witness_service, WATCHED)
        .await
        .expect("the witness subscribes");
    ada.wait_updates(1).await;
    witness.wait_updates(1).await;
    assert_eq!(upstream.begun(), 1, "the upstream is subscribed once");
    tokio::time::timeout(
        WAIT,
        ada_service.unsubscribe(UnsubscribeRequestParams::new(WATCHED)),
    )
    .await
    .expect("an answer within the deadline")
    .expect("ada unsubscribes");
    let ada_seen = ada.updates();
    let witness_seen = witness.updates();
    witness.wait_updates(witness_seen + 2).await;
    assert_eq!(ada.updates(), ada_seen, "no update after unsubscribing");
    // The last watcher's session closing unsubscribes upstream; a new one subscribes afresh.
    witness_service
        .cancel()
        .await
        .expect("the witness closes its session");
    upstream.wait_ended(1).await;
    let (again, again_service) = connect(&endpoint, &endpoint.token).await;
    subscribe(&again_service, WATCHED)
        .await
        .expect("subscribes");
    again.wait_updates(1).await;
    assert_eq!(upstream.begun(), 2);
    drop((ada_service, again_service));
    endpoint.stop().await;
}

#[tokio::test]
async fn updates_follow_subscriptions_on_a_2025_upstream() {
    updates_follow_subscriptions(false).await;
}

#[tokio::test]
async fn updates_follow_subscriptions_on_a_2026_upstream() {
    updates_follow_subscriptions(true).await;
}

#[tokio::test]
async fn a_hidden_servers_resource_cannot_be_subscribed() {
    let server = |id: &str| ServerId::new(id).expect("valid id");
    let access = AccessConfig {
        tenants: vec![TenantAccess {
            tenant: "local".into(),
            servers: vec![server("conf"), server("demo")],
            models: None,
        }],
        grants: vec![Grant {
            tenant: "local".into(),
            users: vec!["bob".into()],
            roles: vec![],
            tools: vec!["demo.echo".into()],
        }],
        operators: vec![],
    };
    let endpoint = endpoint(&Upstream::new(false), jwt_auth(), Some(access)).await;
    let (bob, service) = connect(&endpoint, &jwt_for("bob")).await;
    let hidden = subscribe(&service, WATCHED).await;
    let unknown = subscribe(&service, "test://no-such-resource").await;
    let (hidden, unknown) = (
        hidden.expect_err("hidden is refused"),
        unknown.expect_err("unknown is refused"),
    );
    assert_eq!(
        hidden.replace(WATCHED, "URI"),
        unknown.replace("test://no-such-resource", "URI"),
        "hidden looks exactly like unknown"
    );
    assert!(hidden.contains("-32002"), "resource not found: {hidden}");
    assert_eq!(bob.updates(), 0);
    drop(service);
    endpoint.stop().await;
}
