//! Confirmations of write calls: the pending request a person approves or denies, and the
//! single-use token an approval yields. Types, bounds and the store trait.

use std::time::SystemTime;

use futures::future::BoxFuture;

use super::StoreError;

/// Pending confirmations, or tokens, that one (tenant, user) may hold at once, expired ones
/// included until purged or taken: one user must not fill the store for everyone.
pub const MAX_PER_USER: usize = 100;

/// Memory store only: pending confirmations and tokens together. A few hundred bytes each, so
/// this caps the store at a few MiB.
pub const MAX_MEMORY_ENTRIES: usize = 10_000;

/// What a confirmation is bound to. The gateway checks a call against it; the store only keeps
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub tenant: String,
    pub user: String,
    pub session: String,
    /// Canonical tool id (`server.tool`).
    pub tool: String,
    /// Fingerprint of the tool definition when the confirmation was asked for.
    pub fingerprint: String,
    /// SHA-256 of the canonical arguments.
    pub args_hash: String,
}

/// A write call waiting for a person to approve or deny it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub id: String,
    pub binding: Binding,
    pub created_at: SystemTime,
    pub expires_at: SystemTime,
}

/// What an approval grants: one call matching `binding` before `expires_at`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub binding: Binding,
    pub confirmation_id: String,
    pub expires_at: SystemTime,
}

/// Where pending confirmations and approved tokens live. Times are kept to the microsecond;
/// an entry whose `expires_at` equals `now` is expired. Expired entries count against the
/// bounds until taken or purged, so the owner runs [`ConfirmationStore::purge_expired`]
/// periodically.
pub trait ConfirmationStore: Send + Sync {
    /// Stores a new pending confirmation. [`StoreError::Duplicate`] if the id exists,
    /// [`StoreError::Full`] over a bound.
    fn insert_pending(&self, pending: Pending) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Removes and returns the pending confirmation (approve and deny both end it); None if
    /// unknown or expired (expired ones are deleted too).
    fn take_pending(
        &self,
        id: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Pending>, StoreError>>;

    /// The unexpired pending confirmations of one user of one tenant, oldest first.
    fn list_pending(
        &self,
        tenant: &str,
        user: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Vec<Pending>, StoreError>>;

    /// Stores an approved token under the SHA-256 of the token (never the token itself),
    /// approved at `now` (a shared store keeps it for `expires_at - now` by its own clock).
    /// [`StoreError::Duplicate`] if the hash exists, [`StoreError::Full`] over a bound.
    fn insert_token(
        &self,
        token_hash: &str,
        approved: Approved,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Atomically removes and returns the grant (GETDEL semantics); None if unknown, used or
    /// expired. Of any number of concurrent takes of one token, exactly one gets it.
    fn take_token(
        &self,
        token_hash: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>>;

    /// Atomically removes and returns one unexpired grant bound to exactly `binding` (the
    /// one expiring first), whatever its token: the repeat of an approved call by its own
    /// caller, without the token. None if there is none. A grant is taken once, by this or
    /// by [`ConfirmationStore::take_token`]: of any number of concurrent takes, one gets it.
    fn take_approved(
        &self,
        binding: &Binding,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>>;

    /// Deletes expired rows; returns how many.
    fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>>;
}
