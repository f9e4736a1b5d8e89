//! Users' upstream OAuth state in PostgreSQL, shared by every instance: a connection made on
//! one is used on all, a `state` handed out by one is completed on whichever instance the
//! user comes back to (taken once, by `DELETE … RETURNING`), and a refresh takes a lock of
//! PostgreSQL's own for the connection, so one instance renews a token while the others wait
//! and then use what it stored.

use async_trait::async_trait;
use sqlx::{PgPool, Row, postgres::PgRow};

use super::{pg_text, unavailable};
use crate::{
    oauth::{
        store::{
            ConnectionKey, ConnectionRow, ConnectionStatus, OAuthStore, PendingRow, RefreshGuard,
            UserServerAdded, UserServerRow,
        },
        vault::Sealed,
    },
    store::StoreError,
};

#[derive(Debug, Clone)]
pub struct PgOAuth {
    pool: PgPool,
}

impl PgOAuth {
    pub fn new(pool: PgPool) -> PgOAuth {
        PgOAuth { pool }
    }
}

fn column<'r, T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>>(
    row: &'r PgRow,
    name: &str,
) -> Result<T, StoreError> {
    row.try_get(name)
        .map_err(|_| StoreError::Corrupt(format!("an OAuth row has no usable `{name}`")))
}

fn sealed(row: &PgRow) -> Result<Sealed, StoreError> {
    Ok(Sealed {
        key_id: column(row, "key_id")?,
        nonce: column(row, "nonce")?,
        ciphertext: column(row, "sealed")?,
    })
}

fn connection(row: &PgRow) -> Result<ConnectionRow, StoreError> {
    let status: String = column(row, "status")?;
    Ok(ConnectionRow {
        status: ConnectionStatus::parse(&status)?,
        issuer: column(row, "issuer")?,
        scopes: column(row, "scopes")?,
        sealed: sealed(row)?,
        connected_at: column(row, "connected_at")?,
        updated_at: column(row, "updated_at")?,
    })
}

/// The advisory lock key of a connection: 8 bytes of a digest of its identity.
fn lock_key(key: &ConnectionKey) -> i64 {
    advisory_key(&format!(
        "oauth-refresh\0{}\0{}\0{}",
        key.tenant, key.user, key.server
    ))
}

/// A key of `pg_advisory_xact_lock` for `what`: 64 bits of its SHA-256.
fn advisory_key(what: &str) -> i64 {
    let digest = crate::digest::sha256_hex(what.as_bytes());
    let bytes = u64::from_str_radix(&digest[..16], 16).unwrap_or(0);
    i64::from_be_bytes(bytes.to_be_bytes())
}

#[async_trait]
impl OAuthStore for PgOAuth {
    async fn connection(&self, key: &ConnectionKey) -> Result<Option<ConnectionRow>, StoreError> {
        let row = sqlx::query(
            "SELECT status, issuer, scopes, key_id, nonce, sealed, connected_at, \
             updated_at FROM mcpgate_oauth_connections \
             WHERE tenant = $1 AND user_name = $2 AND server = $3",
        )
        .bind(pg_text(&key.tenant).as_ref())
        .bind(pg_text(&key.user).as_ref())
        .bind(pg_text(&key.server).as_ref())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        row.as_ref().map(connection).transpose()
    }

    async fn put_connection(
        &self,
        key: &ConnectionKey,
        row: &ConnectionRow,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO mcpgate_oauth_connections \
                (tenant, user_name, server, status, issuer, scopes, key_id, nonce, sealed, \
                 connected_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
             ON CONFLICT (tenant, user_name, server) DO UPDATE SET \
                status = excluded.status, issuer = excluded.issuer, scopes = excluded.scopes, \
                key_id = excluded.key_id, nonce = excluded.nonce, sealed = excluded.sealed, \
                connected_at = excluded.connected_at, updated_at = excluded.updated_at",
        )
        .bind(pg_text(&key.tenant).as_ref())
        .bind(pg_text(&key.user).as_ref())
        .bind(pg_text(&key.server).as_ref())
        .bind(row.status.as_str())
        .bind(row.issuer.as_deref().map(pg_text).as_deref())
        .bind(pg_text(&row.scopes).as_ref())
        .bind(&row.sealed.key_id)
        .bind(&row.sealed.nonce)
        .bind(&row.sealed.ciphertext)
        .bind(row.connected_at)
        .bind(row.updated_at)
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn expire_connection(
        &self,
        key: &ConnectionKey,
        sealed: &Sealed,
        now: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE mcpgate_oauth_connections SET status = 'expired', updated_at = $5 \
             WHERE tenant = $1 AND user_name = $2 AND server = $3 AND nonce = $4",
        )
        .bind(pg_text(&key.tenant).as_ref())
        .bind(pg_text(&key.user).as_ref())
        .bind(pg_text(&key.server).as_ref())
        .bind(&sealed.nonce)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_connection(&self, key: &ConnectionKey) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM mcpgate_oauth_connections \
             WHERE tenant = $1 AND user_name = $2 AND server = $3",
        )
        .bind(pg_text(&key.tenant).as_ref())
        .bind(pg_text(&key.user).as_ref())
        .bind(pg_text(&key.server).as_ref())
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn server_connections(
        &self,
        server: &str,
        limit: usize,
    ) -> Result<Vec<ConnectionKey>, StoreError> {
        let rows = sqlx::query(
            "SELECT tenant, user_name FROM mcpgate_oauth_connections \
             WHERE server = $1 AND status = 'connected' \
             ORDER BY updated_at DESC, tenant, user_name LIMIT $2",
        )
        .bind(pg_text(server).as_ref())
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        rows.iter()
            .map(|row| {
                Ok(ConnectionKey {
                    tenant: column(row, "tenant")?,
                    user: column(row, "user_name")?,
                    server: server.to_owned(),
                })
            })
            .collect()
    }

    async fn put_pending(&self, state_hash: &str, row: &PendingRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO mcpgate_oauth_pending \
                (state_hash, tenant, user_name, server, key_id, nonce, sealed, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(state_hash)
        .bind(pg_text(&row.key.tenant).as_ref())
        .bind(pg_text(&row.key.user).as_ref())
        .bind(pg_text(&row.key.server).as_ref())
        .bind(&row.sealed.key_id)
        .bind(&row.sealed.nonce)
        .bind(&row.sealed.ciphertext)
        .bind(row.expires_at)
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    async fn take_pending(
        &self,
        state_hash: &str,
        now: i64,
    ) -> Result<Option<PendingRow>, StoreError> {
        let row = sqlx::query(
            "DELETE FROM mcpgate_oauth_pending WHERE state_hash = $1 RETURNING \
                tenant, user_name, server, key_id, nonce, sealed, expires_at",
        )
        .bind(state_hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        let Some(row) = row else { return Ok(None) };
        let pending = PendingRow {
            key: ConnectionKey {
                tenant: column(&row, "tenant")?,
                user: column(&row, "user_name")?,
                server: column(&row, "server")?,
            },
            sealed: sealed(&row)?,
            expires_at: column(&row, "expires_at")?,
        };
        Ok((pending.expires_at > now).then_some(pending))
    }

    async fn purge_pending(&self, now: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM mcpgate_oauth_pending WHERE expires_at <= $1")
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(done.rows_affected())
    }

    async fn client(&self, server: &str, issuer: &str) -> Result<Option<Sealed>, StoreError> {
        let row = sqlx::query(
            "SELECT key_id, nonce, sealed FROM mcpgate_oauth_clients \
             WHERE server = $1 AND issuer = $2",
        )
        .bind(pg_text(server).as_ref())
        .bind(pg_text(issuer).as_ref())
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        row.as_ref().map(sealed).transpose()
    }

    async fn put_client(
        &self,
        server: &str,
        issuer: &str,
        sealed: &Sealed,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO mcpgate_oauth_clients (server, issuer, key_id, nonce, sealed) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (server, issuer) DO UPDATE SET \
                key_id = excluded.key_id, nonce = excluded.nonce, sealed = excluded.sealed",
        )
        .bind(pg_text(server).as_ref())
        .bind(pg_text(issuer).as_ref())
        .bind(&sealed.key_id)
        .bind(&sealed.nonce)
        .bind(&sealed.ciphertext)
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(())
    }

    /// A transaction holding `pg_advisory_xact_lock` for the connection: released when the
    /// guard is dropped (the transaction rolls back), or if this instance dies.
    async fn lock_refresh(&self, key: &ConnectionKey) -> Result<Option<RefreshGuard>, StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| unavailable(&e))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(lock_key(key))
            .execute(&mut *tx)
            .await
            .map_err(|e| unavailable(&e))?;
        Ok(Some(RefreshGuard(Box::new(tx))))
    }

    async fn user_servers(
        &self,
        tenant: &str,
        user: &str,
    ) -> Result<Vec<UserServerRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, url, key_id, nonce, sealed, read_only, created_at
             FROM mcpgate_user_servers WHERE tenant = $1 AND user_name = $2 ORDER BY name",
        )
        .bind(pg_text(tenant))
        .bind(pg_text(user))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        rows.iter()
            .map(|row| {
                Ok(UserServerRow {
                    name: column(row, "name")?,
                    url: column(row, "url")?,
                    sealed: sealed(row)?,
                    read_only: column(row, "read_only")?,
                    created_at: column(row, "created_at")?,
                })
            })
            .collect()
    }

    /// Under a lock of the user's, so two instances adding at once cannot both pass the cap.
    async fn add_user_server(
        &self,
        tenant: &str,
        user: &str,
        row: &UserServerRow,
        max: usize,
    ) -> Result<UserServerAdded, StoreError> {
        let mut tx = self.pool.begin().await.map_err(|e| unavailable(&e))?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(advisory_key(&format!("user-servers\0{tenant}\0{user}")))
            .execute(&mut *tx)
            .await
            .map_err(|e| unavailable(&e))?;
        let (count, taken): (i64, bool) = sqlx::query_as(
            "SELECT count(*), coalesce(bool_or(name = $3), false)
             FROM mcpgate_user_servers WHERE tenant = $1 AND user_name = $2",
        )
        .bind(pg_text(tenant))
        .bind(pg_text(user))
        .bind(pg_text(&row.name))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
        if taken {
            return Ok(UserServerAdded::NameTaken);
        }
        if usize::try_from(count).unwrap_or(usize::MAX) >= max {
            return Ok(UserServerAdded::Full);
        }
        sqlx::query(
            "INSERT INTO mcpgate_user_servers
                (tenant, user_name, name, url, key_id, nonce, sealed, read_only, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(pg_text(tenant))
        .bind(pg_text(user))
        .bind(pg_text(&row.name))
        .bind(pg_text(&row.url))
        .bind(&row.sealed.key_id)
        .bind(&row.sealed.nonce)
        .bind(&row.sealed.ciphertext)
        .bind(pg_text(&row.read_only))
        .bind(row.created_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| unavailable(&e))?;
        tx.commit().await.map_err(|e| unavailable(&e))?;
        Ok(UserServerAdded::Added)
    }

    async fn set_user_server_read_only(
        &self,
        key: &ConnectionKey,
        read_only: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE mcpgate_user_servers SET read_only = $4
             WHERE tenant = $1 AND user_name = $2 AND name = $3",
        )
        .bind(pg_text(&key.tenant))
        .bind(pg_text(&key.user))
        .bind(pg_text(&key.server))
        .bind(pg_text(read_only))
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_user_server(&self, key: &ConnectionKey) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM mcpgate_user_servers WHERE tenant = $1 AND user_name = $2 AND name = $3",
        )
        .bind(pg_text(&key.tenant))
        .bind(pg_text(&key.user))
        .bind(pg_text(&key.server))
        .execute(&self.pool)
        .await
        .map_err(|e| unavailable(&e))?;
        Ok(done.rows_affected() > 0)
    }
}
