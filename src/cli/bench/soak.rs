//! The soak: calls at a fixed rate for a long time through the REST API of one gateway (the
//! whole policy path, the audit log in SQLite), mixed as production traffic is: reads,
//! writes asked, approved and run with a confirmation token, calls that fail, and large
//! results. Every minute: latency percentiles, outcomes by code, the gateway's resident set
//! and open file descriptors, so that growth of any of them shows.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde_json::{Value, json};

use super::{Bench, Gateway, procs::rss_bytes, setup::Upstream, stats::percentile, targets};

/// Calls in flight at most: past this the gateway is not keeping up, and a call that would
/// start is counted as `driver_saturated` instead.
const MAX_IN_FLIGHT: usize = 4096;
/// How long the calls still in flight at the end may take: the gateway's call timeout
/// (30 s) and a margin.
const IN_FLIGHT_WAIT: Duration = Duration::from_secs(45);
/// Bytes of each large result.
const LARGE_RESULT: u64 = 256 * 1024;

/// What one scheduled call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// `echo` on a read-only server.
    Read,
    /// `echo` on a server whose `echo` is a write: asked, approved, then run with the token.
    Write,
    /// A tool that does not exist: `not_found`, expected.
    Failure,
    /// `big` of [`LARGE_RESULT`] bytes.
    Large,
}

impl Kind {
    /// One in 20 a write, one a failure, one a large result; the rest reads.
    fn of(n: u64) -> Kind {
        match n % 20 {
            0 => Kind::Write,
            1 => Kind::Failure,
            2 => Kind::Large,
            _ => Kind::Read,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Write => "write (3 requests)",
            Kind::Failure => "failure",
            Kind::Large => "large result",
        }
    }
}

/// One minute's observations.
#[derive(Default)]
struct Minute {
    latencies: BTreeMap<Kind, Vec<Duration>>,
    /// Outcomes by code: `ok`, the expected `not_found`, or anything else.
    outcomes: BTreeMap<String, u64>,
}

/// A soak's result: one row per minute.
pub struct SoakResult {
    pub rate: u64,
    pub rows: Vec<Row>,
}

pub struct Row {
    pub minute: u64,
    pub calls: u64,
    /// (kind, p50, p99, max) in milliseconds.
    pub latencies: Vec<(&'static str, f64, f64, f64)>,
    pub outcomes: BTreeMap<String, u64>,
    pub rss_kib: u64,
    pub fds: usize,
}

impl SoakResult {
    /// Calls whose outcome was neither `ok` nor the failure injected on purpose.
    pub fn unexpected(&self) -> u64 {
        self.rows
            .iter()
            .flat_map(|r| r.outcomes.iter())
            .filter(|(code, _)| !matches!(code.as_str(), "ok" | "not_found"))
            .map(|(_, n)| *n)
            .sum()
    }

    /// The report's section: the minutes as a table.
    pub fn section(&self, command: &str) -> String {
        let mut out = format!(
            "### Soak: {} calls/s for {} minutes\n\n`{command}`. One in 20 calls a write \
             (asked, approved, run with its token: three requests), one a call of a tool that \
             does not exist (`not_found`, injected), one a {} KiB result, the rest reads; \
             latencies in ms (p50 / p99 / max) of the calls that ended in that minute.\n\n\
             | minute | calls | read | write | failure | large | outcomes | RSS MiB | fds |\n\
             | ---: | ---: | --- | --- | --- | --- | --- | ---: | ---: |\n",
            self.rate,
            self.rows.len(),
            LARGE_RESULT / 1024,
        );
        for row in &self.rows {
            let cell = |kind: &str| {
                row.latencies
                    .iter()
                    .find(|(k, ..)| *k == kind)
                    .map_or("-".to_owned(), |(_, p50, p99, max)| {
                        format!("{p50:.2} / {p99:.2} / {max:.1}")
                    })
            };
            let outcomes: Vec<String> = row
                .outcomes
                .iter()
                .map(|(code, n)| format!("{code} {n}"))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {} |",
                row.minute,
                row.calls,
                cell(Kind::Read.name()),
                cell(Kind::Write.name()),
                cell(Kind::Failure.name()),
                cell(Kind::Large.name()),
                outcomes.join(", "),
                row.rss_kib as f64 / 1024.0,
                row.fds,
            );
        }
        out
    }
}

struct Driver {
    client: reqwest::Client,
    base: String,
    authorization: HeaderValue,
}

impl Driver {
    async fn post(&self, path: &str, body: &Value) -> Result<Value, String> {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .header(AUTHORIZATION, self.authorization.clone())
            .json(body)
            .send()
            .await
            .map_err(|e| format!("transport: {e}"))?;
        response.json().await.map_err(|e| format!("transport: {e}"))
    }

    /// Makes one call of `kind`; its outcome code.
    async fn call(&self, kind: Kind, n: u64) -> String {
        let call = |tool: &str, arguments: Value| json!({ "tool": tool, "arguments": arguments });
        let answer = match kind {
            Kind::Read => {
                self.post(
                    API_CALL,
                    &call("reads.echo", json!({ "message": n.to_string() })),
                )
                .await
            }
            Kind::Failure => self.post(API_CALL, &call("reads.nope", json!({}))).await,
            Kind::Large => {
                self.post(
                    API_CALL,
                    &call("reads.big", json!({ "bytes": LARGE_RESULT })),
                )
                .await
            }
            Kind::Write => self.write(n).await,
        };
        match answer {
            Ok(body) if body["ok"] == json!(true) => "ok".to_owned(),
            Ok(body) => body["code"]
                .as_str()
                .unwrap_or("unexpected_body")
                .to_owned(),
            Err(error) => {
                tracing::debug!(%error, "a soak call failed");
                "transport_error".to_owned()
            }
        }
    }

    /// A write: asked (held for confirmation), approved, run with the token.
    async fn write(&self, n: u64) -> Result<Value, String> {
        let mut call = json!({ "tool": "writes.echo", "arguments": { "message": n.to_string() } });
        let held = self.post(API_CALL, &call).await?;
        if held["code"] != json!("confirmation_required") {
            return Ok(held);
        }
        let id = held["confirmationId"].as_str().unwrap_or_default();
        let approval = self
            .post(
                &format!("/api/v1/mcp/confirmations/{id}/approve"),
                &json!({}),
            )
            .await?;
        let Some(token) = approval["confirmationToken"].as_str() else {
            return Ok(approval);
        };
        call["confirmationToken"] = json!(token);
        self.post(API_CALL, &call).await
    }
}

const API_CALL: &str = "/api/v1/mcp/tools/call";

pub async fn run(bench: &Bench) -> anyhow::Result<SoakResult> {
    let command = vec![bench.exe_str(), "fixture".into(), "bench".into()];
    let upstreams = [
        ("reads".to_owned(), Upstream::Stdio(&command)),
        ("writes".to_owned(), Upstream::StdioWrites(&command)),
    ];
    let gateway = bench
        .start_gateway("soak", &upstreams, Duration::from_secs(10))
        .await?;
    let result = drive(bench, &gateway).await;
    gateway.proc.stop().await;
    result
}

async fn drive(bench: &Bench, gateway: &Gateway) -> anyhow::Result<SoakResult> {
    let pid = gateway.proc.pid()?;
    let driver = Arc::new(Driver {
        client: targets::http_client()?,
        base: format!("http://{}", gateway.addr),
        authorization: targets::bearer(&gateway.token)?,
    });
    // At most 100,000 a second: a tick of 10 µs is already below what one loop keeps up with.
    let rate = bench.args.soak_rate.clamp(1, 100_000);
    let minutes = bench.args.soak_minutes.max(1);
    let current = Arc::new(Mutex::new(Minute::default()));
    let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT));
    let mut ticks = tokio::time::interval(Duration::from_secs(1) / u32::try_from(rate)?);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut n = 0u64;
    let mut calls_this_minute = 0u64;
    let mut minute_ends = started + Duration::from_secs(60);
    loop {
        ticks.tick().await;
        if Instant::now() >= minute_ends {
            let seen = std::mem::take(&mut *current.lock().expect("soak minute"));
            let row = row(rows.len() as u64 + 1, calls_this_minute, seen, pid)?;
            eprintln!(
                "bench: soak minute {}: {} calls, RSS {} KiB, {} fds, {:?}",
                row.minute, row.calls, row.rss_kib, row.fds, row.outcomes
            );
            rows.push(row);
            calls_this_minute = 0;
            minute_ends += Duration::from_secs(60);
            if rows.len() as u64 >= minutes {
                break;
            }
        }
        let kind = Kind::of(n);
        n += 1;
        calls_this_minute += 1;
        let Ok(permit) = in_flight.clone().try_acquire_owned() else {
            record(&current, kind, None, "driver_saturated".to_owned());
            continue;
        };
        let (driver, current) = (driver.clone(), current.clone());
        tokio::spawn(async move {
            let sent = Instant::now();
            let outcome = driver.call(kind, n).await;
            record(&current, kind, Some(sent.elapsed()), outcome);
            drop(permit);
        });
    }
    // The calls still in flight end before the gateway stops, within the gateway's call
    // timeout (30 s) and a margin; their outcomes count in the last minute, so a gateway that
    // went bad at the very end is not missed.
    let all = u32::try_from(MAX_IN_FLIGHT)?;
    let ended = tokio::time::timeout(IN_FLIGHT_WAIT, in_flight.acquire_many(all)).await;
    let mut tail = std::mem::take(&mut *current.lock().expect("soak minute"));
    if ended.is_err() {
        let open = MAX_IN_FLIGHT - in_flight.available_permits();
        *tail
            .outcomes
            .entry("driver_timeout".to_owned())
            .or_default() += open as u64;
    }
    if let Some(last) = rows.last_mut() {
        for (code, n) in tail.outcomes {
            *last.outcomes.entry(code).or_default() += n;
        }
    }
    Ok(SoakResult { rate, rows })
}

fn record(current: &Mutex<Minute>, kind: Kind, took: Option<Duration>, outcome: String) {
    let mut minute = current.lock().expect("soak minute");
    if let Some(took) = took
        && matches!(outcome.as_str(), "ok" | "not_found")
    {
        minute.latencies.entry(kind).or_default().push(took);
    }
    *minute.outcomes.entry(outcome).or_default() += 1;
}

fn row(minute: u64, calls: u64, seen: Minute, pid: u32) -> anyhow::Result<Row> {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let latencies = seen
        .latencies
        .into_iter()
        .map(|(kind, mut samples)| {
            samples.sort_unstable();
            (
                kind.name(),
                ms(percentile(&samples, 50.0)),
                ms(percentile(&samples, 99.0)),
                ms(samples.last().copied().unwrap_or_default()),
            )
        })
        .collect();
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .context("the gateway's descriptors")?
        .count();
    Ok(Row {
        minute,
        calls,
        latencies,
        outcomes: seen.outcomes,
        rss_kib: rss_bytes(pid)? / 1024,
        fds,
    })
}
