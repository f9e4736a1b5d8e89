//! A database of a test's own on the machine's PostgreSQL (loopback, trust), dropped after.

use sqlx::{AssertSqlSafe, PgPool};

pub(crate) struct Database {
    admin: PgPool,
    name: String,
}

impl Database {
    /// A new, empty database whose name starts with `mcpgate_{purpose}_`.
    pub(crate) async fn create(purpose: &str) -> Database {
        let admin = PgPool::connect("postgres://postgres@127.0.0.1:5432/postgres")
            .await
            .expect("the machine's PostgreSQL answers on 127.0.0.1:5432");
        let name = format!("mcpgate_{purpose}_{}", crate::digest::random_hex(6));
        // The name is ours, made of a fixed word and hex digits: nothing to escape.
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&admin)
            .await
            .expect("database created");
        Database { admin, name }
    }

    pub(crate) fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:5432/{}", self.name)
    }

    /// A new pool on the database (each pool stands for one instance).
    pub(crate) async fn pool(&self) -> PgPool {
        PgPool::connect(&self.url()).await.expect("connect")
    }

    pub(crate) async fn drop_it(self) {
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE {} WITH (FORCE)",
            self.name
        )))
        .execute(&self.admin)
        .await
        .expect("database dropped");
        self.admin.close().await;
    }
}
