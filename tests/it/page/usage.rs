//! The Usage tab in Chromium over a month of seeded records: the Rust side writes audit
//! records and chat turns' model use a day apart, the script reads the charts.

use std::time::{Duration, SystemTime};

use mcpgate::store::{AuditRecord, ModelUse};

use super::{PageService, jwt, run_script, servers};
use crate::support;

fn record(at: SystemTime, user: &str, tool: &str, outcome: &str, ms: u64) -> AuditRecord {
    AuditRecord {
        time: at,
        request_id: "seeded".into(),
        tenant: "local".into(),
        user: user.into(),
        session: "s".into(),
        server: tool.split('.').next().unwrap_or_default().into(),
        tool: tool.into(),
        decision: "allowed".into(),
        confirmation_id: None,
        outcome: outcome.into(),
        duration_ms: ms,
        argument_bytes: 10,
        result_bytes: 200,
        fingerprint: None,
        arguments: None,
        detail: None,
    }
}

#[tokio::test]
async fn the_usage_tab_charts_a_seeded_month() {
    let gateway = support::gateway(support::config(servers())).await;
    let audit = gateway.audit_store().clone();
    let usage = gateway.usage_store().clone();
    // An hour before the top of this hour, then a day apart: thirty days, each with calls.
    let now = SystemTime::now();
    for day in 0..30u64 {
        let at = now - Duration::from_secs(day * 86_400 + 3_600);
        for i in 0..(4 + day % 3) {
            audit
                .append(record(at, "ada", "demo.echo", "ok", 5 + i))
                .await
                .expect("seeded");
        }
        audit
            .append(record(at, "bo", "slow.sleep", "ok", 300))
            .await
            .expect("seeded");
        if day % 4 == 0 {
            let failed = record(at, "bo", "slow.sleep", "timeout", 30_000);
            audit.append(failed).await.expect("seeded");
        }
        for (model, prompt) in [("big-model", 9_000), ("small-model", 2_000)] {
            usage
                .record_model_use(&ModelUse {
                    time: at,
                    tenant: "local".into(),
                    user: "ada".into(),
                    session: "s".into(),
                    model: model.into(),
                    requests: 2,
                    prompt_tokens: prompt,
                    completion_tokens: 500,
                    cached_tokens: 0,
                    cost_micros: prompt * 3,
                })
                .await
                .expect("seeded");
        }
    }
    let service = PageService::start(gateway).await;
    run_script(
        "usage.mjs",
        &[
            ("MCPGATE_URL", &service.base),
            ("MCPGATE_TOKEN", &jwt("ada", &["admin"])),
        ],
        &[
            "the totals and four charts show",
            "every day of the month has its column",
            "top tools, users and the cost per model name what was used",
            "a shorter range asks again",
        ],
    )
    .await;
    service.stop().await;
}
