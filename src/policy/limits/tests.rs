//! Tests of the limiter: caps under contention, waiting, buckets with explicit instants.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::{sync::Barrier, time::Instant};

use super::{LimitExceeded, LimitKind, Limiter};
use crate::config::{CallLimits, ServerId};

/// Upper bound for tests that wait on other tasks; they finish in milliseconds when correct.
const TEST_DEADLINE: Duration = Duration::from_secs(30);

fn server(id: &str) -> ServerId {
    ServerId::new(id).expect("valid test id")
}

fn concurrency(user: u32, server: u32, wait: Duration) -> CallLimits {
    CallLimits {
        user_concurrency: user,
        server_concurrency: server,
        concurrency_wait: wait,
        ..CallLimits::default()
    }
}

fn rates(user: u32, server: u32) -> CallLimits {
    CallLimits {
        user_calls_per_minute: user,
        server_calls_per_minute: server,
        ..CallLimits::default()
    }
}

fn refused(limit: LimitKind, retry_after: Option<Duration>) -> Result<(), LimitExceeded> {
    Err(LimitExceeded { limit, retry_after })
}

#[test]
fn limiter_and_permit_can_be_shared_across_tasks() {
    fn shareable<T: Send + Sync + 'static>() {}
    shareable::<Limiter>();
    shareable::<super::CallPermit>();
}

/// Runs `tasks` tasks that each hold a permit until `cap` holders meet at a barrier, and
/// returns the most permits ever held at once.
async fn max_in_flight(
    tasks: usize,
    cap: usize,
    user_of: fn(usize) -> String,
    limits: CallLimits,
) -> usize {
    let limiter = Arc::new(Limiter::default());
    let in_flight = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    // Holders leave in groups of `cap`: a group forms only once `cap` permits are held at the
    // same time, and a limiter that let one more in would show it in `max`.
    let barrier = Arc::new(Barrier::new(cap));
    let limits = Arc::new(limits);
    let mut handles = Vec::new();
    for i in 0..tasks {
        let (limiter, in_flight, max, barrier, limits) = (
            limiter.clone(),
            in_flight.clone(),
            max.clone(),
            barrier.clone(),
            limits.clone(),
        );
        handles.push(tokio::spawn(async move {
            let permit = limiter
                .acquire(&user_of(i), &server("s"), &limits)
                .await
                .expect("waits for a permit");
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(now, Ordering::SeqCst);
            barrier.wait().await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            drop(permit);
        }));
    }
    for handle in handles {
        tokio::time::timeout(TEST_DEADLINE, handle)
            .await
            .expect("every task finishes")
            .expect("task did not panic");
    }
    assert_eq!(limiter.tracked_users().in_flight, 0, "all permits released");
    max.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_cap_holds_under_contention() {
    let limits = concurrency(5, 1000, TEST_DEADLINE);
    let max = max_in_flight(50, 5, |_| "alice".to_owned(), limits).await;
    assert_eq!(max, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_cap_holds_across_users() {
    let limits = concurrency(1000, 4, TEST_DEADLINE);
    let max = max_in_flight(40, 4, |i| format!("user-{i}"), limits).await;
    assert_eq!(max, 4);
}

#[tokio::test]
async fn fail_fast_refuses_at_once_and_counts_both_or_neither() {
    let limiter = Limiter::default();
    let limits = concurrency(1, 2, Duration::ZERO);
    let held = limiter
        .acquire("alice", &server("s"), &limits)
        .await
        .expect("first");
    let again = limiter.acquire("alice", &server("s"), &limits).await;
    assert_eq!(again.map(drop), refused(LimitKind::UserConcurrency, None));
    // Another user, and the same user on another server, are not held by alice's cap.
    let bob = limiter
        .acquire("bob", &server("s"), &limits)
        .await
        .expect("bob");
    let elsewhere = limiter
        .acquire("alice", &server("t"), &limits)
        .await
        .expect("server t");
    let carol = limiter.acquire("carol", &server("s"), &limits).await;
    assert_eq!(carol.map(drop), refused(LimitKind::ServerConcurrency, None));
    // Carol's refusal left no count behind: only the three held pairs are tracked.
    assert_eq!(limiter.tracked_users().in_flight, 3);
    drop(held);
    let carol = limiter.acquire("carol", &server("s"), &limits).await;
    assert!(carol.is_ok(), "a place freed: {carol:?}");
    drop((bob, elsewhere));
}

#[tokio::test]
async fn zero_cap_refuses_even_when_waiting_is_allowed() {
    let limiter = Limiter::default();
    let limits = concurrency(0, 8, TEST_DEADLINE);
    let refusal = limiter.acquire("alice", &server("s"), &limits).await;
    assert_eq!(refusal.map(drop), refused(LimitKind::UserConcurrency, None));
}

#[tokio::test(start_paused = true)]
async fn wait_mode_takes_a_permit_freed_within_the_wait() {
    let limiter = Arc::new(Limiter::default());
    let limits = concurrency(1, 8, Duration::from_secs(5));
    let held = limiter
        .acquire("alice", &server("s"), &limits)
        .await
        .expect("first");
    let start = Instant::now();
    let waiter = {
        let (limiter, limits) = (limiter.clone(), limits.clone());
        tokio::spawn(async move { limiter.acquire("alice", &server("s"), &limits).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        !waiter.is_finished(),
        "still waiting while the permit is held"
    );
    drop(held);
    let permit = waiter.await.expect("no panic");
    assert!(permit.is_ok(), "got the freed permit: {permit:?}");
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn wait_mode_gives_up_after_the_wait() {
    let limiter = Limiter::default();
    let limits = concurrency(8, 1, Duration::from_secs(5));
    let _held = limiter
        .acquire("alice", &server("s"), &limits)
        .await
        .expect("first");
    let start = Instant::now();
    let late = limiter.acquire("bob", &server("s"), &limits).await;
    assert_eq!(late.map(drop), refused(LimitKind::ServerConcurrency, None));
    assert_eq!(start.elapsed(), Duration::from_secs(5));
}

#[tokio::test(start_paused = true)]
async fn cancelled_waiter_leaves_nothing_behind() {
    let limiter = Limiter::default();
    let limits = concurrency(1, 8, Duration::from_secs(60));
    let held = limiter
        .acquire("alice", &server("s"), &limits)
        .await
        .expect("first");
    let gave_up = tokio::time::timeout(
        Duration::from_secs(1),
        limiter.acquire("alice", &server("s"), &limits),
    )
    .await;
    assert!(gave_up.is_err(), "the outer timeout cancelled the wait");
    drop(held);
    assert_eq!(limiter.tracked_users().in_flight, 0);
    let again = limiter.acquire("alice", &server("s"), &limits).await;
    assert!(again.is_ok(), "free again: {again:?}");
}

#[tokio::test]
async fn idle_users_are_dropped_and_the_user_bound_refuses_new_ones() {
    let limiter = Limiter::new(2);
    let limits = concurrency(4, 100, Duration::ZERO);
    let a1 = limiter
        .acquire("a", &server("s"), &limits)
        .await
        .expect("a");
    let a2 = limiter
        .acquire("a", &server("s"), &limits)
        .await
        .expect("a again");
    let b = limiter
        .acquire("b", &server("s"), &limits)
        .await
        .expect("b");
    assert_eq!(limiter.tracked_users().in_flight, 2);
    let c = limiter.acquire("c", &server("s"), &limits).await;
    assert_eq!(c.map(drop), refused(LimitKind::TooManyUsers, None));
    // A user already tracked still gets permits up to their cap.
    let a3 = limiter
        .acquire("a", &server("s"), &limits)
        .await
        .expect("a, tracked");
    drop(b);
    assert_eq!(limiter.tracked_users().in_flight, 1);
    let c = limiter
        .acquire("c", &server("s"), &limits)
        .await
        .expect("room for c");
    drop((a1, a2, a3, c));
    assert_eq!(limiter.tracked_users().in_flight, 0);
}

#[test]
fn user_bucket_refills_continuously() {
    let limiter = Limiter::default();
    let limits = rates(60, 0);
    let t0 = Instant::now();
    for _ in 0..60 {
        limiter
            .check_rate("alice", &server("s"), &limits, t0)
            .expect("within capacity");
    }
    let s = server("s");
    let second = Duration::from_secs(1);
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, t0),
        refused(LimitKind::UserRate, Some(second))
    );
    let half = t0 + Duration::from_millis(500);
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, half),
        refused(LimitKind::UserRate, Some(Duration::from_millis(500)))
    );
    limiter
        .check_rate("alice", &s, &limits, t0 + second)
        .expect("one token back");
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, t0 + second),
        refused(LimitKind::UserRate, Some(second))
    );
    // The user limit spans servers; another user is not affected.
    assert!(
        limiter
            .check_rate("alice", &server("t"), &limits, t0 + second)
            .is_err()
    );
    limiter
        .check_rate("bob", &s, &limits, t0 + second)
        .expect("bob has his own bucket");
}

#[test]
fn server_bucket_is_shared_by_all_users() {
    let limiter = Limiter::default();
    let limits = rates(0, 3);
    let (s, t0) = (server("s"), Instant::now());
    for user in ["a", "b", "c"] {
        limiter
            .check_rate(user, &s, &limits, t0)
            .expect("within capacity");
    }
    assert_eq!(
        limiter.check_rate("d", &s, &limits, t0),
        refused(LimitKind::ServerRate, Some(Duration::from_secs(20)))
    );
    limiter
        .check_rate("d", &server("t"), &limits, t0)
        .expect("other server");
    assert_eq!(
        limiter.tracked_users().rate,
        0,
        "a disabled user limit keeps no buckets"
    );
}

#[test]
fn refused_by_the_server_costs_the_user_nothing() {
    let limiter = Limiter::default();
    let limits = rates(2, 60);
    let (s, t0) = (server("s"), Instant::now());
    limiter
        .check_rate("alice", &s, &limits, t0)
        .expect("alice, 1 of 2");
    for i in 0..59 {
        limiter
            .check_rate(&format!("u{i}"), &s, &limits, t0)
            .expect("drain the server");
    }
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, t0),
        refused(LimitKind::ServerRate, Some(Duration::from_secs(1)))
    );
    // One second on, the server has one token; alice still has her second one only if the
    // refusal above took nothing from her.
    let t1 = t0 + Duration::from_secs(1);
    limiter
        .check_rate("alice", &s, &limits, t1)
        .expect("alice, 2 of 2");
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, t1 + Duration::from_secs(1)),
        refused(LimitKind::UserRate, Some(Duration::from_millis(28_000)))
    );
}

#[test]
fn refused_by_the_user_costs_the_server_nothing() {
    let limiter = Limiter::default();
    let limits = rates(1, 2);
    let (s, t0) = (server("s"), Instant::now());
    limiter
        .check_rate("alice", &s, &limits, t0)
        .expect("alice's only call");
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, t0),
        refused(LimitKind::UserRate, Some(Duration::from_secs(60)))
    );
    limiter
        .check_rate("bob", &s, &limits, t0)
        .expect("server's second token is left");
    assert_eq!(
        limiter.check_rate("carol", &s, &limits, t0),
        refused(LimitKind::ServerRate, Some(Duration::from_secs(30)))
    );
}

#[test]
fn when_both_are_empty_the_longer_wait_is_reported() {
    let limiter = Limiter::default();
    let limits = rates(1, 1);
    let (s, t0) = (server("s"), Instant::now());
    limiter.check_rate("alice", &s, &limits, t0).expect("first");
    let later = t0 + Duration::from_secs(30);
    // alice's bucket and the server's are both half full; bob's is full.
    assert_eq!(
        limiter.check_rate("alice", &s, &limits, later),
        refused(LimitKind::UserRate, Some(Duration::from_secs(30)))
    );
    let faster = rates(4, 1);
    assert_eq!(
        limiter.check_rate("alice", &s, &faster, later),
        refused(LimitKind::ServerRate, Some(Duration::from_secs(30)))
    );
}

#[test]
fn full_buckets_are_swept_and_the_user_bound_refuses_new_ones() {
    let limiter = Limiter::new(2);
    let limits = rates(10, 0);
    let (s, t0) = (server("s"), Instant::now());
    limiter.check_rate("a", &s, &limits, t0).expect("a");
    limiter.check_rate("b", &s, &limits, t0).expect("b");
    let soon = t0 + Duration::from_secs(4);
    assert_eq!(
        limiter.check_rate("c", &s, &limits, soon),
        refused(LimitKind::TooManyUsers, Some(Duration::from_secs(6)))
    );
    limiter
        .check_rate("a", &s, &limits, soon)
        .expect("a is tracked already");
    assert_eq!(limiter.tracked_users().rate, 2);
    // A minute after b's last call its bucket is full again, so the next sweep drops it.
    let later = t0 + Duration::from_secs(61);
    limiter
        .check_rate("c", &s, &limits, later)
        .expect("b was swept");
    assert_eq!(limiter.tracked_users().rate, 2, "a (called at 4 s) and c");
}

#[test]
fn errors_name_the_limit_and_share_one_code() {
    let rate = LimitExceeded {
        limit: LimitKind::UserRate,
        retry_after: Some(Duration::from_millis(1500)),
    };
    assert_eq!(rate.code(), "limit_exceeded");
    assert_eq!(
        rate.to_string(),
        "limit exceeded: too many calls per minute for this user (retry after 1500 ms)"
    );
    let busy = LimitExceeded {
        limit: LimitKind::ServerConcurrency,
        retry_after: None,
    };
    assert_eq!(
        busy.to_string(),
        "limit exceeded: too many calls in flight on this server"
    );
    assert_eq!(busy.limit.as_str(), "server_concurrency");
}
