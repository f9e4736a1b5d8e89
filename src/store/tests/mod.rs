//! One behaviour suite for every store, written once and run against memory and SQLite.

mod approved;
mod audit;
mod confirmations;
mod limits;

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use tempfile::TempDir;

use super::{AuditStore, ConfirmationStore, memory_stores, open_sqlite};

/// The stores under test; the temporary directory lives as long as they do.
pub(super) struct Fixture {
    pub confirmations: Arc<dyn ConfirmationStore>,
    pub audit: Arc<dyn AuditStore>,
    _dir: Option<TempDir>,
}

pub(super) async fn memory() -> Fixture {
    let (confirmations, audit) = memory_stores();
    Fixture {
        confirmations,
        audit,
        _dir: None,
    }
}

/// A fresh file per test: with `sqlite::memory:` each pooled connection would see its own
/// empty database.
pub(super) async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let stores = open_sqlite(&dir.path().join("state.db"))
        .await
        .expect("open sqlite");
    Fixture {
        confirmations: stores.confirmations(),
        audit: stores.audit(),
        _dir: Some(dir),
    }
}

/// A fixed instant plus `secs`: tests never read the clock.
pub(super) fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
}

/// Runs each named case (an `async fn(Fixture)` in the invoking module) against every store,
/// on a multi-threaded runtime so concurrent cases really race.
macro_rules! suite {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::store::tests::memory().await).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(crate::store::tests::sqlite().await).await;
                }
            )*
        }
    };
}
use suite;
