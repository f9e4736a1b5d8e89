//! The wall clock that confirmations expire by; replaceable so expiry can be tested exactly.

use std::{
    fmt,
    sync::{Arc, Mutex},
    time::{Duration, SystemTime},
};

/// A source of wall-clock time.
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> SystemTime + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Clock {
        Clock(Arc::new(SystemTime::now))
    }

    /// The system clock set `seconds` ahead (or behind, when negative): an instance whose
    /// clock is wrong, for tests.
    pub fn offset(seconds: i64) -> Clock {
        let by = Duration::from_secs(seconds.unsigned_abs());
        Clock(Arc::new(move || {
            let now = SystemTime::now();
            if seconds >= 0 {
                now + by
            } else {
                now.checked_sub(by).unwrap_or(now)
            }
        }))
    }

    /// A clock that stands still until moved with the returned handle.
    pub fn manual(start: SystemTime) -> (Clock, ManualClock) {
        let now = Arc::new(Mutex::new(start));
        let reader = now.clone();
        let clock = Clock(Arc::new(move || {
            *reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
        }));
        (clock, ManualClock(now))
    }

    pub fn now(&self) -> SystemTime {
        (self.0)()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Clock")
    }
}

/// Moves a [`Clock::manual`] clock.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<Mutex<SystemTime>>);

impl ManualClock {
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        *now += by;
    }

    pub fn set(&self, to: SystemTime) {
        *self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = to;
    }
}
