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

/// `YYYY-MM-DDTHH:MM:SSZ` in UTC (civil-from-days, proleptic Gregorian).
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_dates() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_796_008_496)),
            "2026-11-30T03:14:56Z"
        );
    }

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
