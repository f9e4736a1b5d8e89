//! Verified JWT claims → who is calling: tenant, user, roles and session, each checked for
//! size and content before it reaches policy, audit and logs.

use serde_json::{Map, Value};

use super::{AuthCode, AuthFailure};

/// Tenant, user, role and session strings end up in audit records, log lines and store keys:
/// 128 characters is far beyond any real identifier and keeps those bounded.
pub(super) const MAX_IDENTITY_CHARS: usize = 128;

/// Which claims carry the caller's identity (from `JwtConfig`).
#[derive(Debug, Clone)]
pub(super) struct ClaimNames {
    pub tenant: String,
    /// The tenant of a token without the tenant claim (single-tenant mode), else refused.
    pub default_tenant: Option<String>,
    pub user: String,
    pub roles: String,
}

/// The caller as the token describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Identity {
    pub tenant: String,
    pub user: String,
    pub roles: Vec<String>,
    /// The token's `sid` claim, a fallback for the session when no header names one.
    pub sid: Option<String>,
    /// The scopes granted: RFC 9068's `scope` (space-separated), or `scp` (a list or a
    /// string, as some identity providers write it).
    pub scopes: Vec<String>,
}

/// Scopes read from one token: far more than any real grant, few enough to stay small.
const MAX_SCOPES: usize = 64;

/// Reads the identity from verified claims. Messages name the claim, never its value.
pub(super) fn identity(
    claims: &Map<String, Value>,
    names: &ClaimNames,
) -> Result<Identity, AuthFailure> {
    let tenant = match (claims.get(&names.tenant), &names.default_tenant) {
        (None, Some(default)) => default.clone(),
        _ => required_text(claims, &names.tenant)?,
    };
    let user = required_text(claims, &names.user)?;
    let roles = match claims.get(&names.roles) {
        None => Vec::new(),
        Some(Value::String(list)) => list
            .split_whitespace()
            .map(|role| checked(role, &names.roles))
            .collect::<Result<_, _>>()?,
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(role) => checked(role, &names.roles),
                _ => Err(claim_failure(&names.roles, "must hold strings only")),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(claim_failure(
                &names.roles,
                "must be an array of strings or a space-separated string",
            ));
        }
    };
    let sid = match claims.get("sid") {
        None => None,
        Some(Value::String(sid)) => Some(checked(sid, "sid")?),
        Some(_) => return Err(claim_failure("sid", "must be a string")),
    };
    let scopes = scopes(claims)?;
    Ok(Identity {
        tenant,
        user,
        roles,
        sid,
        scopes,
    })
}

fn scopes(claims: &Map<String, Value>) -> Result<Vec<String>, AuthFailure> {
    let (name, value) = match (claims.get("scope"), claims.get("scp")) {
        (Some(value), _) => ("scope", value),
        (None, Some(value)) => ("scp", value),
        (None, None) => return Ok(Vec::new()),
    };
    let scopes: Vec<&str> = match value {
        Value::String(list) => list.split(' ').filter(|s| !s.is_empty()).collect(),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| claim_failure(name, "must hold strings only"))
            })
            .collect::<Result<_, _>>()?,
        _ => {
            return Err(claim_failure(
                name,
                "must be a space-separated string or an array of strings",
            ));
        }
    };
    if scopes.len() > MAX_SCOPES {
        return Err(claim_failure(
            name,
            &format!("lists more than {MAX_SCOPES} scopes"),
        ));
    }
    scopes
        .into_iter()
        .map(|scope| checked(scope, name))
        .collect()
}

fn required_text(claims: &Map<String, Value>, name: &str) -> Result<String, AuthFailure> {
    match claims.get(name) {
        Some(Value::String(text)) => checked(text, name),
        Some(_) => Err(claim_failure(name, "must be a string")),
        None => Err(claim_failure(name, "is missing")),
    }
}

/// A non-empty string of at most [`MAX_IDENTITY_CHARS`] characters without control
/// characters (which would forge log lines or split store keys).
fn checked(text: &str, claim: &str) -> Result<String, AuthFailure> {
    if text.is_empty() {
        return Err(claim_failure(claim, "is empty"));
    }
    if text.chars().count() > MAX_IDENTITY_CHARS {
        return Err(claim_failure(
            claim,
            &format!("is longer than {MAX_IDENTITY_CHARS} characters"),
        ));
    }
    if text.chars().any(char::is_control) {
        return Err(claim_failure(claim, "contains control characters"));
    }
    Ok(text.to_owned())
}

fn claim_failure(claim: &str, problem: &str) -> AuthFailure {
    AuthFailure::new(
        AuthCode::InvalidClaims,
        format!("token claim `{claim}` {problem}"),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn names() -> ClaimNames {
        ClaimNames {
            tenant: "tid".to_owned(),
            default_tenant: None,
            user: "sub".to_owned(),
            roles: "roles".to_owned(),
        }
    }

    fn read(claims: Value) -> Result<Identity, AuthFailure> {
        let Value::Object(map) = claims else {
            panic!("test claims are an object")
        };
        identity(&map, &names())
    }

    #[test]
    fn a_missing_tenant_is_the_default_one_when_there_is_one() {
        let claims = json!({"sub": "ann"});
        let Value::Object(map) = claims else {
            panic!("an object")
        };
        let refused = identity(&map, &names()).expect_err("no tenant, no default");
        assert!(
            refused.to_string().contains("`tid` is missing"),
            "{refused}"
        );
        let with_default = ClaimNames {
            default_tenant: Some("default".to_owned()),
            ..names()
        };
        let who = identity(&map, &with_default).expect("the default tenant");
        assert_eq!((who.tenant.as_str(), who.user.as_str()), ("default", "ann"));
        // A tenant claim that is there but unusable is refused, not replaced.
        let claims = json!({"sub": "ann", "tid": 7});
        let Value::Object(map) = claims else {
            panic!("an object")
        };
        assert!(identity(&map, &with_default).is_err());
        let claims = json!({"sub": "ann", "tid": "acme"});
        let Value::Object(map) = claims else {
            panic!("an object")
        };
        assert_eq!(identity(&map, &with_default).expect("named").tenant, "acme");
    }

    #[test]
    fn roles_as_array_or_space_separated_string() {
        let from_array = read(json!({"tid": "acme", "sub": "ann", "roles": ["a", "b"]}));
        let from_text = read(json!({"tid": "acme", "sub": "ann", "roles": " a  b "}));
        let expected = Identity {
            tenant: "acme".to_owned(),
            user: "ann".to_owned(),
            roles: vec!["a".to_owned(), "b".to_owned()],
            sid: None,
            scopes: Vec::new(),
        };
        assert_eq!(from_array, Ok(expected.clone()));
        assert_eq!(from_text, Ok(expected));
        let none = read(json!({"tid": "acme", "sub": "ann", "sid": "s-1"})).expect("valid");
        assert!(none.roles.is_empty());
        assert_eq!(none.sid.as_deref(), Some("s-1"));
    }

    #[test]
    fn unusable_claims_are_refused_without_echoing_values() {
        let long = "x".repeat(MAX_IDENTITY_CHARS + 1);
        let cases = [
            json!({"sub": "ann"}),
            json!({"tid": 7, "sub": "ann"}),
            json!({"tid": "", "sub": "ann"}),
            json!({"tid": long, "sub": "ann"}),
            json!({"tid": "ac\nme", "sub": "ann"}),
            json!({"tid": "acme", "sub": "ann", "roles": [1]}),
            json!({"tid": "acme", "sub": "ann", "roles": {"admin": true}}),
            json!({"tid": "acme", "sub": "ann", "roles": ["ad\u{7}min"]}),
            json!({"tid": "acme", "sub": "ann", "sid": 3}),
        ];
        for claims in cases {
            let err = read(claims.clone()).expect_err(&claims.to_string());
            assert_eq!(err.code(), AuthCode::InvalidClaims, "{claims}");
            assert!(!err.message().contains("xxxx") && !err.message().contains("ac\nme"));
        }
        let at_limit = "x".repeat(MAX_IDENTITY_CHARS);
        assert!(read(json!({"tid": at_limit, "sub": "ann"})).is_ok());
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let base = || json!({"tid": "acme", "sub": "ann"});
        let with = |name: &str, value: Value| {
            let mut claims = base();
            claims[name] = value;
            read(claims).map(|who| who.scopes)
        };
        assert_eq!(
            read(base()).expect("no scopes").scopes,
            Vec::<String>::new()
        );
        assert_eq!(
            with("scope", json!("mcp  tools:read")),
            Ok(vec!["mcp".into(), "tools:read".into()])
        );
        assert_eq!(with("scp", json!(["mcp"])), Ok(vec!["mcp".into()]));
        assert_eq!(with("scp", json!("mcp")), Ok(vec!["mcp".into()]));
        for bad in [
            json!(7),
            json!([1]),
            json!(["a\nb"]),
            json!(["ok", {"x": 1}]),
        ] {
            let err = with("scope", bad.clone()).expect_err(&bad.to_string());
            assert_eq!(err.code(), AuthCode::InvalidClaims, "{bad}");
        }
        let many = (0..=MAX_SCOPES)
            .map(|i| format!("s{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(with("scope", json!(many)).is_err());
    }
}
