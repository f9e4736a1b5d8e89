//! SSRF-safe outbound HTTP: address classification, validating resolver, redirect policy, caps.
//!
//! Every outbound request (Streamable HTTP and SSE upstreams, JWKS fetches) uses a client from
//! [`client`]. Layers, outside in:
//!
//! - [`check_url`]: the caller runs it on the first URL (scheme, userinfo, allowlist, IP
//!   literals); the redirect policy runs it again on every hop, which must also stay on the
//!   first URL's origin.
//! - [`ValidatingResolver`]: refuses an answer if any address is blocked and pins the
//!   connection to the checked addresses.
//! - the connect guard: checks each new connection's peer address, the backstop for IP-literal
//!   URLs that skipped `check_url`.
//! - [`read_capped`]: reads a body under a byte cap.
//!
//! [`PlainClient`] is the same guards for plain `http` endpoints on hyper alone, for the
//! one request that is sent most (a tool call to a Streamable HTTP upstream).

mod classify;
mod client;
mod error;
mod guard;
mod plain;
mod policy;
mod resolve;

/// Address classification against the IANA special-purpose ranges.
pub use classify::{Blocked, classify, is_cloud_metadata};
/// The client builders and the capped body reader.
pub use client::{client, client_with_lookup, read_capped, read_capped_body};
/// Typed refusals and failures.
pub use error::NetError;
/// The client for plain `http` endpoints without reqwest's layers, and its response body.
pub use plain::{PlainBody, PlainClient};
/// The policy type, its defaults, and the URL check.
pub use policy::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT, NetPolicy, check_url};
/// Name resolution: the injectable lookup and the validating resolver.
pub use resolve::{Lookup, LookupFuture, SystemLookup, ValidatingResolver};
