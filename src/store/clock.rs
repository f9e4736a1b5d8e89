//! Times as whole microseconds since the Unix epoch: the precision SQLite integers and
//! PostgreSQL timestamps both keep, so every store compares times alike.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the epoch, saturating: times before 1970 become 0 and times more than
/// about 292,000 years ahead become `i64::MAX`, which keeps order and never fails on odd input.
pub(crate) fn to_micros(time: SystemTime) -> i64 {
    match time.duration_since(UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_micros()).unwrap_or(i64::MAX),
        Err(_) => 0,
    }
}

/// The inverse of [`to_micros`]; negative values (never written by us) read as the epoch.
pub(crate) fn from_micros(micros: i64) -> SystemTime {
    let micros = u64::try_from(micros).unwrap_or(0);
    UNIX_EPOCH
        .checked_add(Duration::from_micros(micros))
        .unwrap_or(UNIX_EPOCH)
}

/// Expired means "no longer usable at `now`": an entry expiring exactly now is expired.
pub(crate) fn is_expired(expires_at: SystemTime, now: SystemTime) -> bool {
    to_micros(expires_at) <= to_micros(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_whole_microseconds_and_saturates() {
        let t = UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_456);
        assert_eq!(from_micros(to_micros(t)), t);
        assert_eq!(to_micros(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(from_micros(-5), UNIX_EPOCH);
    }

    #[test]
    fn expiry_boundary_is_inclusive() {
        let t = UNIX_EPOCH + Duration::from_secs(100);
        assert!(is_expired(t, t));
        assert!(!is_expired(t + Duration::from_micros(1), t));
        // Below a microsecond both stores see the same instant.
        assert!(is_expired(t + Duration::from_nanos(500), t));
    }
}
