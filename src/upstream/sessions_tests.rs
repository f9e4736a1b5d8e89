//! The bounds of caller sessions, with a stand-in connection and paused time: one connect per
//! key however many calls race for it, a failed connect not kept, idle ones closed after
//! [`IDLE`] (by a call or by the supervisor's prune), the least recently used idle one closed
//! at [`MAX_SESSIONS`], the shared session's turn when all are busy, and closing by key.

use std::sync::atomic::AtomicBool;

use super::*;

/// A connection that records being closed.
#[derive(Default)]
struct Fake {
    closed: Arc<AtomicBool>,
}

impl Connected for Fake {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

/// A lease of `key`, connecting a fake whose closing `closed` records.
async fn lease(
    sessions: &CallerSessions<Fake>,
    key: &str,
    closed: &Arc<AtomicBool>,
) -> Option<Lease<Fake>> {
    let closed = closed.clone();
    sessions
        .lease(key, || async move { Ok(Fake { closed }) })
        .await
        .map(|lease| lease.expect("the fake connects"))
}

#[tokio::test(start_paused = true)]
async fn one_connect_per_key_and_a_failed_one_is_not_kept() {
    let sessions = CallerSessions::<Fake>::default();
    let connects = AtomicUsize::new(0);
    let connect = || async {
        connects.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(Fake::default())
    };
    let (a, b) = tokio::join!(sessions.lease("k", connect), sessions.lease("k", connect));
    assert!(a.is_some_and(|l| l.is_ok()) && b.is_some_and(|l| l.is_ok()));
    assert_eq!(
        connects.load(Ordering::SeqCst),
        1,
        "the second waited for the first"
    );
    assert_eq!(sessions.len(), 1);

    let failed = sessions
        .lease("bad", || async {
            Err(UpstreamError::Connect("refused".into()))
        })
        .await;
    assert!(matches!(failed, Some(Err(UpstreamError::Connect(_)))));
    assert_eq!(sessions.len(), 1, "a failed connection is not kept");
}

#[tokio::test(start_paused = true)]
async fn idle_sessions_close_after_their_time_even_with_no_new_call() {
    let sessions = CallerSessions::<Fake>::default();
    let closed = Arc::new(AtomicBool::new(false));
    let held = lease(&sessions, "a", &closed).await.expect("room");
    tokio::time::advance(IDLE * 2).await;
    sessions.prune();
    assert!(!closed.load(Ordering::SeqCst), "in use: kept however long");
    drop(held);
    tokio::time::advance(IDLE - Duration::from_secs(1)).await;
    sessions.prune();
    assert!(!closed.load(Ordering::SeqCst), "idle, not yet long enough");
    tokio::time::advance(Duration::from_secs(1)).await;
    sessions.prune();
    assert!(closed.load(Ordering::SeqCst), "idle for IDLE: closed");
    assert_eq!(sessions.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn at_the_bound_the_oldest_idle_goes_and_with_none_idle_the_call_is_shared() {
    let sessions = CallerSessions::<Fake>::default();
    let flags: Vec<Arc<AtomicBool>> = (0..MAX_SESSIONS).map(|_| Arc::default()).collect();
    let mut held = Vec::new();
    for (n, closed) in flags.iter().enumerate() {
        held.push(
            lease(&sessions, &format!("k{n}"), closed)
                .await
                .expect("room"),
        );
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let extra = Arc::new(AtomicBool::new(false));
    assert!(
        lease(&sessions, "new", &extra).await.is_none(),
        "all in use: the call goes over the shared session"
    );
    // Their calls end in the order they began: k0 has been idle longest.
    for lease in held {
        drop(lease);
        tokio::time::advance(Duration::from_millis(10)).await;
    }
    let newcomer = lease(&sessions, "new", &extra).await;
    assert!(newcomer.is_some(), "an idle one made room");
    assert!(
        flags[0].load(Ordering::SeqCst),
        "the least recently used one was closed"
    );
    assert!(flags[1..].iter().all(|f| !f.load(Ordering::SeqCst)));
    assert_eq!(sessions.len(), MAX_SESSIONS);
}

#[tokio::test(start_paused = true)]
async fn closing_a_key_waits_for_its_calls_and_a_dead_session_is_replaced() {
    let sessions = CallerSessions::<Fake>::default();
    let closed = Arc::new(AtomicBool::new(false));
    let held = lease(&sessions, "a", &closed).await.expect("room");
    sessions.close("a");
    assert_eq!(sessions.len(), 0);
    assert!(!closed.load(Ordering::SeqCst), "a call still uses it");
    drop(held);
    assert!(closed.load(Ordering::SeqCst), "closed with its last call");

    // A connection that ended on its own is opened anew by the next call.
    let dead = Arc::new(AtomicBool::new(false));
    drop(lease(&sessions, "b", &dead).await);
    dead.store(true, Ordering::SeqCst);
    let fresh = Arc::new(AtomicBool::new(false));
    let again = lease(&sessions, "b", &fresh).await.expect("room");
    assert!(
        !again.live().is_closed(),
        "a new connection, not the dead one"
    );
}

/// A user's servers' sessions: their own bound and idle time, and closing by a key's prefix
/// (a server removed) leaves the others open.
#[tokio::test(start_paused = true)]
async fn a_bounded_set_keeps_its_own_limits_and_closes_by_prefix() {
    let sessions = CallerSessions::<Fake>::bounded(2, Duration::from_secs(10));
    let (a, b, c) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    drop(lease(&sessions, "user-a#1", &a).await);
    tokio::time::advance(Duration::from_secs(1)).await;
    drop(lease(&sessions, "user-b#1", &b).await);
    tokio::time::advance(Duration::from_secs(1)).await;
    drop(lease(&sessions, "user-c#1", &c).await);
    assert_eq!(sessions.len(), 2, "at its bound of two");
    assert!(a.load(Ordering::SeqCst), "the least recently used went");
    sessions.close_matching(|key| key.starts_with("user-b#"));
    assert!(b.load(Ordering::SeqCst));
    assert!(!c.load(Ordering::SeqCst));
    assert_eq!(sessions.len(), 1);
    tokio::time::advance(Duration::from_secs(10)).await;
    sessions.prune();
    assert!(
        c.load(Ordering::SeqCst),
        "closed once idle for its own time"
    );
    assert_eq!(sessions.len(), 0);
}
