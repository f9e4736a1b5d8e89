//! The caller of a tool call: every decision is made on it.

use std::fmt;

/// Who is calling, from where. The HTTP layer fills it from a verified token; the CLI from
/// the local user.
#[derive(Clone, PartialEq, Eq)]
pub struct CallContext {
    pub tenant: String,
    pub user: String,
    /// The conversation or client session; confirmations are bound to it.
    pub session: String,
    pub roles: Vec<String>,
    /// Correlates the audit record with logs.
    pub request_id: String,
}

impl CallContext {
    /// The local operator at a terminal: tenant `local`, the OS user, one session per process.
    pub fn local() -> CallContext {
        let user = std::env::var("USER").unwrap_or_else(|_| "local".to_owned());
        CallContext {
            tenant: "local".to_owned(),
            user,
            session: format!("cli-{}", std::process::id()),
            roles: vec!["admin".to_owned()],
            request_id: new_request_id(),
        }
    }

    /// The same caller with a fresh request id.
    pub fn next_request(&self) -> CallContext {
        CallContext {
            request_id: new_request_id(),
            ..self.clone()
        }
    }

    pub fn has_role(&self, role: &str) -> bool {
        self.roles.iter().any(|r| r == role)
    }
}

impl fmt::Debug for CallContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallContext")
            .field("tenant", &self.tenant)
            .field("user", &self.user)
            .field("session", &self.session)
            .field("roles", &self.roles)
            .field("request_id", &self.request_id)
            .finish()
    }
}

/// A random request id (128 bits, hex).
pub fn new_request_id() -> String {
    crate::digest::random_hex(16)
}
