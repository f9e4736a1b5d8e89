//! The connect guard: a last check on the address a connection actually reached.
//!
//! IP-literal URLs never reach the resolver, so a caller that forgets `check_url` would
//! otherwise connect anywhere. The guard checks every new connection's peer before any HTTP
//! byte is written. (For `https` the TLS handshake has happened by then; the request has not.)

use std::{
    sync::Arc,
    task::{Context, Poll},
};

use futures::future::BoxFuture;
use hyper_util::client::legacy::connect::{Connection, HttpInfo};
use tower_layer::Layer;
use tower_service::Service;

use super::{NetError, NetPolicy};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Wraps reqwest's connector with [`ConnectGuard`].
#[derive(Clone)]
pub(super) struct ConnectGuardLayer {
    policy: Arc<NetPolicy>,
}

impl ConnectGuardLayer {
    pub(super) fn new(policy: Arc<NetPolicy>) -> Self {
        ConnectGuardLayer { policy }
    }
}

impl<S> Layer<S> for ConnectGuardLayer {
    type Service = ConnectGuard<S>;

    fn layer(&self, inner: S) -> ConnectGuard<S> {
        ConnectGuard::new(inner, Arc::clone(&self.policy))
    }
}

/// Refuses a fresh connection whose peer address the policy blocks, or whose peer is unknown.
#[derive(Clone)]
pub(super) struct ConnectGuard<S> {
    inner: S,
    policy: Arc<NetPolicy>,
}

impl<S> ConnectGuard<S> {
    pub(super) fn new(inner: S, policy: Arc<NetPolicy>) -> Self {
        ConnectGuard { inner, policy }
    }
}

impl<S, Req> Service<Req> for ConnectGuard<S>
where
    S: Service<Req>,
    S::Response: Connection + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let connecting = self.inner.call(req);
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let conn = connecting.await.map_err(Into::into)?;
            let mut extras = http::Extensions::new();
            conn.connected().get_extras(&mut extras);
            let peer = extras
                .get::<HttpInfo>()
                .map(HttpInfo::remote_addr)
                .ok_or(NetError::NoPeerAddress)?;
            policy.check_ip(peer.ip())?;
            Ok(conn)
        })
    }
}
