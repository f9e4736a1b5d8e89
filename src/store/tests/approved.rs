//! Taking a grant by what it is bound to (the repeat of an approved call without its token):
//! every field must match, expired grants are skipped, the earliest to expire goes first,
//! and one grant goes to one taker, whichever way it is taken.

use std::sync::Arc;

use tokio::sync::Barrier;

use super::{Fixture, at, confirmations::approved, suite};
use crate::store::Binding;

suite!(
    a_grant_is_taken_by_its_binding_once,
    every_field_of_the_binding_must_match,
    expired_grants_are_skipped_and_the_earliest_goes_first,
    concurrent_takes_get_one_grant,
);

async fn a_grant_is_taken_by_its_binding_once(f: Fixture) {
    let s = &f.confirmations;
    let grant = approved("c1", "acme", "alice", 600);
    s.insert_token("t1", grant.clone(), std::time::UNIX_EPOCH)
        .await
        .expect("stored");
    let taken = s
        .take_approved(&grant.binding, at(1))
        .await
        .expect("store call succeeds");
    assert_eq!(taken, Some(grant.clone()));
    let again = s
        .take_approved(&grant.binding, at(1))
        .await
        .expect("store call succeeds");
    assert_eq!(again, None);
    let by_token = s
        .take_token("t1", at(1))
        .await
        .expect("store call succeeds");
    assert_eq!(by_token, None, "taken by binding, the token is spent too");

    s.insert_token("t2", grant.clone(), std::time::UNIX_EPOCH)
        .await
        .expect("stored");
    s.take_token("t2", at(1))
        .await
        .expect("store call succeeds");
    let after_token = s
        .take_approved(&grant.binding, at(1))
        .await
        .expect("store call succeeds");
    assert_eq!(
        after_token, None,
        "taken by token, nothing is left to repeat"
    );
}

async fn every_field_of_the_binding_must_match(f: Fixture) {
    let s = &f.confirmations;
    let grant = approved("c1", "acme", "alice", 600);
    s.insert_token("t1", grant.clone(), std::time::UNIX_EPOCH)
        .await
        .expect("stored");
    let changes: [fn(&mut Binding); 6] = [
        |b| b.tenant = "other".into(),
        |b| b.user = "bob".into(),
        |b| b.session = "s2".into(),
        |b| b.tool = "files.delete".into(),
        |b| b.fingerprint = "e".repeat(64),
        |b| b.args_hash = "b".repeat(64),
    ];
    for change in changes {
        let mut other = grant.binding.clone();
        change(&mut other);
        let taken = s
            .take_approved(&other, at(1))
            .await
            .expect("store call succeeds");
        assert_eq!(taken, None, "{other:?}");
    }
    let taken = s
        .take_approved(&grant.binding, at(1))
        .await
        .expect("store call succeeds");
    assert_eq!(taken, Some(grant));
}

async fn expired_grants_are_skipped_and_the_earliest_goes_first(f: Fixture) {
    let s = &f.confirmations;
    for (token, id, expires) in [("t1", "late", 30), ("t2", "gone", 10), ("t3", "soon", 20)] {
        s.insert_token(
            token,
            approved(id, "acme", "alice", expires),
            std::time::UNIX_EPOCH,
        )
        .await
        .expect("stored");
    }
    let binding = approved("x", "acme", "alice", 0).binding;
    let mut order = Vec::new();
    while let Some(grant) = s
        .take_approved(&binding, at(10))
        .await
        .expect("store call succeeds")
    {
        order.push(grant.confirmation_id);
    }
    // Expiring exactly now is expired.
    assert_eq!(order, ["soon", "late"]);
}

/// Takers racing one grant.
const RACERS: usize = 16;

async fn concurrent_takes_get_one_grant(f: Fixture) {
    let grant = approved("c1", "acme", "alice", 600);
    f.confirmations
        .insert_token("t1", grant.clone(), std::time::UNIX_EPOCH)
        .await
        .expect("stored");
    let start = Arc::new(Barrier::new(RACERS));
    let takers = (0..RACERS).map(|n| {
        let (store, start, binding) = (
            f.confirmations.clone(),
            start.clone(),
            grant.binding.clone(),
        );
        tokio::spawn(async move {
            start.wait().await;
            // Half take by binding, half by token: one grant, whichever way.
            if n % 2 == 0 {
                store.take_approved(&binding, at(1)).await
            } else {
                store.take_token("t1", at(1)).await
            }
        })
    });
    let mut won = 0;
    for taker in futures::future::join_all(takers).await {
        if taker
            .expect("no panic")
            .expect("store call succeeds")
            .is_some()
        {
            won += 1;
        }
    }
    assert_eq!(won, 1);
}
