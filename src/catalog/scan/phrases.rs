//! Phrase checks over one piece of tool text: hidden instructions, secret access, concealment
//! and instructions about other tools. Word and substring scans, linear in the text.

use std::{borrow::Cow, sync::LazyLock};

use aho_corasick::{AhoCorasick, MatchKind};
use regex::Regex;

use super::{
    MAX_EXCERPT_CHARS,
    unicode::{escaped, is_invisible},
};

/// Tag names that mark text as privileged instructions in known poisoning examples. Tags
/// that honest servers use to structure long descriptions (`<instructions>`, `<context>`,
/// `<rules>`, `<important_notes>`: dbt's, Neon's, Supabase's) are not among them: what such
/// a block says is read like any other text.
const MARKUP_TAGS: &[&str] = &[
    "important",
    "system",
    "sys",
    "hidden",
    "secret",
    "admin",
    "critical",
    "override",
    "mandatory",
    "directive",
    "directives",
];

/// Longest name between `<|` and `|>` taken for a chat-template special token
/// (`<|im_start|>`, `<|eot_id|>`); longer runs are ordinary text.
const MAX_SPECIAL_TOKEN_NAME: usize = 32;

/// Chat-template markers written as plain text.
const TEMPLATE_MARKERS: &[&str] = &[
    "[inst]",
    "[/inst]",
    "<<sys>>",
    "<</sys>>",
    "<start_of_turn>",
    "<end_of_turn>",
    "### instruction:",
    "### response:",
    "### system:",
];

/// [`TEMPLATE_MARKERS`] found in one pass, the leftmost first.
static TEMPLATE: LazyLock<AhoCorasick> = LazyLock::new(|| {
    AhoCorasick::builder()
        .match_kind(MatchKind::LeftmostFirst)
        .build(TEMPLATE_MARKERS)
        .expect("literal markers always build")
});

/// Paths and phrases naming credentials; `.env` is matched separately (word boundaries).
const SECRET_NEEDLES: &[&str] = &[
    "~/.ssh",
    ".ssh/",
    "id_rsa",
    "id_ed25519",
    "id_ecdsa",
    "id_dsa",
    ".aws/credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".git-credentials",
    ".docker/config.json",
    ".kube/config",
    "/etc/passwd",
    "/etc/shadow",
    "private key",
    "private_key",
];

/// The needles that name a private key by itself, not where one is kept.
const PRIVATE_KEY_NAMES: &[&str] = &["private key", "private_key"];

/// Words that make a secret's name a reference to it (`private_key_uuid`, `private key id`,
/// `private_key_path`): which key, not the key.
const REFERENCE_WORDS: &[&str] = &["uuid", "id", "ids", "name", "names", "path"];

/// Whether `after`, the text right after a needle, is one of [`REFERENCE_WORDS`] joined to it
/// by `_`, `-` or a space, ending the name there.
fn a_reference(after: &str) -> bool {
    let Some(rest) = after.strip_prefix(['_', '-', ' ']) else {
        return false;
    };
    let word = rest
        .split(|c: char| !c.is_alphanumeric())
        .next()
        .unwrap_or_default();
    REFERENCE_WORDS.contains(&word) && !rest[word.len()..].starts_with('_')
}

/// All of [`SECRET_NEEDLES`] in one automaton: the leftmost match is the earliest needle.
static SECRET_NEEDLE: LazyLock<Regex> = LazyLock::new(|| {
    let alternatives: Vec<String> = SECRET_NEEDLES.iter().map(|s| regex::escape(s)).collect();
    Regex::new(&alternatives.join("|")).expect("escaped literals always compile")
});

// Word patterns: each slot lists alternatives of one or more words; "" makes a slot optional.
const NEGATION: &[&str] = &[
    "do not",
    "don't",
    "dont",
    "never",
    "must not",
    "mustn't",
    "must never",
    "should not",
    "shouldn't",
    "should never",
];
const MODAL_NEGATION: &[&str] = &[
    "must not",
    "mustn't",
    "must never",
    "should not",
    "shouldn't",
    "should never",
    "need not",
    "needn't",
    "does not need to",
    "doesn't need to",
    "never needs to",
];
const USER: &[&str] = &["user", "users", "user's"];
const DETERMINER: &[&str] = &["", "the", "your", "any", "this"];
const TEMPORAL: &[&str] = &[
    "previous",
    "prior",
    "above",
    "earlier",
    "preceding",
    "former",
];
const OVERRIDE_VERB: &[&str] = &["ignore", "disregard", "forget", "override"];

type Pattern = &'static [&'static [&'static str]];

const OVERRIDE_PATTERNS: &[Pattern] = &[
    // "ignore all previous", "forget all of the prior"
    &[
        OVERRIDE_VERB,
        &["all", "all the", "all of the", "all your", "all of your"],
        TEMPORAL,
    ],
    // "disregard the previous instructions"
    &[
        OVERRIDE_VERB,
        DETERMINER,
        TEMPORAL,
        &[
            "instruction",
            "instructions",
            "direction",
            "directions",
            "rules",
            "prompt",
            "prompts",
            "guidelines",
            "context",
            "messages",
        ],
    ],
];

const CONCEALMENT_PATTERNS: &[Pattern] = &[
    // "do not tell the user", "never mention"
    &[NEGATION, &["", "ever"], &["tell", "mention"]],
    // "do not notify the user": these verbs alone are often about other people
    &[
        NEGATION,
        &["", "ever"],
        &["inform", "notify", "alert", "warn"],
        DETERMINER,
        USER,
    ],
    // "do not ask the user for confirmation", but not "do not ask the user to pick one"
    &[
        NEGATION,
        &["", "ever"],
        &["ask"],
        DETERMINER,
        USER,
        &[
            "for", "about", "before", "whether", "if", "first", "again", "anything", "just", "and",
        ],
    ],
    &[&["without"], &["telling", "mentioning"]],
    &[
        &["without"],
        &["informing", "notifying", "alerting", "warning", "asking"],
        DETERMINER,
        USER,
    ],
    // "hide this from", "hide from the user"
    &[
        &["hide"],
        &["this", "it", "that", "these", "them", "everything"],
        &["from"],
    ],
    &[&["hide"], &["from"], DETERMINER, USER],
    &[
        &["keep"],
        &["this", "it", "that", "these"],
        &["secret", "hidden", "between us"],
    ],
    // "the user must not know", "the user doesn't need to be told"
    &[
        USER,
        MODAL_NEGATION,
        &["", "ever", "be", "ever be"],
        &[
            "know", "notice", "learn", "realize", "realise", "suspect", "aware", "told",
            "informed", "notified",
        ],
    ],
    // "without the user knowing", "without user consent"
    &[
        &["without"],
        DETERMINER,
        USER,
        &["knowing", "knowledge", "noticing", "awareness", "consent"],
    ],
];

/// Words that make a sentence an instruction rather than a description.
const IMPERATIVE: &[&str] = &["must", "mustn't", "always", "never", "before", "instead"];
const USAGE: &[&str] = &[
    "call", "calls", "calling", "called", "use", "uses", "using", "used", "invoke", "invokes",
    "invoking", "invoked", "run", "runs", "running", "prefer",
];
const OTHER_TOOLS: Pattern = &[
    &["other", "another", "all", "every", "any", "each"],
    &["tool", "tools"],
];

/// Longest backticked text taken as a tool name; longer spans are prose or code.
const MAX_IDENTIFIER_LEN: usize = 64;

/// One piece of text prepared for phrase checks: lowercased, invisible characters dropped
/// (so they cannot split a phrase), typographic apostrophes made `'`, whitespace runs
/// collapsed to one space; and its words, as byte spans.
pub(super) struct Normalized {
    text: String,
    words: Vec<(usize, usize)>,
}

impl Normalized {
    pub(super) fn new(raw: &str) -> Normalized {
        let mut text = String::with_capacity(raw.len());
        let mut in_space = false;
        // Combining marks left after NFKC (which joins the accents of real words to their
        // letters) are stacked on letters to break words up (`i̴g̴n̴o̴r̴e̴`): dropped.
        for c in raw
            .chars()
            .filter(|&c| !is_invisible(c) && !is_stacked_mark(c))
        {
            if c.is_whitespace() {
                in_space = true;
                continue;
            }
            if in_space && !text.is_empty() {
                text.push(' ');
            }
            in_space = false;
            match c {
                '\u{2018}' | '\u{2019}' => text.push('\''),
                c if c.is_ascii() => text.push(c.to_ascii_lowercase()),
                c => text.extend(c.to_lowercase()),
            }
        }
        let words = word_spans(&text);
        Normalized { text, words }
    }

    fn word_list(&self) -> Vec<&str> {
        self.words.iter().map(|&(s, e)| &self.text[s..e]).collect()
    }

    /// The normalized text: lowercase, whitespace folded, invisible characters dropped.
    pub(super) fn text(&self) -> &str {
        &self.text
    }

    pub(super) fn excerpt(&self, start: usize) -> String {
        format!("\"{}\"", escaped(&self.text[start..], MAX_EXCERPT_CHARS))
    }

    /// Byte offset where word `index` starts.
    fn word_start(&self, index: usize) -> usize {
        self.words[index].0
    }
}

/// A mark of Unicode's general combining blocks (diacritical marks, their extension and
/// supplement, marks for symbols, half marks). Scripts' own vowel signs and points are in
/// their scripts' blocks and stay.
pub(super) fn is_stacked_mark(c: char) -> bool {
    matches!(
        u32::from(c),
        0x0300..=0x036F | 0x1AB0..=0x1AFF | 0x1DC0..=0x1DFF | 0x20D0..=0x20FF | 0xFE20..=0xFE2F
    )
}

/// Words: runs of letters, digits, `_` and `'`, with quotes trimmed off their ends.
fn word_spans(text: &str) -> Vec<(usize, usize)> {
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '\'';
    let mut spans = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (start, is_word(c)) {
            (None, true) => start = Some(i),
            (Some(s), false) => {
                let word = &text[s..i];
                let trimmed = word.trim_matches('\'');
                if !trimmed.is_empty() {
                    let lead = word.len() - word.trim_start_matches('\'').len();
                    spans.push((s + lead, s + lead + trimmed.len()));
                }
                start = None;
            }
            _ => {}
        }
    }
    spans
}

/// Where `pattern` matches `words` starting at `at`: the index after the match.
fn match_at(words: &[&str], at: usize, pattern: &[&[&str]]) -> Option<usize> {
    let Some((slot, rest)) = pattern.split_first() else {
        return Some(at);
    };
    slot.iter().find_map(|alternative| {
        let mut i = at;
        for word in alternative.split_whitespace() {
            if words.get(i) != Some(&word) {
                return None;
            }
            i += 1;
        }
        match_at(words, i, rest)
    })
}

/// Word patterns with the words any of them can start with, so most positions are passed
/// over with one lookup.
struct Patterns {
    all: &'static [Pattern],
    /// Sorted, without repeats.
    first: LazyLock<Vec<&'static str>>,
}

macro_rules! patterns {
    ($all:expr) => {
        Patterns {
            all: $all,
            first: LazyLock::new(|| {
                let mut first = Vec::new();
                for pattern in $all {
                    first_words(pattern, &mut first);
                }
                first.sort_unstable();
                first.dedup();
                first
            }),
        }
    };
}

static OVERRIDE: Patterns = patterns!(OVERRIDE_PATTERNS);
static CONCEALMENT: Patterns = patterns!(CONCEALMENT_PATTERNS);
static ANY_OTHER_TOOL: Patterns = patterns!(&[OTHER_TOOLS]);

/// The words a match of `pattern` can start with (an optional slot lets the next one start).
fn first_words(pattern: &[&[&'static str]], into: &mut Vec<&'static str>) {
    let Some((slot, rest)) = pattern.split_first() else {
        return;
    };
    for alternative in *slot {
        match alternative.split_whitespace().next() {
            Some(word) => into.push(word),
            None => first_words(rest, into),
        }
    }
}

/// The first word at which any of `patterns` matches.
fn find_patterns(words: &[&str], patterns: &Patterns) -> Option<usize> {
    (0..words.len())
        .filter(|&at| patterns.first.binary_search(&words[at]).is_ok())
        .find(|&at| {
            patterns
                .all
                .iter()
                .any(|p| match_at(words, at, p).is_some())
        })
}

/// Privileged-instruction markup (`<IMPORTANT>`, `</system>`, `<|im_start|>`, `[INST]`) or
/// an override phrase ("ignore all previous").
pub(super) fn hidden_instructions(n: &Normalized) -> Option<String> {
    let markup = markup_start(&n.text);
    // Lean's `[inst]` binders (instance-implicit arguments) are no chat template.
    let template = TEMPLATE
        .find_iter(&n.text)
        .find(|m| !(&n.text[m.range()] == "[inst]" && n.text[m.end()..].starts_with(" binder")))
        .map(|m| m.start());
    let phrase = find_patterns(&n.word_list(), &OVERRIDE).map(|i| n.word_start(i));
    let start = [markup, template, phrase].into_iter().flatten().min()?;
    Some(format!("matched {}", n.excerpt(start)))
}

/// Start of the first `<tag>`, `</tag>` or `<|token|>` (see [`MARKUP_TAGS`]). Each `<`
/// looks only at the letters that follow it, so the scan stays linear.
fn markup_start(text: &str) -> Option<usize> {
    text.match_indices('<').map(|(i, _)| i).find(|&i| {
        let rest = &text[i + 1..];
        if let Some(inner) = rest.strip_prefix('|') {
            let len = inner
                .bytes()
                .take(MAX_SPECIAL_TOKEN_NAME + 1)
                .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
                .count();
            return (1..=MAX_SPECIAL_TOKEN_NAME).contains(&len) && inner[len..].starts_with("|>");
        }
        let rest = rest.strip_prefix('/').unwrap_or(rest);
        let rest = rest.strip_prefix(' ').unwrap_or(rest);
        let len = rest.bytes().take_while(u8::is_ascii_lowercase).count();
        // `-` and `_` admit compound tags such as `<system-reminder>`.
        let tag = &rest[..len];
        MARKUP_TAGS.contains(&tag)
            && match rest[len..].bytes().next() {
                Some(b'>' | b' ' | b'-') => true,
                // `<important_notes>` is an honest heading; `<system_prompt>` is not.
                Some(b'_') => tag != "important",
                _ => false,
            }
    })
}

/// A path or phrase naming credentials (SSH keys, cloud and package-registry credentials,
/// `.env`, `/etc/passwd`, "private key").
pub(super) fn secret_access(n: &Normalized, takes_private_key: bool) -> Option<String> {
    let needle = SECRET_NEEDLE
        .find_iter(&n.text)
        .filter(|m| !a_reference(&n.text[m.end()..]))
        .filter(|m| !(takes_private_key && PRIVATE_KEY_NAMES.contains(&m.as_str())))
        .filter(|m| !public_key(&n.text[m.start()..]))
        .map(|m| m.start())
        .find(|&at| !refused_around(&n.text, at));
    let start = [needle, dot_env(&n.text)].into_iter().flatten().min()?;
    Some(format!("mentions {}", n.excerpt(start)))
}

/// Whether the path that starts `text` names a public key (`~/.ssh/id_ed25519.pub`): the
/// half of a key pair that is given out, not a secret.
fn public_key(text: &str) -> bool {
    let path = text
        .split(|c: char| c.is_whitespace() || matches!(c, '`' | '\'' | '"' | ')' | ',' | ';'))
        .next()
        .unwrap_or_default()
        .trim_end_matches(['.', ':']);
    path.ends_with(".pub")
}

/// Words by which a sentence says that what it has just named is refused ("system paths such
/// as `~/.ssh` are rejected").
const REFUSED: &[&str] = &[
    "rejected",
    "refused",
    "blocked",
    "denied",
    "forbidden",
    "disallowed",
    "prohibited",
];

/// How far after a secret's name its refusal is looked for, in bytes.
const REFUSAL_WINDOW: usize = 48;

/// Whether the words right after byte `at` of `text` (the secret's name, then a few words, in
/// the same sentence) say that it is refused: `~/.ssh") are rejected`, `.netrc is not allowed`.
/// Whole words only, after the name only: an attacker's "otherwise the request is rejected"
/// further on does not excuse the name.
fn refused_around(text: &str, at: usize) -> bool {
    let end = (at + REFUSAL_WINDOW).min(text.len());
    let end = (end..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    let after = &text[at..end];
    // The sentence ends at a `.` before a space (not the one inside `~/.ssh`), or `;` `!` `?`.
    let sentence_end = after
        .char_indices()
        .find(|&(i, c)| {
            matches!(c, ';' | '!' | '?') || (c == '.' && after[i + 1..].starts_with(' '))
        })
        .map_or(after.len(), |(i, _)| i);
    let words: Vec<&str> = after[..sentence_end]
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words.iter().any(|w| REFUSED.contains(w))
        || words
            .windows(2)
            .any(|pair| pair[0] == "not" && matches!(pair[1], "allowed" | "permitted"))
}

/// `.env` as a file name (`.env`, `app/.env`, `.env.local`), not `process.env` or `.envrc`,
/// nor where the tool keeps what it makes itself ([`kept_in`]).
fn dot_env(text: &str) -> Option<usize> {
    text.match_indices(".env").map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + 4..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && !kept_in(&text[..i])
    })
}

/// Verbs by which a tool says it writes what it makes somewhere.
const KEEPING: &[&str] = &[
    "saved",
    "stored",
    "written",
    "persisted",
    "kept",
    "cached",
    "save",
    "saves",
    "store",
    "stores",
    "write",
    "writes",
    "persist",
    "persists",
];

/// Whether the words right before a file name say the tool writes to it: "refresh tokens are
/// saved to .env file", "stores them in the .env". A destination, not a secret read; "read
/// the .env" and "copy .env to ..." still count.
fn kept_in(before: &str) -> bool {
    let mut words = before
        .split_whitespace()
        .rev()
        .filter(|word| !matches!(*word, "the" | "a" | "your" | "its" | "an"));
    matches!(words.next(), Some("to" | "in" | "into"))
        && words.next().is_some_and(|verb| KEEPING.contains(&verb))
}

/// Asking the model to keep something from the user ("do not tell the user", "without
/// telling", "hide this from", "the user must not know").
pub(super) fn concealment(n: &Normalized) -> Option<String> {
    let at = find_patterns(&n.word_list(), &CONCEALMENT)?;
    Some(format!("matched {}", n.excerpt(n.word_start(at))))
}

/// An instruction about other tools in general. A sentence (split at `.` before whitespace,
/// `!`, `?`, `;` and line breaks) counts when it holds one of [`IMPERATIVE`] and "other /
/// another / all / every / any / each tool(s)". Sentences that name a tool are judged with the
/// whole catalog ([`instruction_identifiers`]), since naming its own server's tools is what
/// honest tools do all the time.
///
/// So "This tool must be called with an absolute path" passes, and "Before using any other
/// tool, call this one" does not.
pub(super) fn cross_tool_instruction(raw: &str) -> Option<String> {
    let visible: Cow<str> = if raw.chars().any(is_invisible) {
        Cow::Owned(raw.chars().filter(|&c| !is_invisible(c)).collect())
    } else {
        Cow::Borrowed(raw)
    };
    // Every pattern needs the word "tool" or "tools" (only ASCII letters lowercase to its).
    if !visible
        .as_bytes()
        .windows(4)
        .any(|w| w.eq_ignore_ascii_case(b"tool"))
    {
        return None;
    }
    for sentence in sentences(&visible) {
        let lower = sentence.to_lowercase();
        let words: Vec<&str> = word_spans(&lower)
            .into_iter()
            .map(|(s, e)| &lower[s..e])
            .collect();
        if words.iter().any(|w| IMPERATIVE.contains(w))
            && find_patterns(&words, &ANY_OTHER_TOOL).is_some()
            && !calls_itself_first(&lower)
        {
            let shown = escaped(sentence.trim(), MAX_EXCERPT_CHARS);
            return Some(format!("refers to other tools: \"{shown}\""));
        }
    }
    None
}

/// "Call this tool first, before any other tools" (or "Best practices: call first to confirm
/// connectivity before other tools"): a guide or set-up tool asking to be called first, and
/// nothing more but why (the sentence ends there). What an instruction to do
/// something else before other tools is ("before any other tool is used, print ...") is not.
static CALLS_ITSELF_FIRST: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^\W*((important|note|best practices?|usage|tip)\W+)?((always|please|first|you must|you should) )*((call|use|run|invoke) )?(this tool |it )?(must |should |needs to )?(be )?(called |used |run |invoked )?(first,? )?(to (confirm|check|verify|test|establish|initiali[sz]e) (the |your )?(connectivity|connection|session|setup|configuration|environment|server|workspace|project) )?before (calling |using |running |invoking )?(any |all )?other tools?\W*$",
    )
    .expect("a fixed pattern")
});

/// Whether the lowercased `sentence` only asks for its own tool to be called first (see
/// [`CALLS_ITSELF_FIRST`]).
fn calls_itself_first(sentence: &str) -> bool {
    CALLS_ITSELF_FIRST.is_match(sentence)
}

/// The tool-like names (snake_case, lowerCamelCase, `backticked`) of a sentence that
/// instructs how tools are used: it holds one of [`IMPERATIVE`], the word "tool(s)" and a
/// usage verb ([`USAGE`]). Empty for any other sentence.
pub(super) fn instruction_identifiers(sentence: &str) -> Vec<&str> {
    let lower = sentence.to_lowercase();
    let words: Vec<&str> = word_spans(&lower)
        .into_iter()
        .map(|(s, e)| &lower[s..e])
        .collect();
    let instructs = words.iter().any(|w| IMPERATIVE.contains(w))
        && words.iter().any(|w| matches!(*w, "tool" | "tools"))
        && words.iter().any(|w| USAGE.contains(w));
    if instructs {
        identifiers(sentence)
    } else {
        Vec::new()
    }
}

pub(super) fn sentences(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = match c {
            '!' | '?' | ';' | '\n' | '\r' => true,
            '.' => chars.peek().is_none_or(|&(_, next)| next.is_whitespace()),
            _ => false,
        };
        if ends {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&text[start..]);
    out
}

/// Tool-like names in `sentence`: `backticked` names, snake_case and lowerCamelCase words.
pub(super) fn identifiers(sentence: &str) -> Vec<&str> {
    let pieces: Vec<&str> = sentence.split('`').collect();
    // Odd pieces lie between backticks; the last one only if a backtick closes it.
    let mut out: Vec<&str> = pieces[..pieces.len().saturating_sub(1)]
        .iter()
        .skip(1)
        .step_by(2)
        .map(|s| s.trim())
        .filter(|s| {
            let mut chars = s.chars();
            s.len() <= MAX_IDENTIFIER_LEN
                && chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        })
        .collect();
    // Where a piece of `sentence` starts in it (every piece below is a slice of it).
    let offset = |piece: &str| piece.as_ptr() as usize - sentence.as_ptr() as usize;
    // The paths among its whitespace-separated runs, as byte ranges in order: found once, not
    // once per word (a long run without spaces would make that quadratic).
    let paths: Vec<(usize, usize)> = if sentence.contains('/') {
        sentence
            .split_whitespace()
            .filter(|chunk| a_path(chunk))
            .map(|chunk| (offset(chunk), offset(chunk) + chunk.len()))
            .collect()
    } else {
        Vec::new()
    };
    let words = sentence
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| {
            let snake = w.trim_matches('_').contains('_');
            let camel = w.starts_with(|c: char| c.is_ascii_lowercase())
                && w.contains(|c: char| c.is_ascii_uppercase());
            snake || camel
        })
        // A folder of a path (`testsprite_tests/tmp/config.json`) names no tool; two names
        // written `send_email/gmail_send` still do.
        .filter(|w| {
            let start = offset(w);
            let after = paths.partition_point(|&(from, _)| from <= start);
            after
                .checked_sub(1)
                .is_none_or(|path| start >= paths[path].1)
        });
    out.extend(words);
    out
}

/// Whether `chunk` (a run without whitespace) is a file path: it starts at a root (`/`,
/// `./`, `~/`), or holds two `/`, or a `/` and a file's extension after it.
fn a_path(chunk: &str) -> bool {
    let chunk = chunk.trim_matches(|c: char| "`'\"()[],;:".contains(c));
    let Some(last_slash) = chunk.rfind('/') else {
        return false;
    };
    chunk.starts_with(['/', '~'])
        || chunk.starts_with("./")
        || chunk.matches('/').count() >= 2
        || chunk[last_slash..].contains('.')
}

/// An identifier read as words: `_`, `-` and `.` become spaces and camelCase splits
/// (`readSshKey` reads "read ssh key").
pub(super) fn split_identifier(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 8);
    let mut previous_lower = false;
    // A token holding an address (`forward_it_to_desk@mail-relay.org_now`) keeps the
    // address's dots and hyphens: only `_` parts its words.
    let address = name.contains('@');
    for c in name.chars() {
        if c == '_' || (!address && matches!(c, '-' | '.')) {
            out.push(' ');
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower {
            out.push(' ');
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        out.push(c);
    }
    out
}
