//! Audit records: one per call attempt, allowed or denied, with who, what, the decision and
//! the outcome. Never tokens, keys, header values, argument values or result content (except
//! argument values of read tools named in `audit.log_arguments_for`).

use std::{
    sync::Arc,
    time::{Instant, SystemTime},
};

use serde_json::{Map, Value};

use super::{Gateway, GatewayError, ToolOutput};
use crate::{
    catalog::{CatalogTool, PinStatus, canonical_json},
    config::AuditConfig,
    policy::{CallContext, Effect},
    store::{AuditRecord, AuditStore},
};

/// Longest string kept in an audit field; names come from callers and upstreams.
pub(super) const MAX_FIELD_CHARS: usize = 256;
/// The user name of records the gateway writes about itself.
const SYSTEM_USER: &str = "mcpgate";
/// Longest argument text kept for tools whose arguments may be logged.
const MAX_ARGUMENTS_CHARS: usize = 4096;
/// The outcome of an attempt whose caller went away before it finished.
pub const ABANDONED: &str = "abandoned";

/// What is known about a call attempt so far; becomes an [`AuditRecord`] at the end.
pub(super) struct Attempt {
    started: Instant,
    time: SystemTime,
    /// Who asked, cleaned for the record when the attempt starts (the roles are not kept).
    request_id: String,
    tenant: String,
    user: String,
    session: String,
    /// Cleaned for the record once the tool is resolved.
    server: String,
    tool: String,
    fingerprint: Option<String>,
    effect: Option<Effect>,
    allowed: bool,
    confirmation_id: Option<String>,
    argument_bytes: u64,
    arguments: Option<String>,
    result_bytes: u64,
    /// Where the call came from when the caller alone does not say it (an MCP App's view).
    via: Option<String>,
    /// Time spent waiting for the upstream (not part of the gateway's overhead).
    upstream_time: std::time::Duration,
}

impl Attempt {
    pub fn start(ctx: &CallContext, requested: &str, now: SystemTime) -> Attempt {
        Attempt {
            started: Instant::now(),
            time: now,
            request_id: clean(&ctx.request_id, MAX_FIELD_CHARS),
            tenant: clean(&ctx.tenant, MAX_FIELD_CHARS),
            user: clean(&ctx.user, MAX_FIELD_CHARS),
            session: clean(&ctx.session, MAX_FIELD_CHARS),
            server: String::new(),
            tool: requested.to_owned(),
            fingerprint: None,
            effect: None,
            allowed: false,
            confirmation_id: None,
            argument_bytes: 0,
            arguments: None,
            result_bytes: 0,
            via: None,
            upstream_time: std::time::Duration::ZERO,
        }
    }

    pub fn upstream_time_add(&mut self, spent: std::time::Duration) {
        self.upstream_time += spent;
    }

    pub fn upstream_time(&self) -> std::time::Duration {
        self.upstream_time
    }

    pub fn tool(&mut self, tool: &CatalogTool) {
        self.server = clean(tool.server.as_str(), MAX_FIELD_CHARS);
        self.tool = tool.canonical.clone();
        self.fingerprint = Some(tool.fingerprint.as_str().to_owned());
    }

    pub fn effect(&mut self, effect: Effect) {
        self.effect = Some(effect);
    }

    pub fn allowed(&mut self) {
        self.allowed = true;
    }

    /// The call is an MCP App's, made from inside its view `view`: the record's detail
    /// says so (`app ui://<server>/…`), so an operator tells it from the model's calls.
    pub fn via_app(&mut self, view: &str) {
        self.via = Some(clean(&format!("app {view}"), MAX_FIELD_CHARS));
    }

    pub fn confirmation(&mut self, id: &str) {
        self.confirmation_id = Some(id.to_owned());
    }

    /// Records the arguments' size (always audited, unlike their values).
    pub fn argument_bytes(&mut self, size: usize) {
        self.argument_bytes = size as u64;
    }

    /// Keeps the arguments' canonical JSON until `finish` decides whether they may be logged.
    pub fn arguments(&mut self, arguments: &Map<String, Value>) {
        self.arguments = Some(canonical_json(&Value::Object(arguments.clone())));
    }

    pub fn result_bytes(&mut self, size: usize) {
        self.result_bytes = size as u64;
    }

    pub fn finish(
        &mut self,
        outcome: &Result<ToolOutput, GatewayError>,
        config: &AuditConfig,
    ) -> AuditRecord {
        let may_log_arguments =
            self.effect == Some(Effect::Read) && config.log_arguments_for.contains(&self.tool);
        let arguments = self
            .arguments
            .take()
            .filter(|_| may_log_arguments)
            .map(|a| clean(&a, MAX_ARGUMENTS_CHARS));
        let outcome_code = match outcome {
            Ok(_) => "ok",
            Err(err) => err.code(),
        };
        let decision = decision(self.allowed, outcome);
        let via = self.via.take();
        self.record(decision, outcome_code, arguments, via)
    }

    /// The record of an attempt whose caller went away before it finished (its future was
    /// dropped): `allowed` if it had reached the upstream, else `undecided`; outcome
    /// `abandoned`. Argument values are never kept here.
    pub fn abandoned(&mut self) -> AuditRecord {
        let decision = abandoned_decision(self.allowed);
        let mut detail = "the caller went away before the call finished".to_owned();
        if let Some(via) = self.via.take() {
            detail = format!("{via}: {detail}");
        }
        self.record(decision, ABANDONED, None, Some(detail))
    }

    /// The record, taking what the attempt gathered.
    fn record(
        &mut self,
        decision: &str,
        outcome: &str,
        arguments: Option<String>,
        detail: Option<String>,
    ) -> AuditRecord {
        AuditRecord {
            time: self.time,
            request_id: std::mem::take(&mut self.request_id),
            tenant: std::mem::take(&mut self.tenant),
            user: std::mem::take(&mut self.user),
            session: std::mem::take(&mut self.session),
            server: std::mem::take(&mut self.server),
            tool: clean(&self.tool, MAX_FIELD_CHARS),
            decision: decision.to_owned(),
            confirmation_id: self.confirmation_id.take(),
            outcome: outcome.to_owned(),
            duration_ms: self
                .started
                .elapsed()
                .as_millis()
                .try_into()
                .unwrap_or(u64::MAX),
            argument_bytes: self.argument_bytes,
            result_bytes: self.result_bytes,
            fingerprint: self.fingerprint.take(),
            arguments,
            detail,
        }
    }
}

/// Audits a definition that differs from its pin, or that has scan findings: once per
/// definition, as the gateway itself.
pub(super) async fn report_definition(gateway: &Gateway, tool: &CatalogTool) {
    let changed = matches!(tool.pin, PinStatus::Changed { .. });
    let codes: Vec<&str> = tool.findings.iter().map(|f| f.code.as_str()).collect();
    if changed {
        tracing::warn!(tool = %clean(&tool.canonical, MAX_FIELD_CHARS), status = tool.status.as_str(),
            "tool definition changed since it was pinned");
    }
    if !codes.is_empty() {
        tracing::warn!(tool = %clean(&tool.canonical, MAX_FIELD_CHARS), findings = %codes.join(","),
            status = tool.status.as_str(), "poisoning scan findings");
    }
    let record = AuditRecord {
        time: gateway.inner.clock.now(),
        request_id: crate::policy::new_request_id(),
        tenant: String::new(),
        user: SYSTEM_USER.to_owned(),
        session: String::new(),
        server: tool.server.to_string(),
        tool: clean(&tool.canonical, MAX_FIELD_CHARS),
        decision: "observed".to_owned(),
        confirmation_id: None,
        outcome: if changed {
            "definition_changed"
        } else {
            "scan_findings"
        }
        .to_owned(),
        duration_ms: 0,
        argument_bytes: 0,
        result_bytes: 0,
        fingerprint: Some(tool.fingerprint.as_str().to_owned()),
        arguments: None,
        detail: (!codes.is_empty()).then(|| codes.join(",")),
    };
    append(gateway, record).await;
}

impl Gateway {
    /// Audits `ctx` accepting `tool`'s live definition as its pin (`mcpgate pin --tool`):
    /// who released it, and the fingerprint now pinned.
    pub async fn audit_pin_accepted(&self, ctx: &CallContext, tool: &CatalogTool) {
        let record = AuditRecord {
            fingerprint: Some(tool.fingerprint.as_str().to_owned()),
            ..decision_record(self, ctx, &tool.canonical, "accepted", "pinned")
        };
        append(self, record).await;
    }
}

impl Gateway {
    /// Audits a user's upstream account for `server` being connected (the sign-in completed,
    /// whichever request carried it) or disconnected: who, which server, never a token.
    pub async fn audit_account(
        &self,
        key: &crate::oauth::ConnectionKey,
        request_id: &str,
        decision: AccountChange,
    ) {
        let who = Who {
            request_id,
            tenant: &key.tenant,
            user: &key.user,
            session: "",
        };
        let record = AuditRecord {
            server: clean(&key.server, MAX_FIELD_CHARS),
            ..no_call_record(self, &who, "", decision.as_str(), "ok")
        };
        append(self, record).await;
    }
}

/// What happened to a user's upstream account, as [`Gateway::audit_account`] records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccountChange {
    Connected,
    Disconnected,
    /// A user added a server of their own (`[user_servers]`).
    ServerAdded,
    /// A user removed a server of their own.
    ServerRemoved,
}

impl AccountChange {
    pub fn as_str(self) -> &'static str {
        match self {
            AccountChange::Connected => "account_connected",
            AccountChange::Disconnected => "account_disconnected",
            AccountChange::ServerAdded => "user_server_added",
            AccountChange::ServerRemoved => "user_server_removed",
        }
    }
}

/// Audits a decision on a confirmation (approved, denied, refused to another caller or for an
/// unknown id): `tool` is known only when the confirmation was found.
pub(super) async fn report_decision(
    gateway: &Gateway,
    ctx: &CallContext,
    confirmation_id: &str,
    tool: Option<&str>,
    decision: &str,
    outcome: &str,
) {
    let record = AuditRecord {
        confirmation_id: Some(clean(confirmation_id, MAX_FIELD_CHARS)),
        ..decision_record(gateway, ctx, tool.unwrap_or_default(), decision, outcome)
    };
    append(gateway, record).await;
}

/// The record of a decision `ctx` made about `tool` (`server.tool`, or empty): no call ran,
/// so no sizes, arguments or duration.
fn decision_record(
    gateway: &Gateway,
    ctx: &CallContext,
    tool: &str,
    decision: &str,
    outcome: &str,
) -> AuditRecord {
    let who = Who {
        request_id: &ctx.request_id,
        tenant: &ctx.tenant,
        user: &ctx.user,
        session: &ctx.session,
    };
    no_call_record(gateway, &who, tool, decision, outcome)
}

/// Whom a record is about.
struct Who<'a> {
    request_id: &'a str,
    tenant: &'a str,
    user: &'a str,
    session: &'a str,
}

/// A record of `who` about `tool` (`server.tool`, or empty) where no call ran.
fn no_call_record(
    gateway: &Gateway,
    who: &Who<'_>,
    tool: &str,
    decision: &str,
    outcome: &str,
) -> AuditRecord {
    let server = tool.split_once('.').map(|(s, _)| s).unwrap_or_default();
    AuditRecord {
        time: gateway.inner.clock.now(),
        request_id: clean(who.request_id, MAX_FIELD_CHARS),
        tenant: clean(who.tenant, MAX_FIELD_CHARS),
        user: clean(who.user, MAX_FIELD_CHARS),
        session: clean(who.session, MAX_FIELD_CHARS),
        server: clean(server, MAX_FIELD_CHARS),
        tool: clean(tool, MAX_FIELD_CHARS),
        decision: decision.to_owned(),
        confirmation_id: None,
        outcome: outcome.to_owned(),
        duration_ms: 0,
        argument_bytes: 0,
        result_bytes: 0,
        fingerprint: None,
        arguments: None,
        detail: None,
    }
}

async fn append(gateway: &Gateway, record: AuditRecord) {
    if let Err(err) = gateway.inner.audit.append(record).await {
        tracing::error!(error = %err, "audit record could not be written");
    }
}

/// The decision of an attempt whose caller went away: `allowed` if it had reached the
/// upstream (which may have acted on it), else `undecided`.
pub(super) fn abandoned_decision(reached_upstream: bool) -> &'static str {
    if reached_upstream {
        "allowed"
    } else {
        "undecided"
    }
}

/// Appends `record` where nothing can wait for it (a drop), in a task of its own.
pub(super) fn append_detached(audit: Arc<dyn AuditStore>, record: AuditRecord) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!("audit record could not be written: no runtime");
        return;
    };
    runtime.spawn(async move {
        if let Err(err) = audit.append(record).await {
            tracing::error!(error = %err, "audit record could not be written");
        }
    });
}

/// `allowed` once the call went to the upstream; `pending` when it waits for a
/// confirmation; `denied` otherwise.
fn decision(allowed: bool, outcome: &Result<ToolOutput, GatewayError>) -> &'static str {
    match outcome {
        _ if allowed => "allowed",
        Err(GatewayError::ConfirmationRequired { .. }) => "pending",
        _ => "denied",
    }
}

/// Escapes control characters (so a name cannot forge a log line or a terminal sequence) and
/// caps the length.
pub fn clean(text: &str, max_chars: usize) -> String {
    // Printable ASCII within the cap, what nearly every field is, needs no escaping.
    if text.len() <= max_chars && text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len().min(max_chars));
    for (i, c) in text.chars().enumerate() {
        if i == max_chars {
            out.push('…');
            break;
        }
        if c.is_control() || is_invisible(c) {
            out.push_str(&c.escape_unicode().to_string());
        } else {
            out.push(c);
        }
    }
    out
}

/// Format and bidi controls that would make a record read differently than it is.
fn is_invisible(c: char) -> bool {
    matches!(c, '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{FEFF}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped_and_length_capped() {
        assert_eq!(clean("a\nb", 10), "a\\u{a}b");
        assert_eq!(clean("x\u{202E}y", 10), "x\\u{202e}y");
        assert_eq!(clean("abcdef", 3), "abc…");
        assert_eq!(clean("abc", 3), "abc");
        assert_eq!(clean("a\u{7f}b", 10), "a\\u{7f}b");
        let printable: String = (0x20u8..0x7f).map(char::from).collect();
        assert_eq!(clean(&printable, printable.len()), printable);
    }

    #[test]
    fn a_record_names_the_caller_cleaned() {
        let ctx = CallContext {
            tenant: "acme\r\n".to_owned(),
            user: "ann\u{202E}".to_owned(),
            session: "s".repeat(MAX_FIELD_CHARS + 1),
            roles: vec!["admin".to_owned()],
            request_id: "req\x1b[2K".to_owned(),
        };
        let mut attempt = Attempt::start(&ctx, "no.such\ntool", SystemTime::now());
        let outcome = Err(GatewayError::NotFound {
            name: "no.such".to_owned(),
        });
        let record = attempt.finish(&outcome, &AuditConfig::default());
        assert_eq!(record.tenant, "acme\\u{d}\\u{a}");
        assert_eq!(record.user, "ann\\u{202e}");
        assert_eq!(record.session.chars().count(), MAX_FIELD_CHARS + 1);
        assert!(record.session.ends_with('…'));
        assert_eq!(record.request_id, "req\\u{1b}[2K");
        assert_eq!(record.tool, "no.such\\u{a}tool");
        assert_eq!(record.outcome, "not_found");
    }

    #[test]
    fn an_abandoned_attempt_says_how_far_it_got_and_keeps_no_arguments() {
        let ctx = CallContext {
            tenant: "acme".to_owned(),
            user: "ann".to_owned(),
            session: "s1".to_owned(),
            roles: Vec::new(),
            request_id: "r1".to_owned(),
        };
        let mut early = Attempt::start(&ctx, "demo.echo", SystemTime::now());
        let record = early.abandoned();
        assert_eq!(
            (record.decision.as_str(), record.outcome.as_str()),
            ("undecided", ABANDONED)
        );
        assert_eq!(
            (record.user.as_str(), record.request_id.as_str()),
            ("ann", "r1")
        );

        let mut sent = Attempt::start(&ctx, "demo.echo", SystemTime::now());
        sent.effect(Effect::Read);
        sent.arguments(&serde_json::Map::from_iter([(
            "message".to_owned(),
            "hi".into(),
        )]));
        sent.allowed();
        let record = sent.abandoned();
        assert_eq!(
            (record.decision.as_str(), record.outcome.as_str()),
            ("allowed", ABANDONED)
        );
        assert_eq!(record.arguments, None);
        assert!(record.detail.is_some_and(|d| d.contains("went away")));
    }
}
