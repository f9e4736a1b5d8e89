//! Call limits of the gate: concurrency permits (per user × server, per server) and per-minute
//! rate buckets (per user, per server). In memory; a shared store can later sit behind the same
//! three calls.

mod concurrency;
mod rate;
#[cfg(test)]
mod tests;

use std::{fmt, sync::Arc, time::Duration};

use tokio::time::Instant;

use crate::config::{CallLimits, ServerId};

pub use concurrency::CallPermit;

/// How many users (user × server pairs for concurrency, users for rate) are tracked at once
/// before new ones are refused. Entries exist only while they matter (calls in flight, a rate
/// bucket not yet refilled), so this caps the memory a flood of fresh user names can take.
pub const DEFAULT_MAX_TRACKED_USERS: usize = 100_000;

/// Which limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// Calls in flight for one user on one server.
    UserConcurrency,
    /// Calls in flight on one server, all users together.
    ServerConcurrency,
    /// Calls per minute for one user, across servers.
    UserRate,
    /// Calls per minute on one server, all users together.
    ServerRate,
    /// The limiter already tracks as many users as it may.
    TooManyUsers,
}

impl LimitKind {
    /// Stable machine-readable name, for APIs and audit records.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitKind::UserConcurrency => "user_concurrency",
            LimitKind::ServerConcurrency => "server_concurrency",
            LimitKind::UserRate => "user_rate",
            LimitKind::ServerRate => "server_rate",
            LimitKind::TooManyUsers => "too_many_users",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            LimitKind::UserConcurrency => "too many calls in flight for this user on this server",
            LimitKind::ServerConcurrency => "too many calls in flight on this server",
            LimitKind::UserRate => "too many calls per minute for this user",
            LimitKind::ServerRate => "too many calls per minute on this server",
            LimitKind::TooManyUsers => "the gateway is tracking too many users",
        }
    }
}

/// A call refused by a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub struct LimitExceeded {
    pub limit: LimitKind,
    /// When a retry may pass: for rate limits the time until one token is back; `None` when
    /// it depends on other calls finishing.
    pub retry_after: Option<Duration>,
}

impl LimitExceeded {
    /// Stable error code shared by every limit.
    pub const CODE: &'static str = "limit_exceeded";

    pub fn code(&self) -> &'static str {
        Self::CODE
    }

    fn new(limit: LimitKind, retry_after: Option<Duration>) -> LimitExceeded {
        LimitExceeded { limit, retry_after }
    }
}

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limit exceeded: {}", self.limit.describe())?;
        if let Some(after) = self.retry_after {
            write!(f, " (retry after {} ms)", after.as_millis())?;
        }
        Ok(())
    }
}

/// How many users each part of the limiter holds state for right now (metrics, tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackedUsers {
    /// User × server pairs with calls in flight.
    pub in_flight: usize,
    /// Users with a rate bucket that is not full.
    pub rate: usize,
}

/// Owns every limit counter of one gateway. Cheap to share in an `Arc`; all methods take
/// `&self`.
pub struct Limiter {
    concurrency: Arc<concurrency::Concurrency>,
    rate: rate::RateBuckets,
}

impl Limiter {
    /// A limiter that refuses new users with [`LimitKind::TooManyUsers`] once it tracks
    /// `max_tracked_users` of them in either part.
    pub fn new(max_tracked_users: usize) -> Limiter {
        Limiter {
            concurrency: Arc::new(concurrency::Concurrency::new(max_tracked_users)),
            rate: rate::RateBuckets::new(max_tracked_users),
        }
    }

    /// Takes a permit for one call of `user` on `server`, counting against both the user ×
    /// server cap and the server cap, both or neither. With `concurrency_wait` zero a full cap
    /// refuses at once; otherwise waits at most that long. The permit is released on drop.
    /// Caps are read from `limits` on every call, so per-server overrides and reloads apply to
    /// the next call.
    pub async fn acquire(
        &self,
        user: &str,
        server: &ServerId,
        limits: &CallLimits,
    ) -> Result<CallPermit, LimitExceeded> {
        concurrency::Concurrency::acquire(&self.concurrency, user, server, limits).await
    }

    /// Takes one token from the user's and the server's per-minute buckets, or none when
    /// either is empty. `now` comes from the caller so tests need no clock.
    pub fn check_rate(
        &self,
        user: &str,
        server: &ServerId,
        limits: &CallLimits,
        now: Instant,
    ) -> Result<(), LimitExceeded> {
        self.rate.check(user, server, limits, now)
    }

    pub fn tracked_users(&self) -> TrackedUsers {
        TrackedUsers {
            in_flight: self.concurrency.tracked_users(),
            rate: self.rate.tracked_users(),
        }
    }
}

impl Default for Limiter {
    fn default() -> Self {
        Limiter::new(DEFAULT_MAX_TRACKED_USERS)
    }
}

impl fmt::Debug for Limiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("tracked_users", &self.tracked_users())
            .finish()
    }
}
