//! Users' upstream OAuth state in SQLite (schema version 3): sealed bytes and the plain
//! columns around them. A pending authorization is taken by one `DELETE … RETURNING`, so a
//! `state` is used once.

use async_trait::async_trait;
use sqlx::{Row, SqlitePool, sqlite::SqliteRow};

use super::store_error;
use crate::{
    oauth::{
        store::{
            ConnectionKey, ConnectionRow, ConnectionStatus, OAuthStore, PendingRow,
            UserServerAdded, UserServerRow,
        },
        vault::Sealed,
    },
    store::StoreError,
};

pub(super) struct SqliteOAuth {
    pool: SqlitePool,
}

impl SqliteOAuth {
    pub(super) fn new(pool: SqlitePool) -> SqliteOAuth {
        SqliteOAuth { pool }
    }
}

const CONNECTION: &str = "SELECT
    status, issuer, scopes, key_id, nonce, sealed, connected_at, updated_at
    FROM oauth_connections WHERE tenant_id = ?1 AND user_id = ?2 AND server = ?3";

fn sealed(row: &SqliteRow) -> Result<Sealed, StoreError> {
    Ok(Sealed {
        key_id: row.try_get("key_id").map_err(store_error)?,
        nonce: row.try_get("nonce").map_err(store_error)?,
        ciphertext: row.try_get("sealed").map_err(store_error)?,
    })
}

fn connection(row: &SqliteRow) -> Result<ConnectionRow, StoreError> {
    let status: String = row.try_get("status").map_err(store_error)?;
    Ok(ConnectionRow {
        status: ConnectionStatus::parse(&status)?,
        issuer: row.try_get("issuer").map_err(store_error)?,
        scopes: row.try_get("scopes").map_err(store_error)?,
        sealed: sealed(row)?,
        connected_at: row.try_get("connected_at").map_err(store_error)?,
        updated_at: row.try_get("updated_at").map_err(store_error)?,
    })
}

#[async_trait]
impl OAuthStore for SqliteOAuth {
    async fn connection(&self, key: &ConnectionKey) -> Result<Option<ConnectionRow>, StoreError> {
        let row = sqlx::query(CONNECTION)
            .bind(&key.tenant)
            .bind(&key.user)
            .bind(&key.server)
            .fetch_optional(&self.pool)
            .await
            .map_err(store_error)?;
        row.as_ref().map(connection).transpose()
    }

    async fn put_connection(
        &self,
        key: &ConnectionKey,
        row: &ConnectionRow,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO oauth_connections
                (tenant_id, user_id, server, status, issuer, scopes, key_id, nonce, sealed,
                 connected_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
             ON CONFLICT (tenant_id, user_id, server) DO UPDATE SET
                status = excluded.status, issuer = excluded.issuer, scopes = excluded.scopes,
                key_id = excluded.key_id, nonce = excluded.nonce, sealed = excluded.sealed,
                connected_at = excluded.connected_at, updated_at = excluded.updated_at",
        )
        .bind(&key.tenant)
        .bind(&key.user)
        .bind(&key.server)
        .bind(row.status.as_str())
        .bind(&row.issuer)
        .bind(&row.scopes)
        .bind(&row.sealed.key_id)
        .bind(&row.sealed.nonce)
        .bind(&row.sealed.ciphertext)
        .bind(row.connected_at)
        .bind(row.updated_at)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn expire_connection(
        &self,
        key: &ConnectionKey,
        sealed: &Sealed,
        now: i64,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE oauth_connections SET status = 'expired', updated_at = ?5
             WHERE tenant_id = ?1 AND user_id = ?2 AND server = ?3 AND nonce = ?4",
        )
        .bind(&key.tenant)
        .bind(&key.user)
        .bind(&key.server)
        .bind(&sealed.nonce)
        .bind(now)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_connection(&self, key: &ConnectionKey) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM oauth_connections WHERE tenant_id = ?1 AND user_id = ?2 AND server = ?3",
        )
        .bind(&key.tenant)
        .bind(&key.user)
        .bind(&key.server)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() > 0)
    }

    async fn server_connections(
        &self,
        server: &str,
        limit: usize,
    ) -> Result<Vec<ConnectionKey>, StoreError> {
        let rows = sqlx::query(
            "SELECT tenant_id, user_id FROM oauth_connections
             WHERE server = ?1 AND status = 'connected'
             ORDER BY updated_at DESC, tenant_id, user_id LIMIT ?2",
        )
        .bind(server)
        .bind(super::to_sql_usize(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        rows.iter()
            .map(|row| {
                Ok(ConnectionKey {
                    tenant: row.try_get("tenant_id").map_err(store_error)?,
                    user: row.try_get("user_id").map_err(store_error)?,
                    server: server.to_owned(),
                })
            })
            .collect()
    }

    async fn put_pending(&self, state_hash: &str, row: &PendingRow) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO oauth_pending
                (state_hash, tenant_id, user_id, server, key_id, nonce, sealed, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        )
        .bind(state_hash)
        .bind(&row.key.tenant)
        .bind(&row.key.user)
        .bind(&row.key.server)
        .bind(&row.sealed.key_id)
        .bind(&row.sealed.nonce)
        .bind(&row.sealed.ciphertext)
        .bind(row.expires_at)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn take_pending(
        &self,
        state_hash: &str,
        now: i64,
    ) -> Result<Option<PendingRow>, StoreError> {
        let row = sqlx::query(
            "DELETE FROM oauth_pending WHERE state_hash = ?1 RETURNING
                tenant_id, user_id, server, key_id, nonce, sealed, expires_at",
        )
        .bind(state_hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        let Some(row) = row else { return Ok(None) };
        let pending = PendingRow {
            key: ConnectionKey {
                tenant: row.try_get("tenant_id").map_err(store_error)?,
                user: row.try_get("user_id").map_err(store_error)?,
                server: row.try_get("server").map_err(store_error)?,
            },
            sealed: sealed(&row)?,
            expires_at: row.try_get("expires_at").map_err(store_error)?,
        };
        Ok((pending.expires_at > now).then_some(pending))
    }

    async fn purge_pending(&self, now: i64) -> Result<u64, StoreError> {
        let done = sqlx::query("DELETE FROM oauth_pending WHERE expires_at <= ?1")
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(store_error)?;
        Ok(done.rows_affected())
    }

    async fn client(&self, server: &str, issuer: &str) -> Result<Option<Sealed>, StoreError> {
        let row = sqlx::query(
            "SELECT key_id, nonce, sealed FROM oauth_clients WHERE server = ?1 AND issuer = ?2",
        )
        .bind(server)
        .bind(issuer)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        row.as_ref().map(sealed).transpose()
    }

    async fn put_client(
        &self,
        server: &str,
        issuer: &str,
        sealed: &Sealed,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO oauth_clients (server, issuer, key_id, nonce, sealed)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (server, issuer) DO UPDATE SET
                key_id = excluded.key_id, nonce = excluded.nonce, sealed = excluded.sealed",
        )
        .bind(server)
        .bind(issuer)
        .bind(&sealed.key_id)
        .bind(&sealed.nonce)
        .bind(&sealed.ciphertext)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(())
    }

    async fn user_servers(
        &self,
        tenant: &str,
        user: &str,
    ) -> Result<Vec<UserServerRow>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, url, key_id, nonce, sealed, read_only, created_at FROM user_servers
             WHERE tenant_id = ?1 AND user_id = ?2 ORDER BY name",
        )
        .bind(tenant)
        .bind(user)
        .fetch_all(&self.pool)
        .await
        .map_err(store_error)?;
        rows.iter()
            .map(|row| {
                Ok(UserServerRow {
                    name: row.try_get("name").map_err(store_error)?,
                    url: row.try_get("url").map_err(store_error)?,
                    sealed: sealed(row)?,
                    read_only: row.try_get("read_only").map_err(store_error)?,
                    created_at: row.try_get("created_at").map_err(store_error)?,
                })
            })
            .collect()
    }

    async fn add_user_server(
        &self,
        tenant: &str,
        user: &str,
        row: &UserServerRow,
        max: usize,
    ) -> Result<UserServerAdded, StoreError> {
        // One statement: the count and the insert cannot be split by another writer.
        let done = sqlx::query(
            "INSERT INTO user_servers
                (tenant_id, user_id, name, url, key_id, nonce, sealed, read_only, created_at)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9
             WHERE (SELECT COUNT(*) FROM user_servers WHERE tenant_id = ?1 AND user_id = ?2)
                < ?10
             ON CONFLICT (tenant_id, user_id, name) DO NOTHING",
        )
        .bind(tenant)
        .bind(user)
        .bind(&row.name)
        .bind(&row.url)
        .bind(&row.sealed.key_id)
        .bind(&row.sealed.nonce)
        .bind(&row.sealed.ciphertext)
        .bind(&row.read_only)
        .bind(row.created_at)
        .bind(super::to_sql_usize(max))
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        if done.rows_affected() > 0 {
            return Ok(UserServerAdded::Added);
        }
        let taken: Option<i64> = sqlx::query_scalar(
            "SELECT 1 FROM user_servers WHERE tenant_id = ?1 AND user_id = ?2 AND name = ?3",
        )
        .bind(tenant)
        .bind(user)
        .bind(&row.name)
        .fetch_optional(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(match taken {
            Some(_) => UserServerAdded::NameTaken,
            None => UserServerAdded::Full,
        })
    }

    async fn set_user_server_read_only(
        &self,
        key: &ConnectionKey,
        read_only: &str,
    ) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "UPDATE user_servers SET read_only = ?4
             WHERE tenant_id = ?1 AND user_id = ?2 AND name = ?3",
        )
        .bind(&key.tenant)
        .bind(&key.user)
        .bind(&key.server)
        .bind(read_only)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_user_server(&self, key: &ConnectionKey) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "DELETE FROM user_servers WHERE tenant_id = ?1 AND user_id = ?2 AND name = ?3",
        )
        .bind(&key.tenant)
        .bind(&key.user)
        .bind(&key.server)
        .execute(&self.pool)
        .await
        .map_err(store_error)?;
        Ok(done.rows_affected() > 0)
    }
}
