//! The gateway against our edge-case fixtures: pagination, changing tools, a crash mid-call,
//! an endless line, a server that never answers.

use std::time::Duration;

use mcpgate::{
    config::Env,
    upstream::{ConnectOptions, Manager, ServerState},
};
use rmcp::model::CallToolRequestParams;
use serde_json::json;

use crate::support::{
    CallExt as _, WAIT, config, fixture, gateway, id, options, peak_rss_kib, wait_for,
};

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
async fn a_relist_that_finds_the_same_tools_announces_no_change() {
    let config = config(vec![fixture("shifty", "changing")]);
    let manager = Manager::start(
        config.servers.clone(),
        ConnectOptions {
            env: Env::from_process(),
            limits: config.limits.clone(),
            supervisor: options().supervisor,
            listing_tokens: None,
        },
        config.reconnect.clone(),
        config.cache.clone(),
    );
    let mut changes = manager.changes();
    let changed_to = async |changes: &mut tokio::sync::watch::Receiver<u64>, n: u64| {
        tokio::time::timeout(WAIT, changes.wait_for(|g| *g >= n))
            .await
            .expect("the manager announces the change")
            .map(|g| *g)
            .expect("the manager is running")
    };
    // The first listing is the one change of a new connection.
    assert_eq!(changed_to(&mut changes, 1).await, 1);

    let shifty = id("shifty");
    let call = async |name: &str, arguments: serde_json::Value| {
        let params = CallToolRequestParams::new(name.to_owned())
            .with_arguments(serde_json::from_value(arguments).expect("an object"));
        let result = manager
            .call_tool(&shifty, params, WAIT)
            .await
            .expect("the call");
        let text = result.content.first().and_then(|c| c.as_text());
        text.expect("a text answer").text.clone()
    };

    // Two manual re-lists of the same tools. The server's third listing is asked for only
    // after the second one is recorded, as a server is re-listed one listing at a time.
    for listings in ["2", "3"] {
        assert!(manager.refresh(&shifty));
        let start = std::time::Instant::now();
        while call("listings", json!({})).await != listings {
            assert!(start.elapsed() < WAIT, "no listing number {listings}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let seen = *changes.borrow();
    assert_eq!(seen, 1, "a listing that changed nothing was announced");

    // A real change is still announced.
    assert_eq!(
        call("mutate", json!({ "what": "add_tool" })).await,
        "mutated: add_tool"
    );
    assert_eq!(changed_to(&mut changes, 2).await, 2);
    let tools = manager.statuses()[0].tools.clone().expect("listed");
    assert!(tools.iter().any(|t| t.name == "gamma"));
    manager.shutdown().await;
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
    // The default bound (4 MiB): a line is read up to it, then the connection fails.
    let before = peak_rss_kib();
    let mut cfg = config(vec![
        fixture("flood", "endless-line"),
        fixture("fine", "paginate"),
    ]);
    cfg.reconnect.max_attempts = 0;
    let gw = gateway(cfg).await;
    let flood = gw
        .servers()
        .into_iter()
        .find(|s| s.id.as_str() == "flood")
        .expect("flood");
    assert_ne!(flood.state, ServerState::Ready);
    let error = flood.last_error.expect("an error is shown");
    assert!(error.contains("longer than 4194304 bytes"), "{error}");
    // The other server is unaffected.
    assert_eq!(
        gw.catalog().for_server(&crate::support::id("fine")).len(),
        25
    );
    // What the line cost: the bound's worth of buffer and the pipe's, not the line. Without
    // a bound the line is read until the connect deadline, gibibytes of it.
    let grew_mib = peak_rss_kib().saturating_sub(before) / 1024;
    assert!(
        grew_mib < 64,
        "the peak resident set grew by {grew_mib} MiB"
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
