//! Rules for header and `env` values: valid names, well-formed `${VAR}` references, and no
//! secret written literally. Messages never quote a value.

use std::collections::BTreeMap;

use http::{HeaderName, HeaderValue};

use super::{
    Env, SecretTemplate,
    validate::{Report, join},
};

/// Header names a server entry must not set: the transport owns them, and a configured one
/// would corrupt framing (`content-length`), routing (`host`) or the MCP session.
const RESERVED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "mcp-session-id",
    "mcp-protocol-version",
];

/// Header names that carry credentials (compared lowercase).
const SENSITIVE_HEADERS: &[&str] = &["authorization", "proxy-authorization", "cookie"];
const SENSITIVE_HEADER_PARTS: &[&str] = &["token", "key", "secret", "auth", "password"];
/// Environment variable name parts that mark a credential (compared uppercase).
const SENSITIVE_ENV_PARTS: &[&str] = &["KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL"];

/// Where the values are and whether unset variables deserve a warning (a disabled server
/// never connects, so its references do not matter yet).
pub(super) struct Context<'a> {
    pub env: &'a Env,
    pub enabled: bool,
}

/// Validates HTTP headers of a server written at `path`.
pub(super) fn headers(
    raw: &BTreeMap<String, String>,
    path: &str,
    cx: &Context<'_>,
    report: &mut Report,
) -> Vec<(String, SecretTemplate)> {
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for (name, value) in raw {
        let at = join(path, name);
        let lower = name.to_ascii_lowercase();
        if HeaderName::from_bytes(name.as_bytes()).is_err() {
            report.problem(&at, "is not a valid header name");
            continue;
        }
        if RESERVED_HEADERS.contains(&lower.as_str()) {
            report.problem(&at, "is set by the transport and cannot be configured");
            continue;
        }
        if seen.contains(&lower) {
            report.problem(&at, "is given twice (header names ignore case)");
            continue;
        }
        seen.push(lower.clone());
        if HeaderValue::from_str(value).is_err() {
            report.problem(&at, "holds characters not allowed in a header value");
            continue;
        }
        let sensitive = SENSITIVE_HEADERS.contains(&lower.as_str())
            || SENSITIVE_HEADER_PARTS.iter().any(|p| lower.contains(p));
        let hint = sensitive.then_some("NAME");
        if let Some(template) = template(value, hint, &at, cx, report) {
            out.push((name.clone(), template));
        }
    }
    out
}

/// Validates the environment of a stdio server written at `path`.
pub(super) fn env_vars(
    raw: &BTreeMap<String, String>,
    path: &str,
    cx: &Context<'_>,
    report: &mut Report,
) -> Vec<(String, SecretTemplate)> {
    let mut out = Vec::new();
    for (name, value) in raw {
        let at = join(path, name);
        if name.is_empty() || name.contains(['=', '\0']) {
            report.problem(&at, "is not a valid environment variable name");
            continue;
        }
        if value.contains('\0') {
            report.problem(&at, "holds a NUL character");
            continue;
        }
        let upper = name.to_ascii_uppercase();
        let sensitive = SENSITIVE_ENV_PARTS.iter().any(|p| upper.contains(p));
        let hint = sensitive.then_some(name.as_str());
        if let Some(template) = template(value, hint, &at, cx, report) {
            out.push((name.clone(), template));
        }
    }
    out
}

/// Checks one value. `secret_hint` is set when the name marks a credential: then a value
/// without any reference is an error, and the hint names the variable to suggest.
fn template(
    value: &str,
    secret_hint: Option<&str>,
    at: &str,
    cx: &Context<'_>,
    report: &mut Report,
) -> Option<SecretTemplate> {
    let template = SecretTemplate::new(value);
    if let Err(message) = template.check_syntax() {
        report.problem(at, message);
        return None;
    }
    if let Some(var) = secret_hint
        && !value.is_empty()
        && !template.has_reference()
    {
        report.problem(
            at,
            format!(
                "holds a literal value, and secrets must not be written in configuration: \
                 use \"${{{var}}}\" and set {var} in the gateway's environment"
            ),
        );
        return None;
    }
    if cx.enabled {
        for name in template.references().filter(|n| cx.env.get(n).is_none()) {
            report.warn(
                at,
                format!(
                    "environment variable `{name}` is not set; this server cannot connect \
                     until it is"
                ),
            );
        }
    }
    Some(template)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn run_headers(pairs: &[(&str, &str)], env: &Env) -> (usize, Report) {
        let mut report = Report::default();
        let cx = Context { env, enabled: true };
        let out = headers(&map(pairs), "servers.s.headers", &cx, &mut report);
        (out.len(), report)
    }

    #[test]
    fn literal_secrets_are_rejected_by_header_name_without_echoing() {
        let env = Env::from_pairs([("T", "x")]);
        for name in [
            "Authorization",
            "proxy-authorization",
            "Cookie",
            "X-Api-Key",
            "X-Auth-Token",
            "X-Client-Secret",
            "X-Password",
        ] {
            let (kept, report) = run_headers(&[(name, "hunter2-literal")], &env);
            assert_eq!(kept, 0, "{name}");
            let err = report.finish().expect_err(name);
            let text = err.to_string();
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("use \"${NAME}\" and set NAME"), "{text}");
            assert_eq!(err.problems[0].path, format!("servers.s.headers.{name}"));
        }
        let (kept, report) = run_headers(&[("Authorization", "Bearer ${T}")], &env);
        assert_eq!(kept, 1);
        assert_eq!(report.finish(), Ok(vec![]));
        let (kept, _) = run_headers(&[("X-Request-Source", "mcpgate")], &env);
        assert_eq!(kept, 1, "a non-secret header may be literal");
    }

    #[test]
    fn header_names_values_and_references_are_checked() {
        let env = Env::default();
        let (kept, report) = run_headers(
            &[
                ("bad name", "v"),
                ("Host", "evil.example"),
                ("X-A", "line\nbreak"),
                ("X-B", "${A-B}"),
                ("Authorization", "Bearer ${MISSING}"),
            ],
            &env,
        );
        assert_eq!(kept, 1, "only the Authorization header survives");
        assert_eq!(report.warnings().len(), 1);
        assert!(report.warnings()[0].contains("`MISSING` is not set"));
        let err = report.finish().expect_err("four problems");
        let paths: Vec<&str> = err.problems.iter().map(|p| p.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "servers.s.headers.Host",
                "servers.s.headers.X-A",
                "servers.s.headers.X-B",
                "servers.s.headers.\"bad name\"",
            ]
        );
    }

    #[test]
    fn header_names_ignore_case_when_finding_duplicates() {
        let (_, report) = run_headers(&[("X-Trace", "a"), ("x-trace", "b")], &Env::default());
        let err = report.finish().expect_err("duplicate");
        assert!(err.problems[0].message.contains("twice"));
    }

    #[test]
    fn env_secrets_by_name_and_disabled_servers_do_not_warn() {
        let env = Env::default();
        let mut report = Report::default();
        let cx = Context {
            env: &env,
            enabled: false,
        };
        let raw = map(&[
            ("GITHUB_TOKEN", "ghp_literal"),
            ("aws_secret_access_key", "abc"),
            ("DB_PASSWORD", "pw"),
            ("GOOGLE_APPLICATION_CREDENTIALS", "/x.json"),
            ("OPENAI_API_KEY", "${OPENAI_API_KEY}"),
            ("TZ", "UTC"),
            ("EMPTY_TOKEN", ""),
            ("A=B", "x"),
        ]);
        let out = env_vars(&raw, "servers.s.env", &cx, &mut report);
        let kept: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(kept, ["EMPTY_TOKEN", "OPENAI_API_KEY", "TZ"]);
        assert!(
            report.warnings().is_empty(),
            "disabled: no unset-variable warnings"
        );
        let err = report.finish().expect_err("five problems");
        assert_eq!(err.problems.len(), 5);
        let text = err.to_string();
        for secret in ["ghp_literal", "abc", "pw", "/x.json"] {
            assert!(!text.contains(secret), "{secret} leaked: {text}");
        }
        assert!(
            text.contains("use \"${GITHUB_TOKEN}\" and set GITHUB_TOKEN"),
            "{text}"
        );
    }
}
