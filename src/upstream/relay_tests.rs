//! The relay registry: routing by progress token, by request id, to the only call, and
//! what ending a call does.

use std::sync::Mutex;

use rmcp::model::{LoggingLevel, NumberOrString};
use serde_json::Value;

use super::*;

/// A relay that records the log messages it got, so tests can tell relays apart.
#[derive(Default)]
struct Recorder {
    logs: Mutex<Vec<String>>,
}

impl Recorder {
    fn logs(&self) -> Vec<String> {
        self.logs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }
}

impl CallRelay for Recorder {
    fn progress(&self, _params: ProgressNotificationParam) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn log(&self, params: LoggingMessageNotificationParam) -> BoxFuture<'_, ()> {
        let text = params.data.as_str().unwrap_or_default().to_owned();
        self.logs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(text);
        Box::pin(async {})
    }

    fn create_message(
        &self,
        _params: CreateMessageRequestParams,
    ) -> BoxFuture<'_, Result<CreateMessageResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("not in this test", None)) })
    }

    fn elicit(
        &self,
        _params: ElicitRequestParams,
    ) -> BoxFuture<'_, Result<ElicitResult, ErrorData>> {
        Box::pin(async { Err(ErrorData::internal_error("not in this test", None)) })
    }
}

const TIMEOUT: Duration = Duration::from_secs(30);

fn token(n: i64) -> ProgressToken {
    ProgressToken(NumberOrString::Number(n))
}

/// Routes a log message through `route` so the test can see which relay it reached.
async fn log_through(route: Option<Routed>, text: &str) {
    let route = route.expect("a route");
    let params = LoggingMessageNotificationParam::new(LoggingLevel::Info, Value::from(text));
    route.relay.log(params).await;
}

#[tokio::test]
async fn progress_and_requests_route_by_token_and_id() {
    let registry = RelayRegistry::new();
    let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let guard_a = registry.register(Some(a.clone()), TIMEOUT);
    let guard_b = registry.register(Some(b.clone()), TIMEOUT);
    guard_a.sent(RequestId::Number(1), token(10));
    guard_b.sent(RequestId::Number(2), token(20));

    log_through(registry.by_token(&token(20)), "to b").await;
    log_through(registry.by_request(&RequestId::Number(1)), "to a").await;
    assert_eq!(a.logs(), ["to a"]);
    assert_eq!(b.logs(), ["to b"]);
    assert!(registry.by_token(&token(30)).is_none());
    assert!(registry.by_request(&RequestId::Number(3)).is_none());
    // Two calls: nothing may be guessed.
    assert!(registry.sole(false).is_none());
    assert_eq!(registry.in_flight(), 2);
    drop((guard_a, guard_b));
}

#[tokio::test]
async fn only_a_single_known_call_gets_unrouted_messages() {
    let registry = RelayRegistry::new();
    let a = Arc::new(Recorder::default());
    let guard_a = registry.register(Some(a.clone()), TIMEOUT);
    log_through(registry.sole(true), "one").await;
    assert_eq!(a.logs(), ["one"]);

    // A call without a relay (another caller) makes two: no fallback at all.
    let other = registry.register(None, TIMEOUT);
    assert!(registry.sole(false).is_none());
    drop(other);
    drop(guard_a);
}

#[tokio::test]
async fn a_lone_call_without_relay_routes_nowhere() {
    let registry = RelayRegistry::new();
    let guard = registry.register(None, TIMEOUT);
    guard.sent(RequestId::Number(1), token(1));
    assert!(registry.sole(false).is_none());
    assert!(registry.by_token(&token(1)).is_none());
}

#[tokio::test(start_paused = true)]
async fn an_ended_call_lingers_for_late_notifications_then_goes() {
    let registry = RelayRegistry::new();
    let a = Arc::new(Recorder::default());
    let guard = registry.register(Some(a.clone()), TIMEOUT);
    guard.sent(RequestId::Number(1), token(1));
    let ended = registry.by_token(&token(1)).expect("running").ended;
    assert!(!ended.is_cancelled());
    drop(guard);

    // Ended: requests are cancelled and no longer routed; late notifications still are.
    assert!(ended.is_cancelled());
    assert_eq!(registry.in_flight(), 0);
    assert!(registry.by_request(&RequestId::Number(1)).is_none());
    assert!(registry.sole(true).is_none());
    log_through(registry.by_token(&token(1)), "late").await;
    log_through(registry.sole(false), "late log").await;
    assert_eq!(a.logs(), ["late", "late log"]);
    // A new call while the old one lingers: unrouted messages go nowhere.
    let b = registry.register(Some(Arc::new(Recorder::default())), TIMEOUT);
    assert!(registry.sole(false).is_none());
    drop(b);

    tokio::time::advance(LINGER).await;
    assert!(registry.by_token(&token(1)).is_none());
    assert!(registry.sole(false).is_none());
}

#[tokio::test(start_paused = true)]
async fn lingering_calls_are_capped() {
    let registry = RelayRegistry::new();
    for n in 0..(MAX_LINGERING as i64 + 10) {
        let guard = registry.register(Some(Arc::new(Recorder::default())), TIMEOUT);
        guard.sent(RequestId::Number(n), token(n));
    }
    assert!(registry.lock().len() <= MAX_LINGERING);
    // The oldest went first.
    assert!(registry.by_token(&token(0)).is_none());
    assert!(
        registry
            .by_token(&token(MAX_LINGERING as i64 + 9))
            .is_some()
    );
}

#[tokio::test(start_paused = true)]
async fn a_relayed_request_is_bounded_by_the_call() {
    let registry = RelayRegistry::new();
    let guard = registry.register(Some(Arc::new(Recorder::default())), TIMEOUT);
    let route = registry.sole(true).expect("running");
    let never: BoxFuture<'_, Result<(), ErrorData>> = Box::pin(std::future::pending());
    let asked = tokio::spawn(async move { ask(&route, never).await });
    tokio::task::yield_now().await;
    drop(guard);
    let answer = asked.await.expect("task");
    assert!(answer.is_err_and(|e| e.message.contains("has ended")));

    // The first call lingers: a fresh connection for the second.
    let registry = RelayRegistry::new();
    let guard = registry.register(Some(Arc::new(Recorder::default())), TIMEOUT);
    let route = registry.sole(true).expect("running");
    let never: BoxFuture<'_, Result<(), ErrorData>> = Box::pin(std::future::pending());
    let answer = ask(&route, never).await;
    assert!(answer.is_err_and(|e| e.message.contains("timeout")));
    drop(guard);
}

#[test]
fn local_log_text_is_cut_and_escaped() {
    let long = "x".repeat(MAX_LOGGED_CHARS + 5);
    let clean = sanitize(&long);
    assert_eq!(clean.chars().count(), MAX_LOGGED_CHARS + 1);
    assert_eq!(sanitize("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
}
