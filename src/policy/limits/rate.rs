//! Per-minute rate limits as token buckets: capacity is the per-minute number, refilled
//! continuously; a call takes one token from the user's bucket and one from the server's.

use std::{
    collections::HashMap,
    hash::Hash,
    sync::{Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use tokio::time::Instant;

use super::{LimitExceeded, LimitKind};
use crate::config::{CallLimits, ServerId};

/// A bucket refills from empty to full in exactly this long whatever its capacity (the rate is
/// capacity per minute), so a bucket untouched this long is full and the same as no bucket.
const REFILL_WINDOW: Duration = Duration::from_secs(60);

/// How often full buckets are dropped. A sweep walks every entry, so it is kept off the
/// per-call path; stale entries then live at most `REFILL_WINDOW + SWEEP_INTERVAL`.
const SWEEP_INTERVAL: Duration = Duration::from_secs(10);

pub(super) struct RateBuckets {
    state: Mutex<State>,
    max_tracked_users: usize,
}

#[derive(Default)]
struct State {
    /// Absent means full: only users who called within the last minute or so have an entry.
    users: HashMap<String, Bucket>,
    servers: HashMap<ServerId, Bucket>,
    last_sweep: Option<Instant>,
}

/// Tokens are counted in fixed-point units so that refill and wait times are exact integers:
/// a bucket gains `per_minute` units per nanosecond, and a token is a minute's worth of them.
const UNITS_PER_TOKEN: u128 = REFILL_WINDOW.as_nanos();

#[derive(Debug, Clone, Copy)]
struct Bucket {
    units: u128,
    updated: Instant,
}

impl Bucket {
    fn full(per_minute: u32, now: Instant) -> Bucket {
        Bucket {
            units: capacity(per_minute),
            updated: now,
        }
    }

    /// The bucket as it stands at `now`. Callers read `now` before taking the lock, so it may
    /// be slightly older than `updated`: then nothing is added and time does not run back.
    fn refilled(self, per_minute: u32, now: Instant) -> Bucket {
        let elapsed = now.saturating_duration_since(self.updated).as_nanos();
        let gained = elapsed.saturating_mul(u128::from(per_minute));
        Bucket {
            units: self.units.saturating_add(gained).min(capacity(per_minute)),
            updated: now.max(self.updated),
        }
    }

    /// Time until one token is available, or `None` if one is now.
    fn wait_for_token(&self, per_minute: u32) -> Option<Duration> {
        let missing = UNITS_PER_TOKEN.checked_sub(self.units).filter(|m| *m > 0)?;
        // Rounded up, so a caller retrying exactly then finds the token there. At most a
        // minute for any rate of one or more, so it always fits.
        let nanos = missing.div_ceil(u128::from(per_minute.max(1)));
        Some(Duration::from_nanos(
            u64::try_from(nanos).unwrap_or(u64::MAX),
        ))
    }

    fn taken(self) -> Bucket {
        Bucket {
            units: self.units.saturating_sub(UNITS_PER_TOKEN),
            ..self
        }
    }
}

fn capacity(per_minute: u32) -> u128 {
    u128::from(per_minute) * UNITS_PER_TOKEN
}

/// The bucket of `key` at `now`, or `None` when the limit is off (zero).
fn current<K, Q>(map: &HashMap<K, Bucket>, key: &Q, per_minute: u32, now: Instant) -> Option<Bucket>
where
    K: Eq + Hash + std::borrow::Borrow<Q>,
    Q: Eq + Hash + ?Sized,
{
    (per_minute > 0).then(|| {
        map.get(key).map_or_else(
            || Bucket::full(per_minute, now),
            |bucket| bucket.refilled(per_minute, now),
        )
    })
}

impl RateBuckets {
    pub(super) fn new(max_tracked_users: usize) -> RateBuckets {
        RateBuckets {
            state: Mutex::new(State::default()),
            max_tracked_users,
        }
    }

    pub(super) fn check(
        &self,
        user: &str,
        server: &ServerId,
        limits: &CallLimits,
        now: Instant,
    ) -> Result<(), LimitExceeded> {
        let user_rate = limits.user_calls_per_minute;
        let server_rate = limits.server_calls_per_minute;
        let mut state = self.lock();
        state.sweep_if_due(now);
        let user_bucket = current(&state.users, user, user_rate, now);
        let server_bucket = current(&state.servers, server, server_rate, now);
        let user_wait = user_bucket.and_then(|b| b.wait_for_token(user_rate));
        let server_wait = server_bucket.and_then(|b| b.wait_for_token(server_rate));
        // Both are checked before either is taken, so a refusal costs no tokens. When both
        // are empty the longer wait is the one that tells when a retry can pass.
        match (user_wait, server_wait) {
            (None, None) => {}
            (Some(user_wait), Some(server_wait)) if server_wait > user_wait => {
                return Err(LimitExceeded::new(LimitKind::ServerRate, Some(server_wait)));
            }
            (Some(user_wait), _) => {
                return Err(LimitExceeded::new(LimitKind::UserRate, Some(user_wait)));
            }
            (None, Some(server_wait)) => {
                return Err(LimitExceeded::new(LimitKind::ServerRate, Some(server_wait)));
            }
        }
        if let Some(bucket) = user_bucket {
            if !state.users.contains_key(user) && state.users.len() >= self.max_tracked_users {
                let next_sweep = state.last_sweep.map_or(Duration::ZERO, |last| {
                    SWEEP_INTERVAL.saturating_sub(now.saturating_duration_since(last))
                });
                return Err(LimitExceeded::new(
                    LimitKind::TooManyUsers,
                    Some(next_sweep),
                ));
            }
            state.users.insert(user.to_owned(), bucket.taken());
        }
        if let Some(bucket) = server_bucket {
            state.servers.insert(server.clone(), bucket.taken());
        }
        Ok(())
    }

    pub(super) fn tracked_users(&self) -> usize {
        self.lock().users.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // Critical sections only replace whole buckets, so a panic elsewhere cannot leave one
        // half-updated.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    fn sweep_if_due(&mut self, now: Instant) {
        let due = self
            .last_sweep
            .is_none_or(|last| now.saturating_duration_since(last) >= SWEEP_INTERVAL);
        if !due {
            return;
        }
        let live = |bucket: &Bucket| now.saturating_duration_since(bucket.updated) < REFILL_WINDOW;
        self.users.retain(|_, bucket| live(bucket));
        self.servers.retain(|_, bucket| live(bucket));
        self.last_sweep = Some(now);
    }
}
