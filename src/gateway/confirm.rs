//! Approving and denying pending confirmations. Only the caller the confirmation was asked
//! for (same tenant, user and session) may decide it; approval yields a single-use token.
//! The grant is also taken, once, by the same caller repeating the very call without the
//! token (a client that cannot carry tokens): it is bound alike either way.

use std::time::SystemTime;

use super::{Gateway, GatewayError, audit::Attempt};
use crate::{
    digest::{random_hex, sha256_hex},
    policy::CallContext,
    store::{Approved, Binding, Pending, StoreError},
};

/// Bytes of randomness in a confirmation token (256 bits).
const TOKEN_BYTES: usize = 32;

/// An approved confirmation: the single-use token and when it stops working.
#[derive(Clone, PartialEq, Eq)]
pub struct Approval {
    pub token: String,
    pub confirmation_id: String,
    pub expires_at: SystemTime,
}

impl std::fmt::Debug for Approval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approval")
            .field("token", &"<redacted>")
            .field("confirmation_id", &self.confirmation_id)
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

pub(super) fn store_error(err: StoreError) -> GatewayError {
    // A bound, not the store failing: mostly the caller's own (approve, deny, or let their
    // confirmations expire), or the in-memory store's bound over everyone.
    if matches!(err, StoreError::Full) {
        tracing::warn!("a confirmation was refused at the confirmation store's bound");
        return GatewayError::LimitExceeded {
            limit: format!(
                "confirmations held (at most {} pending and {0} approved per user)",
                crate::store::MAX_PER_USER
            ),
            retry_after: None,
        };
    }
    tracing::error!(error = %err, "confirmation store failed");
    GatewayError::StoreUnavailable {
        what: "the confirmation store",
    }
}

impl Gateway {
    /// Approves confirmation `id` for `ctx`; returns the token that lets exactly the bound
    /// call run once. Another caller's confirmation is not found, like an unknown one (and,
    /// being taken, is gone: an id seen in the wrong hands has leaked).
    pub async fn approve(&self, ctx: &CallContext, id: &str) -> Result<Approval, GatewayError> {
        let pending = self.take_own_pending(ctx, id).await?;
        let token = random_hex(TOKEN_BYTES);
        let now = self.inner.clock.now();
        let expires_at = now + self.inner.config.confirmations.token_ttl;
        let approved = Approved {
            binding: pending.binding.clone(),
            confirmation_id: pending.id.clone(),
            expires_at,
        };
        let stored = self
            .inner
            .confirmations
            .insert_token(&sha256_hex(token.as_bytes()), approved, now)
            .await;
        if let Err(err) = stored {
            // At the bound of approved tokens: the confirmation is not lost but put back (its
            // room was freed by taking it), to approve once a token is used or expires.
            if matches!(err, StoreError::Full)
                && let Err(again) = self.inner.confirmations.insert_pending(pending).await
            {
                tracing::warn!(error = %again, "a confirmation could not be put back");
            }
            return Err(store_error(err));
        }
        super::audit::report_decision(
            self,
            ctx,
            &pending.id,
            Some(&pending.binding.tool),
            "approved",
            "ok",
        )
        .await;
        Ok(Approval {
            token,
            confirmation_id: pending.id,
            expires_at,
        })
    }

    /// Denies confirmation `id`: it is gone for good.
    pub async fn deny(&self, ctx: &CallContext, id: &str) -> Result<(), GatewayError> {
        let pending = self.take_own_pending(ctx, id).await?;
        super::audit::report_decision(
            self,
            ctx,
            &pending.id,
            Some(&pending.binding.tool),
            "denied",
            "ok",
        )
        .await;
        Ok(())
    }

    /// The caller's pending confirmations, oldest first.
    pub async fn pending_confirmations(
        &self,
        ctx: &CallContext,
    ) -> Result<Vec<Pending>, GatewayError> {
        let now = self.inner.clock.now();
        let mut pending = self
            .inner
            .confirmations
            .list_pending(&ctx.tenant, &ctx.user, now)
            .await
            .map_err(store_error)?;
        pending.retain(|p| p.binding.session == ctx.session);
        Ok(pending)
    }

    /// Takes the grant of an approved confirmation bound to exactly `binding` (caller with
    /// session, tool, definition and arguments), if there is one: the call then runs once
    /// without its token. `false`: none, ask for a confirmation.
    pub(super) async fn take_approval(
        &self,
        binding: &Binding,
        attempt: &mut Attempt,
    ) -> Result<bool, GatewayError> {
        let taken = self
            .inner
            .confirmations
            .take_approved(binding, self.inner.clock.now())
            .await
            .map_err(store_error)?;
        match taken {
            // The store matched every field; compared again so no store can widen a grant.
            Some(approved) if approved.binding == *binding => {
                attempt.confirmation(&approved.confirmation_id);
                Ok(true)
            }
            Some(_) => Err(GatewayError::ConfirmationInvalid {
                reason: "the store returned a grant for another call",
            }),
            None => Ok(false),
        }
    }

    async fn take_own_pending(&self, ctx: &CallContext, id: &str) -> Result<Pending, GatewayError> {
        let now = self.inner.clock.now();
        let taken = self
            .inner
            .confirmations
            .take_pending(id, now)
            .await
            .map_err(store_error)?;
        let Some(pending) = taken else {
            // Probing ids, or deciding twice or too late, leaves a trace too.
            super::audit::report_decision(self, ctx, id, None, "refused", "not_found").await;
            return Err(GatewayError::ConfirmationNotFound);
        };
        let b = &pending.binding;
        if (&b.tenant, &b.user, &b.session) != (&ctx.tenant, &ctx.user, &ctx.session) {
            // Within one tenant its admin may see whose call it was; across tenants the trace
            // reads as an unknown id, since the caller's tenant reads its own audit.
            let (tool, code) = if b.tenant == ctx.tenant {
                (Some(b.tool.as_str()), "forbidden")
            } else {
                tracing::warn!(
                    tenant = %ctx.tenant,
                    user = %ctx.user,
                    "a caller decided another tenant's confirmation; it is gone"
                );
                (None, "not_found")
            };
            super::audit::report_decision(self, ctx, &pending.id, tool, "refused", code).await;
            return Err(GatewayError::ConfirmationNotFound);
        }
        Ok(pending)
    }
}
