//! A client for plain `http://` endpoints under the same guards as [`client`](super::client),
//! without reqwest's layers above hyper.
//!
//! A tool call to a Streamable HTTP upstream is one small POST, and on loopback or a local
//! network reqwest's own work per request (it parses the URL back from the request twice, for
//! its redirect policy and for its response, and wraps the request in several futures) cost
//! about as much as the gateway's whole policy path. This client keeps what matters for
//! safety and drops the rest:
//!
//! - every host name is resolved by [`ValidatingResolver`] (allowlist, every address checked,
//!   the connection pinned to the checked addresses), within the connect deadline;
//! - every connection's peer is checked by the connect guard, as in [`client`](super::client);
//! - no redirects are followed, no proxy is used, and only `http` is spoken (`https` stays
//!   with reqwest and its TLS stack);
//! - a response that goes silent for the read deadline fails, as reqwest's `read_timeout`.
//!
//! Connections are pooled per origin, as reqwest pools them, and per [lane](crate::lane): a
//! pooled connection is driven by a task on the runtime that opened it, so a call made on a
//! lane borrows only that lane's connections and stays on its thread.

use std::{
    error::Error as StdError,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::{
    client::legacy::{
        Client,
        connect::{HttpConnector, dns::Name},
    },
    rt::{TokioExecutor, TokioTimer},
};
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use crate::lane::PerLane;

use super::{
    NetError, NetPolicy,
    error::described,
    guard::ConnectGuard,
    resolve::{Lookup, ValidatingResolver},
};

/// How long an idle pooled connection is kept (reqwest's default).
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// TCP keep-alive probes: idle time before the first, the interval, and how many may go
/// unanswered (reqwest's defaults).
const TCP_KEEPALIVE: Duration = Duration::from_secs(15);
const TCP_KEEPALIVE_RETRIES: u32 = 3;

type Connector = ConnectGuard<HttpConnector<Resolver>>;

type Pool = Client<Connector, Full<Bytes>>;

/// The guarded client for `http://` endpoints; cheap to clone (the pools are shared).
#[derive(Clone)]
pub struct PlainClient {
    /// Lane 0's pool (every thread that is not a lane's), then one per lane, made when the
    /// lane first calls.
    pools: Arc<PerLane<Box<Pool>>>,
    connector: Connector,
    read_timeout: Duration,
}

impl std::fmt::Debug for PlainClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainClient")
            .field("read_timeout", &self.read_timeout)
            .finish_non_exhaustive()
    }
}

impl PlainClient {
    /// The client for `policy`; `None` when the policy refuses plain `http`.
    pub fn new(policy: &NetPolicy, lookup: Arc<dyn Lookup>) -> Option<PlainClient> {
        if !policy.allow_http {
            return None;
        }
        let policy = Arc::new(policy.clone());
        let resolver = Resolver {
            resolver: ValidatingResolver::new(Arc::clone(&policy), lookup),
            deadline: policy.connect_timeout,
        };
        let mut http = HttpConnector::new_with_resolver(resolver);
        http.enforce_http(true);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(policy.connect_timeout));
        // TCP keep-alive as reqwest sets it: a peer gone silent under a long call is found.
        http.set_keepalive(Some(TCP_KEEPALIVE));
        http.set_keepalive_interval(Some(TCP_KEEPALIVE));
        http.set_keepalive_retries(Some(TCP_KEEPALIVE_RETRIES));
        Some(PlainClient {
            pools: Arc::new(PerLane::new()),
            connector: ConnectGuard::new(http, Arc::clone(&policy)),
            read_timeout: policy.read_timeout,
        })
    }

    /// The calling lane's pool.
    fn pool(&self) -> &Pool {
        self.pools.get_or_init(|| {
            Box::new(
                Client::builder(TokioExecutor::new())
                    .pool_idle_timeout(POOL_IDLE_TIMEOUT)
                    .pool_timer(TokioTimer::new())
                    .build(self.connector.clone()),
            )
        })
    }

    /// Sends `request` (its URI absolute, `http`) and returns the response once its head
    /// arrived. The body fails when no bytes come for the read deadline.
    pub async fn send(
        &self,
        request: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<PlainBody>, NetError> {
        let response = tokio::time::timeout(self.read_timeout, self.pool().request(request))
            .await
            .map_err(|_| timed_out(self.read_timeout))?
            .map_err(|err| {
                let kind = if err.is_connect() {
                    "connect"
                } else {
                    "request"
                };
                described(kind, &err)
            })?;
        let read_timeout = self.read_timeout;
        Ok(response.map(|body| PlainBody {
            body,
            idle: None,
            read: true,
            read_timeout,
        }))
    }
}

fn timed_out(after: Duration) -> NetError {
    NetError::Request {
        kind: "timeout",
        detail: format!("no response within {after:?}"),
    }
}

/// A response body from [`PlainClient`]: fails once no bytes came for the read deadline.
/// The deadline's timer is armed only when the body has to wait: a small answer that came
/// whole with its head sets none.
#[derive(Debug)]
pub struct PlainBody {
    body: Incoming,
    idle: Option<Pin<Box<Sleep>>>,
    /// A frame came since the timer was last armed.
    read: bool,
    read_timeout: Duration,
}

impl Body for PlainBody {
    type Data = Bytes;
    type Error = NetError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, NetError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            this.read = true;
            return Poll::Ready(frame.map(|frame| frame.map_err(|err| described("body", &err))));
        }
        // Waiting: the deadline runs from the first wait after the last frame.
        if std::mem::take(&mut this.read) {
            let deadline = Instant::now() + this.read_timeout;
            match &mut this.idle {
                Some(idle) => idle.as_mut().reset(deadline),
                None => this.idle = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        match this.idle.as_mut().map(|idle| idle.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => Poll::Ready(Some(Err(timed_out(this.read_timeout)))),
            _ => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// [`ValidatingResolver`] as hyper's connector calls a resolver, bounded by the connect
/// deadline (hyper's bounds only the TCP connect).
#[derive(Clone)]
struct Resolver {
    resolver: ValidatingResolver,
    deadline: Duration,
}

type BoxError = Box<dyn StdError + Send + Sync>;

impl Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let resolver = self.resolver.clone();
        let deadline = self.deadline;
        Box::pin(async move {
            let host = name.as_str();
            let ips = tokio::time::timeout(deadline, resolver.resolve_checked(host))
                .await
                .map_err(|_| NetError::Resolve {
                    host: host.to_owned(),
                    reason: format!("no answer within {deadline:?}"),
                })??;
            // Port 0: the connector puts in the URL's port or the scheme's default.
            let addrs: Vec<SocketAddr> = ips.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
            Ok(addrs.into_iter())
        })
    }
}

#[cfg(test)]
mod tests;
