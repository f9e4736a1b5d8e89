//! Invisible characters: which ones hide text from a reviewer, and escaping them for display.

use std::fmt::Write as _;

/// Unicode general category Cf (format characters, Unicode 16), listed by hand so no table
/// crate is needed: these render as nothing, reorder text (bidi controls) or smuggle data
/// (tags), which is how instructions are hidden from a person reading a tool description.
const FORMAT_RANGES: &[(u32, u32)] = &[
    (0x00AD, 0x00AD),   // soft hyphen
    (0x0600, 0x0605),   // Arabic number signs
    (0x061C, 0x061C),   // Arabic letter mark (bidi)
    (0x06DD, 0x06DD),   // Arabic end of ayah
    (0x070F, 0x070F),   // Syriac abbreviation mark
    (0x0890, 0x0891),   // Arabic pound and piastre marks above
    (0x08E2, 0x08E2),   // Arabic disputed end of ayah
    (0x180E, 0x180E),   // Mongolian vowel separator
    (0x200B, 0x200F),   // zero width space, non-joiner, joiner; LRM, RLM
    (0x202A, 0x202E),   // bidi embeddings and overrides
    (0x2060, 0x2064),   // word joiner, invisible operators
    (0x2066, 0x206F),   // bidi isolates, deprecated format characters
    (0xFEFF, 0xFEFF),   // byte order mark / zero width no-break space
    (0xFFF9, 0xFFFB),   // interlinear annotation
    (0x110BD, 0x110BD), // Kaithi number sign
    (0x110CD, 0x110CD), // Kaithi number sign above
    (0x13430, 0x1343F), // Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3), // shorthand format controls
    (0x1D173, 0x1D17A), // musical symbol beam and phrase controls
    (0xE0000, 0xE007F), // tags: the whole block, its unassigned points included
];

/// Not Cf, yet rendered blank in most fonts and used the same way.
const BLANK_LOOKALIKES: &[char] = &[
    '\u{034F}', // combining grapheme joiner
    '\u{115F}', // Hangul choseong filler
    '\u{1160}', // Hangul jungseong filler
    '\u{3164}', // Hangul filler
    '\u{FFA0}', // halfwidth Hangul filler
];

const ZERO_WIDTH_NON_JOINER: char = '\u{200C}';
const ZERO_WIDTH_JOINER: char = '\u{200D}';

fn in_ranges(c: char, ranges: &[(u32, u32)]) -> bool {
    let c = u32::from(c);
    ranges.iter().any(|&(lo, hi)| (lo..=hi).contains(&c))
}

pub(super) fn is_variation_selector(c: char) -> bool {
    in_ranges(
        c,
        &[
            (0x180B, 0x180D),   // Mongolian free variation selectors 1-3
            (0x180F, 0x180F),   // Mongolian free variation selector 4
            (0xFE00, 0xFE0F),   // variation selectors 1-16
            (0xE0100, 0xE01EF), // variation selectors 17-256
        ],
    )
}

/// Renders as nothing, whatever its context.
pub(in crate::catalog) fn is_invisible(c: char) -> bool {
    // Below U+00AD (the first format character) nothing is invisible in this sense; most
    // text is there.
    if u32::from(c) < 0xAD {
        return false;
    }
    in_ranges(c, FORMAT_RANGES) || BLANK_LOOKALIKES.contains(&c) || is_variation_selector(c)
}

/// A visible character outside ASCII: the only kind that legitimately sits beside a joiner
/// (emoji ZWJ sequences, Persian and Indic text).
fn visible_non_ascii(c: char) -> bool {
    !c.is_ascii() && !c.is_whitespace() && !c.is_control() && !is_invisible(c)
}

/// Invisible characters in `text` that are not explained by their context: how many, and the
/// first one with its character index.
///
/// Everything [`is_invisible`] is suspect, with two context rules that keep emoji and
/// non-Latin scripts quiet:
/// - a zero width joiner or non-joiner is fine between two visible non-ASCII characters
///   (a variation selector accepted after such a character counts as part of it);
/// - one variation selector is fine after a visible character other than an ASCII letter
///   (emoji presentation, keycaps like `1️⃣`, CJK variants). A second one in a row is never
///   fine: no standard sequence has two, and runs of them are how bytes are smuggled.
///
/// Tag characters are always suspect, which also flags the rare subdivision-flag emoji.
pub(super) fn suspicious_invisible(text: &str) -> (usize, Option<(usize, char)>) {
    // Nothing below U+00AD is invisible in this sense (see `is_invisible`).
    if text.is_ascii() {
        return (0, None);
    }
    let mut count = 0;
    let mut first = None;
    // Whether the previous character may carry a variation selector, and whether it may
    // stand before a joiner.
    let mut prev_takes_selector = false;
    let mut prev_joinable = false;
    let mut chars = text.chars().enumerate().peekable();
    while let Some((index, c)) = chars.next() {
        let suspicious;
        if is_variation_selector(c) {
            suspicious = !prev_takes_selector;
            prev_joinable = prev_joinable && !suspicious;
            prev_takes_selector = false;
        } else if c == ZERO_WIDTH_JOINER || c == ZERO_WIDTH_NON_JOINER {
            let next_joinable = chars.peek().is_some_and(|&(_, n)| visible_non_ascii(n));
            suspicious = !(prev_joinable && next_joinable);
            prev_joinable = false;
            prev_takes_selector = false;
        } else {
            suspicious = is_invisible(c);
            prev_joinable = visible_non_ascii(c);
            prev_takes_selector =
                !suspicious && !c.is_whitespace() && !c.is_control() && !c.is_ascii_alphabetic();
        }
        if suspicious {
            count += 1;
            first.get_or_insert((index, c));
        }
    }
    (count, first)
}

/// Untrusted `text` made safe to show, at most `max_chars` characters long (plus a `…`
/// marking a cut): control, invisible and non-space whitespace characters become `\u{..}`,
/// and `\` and `"` are escaped so the result can be quoted without ambiguity. Escapes count
/// toward the limit, so text made of invisible characters cannot inflate the output.
pub(in crate::catalog) fn escaped(text: &str, max_chars: usize) -> String {
    // Printable ASCII without `\` or `"` that fits (a property name, most often) is itself.
    if text.len() <= max_chars
        && text
            .bytes()
            .all(|b| (0x20..0x7f).contains(&b) && b != b'\\' && b != b'"')
    {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len().min(4 * max_chars) + 3);
    let mut used = 0;
    for c in text.chars() {
        let code = u32::from(c);
        let hidden = c.is_control() || is_invisible(c) || (c.is_whitespace() && c != ' ');
        let len = match c {
            '\\' | '"' => 2,
            // `\u{` and `}` around the code's hex digits.
            _ if hidden => 4 + (32 - code.leading_zeros()).div_ceil(4).max(1) as usize,
            _ => 1,
        };
        if used + len > max_chars {
            out.push('…');
            break;
        }
        used += len;
        match c {
            '\\' | '"' => {
                out.push('\\');
                out.push(c);
            }
            _ if hidden => {
                let _ = write!(out, "\\u{{{code:x}}}");
            }
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escaped;

    #[test]
    fn escaping_shows_what_is_hidden_and_stops_at_the_limit() {
        assert_eq!(
            escaped("a\"b\\c\u{200B}d\n\u{E0041}", 80),
            "a\\\"b\\\\c\\u{200b}d\\u{a}\\u{e0041}"
        );
        assert_eq!(escaped("abcdef", 3), "abc…");
        assert_eq!(escaped("abcdef", 6), "abcdef");
        // An escape is counted whole: it is never cut in the middle.
        assert_eq!(escaped("ab\u{200B}", 9), "ab…");
        assert_eq!(escaped("ab\u{200B}", 10), "ab\\u{200b}");
        assert_eq!(escaped("\u{0}", 5), "\\u{0}");
        assert_eq!(escaped("", 5), "");
    }
}
