//! The user's time zone, for the date and time the preamble states: an IANA name
//! (`Europe/Paris`, looked up in the system's zoneinfo) or a fixed offset (`+02:00`, `UTC`).

use std::time::SystemTime;

use jiff::{
    Timestamp,
    tz::{Offset, TimeZone},
};

/// Longest time zone text accepted; IANA names are well under it.
const MAX_TIME_ZONE_CHARS: usize = 64;

/// Largest offset accepted from UTC, in hours (real zones span -12 to +14).
const MAX_OFFSET_HOURS: i32 = 18;

/// A time zone the preamble's clock is shown in.
#[derive(Debug, Clone)]
pub struct UserTimeZone {
    zone: TimeZone,
    /// The IANA name, or `None` for a fixed offset.
    name: Option<String>,
}

/// The time zone text is neither a known IANA name nor an offset.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "unknown time zone {shown}: use an IANA name such as `Europe/Paris` or an offset such as `+02:00`"
)]
pub struct TimeZoneError {
    shown: String,
}

impl UserTimeZone {
    /// Parses an IANA name (`America/New_York`) or an offset (`UTC`, `Z`, `+02:00`, `-0530`,
    /// `UTC+2`).
    pub fn parse(text: &str) -> Result<UserTimeZone, TimeZoneError> {
        let text = text.trim();
        let invalid = || TimeZoneError {
            shown: format!(
                "{:?}",
                text.chars().take(MAX_TIME_ZONE_CHARS).collect::<String>()
            ),
        };
        if text.is_empty() || text.chars().count() > MAX_TIME_ZONE_CHARS {
            return Err(invalid());
        }
        if let Some(seconds) = parse_offset(text) {
            let offset = Offset::from_seconds(seconds).map_err(|_| invalid())?;
            return Ok(UserTimeZone {
                zone: TimeZone::fixed(offset),
                name: None,
            });
        }
        // Names only: no path tricks reach the zoneinfo lookup.
        let plausible = text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '_' | '-' | '+'))
            && !text.starts_with('/')
            && !text.contains("..");
        if !plausible {
            return Err(invalid());
        }
        let zone = TimeZone::get(text).map_err(|_| invalid())?;
        Ok(UserTimeZone {
            zone,
            name: Some(text.to_owned()),
        })
    }

    pub fn utc() -> UserTimeZone {
        UserTimeZone {
            zone: TimeZone::UTC,
            name: Some("UTC".to_owned()),
        }
    }

    /// This machine's zone (`TZ`, `/etc/localtime`), UTC when it cannot be read.
    pub fn system() -> UserTimeZone {
        let zone = TimeZone::system();
        let name = zone.iana_name().map(str::to_owned);
        UserTimeZone { zone, name }
    }

    /// `Monday 2026-11-30 14:05 (Europe/Paris, UTC+01:00)`.
    pub fn describe(&self, at: SystemTime) -> String {
        let Ok(timestamp) = Timestamp::try_from(at) else {
            return "unknown".to_owned();
        };
        let zoned = timestamp.to_zoned_datetime(self.zone.clone());
        let clock = zoned.strftime("%A %Y-%m-%d %H:%M").to_string();
        let offset = zoned.strftime("UTC%:z").to_string();
        match &self.name {
            Some(name) if name != "UTC" => format!("{clock} ({name}, {offset})"),
            _ => format!("{clock} ({offset})"),
        }
    }
}

impl Default for UserTimeZone {
    fn default() -> Self {
        UserTimeZone::utc()
    }
}

/// Seconds east of UTC for `UTC`, `Z`, `GMT`, `+02:00`, `-0530`, `+2`, `UTC+02:00`.
fn parse_offset(text: &str) -> Option<i32> {
    let rest = ["UTC", "GMT", "Z"]
        .iter()
        .find_map(|prefix| text.strip_prefix(prefix))
        .unwrap_or(text);
    if rest.is_empty() {
        // A bare `UTC`, `GMT` or `Z` (the text itself is never empty here).
        return Some(0);
    }
    let (sign, digits) = match rest.as_bytes()[0] {
        b'+' => (1, &rest[1..]),
        b'-' => (-1, &rest[1..]),
        _ => return None,
    };
    let (hours, minutes) = match digits.split_once(':') {
        Some((h, m)) => (h, m),
        None if digits.len() > 2 => digits.split_at(digits.len() - 2),
        None => (digits, "0"),
    };
    let all_digits =
        |s: &str| !s.is_empty() && s.len() <= 2 && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(hours) || !all_digits(minutes) {
        return None;
    }
    let (hours, minutes): (i32, i32) = (hours.parse().ok()?, minutes.parse().ok()?);
    if hours > MAX_OFFSET_HOURS || minutes >= 60 {
        return None;
    }
    Some(sign * (hours * 3600 + minutes * 60))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn offsets_and_names() {
        assert_eq!(parse_offset("UTC"), Some(0));
        assert_eq!(parse_offset("Z"), Some(0));
        assert_eq!(parse_offset("+02:00"), Some(7200));
        assert_eq!(parse_offset("-0530"), Some(-(5 * 3600 + 1800)));
        assert_eq!(parse_offset("UTC+2"), Some(7200));
        assert_eq!(parse_offset("+25:00"), None);
        assert_eq!(parse_offset("+2:75"), None);
        assert_eq!(parse_offset("Europe/Paris"), None);
        for bad in ["", "Nowhere/Atlantis", "../../etc/passwd", "+", "a b"] {
            assert!(UserTimeZone::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn described_in_the_zone() {
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            UserTimeZone::utc().describe(at),
            "Tuesday 2023-11-14 22:13 (UTC+00:00)"
        );
        assert_eq!(
            UserTimeZone::parse("+05:30").expect("offset").describe(at),
            "Wednesday 2023-11-15 03:43 (UTC+05:30)"
        );
        // The zoneinfo database is part of the system; skip the name check without it.
        if let Ok(paris) = UserTimeZone::parse("Europe/Paris") {
            assert_eq!(
                paris.describe(at),
                "Tuesday 2023-11-14 23:13 (Europe/Paris, UTC+01:00)"
            );
        }
    }
}
