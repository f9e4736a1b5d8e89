//! Confirmations in memory: two maps under one lock, with per-user and total bounds.

use std::{collections::HashMap, sync::Mutex, time::SystemTime};

use futures::future::{BoxFuture, FutureExt};

use super::lock;
use crate::store::{
    Approved, Binding, ConfirmationStore, Pending, StoreError,
    clock::is_expired,
    confirmations::{MAX_MEMORY_ENTRIES, MAX_PER_USER},
};

/// Confirmations held in this process; bounded by [`MAX_PER_USER`] and [`MAX_MEMORY_ENTRIES`].
#[derive(Default)]
pub struct MemoryConfirmations {
    state: Mutex<State>,
}

type Owner = (String, String);

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    tokens: HashMap<String, Approved>,
    /// Entries per (tenant, user), so the per-user bound costs no scan.
    pending_per_user: HashMap<Owner, usize>,
    tokens_per_user: HashMap<Owner, usize>,
}

impl State {
    fn has_room(&self, per_user: &HashMap<Owner, usize>, owner: &Owner) -> bool {
        self.pending.len() + self.tokens.len() < MAX_MEMORY_ENTRIES
            && per_user.get(owner).copied().unwrap_or(0) < MAX_PER_USER
    }
}

fn owner(tenant: &str, user: &str) -> Owner {
    (tenant.to_owned(), user.to_owned())
}

fn count_in(per_user: &mut HashMap<Owner, usize>, owner: Owner) {
    *per_user.entry(owner).or_insert(0) += 1;
}

fn count_out(per_user: &mut HashMap<Owner, usize>, owner: Owner) {
    if let Some(n) = per_user.get_mut(&owner) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            per_user.remove(&owner);
        }
    }
}

impl MemoryConfirmations {
    pub fn new() -> MemoryConfirmations {
        MemoryConfirmations::default()
    }

    fn insert_pending_now(&self, pending: Pending) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        let owner = owner(&pending.binding.tenant, &pending.binding.user);
        // Room first, then the key: the order SQL stores check in, so all answer alike.
        if !state.has_room(&state.pending_per_user, &owner) {
            return Err(StoreError::Full);
        }
        if state.pending.contains_key(&pending.id) {
            return Err(StoreError::Duplicate);
        }
        count_in(&mut state.pending_per_user, owner);
        state.pending.insert(pending.id.clone(), pending);
        Ok(())
    }

    fn take_pending_now(&self, id: &str, now: SystemTime) -> Option<Pending> {
        let mut state = lock(&self.state);
        let pending = state.pending.remove(id)?;
        let owner = owner(&pending.binding.tenant, &pending.binding.user);
        count_out(&mut state.pending_per_user, owner);
        (!is_expired(pending.expires_at, now)).then_some(pending)
    }

    fn list_pending_now(&self, tenant: &str, user: &str, now: SystemTime) -> Vec<Pending> {
        let state = lock(&self.state);
        let mut found: Vec<Pending> = state
            .pending
            .values()
            .filter(|p| p.binding.tenant == tenant && p.binding.user == user)
            .filter(|p| !is_expired(p.expires_at, now))
            .cloned()
            .collect();
        found.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        found
    }

    fn insert_token_now(&self, token_hash: &str, approved: Approved) -> Result<(), StoreError> {
        let mut state = lock(&self.state);
        let owner = owner(&approved.binding.tenant, &approved.binding.user);
        // Room first, then the key: the order SQL stores check in, so all answer alike.
        if !state.has_room(&state.tokens_per_user, &owner) {
            return Err(StoreError::Full);
        }
        if state.tokens.contains_key(token_hash) {
            return Err(StoreError::Duplicate);
        }
        count_in(&mut state.tokens_per_user, owner);
        state.tokens.insert(token_hash.to_owned(), approved);
        Ok(())
    }

    fn take_token_now(&self, token_hash: &str, now: SystemTime) -> Option<Approved> {
        let mut state = lock(&self.state);
        let approved = state.tokens.remove(token_hash)?;
        let owner = owner(&approved.binding.tenant, &approved.binding.user);
        count_out(&mut state.tokens_per_user, owner);
        (!is_expired(approved.expires_at, now)).then_some(approved)
    }

    fn take_approved_now(&self, binding: &Binding, now: SystemTime) -> Option<Approved> {
        let mut state = lock(&self.state);
        // A scan: at most MAX_MEMORY_ENTRIES entries, and only writes called without a
        // token come here.
        let (token_hash, _) = state
            .tokens
            .iter()
            .filter(|(_, a)| a.binding == *binding && !is_expired(a.expires_at, now))
            .min_by(|(ha, a), (hb, b)| (a.expires_at, ha).cmp(&(b.expires_at, hb)))?;
        let token_hash = token_hash.clone();
        let approved = state.tokens.remove(&token_hash)?;
        let owner = owner(&approved.binding.tenant, &approved.binding.user);
        count_out(&mut state.tokens_per_user, owner);
        Some(approved)
    }

    fn purge_expired_now(&self, now: SystemTime) -> u64 {
        let mut guard = lock(&self.state);
        let state = &mut *guard;
        let mut purged = 0u64;
        state.pending.retain(|_, p| {
            let expired = is_expired(p.expires_at, now);
            if expired {
                count_out(
                    &mut state.pending_per_user,
                    owner(&p.binding.tenant, &p.binding.user),
                );
                purged += 1;
            }
            !expired
        });
        state.tokens.retain(|_, a| {
            let expired = is_expired(a.expires_at, now);
            if expired {
                count_out(
                    &mut state.tokens_per_user,
                    owner(&a.binding.tenant, &a.binding.user),
                );
                purged += 1;
            }
            !expired
        });
        purged
    }
}

// The work runs when the future is polled, like any other store: a dropped, never-polled
// `take_token` must not spend the token.
impl ConfirmationStore for MemoryConfirmations {
    fn insert_pending(&self, pending: Pending) -> BoxFuture<'_, Result<(), StoreError>> {
        async move { self.insert_pending_now(pending) }.boxed()
    }

    fn take_pending(
        &self,
        id: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Pending>, StoreError>> {
        let id = id.to_owned();
        async move { Ok(self.take_pending_now(&id, now)) }.boxed()
    }

    fn list_pending(
        &self,
        tenant: &str,
        user: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Vec<Pending>, StoreError>> {
        let (tenant, user) = (tenant.to_owned(), user.to_owned());
        async move { Ok(self.list_pending_now(&tenant, &user, now)) }.boxed()
    }

    fn insert_token(
        &self,
        token_hash: &str,
        approved: Approved,
        _now: SystemTime,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let token_hash = token_hash.to_owned();
        async move { self.insert_token_now(&token_hash, approved) }.boxed()
    }

    fn take_token(
        &self,
        token_hash: &str,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>> {
        let token_hash = token_hash.to_owned();
        async move { Ok(self.take_token_now(&token_hash, now)) }.boxed()
    }

    fn take_approved(
        &self,
        binding: &Binding,
        now: SystemTime,
    ) -> BoxFuture<'_, Result<Option<Approved>, StoreError>> {
        let binding = binding.clone();
        async move { Ok(self.take_approved_now(&binding, now)) }.boxed()
    }

    fn purge_expired(&self, now: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        async move { Ok(self.purge_expired_now(now)) }.boxed()
    }
}
