//! The confirmation-store suite, part two: bounds, and single use under concurrent takes.

use super::{
    Fixture, at,
    confirmations::{approved, pending},
    suite,
};
use crate::store::{
    ConfirmationStore, MAX_MEMORY_ENTRIES, MAX_PER_USER, MemoryConfirmations, StoreError,
};

suite!(
    token_is_taken_exactly_once_by_racing_tasks,
    one_user_cannot_fill_the_store,
);

/// Concurrent takes of one token, repeated over a few tokens so a lucky schedule does not hide
/// a race.
const RACING_TASKS: usize = 50;
const RACE_ROUNDS: usize = 3;

async fn token_is_taken_exactly_once_by_racing_tasks(f: Fixture) {
    for round in 0..RACE_ROUNDS {
        let hash = format!("race-{round}");
        let grant = approved("c1", "acme", "alice", 120);
        f.confirmations
            .insert_token(&hash, grant, std::time::UNIX_EPOCH)
            .await
            .expect("store call succeeds");
        let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(RACING_TASKS));
        let tasks: Vec<_> = (0..RACING_TASKS)
            .map(|_| {
                let (store, hash, barrier) =
                    (f.confirmations.clone(), hash.clone(), barrier.clone());
                tokio::spawn(async move {
                    barrier.wait().await;
                    store.take_token(&hash, at(1)).await
                })
            })
            .collect();
        let mut winners = 0;
        for task in tasks {
            if task
                .await
                .expect("task finished")
                .expect("store call succeeds")
                .is_some()
            {
                winners += 1;
            }
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

async fn one_user_cannot_fill_the_store(f: Fixture) {
    let s = &f.confirmations;
    for i in 0..MAX_PER_USER {
        s.insert_pending(pending(&format!("p{i}"), "acme", "alice", 0, 600))
            .await
            .expect("store call succeeds");
        s.insert_token(
            &format!("h{i}"),
            approved("c", "acme", "alice", 120),
            std::time::UNIX_EPOCH,
        )
        .await
        .expect("store call succeeds");
    }
    let over = pending("p-over", "acme", "alice", 0, 600);
    assert_eq!(s.insert_pending(over.clone()).await, Err(StoreError::Full));
    let over_token = approved("c", "acme", "alice", 120);
    assert_eq!(
        s.insert_token("h-over", over_token.clone(), std::time::UNIX_EPOCH)
            .await,
        Err(StoreError::Full)
    );
    assert_eq!(StoreError::Full.code(), "store_full");

    // Others are unaffected; the same user has room again once one entry is gone.
    s.insert_pending(pending("p-bob", "acme", "bob", 0, 600))
        .await
        .expect("store call succeeds");
    s.insert_pending(pending("p-other", "other", "alice", 0, 600))
        .await
        .expect("store call succeeds");
    assert!(
        s.take_pending("p0", at(1))
            .await
            .expect("store call succeeds")
            .is_some()
    );
    s.insert_pending(over).await.expect("store call succeeds");
    assert!(
        s.take_token("h0", at(1))
            .await
            .expect("store call succeeds")
            .is_some()
    );
    s.insert_token("h-over", over_token, std::time::UNIX_EPOCH)
        .await
        .expect("store call succeeds");
}

#[tokio::test]
async fn memory_store_has_a_total_bound() {
    let s = MemoryConfirmations::new();
    let users = MAX_MEMORY_ENTRIES.div_ceil(MAX_PER_USER);
    let mut stored = 0;
    'fill: for u in 0..users {
        for i in 0..MAX_PER_USER {
            if stored == MAX_MEMORY_ENTRIES {
                break 'fill;
            }
            let p = pending(&format!("p{u}-{i}"), "acme", &format!("user{u}"), 0, 600);
            s.insert_pending(p).await.expect("store call succeeds");
            stored += 1;
        }
    }
    let newcomer = pending("p-new", "acme", "newcomer", 0, 600);
    assert_eq!(
        s.insert_pending(newcomer.clone()).await,
        Err(StoreError::Full)
    );
    let token = approved("c", "acme", "newcomer", 120);
    assert_eq!(
        s.insert_token("h-new", token, std::time::UNIX_EPOCH).await,
        Err(StoreError::Full)
    );
    assert!(
        s.take_pending("p0-0", at(1))
            .await
            .expect("store call succeeds")
            .is_some()
    );
    s.insert_pending(newcomer)
        .await
        .expect("store call succeeds");
}
