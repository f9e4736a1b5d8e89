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

/// `YYYY-MM-DDTHH:MM:SSZ`: UTC, whole seconds. The one form of every time the gateway writes
/// (REST bodies, errors, audit records, chat events); times outside jiff's range (years
/// -9999 to 9999) are clamped to it.
pub fn rfc3339(time: SystemTime) -> String {
    let at = jiff::Timestamp::try_from(time).unwrap_or(if time < UNIX_EPOCH {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// A time a caller gives: RFC 3339 with any offset (`2026-12-01T18:14:45Z`,
/// `2026-12-01T19:14:45+01:00`) or whole seconds since the epoch; `None` for anything else.
pub fn parse_instant(text: &str) -> Option<SystemTime> {
    if let Ok(secs) = text.parse::<u64>() {
        return UNIX_EPOCH.checked_add(Duration::from_secs(secs));
    }
    let at = text.parse::<jiff::Timestamp>().ok()?;
    let since = Duration::try_from(at.as_duration()).ok()?;
    UNIX_EPOCH.checked_add(since)
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
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(4_107_542_399)),
            "2100-02-28T23:59:59Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_millis(4_107_542_400_999)),
            "2100-03-01T00:00:00Z",
            "whole seconds"
        );
        // Clamped to jiff's last instant (which leaves room for any UTC offset).
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(u64::MAX / 4)),
            "9999-12-30T22:00:00Z"
        );
    }

    #[test]
    fn parses_what_it_writes_and_seconds() {
        let t = UNIX_EPOCH + Duration::from_secs(1_796_008_496);
        assert_eq!(parse_instant(&rfc3339(t)), Some(t));
        assert_eq!(parse_instant("1796008496"), Some(t));
        assert_eq!(parse_instant("2026-11-30T04:14:56+01:00"), Some(t));
        for bad in ["", "yesterday", "2026-11-30", "2026-11-30T03:14:56", "-5"] {
            assert_eq!(parse_instant(bad), None, "{bad}");
        }
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
