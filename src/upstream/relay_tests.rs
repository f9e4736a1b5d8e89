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
    owner: Option<&'static str>,
}

impl Recorder {
    /// A relay of `user`'s call.
    fn of(user: &'static str) -> Arc<Recorder> {
        Arc::new(Recorder {
            owner: Some(user),
            ..Recorder::default()
        })
    }

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

    fn owner(&self) -> Owner {
        self.owner
            .map_or(Owner::Unknown, |user| Owner::caller("t", user))
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
    // A new call while the old one lingers: unrouted notifications go nowhere, but a
    // request (which only a running call's handler can be asking) goes to the new call.
    let b = Arc::new(Recorder::default());
    let guard_b = registry.register(Some(b.clone()), TIMEOUT);
    assert!(registry.sole(false).is_none());
    log_through(registry.sole(true), "asked").await;
    assert_eq!(b.logs(), ["asked"]);
    drop(guard_b);

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

#[tokio::test(start_paused = true)]
async fn progress_read_before_its_call_recorded_the_token_waits_for_it() {
    let registry = RelayRegistry::new();
    let relay = Recorder::of("alice");
    let guard = registry.register(Some(relay.clone()), TIMEOUT);
    // The upstream's progress is handled before the call ran on to record its token.
    let early = tokio::spawn({
        let registry = registry.clone();
        async move {
            log_through(registry.by_token_when_sent(&token(7)).await, "early").await;
        }
    });
    tokio::task::yield_now().await;
    guard.sent(RequestId::Number(7), token(7));
    early.await.expect("the progress found its call");
    assert_eq!(relay.logs(), ["early"]);
    // A token no call has, with every call's token known, is dropped at once; with a call
    // still to record its own, after the bound.
    let start = tokio::time::Instant::now();
    assert!(registry.by_token_when_sent(&token(8)).await.is_none());
    assert_eq!(start.elapsed(), Duration::ZERO);
    let _unsent = registry.register(Some(Recorder::of("bob")), TIMEOUT);
    assert!(registry.by_token_when_sent(&token(8)).await.is_none());
    assert_eq!(start.elapsed(), TOKEN_WAIT);
    drop(guard);
}

#[test]
fn no_tenant_and_user_pair_reads_as_another() {
    assert_eq!(Owner::caller("t", "bob"), Owner::caller("t", "bob"));
    assert_ne!(Owner::caller("ab", "c"), Owner::caller("a", "bc"));
    assert_ne!(Owner::caller("1:a", "b"), Owner::caller("1", "a:b"));
    assert_ne!(Owner::caller("", "3:abc"), Owner::caller("3:abc", ""));
}

#[test]
fn local_log_text_is_cut_and_escaped() {
    let long = "x".repeat(MAX_LOGGED_CHARS + 5);
    let clean = sanitize(&long);
    assert_eq!(clean.chars().count(), MAX_LOGGED_CHARS + 1);
    assert_eq!(sanitize("a\nb\u{1b}[31m"), "a\\nb\\u{1b}[31m");
}

#[tokio::test(start_paused = true)]
async fn a_log_goes_to_the_running_call_when_the_lingering_ones_are_its_owners() {
    let registry = RelayRegistry::new();
    let earlier = registry.register(Some(Recorder::of("ada")), TIMEOUT);
    drop(earlier);
    let listing = registry.register_request(Owner::Gateway, TIMEOUT);
    drop(listing);
    let ada = Recorder::of("ada");
    let running = registry.register(Some(ada.clone()), TIMEOUT);
    log_through(registry.for_log(), "to ada").await;
    assert_eq!(ada.logs(), ["to ada"]);

    // Someone else's request lingering, or one of no known owner: kept local.
    for other in [Owner::caller("t", "bob"), Owner::Unknown] {
        let request = registry.register_request(other.clone(), TIMEOUT);
        drop(request);
        assert!(registry.for_log().is_none(), "{other:?}");
        tokio::time::advance(LINGER).await;
        // Still running, ada's call is alone again.
        assert!(registry.for_log().is_some(), "{other:?}");
    }

    // Two running calls, even of one owner: nothing may be guessed.
    let second = registry.register(Some(Recorder::of("ada")), TIMEOUT);
    assert!(registry.for_log().is_none());
    drop((second, running));
}

#[tokio::test(start_paused = true)]
async fn a_call_of_no_known_owner_gets_logs_only_alone() {
    let registry = RelayRegistry::new();
    let earlier = registry.register(Some(Recorder::of("ada")), TIMEOUT);
    drop(earlier);
    let unknown = Arc::new(Recorder::default());
    let running = registry.register(Some(unknown.clone()), TIMEOUT);
    assert!(registry.for_log().is_none());
    tokio::time::advance(LINGER).await;
    log_through(registry.for_log(), "alone").await;
    assert_eq!(unknown.logs(), ["alone"]);
    drop(running);
}

#[tokio::test]
async fn the_answer_waits_for_notifications_being_relayed() {
    let registry = RelayRegistry::new();
    let guard = registry.register(Some(Arc::new(Recorder::default())), TIMEOUT);
    let route = registry.sole(true).expect("running");
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let relaying = tokio::spawn(async move {
        notify(&route, None, |_| {
            Box::pin(async move {
                let _ = released.await;
            })
        })
        .await;
    });
    // Started relaying before the answer came.
    tokio::task::yield_now().await;
    let drained = tokio::spawn(async move {
        guard.drain().await;
    });
    // Only the relay holds the answer back.
    for _ in 0..12 {
        tokio::task::yield_now().await;
    }
    assert!(!drained.is_finished(), "the answer waits for the relay");
    release.send(()).expect("the relay waits");
    tokio::time::timeout(TIMEOUT, drained)
        .await
        .expect("the answer goes once the relay is done")
        .expect("task");
    relaying.await.expect("task");
}

#[tokio::test]
async fn with_nothing_being_relayed_the_answer_goes_at_once() {
    use futures::FutureExt as _;
    let registry = RelayRegistry::new();
    let guard = registry.register(Some(Arc::new(Recorder::default())), TIMEOUT);
    assert!(
        guard.drain().now_or_never().is_some(),
        "no yields or timers: nothing read and unrelayed, nothing to wait for"
    );
}

#[tokio::test(start_paused = true)]
async fn on_one_callers_session_what_names_no_call_goes_to_its_latest_call() {
    let registry = RelayRegistry::for_one_caller();
    let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
    let guard_a = registry.register(Some(a.clone()), TIMEOUT);
    let guard_b = registry.register(Some(b.clone()), TIMEOUT);
    // Two calls of the one caller: either is right; the latest is taken.
    log_through(registry.sole(true), "request").await;
    log_through(registry.for_log(), "log").await;
    assert_eq!(b.logs(), ["request", "log"]);
    drop(guard_b);
    log_through(registry.sole(true), "to a").await;
    assert_eq!(a.logs(), ["to a"]);
    drop(guard_a);
    // Ended: a request finds nobody running, a late log the latest ended call.
    assert!(registry.sole(true).is_none());
    log_through(registry.for_log(), "late").await;
    assert_eq!(a.logs(), ["to a", "late"]);
}

/// rmcp hands each notification to a task of its own, which may run in any order: each is
/// relayed only after those read before it, so the caller sees them in the order read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_are_relayed_in_the_order_read() {
    use rmcp::model::Notification;
    let registry = RelayRegistry::new();
    let a = Arc::new(Recorder::default());
    let guard = registry.register(Some(a.clone()), TIMEOUT);
    let read: Vec<(String, Announced)> = (0..20)
        .map(|n| {
            let params = LoggingMessageNotificationParam::new(
                LoggingLevel::Info,
                Value::from(n.to_string()),
            );
            let notification =
                ServerNotification::LoggingMessageNotification(Notification::new(params));
            let announced = registry
                .announce(&notification)
                .expect("counted for the call");
            (n.to_string(), announced)
        })
        .collect();
    // Handled last first, each in a task of its own.
    let handlers: Vec<_> = read
        .into_iter()
        .rev()
        .map(|(text, announced)| {
            let route = registry.for_log().expect("the call");
            tokio::spawn(async move {
                notify(&route, Some(&announced), |relay| {
                    relay.log(LoggingMessageNotificationParam::new(
                        LoggingLevel::Info,
                        Value::from(text),
                    ))
                })
                .await;
            })
        })
        .collect();
    for handler in handlers {
        handler.await.expect("handled");
    }
    let expected: Vec<String> = (0..20).map(|n| n.to_string()).collect();
    assert_eq!(a.logs(), expected);
    tokio::time::timeout(TIMEOUT, guard.drain())
        .await
        .expect("all relayed: the answer goes");
}
