//! The audit-store suite: round trip, each filter, time boundaries, paging, field bounds.

use super::{Fixture, at, suite};
use crate::store::{
    AuditQuery, AuditRecord, AuditStore, MAX_AUDIT_ARGUMENTS_BYTES, MAX_AUDIT_FIELD_BYTES,
    MAX_AUDIT_QUERY_LIMIT, MemoryAudit,
};

suite!(
    record_round_trips,
    each_filter_selects_its_records,
    since_is_inclusive_and_until_exclusive,
    pages_walk_back_without_overlap,
    over_long_fields_are_cut,
    retention_purges_only_older_records,
);

fn record(secs: u64, tenant: &str, user: &str, tool: &str, outcome: &str) -> AuditRecord {
    AuditRecord {
        time: at(secs),
        request_id: format!("req-{secs}"),
        tenant: tenant.to_owned(),
        user: user.to_owned(),
        session: "s1".to_owned(),
        server: "files".to_owned(),
        tool: tool.to_owned(),
        decision: if outcome == "forbidden" {
            "denied"
        } else {
            "allowed"
        }
        .to_owned(),
        confirmation_id: None,
        outcome: outcome.to_owned(),
        duration_ms: 12,
        argument_bytes: 34,
        result_bytes: 56,
        fingerprint: None,
        arguments: None,
        detail: None,
    }
}

async fn ids(store: &dyn AuditStore, query: AuditQuery) -> Vec<i64> {
    let found = store.query(query).await.expect("store call succeeds");
    found.into_iter().map(|(id, _)| id).collect()
}

async fn record_round_trips(f: Fixture) {
    let full = AuditRecord {
        confirmation_id: Some("c1".to_owned()),
        fingerprint: Some("f".repeat(64)),
        arguments: Some(r#"{"path":"/tmp"}"#.to_owned()),
        detail: Some("approved by alice".to_owned()),
        duration_ms: u64::from(u32::MAX) + 7,
        ..record(1, "acme", "alice", "files.write", "ok")
    };
    f.audit
        .append(full.clone())
        .await
        .expect("store call succeeds");
    f.audit
        .append(record(2, "acme", "bob", "files.read", "ok"))
        .await
        .expect("store call succeeds");
    let all = f
        .audit
        .query(AuditQuery::default())
        .await
        .expect("store call succeeds");
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].1, full);
    assert!(all[0].0 > all[1].0, "newest first, ids increasing");
}

async fn each_filter_selects_its_records(f: Fixture) {
    let records = [
        record(1, "acme", "alice", "files.read", "ok"),
        record(2, "acme", "bob", "files.read", "ok"),
        record(3, "acme", "alice", "files.write", "forbidden"),
        record(4, "other", "alice", "files.read", "timeout"),
    ];
    let mut id = Vec::new();
    for r in records {
        f.audit.append(r).await.expect("store call succeeds");
        id.push(
            ids(
                &*f.audit,
                AuditQuery {
                    limit: 1,
                    ..AuditQuery::default()
                },
            )
            .await[0],
        );
    }
    let all = AuditQuery::default();
    let by = |q: AuditQuery| ids(&*f.audit, q);
    assert_eq!(by(all.clone()).await, vec![id[3], id[2], id[1], id[0]]);
    let tenant = AuditQuery {
        tenant: Some("acme".into()),
        ..all.clone()
    };
    assert_eq!(by(tenant).await, vec![id[2], id[1], id[0]]);
    let user = AuditQuery {
        user: Some("alice".into()),
        ..all.clone()
    };
    assert_eq!(by(user).await, vec![id[3], id[2], id[0]]);
    let tool = AuditQuery {
        tool: Some("files.write".into()),
        ..all.clone()
    };
    assert_eq!(by(tool).await, vec![id[2]]);
    let outcome = AuditQuery {
        outcome: Some("timeout".into()),
        ..all.clone()
    };
    assert_eq!(by(outcome).await, vec![id[3]]);
    let combined = AuditQuery {
        tenant: Some("acme".into()),
        user: Some("alice".into()),
        tool: Some("files.read".into()),
        ..all.clone()
    };
    assert_eq!(by(combined).await, vec![id[0]]);
    let nobody = AuditQuery {
        user: Some("carol".into()),
        ..all.clone()
    };
    assert!(by(nobody).await.is_empty());
    let none = AuditQuery { limit: 0, ..all };
    assert!(by(none).await.is_empty());
}

async fn since_is_inclusive_and_until_exclusive(f: Fixture) {
    for secs in [10, 20, 30] {
        f.audit
            .append(record(secs, "acme", "alice", "files.read", "ok"))
            .await
            .expect("store call succeeds");
    }
    let times = |q: AuditQuery| async {
        let found = f.audit.query(q).await.expect("store call succeeds");
        found.into_iter().map(|(_, r)| r.time).collect::<Vec<_>>()
    };
    let window = AuditQuery {
        since: Some(at(20)),
        until: Some(at(30)),
        ..AuditQuery::default()
    };
    assert_eq!(times(window).await, vec![at(20)]);
    let from = AuditQuery {
        since: Some(at(20)),
        ..AuditQuery::default()
    };
    assert_eq!(times(from).await, vec![at(30), at(20)]);
    let to = AuditQuery {
        until: Some(at(20)),
        ..AuditQuery::default()
    };
    assert_eq!(times(to).await, vec![at(10)]);
}

async fn retention_purges_only_older_records(f: Fixture) {
    for secs in [10, 20, 30] {
        f.audit
            .append(record(secs, "acme", "alice", "files.read", "ok"))
            .await
            .expect("store call succeeds");
    }
    let purged = f
        .audit
        .purge_before(at(20))
        .await
        .expect("store call succeeds");
    assert_eq!(purged, 1, "strictly older than the bound");
    let left = f
        .audit
        .query(AuditQuery::default())
        .await
        .expect("store call succeeds");
    let times: Vec<_> = left.into_iter().map(|(_, r)| r.time).collect();
    assert_eq!(times, vec![at(30), at(20)]);
    assert_eq!(f.audit.purge_before(at(20)).await, Ok(0), "nothing twice");
}

async fn pages_walk_back_without_overlap(f: Fixture) {
    for secs in 0..25 {
        f.audit
            .append(record(secs, "acme", "alice", "files.read", "ok"))
            .await
            .expect("store call succeeds");
    }
    let mut seen = Vec::new();
    let mut before_id = None;
    let mut pages = 0;
    loop {
        let page = ids(
            &*f.audit,
            AuditQuery {
                limit: 10,
                before_id,
                ..AuditQuery::default()
            },
        )
        .await;
        let Some(&last) = page.last() else { break };
        assert!(
            page.windows(2).all(|w| w[0] > w[1]),
            "newest first: {page:?}"
        );
        seen.extend(page);
        before_id = Some(last);
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 25);
    seen.dedup();
    assert_eq!(seen.len(), 25);
    // A limit above the cap is capped, not refused.
    let huge = AuditQuery {
        limit: usize::MAX,
        ..AuditQuery::default()
    };
    assert_eq!(
        ids(&*f.audit, huge).await.len(),
        25.min(MAX_AUDIT_QUERY_LIMIT)
    );
}

async fn over_long_fields_are_cut(f: Fixture) {
    let long = AuditRecord {
        arguments: Some("x".repeat(MAX_AUDIT_ARGUMENTS_BYTES * 2)),
        ..record(
            1,
            &"t".repeat(MAX_AUDIT_FIELD_BYTES * 4),
            "alice",
            "files.read",
            "ok",
        )
    };
    f.audit.append(long).await.expect("store call succeeds");
    let (_, stored) = f
        .audit
        .query(AuditQuery::default())
        .await
        .expect("store call succeeds")
        .remove(0);
    assert!(stored.tenant.len() <= MAX_AUDIT_FIELD_BYTES);
    assert!(stored.tenant.ends_with('…'));
    let arguments = stored.arguments.expect("arguments kept");
    assert!(arguments.len() <= MAX_AUDIT_ARGUMENTS_BYTES && arguments.ends_with('…'));
    assert_eq!(stored.user, "alice");
}

#[tokio::test]
async fn memory_ring_keeps_the_newest_records() {
    let ring = MemoryAudit::with_limits(3, usize::MAX);
    for secs in 0..5 {
        ring.append(record(secs, "acme", "alice", "files.read", "ok"))
            .await
            .expect("store call succeeds");
    }
    assert_eq!(ids(&ring, AuditQuery::default()).await, vec![5, 4, 3]);

    let one_record = record(0, "acme", "alice", "files.read", "ok").approximate_size();
    let small = MemoryAudit::with_limits(100, one_record * 2);
    for secs in 0..5 {
        small
            .append(record(secs, "acme", "alice", "files.read", "ok"))
            .await
            .expect("store call succeeds");
    }
    assert_eq!(ids(&small, AuditQuery::default()).await, vec![5, 4]);
}
