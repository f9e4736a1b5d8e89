//! JWKS parsing and the throttled refresh, against an in-memory source on a paused clock.

use std::sync::{
    Mutex,
    atomic::{AtomicUsize, Ordering},
};

use serde_json::{Value, json};

use super::*;

const JWKS: &str = include_str!("../testdata/jwks.json");
const BOTH: [Algorithm; 2] = [Algorithm::RS256, Algorithm::ES256];

fn test_keys() -> Vec<Value> {
    let doc: Value = serde_json::from_str(JWKS).expect("test JWKS is JSON");
    doc["keys"].as_array().expect("keys").clone()
}

fn document(keys: &[Value]) -> Vec<u8> {
    serde_json::to_vec(&json!({ "keys": keys })).expect("serializes")
}

fn kids(keys: &[PublicKey]) -> Vec<String> {
    keys.iter().filter_map(|k| k.kid.clone()).collect()
}

#[test]
fn usable_signing_keys_are_kept_and_the_rest_skipped() {
    let mut entries = test_keys();
    entries.push(json!({"kty": "oct", "kid": "shared", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ"}));
    let mut encryption = test_keys()[0].clone();
    encryption["kid"] = json!("enc-1");
    encryption["use"] = json!("enc");
    entries.push(encryption);
    let mut pss = test_keys()[0].clone();
    pss["kid"] = json!("pss-1");
    pss["alg"] = json!("PS256");
    entries.push(pss);
    entries.push(json!({"kty": "EC", "kid": "p384", "crv": "P-384", "x": "AA", "y": "AA"}));
    entries.push(json!("not an object"));

    let keys = parse_keys(&document(&entries), &BOTH).expect("parses");
    assert_eq!(kids(&keys), ["test-rsa-1", "test-ec-1"]);
    let rsa_only = parse_keys(&document(&entries), &[Algorithm::RS256]).expect("parses");
    assert_eq!(kids(&rsa_only), ["test-rsa-1"]);
}

#[test]
fn malformed_and_oversized_documents_are_refused() {
    assert!(matches!(
        parse_keys(b"[]", &BOTH),
        Err(JwksError::Malformed)
    ));
    assert!(matches!(
        parse_keys(b"{\"keys\": 1}", &BOTH),
        Err(JwksError::Malformed)
    ));
    let many = vec![test_keys()[0].clone(); MAX_JWKS_KEYS + 1];
    assert!(matches!(
        parse_keys(&document(&many), &BOTH),
        Err(JwksError::TooManyKeys { count: 33 })
    ));
}

#[test]
fn the_jwks_url_must_be_https() {
    let url = Url::parse("http://issuer.example/jwks.json").expect("url");
    assert!(matches!(
        HttpsSource::new(&url),
        Err(JwksError::Net(NetError::Scheme { .. }))
    ));
}

/// Serves whatever document the test put in it and counts fetches.
struct FakeSource {
    document: Mutex<Vec<u8>>,
    fetches: AtomicUsize,
}

impl FakeSource {
    fn set(&self, document: Vec<u8>) {
        *self.document.lock().expect("not poisoned") = document;
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

impl JwksSource for FakeSource {
    fn fetch(&self) -> BoxFuture<'_, Result<Bytes, JwksError>> {
        self.fetches.fetch_add(1, Ordering::SeqCst);
        let document = self.document.lock().expect("not poisoned").clone();
        Box::pin(async move { Ok(Bytes::from(document)) })
    }
}

/// Waits (on the paused clock) until `done` holds; fails after ten virtual minutes.
async fn wait_until(done: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(600), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("condition reached in time");
}

#[tokio::test(start_paused = true)]
async fn refreshes_are_requested_by_unknown_kids_and_throttled() {
    let all = test_keys();
    let source = Arc::new(FakeSource {
        document: Mutex::new(document(&all[..1])),
        fetches: AtomicUsize::new(0),
    });
    let jwks = Jwks::start(Arc::clone(&source) as Arc<dyn JwksSource>, &BOTH)
        .await
        .expect("first fetch");
    assert_eq!(
        (source.fetches(), kids(&jwks.keys())),
        (1, vec!["test-rsa-1".to_owned()])
    );

    // A rotation: the provider now publishes both keys.
    source.set(document(&all));
    let asked = Instant::now();
    jwks.request_refresh();
    jwks.request_refresh();
    wait_until(|| jwks.keys().len() == 2).await;
    assert!(
        asked.elapsed() >= MIN_REFRESH_INTERVAL,
        "throttled from the setup fetch"
    );
    assert_eq!(source.fetches(), 2, "two requests, one fetch");

    // A burst of requests right after a fetch waits a full interval and fetches once.
    let refreshed = Instant::now();
    for _ in 0..10 {
        jwks.request_refresh();
    }
    wait_until(|| source.fetches() == 3).await;
    assert!(refreshed.elapsed() >= MIN_REFRESH_INTERVAL);
    tokio::time::sleep(MIN_REFRESH_INTERVAL * 3).await;
    assert_eq!(source.fetches(), 3, "no request, no fetch");

    // A failed refresh keeps the last good keys.
    source.set(b"not json".to_vec());
    jwks.request_refresh();
    wait_until(|| source.fetches() == 4).await;
    assert_eq!(kids(&jwks.keys()), ["test-rsa-1", "test-ec-1"]);
}
