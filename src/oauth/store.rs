//! Where users' upstream OAuth state is kept: connections (one per tenant, user and server),
//! authorizations under way (single use, short-lived) and clients registered with
//! authorization servers. Every secret arrives here sealed ([`Sealed`]); the stores keep bytes
//! they cannot read. Memory and SQLite for one instance, PostgreSQL for several.

use std::{
    collections::HashMap,
    sync::{Mutex, PoisonError},
};

use async_trait::async_trait;

use super::vault::Sealed;
use crate::store::StoreError;

/// Whose connection: tenant, user, server.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionKey {
    pub tenant: String,
    pub user: String,
    pub server: String,
}

/// A connection's state, as the page and the API show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionStatus {
    /// Tokens that work (or refresh).
    Connected,
    /// The refresh token was refused: the user must connect again.
    Expired,
}

impl ConnectionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionStatus::Connected => "connected",
            ConnectionStatus::Expired => "expired",
        }
    }

    pub fn parse(text: &str) -> Result<ConnectionStatus, StoreError> {
        match text {
            "connected" => Ok(ConnectionStatus::Connected),
            "expired" => Ok(ConnectionStatus::Expired),
            _ => Err(StoreError::Corrupt(
                "unknown OAuth connection status".to_owned(),
            )),
        }
    }
}

/// One user's connection to one server: its tokens sealed, the rest in the clear (nothing
/// else here is a credential).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRow {
    pub status: ConnectionStatus,
    /// The authorization server that issued the tokens.
    pub issuer: Option<String>,
    /// Scopes granted, space-separated.
    pub scopes: String,
    pub sealed: Sealed,
    /// Microseconds since the Unix epoch.
    pub connected_at: i64,
    pub updated_at: i64,
}

/// An authorization under way, found again by its `state` (stored as a hash) when the
/// authorization server sends the user back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingRow {
    pub key: ConnectionKey,
    /// The PKCE verifier and what the exchange must check, sealed.
    pub sealed: Sealed,
    /// Microseconds since the Unix epoch.
    pub expires_at: i64,
}

/// A remote server a user added for themselves (`[user_servers]`): its header values
/// sealed, the rest in the clear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserServerRow {
    /// The name the user gave it (`user-<name>` in their catalog).
    pub name: String,
    pub url: String,
    /// The headers sent to it, as JSON, sealed.
    pub sealed: Sealed,
    /// The tools the user marked read-only, as a JSON object of tool name to the
    /// fingerprint of the definition they marked.
    pub read_only: String,
    /// Microseconds since the Unix epoch.
    pub created_at: i64,
}

/// What adding a user's server did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserServerAdded {
    Added,
    /// The user has a server of that name already: nothing changed.
    NameTaken,
    /// The user has as many servers as allowed already: nothing changed.
    Full,
}

/// Held while one instance renews a connection's tokens: the others wait for it, then read
/// what it stored. Dropping it releases the lock.
pub struct RefreshGuard(pub Box<dyn Send + Sync>);

/// Storage of connections, pending authorizations and registered clients.
#[async_trait]
pub trait OAuthStore: Send + Sync {
    async fn connection(&self, key: &ConnectionKey) -> Result<Option<ConnectionRow>, StoreError>;
    /// Inserts or replaces the connection.
    async fn put_connection(
        &self,
        key: &ConnectionKey,
        row: &ConnectionRow,
    ) -> Result<(), StoreError>;
    /// Marks a connection expired, if it is still the one sealed as `sealed` (a refresh
    /// elsewhere may have replaced it since).
    async fn expire_connection(
        &self,
        key: &ConnectionKey,
        sealed: &Sealed,
        now: i64,
    ) -> Result<bool, StoreError>;
    /// Removes it; whether there was one.
    async fn delete_connection(&self, key: &ConnectionKey) -> Result<bool, StoreError>;
    /// Users connected to `server` (not expired), most recently renewed first, at most
    /// `limit`.
    async fn server_connections(
        &self,
        server: &str,
        limit: usize,
    ) -> Result<Vec<ConnectionKey>, StoreError>;
    async fn put_pending(&self, state_hash: &str, row: &PendingRow) -> Result<(), StoreError>;
    /// Removes and returns the pending authorization if it has not expired at `now`: a
    /// `state` is used once, whichever instance the user comes back to.
    async fn take_pending(
        &self,
        state_hash: &str,
        now: i64,
    ) -> Result<Option<PendingRow>, StoreError>;
    /// Drops pending authorizations expired at `now`; how many.
    async fn purge_pending(&self, now: i64) -> Result<u64, StoreError>;
    /// The client registered for `server` with the authorization server `issuer`.
    async fn client(&self, server: &str, issuer: &str) -> Result<Option<Sealed>, StoreError>;
    async fn put_client(
        &self,
        server: &str,
        issuer: &str,
        sealed: &Sealed,
    ) -> Result<(), StoreError>;
    /// A lock on renewing `key`'s tokens across every instance sharing the store; `None` for
    /// a store one instance has alone (its in-process lock suffices).
    async fn lock_refresh(&self, _key: &ConnectionKey) -> Result<Option<RefreshGuard>, StoreError> {
        Ok(None)
    }
    /// The servers `tenant`'s `user` added, by name.
    async fn user_servers(
        &self,
        tenant: &str,
        user: &str,
    ) -> Result<Vec<UserServerRow>, StoreError>;
    /// Adds a server for `tenant`'s `user`, unless they have one of that name or `max`
    /// servers already (checked and added as one step).
    async fn add_user_server(
        &self,
        tenant: &str,
        user: &str,
        row: &UserServerRow,
        max: usize,
    ) -> Result<UserServerAdded, StoreError>;
    /// Replaces the read-only marks of the server `key.server`; whether it exists.
    async fn set_user_server_read_only(
        &self,
        key: &ConnectionKey,
        read_only: &str,
    ) -> Result<bool, StoreError>;
    /// Removes the server `key.server`; whether there was one.
    async fn delete_user_server(&self, key: &ConnectionKey) -> Result<bool, StoreError>;
}

/// Most pending authorizations kept in memory: abandoned ones expire within minutes.
pub(super) const MAX_MEMORY_PENDING: usize = 10_000;

/// In memory (`[state] database = "memory"`): gone with the process.
#[derive(Debug, Default)]
pub struct MemoryOAuth {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    connections: HashMap<ConnectionKey, ConnectionRow>,
    pending: HashMap<String, PendingRow>,
    clients: HashMap<(String, String), Sealed>,
    /// By tenant and user, each user's servers by name.
    user_servers: HashMap<(String, String), std::collections::BTreeMap<String, UserServerRow>>,
}

impl MemoryOAuth {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl OAuthStore for MemoryOAuth {
    async fn connection(&self, key: &ConnectionKey) -> Result<Option<ConnectionRow>, StoreError> {
        Ok(self.inner().connections.get(key).cloned())
    }

    async fn put_connection(
        &self,
        key: &ConnectionKey,
        row: &ConnectionRow,
    ) -> Result<(), StoreError> {
        self.inner().connections.insert(key.clone(), row.clone());
        Ok(())
    }

    async fn expire_connection(
        &self,
        key: &ConnectionKey,
        sealed: &Sealed,
        now: i64,
    ) -> Result<bool, StoreError> {
        let mut inner = self.inner();
        match inner.connections.get_mut(key) {
            Some(row) if &row.sealed == sealed => {
                row.status = ConnectionStatus::Expired;
                row.updated_at = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn delete_connection(&self, key: &ConnectionKey) -> Result<bool, StoreError> {
        Ok(self.inner().connections.remove(key).is_some())
    }

    async fn server_connections(
        &self,
        server: &str,
        limit: usize,
    ) -> Result<Vec<ConnectionKey>, StoreError> {
        let inner = self.inner();
        let mut found: Vec<(&ConnectionKey, &ConnectionRow)> = inner
            .connections
            .iter()
            .filter(|(key, row)| key.server == server && row.status == ConnectionStatus::Connected)
            .collect();
        found.sort_by(|a, b| b.1.updated_at.cmp(&a.1.updated_at).then(a.0.cmp(b.0)));
        Ok(found
            .into_iter()
            .take(limit)
            .map(|(key, _)| key.clone())
            .collect())
    }

    async fn put_pending(&self, state_hash: &str, row: &PendingRow) -> Result<(), StoreError> {
        let mut inner = self.inner();
        if inner.pending.len() >= MAX_MEMORY_PENDING {
            // Room is made by the expired ones only: a live sign-in is never dropped for a new.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
            inner.pending.retain(|_, pending| pending.expires_at > now);
            if inner.pending.len() >= MAX_MEMORY_PENDING {
                return Err(StoreError::Full);
            }
        }
        inner.pending.insert(state_hash.to_owned(), row.clone());
        Ok(())
    }

    async fn take_pending(
        &self,
        state_hash: &str,
        now: i64,
    ) -> Result<Option<PendingRow>, StoreError> {
        Ok(self
            .inner()
            .pending
            .remove(state_hash)
            .filter(|row| row.expires_at > now))
    }

    async fn purge_pending(&self, now: i64) -> Result<u64, StoreError> {
        let mut inner = self.inner();
        let before = inner.pending.len();
        inner.pending.retain(|_, row| row.expires_at > now);
        Ok((before - inner.pending.len()) as u64)
    }

    async fn client(&self, server: &str, issuer: &str) -> Result<Option<Sealed>, StoreError> {
        Ok(self
            .inner()
            .clients
            .get(&(server.to_owned(), issuer.to_owned()))
            .cloned())
    }

    async fn put_client(
        &self,
        server: &str,
        issuer: &str,
        sealed: &Sealed,
    ) -> Result<(), StoreError> {
        self.inner()
            .clients
            .insert((server.to_owned(), issuer.to_owned()), sealed.clone());
        Ok(())
    }

    async fn user_servers(
        &self,
        tenant: &str,
        user: &str,
    ) -> Result<Vec<UserServerRow>, StoreError> {
        Ok(self
            .inner()
            .user_servers
            .get(&(tenant.to_owned(), user.to_owned()))
            .map(|rows| rows.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn add_user_server(
        &self,
        tenant: &str,
        user: &str,
        row: &UserServerRow,
        max: usize,
    ) -> Result<UserServerAdded, StoreError> {
        let mut inner = self.inner();
        let rows = inner
            .user_servers
            .entry((tenant.to_owned(), user.to_owned()))
            .or_default();
        Ok(if rows.contains_key(&row.name) {
            UserServerAdded::NameTaken
        } else if rows.len() >= max {
            UserServerAdded::Full
        } else {
            rows.insert(row.name.clone(), row.clone());
            UserServerAdded::Added
        })
    }

    async fn set_user_server_read_only(
        &self,
        key: &ConnectionKey,
        read_only: &str,
    ) -> Result<bool, StoreError> {
        let mut inner = self.inner();
        let row = inner
            .user_servers
            .get_mut(&(key.tenant.clone(), key.user.clone()))
            .and_then(|rows| rows.get_mut(&key.server));
        Ok(match row {
            Some(row) => {
                read_only.clone_into(&mut row.read_only);
                true
            }
            None => false,
        })
    }

    async fn delete_user_server(&self, key: &ConnectionKey) -> Result<bool, StoreError> {
        Ok(self
            .inner()
            .user_servers
            .get_mut(&(key.tenant.clone(), key.user.clone()))
            .and_then(|rows| rows.remove(&key.server))
            .is_some())
    }
}
