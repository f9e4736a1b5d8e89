//! Secret values: `${VAR}` references resolved from the gateway's environment at connect
//! time, and a wrapper whose `Debug`/`Display` never show the value.

use std::fmt;

use super::Env;

/// A configured header or environment value: literal text with `${VAR}` references.
/// The references are resolved only when a connection is made, so the file holds names,
/// never secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretTemplate(String);

impl SecretTemplate {
    pub fn new(raw: impl Into<String>) -> SecretTemplate {
        SecretTemplate(raw.into())
    }

    /// The template text as written (references unresolved; safe to show).
    pub fn as_written(&self) -> &str {
        &self.0
    }

    /// Whether the template is exactly one well-formed `${VAR}` reference and nothing else:
    /// how a secret is written (the file names the variable, the environment holds the value).
    pub fn is_single_reference(&self) -> bool {
        if self.check_syntax().is_err() {
            return false;
        }
        let mut references = self.references();
        match (references.next(), references.next()) {
            (Some(name), None) => self.0 == format!("${{{name}}}"),
            _ => false,
        }
    }

    /// Whether the template holds at least one `${VAR}` reference.
    pub fn has_reference(&self) -> bool {
        self.references().next().is_some()
    }

    /// The variable names referenced, in order; malformed references are not listed here but
    /// make [`SecretTemplate::resolve`] fail.
    pub fn references(&self) -> impl Iterator<Item = &str> {
        let mut rest = self.0.as_str();
        std::iter::from_fn(move || {
            let start = rest.find("${")?;
            let after = &rest[start + 2..];
            let end = after.find('}')?;
            rest = &after[end + 1..];
            Some(&after[..end])
        })
    }

    /// Substitutes every `${VAR}` from `env`.
    pub fn resolve(&self, env: &Env) -> Result<Secret, String> {
        let mut out = String::with_capacity(self.0.len());
        for part in self.parts() {
            match part? {
                Part::Text(text) => out.push_str(text),
                Part::Var(name) => out.push_str(
                    env.get(name)
                        .ok_or_else(|| format!("environment variable `{name}` is not set"))?,
                ),
            }
        }
        Ok(Secret(out))
    }

    /// Checks that every `${...}` reference is well formed, without resolving anything.
    /// The message never quotes the template, which may hold a secret written by mistake.
    pub fn check_syntax(&self) -> Result<(), String> {
        for part in self.parts() {
            if let Err(message) = part {
                return Err(if self.0.contains("${env:") {
                    format!("{message}; write `${{NAME}}`, not `${{env:NAME}}`")
                } else {
                    message
                });
            }
        }
        Ok(())
    }

    /// The template split into literal text and variable names; a malformed reference ends
    /// it with an error that does not quote the template.
    fn parts(&self) -> impl Iterator<Item = Result<Part<'_>, String>> {
        let mut rest = Some(self.0.as_str());
        std::iter::from_fn(move || {
            let current = rest.take()?;
            if current.is_empty() {
                return None;
            }
            let Some(start) = current.find("${") else {
                return Some(Ok(Part::Text(current)));
            };
            if start > 0 {
                rest = Some(&current[start..]);
                return Some(Ok(Part::Text(&current[..start])));
            }
            let after = &current[2..];
            let Some(end) = after.find('}') else {
                return Some(Err("unterminated `${` reference".to_owned()));
            };
            let name = &after[..end];
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Some(Err(
                    "a `${...}` reference holds an invalid variable name (ASCII \
                                 letters, digits and `_` only)"
                        .to_owned(),
                ));
            }
            rest = Some(&after[end + 1..]);
            Some(Ok(Part::Var(name)))
        })
    }
}

enum Part<'a> {
    Text(&'a str),
    Var(&'a str),
}

impl fmt::Debug for SecretTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Templates hold names, not values, but a literal may still be sensitive: show the
        // references only.
        let refs: Vec<&str> = self.references().collect();
        write!(f, "SecretTemplate(refs={refs:?})")
    }
}

/// A resolved secret. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_references_and_redacts() {
        let env = Env::from_pairs([("TOKEN", "s3cr3t")]);
        let t = SecretTemplate::new("Bearer ${TOKEN}");
        let s = t.resolve(&env).expect("resolves");
        assert_eq!(s.expose(), "Bearer s3cr3t");
        assert!(!format!("{s:?}").contains("s3cr3t"));
        assert!(!format!("{t:?}").contains("Bearer"));
        assert_eq!(t.references().collect::<Vec<_>>(), ["TOKEN"]);
    }

    #[test]
    fn missing_and_malformed_references_fail() {
        let env = Env::from_pairs::<_, &str, &str>([]);
        assert!(SecretTemplate::new("${NOPE}").resolve(&env).is_err());
        assert!(SecretTemplate::new("${A-B}").resolve(&env).is_err());
        assert!(SecretTemplate::new("x ${OPEN").resolve(&env).is_err());
        assert_eq!(
            SecretTemplate::new("plain")
                .resolve(&env)
                .expect("ok")
                .expose(),
            "plain"
        );
    }

    #[test]
    fn check_syntax_finds_malformed_references_without_quoting_them() {
        for good in [
            "",
            "plain",
            "${A}",
            "Bearer ${TOKEN_1} and ${B}",
            "$ {x} $x {y}",
        ] {
            assert_eq!(SecretTemplate::new(good).check_syntax(), Ok(()), "{good}");
        }
        for bad in [
            "${A-B}",
            "${}",
            "x ${OPEN",
            "${ok} ${bad name}",
            "${env:HOME}",
        ] {
            let err = SecretTemplate::new(bad).check_syntax().expect_err(bad);
            assert!(!err.contains("A-B") && !err.contains("OPEN") && !err.contains("HOME"));
        }
        let err = SecretTemplate::new("${env:TOKEN}")
            .check_syntax()
            .expect_err("vscode");
        assert!(err.contains("not `${env:NAME}`"), "{err}");
    }
}
