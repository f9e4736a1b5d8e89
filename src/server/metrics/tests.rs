//! Unit tests of the exposition: every line parses, labels are escaped, buckets add up,
//! label sets stay bounded.

use std::{collections::BTreeMap, time::Duration};

use super::*;
use crate::gateway::UpstreamError;

/// A sample line split into name, labels and value; `None` if it breaks the format.
/// One parsed sample: metric name, labels in order, value.
type Sample = (String, Vec<(String, String)>, f64);

fn parse_sample(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let (name, mut rest) = line.split_at(name_end);
    let name_ok = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':');
    if name.is_empty() || !name_ok {
        return None;
    }
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.chars();
        loop {
            let label: String = chars.by_ref().take_while(|c| *c != '=').collect();
            if chars.next() != Some('"') {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()? {
                    '"' => break,
                    '\\' => match chars.next()? {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        _ => return None,
                    },
                    '\n' => return None,
                    c => value.push(c),
                }
            }
            labels.push((label, value));
            match chars.next()? {
                ',' => continue,
                '}' => break,
                _ => return None,
            }
        }
        rest = chars.as_str();
    }
    let value = rest.strip_prefix(' ')?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v.parse().ok()?,
    };
    Some((name.to_owned(), labels, value))
}

/// Every line: HELP, then TYPE, then samples of that family only.
fn parse(text: &str) -> Vec<Sample> {
    let mut family: Option<(String, String)> = None;
    let mut samples = Vec::new();
    assert!(text.ends_with('\n'), "the exposition ends with a newline");
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(help) = line.strip_prefix("# HELP ") {
            let name = help.split(' ').next().expect("a name").to_owned();
            let kind = lines
                .next()
                .and_then(|l| l.strip_prefix("# TYPE "))
                .expect("TYPE");
            let (typed, kind) = kind.split_once(' ').expect("name and type");
            assert_eq!(typed, name);
            assert!(["counter", "gauge", "histogram"].contains(&kind), "{kind}");
            family = Some((name, kind.to_owned()));
            continue;
        }
        let sample = parse_sample(line).unwrap_or_else(|| panic!("bad line {line:?}"));
        let (family, kind) = family.as_ref().expect("a sample after its TYPE");
        let suffixes: &[&str] = if kind == "histogram" {
            &["_bucket", "_sum", "_count"]
        } else {
            &[""]
        };
        assert!(
            suffixes.iter().any(|s| sample.0 == format!("{family}{s}")),
            "{} outside its family {family}",
            sample.0
        );
        samples.push(sample);
    }
    samples
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v))
        })
        .map(|(_, _, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
    found[0]
}

fn timer<'a>(metrics: &'a Metrics, server: Option<&str>, tool: &str) -> CallTimer<'a> {
    metrics.in_flight.fetch_add(1, Ordering::Relaxed);
    CallTimer {
        metrics,
        server: server.map(str::to_owned),
        tool: tool.to_owned(),
        started: Instant::now(),
        finished: false,
    }
}

fn tool_error() -> Result<ToolOutput, GatewayError> {
    Err(GatewayError::ToolError {
        message: "no".into(),
    })
}

#[test]
fn the_exposition_parses_and_counts_calls() {
    let metrics = Metrics::default();
    let ok = Ok(ToolOutput {
        tool: "demo.echo".into(),
        server: "demo".into(),
        content: vec![],
        structured: None,
        meta: None,
        truncated: false,
    });
    timer(&metrics, Some("demo"), "demo.echo").finish(&ok);
    timer(&metrics, Some("demo"), "demo.echo").finish(&ok);
    timer(&metrics, Some("demo"), "demo.echo").finish(&tool_error());
    timer(&metrics, None, OTHER_TOOL).finish(&Err(GatewayError::NotFound { name: "x".into() }));
    drop(timer(&metrics, Some("demo"), "demo.echo"));
    let open = timer(&metrics, Some("demo"), "demo.echo");
    metrics.decided(Decision::Approved, &Ok::<(), GatewayError>(()));
    metrics.decided(
        Decision::Denied,
        &Err::<(), _>(GatewayError::ConfirmationNotFound),
    );
    metrics.decided(
        Decision::Denied,
        &Err::<(), _>(GatewayError::StoreUnavailable { what: "x" }),
    );
    metrics.reload(false);
    let upstreams = [
        ("demo".to_owned(), ServerState::Ready),
        ("web".to_owned(), ServerState::Failed),
    ];
    let samples = parse(&metrics.render_with(&upstreams, 7));

    let calls = "mcpgate_tool_calls_total";
    let demo_echo = [("server", "demo"), ("tool", "demo.echo")];
    let with = |outcome| [demo_echo[0], demo_echo[1], ("outcome", outcome)];
    assert_eq!(value(&samples, calls, &with("ok")), 2.0);
    assert_eq!(value(&samples, calls, &with("tool_error")), 1.0);
    assert_eq!(value(&samples, calls, &with("cancelled")), 1.0);
    let unknown = [("server", ""), ("tool", "other"), ("outcome", "not_found")];
    assert_eq!(value(&samples, calls, &unknown), 1.0);
    assert_eq!(value(&samples, "mcpgate_tool_calls_in_flight", &[]), 1.0);
    assert_eq!(
        value(
            &samples,
            "mcpgate_upstream_state",
            &[("server", "demo"), ("state", "ready")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "mcpgate_upstream_state",
            &[("server", "demo"), ("state", "failed")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "mcpgate_upstream_state",
            &[("server", "web"), ("state", "failed")]
        ),
        1.0
    );
    assert_eq!(value(&samples, "mcpgate_catalog_tools", &[]), 7.0);
    let decisions = "mcpgate_confirmations_total";
    assert_eq!(value(&samples, decisions, &[("decision", "approved")]), 1.0);
    assert_eq!(value(&samples, decisions, &[("decision", "refused")]), 1.0);
    assert_eq!(value(&samples, decisions, &[("decision", "denied")]), 0.0);
    let reloads = "mcpgate_config_reloads_total";
    assert_eq!(value(&samples, reloads, &[("result", "rejected")]), 1.0);
    assert_eq!(value(&samples, reloads, &[("result", "applied")]), 0.0);
    drop(open);
    let samples = parse(&metrics.render_with(&upstreams, 7));
    assert_eq!(value(&samples, "mcpgate_tool_calls_in_flight", &[]), 0.0);
}

#[test]
fn buckets_are_cumulative_and_end_at_the_count() {
    let metrics = Metrics::default();
    for seconds in [0.001, 0.2, 0.2, 3.0, 500.0] {
        metrics
            .lock()
            .latency
            .entry("demo".into())
            .or_default()
            .observe(seconds);
    }
    let samples = parse(&metrics.render_with(&[], 0));
    let buckets: Vec<(f64, f64)> = samples
        .iter()
        .filter(|(n, _, _)| n == "mcpgate_tool_call_duration_seconds_bucket")
        .map(|(_, labels, v)| {
            let le = &labels.iter().find(|(k, _)| k == "le").expect("le").1;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("le")
            };
            (le, *v)
        })
        .collect();
    assert_eq!(buckets.len(), LATENCY_BUCKETS.len() + 1);
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{buckets:?}"
    );
    let at = |le: f64| buckets.iter().find(|b| b.0 == le).expect("bucket").1;
    assert_eq!(
        (at(0.005), at(0.25), at(5.0), at(120.0)),
        (1.0, 3.0, 4.0, 4.0)
    );
    assert_eq!(at(f64::INFINITY), 5.0);
    let count = value(
        &samples,
        "mcpgate_tool_call_duration_seconds_count",
        &[("server", "demo")],
    );
    let sum = value(
        &samples,
        "mcpgate_tool_call_duration_seconds_sum",
        &[("server", "demo")],
    );
    assert_eq!(count, 5.0);
    assert!((sum - 503.401).abs() < 1e-9, "{sum}");
}

#[test]
fn label_values_are_escaped() {
    let metrics = Metrics::default();
    let tool = "odd.a\"b\\c\nd";
    timer(&metrics, Some("odd"), tool).finish(&tool_error());
    let text = metrics.render_with(&[], 0);
    assert!(text.contains(r#"tool="odd.a\"b\\c\nd""#), "{text}");
    let samples = parse(&text);
    let labels = [("server", "odd"), ("tool", tool), ("outcome", "tool_error")];
    assert_eq!(value(&samples, "mcpgate_tool_calls_total", &labels), 1.0);
}

#[test]
fn series_past_the_cap_count_as_other() {
    let metrics = Metrics::default();
    {
        let mut series = metrics.lock();
        for i in 0..MAX_CALL_SERIES {
            series
                .calls
                .insert(("s".into(), format!("s.t{i}"), "ok"), 1);
        }
    }
    timer(&metrics, Some("s"), "s.t0").finish(&tool_error());
    timer(&metrics, Some("s"), "s.fresh").finish(&tool_error());
    timer(&metrics, Some("s"), "s.t1").finish(&Ok(ToolOutput {
        tool: "s.t1".into(),
        server: "s".into(),
        content: vec![],
        structured: None,
        meta: None,
        truncated: false,
    }));
    let series = metrics.lock();
    let key = |tool: &str, outcome| ("s".to_owned(), tool.to_owned(), outcome);
    assert_eq!(
        series.calls.get(&key("s.t1", "ok")),
        Some(&2),
        "existing series still count"
    );
    assert_eq!(series.calls.get(&key("other", "tool_error")), Some(&2));
    assert!(!series.calls.contains_key(&key("s.fresh", "tool_error")));
}

#[test]
fn every_gateway_code_is_a_listed_outcome() {
    let upstream = |source| GatewayError::Upstream {
        server: "s".into(),
        source,
    };
    let errors = [
        GatewayError::NotFound { name: "x".into() },
        GatewayError::InvalidArguments { reason: "x".into() },
        GatewayError::Quarantined {
            tool: "x".into(),
            reason: "x".into(),
        },
        GatewayError::PendingReview { tool: "x".into() },
        GatewayError::ConfirmationRequired {
            confirmation_id: "c".into(),
            tool: "x".into(),
            args_hash: "h".into(),
            expires_at: std::time::UNIX_EPOCH,
        },
        GatewayError::ConfirmationInvalid { reason: "x" },
        GatewayError::ConfirmationNotFound,
        GatewayError::LimitExceeded {
            limit: "x".into(),
            retry_after: None,
        },
        GatewayError::ToolError {
            message: "x".into(),
        },
        GatewayError::ResultTooLarge { size: 2, limit: 1 },
        GatewayError::Timeout {
            after: Duration::from_secs(1),
        },
        GatewayError::StoreUnavailable { what: "x" },
        upstream(UpstreamError::Connect("x".into())),
        upstream(UpstreamError::ConnectTimeout {
            after: Duration::from_secs(1),
        }),
        upstream(UpstreamError::Handshake("x".into())),
        upstream(UpstreamError::Framing("x".into())),
        upstream(UpstreamError::Unavailable {
            state: ServerState::Failed,
            last_error: None,
        }),
        upstream(UpstreamError::ConnectionLost),
        upstream(UpstreamError::Timeout {
            after: Duration::from_secs(1),
        }),
        upstream(UpstreamError::Rpc {
            code: 1,
            message: "x".into(),
        }),
        upstream(UpstreamError::HttpStatus { status: 502 }),
        upstream(UpstreamError::Protocol("x".into())),
        upstream(UpstreamError::InputUnanswered { reason: "x".into() }),
        upstream(UpstreamError::InputRequired(Box::new(
            rmcp::model::InputRequiredResult::from_request_state("s"),
        ))),
    ];
    let mut seen = BTreeMap::new();
    for err in &errors {
        assert_eq!(outcome_label(err.code()), err.code(), "{err}");
        seen.insert(err.code(), ());
    }
    assert_eq!(outcome_label("brand_new_code"), "other");
    // Only the server's own labels are left over: the list holds no stale code.
    let extra: Vec<_> = OUTCOMES.iter().filter(|o| !seen.contains_key(*o)).collect();
    assert_eq!(
        extra,
        [
            &"ok",
            &"cancelled",
            &"denied_by_user",
            &"invalid_json_arguments",
            &"other"
        ]
    );
    let requested = Metrics::default();
    timer(&requested, Some("s"), "s.w").finish(&Err(errors[4].clone()));
    assert_eq!(requested.lock().confirmations.get("requested"), Some(&1));
}
