//! RFC 8785 JSON canonicalization (JCS): the one byte form that fingerprints and argument
//! hashes are computed over.

use std::{cmp::Ordering, fmt::Write};

use serde_json::{Number, Value};

/// The JCS form of `value`: no whitespace, object keys sorted by UTF-16 code units, numbers in
/// ECMAScript shortest form, strings escaped as `JSON.stringify` does.
///
/// One deliberate departure: integers held exactly by `serde_json` (`i64`/`u64`) are printed
/// with all their digits even above 2^53, where JCS would round them through an `f64`.
/// Rounding would let two different large integers hash alike, and an argument hash must
/// never match arguments that differ. Every integer an `f64` holds exactly prints the same
/// either way.
///
/// Recursion follows the value's nesting; values parsed by `serde_json` are at most 128
/// levels deep, so the stack stays small.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value);
    out
}

fn write_value(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| utf16_order(a.0, b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

/// JCS sorts keys as arrays of UTF-16 code units, which differs from Rust's UTF-8 byte order
/// for characters above U+FFFF against those in U+E000..U+FFFF.
fn utf16_order(a: &str, b: &str) -> Ordering {
    a.encode_utf16().cmp(b.encode_utf16())
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn write_number(out: &mut String, n: &Number) {
    if let Some(i) = n.as_i64() {
        let _ = write!(out, "{i}");
    } else if let Some(u) = n.as_u64() {
        let _ = write!(out, "{u}");
    } else {
        write_float(out, n);
    }
}

/// ECMAScript `Number::toString` for a finite float (serde_json holds no NaN or infinity).
///
/// The digits come from serde_json's own printing (ryu): the shortest that round-trip and,
/// of those, the nearest, ties to even, which is what ECMA-262 asks for. Rust's `{:e}`
/// breaks ties upward (1424953923781206.25 gives `...206.3`, JCS wants `...206.2`). Only
/// the layout is redone here, following ECMA-262 step by step.
fn write_float(out: &mut String, number: &Number) {
    let text = number.to_string();
    let unsigned = text.trim_start_matches('-');
    let (mantissa, exponent) = unsigned.split_once(['e', 'E']).unwrap_or((unsigned, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = format!("{int}{frac}");
    let significant = all_digits.trim_start_matches('0');
    // ECMA-262 names the decimal point position `n`: value = 0.digits × 10^n.
    let n = int.len() as i32 + exponent - (all_digits.len() - significant.len()) as i32;
    let digits = significant.trim_end_matches('0');
    if digits.is_empty() {
        // Zero, including -0, which JCS prints as 0.
        out.push('0');
        return;
    }
    if text.starts_with('-') {
        out.push('-');
    }
    let k = digits.len() as i32;
    if k <= n && n <= 21 {
        out.push_str(digits);
        out.extend(std::iter::repeat_n('0', (n - k) as usize));
    } else if 0 < n && n <= 21 {
        let (int, frac) = digits.split_at(n as usize);
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else if -6 < n && n <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-n) as usize));
        out.push_str(digits);
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if n - 1 < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{}", (n - 1).abs());
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn number(bits: u64) -> String {
        canonical_json(&json!(f64::from_bits(bits)))
    }

    #[test]
    fn numbers_match_rfc8785_appendix_b() {
        let cases: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"),
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"),
        ];
        for &(bits, expected) in cases {
            assert_eq!(number(bits), expected, "bits {bits:#018x}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_float_prints_back_to_itself(bits in any::<u64>()) {
            let f = f64::from_bits(bits);
            prop_assume!(f.is_finite());
            let text = canonical_json(&json!(f));
            let back: f64 = text.parse().expect("a JSON number");
            prop_assert_eq!(back, if f == 0.0 { 0.0 } else { f }, "{}", text);
            let mantissa = text.split('e').next().unwrap_or_default();
            prop_assert!(!(mantissa.contains('.') && mantissa.ends_with('0')), "{}", text);
        }
    }

    #[test]
    fn small_floats_and_integers() {
        assert_eq!(canonical_json(&json!(1.5)), "1.5");
        assert_eq!(canonical_json(&json!(1.0)), "1");
        assert_eq!(canonical_json(&json!(-0.0)), "0");
        assert_eq!(canonical_json(&json!(1e21)), "1e+21");
        assert_eq!(canonical_json(&json!(1e20)), "100000000000000000000");
        assert_eq!(canonical_json(&json!(0.002)), "0.002");
        assert_eq!(canonical_json(&json!(1e-7)), "1e-7");
        assert_eq!(canonical_json(&json!(-42)), "-42");
        assert_eq!(canonical_json(&json!(u64::MAX)), "18446744073709551615");
    }

    #[test]
    #[expect(
        clippy::excessive_precision,
        reason = "the RFC's input literal, rounding included"
    )]
    fn rfc8785_section_3_2_2_example() {
        // serde_json without its `float_roundtrip` feature may parse a float one unit in the
        // last place off (333333333.33333329 becomes ...325), so the numbers are built from
        // Rust literals, which parse exactly; the strings go through the JSON parser.
        let input = r#"{
            "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
            "literals": [null, true, false]
        }"#;
        let mut value: Value = serde_json::from_str(input).expect("valid JSON");
        value["numbers"] = json!([333333333.33333329f64, 1E30, 4.50, 2e-3, 1e-27]);
        assert_eq!(
            canonical_json(&value),
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    #[test]
    fn keys_sort_by_utf16_code_units() {
        let input = r#"{
            "\u20ac": "Euro Sign",
            "\r": "Carriage Return",
            "\ufb33": "Hebrew Letter Dalet With Dagesh",
            "1": "One",
            "\ud83d\ude00": "Emoji: Grinning Face",
            "\u0080": "Control",
            "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let value: Value = serde_json::from_str(input).expect("valid JSON");
        let out = canonical_json(&value);
        let order = [
            "Carriage Return",
            "One",
            "Control",
            "Latin Small",
            "Euro Sign",
            "Emoji",
            "Hebrew",
        ];
        let positions: Vec<usize> = order
            .iter()
            .map(|needle| out.find(needle).expect("value present"))
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{out}");
        // UTF-8 byte order would put U+FB33 before the emoji; UTF-16 puts the surrogate first.
        assert!("\u{fb33}" < "\u{1f600}");
    }

    #[test]
    fn escapes_controls_and_keeps_other_characters_literal() {
        let value = json!({"s": "\u{1}\u{1f}\u{7f}\u{2028}é\"\\/"});
        assert_eq!(
            canonical_json(&value),
            "{\"s\":\"\\u0001\\u001f\u{7f}\u{2028}é\\\"\\\\/\"}"
        );
    }

    #[test]
    fn nested_structures_have_no_whitespace() {
        let value = json!({"b": [1, {"d": true, "c": null}], "a": {}});
        assert_eq!(
            canonical_json(&value),
            r#"{"a":{},"b":[1,{"c":null,"d":true}]}"#
        );
    }
}
