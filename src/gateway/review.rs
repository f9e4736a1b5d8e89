//! The model's second opinion on tool definitions (`[scan] model_review`): a task that, after
//! each new catalog, asks the default `[llm]` model about every definition the rules passed
//! and it has no verdict on, one at a time, and rebuilds the catalog as soon as a verdict
//! flags one (see `catalog::review`). Calls never wait for it: until a verdict comes, a definition has
//! the rules' findings alone.

use std::time::Instant;

use crate::{
    agent::llm::LlmClient,
    catalog::{
        FindingCode, Severity,
        review::{self, Verdict, Verdicts},
    },
};

use super::Gateway;

/// What the reviewer needs.
pub(super) struct Reviewer {
    client: LlmClient,
    pub(super) verdicts: Verdicts,
    pub(super) blocks: bool,
}

impl Reviewer {
    /// The reviewer for `config`, when `[scan] model_review` is on (validation made sure a
    /// model is configured); `Err` when the model's client cannot be built.
    pub(super) fn new(config: &crate::config::Config) -> Result<Option<Reviewer>, String> {
        let (true, Some(llm)) = (config.scan_review.enabled, &config.llm) else {
            return Ok(None);
        };
        let client = LlmClient::new(llm.clone()).map_err(|e| e.to_string())?;
        Ok(Some(Reviewer {
            client,
            verdicts: Verdicts::default(),
            blocks: config.scan_review.blocks,
        }))
    }
}

impl Gateway {
    /// Reviews the definitions of each new catalog until the gateway stops; definitions
    /// whose review failed are asked about again once [`review::RETRY_AFTER_FAILURE`] passed,
    /// even if no catalog comes.
    pub(super) async fn review_definitions(&self) {
        let Some(reviewer) = &self.inner.review else {
            return;
        };
        let mut swaps = self.inner.swaps.subscribe();
        loop {
            let retry_at = tokio::select! {
                retry_at = self.review_catalog(reviewer) => retry_at,
                () = self.inner.cancel.cancelled() => return,
            };
            let retry = async {
                match retry_at {
                    Some(at) => tokio::time::sleep_until(at.into()).await,
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                changed = swaps.changed() => if changed.is_err() { return },
                () = retry => {}
                () = self.inner.cancel.cancelled() => return,
            }
        }
    }

    /// Asks about every definition of the current catalog that wants a verdict, rebuilding
    /// the catalog at once after each flag (a tool to quarantine must not wait for the rest);
    /// when the earliest of its definitions whose review failed may be asked about again
    /// (all of them in the future: one whose time had come was just asked).
    async fn review_catalog(&self, reviewer: &Reviewer) -> Option<Instant> {
        let catalog = self.catalog();
        let mut retry_at: Option<Instant> = None;
        for tool in catalog.tools() {
            // The rules found it high: quarantined or reported already, nothing to add.
            if tool
                .findings
                .iter()
                .any(|f| f.severity == Severity::High && f.code != FindingCode::ModelReview)
            {
                continue;
            }
            // A definition met twice in one pass (the same tool on two servers) was answered,
            // or failed, the first time: not wanted again.
            let key = tool.review_key();
            if !reviewer.verdicts.wanted(key.as_str(), Instant::now()) {
                if let Some(at) = reviewer.verdicts.retry_at(key.as_str()) {
                    retry_at = Some(retry_at.map_or(at, |earliest| earliest.min(at)));
                }
                continue;
            }
            let request = review::request(&tool.upstream);
            let answer = reviewer.client.complete(&request).await;
            // The upstream's name, cut and escaped as the audit log's fields are.
            let name = super::audit::clean(&tool.canonical, super::audit::MAX_FIELD_CHARS);
            match answer.ok().and_then(|c| review::parse(&c.content)) {
                Some(Verdict::Flagged(reason)) => {
                    tracing::warn!(tool = %name, reason = %reason,
                        "the model reviewing definitions flagged a tool");
                    reviewer
                        .verdicts
                        .set(key.as_str(), Verdict::Flagged(reason));
                    self.rebuild_catalog().await;
                }
                Some(Verdict::Clean) => reviewer.verdicts.set(key.as_str(), Verdict::Clean),
                None => {
                    // Not the error: a model server's message may quote the request.
                    tracing::warn!(tool = %name,
                        "the model reviewing definitions gave no verdict; asked again later");
                    let now = Instant::now();
                    reviewer.verdicts.failed(key.as_str(), now);
                    let at = now + review::RETRY_AFTER_FAILURE;
                    retry_at = Some(retry_at.map_or(at, |earliest| earliest.min(at)));
                }
            }
        }
        retry_at
    }
}
