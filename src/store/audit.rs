//! The audit log: one record per tool-call attempt, allowed or denied. Types, bounds, the
//! filter every store applies alike, and the store trait.

use std::time::SystemTime;

use futures::future::BoxFuture;

use super::{StoreError, clock::to_micros};

/// Longest name-like field (tenant, user, tool, ids, codes) kept in a record: names are far
/// shorter, and a longer one is an attack on the log, not a name.
pub const MAX_AUDIT_FIELD_BYTES: usize = 256;
/// Longest recorded arguments: enough to read what a read tool was asked, not a copy of a
/// payload.
pub const MAX_AUDIT_ARGUMENTS_BYTES: usize = 4096;
/// Longest free-text detail.
pub const MAX_AUDIT_DETAIL_BYTES: usize = 1024;
/// Most records one query returns; page with `before_id` for more.
pub const MAX_AUDIT_QUERY_LIMIT: usize = 1000;
/// Records a query returns when the caller does not say.
pub const DEFAULT_AUDIT_QUERY_LIMIT: usize = 100;

/// What happened on one tool-call attempt. Strings arrive sanitized from the gateway; stores
/// cut over-long fields (see [`AuditRecord::bounded`]) and never interpret them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub time: SystemTime,
    pub request_id: String,
    pub tenant: String,
    pub user: String,
    pub session: String,
    pub server: String,
    /// Canonical tool id (`server.tool`).
    pub tool: String,
    /// `"allowed"` or `"denied"`.
    pub decision: String,
    pub confirmation_id: Option<String>,
    /// `"ok"` or an error code.
    pub outcome: String,
    pub duration_ms: u64,
    pub argument_bytes: u64,
    pub result_bytes: u64,
    pub fingerprint: Option<String>,
    /// Only when config allows it, for named read tools.
    pub arguments: Option<String>,
    /// Short and non-secret.
    pub detail: Option<String>,
}

impl AuditRecord {
    /// The record as the APIs and `mcpgate audit --json` show it, with its store id.
    pub fn to_json(&self, id: i64) -> serde_json::Value {
        serde_json::json!({
            "id": id,
            "time": super::clock::rfc3339(self.time),
            "requestId": self.request_id,
            "tenant": self.tenant,
            "user": self.user,
            "session": self.session,
            "server": self.server,
            "tool": self.tool,
            "decision": self.decision,
            "confirmationId": self.confirmation_id,
            "outcome": self.outcome,
            "durationMs": self.duration_ms,
            "argumentBytes": self.argument_bytes,
            "resultBytes": self.result_bytes,
            "fingerprint": self.fingerprint,
            "arguments": self.arguments,
            "detail": self.detail,
        })
    }

    /// The record with every text field cut to its bound (at a character boundary, marked
    /// with `…`), so one record can never take more than a few KiB.
    pub fn bounded(mut self) -> AuditRecord {
        for field in [
            &mut self.request_id,
            &mut self.tenant,
            &mut self.user,
            &mut self.session,
            &mut self.server,
            &mut self.tool,
            &mut self.decision,
            &mut self.outcome,
        ] {
            cut(field, MAX_AUDIT_FIELD_BYTES);
        }
        for text in [&mut self.confirmation_id, &mut self.fingerprint]
            .into_iter()
            .flatten()
        {
            cut(text, MAX_AUDIT_FIELD_BYTES);
        }
        if let Some(text) = &mut self.arguments {
            cut(text, MAX_AUDIT_ARGUMENTS_BYTES);
        }
        if let Some(text) = &mut self.detail {
            cut(text, MAX_AUDIT_DETAIL_BYTES);
        }
        self
    }

    /// Roughly the bytes the record holds in memory.
    pub(crate) fn approximate_size(&self) -> usize {
        let optional = |s: &Option<String>| s.as_ref().map_or(0, String::len);
        std::mem::size_of::<AuditRecord>()
            + self.request_id.len()
            + self.tenant.len()
            + self.user.len()
            + self.session.len()
            + self.server.len()
            + self.tool.len()
            + self.decision.len()
            + self.outcome.len()
            + optional(&self.confirmation_id)
            + optional(&self.fingerprint)
            + optional(&self.arguments)
            + optional(&self.detail)
    }
}

const CUT_MARK: char = '…';

fn cut(text: &mut String, max: usize) {
    if text.len() > max {
        let keep = text.floor_char_boundary(max.saturating_sub(CUT_MARK.len_utf8()));
        text.truncate(keep);
        text.push(CUT_MARK);
    }
}

/// Which records to return, newest (most recently appended) first. Every filter that is set
/// must match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditQuery {
    /// Records at or after this time.
    pub since: Option<SystemTime>,
    /// Records strictly before this time.
    pub until: Option<SystemTime>,
    pub tenant: Option<String>,
    pub user: Option<String>,
    pub tool: Option<String>,
    pub outcome: Option<String>,
    /// At most this many, capped at [`MAX_AUDIT_QUERY_LIMIT`].
    pub limit: usize,
    /// Only records with a smaller id: pass the last id of the previous page.
    pub before_id: Option<i64>,
}

impl Default for AuditQuery {
    fn default() -> Self {
        AuditQuery {
            since: None,
            until: None,
            tenant: None,
            user: None,
            tool: None,
            outcome: None,
            limit: DEFAULT_AUDIT_QUERY_LIMIT,
            before_id: None,
        }
    }
}

impl AuditQuery {
    /// The limit actually applied.
    pub fn effective_limit(&self) -> usize {
        self.limit.min(MAX_AUDIT_QUERY_LIMIT)
    }

    /// Whether record `id` passes every filter; SQL stores express the same conditions.
    pub(crate) fn matches(&self, id: i64, record: &AuditRecord) -> bool {
        let time = to_micros(record.time);
        let same =
            |filter: &Option<String>, value: &str| filter.as_deref().is_none_or(|f| f == value);
        self.since.is_none_or(|since| time >= to_micros(since))
            && self.until.is_none_or(|until| time < to_micros(until))
            && self.before_id.is_none_or(|before| id < before)
            && same(&self.tenant, &record.tenant)
            && same(&self.user, &record.user)
            && same(&self.tool, &record.tool)
            && same(&self.outcome, &record.outcome)
    }
}

/// Where audit records go. One per attempt; an acknowledged call has its record.
pub trait AuditStore: Send + Sync {
    /// Returns once the record is durable (SQLite: committed, WAL): an acknowledged call has
    /// its record. Over-long fields are cut first ([`AuditRecord::bounded`]).
    fn append(&self, record: AuditRecord) -> BoxFuture<'_, Result<(), StoreError>>;

    /// Matching records with their ids, newest first. Ids grow with every append and are never
    /// reused.
    fn query(
        &self,
        query: AuditQuery,
    ) -> BoxFuture<'_, Result<Vec<(i64, AuditRecord)>, StoreError>>;

    /// Deletes the records older than `before` (`[audit] retention`); returns how many.
    fn purge_before(&self, before: SystemTime) -> BoxFuture<'_, Result<u64, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_keeps_char_boundaries_and_marks() {
        let mut text = "é".repeat(10); // 20 bytes
        cut(&mut text, 8);
        assert!(text.len() <= 8, "{text}");
        assert_eq!(text, "éé…");
        let mut short = "abc".to_owned();
        cut(&mut short, 3);
        assert_eq!(short, "abc");
    }
}
