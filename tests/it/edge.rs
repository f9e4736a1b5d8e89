//! The gateway against our edge-case fixtures: pagination, changing tools, a crash mid-call,
//! an endless line, a server that never answers.

use std::time::Duration;

use mcpgate::upstream::ServerState;
use serde_json::json;

use crate::support::{CallExt as _, config, fixture, gateway, wait_for};

#[tokio::test]
async fn lists_every_page() {
    let gw = gateway(config(vec![fixture("pages", "paginate")])).await;
    let catalog = gw.catalog();
    assert_eq!(catalog.len(), 25);
    assert!(catalog.by_canonical("pages.tool_00").is_some());
    assert!(catalog.by_canonical("pages.tool_24").is_some());
    gw.shutdown().await;
}

#[tokio::test]
async fn list_changed_swaps_in_a_new_snapshot() {
    let gw = gateway(config(vec![fixture("shifty", "changing")])).await;
    let before = gw.catalog();
    let alpha_before = before
        .by_canonical("shifty.alpha")
        .expect("alpha")
        .fingerprint
        .clone();
    assert!(before.by_canonical("shifty.gamma").is_none());

    gw.call("shifty.mutate", json!({ "what": "add_tool" }))
        .await
        .expect("mutate");
    let after = wait_for("gamma to appear", || {
        let c = gw.catalog();
        c.by_canonical("shifty.gamma").is_some().then_some(c)
    })
    .await;
    // The old snapshot is untouched: snapshots are immutable.
    assert!(before.by_canonical("shifty.gamma").is_none());
    assert_eq!(
        after
            .by_canonical("shifty.alpha")
            .expect("alpha")
            .fingerprint,
        alpha_before
    );

    gw.call("shifty.mutate", json!({ "what": "nested" }))
        .await
        .expect("mutate");
    let changed = wait_for("alpha's fingerprint to change", || {
        let c = gw.catalog();
        let fp = c.by_canonical("shifty.alpha")?.fingerprint.clone();
        (fp != alpha_before).then_some(fp)
    })
    .await;
    assert_ne!(changed, alpha_before);
    gw.shutdown().await;
}

#[tokio::test]
async fn crash_mid_call_is_typed_and_reconnects() {
    let gw = gateway(config(vec![fixture("crashy", "crashy")])).await;
    let err = gw
        .call("crashy.crash", json!({}))
        .await
        .expect_err("the server dies");
    assert_eq!(err.code(), "upstream_connection_lost", "{err}");
    wait_for("reconnect", || {
        let s = gw.servers().into_iter().next()?;
        (s.state == ServerState::Ready && !s.stale).then_some(())
    })
    .await;
    let echo = gw
        .call("crashy.echo", json!({ "message": "back" }))
        .await
        .expect("echo");
    assert!(echo.text().contains("back"));
    gw.shutdown().await;
}

#[tokio::test]
async fn endless_line_fails_the_connection_with_bounded_memory() {
    let mut cfg = config(vec![
        fixture("flood", "endless-line"),
        fixture("fine", "paginate"),
    ]);
    cfg.limits.max_line_bytes = 64 * 1024;
    cfg.reconnect.max_attempts = 0;
    let gw = gateway(cfg).await;
    let flood = gw
        .servers()
        .into_iter()
        .find(|s| s.id.as_str() == "flood")
        .expect("flood");
    assert_ne!(flood.state, ServerState::Ready);
    let error = flood.last_error.expect("an error is shown");
    assert!(error.contains("longer than 65536 bytes"), "{error}");
    // The other server is unaffected.
    assert_eq!(
        gw.catalog().for_server(&crate::support::id("fine")).len(),
        25
    );
    gw.shutdown().await;
}

#[tokio::test]
async fn a_silent_server_hits_its_deadline_and_others_are_listed() {
    let mut silent = fixture("silent", "silent");
    silent.connect_timeout = Some(Duration::from_millis(1500));
    let mut cfg = config(vec![silent, fixture("fine", "paginate")]);
    cfg.reconnect.max_attempts = 0;
    let gw = gateway(cfg).await;
    let status = gw
        .servers()
        .into_iter()
        .find(|s| s.id.as_str() == "silent")
        .expect("silent");
    assert_eq!(status.state, ServerState::Failed);
    assert!(
        status
            .last_error
            .expect("error")
            .contains("did not complete within")
    );
    assert_eq!(gw.catalog().len(), 25);
    gw.shutdown().await;
}
