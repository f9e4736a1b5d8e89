//! In-process stores: bounded, lost at exit. For tests, throwaway runs and one instance
//! without a database.

mod audit;
mod confirmations;

use std::sync::{Mutex, MutexGuard, PoisonError};

pub use audit::{MEMORY_AUDIT_BYTES, MEMORY_AUDIT_RECORDS, MemoryAudit};
pub use confirmations::MemoryConfirmations;

/// Our critical sections only move entries between maps and never panic halfway, so the state
/// behind a poisoned lock is still consistent.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
