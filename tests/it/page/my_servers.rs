//! A user's own servers in the page (tests/browser/my_servers.mjs): hidden where the operator
//! has not enabled them; added with an API key, a tool marked read-only, removed. The gateway
//! side: the key reached the server, the audit has the user's records, and the key is in no
//! response the page received (the script checks the page itself).

use mcpgate::gateway::Gateway;

use super::{PageService, jwt, run_script, servers};
use crate::{support, user_servers::KeyedUpstream};

async fn gateway(enabled: bool) -> Gateway {
    let mut config = support::config(servers());
    if enabled {
        support::with_user_servers(&mut config);
    }
    support::gateway(config).await
}

#[tokio::test]
async fn a_user_adds_marks_and_removes_a_server_of_their_own() {
    let key = format!("page-key-{}", mcpgate::digest::random_hex(8));
    let upstream = KeyedUpstream::start(&key).await;
    let off = PageService::start(gateway(false).await).await;
    let on = PageService::start(gateway(true).await).await;
    let token = jwt("ada", &["admin"]);
    run_script(
        "my_servers.mjs",
        &[
            ("MCPGATE_URL", &on.base),
            ("MCPGATE_OFF_URL", &off.base),
            ("MCPGATE_TOKEN", &token),
            ("MCPGATE_UPSTREAM", &upstream.url),
            ("MCPGATE_KEY", &key),
        ],
        &[
            "without the feature the page offers no server of your own",
            "a server is added with its key, which never shows again",
            "a tool is marked read-only",
            "the server is removed",
        ],
    )
    .await;
    assert!(upstream.accepted() > 0, "the key reached the server");
    let records = on
        .gateway
        .audit_store()
        .query(mcpgate::store::AuditQuery {
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("the audit answers");
    let decisions: Vec<(&str, &str)> = records
        .iter()
        .filter(|(_, r)| r.server == "user-notes")
        .map(|(_, r)| (r.user.as_str(), r.decision.as_str()))
        .collect();
    assert!(
        decisions.contains(&("ada", "user_server_added")),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("ada", "user_server_removed")),
        "{decisions:?}"
    );
    off.stop().await;
    on.stop().await;
}
