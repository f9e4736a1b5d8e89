//! Usage: what the audit records add up to (calls, errors by code, latency, result bytes,
//! confirmations) and what chat turns used of each model (requests, tokens, cost), summed per
//! group over a time range.
//!
//! SQL stores keep rollups so a month of ten million calls answers in well under a second:
//! rows of the audit log are folded, in id order, into hourly and daily sums
//! ([`UsageStore::roll`]); a query reads whole days from the daily sums, the remaining whole
//! hours from the hourly ones, and only the records not yet folded from the log itself. The
//! answer is exact whichever way a record is read. Times are whole UTC hours: `since` is
//! rounded down and `until` up.
//!
//! Latency is kept as a histogram ([`LATENCY_BOUNDS_MS`]), so percentiles are read from it:
//! exact to the bucket, interpolated within it.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex, PoisonError},
    time::SystemTime,
};

use async_trait::async_trait;

use super::{
    StoreError,
    clock::{from_micros, to_micros},
};

/// An hour and a day in microseconds.
pub const HOUR_US: i64 = 3_600_000_000;
pub const DAY_US: i64 = 24 * HOUR_US;

/// Upper bounds (exclusive, milliseconds) of the latency buckets; one more bucket holds the
/// rest. About 1.5× apart: a percentile read from them is within that of the truth.
pub const LATENCY_BOUNDS_MS: [u64; 30] = [
    1, 2, 3, 5, 7, 10, 15, 20, 30, 50, 70, 100, 150, 200, 300, 500, 700, 1_000, 1_500, 2_000,
    3_000, 5_000, 7_000, 10_000, 15_000, 20_000, 30_000, 60_000, 120_000, 300_000,
];
pub const BUCKETS: usize = LATENCY_BOUNDS_MS.len() + 1;

/// Whether an audit record counts in bucket `i`, as an SQL expression giving 1 or 0 (only
/// calls that reached the upstream have a latency).
pub(crate) fn bucket_sql(i: usize) -> String {
    let low = if i == 0 { 0 } else { LATENCY_BOUNDS_MS[i - 1] };
    let high = LATENCY_BOUNDS_MS
        .get(i)
        .map_or(String::new(), |h| format!(" AND duration_ms < {h}"));
    format!("CASE WHEN decision = 'allowed' AND duration_ms >= {low}{high} THEN 1 ELSE 0 END")
}

/// The bucket of a duration.
pub fn bucket_of(duration_ms: u64) -> usize {
    LATENCY_BOUNDS_MS.partition_point(|&bound| bound <= duration_ms)
}

/// What an audit record counts as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Class {
    /// A call that reached the upstream (its outcome `ok` or an error code).
    Call,
    /// A call refused by the gate (access, limits, arguments, a bad token...).
    Refused,
    /// A call held for a confirmation.
    Asked,
    /// A confirmation approved.
    Approved,
    /// A confirmation denied.
    Denied,
    /// Anything else (pins accepted, account changes, observed calls).
    Other,
}

impl Class {
    pub fn of(decision: &str, outcome: &str) -> Class {
        match decision {
            "allowed" => Class::Call,
            "pending" => Class::Asked,
            "approved" => Class::Approved,
            "denied" if outcome == "ok" => Class::Denied,
            "denied" => Class::Refused,
            _ => Class::Other,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Class::Call => "call",
            Class::Refused => "refused",
            Class::Asked => "asked",
            Class::Approved => "approved",
            Class::Denied => "denied",
            Class::Other => "other",
        }
    }

    pub fn parse(text: &str) -> Class {
        match text {
            "call" => Class::Call,
            "refused" => Class::Refused,
            "asked" => Class::Asked,
            "approved" => Class::Approved,
            "denied" => Class::Denied,
            _ => Class::Other,
        }
    }

    /// [`Class::of`] as an SQL expression over `decision` and `outcome` columns.
    pub(crate) const SQL: &'static str = "CASE WHEN decision = 'allowed' THEN 'call' \
        WHEN decision = 'pending' THEN 'asked' \
        WHEN decision = 'approved' THEN 'approved' \
        WHEN decision = 'denied' AND outcome = 'ok' THEN 'denied' \
        WHEN decision = 'denied' THEN 'refused' ELSE 'other' END";
}

/// What a group is split by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dim {
    Tenant,
    User,
    Server,
    Tool,
    /// Chat model usage only.
    Model,
}

impl Dim {
    pub fn parse(text: &str) -> Option<Dim> {
        Some(match text {
            "tenant" => Dim::Tenant,
            "user" => Dim::User,
            "server" => Dim::Server,
            "tool" => Dim::Tool,
            "model" => Dim::Model,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dim::Tenant => "tenant",
            Dim::User => "user",
            Dim::Server => "server",
            Dim::Tool => "tool",
            Dim::Model => "model",
        }
    }
}

/// Time buckets of a series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interval {
    Hour,
    Day,
}

impl Interval {
    pub fn micros(self) -> i64 {
        match self {
            Interval::Hour => HOUR_US,
            Interval::Day => DAY_US,
        }
    }
}

/// What to sum. `since` and `until` are rounded to whole hours.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageQuery {
    pub since: SystemTime,
    pub until: SystemTime,
    pub group_by: Vec<Dim>,
    /// Also split by time.
    pub interval: Option<Interval>,
    /// Only this tenant's (an administrator's scope) or this user's records.
    pub tenant: Option<String>,
    pub user: Option<String>,
}

impl UsageQuery {
    /// `since` rounded down and `until` up to whole hours, in microseconds.
    pub fn hours(&self) -> (i64, i64) {
        let since = to_micros(self.since);
        let until = to_micros(self.until);
        let since = since - since.rem_euclid(HOUR_US);
        let until = match until.rem_euclid(HOUR_US) {
            0 => until,
            rest => until.saturating_add(HOUR_US - rest),
        };
        (since, until.max(since))
    }
}

/// A group's key: the values of the dimensions asked (in [`UsageQuery::group_by`] order,
/// each `None` when the dimension does not apply) and the start of its time bucket.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Key {
    pub values: Vec<Option<String>>,
    pub time: Option<i64>,
}

/// Sums of call records of one key, class and outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSums {
    pub calls: u64,
    pub duration_ms: u64,
    pub result_bytes: u64,
    pub buckets: [u64; BUCKETS],
}

impl Default for CallSums {
    fn default() -> Self {
        CallSums {
            calls: 0,
            duration_ms: 0,
            result_bytes: 0,
            buckets: [0; BUCKETS],
        }
    }
}

impl CallSums {
    pub fn add(&mut self, other: &CallSums) {
        self.calls += other.calls;
        self.duration_ms += other.duration_ms;
        self.result_bytes += other.result_bytes;
        for (mine, theirs) in self.buckets.iter_mut().zip(other.buckets) {
            *mine += theirs;
        }
    }
}

/// Sums of chat turns of one key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelSums {
    pub turns: u64,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// In millionths of the configured price's currency.
    pub cost_micros: u64,
}

impl ModelSums {
    pub fn add(&mut self, other: &ModelSums) {
        self.turns += other.turns;
        self.requests += other.requests;
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cached_tokens += other.cached_tokens;
        self.cost_micros += other.cost_micros;
    }
}

/// What a query found, merged: calls by (key, class, outcome), model use by key.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageRows {
    pub calls: BTreeMap<(Key, Class, String), CallSums>,
    pub models: BTreeMap<Key, ModelSums>,
}

impl UsageRows {
    pub fn add_calls(&mut self, key: Key, class: Class, outcome: String, sums: &CallSums) {
        self.calls
            .entry((key, class, outcome))
            .or_default()
            .add(sums);
    }

    pub fn add_models(&mut self, key: Key, sums: &ModelSums) {
        self.models.entry(key).or_default().add(sums);
    }
}

/// One chat turn's use of a model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelUse {
    pub time: SystemTime,
    pub tenant: String,
    pub user: String,
    pub session: String,
    pub model: String,
    pub requests: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    pub cost_micros: u64,
}

#[async_trait]
pub trait UsageStore: Send + Sync {
    /// Folds what was appended since the last call into the rollups (a bounded amount per
    /// call); returns how many records it folded. Stores without rollups fold nothing.
    async fn roll(&self) -> Result<u64, StoreError>;
    /// Keeps one chat turn's use of a model.
    async fn record_model_use(&self, record: &ModelUse) -> Result<(), StoreError>;
    /// The sums `query` asks for.
    async fn usage(&self, query: &UsageQuery) -> Result<UsageRows, StoreError>;
    /// Drops model use and rollups older than `before` (`[audit] retention`).
    async fn purge_before(&self, before: SystemTime) -> Result<u64, StoreError>;
}

/// The key of a record for `query`: each dimension's value where it applies.
fn key_of(query: &UsageQuery, time: SystemTime, value: impl Fn(Dim) -> Option<String>) -> Key {
    Key {
        values: query.group_by.iter().map(|d| value(*d)).collect(),
        time: query.interval.map(|i| {
            let t = to_micros(time);
            t - t.rem_euclid(i.micros())
        }),
    }
}

/// Whether a record at `time` of `tenant` and `user` is in `query`.
fn selected(query: &UsageQuery, time: SystemTime, tenant: &str, user: &str) -> bool {
    let (since, until) = query.hours();
    let t = to_micros(time);
    t >= since
        && t < until
        && query.tenant.as_deref().is_none_or(|x| x == tenant)
        && query.user.as_deref().is_none_or(|x| x == user)
}

/// The sums of one audit record.
pub fn call_sums(duration_ms: u64, result_bytes: u64, class: Class) -> CallSums {
    let mut sums = CallSums {
        calls: 1,
        duration_ms,
        result_bytes,
        ..CallSums::default()
    };
    if class == Class::Call {
        sums.buckets[bucket_of(duration_ms)] = 1;
    }
    sums
}

/// Most chat turns kept in memory.
pub const MAX_MEMORY_MODEL_USES: usize = 100_000;

/// In memory: summed from the memory audit log at each query (it holds a bounded number of
/// records), and from the turns recorded here.
pub struct MemoryUsage {
    audit: Arc<super::MemoryAudit>,
    models: Mutex<std::collections::VecDeque<ModelUse>>,
}

impl MemoryUsage {
    pub fn new(audit: Arc<super::MemoryAudit>) -> MemoryUsage {
        MemoryUsage {
            audit,
            models: Mutex::default(),
        }
    }
}

#[async_trait]
impl UsageStore for MemoryUsage {
    async fn roll(&self) -> Result<u64, StoreError> {
        Ok(0)
    }

    async fn record_model_use(&self, record: &ModelUse) -> Result<(), StoreError> {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        if models.len() >= MAX_MEMORY_MODEL_USES {
            models.pop_front();
        }
        models.push_back(record.clone());
        Ok(())
    }

    async fn usage(&self, query: &UsageQuery) -> Result<UsageRows, StoreError> {
        let mut rows = UsageRows::default();
        self.audit.visit(|record| {
            if !selected(query, record.time, &record.tenant, &record.user) {
                return;
            }
            let key = key_of(query, record.time, |dim| match dim {
                Dim::Tenant => Some(record.tenant.clone()),
                Dim::User => Some(record.user.clone()),
                Dim::Server => Some(record.server.clone()),
                Dim::Tool => Some(record.tool.clone()),
                Dim::Model => None,
            });
            let class = Class::of(&record.decision, &record.outcome);
            let sums = call_sums(record.duration_ms, record.result_bytes, class);
            rows.add_calls(key, class, record.outcome.clone(), &sums);
        });
        let models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        for used in models.iter() {
            if !selected(query, used.time, &used.tenant, &used.user) {
                continue;
            }
            let key = key_of(query, used.time, |dim| match dim {
                Dim::Tenant => Some(used.tenant.clone()),
                Dim::User => Some(used.user.clone()),
                Dim::Model => Some(used.model.clone()),
                Dim::Server | Dim::Tool => None,
            });
            rows.add_models(key, &model_sums(used));
        }
        Ok(rows)
    }

    async fn purge_before(&self, before: SystemTime) -> Result<u64, StoreError> {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        let count = models.len();
        models.retain(|m| m.time >= before);
        Ok((count - models.len()) as u64)
    }
}

pub fn model_sums(used: &ModelUse) -> ModelSums {
    ModelSums {
        turns: 1,
        requests: used.requests,
        prompt_tokens: used.prompt_tokens,
        completion_tokens: used.completion_tokens,
        cached_tokens: used.cached_tokens,
        cost_micros: used.cost_micros,
    }
}

/// A time in microseconds as a time.
pub fn time_of(micros: i64) -> SystemTime {
    from_micros(micros)
}

/// Most groups a report lists in each part; the rest are summed in the totals only.
pub const MAX_REPORT_GROUPS: usize = 10_000;

/// Percentile `p` (0..1) of a histogram, interpolated within its bucket; `None` when empty.
pub fn percentile(buckets: &[u64; BUCKETS], p: f64) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = p * total as f64;
    let mut below = 0u64;
    for (i, &count) in buckets.iter().enumerate() {
        if count > 0 && (below + count) as f64 >= rank {
            let low = if i == 0 { 0 } else { LATENCY_BOUNDS_MS[i - 1] } as f64;
            let Some(&high) = LATENCY_BOUNDS_MS.get(i) else {
                return Some(low);
            };
            let within = ((rank - below as f64) / count as f64).clamp(0.0, 1.0);
            return Some(low + within * (high as f64 - low));
        }
        below += count;
    }
    None
}

/// The rows as the API and `mcpgate usage --json` show them: one group per key, biggest
/// first, and the totals.
pub fn report(rows: &UsageRows, query: &UsageQuery) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    let (since, until) = query.hours();
    let fields = |key: &Key| -> Map<String, Value> {
        let mut out = Map::new();
        for (dim, value) in query.group_by.iter().zip(&key.values) {
            if let Some(value) = value {
                out.insert(dim.as_str().to_owned(), json!(value));
            }
        }
        if let Some(time) = key.time {
            out.insert("time".into(), json!(super::rfc3339(from_micros(time))));
        }
        out
    };
    #[derive(Default)]
    struct Group {
        calls: u64,
        errors: u64,
        by_code: BTreeMap<String, u64>,
        latency: CallSums,
        result_bytes: u64,
        asked: u64,
        approved: u64,
        denied: u64,
    }
    let mut groups: BTreeMap<&Key, Group> = BTreeMap::new();
    for ((key, class, outcome), sums) in &rows.calls {
        let group = groups.entry(key).or_default();
        match class {
            Class::Call | Class::Refused => {
                group.calls += sums.calls;
                group.result_bytes += sums.result_bytes;
                if outcome != "ok" {
                    group.errors += sums.calls;
                    *group.by_code.entry(outcome.clone()).or_default() += sums.calls;
                }
                if *class == Class::Call {
                    group.latency.add(sums);
                }
            }
            Class::Asked => group.asked += sums.calls,
            Class::Approved => group.approved += sums.calls,
            Class::Denied => group.denied += sums.calls,
            Class::Other => {}
        }
    }
    let mut calls: Vec<(&Key, Group)> = groups
        .into_iter()
        .filter(|(_, g)| g.calls + g.asked + g.approved + g.denied > 0)
        .collect();
    calls.sort_by(|a, b| b.1.calls.cmp(&a.1.calls).then(a.0.cmp(b.0)));
    let (mut total_calls, mut total_errors) = (0, 0);
    for (_, g) in &calls {
        total_calls += g.calls;
        total_errors += g.errors;
    }
    let call_groups: Vec<Value> = calls
        .iter()
        .take(MAX_REPORT_GROUPS)
        .map(|(key, g)| {
            let mut out = fields(key);
            let at = |p| percentile(&g.latency.buckets, p).map(|ms| (ms * 10.0).round() / 10.0);
            out.extend([
                ("calls".into(), json!(g.calls)),
                ("errors".into(), json!(g.errors)),
                (
                    "errorsByCode".into(),
                    // A list, not an object: codes are data, not field names.
                    Value::Array(
                        g.by_code
                            .iter()
                            .map(|(code, count)| json!({ "code": code, "count": count }))
                            .collect(),
                    ),
                ),
                (
                    "latencyMs".into(),
                    if g.latency.calls == 0 {
                        Value::Null
                    } else {
                        json!({ "p50": at(0.5), "p90": at(0.9), "p99": at(0.99) })
                    },
                ),
                ("resultBytes".into(), json!(g.result_bytes)),
                (
                    "confirmations".into(),
                    json!({ "asked": g.asked, "approved": g.approved, "denied": g.denied }),
                ),
            ]);
            Value::Object(out)
        })
        .collect();
    let mut models: Vec<(&Key, &ModelSums)> = rows.models.iter().collect();
    models.sort_by(|a, b| {
        b.1.cost_micros
            .cmp(&a.1.cost_micros)
            .then(b.1.prompt_tokens.cmp(&a.1.prompt_tokens))
            .then(a.0.cmp(b.0))
    });
    let mut total = ModelSums::default();
    for (_, sums) in &models {
        total.add(sums);
    }
    let cost = |micros: u64| micros as f64 / 1e6;
    let model_groups: Vec<Value> = models
        .iter()
        .take(MAX_REPORT_GROUPS)
        .map(|(key, s)| {
            let mut out = fields(key);
            out.extend([
                ("turns".into(), json!(s.turns)),
                ("requests".into(), json!(s.requests)),
                ("promptTokens".into(), json!(s.prompt_tokens)),
                ("completionTokens".into(), json!(s.completion_tokens)),
                ("cachedTokens".into(), json!(s.cached_tokens)),
                ("cost".into(), json!(cost(s.cost_micros))),
            ]);
            Value::Object(out)
        })
        .collect();
    json!({
        "since": super::rfc3339(from_micros(since)),
        "until": super::rfc3339(from_micros(until)),
        "groupBy": query.group_by.iter().map(|d| d.as_str()).collect::<Vec<_>>(),
        "interval": query.interval.map(|i| match i { Interval::Hour => "hour", Interval::Day => "day" }),
        "calls": call_groups,
        "models": model_groups,
        "truncated": calls.len() > MAX_REPORT_GROUPS || models.len() > MAX_REPORT_GROUPS,
        "totals": {
            "calls": total_calls,
            "errors": total_errors,
            "turns": total.turns,
            "requests": total.requests,
            "promptTokens": total.prompt_tokens,
            "completionTokens": total.completion_tokens,
            "cachedTokens": total.cached_tokens,
            "cost": cost(total.cost_micros),
        },
    })
}

#[cfg(test)]
pub(crate) mod contract {
    //! What every usage store answers alike, from the same records.

    use std::time::Duration;

    use super::*;
    use crate::store::{AuditRecord, AuditStore};

    /// 2026-11-02T00:00:00Z, a Monday.
    pub(crate) fn day0() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_793_577_600)
    }

    pub(crate) fn record(
        at: Duration,
        (tenant, user, tool): (&str, &str, &str),
        (decision, outcome): (&str, &str),
        duration_ms: u64,
    ) -> AuditRecord {
        AuditRecord {
            time: day0() + at,
            request_id: format!("r-{}", at.as_millis()),
            tenant: tenant.into(),
            user: user.into(),
            session: "s".into(),
            server: tool.split('.').next().unwrap_or_default().into(),
            tool: tool.into(),
            decision: decision.into(),
            confirmation_id: None,
            outcome: outcome.into(),
            duration_ms,
            argument_bytes: 10,
            result_bytes: 100,
            fingerprint: None,
            arguments: None,
            detail: None,
        }
    }

    /// Records over three days (some early, some late, some in the last, partial day).
    pub(crate) fn records() -> Vec<AuditRecord> {
        let h = |hours: u64, minutes: u64| Duration::from_secs(hours * 3600 + minutes * 60);
        vec![
            record(h(1, 0), ("acme", "ann", "gh.search"), ("allowed", "ok"), 12),
            record(h(1, 5), ("acme", "ann", "gh.search"), ("allowed", "ok"), 40),
            record(
                h(1, 9),
                ("acme", "bob", "gh.search"),
                ("allowed", "upstream_error"),
                900,
            ),
            record(
                h(2, 0),
                ("acme", "bob", "gh.create"),
                ("pending", "confirmation_required"),
                0,
            ),
            record(h(2, 1), ("acme", "bob", "gh.create"), ("approved", "ok"), 0),
            record(
                h(2, 2),
                ("acme", "bob", "gh.create"),
                ("allowed", "ok"),
                250,
            ),
            record(
                h(2, 3),
                ("acme", "bob", "gh.create"),
                ("pending", "confirmation_required"),
                0,
            ),
            record(h(2, 4), ("acme", "bob", "gh.create"), ("denied", "ok"), 0),
            record(
                h(25, 0),
                ("acme", "ann", "time.now"),
                ("denied", "forbidden"),
                0,
            ),
            record(
                h(26, 30),
                ("globex", "cy", "time.now"),
                ("allowed", "ok"),
                3,
            ),
            record(
                h(49, 10),
                ("globex", "cy", "time.now"),
                ("allowed", "ok"),
                5,
            ),
            record(
                h(49, 20),
                ("acme", "ann", "gh.search"),
                ("accepted", "pinned"),
                0,
            ),
        ]
    }

    pub(crate) fn model_uses() -> Vec<ModelUse> {
        let used = |hours: u64, tenant: &str, user: &str, model: &str, prompt: u64| ModelUse {
            time: day0() + Duration::from_secs(hours * 3600),
            tenant: tenant.into(),
            user: user.into(),
            session: "s".into(),
            model: model.into(),
            requests: 2,
            prompt_tokens: prompt,
            completion_tokens: 10,
            cached_tokens: 1,
            cost_micros: prompt * 3,
        };
        vec![
            used(1, "acme", "ann", "big", 100),
            used(3, "acme", "bob", "small", 50),
            used(30, "globex", "cy", "big", 70),
        ]
    }

    fn query(group_by: &[Dim], interval: Option<Interval>) -> UsageQuery {
        UsageQuery {
            since: day0(),
            until: day0() + Duration::from_secs(3 * 86_400),
            group_by: group_by.to_vec(),
            interval,
            tenant: None,
            user: None,
        }
    }

    fn calls(rows: &UsageRows, values: &[&str], class: Class) -> u64 {
        rows.calls
            .iter()
            .filter(|((key, c, _), _)| {
                *c == class
                    && key
                        .values
                        .iter()
                        .zip(values)
                        .all(|(v, want)| v.as_deref() == Some(*want))
            })
            .map(|(_, s)| s.calls)
            .sum()
    }

    /// Writes the records with `append`, rolls `rolls` times (0: nothing folded), and checks
    /// every grouping.
    pub(crate) async fn holds(audit: &dyn AuditStore, usage: &dyn UsageStore) {
        for record in records() {
            audit.append(record).await.expect("append");
        }
        for used in model_uses() {
            usage.record_model_use(&used).await.expect("model use");
        }
        check(usage).await;
    }

    pub(crate) async fn check(usage: &dyn UsageStore) {
        let by_tool = usage
            .usage(&query(&[Dim::Tool], None))
            .await
            .expect("usage");
        assert_eq!(calls(&by_tool, &["gh.search"], Class::Call), 3);
        assert_eq!(calls(&by_tool, &["gh.create"], Class::Call), 1);
        assert_eq!(calls(&by_tool, &["gh.create"], Class::Asked), 2);
        assert_eq!(calls(&by_tool, &["gh.create"], Class::Approved), 1);
        assert_eq!(calls(&by_tool, &["gh.create"], Class::Denied), 1);
        assert_eq!(calls(&by_tool, &["time.now"], Class::Refused), 1);
        assert_eq!(calls(&by_tool, &["time.now"], Class::Call), 2);
        let search: CallSums = by_tool
            .calls
            .iter()
            .filter(|((k, c, _), _)| {
                *c == Class::Call && k.values[0].as_deref() == Some("gh.search")
            })
            .fold(CallSums::default(), |mut all, (_, s)| {
                all.add(s);
                all
            });
        assert_eq!(search.duration_ms, 952);
        assert_eq!(search.result_bytes, 300);
        assert_eq!(search.buckets[bucket_of(12)], 1);
        assert_eq!(search.buckets[bucket_of(900)], 1);
        assert!(
            by_tool
                .calls
                .keys()
                .any(|(_, c, o)| *c == Class::Call && o == "upstream_error")
        );

        let by_tenant_user = usage
            .usage(&query(&[Dim::Tenant, Dim::User], None))
            .await
            .expect("usage");
        assert_eq!(calls(&by_tenant_user, &["acme", "ann"], Class::Call), 2);
        assert_eq!(calls(&by_tenant_user, &["globex", "cy"], Class::Call), 2);
        let models: Vec<_> = by_tenant_user.models.iter().collect();
        assert_eq!(models.len(), 3, "{models:?}");

        let by_model = usage
            .usage(&query(&[Dim::Model, Dim::Server], None))
            .await
            .expect("usage");
        let big = &by_model.models[&Key {
            values: vec![Some("big".into()), None],
            time: None,
        }];
        assert_eq!(
            (big.turns, big.requests, big.prompt_tokens, big.cost_micros),
            (2, 4, 170, 510)
        );
        assert!(
            by_model.calls.keys().all(|(k, _, _)| k.values[0].is_none()),
            "calls have no model"
        );

        // A day at a time; one day, one tenant, one user.
        let daily = usage
            .usage(&query(&[], Some(Interval::Day)))
            .await
            .expect("usage");
        let on = |day: i64| {
            daily
                .calls
                .iter()
                .filter(|((k, c, _), _)| {
                    *c == Class::Call && k.time == Some(to_micros(day0()) + day * DAY_US)
                })
                .map(|(_, s)| s.calls)
                .sum::<u64>()
        };
        assert_eq!((on(0), on(1), on(2)), (4, 1, 1));
        let hourly = usage
            .usage(&query(&[Dim::Server], Some(Interval::Hour)))
            .await
            .expect("usage");
        assert!(
            hourly
                .calls
                .keys()
                .any(|(k, _, _)| k.time == Some(to_micros(day0()) + 49 * HOUR_US))
        );
        let mut narrow = query(&[Dim::User], None);
        narrow.since = day0() + Duration::from_secs(3600 + 1800); // rounded down to 01:00
        narrow.until = day0() + Duration::from_secs(2 * 3600 + 1); // rounded up to 03:00
        narrow.tenant = Some("acme".into());
        let rows = usage.usage(&narrow).await.expect("usage");
        assert_eq!(calls(&rows, &["ann"], Class::Call), 2);
        assert_eq!(calls(&rows, &["bob"], Class::Call), 2);
        narrow.user = Some("ann".into());
        let rows = usage.usage(&narrow).await.expect("usage");
        assert_eq!(calls(&rows, &["bob"], Class::Call), 0);
        assert_eq!(rows.models.len(), 1);
    }

    #[tokio::test]
    async fn memory_keeps_the_contract() {
        let audit = Arc::new(crate::store::MemoryAudit::new());
        let usage = MemoryUsage::new(audit.clone());
        holds(audit.as_ref(), &usage).await;
    }

    #[tokio::test]
    async fn the_report_sums_groups_and_reads_percentiles() {
        let audit = Arc::new(crate::store::MemoryAudit::new());
        let usage = MemoryUsage::new(audit.clone());
        holds(audit.as_ref(), &usage).await;
        let query = query(&[Dim::Tool], None);
        let report = report(&usage.usage(&query).await.expect("usage"), &query);
        let search = &report["calls"][0];
        assert_eq!(search["tool"], "gh.search", "{report}");
        assert_eq!(
            (&search["calls"], &search["errors"]),
            (&serde_json::json!(3), &serde_json::json!(1))
        );
        assert_eq!(
            search["errorsByCode"],
            serde_json::json!([{ "code": "upstream_error", "count": 1 }])
        );
        let p50 = search["latencyMs"]["p50"].as_f64().expect("p50");
        assert!(
            (30.0..=50.0).contains(&p50),
            "the middle of 12, 40, 900: {p50}"
        );
        let create = report["calls"]
            .as_array()
            .and_then(|all| all.iter().find(|g| g["tool"] == "gh.create"))
            .expect("gh.create");
        assert_eq!(
            create["confirmations"],
            serde_json::json!({ "asked": 2, "approved": 1, "denied": 1 })
        );
        assert_eq!(report["totals"]["calls"], 7);
        assert_eq!(report["totals"]["turns"], 3);
        assert!((report["totals"]["cost"].as_f64().expect("cost") - 0.00066).abs() < 1e-9);
        assert_eq!(report["since"], "2026-11-02T00:00:00Z");
    }

    #[test]
    fn percentiles_interpolate_within_buckets() {
        let mut buckets = [0; BUCKETS];
        assert_eq!(percentile(&buckets, 0.5), None);
        buckets[bucket_of(100)] = 10; // 100..150 ms
        let p50 = percentile(&buckets, 0.5).expect("p50");
        assert!((100.0..=150.0).contains(&p50), "{p50}");
        buckets[BUCKETS - 1] = 1_000; // at or over 300 s
        assert_eq!(percentile(&buckets, 0.99), Some(300_000.0));
    }

    #[test]
    fn buckets_and_classes() {
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(1), 1);
        assert_eq!(bucket_of(299_999), BUCKETS - 2);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
        assert_eq!(Class::of("denied", "ok"), Class::Denied);
        assert_eq!(Class::of("denied", "forbidden"), Class::Refused);
        for class in [
            Class::Call,
            Class::Refused,
            Class::Asked,
            Class::Approved,
            Class::Denied,
            Class::Other,
        ] {
            assert_eq!(Class::parse(class.as_str()), class);
        }
    }
}
