//! What `config check` approves must run: every scheme, address and flag combination of an
//! HTTP server's URL, validated as a file is, then connected to real loopback servers
//! (server-everything's Streamable HTTP and legacy SSE modes). Validation and connection apply
//! one rule, so they cannot drift apart.

use mcpgate::config::{self, Env};

use crate::support::{self, CallExt as _, everything_http};

/// The outcome `config check` must give a combination, and what running it then does.
#[derive(Debug, PartialEq, Eq)]
enum Expect {
    /// Accepted, and `echo` answers through it.
    Runs,
    /// Refused, with this in the problem.
    Refused(&'static str),
}

/// Validates `server`'s table as a configuration file (`config check`'s path); the config.
fn validate(table: &str) -> Result<config::Config, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let text =
        format!("[state]\ndatabase = \"memory\"\n\n[servers.web]\n{table}\nconfirm = \"none\"\n");
    std::fs::write(dir.path().join("mcpgate.toml"), text).expect("written");
    config::load(
        Some(std::path::Path::new("mcpgate.toml")),
        dir.path(),
        &Env::default(),
        &support::mcpgate_bin(),
    )
    .map(|loaded| loaded.config)
    .map_err(|err| err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_plain_http_case_config_check_accepts_connects_on_loopback() {
    let streamable = everything_http("streamableHttp").await;
    let sse = everything_http("sse").await;
    let targets = [
        (streamable.port, "/mcp", ["auto", "streamable-http"]),
        (sse.port, "/sse", ["auto", "sse"]),
    ];
    // (flags, what they must give on a loopback http:// URL)
    let flag_cases = [
        ("allow_private = true", Expect::Runs),
        ("allow_private = true\nallow_http = true", Expect::Runs),
        (
            "allow_http = true",
            Expect::Refused("points at a loopback address"),
        ),
        ("", Expect::Refused("uses plain http")),
    ];
    let mut ran = 0;
    for (port, path, transports) in targets {
        for host in ["127.0.0.1", "localhost"] {
            for transport in transports {
                for (flags, expect) in &flag_cases {
                    let table = format!(
                        "url = \"http://{host}:{port}{path}\"\ntransport = \"{transport}\"\n{flags}"
                    );
                    let case = table.replace('\n', "; ");
                    match (validate(&table), expect) {
                        (Ok(config), Expect::Runs) => {
                            let gateway = support::gateway(config).await;
                            let echoed = gateway
                                .call("web.echo", serde_json::json!({ "message": "plain" }))
                                .await;
                            gateway.shutdown().await;
                            let output = echoed.unwrap_or_else(|err| {
                                panic!(
                                    "{case}: config check accepts it, but the call failed: {err}"
                                )
                            });
                            assert!(
                                output.text().contains("plain"),
                                "{case}: {:?}",
                                output.text()
                            );
                            ran += 1;
                        }
                        (Err(problems), Expect::Refused(why)) => {
                            assert!(problems.contains(why), "{case}: {problems}");
                        }
                        (Ok(_), Expect::Refused(why)) => {
                            panic!("{case}: config check accepts it; expected a refusal ({why})")
                        }
                        (Err(problems), Expect::Runs) => {
                            panic!("{case}: expected to run, config check refuses: {problems}")
                        }
                    }
                }
            }
        }
    }
    assert_eq!(ran, 16, "every accepted case ran");
}
