//! JWKS keys: fetched over HTTPS at setup, refreshed in the background when a token names an
//! unknown `kid`, at most once per [`MIN_REFRESH_INTERVAL`].

use std::{
    sync::{Arc, PoisonError, RwLock},
    time::Duration,
};

use bytes::Bytes;
use futures::{FutureExt, future::BoxFuture};
use jsonwebtoken::{Algorithm, jwk::Jwk};
use tokio::{sync::Notify, time::Instant};
use tokio_util::task::AbortOnDropHandle;
use url::Url;

use super::keys::{PublicKey, from_jwk};
use crate::net::{NetError, NetPolicy, check_url, client, read_capped};

/// Unknown key ids are chosen by whoever sends the token: without a floor on the interval,
/// a stream of made-up `kid`s would turn into a stream of requests to the identity provider.
pub(super) const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

/// A JWKS document holds a handful of keys; 1 MiB leaves room for certificate chains and
/// stops a misbehaving endpoint from filling memory.
const MAX_JWKS_BYTES: usize = 1024 * 1024;

/// Identity providers publish a few keys around a rotation; more than this is not a key set
/// we should try every token against.
const MAX_JWKS_KEYS: usize = 32;

/// Connect, idle-read and whole-request deadline for one JWKS fetch: a slow identity provider
/// must not hold setup for long.
const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a JWKS could not be fetched or used.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("fetching the JWKS failed: {0}")]
    Net(#[from] NetError),
    #[error("the JWKS endpoint answered HTTP {status}")]
    Status { status: u16 },
    #[error("the JWKS is not a JSON object with a `keys` array")]
    Malformed,
    #[error("the JWKS holds {count} keys; at most {MAX_JWKS_KEYS} are accepted")]
    TooManyKeys { count: usize },
    #[error("the JWKS holds no RS256 or ES256 signing key for the accepted algorithms")]
    NoUsableKeys,
}

/// Where JWKS documents come from: HTTPS in service, a fake in tests.
pub(super) trait JwksSource: Send + Sync + 'static {
    fn fetch(&self) -> BoxFuture<'_, Result<Bytes, JwksError>>;
}

/// Fetches the JWKS through the SSRF-safe client: HTTPS only, no redirects, public addresses.
pub(super) struct HttpsSource {
    client: reqwest::Client,
    url: Url,
}

impl HttpsSource {
    pub(super) fn new(url: &Url) -> Result<HttpsSource, JwksError> {
        // Plain http only to a loopback address (an identity provider on this machine), which
        // the configuration accepts outside production alone.
        let loopback = url.scheme() == "http"
            && match url.host() {
                Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
                Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
                _ => false,
            };
        let policy = NetPolicy {
            connect_timeout: FETCH_TIMEOUT,
            read_timeout: FETCH_TIMEOUT,
            allow_http: loopback,
            allow_private: loopback,
            ..NetPolicy::default()
        };
        check_url(url, &policy)?;
        Ok(HttpsSource {
            client: client(&policy)?,
            url: url.clone(),
        })
    }
}

impl JwksSource for HttpsSource {
    fn fetch(&self) -> BoxFuture<'_, Result<Bytes, JwksError>> {
        Box::pin(async move {
            let resp = self
                .client
                .get(self.url.clone())
                .header(http::header::ACCEPT, "application/json")
                .timeout(FETCH_TIMEOUT)
                .send()
                .await
                .map_err(NetError::from)?;
            if !resp.status().is_success() {
                return Err(JwksError::Status {
                    status: resp.status().as_u16(),
                });
            }
            Ok(read_capped(resp, MAX_JWKS_BYTES).await?)
        })
    }
}

/// The current JWKS keys and the task that refreshes them; dropping it stops the task.
pub(super) struct Jwks {
    shared: Arc<Shared>,
    _refresher: AbortOnDropHandle<()>,
}

struct Shared {
    keys: RwLock<Arc<[PublicKey]>>,
    wake: Notify,
}

impl Jwks {
    /// Fetches the key set once (failing setup if that fails) and starts the refresher.
    pub(super) async fn start(
        source: Arc<dyn JwksSource>,
        accepted: &[Algorithm],
    ) -> Result<Jwks, JwksError> {
        let keys = fetch_keys(source.as_ref(), accepted).await?;
        if keys.is_empty() {
            return Err(JwksError::NoUsableKeys);
        }
        let shared = Arc::new(Shared {
            keys: RwLock::new(keys),
            wake: Notify::new(),
        });
        let task = tokio::spawn(refresh_loop(
            Arc::clone(&shared),
            source,
            accepted.to_vec(),
            Instant::now(),
        ));
        Ok(Jwks {
            shared,
            _refresher: AbortOnDropHandle::new(task),
        })
    }

    pub(super) fn keys(&self) -> Arc<[PublicKey]> {
        Arc::clone(
            &self
                .shared
                .keys
                .read()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Asks for a refresh; requests made while one is pending or throttled collapse into one.
    pub(super) fn request_refresh(&self) {
        self.shared.wake.notify_one();
    }
}

async fn refresh_loop(
    shared: Arc<Shared>,
    source: Arc<dyn JwksSource>,
    accepted: Vec<Algorithm>,
    mut last_fetch: Instant,
) {
    loop {
        shared.wake.notified().await;
        tokio::time::sleep_until(last_fetch + MIN_REFRESH_INTERVAL).await;
        // Requests made while throttled are answered by the fetch below: drop their permit.
        let _ = shared.wake.notified().now_or_never();
        last_fetch = Instant::now();
        match fetch_keys(source.as_ref(), &accepted).await {
            // An empty but well-formed set is the provider revoking every key: honour it.
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "JWKS refreshed");
                *shared.keys.write().unwrap_or_else(PoisonError::into_inner) = keys;
            }
            // A failed fetch says nothing about the keys: keep the last good set.
            Err(err) => tracing::warn!(error = %err, "JWKS refresh failed; keeping the last keys"),
        }
    }
}

async fn fetch_keys(
    source: &dyn JwksSource,
    accepted: &[Algorithm],
) -> Result<Arc<[PublicKey]>, JwksError> {
    parse_keys(&source.fetch().await?, accepted)
}

/// The usable keys of a JWKS document. Entries that do not parse or do not fit an accepted
/// algorithm are skipped (providers publish encryption keys alongside), not fatal.
pub(super) fn parse_keys(
    document: &[u8],
    accepted: &[Algorithm],
) -> Result<Arc<[PublicKey]>, JwksError> {
    #[derive(serde::Deserialize)]
    struct Document {
        keys: Vec<serde_json::Value>,
    }
    let doc: Document = serde_json::from_slice(document).map_err(|_| JwksError::Malformed)?;
    if doc.keys.len() > MAX_JWKS_KEYS {
        return Err(JwksError::TooManyKeys {
            count: doc.keys.len(),
        });
    }
    let mut keys = Vec::with_capacity(doc.keys.len());
    for (index, entry) in doc.keys.into_iter().enumerate() {
        let parsed = serde_json::from_value::<Jwk>(entry)
            .map_err(|_| "malformed entry")
            .and_then(|jwk| from_jwk(&jwk, accepted));
        match parsed {
            Ok(key) => keys.push(key),
            Err(reason) => tracing::debug!(index, reason, "JWKS key skipped"),
        }
    }
    Ok(keys.into())
}

#[cfg(test)]
mod tests;
