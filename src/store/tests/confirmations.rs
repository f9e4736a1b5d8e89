//! The confirmation-store suite: single take, expiry, scoping, duplicates, purge.

use std::time::Duration;

use super::{Fixture, at, suite};
use crate::store::{Approved, Binding, Pending, StoreError};

suite!(
    pending_is_taken_once,
    pending_expiring_now_is_expired,
    list_is_scoped_to_tenant_and_user,
    duplicate_keys_are_refused,
    token_is_taken_once,
    token_expiring_now_is_expired,
    purge_removes_only_expired_entries,
);

pub(super) fn binding(tenant: &str, user: &str) -> Binding {
    Binding {
        tenant: tenant.to_owned(),
        user: user.to_owned(),
        session: "s1".to_owned(),
        tool: "files.write".to_owned(),
        fingerprint: "f".repeat(64),
        args_hash: "a".repeat(64),
    }
}

pub(super) fn pending(id: &str, tenant: &str, user: &str, created: u64, expires: u64) -> Pending {
    Pending {
        id: id.to_owned(),
        binding: binding(tenant, user),
        created_at: at(created),
        expires_at: at(expires),
    }
}

pub(super) fn approved(confirmation_id: &str, tenant: &str, user: &str, expires: u64) -> Approved {
    Approved {
        binding: binding(tenant, user),
        confirmation_id: confirmation_id.to_owned(),
        expires_at: at(expires),
    }
}

async fn pending_is_taken_once(f: Fixture) {
    let p = pending("c1", "acme", "alice", 0, 600);
    f.confirmations
        .insert_pending(p.clone())
        .await
        .expect("store call succeeds");
    assert_eq!(
        f.confirmations
            .take_pending("c1", at(1))
            .await
            .expect("store call succeeds"),
        Some(p)
    );
    assert_eq!(
        f.confirmations
            .take_pending("c1", at(1))
            .await
            .expect("store call succeeds"),
        None
    );
    assert_eq!(
        f.confirmations
            .take_pending("unknown", at(1))
            .await
            .expect("store call succeeds"),
        None
    );
}

async fn pending_expiring_now_is_expired(f: Fixture) {
    let s = &f.confirmations;
    s.insert_pending(pending("c1", "acme", "alice", 0, 10))
        .await
        .expect("store call succeeds");
    assert!(
        s.list_pending("acme", "alice", at(10))
            .await
            .expect("store call succeeds")
            .is_empty()
    );
    assert_eq!(
        s.take_pending("c1", at(10))
            .await
            .expect("store call succeeds"),
        None
    );
    // The expired one was deleted by that take, not just hidden.
    assert_eq!(
        s.take_pending("c1", at(0))
            .await
            .expect("store call succeeds"),
        None
    );

    let last_moment = at(10) - Duration::from_micros(1);
    s.insert_pending(pending("c2", "acme", "alice", 0, 10))
        .await
        .expect("store call succeeds");
    assert_eq!(
        s.list_pending("acme", "alice", last_moment)
            .await
            .expect("store call succeeds")
            .len(),
        1
    );
    assert!(
        s.take_pending("c2", last_moment)
            .await
            .expect("store call succeeds")
            .is_some()
    );
}

async fn list_is_scoped_to_tenant_and_user(f: Fixture) {
    let s = &f.confirmations;
    let later = pending("c-later", "acme", "alice", 5, 600);
    let earlier = pending("c-earlier", "acme", "alice", 1, 600);
    for p in [
        later.clone(),
        earlier.clone(),
        pending("c-bob", "acme", "bob", 1, 600),
        pending("c-other-tenant", "other", "alice", 1, 600),
        pending("c-expired", "acme", "alice", 0, 3),
    ] {
        s.insert_pending(p).await.expect("store call succeeds");
    }
    assert_eq!(
        s.list_pending("acme", "alice", at(3))
            .await
            .expect("store call succeeds"),
        vec![earlier, later]
    );
    assert_eq!(
        s.list_pending("acme", "bob", at(3))
            .await
            .expect("store call succeeds")
            .len(),
        1
    );
    assert!(
        s.list_pending("acme", "carol", at(3))
            .await
            .expect("store call succeeds")
            .is_empty()
    );
    // Listing does not take.
    assert_eq!(
        s.list_pending("acme", "alice", at(3))
            .await
            .expect("store call succeeds")
            .len(),
        2
    );
}

async fn duplicate_keys_are_refused(f: Fixture) {
    let s = &f.confirmations;
    s.insert_pending(pending("c1", "acme", "alice", 0, 600))
        .await
        .expect("store call succeeds");
    let rebind = pending("c1", "acme", "mallory", 0, 600);
    assert_eq!(s.insert_pending(rebind).await, Err(StoreError::Duplicate));
    let kept = s
        .take_pending("c1", at(1))
        .await
        .expect("store call succeeds")
        .expect("entry present");
    assert_eq!(kept.binding.user, "alice");

    s.insert_token(
        "h1",
        approved("c1", "acme", "alice", 120),
        std::time::UNIX_EPOCH,
    )
    .await
    .expect("store call succeeds");
    let err = s
        .insert_token(
            "h1",
            approved("c9", "acme", "mallory", 120),
            std::time::UNIX_EPOCH,
        )
        .await;
    assert_eq!(err, Err(StoreError::Duplicate));
    assert_eq!(
        s.take_token("h1", at(1))
            .await
            .expect("store call succeeds")
            .expect("entry present")
            .binding
            .user,
        "alice"
    );
}

async fn token_is_taken_once(f: Fixture) {
    let s = &f.confirmations;
    let grant = approved("c1", "acme", "alice", 120);
    s.insert_token("h1", grant.clone(), std::time::UNIX_EPOCH)
        .await
        .expect("store call succeeds");
    assert_eq!(
        s.take_token("h1", at(1))
            .await
            .expect("store call succeeds"),
        Some(grant)
    );
    assert_eq!(
        s.take_token("h1", at(1))
            .await
            .expect("store call succeeds"),
        None
    );
    assert_eq!(
        s.take_token("never-issued", at(1))
            .await
            .expect("store call succeeds"),
        None
    );
}

async fn token_expiring_now_is_expired(f: Fixture) {
    let s = &f.confirmations;
    s.insert_token(
        "h1",
        approved("c1", "acme", "alice", 120),
        std::time::UNIX_EPOCH,
    )
    .await
    .expect("store call succeeds");
    assert_eq!(
        s.take_token("h1", at(120))
            .await
            .expect("store call succeeds"),
        None
    );
    assert_eq!(
        s.take_token("h1", at(0))
            .await
            .expect("store call succeeds"),
        None,
        "expired token deleted"
    );
    s.insert_token(
        "h2",
        approved("c2", "acme", "alice", 120),
        std::time::UNIX_EPOCH,
    )
    .await
    .expect("store call succeeds");
    let last_moment = at(120) - Duration::from_micros(1);
    assert!(
        s.take_token("h2", last_moment)
            .await
            .expect("store call succeeds")
            .is_some()
    );
}

async fn purge_removes_only_expired_entries(f: Fixture) {
    let s = &f.confirmations;
    s.insert_pending(pending("old", "acme", "alice", 0, 10))
        .await
        .expect("store call succeeds");
    s.insert_pending(pending("edge", "acme", "alice", 0, 20))
        .await
        .expect("store call succeeds");
    s.insert_pending(pending("live", "acme", "alice", 0, 600))
        .await
        .expect("store call succeeds");
    s.insert_token(
        "h-old",
        approved("c", "acme", "alice", 10),
        std::time::UNIX_EPOCH,
    )
    .await
    .expect("store call succeeds");
    s.insert_token(
        "h-live",
        approved("c", "acme", "alice", 120),
        std::time::UNIX_EPOCH,
    )
    .await
    .expect("store call succeeds");

    assert_eq!(
        s.purge_expired(at(20)).await.expect("store call succeeds"),
        3
    );
    assert_eq!(
        s.purge_expired(at(20)).await.expect("store call succeeds"),
        0
    );
    // Purged entries are gone even for a caller whose clock is behind.
    assert_eq!(
        s.take_pending("old", at(0))
            .await
            .expect("store call succeeds"),
        None
    );
    assert_eq!(
        s.take_token("h-old", at(0))
            .await
            .expect("store call succeeds"),
        None
    );
    assert!(
        s.take_pending("live", at(20))
            .await
            .expect("store call succeeds")
            .is_some()
    );
    assert!(
        s.take_token("h-live", at(20))
            .await
            .expect("store call succeeds")
            .is_some()
    );
}
