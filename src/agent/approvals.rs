//! Write tool calls waiting for the user's decision in running turns: a bounded registry
//! keyed by tenant, user, session and call id, so only the user who started the turn, in the
//! same session, can approve or deny a call (anyone else finds nothing to decide).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
};

use tokio::sync::oneshot;

use crate::policy::CallContext;

/// Approvals pending at once across every turn sharing a registry, by default. Each one is
/// a waiting tool call; turns are bounded too, so this is a second fence, not the first.
pub const DEFAULT_MAX_PENDING: usize = 1024;

/// How a turn decides the write tool calls that need the user's approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ApprovalPolicy {
    /// Emit `approval_required` and wait (until the confirmation expires) for a decision
    /// through [`Approvals::decide`].
    #[default]
    Ask,
    /// Approve every such call without asking (the user said so beforehand, e.g. `--yes`);
    /// each is still audited as approved.
    ApproveAll,
    /// Decline every such call without asking.
    DenyAll,
}

/// The user's answer to an `approval_required` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Approve,
    Deny,
}

/// Why an approval could not be registered or decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    /// Nothing waits under that call id for this user and session (never was, already
    /// decided, timed out, or another user's: the cases look alike on purpose).
    #[error("no approval is pending for this call in this session")]
    NotFound,
    #[error("too many approvals are pending (at most {limit})")]
    TooMany { limit: usize },
    #[error("an approval for this call id is already pending in this session")]
    Duplicate,
}

impl ApprovalError {
    pub fn code(&self) -> &'static str {
        match self {
            ApprovalError::NotFound => "not_found",
            ApprovalError::TooMany { .. } => "limit_exceeded",
            ApprovalError::Duplicate => "duplicate_call_id",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    tenant: String,
    user: String,
    session: String,
    call_id: String,
}

impl Key {
    fn new(ctx: &CallContext, call_id: &str) -> Key {
        Key {
            tenant: ctx.tenant.clone(),
            user: ctx.user.clone(),
            session: ctx.session.clone(),
            call_id: call_id.to_owned(),
        }
    }
}

/// The registry; share one per service (or per embedding) between turns and the code that
/// takes the user's decisions.
#[derive(Debug)]
pub struct Approvals {
    pending: Mutex<HashMap<Key, oneshot::Sender<Decision>>>,
    limit: usize,
}

impl Default for Approvals {
    fn default() -> Self {
        Approvals::new(DEFAULT_MAX_PENDING)
    }
}

impl Approvals {
    /// A registry holding at most `limit` pending approvals.
    pub fn new(limit: usize) -> Approvals {
        Approvals {
            pending: Mutex::new(HashMap::new()),
            limit,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Key, oneshot::Sender<Decision>>> {
        // Plain map edits only: a panic elsewhere cannot leave it half-written.
        self.pending
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts waiting for the decision on `call_id` of `ctx`'s turn; the wait ends (and the
    /// entry goes) when the returned value is dropped.
    pub fn register(
        self: &Arc<Self>,
        ctx: &CallContext,
        call_id: &str,
    ) -> Result<PendingApproval, ApprovalError> {
        let key = Key::new(ctx, call_id);
        let (sender, receiver) = oneshot::channel();
        let mut pending = self.lock();
        if pending.contains_key(&key) {
            return Err(ApprovalError::Duplicate);
        }
        if pending.len() >= self.limit {
            return Err(ApprovalError::TooMany { limit: self.limit });
        }
        pending.insert(key.clone(), sender);
        Ok(PendingApproval {
            registry: self.clone(),
            key,
            receiver,
        })
    }

    /// Decides `call_id` for `ctx` (the same tenant, user and session as the turn's).
    pub fn decide(
        &self,
        ctx: &CallContext,
        call_id: &str,
        decision: Decision,
    ) -> Result<(), ApprovalError> {
        let sender = self
            .lock()
            .remove(&Key::new(ctx, call_id))
            .ok_or(ApprovalError::NotFound)?;
        sender.send(decision).map_err(|_| ApprovalError::NotFound)
    }

    /// Approvals waiting now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One call waiting for its decision.
#[derive(Debug)]
pub struct PendingApproval {
    registry: Arc<Approvals>,
    key: Key,
    receiver: oneshot::Receiver<Decision>,
}

impl PendingApproval {
    /// The decision; `None` if it can no longer come.
    pub async fn decision(&mut self) -> Option<Decision> {
        (&mut self.receiver).await.ok()
    }
}

impl Drop for PendingApproval {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(user: &str, session: &str) -> CallContext {
        CallContext {
            tenant: "t".into(),
            user: user.into(),
            session: session.into(),
            roles: vec![],
            request_id: "r".into(),
        }
    }

    #[tokio::test]
    async fn only_the_same_user_and_session_decide() {
        let approvals = Arc::new(Approvals::new(2));
        let owner = ctx("ann", "s1");
        let mut waiting = approvals.register(&owner, "call_1").expect("registers");
        assert_eq!(
            approvals
                .register(&owner, "call_1")
                .expect_err("a duplicate"),
            ApprovalError::Duplicate
        );
        for stranger in [ctx("bob", "s1"), ctx("ann", "s2")] {
            assert_eq!(
                approvals.decide(&stranger, "call_1", Decision::Approve),
                Err(ApprovalError::NotFound)
            );
        }
        approvals
            .decide(&owner.next_request(), "call_1", Decision::Deny)
            .expect("the owner decides");
        assert_eq!(waiting.decision().await, Some(Decision::Deny));
        assert_eq!(
            approvals.decide(&owner, "call_1", Decision::Approve),
            Err(ApprovalError::NotFound),
            "decided once"
        );
    }

    #[test]
    fn bounded_and_released_on_drop() {
        let approvals = Arc::new(Approvals::new(1));
        let first = approvals.register(&ctx("ann", "s"), "a").expect("room");
        assert_eq!(
            approvals
                .register(&ctx("ann", "s"), "b")
                .expect_err("over the limit"),
            ApprovalError::TooMany { limit: 1 }
        );
        drop(first);
        assert!(approvals.is_empty());
        assert!(approvals.register(&ctx("ann", "s"), "b").is_ok());
    }
}
