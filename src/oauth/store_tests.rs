//! The OAuth stores' contract, run against each backend.

use super::store::*;
use crate::oauth::vault::Sealed;

fn key(user: &str, server: &str) -> ConnectionKey {
    ConnectionKey {
        tenant: "acme".to_owned(),
        user: user.to_owned(),
        server: server.to_owned(),
    }
}

fn sealed(byte: u8) -> Sealed {
    Sealed {
        key_id: "0011223344556677".to_owned(),
        nonce: vec![byte; 12],
        ciphertext: vec![byte; 40],
    }
}

fn row(byte: u8, now: i64) -> ConnectionRow {
    ConnectionRow {
        status: ConnectionStatus::Connected,
        issuer: Some("https://as.example".to_owned()),
        scopes: "read write".to_owned(),
        sealed: sealed(byte),
        connected_at: now,
        updated_at: now,
    }
}

pub(crate) async fn contract(store: &dyn OAuthStore) {
    let alice = key("alice", "linear");
    assert_eq!(store.connection(&alice).await.expect("read"), None);
    store
        .put_connection(&alice, &row(1, 10))
        .await
        .expect("put");
    store
        .put_connection(&key("alice", "github"), &row(2, 11))
        .await
        .expect("put");
    store
        .put_connection(&key("bob", "linear"), &row(3, 12))
        .await
        .expect("put");
    assert_eq!(
        store.connection(&alice).await.expect("read"),
        Some(row(1, 10))
    );
    assert_eq!(
        store
            .connection(&key("alice", "github"))
            .await
            .expect("read"),
        Some(row(2, 11)),
        "one row per server"
    );
    store
        .put_connection(&key("carol", "linear"), &row(5, 15))
        .await
        .expect("put");
    let users: Vec<String> = store
        .server_connections("linear", 2)
        .await
        .expect("list")
        .into_iter()
        .map(|key| key.user)
        .collect();
    assert_eq!(
        users,
        ["carol", "bob"],
        "most recently renewed first, bounded"
    );
    store
        .delete_connection(&key("carol", "linear"))
        .await
        .expect("delete");
    // Replaced whole.
    store
        .put_connection(&alice, &row(4, 20))
        .await
        .expect("replace");
    assert_eq!(
        store.connection(&alice).await.expect("read"),
        Some(row(4, 20))
    );
    // Expired only while it is still the record the refresh read.
    assert!(
        !store
            .expire_connection(&alice, &sealed(1), 30)
            .await
            .expect("stale")
    );
    assert!(
        store
            .expire_connection(&alice, &sealed(4), 30)
            .await
            .expect("expire")
    );
    let expired = store.connection(&alice).await.expect("read").expect("kept");
    assert_eq!(
        (expired.status, expired.updated_at),
        (ConnectionStatus::Expired, 30)
    );
    assert!(store.delete_connection(&alice).await.expect("delete"));
    assert!(!store.delete_connection(&alice).await.expect("gone"));
    assert_eq!(
        store.connection(&key("bob", "linear")).await.expect("read"),
        Some(row(3, 12))
    );

    // A pending authorization is taken once, and not after it expired.
    let pending = PendingRow {
        key: alice.clone(),
        sealed: sealed(5),
        expires_at: 100,
    };
    store.put_pending("h1", &pending).await.expect("put");
    assert_eq!(
        store.take_pending("h1", 50).await.expect("take"),
        Some(pending.clone())
    );
    assert_eq!(store.take_pending("h1", 50).await.expect("again"), None);
    store.put_pending("h2", &pending).await.expect("put");
    assert_eq!(store.take_pending("h2", 100).await.expect("expired"), None);
    store.put_pending("h3", &pending).await.expect("put");
    store
        .put_pending(
            "h4",
            &PendingRow {
                expires_at: 300,
                ..pending.clone()
            },
        )
        .await
        .expect("put");
    assert_eq!(store.purge_pending(200).await.expect("purge"), 1);
    assert!(store.take_pending("h4", 200).await.expect("kept").is_some());

    assert_eq!(
        store
            .client("linear", "https://as.example")
            .await
            .expect("read"),
        None
    );
    store
        .put_client("linear", "https://as.example", &sealed(6))
        .await
        .expect("put");
    store
        .put_client("linear", "https://as.example", &sealed(7))
        .await
        .expect("replace");
    assert_eq!(
        store
            .client("linear", "https://as.example")
            .await
            .expect("read"),
        Some(sealed(7))
    );
    assert_eq!(
        store
            .client("linear", "https://other.example")
            .await
            .expect("read"),
        None
    );
    user_servers_contract(store).await;
}

fn server_row(name: &str, byte: u8) -> UserServerRow {
    UserServerRow {
        name: name.to_owned(),
        url: format!("https://{name}.example/mcp"),
        sealed: sealed(byte),
        read_only: "{}".to_owned(),
        created_at: i64::from(byte),
    }
}

/// Users' own servers: theirs alone, by name, at most `max`, names unique per user.
async fn user_servers_contract(store: &dyn OAuthStore) {
    let add = |user: &'static str, name: &'static str, byte: u8| async move {
        store
            .add_user_server("acme", user, &server_row(name, byte), 2)
            .await
            .expect("add")
    };
    assert_eq!(add("alice", "notes", 1).await, UserServerAdded::Added);
    assert_eq!(add("alice", "notes", 2).await, UserServerAdded::NameTaken);
    assert_eq!(add("alice", "docs", 3).await, UserServerAdded::Added);
    assert_eq!(add("alice", "more", 4).await, UserServerAdded::Full);
    assert_eq!(
        add("bob", "notes", 5).await,
        UserServerAdded::Added,
        "names are per user"
    );
    let alices = store.user_servers("acme", "alice").await.expect("list");
    assert_eq!(
        alices,
        [server_row("docs", 3), server_row("notes", 1)],
        "by name"
    );
    assert_eq!(
        store.user_servers("other", "alice").await.expect("list"),
        [],
        "per tenant"
    );
    let notes = key("alice", "notes");
    assert!(
        store
            .set_user_server_read_only(&notes, r#"{"echo":"f"}"#)
            .await
            .expect("mark")
    );
    assert!(
        !store
            .set_user_server_read_only(&key("carol", "notes"), "{}")
            .await
            .expect("mark")
    );
    let alices = store.user_servers("acme", "alice").await.expect("list");
    assert_eq!(alices[1].read_only, r#"{"echo":"f"}"#);
    assert!(store.delete_user_server(&notes).await.expect("delete"));
    assert!(!store.delete_user_server(&notes).await.expect("delete"));
    assert_eq!(
        store.user_servers("acme", "bob").await.expect("list"),
        [server_row("notes", 5)],
        "another user's server of that name stays"
    );
    assert_eq!(
        add("alice", "more", 6).await,
        UserServerAdded::Added,
        "room again"
    );
}

#[tokio::test]
async fn memory_keeps_the_contract() {
    contract(&MemoryOAuth::default()).await;
}

/// Full, the memory store makes room from expired sign-ins only: a live one is never dropped
/// for a newer one.
#[tokio::test]
async fn a_full_memory_store_drops_expired_sign_ins_only() {
    let store = MemoryOAuth::default();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_micros(),
    )
    .expect("micros");
    let pending = |expires_at| PendingRow {
        key: key("alice", "linear"),
        sealed: sealed(1),
        expires_at,
    };
    for i in 0..MAX_MEMORY_PENDING {
        store
            .put_pending(&format!("live-{i}"), &pending(now + 600_000_000))
            .await
            .expect("room");
    }
    let refused = store
        .put_pending("newer", &pending(now + 900_000_000))
        .await
        .expect_err("full of live sign-ins");
    assert_eq!(refused, crate::store::StoreError::Full);
    assert!(
        store
            .take_pending("live-0", now)
            .await
            .expect("take")
            .is_some()
    );
    // An expired one makes room.
    store
        .put_pending("live-0", &pending(now - 1))
        .await
        .expect("put back, expired");
    store
        .put_pending("newer", &pending(now + 900_000_000))
        .await
        .expect("room from the expired one");
    assert!(
        store
            .take_pending("live-1", now)
            .await
            .expect("take")
            .is_some()
    );
}

#[tokio::test]
async fn sqlite_keeps_the_contract() {
    let dir = tempfile::tempdir().expect("dir");
    let stores = crate::store::open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open");
    contract(stores.oauth().as_ref()).await;
    stores.close().await;
}

/// The machine's PostgreSQL (loopback, trust), in a database of this test's own, dropped after.
#[tokio::test]
async fn postgres_keeps_the_contract_and_locks_refreshes_across_pools() {
    use sqlx::PgPool;
    let scratch = crate::store::postgres::scratch::Database::create("oauth").await;
    let url = scratch.url();
    let run = async {
        let pool = PgPool::connect(&url).await.expect("connect");
        crate::store::postgres::migrate(&pool)
            .await
            .expect("schema");
        let store = crate::store::postgres::PgOAuth::new(pool.clone());
        contract(&store).await;
        // Two instances (two pools): the second waits for the first's refresh lock.
        let other =
            crate::store::postgres::PgOAuth::new(PgPool::connect(&url).await.expect("connect"));
        let alice = key("alice", "linear");
        let held = store
            .lock_refresh(&alice)
            .await
            .expect("lock")
            .expect("a shared lock");
        let waiting = tokio::spawn(async move {
            let _guard = other.lock_refresh(&alice).await.expect("lock");
        });
        // Seen waiting by PostgreSQL itself: an advisory lock asked for and not granted.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let (ungranted,): (i64,) = sqlx::query_as(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            )
            .fetch_one(&pool)
            .await
            .expect("pg_locks");
            if ungranted == 1 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second instance never asked for the lock"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(
            !waiting.is_finished(),
            "the second instance waits for the lock"
        );
        // Another connection's lock is not this one's.
        let bob = store
            .lock_refresh(&key("bob", "linear"))
            .await
            .expect("lock");
        drop(bob);
        drop(held);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiting)
            .await
            .expect("released with the guard")
            .expect("task");
        pool.close().await;
    };
    run.await;
    scratch.drop_it().await;
}

/// The Client ID Metadata Document: the gateway's own URL as client id, with an https
/// `public_url` only, or where configured.
#[test]
fn the_client_metadata_document_names_the_callback() {
    use crate::config::{
        Env, HttpConfig, HttpKind, OAuthConfig, SecretTemplate, ServerConfig, ServerId,
        TransportConfig, UpstreamOAuth,
    };
    let mut server = ServerConfig::new(
        ServerId::new("notes").expect("id"),
        TransportConfig::Http(HttpConfig {
            url: url::Url::parse("https://notes.example/mcp").expect("url"),
            kind: HttpKind::Streamable,
            headers: Vec::new(),
        }),
    );
    server.oauth = Some(UpstreamOAuth::default());
    let config = OAuthConfig {
        keys: vec![SecretTemplate::new("${K}")],
        ..OAuthConfig::default()
    };
    let env = Env::from_pairs([("K", "00".repeat(32).as_str())]);
    let store =
        || -> std::sync::Arc<dyn OAuthStore> { std::sync::Arc::new(MemoryOAuth::default()) };
    let connections = |public: &str, config: &OAuthConfig| {
        crate::oauth::Connections::new(
            std::slice::from_ref(&server),
            config,
            Some(&url::Url::parse(public).expect("url")),
            store(),
            &env,
        )
        .expect("set up")
        .expect("an OAuth server")
    };
    let document = connections("https://gw.example", &config)
        .client_metadata()
        .expect("a document");
    assert_eq!(
        document["client_id"],
        "https://gw.example/oauth/client-metadata.json"
    );
    assert_eq!(
        document["redirect_uris"],
        serde_json::json!(["https://gw.example/api/v1/oauth/callback"])
    );
    assert_eq!(document["token_endpoint_auth_method"], "none");
    assert!(
        connections("http://127.0.0.1:8080", &config)
            .client_metadata()
            .is_none()
    );
    let elsewhere = OAuthConfig {
        client_metadata_url: Some(
            url::Url::parse("https://example.com/mcpgate.json").expect("url"),
        ),
        ..config.clone()
    };
    let document = connections("http://127.0.0.1:8080", &elsewhere)
        .client_metadata()
        .expect("configured");
    assert_eq!(document["client_id"], "https://example.com/mcpgate.json");
}
