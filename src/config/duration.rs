//! Durations as configuration writes them: a number of seconds or a string with a unit.

use std::{fmt, time::Duration};

use serde::{
    Deserialize, Deserializer,
    de::{self, Visitor},
};

/// A duration as written; parsed during validation so that a bad one is reported with its
/// field path instead of aborting deserialization.
#[derive(Debug, Clone, PartialEq)]
pub enum RawDuration {
    Seconds(f64),
    Text(String),
}

impl RawDuration {
    /// The duration, or a message saying how to write one.
    pub fn to_duration(&self) -> Result<Duration, String> {
        match self {
            RawDuration::Seconds(secs) => seconds(*secs, &secs.to_string()),
            RawDuration::Text(text) => parse_text(text),
        }
    }
}

fn parse_text(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let factor = match unit.trim() {
        "" | "s" => 1.0,
        "ms" => 0.001,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86_400.0,
        _ => return Err(not_a_duration(text)),
    };
    let value: f64 = number.parse().map_err(|_| not_a_duration(text))?;
    seconds(value * factor, text)
}

fn seconds(value: f64, written: &str) -> Result<Duration, String> {
    if !value.is_finite() || value < 0.0 {
        return Err(not_a_duration(written));
    }
    Duration::try_from_secs_f64(value).map_err(|_| not_a_duration(written))
}

fn not_a_duration(written: &str) -> String {
    format!(
        "`{written}` is not a duration: write seconds (`30`, `0.5`) or a number with a unit \
         (`\"500ms\"`, `\"30s\"`, `\"2m\"`, `\"1h\"`, \
         `\"90d\"`)"
    )
}

impl<'de> Deserialize<'de> for RawDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = RawDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration: a number of seconds or a string such as \"30s\"")
            }

            // Integers become f64 exactly up to 2^53 seconds, far beyond any bound we accept.
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawDuration, E> {
                Ok(RawDuration::Seconds(v as f64))
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawDuration, E> {
                Ok(RawDuration::Seconds(v as f64))
            }

            fn visit_f64<E: de::Error>(self, v: f64) -> Result<RawDuration, E> {
                Ok(RawDuration::Seconds(v))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawDuration, E> {
                Ok(RawDuration::Text(v.to_owned()))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(s: &str) -> Result<Duration, String> {
        RawDuration::Text(s.to_owned()).to_duration()
    }

    #[test]
    fn parses_units_and_plain_seconds() {
        assert_eq!(text("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(text("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(text(" 2m "), Ok(Duration::from_secs(120)));
        assert_eq!(text("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(text("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(text("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(text("0.25s"), Ok(Duration::from_millis(250)));
        assert_eq!(
            RawDuration::Seconds(2.5).to_duration(),
            Ok(Duration::from_millis(2500))
        );
    }

    #[test]
    fn rejects_garbage_negative_and_unknown_units() {
        for bad in ["", "s", "abc", "10 parsecs", "1e3", "1.2.3", "5w", "-1s"] {
            let err = text(bad).expect_err(bad);
            assert!(err.contains("is not a duration"), "{bad}: {err}");
        }
        assert!(RawDuration::Seconds(-1.0).to_duration().is_err());
        assert!(RawDuration::Seconds(f64::NAN).to_duration().is_err());
        assert!(RawDuration::Seconds(f64::INFINITY).to_duration().is_err());
    }

    #[test]
    fn deserializes_from_toml_numbers_and_strings() {
        #[derive(Deserialize)]
        struct T {
            a: RawDuration,
            b: RawDuration,
            c: RawDuration,
        }
        let t: T = toml::from_str("a = 3\nb = 0.5\nc = \"10ms\"").expect("parses");
        assert_eq!(t.a, RawDuration::Seconds(3.0));
        assert_eq!(t.b, RawDuration::Seconds(0.5));
        assert_eq!(t.c, RawDuration::Text("10ms".to_owned()));
        assert!(toml::from_str::<T>("a = true\nb = 1\nc = 1").is_err());
    }
}
