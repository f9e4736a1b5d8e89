//! The audit log in memory: a ring that keeps the newest records within a count and a byte
//! budget.

use std::{collections::VecDeque, sync::Mutex, time::SystemTime};

use futures::future::{BoxFuture, FutureExt};

use super::lock;
use crate::store::{AuditQuery, AuditRecord, AuditStore, StoreError, clock::to_micros};

/// Records kept by default: hours of traffic for one instance, for `mcpgate audit` and tests.
pub const MEMORY_AUDIT_RECORDS: usize = 100_000;
/// Bytes kept by default, whatever the count: records with recorded arguments are larger.
pub const MEMORY_AUDIT_BYTES: usize = 64 * 1024 * 1024;

/// The newest audit records of this process. Appends never fail: the oldest records make room.
pub struct MemoryAudit {
    max_records: usize,
    max_bytes: usize,
    ring: Mutex<Ring>,
}

#[derive(Default)]
struct Ring {
    /// Oldest first; ids ascending.
    records: VecDeque<(i64, AuditRecord)>,
    bytes: usize,
    last_id: i64,
}

impl Default for MemoryAudit {
    fn default() -> Self {
        MemoryAudit::with_limits(MEMORY_AUDIT_RECORDS, MEMORY_AUDIT_BYTES)
    }
}

impl MemoryAudit {
    pub fn new() -> MemoryAudit {
        MemoryAudit::default()
    }

    /// A ring of at most `max_records` records and about `max_bytes` bytes; the newest record
    /// is always kept.
    pub fn with_limits(max_records: usize, max_bytes: usize) -> MemoryAudit {
        MemoryAudit {
            max_records: max_records.max(1),
            max_bytes,
            ring: Mutex::new(Ring::default()),
        }
    }

    fn append_now(&self, record: AuditRecord) {
        let record = record.bounded();
        let mut ring = lock(&self.ring);
        ring.last_id += 1;
        let id = ring.last_id;
        ring.bytes += record.approximate_size();
        ring.records.push_back((id, record));
        while ring.records.len() > self.max_records
            || (ring.bytes > self.max_bytes && ring.records.len() > 1)
        {
            match ring.records.pop_front() {
                Some((_, old)) => ring.bytes -= old.approximate_size(),
                None => break,
            }
        }
    }

    /// Shows `visit` every record held, oldest first (under the lock: keep it short).
    pub(crate) fn visit(&self, mut visit: impl FnMut(&AuditRecord)) {
        let ring = lock(&self.ring);
        for (_, record) in &ring.records {
            visit(record);
        }
    }

    fn query_now(&self, query: &AuditQuery) -> Vec<(i64, AuditRecord)> {
        let ring = lock(&self.ring);
        ring.records
            .iter()
            .rev()
            .filter(|(id, record)| query.matches(*id, record))
            .take(query.effective_limit())
            .cloned()
            .collect()
    }
}

impl AuditStore for MemoryAudit {
    fn append(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), StoreError>> {
        async move {
            self.append_now(record);
            Ok(())
        }
        .boxed()
    }

    fn query(
        &self,
        query: AuditQuery,
    ) -> BoxFuture<'_, Result<Vec<(i64, AuditRecord)>, StoreError>> {
        async move { Ok(self.query_now(&query)) }.boxed()
    }

    fn purge_before(&self, before: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>> {
        async move {
            let mut ring = lock(&self.ring);
            let before = to_micros(before);
            let mut purged = 0;
            // Oldest first: appended in time order, give or take concurrent appends.
            while ring
                .records
                .front()
                .is_some_and(|(_, r)| to_micros(r.time) < before)
            {
                if let Some((_, old)) = ring.records.pop_front() {
                    ring.bytes -= old.approximate_size();
                    purged += 1;
                }
            }
            Ok(purged)
        }
        .boxed()
    }
}
