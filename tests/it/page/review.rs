//! Releasing a changed tool from the page: the pin file holds older definitions of two demo
//! tools; the operator reviews one side by side and accepts it. Only that tool's pin is
//! rewritten, the other stays quarantined, and the release is audited as the operator.

use mcpgate::{
    catalog::{Catalog, Fingerprint, Pins, ServerTools},
    config::{PinsConfig, ServerId},
    gateway::{GatewayError, PinError},
    store::AuditQuery,
};
use serde_json::json;

use super::{PageService, jwt, run_script, servers};
use crate::support::{self, ctx};

#[tokio::test]
async fn a_changed_tool_is_reviewed_side_by_side_and_released_alone() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lock = dir.path().join("mcpgate.lock");
    let mut config = support::config(servers());
    config.pins = PinsConfig { file: lock.clone() };
    let gateway = support::gateway(config).await;

    // The file as a reviewer wrote it earlier: every tool as it is, except two demo tools
    // whose reviewed descriptions were shorter.
    let live = gateway.catalog();
    let mut pins = Pins::from_catalog(&live);
    let older: Vec<_> = [("time_now", "Tells the time."), ("echo", "Echoes.")]
        .iter()
        .map(|(name, description)| {
            let tool = live
                .by_canonical(&format!("demo.{name}"))
                .expect("a demo tool");
            let mut old = tool.upstream.clone();
            old.description = Some((*description).to_owned().into());
            old
        })
        .collect();
    let demo = ServerId::new("demo").expect("id");
    let reviewed = Catalog::build(vec![ServerTools::new(demo.clone(), older, false)]);
    for tool in reviewed.tools() {
        pins.pin(tool);
    }
    pins.write(&lock).expect("the pin file is written");
    let old_echo = pins.get(&demo, "echo").expect("pinned").to_owned();
    gateway.set_pins(Pins::load(&lock).expect("reads")).await;
    for tool in ["demo.time_now", "demo.echo"] {
        let refused = gateway.call_tool(&ctx(), tool, json!({}), None).await;
        assert!(
            matches!(refused, Err(GatewayError::Quarantined { .. })),
            "{tool}: {refused:?}"
        );
    }

    let service = PageService::start(gateway.clone()).await;
    run_script(
        "review.mjs",
        &[
            ("MCPGATE_URL", &service.base),
            ("MCPGATE_TOKEN", &jwt("ada", &["admin"])),
            ("MCPGATE_USER_TOKEN", &jwt("bob", &[])),
        ],
        &[
            "the pinned and the live definition show side by side, the change marked",
            "keeping it blocked changes nothing",
            "accepting releases that one tool only",
            "a user without the admin role is told who can release a tool",
        ],
    )
    .await;

    // On disk: time_now pinned at its live definition (kept beside it), echo untouched.
    let written = Pins::load(&lock)
        .expect("reads")
        .expect("the file is there");
    let time_now = live.by_canonical("demo.time_now").expect("listed");
    assert_eq!(
        written.get(&demo, "time_now"),
        Some(time_now.fingerprint.as_str())
    );
    let kept = written
        .definition(time_now.fingerprint.as_str())
        .expect("the accepted definition is kept");
    assert_eq!(Fingerprint::of_definition(kept), time_now.fingerprint);
    assert_eq!(written.get(&demo, "echo"), Some(old_echo.as_str()));
    gateway
        .call_tool(&ctx(), "demo.time_now", json!({}), None)
        .await
        .expect("released");
    let still = gateway
        .call_tool(&ctx(), "demo.echo", json!({ "message": "x" }), None)
        .await;
    assert!(
        matches!(still, Err(GatewayError::Quarantined { .. })),
        "{still:?}"
    );
    // Audited as the operator who accepted it, with the fingerprint now pinned.
    let records = gateway
        .audit_store()
        .query(AuditQuery {
            tool: Some("demo.time_now".into()),
            outcome: Some("pinned".into()),
            ..Default::default()
        })
        .await
        .expect("audit");
    let released: Vec<_> = records
        .iter()
        .map(|(_, r)| {
            (
                r.user.as_str(),
                r.decision.as_str(),
                r.fingerprint.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        released,
        [("ada", "accepted", Some(time_now.fingerprint.as_str()))]
    );
    service.stop().await;
}

/// Accepting what was not reviewed is refused: a fingerprint other than the live one (the tool
/// changed again after it was shown), a tool not listed, or a gateway without a pin file.
#[tokio::test]
async fn only_the_reviewed_live_definition_is_accepted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lock = dir.path().join("mcpgate.lock");
    let mut config = support::config(servers());
    config.pins = PinsConfig { file: lock.clone() };
    let gateway = support::gateway(config).await;
    let stale = "0".repeat(64);
    let refused = gateway.accept_pin(&ctx(), "demo.echo", Some(&stale)).await;
    assert!(
        matches!(refused, Err(PinError::Changed { .. })),
        "{refused:?}"
    );
    assert!(!lock.exists(), "nothing was written");
    let unknown = gateway.accept_pin(&ctx(), "demo.nope", None).await;
    assert!(
        matches!(unknown, Err(PinError::UnknownTool(_))),
        "{unknown:?}"
    );
    let live = gateway
        .pin_review("demo.echo")
        .expect("listed")
        .live_fingerprint;
    let accepted = gateway
        .accept_pin(&ctx(), "demo.echo", Some(&live))
        .await
        .expect("the reviewed definition is accepted");
    assert_eq!((accepted.fingerprint, accepted.previous), (live, None));
    gateway.shutdown().await;

    let gateway = support::gateway(support::config(servers())).await;
    let no_file = gateway.accept_pin(&ctx(), "demo.echo", None).await;
    assert!(matches!(no_file, Err(PinError::NoPinFile)), "{no_file:?}");
    gateway.shutdown().await;
}
