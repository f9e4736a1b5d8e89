//! The HTTP client rmcp's OAuth machinery runs on: the gateway's SSRF-safe client (address
//! rules on every resolved address and connection, no proxies), bodies capped, no redirects
//! followed (a redirected discovery or token request is answered as it stands).

use std::time::Duration;

use rmcp::transport::auth::{OAuthHttpClient, OAuthHttpClientFuture, OAuthHttpRequest};

use crate::net::{self, NetPolicy};

/// Metadata documents, registrations and token responses are a few KiB.
const MAX_BODY_BYTES: usize = 256 * 1024;
/// One OAuth request (discovery, registration, token, revocation).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// rmcp's OAuth requests through the guarded client.
pub struct GuardedHttp {
    client: reqwest::Client,
    policy: NetPolicy,
}

impl GuardedHttp {
    /// A client under `policy` (the upstream server's: loopback and plain http only where
    /// that server allows them; any public host, since authorization servers live elsewhere).
    pub fn new(policy: NetPolicy) -> Result<GuardedHttp, net::NetError> {
        Ok(GuardedHttp {
            client: net::client(&policy)?,
            policy,
        })
    }

    /// The client itself, for requests of our own (revocation).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    pub fn policy(&self) -> &NetPolicy {
        &self.policy
    }
}

impl OAuthHttpClient for GuardedHttp {
    fn execute(&self, request: OAuthHttpRequest) -> OAuthHttpClientFuture<'_> {
        Box::pin(async move {
            let timeout = request
                .timeout
                .unwrap_or(REQUEST_TIMEOUT)
                .min(REQUEST_TIMEOUT);
            let (parts, body) = request.request.into_parts();
            let url = url::Url::parse(&parts.uri.to_string())?;
            net::check_url(&url, &self.policy)?;
            let response = self
                .client
                .request(parts.method, url)
                .headers(parts.headers)
                .body(body)
                .timeout(timeout)
                .send()
                .await
                .map_err(net::NetError::from)?;
            let status = response.status();
            let headers = response.headers().clone();
            let body = net::read_capped(response, MAX_BODY_BYTES).await?;
            let mut out = http::Response::new(body.to_vec());
            *out.status_mut() = status;
            *out.headers_mut() = headers;
            Ok(out)
        })
    }
}
