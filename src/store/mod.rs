//! Durable and shared state behind traits: confirmations, audit records; memory and SQLite
//! for one instance, Redis and PostgreSQL for several.
//!
//! The traits are object-safe (`Arc<dyn ConfirmationStore>`, `Arc<dyn AuditStore>`) so the
//! gateway holds one store whatever the backend; a shared backend (Redis, PostgreSQL) plugs in
//! behind the same traits.

mod audit;
mod clock;
mod confirmations;
mod error;
pub mod idempotency;
mod memory;
pub mod postgres;
pub mod redis;
mod sqlite;
#[cfg(test)]
mod tests;
pub mod usage;

use std::sync::Arc;

pub use audit::{
    AuditQuery, AuditRecord, AuditStore, DEFAULT_AUDIT_QUERY_LIMIT, MAX_AUDIT_ARGUMENTS_BYTES,
    MAX_AUDIT_DETAIL_BYTES, MAX_AUDIT_FIELD_BYTES, MAX_AUDIT_QUERY_LIMIT,
};
pub use clock::{parse_instant, rfc3339};
pub use confirmations::{
    Approved, Binding, ConfirmationStore, MAX_MEMORY_ENTRIES, MAX_PER_USER, Pending,
};
pub use error::StoreError;
pub use idempotency::{IdempotencyStore, MemoryIdempotency};
pub use memory::{MEMORY_AUDIT_BYTES, MEMORY_AUDIT_RECORDS, MemoryAudit, MemoryConfirmations};
pub use sqlite::{SqliteStores, open_sqlite, open_sqlite_with};
pub use usage::{MemoryUsage, ModelUse, UsageQuery, UsageStore};

/// Fresh in-memory stores with the default bounds.
pub fn memory_stores() -> (Arc<dyn ConfirmationStore>, Arc<dyn AuditStore>) {
    (
        Arc::new(MemoryConfirmations::new()),
        Arc::new(MemoryAudit::new()),
    )
}
