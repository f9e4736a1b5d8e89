//! The one error type of every store, with stable machine-readable codes.

/// Why a store operation failed. Messages never carry SQL or bound values: they may reach logs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The backend cannot be reached or refused the operation (busy, I/O, pool timeout). The
    /// gate fails closed on it.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// A bound was reached (per user or in total): refused rather than grown without limit.
    #[error("store full")]
    Full,
    /// The stored data cannot be read as what it should be (not a database, a bad row).
    #[error("store corrupt: {0}")]
    Corrupt(String),
    /// An entry with this key exists already; it is never overwritten, so a token or a pending
    /// confirmation cannot be rebound.
    #[error("an entry with this key exists already")]
    Duplicate,
    /// The database was written by a newer mcpgate; reading it could misread its rows.
    #[error("store schema version {found} is newer than the supported {supported}")]
    IncompatibleSchema { found: i64, supported: i64 },
}

impl StoreError {
    /// A stable code for APIs, metrics and the audit log.
    pub fn code(&self) -> &'static str {
        match self {
            StoreError::Unavailable(_) => "store_unavailable",
            StoreError::Full => "store_full",
            StoreError::Corrupt(_) => "store_corrupt",
            StoreError::Duplicate => "store_duplicate",
            StoreError::IncompatibleSchema { .. } => "store_schema",
        }
    }
}
