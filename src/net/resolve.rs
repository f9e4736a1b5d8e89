//! The validating resolver: every answer is checked, and the connection is pinned to it.

use std::{
    future::Future,
    io,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::Arc,
};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use url::Host;

use super::{NetError, NetPolicy};

/// The future a [`Lookup`] returns.
pub type LookupFuture = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// Turns a host name into addresses. The system resolver in production; a fake in tests.
pub trait Lookup: Send + Sync + 'static {
    fn lookup(&self, host: &str) -> LookupFuture;
}

/// The operating system's resolver (`getaddrinfo` via tokio). Its duration is bounded by the
/// client's connect timeout, which covers resolution too.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: &str) -> LookupFuture {
        let host = host.to_owned();
        Box::pin(async move {
            let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
            Ok(addrs.map(|addr| addr.ip()).collect())
        })
    }
}

/// A `reqwest` resolver that refuses the whole answer when any address in it is blocked, and
/// hands back exactly the addresses it checked, so a second lookup (DNS rebinding) cannot
/// change where the connection goes.
#[derive(Clone)]
pub struct ValidatingResolver {
    policy: Arc<NetPolicy>,
    lookup: Arc<dyn Lookup>,
}

impl ValidatingResolver {
    pub fn new(policy: Arc<NetPolicy>, lookup: Arc<dyn Lookup>) -> Self {
        ValidatingResolver { policy, lookup }
    }

    /// Resolves `host` and checks it against the allowlist and every answer against the
    /// address rules. Any failure refuses the whole answer: one private address among public
    /// ones is the classic rebinding setup.
    pub async fn resolve_checked(&self, host: &str) -> Result<Vec<IpAddr>, NetError> {
        // The allowlist is also checked on the URL; checking again here covers requests whose
        // URL skipped `check_url`.
        let parsed = Host::parse(host).map_err(|_| NetError::HostNotAllowed {
            host: host.to_owned(),
        })?;
        if !self.policy.host_allowed(&parsed) {
            return Err(NetError::HostNotAllowed {
                host: host.to_owned(),
            });
        }
        let addrs = self
            .lookup
            .lookup(host)
            .await
            .map_err(|err| NetError::Resolve {
                host: host.to_owned(),
                reason: err.to_string(),
            })?;
        if addrs.is_empty() {
            return Err(NetError::Resolve {
                host: host.to_owned(),
                reason: "no addresses".to_owned(),
            });
        }
        for ip in &addrs {
            self.policy.check_ip(*ip)?;
        }
        Ok(addrs)
    }
}

impl Resolve for ValidatingResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let resolver = self.clone();
        Box::pin(async move {
            let ips = resolver.resolve_checked(name.as_str()).await?;
            // Port 0: reqwest substitutes the URL's port or the scheme's default.
            let addrs: Addrs = Box::new(ips.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests;
