//! Rules for `[server.auth]` and its environment (`MCPGATE_JWT_*`): the mode, pinned JWT
//! algorithms with their key material, issuer and audience, claim names and leeway.

use std::{
    ops::RangeInclusive,
    path::{Path, PathBuf},
    time::Duration,
};

use url::Url;

use super::{Report, duration, resource_rules};
use crate::config::{
    AuthConfig, Env, JwtAlgorithm, JwtConfig, SecretTemplate,
    raw::{RawAuth, RawAuthMode},
};

/// When set and no `mode` is written, selects JWT mode with HS256 keyed by this variable.
const JWT_SECRET: &str = "MCPGATE_JWT_SECRET";
/// Wins over `issuer`.
const JWT_ISSUER: &str = "MCPGATE_JWT_ISSUER";
/// Wins over `audience`.
const JWT_AUDIENCE: &str = "MCPGATE_JWT_AUDIENCE";

/// RFC 7518 §3.2: an HS256 key must be at least as long as the hash, 256 bits; a shorter one
/// can be brute-forced offline from any single token.
const MIN_SECRET_BYTES: usize = 32;
/// Clock skew on `exp` and `nbf`: well-run clocks differ by far less than a second; 30 s
/// absorbs a badly set one while keeping an expired token's afterlife short.
const LEEWAY_RANGE: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(30);
/// The whole range by default: refusing valid tokens from a drifted client is an outage,
/// while 30 s more life for an expired token is little.
const DEFAULT_LEEWAY: Duration = Duration::from_secs(30);
/// What `MCPGATE_JWT_SECRET` alone sets up: a shared key, the simplest deployment.
const DEFAULT_ALGORITHMS: &[JwtAlgorithm] = &[JwtAlgorithm::Hs256];
/// `sub` is RFC 7519's subject; `tenant` and `roles` are the names most issuers use.
const DEFAULT_TENANT_CLAIM: &str = "tenant";
/// The tenant of a token that names none, in single-tenant mode.
const DEFAULT_TENANT: &str = "default";
const DEFAULT_USER_CLAIM: &str = "sub";
const DEFAULT_ROLES_CLAIM: &str = "roles";

const FIELD: &str = "server.auth";

/// The validated auth settings. With a problem in JWT mode, the result is still JWT (with
/// empty fields where broken), so that the listen rule does not blame a mode never chosen.
pub(super) fn validate(
    raw: Option<&RawAuth>,
    (production, single_tenant): (bool, bool),
    (env, public_url): (&Env, Option<&Url>),
    base: &Path,
    report: &mut Report,
) -> AuthConfig {
    let empty = RawAuth::default();
    let raw = raw.unwrap_or(&empty);
    let env_secret = env.setting(JWT_SECRET).is_some();
    let mode = match raw.mode {
        Some(mode) => {
            if env_secret && mode != RawAuthMode::Jwt {
                report.warn(
                    JWT_SECRET,
                    format!("is ignored: {FIELD}.mode selects {}", mode_name(mode)),
                );
            }
            mode
        }
        None if env_secret => RawAuthMode::Jwt,
        None => RawAuthMode::Dev,
    };
    match mode {
        RawAuthMode::Dev => {
            refuse_jwt_fields(raw, mode, report);
            AuthConfig::Dev
        }
        RawAuthMode::None => {
            refuse_jwt_fields(raw, mode, report);
            AuthConfig::None
        }
        RawAuthMode::Jwt => {
            let selected_by_env = raw.mode.is_none();
            AuthConfig::Jwt(Box::new(jwt(
                raw,
                selected_by_env,
                (production, single_tenant),
                (env, public_url),
                base,
                report,
            )))
        }
    }
}

fn mode_name(mode: RawAuthMode) -> &'static str {
    match mode {
        RawAuthMode::Dev => "\"dev\"",
        RawAuthMode::None => "\"none\"",
        RawAuthMode::Jwt => "\"jwt\"",
    }
}

/// JWT fields outside JWT mode: reported, since a JWT setup left in another mode would let
/// callers in without the checks its author wrote.
fn refuse_jwt_fields(raw: &RawAuth, mode: RawAuthMode, report: &mut Report) {
    let written = [
        ("algorithms", raw.algorithms.is_some()),
        ("secret", raw.secret.is_some()),
        ("public_keys", raw.public_keys.is_some()),
        ("jwks_url", raw.jwks_url.is_some()),
        ("issuer", raw.issuer.is_some()),
        ("audience", raw.audience.is_some()),
        ("tenant_claim", raw.tenant_claim.is_some()),
        ("default_tenant", raw.default_tenant.is_some()),
        ("user_claim", raw.user_claim.is_some()),
        ("roles_claim", raw.roles_claim.is_some()),
        ("leeway", raw.leeway.is_some()),
        ("authorization_servers", raw.authorization_servers.is_some()),
        ("scopes", raw.scopes.is_some()),
    ];
    for (field, _) in written.iter().filter(|(_, present)| *present) {
        report.problem(
            format!("{FIELD}.{field}"),
            format!(
                "is only used with mode = \"jwt\", and the mode is {}",
                mode_name(mode)
            ),
        );
    }
}

fn jwt(
    raw: &RawAuth,
    selected_by_env: bool,
    (production, single_tenant): (bool, bool),
    (env, public_url): (&Env, Option<&Url>),
    base: &Path,
    report: &mut Report,
) -> JwtConfig {
    let before = report.problem_count();
    let algorithms = match &raw.algorithms {
        Some(names) => algorithms(names, report),
        None => DEFAULT_ALGORITHMS.to_vec(),
    };
    // Which key material belongs is judged only on a valid list, so that one bad name is
    // not reported again as misplaced keys.
    let pinned = report.problem_count() == before;
    let hmac = algorithms.contains(&JwtAlgorithm::Hs256);
    let public = algorithms
        .iter()
        .any(|a| matches!(a, JwtAlgorithm::Rs256 | JwtAlgorithm::Es256));

    let secret = hmac_secret(
        raw,
        selected_by_env,
        (hmac, pinned),
        production,
        env,
        report,
    );
    let (public_keys, jwks_url) =
        public_key_sources(raw, (public, pinned), (base, production), report);
    let issuer = required(&raw.issuer, "issuer", JWT_ISSUER, env, report);
    let protected =
        resource_rules::protected_resource(raw, public_url, &issuer, production, report);
    // With a protected resource, its identifier is the audience unless another is written.
    let audience = match (&protected, env.setting(JWT_AUDIENCE), &raw.audience) {
        (Some(protected), None, None) => protected.resource.to_string(),
        _ => required(&raw.audience, "audience", JWT_AUDIENCE, env, report),
    };

    JwtConfig {
        algorithms,
        secret,
        public_keys,
        jwks_url,
        issuer,
        audience,
        tenant_claim: claim(
            &raw.tenant_claim,
            "tenant_claim",
            DEFAULT_TENANT_CLAIM,
            report,
        ),
        default_tenant: default_tenant(raw, single_tenant, report),
        user_claim: claim(&raw.user_claim, "user_claim", DEFAULT_USER_CLAIM, report),
        roles_claim: claim(&raw.roles_claim, "roles_claim", DEFAULT_ROLES_CLAIM, report),
        leeway: raw
            .leeway
            .as_ref()
            .and_then(|r| duration(r, &LEEWAY_RANGE, &format!("{FIELD}.leeway"), report))
            .unwrap_or(DEFAULT_LEEWAY),
        protected,
    }
}

/// The tenant of tokens without the tenant claim: `default_tenant` (or [`DEFAULT_TENANT`])
/// without `[access]`; none with it, where a token must say which tenant it is.
fn default_tenant(raw: &RawAuth, single_tenant: bool, report: &mut Report) -> Option<String> {
    let at = format!("{FIELD}.default_tenant");
    if !single_tenant {
        if raw.default_tenant.is_some() {
            report.problem(
                at,
                "applies only without [access]: with tenants configured, a token must name its \
                 tenant",
            );
        }
        return None;
    }
    match &raw.default_tenant {
        None => Some(DEFAULT_TENANT.to_owned()),
        // Bounded like a tenant claim's value, since it stands in for one.
        Some(name) if name.chars().count() > 128 => {
            report.problem(at, "is longer than 128 characters");
            None
        }
        Some(name) => text(name, &at, report),
    }
}

/// The HS256 key reference; `hmac`: HS256 is listed, `pinned`: the list is valid. Selected
/// by the environment, the key is `MCPGATE_JWT_SECRET`'s: the reference is kept, never the
/// value.
fn hmac_secret(
    raw: &RawAuth,
    selected_by_env: bool,
    (hmac, pinned): (bool, bool),
    production: bool,
    env: &Env,
    report: &mut Report,
) -> Option<SecretTemplate> {
    let at = format!("{FIELD}.secret");
    let (secret, at) = match &raw.secret {
        Some(text) => (secret_reference(text, &at, report), at),
        None if selected_by_env && hmac => (
            Some(SecretTemplate::new(format!("${{{JWT_SECRET}}}"))),
            JWT_SECRET.to_owned(),
        ),
        None => {
            if hmac {
                report.problem(
                    at,
                    format!(
                        "is required for HS256: write secret = \"${{{JWT_SECRET}}}\" and set \
                         {JWT_SECRET} in the gateway's environment"
                    ),
                );
            }
            return None;
        }
    };
    if !hmac {
        if pinned {
            report.problem(at, "is only used by HS256, which algorithms does not list");
        }
        return None;
    }
    if let Some(secret) = &secret {
        check_strength(secret, &at, production, env, report);
    }
    secret
}

/// PEM files (relative to `base`) and the JWKS URL; `public`: RS256 or ES256 is listed,
/// `pinned`: the list is valid.
fn public_key_sources(
    raw: &RawAuth,
    (public, pinned): (bool, bool),
    (base, production): (&Path, bool),
    report: &mut Report,
) -> (Vec<PathBuf>, Option<Url>) {
    let files: Vec<_> = raw
        .public_keys
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, text)| {
            if text.trim().is_empty() || text.contains('\0') {
                let at = format!("{FIELD}.public_keys[{i}]");
                report.problem(at, "must be a file path (non-empty, no NUL)");
                return None;
            }
            // `Path::join` keeps an absolute path as it is.
            Some(base.join(text))
        })
        .collect();
    let jwks_url = raw
        .jwks_url
        .as_deref()
        .and_then(|text| jwks(text, production, report));
    let written =
        !raw.public_keys.as_deref().unwrap_or_default().is_empty() || raw.jwks_url.is_some();
    if public && !written {
        report.problem(
            format!("{FIELD}.public_keys"),
            "RS256 and ES256 need public_keys (PEM files) or jwks_url",
        );
    }
    if pinned && !public && written {
        let field = match raw.jwks_url {
            Some(_) => "jwks_url",
            None => "public_keys",
        };
        report.problem(
            format!("{FIELD}.{field}"),
            "is only used by RS256 and ES256, which algorithms does not list",
        );
    }
    (files, jwks_url)
}

/// The pinned algorithms, by their JOSE names. Messages never quote an entry.
fn algorithms(names: &[String], report: &mut Report) -> Vec<JwtAlgorithm> {
    if names.is_empty() {
        report.problem(
            format!("{FIELD}.algorithms"),
            "must list at least one of HS256, RS256, ES256",
        );
    }
    let mut out = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let at = format!("{FIELD}.algorithms[{i}]");
        let algorithm = match name.as_str() {
            "HS256" => JwtAlgorithm::Hs256,
            "RS256" => JwtAlgorithm::Rs256,
            "ES256" => JwtAlgorithm::Es256,
            other if other.eq_ignore_ascii_case("none") => {
                report.problem(
                    at,
                    "\"none\" means unsigned tokens, which anyone can forge: it is never \
                     accepted",
                );
                continue;
            }
            _ => {
                report.problem(at, "is not supported: use HS256, RS256 or ES256");
                continue;
            }
        };
        if out.contains(&algorithm) {
            report.problem(at, "is listed twice");
        } else {
            out.push(algorithm);
        }
    }
    out
}

/// `secret` must be exactly one `${NAME}` reference: the file holds the variable's name, the
/// environment the key. Messages never quote the text, which may be a key written by mistake.
fn secret_reference(text: &str, at: &str, report: &mut Report) -> Option<SecretTemplate> {
    let template = SecretTemplate::new(text);
    if let Err(message) = template.check_syntax() {
        report.problem(at, message);
        return None;
    }
    if template.is_single_reference() {
        return Some(template);
    }
    report.problem(
        at,
        format!(
            "must be one `${{NAME}}` reference, such as \"${{{JWT_SECRET}}}\", with the key in \
             that environment variable: a secret is never written in configuration"
        ),
    );
    None
}

/// A key under [`MIN_SECRET_BYTES`] is refused in production and a warning otherwise; an
/// unset variable is a warning, since `mcpgate config check` may run where keys are not.
fn check_strength(
    secret: &SecretTemplate,
    at: &str,
    production: bool,
    env: &Env,
    report: &mut Report,
) {
    match secret.resolve(env) {
        Err(message) => report.warn(
            at,
            format!("{message}; mcpgate serve cannot verify tokens until it is"),
        ),
        Ok(key) if key.expose().len() < MIN_SECRET_BYTES => {
            let message = format!(
                "the key is shorter than {MIN_SECRET_BYTES} bytes, which HS256 needs to \
                 resist guessing (RFC 7518 §3.2)"
            );
            if production {
                report.problem(at, format!("{message}; production = true refuses it"));
            } else {
                report.warn(at, message);
            }
        }
        Ok(_) => {}
    }
}

/// Keys fetched over plain HTTP could be swapped by anyone on the path, except on loopback,
/// where there is no path (an identity provider on the same machine), outside production.
/// The URL is never quoted: it may carry credentials.
fn jwks(text: &str, production: bool, report: &mut Report) -> Option<Url> {
    let at = format!("{FIELD}.jwks_url");
    let message = match Url::parse(text) {
        Ok(url)
            if url.scheme() == "http"
                && !production
                && resource_rules::is_loopback_ip(&url)
                && url.username().is_empty()
                && url.password().is_none() =>
        {
            report.warn(
                &at,
                "uses plain http to a loopback address: accepted outside production only",
            );
            return Some(url);
        }
        Ok(url) if url.scheme() != "https" => {
            "must use https (http only to a loopback address, outside production)"
        }
        Ok(url) if !url.username().is_empty() || url.password().is_some() => {
            "must not carry a user name or password"
        }
        Ok(url) => return Some(url),
        Err(_) => "is not a URL",
    };
    report.problem(at, message);
    None
}

/// `issuer` or `audience`: the environment's value wins over the file's; one of them is
/// required, since a token for another service must not be accepted here.
fn required(
    written: &Option<String>,
    field: &str,
    variable: &str,
    env: &Env,
    report: &mut Report,
) -> String {
    let (value, at) = match (env.setting(variable), written) {
        (Some(value), _) => (value, variable.to_owned()),
        (None, Some(value)) => (value.as_str(), format!("{FIELD}.{field}")),
        (None, None) => {
            report.problem(
                format!("{FIELD}.{field}"),
                format!("is required for mode = \"jwt\": write it here or set {variable}"),
            );
            return String::new();
        }
    };
    text(value, &at, report).unwrap_or_default()
}

fn claim(written: &Option<String>, field: &str, default: &str, report: &mut Report) -> String {
    match written {
        Some(value) => text(value, &format!("{FIELD}.{field}"), report).unwrap_or_default(),
        None => default.to_owned(),
    }
}

/// Issuer, audience and claim names are compared exactly with token contents.
fn text(value: &str, at: &str, report: &mut Report) -> Option<String> {
    let message = if value.is_empty() {
        "must not be empty"
    } else if value.chars().any(char::is_control) {
        "holds a control character"
    } else if value.trim() != value {
        "starts or ends with whitespace, which tokens never carry"
    } else {
        return Some(value.to_owned());
    };
    report.problem(at, message);
    None
}

#[cfg(test)]
mod tests;
