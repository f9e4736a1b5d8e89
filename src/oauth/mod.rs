//! Each user's own accounts on upstream servers that want OAuth (`auth = "oauth"`): the user
//! connects once through the authorization server's pages, and the gateway then calls that
//! server with the user's token, refreshed before it expires, never handed to the browser.
//!
//! - [`vault`]: secrets sealed at rest (AES-256-GCM, key ids, the record's identity bound in).
//! - [`store`]: connections, authorizations under way, registered clients (memory, SQLite,
//!   PostgreSQL).

pub mod connections;
mod http;
pub mod store;
pub mod vault;

pub use connections::{
    AccessToken, CALLBACK_PATH, CLIENT_METADATA_PATH, ConnectionInfo, Connections, OAuthError,
    SetupError,
};
pub use store::{
    ConnectionKey, ConnectionRow, ConnectionStatus, MemoryOAuth, OAuthStore, PendingRow,
    UserServerAdded, UserServerRow,
};
pub use vault::{RecordId, Sealed, Vault, VaultError};

#[cfg(test)]
mod store_tests;
