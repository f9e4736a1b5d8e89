//! The caller of a tool call: every decision is made on it.

use std::{
    fmt,
    sync::{
        OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

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

/// A request id, unique across processes and restarts: 64 random bits drawn once per
/// process, then a counter (32 hex digits in all). Ids correlate records; they are not
/// secrets, so one read from the OS per process is enough rather than one per request.
pub fn new_request_id() -> String {
    static PREFIX: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let prefix = *PREFIX.get_or_init(|| {
        let mut bytes = [0u8; 8];
        getrandom::fill(&mut bytes).expect("the OS random generator works");
        u64::from_le_bytes(bytes)
    });
    format!("{prefix:016x}{:016x}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::new_request_id;

    #[test]
    fn request_ids_are_distinct_hex_of_fixed_length() {
        let ids: Vec<String> = (0..1000).map(|_| new_request_id()).collect();
        let distinct: std::collections::HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        for id in &ids {
            assert_eq!(id.len(), 32, "{id}");
            assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        }
    }
}
