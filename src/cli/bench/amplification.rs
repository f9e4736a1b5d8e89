//! Resource amplification, as Envoy's threat model defines it: an input that costs the
//! gateway 100 times its size in memory, or 100 times the CPU its size should, is a
//! vulnerability. For each kind of input a caller can send (REST and MCP calls whose
//! arguments are a long string, escapes, deep nesting, wide objects, many small values,
//! long numbers; a JSON-RPC batch; a header block at hyper's bounds; a write whose arguments a
//! pending confirmation keeps), [`ROUNDS`] rounds of [`AT_ONCE`] such requests at once go to
//! a gateway of its own (a fresh one per kind: memory an allocator kept from an earlier kind
//! would hide a later kind's growth). Measured: the growth of its peak resident set over the
//! resident set before (after one warm-up request, the peak reset by `/proc/PID/clear_refs`),
//! against the bytes that were in flight at once; and its CPU per input byte, against the
//! plainest input of the same size (a long string argument), which is the cost of reading
//! that many bytes at all.

use std::{fmt::Write as _, time::Duration};

use anyhow::Context as _;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};

use super::{
    Bench, Gateway,
    procs::{cpu_time, rss_bytes},
    setup::Upstream,
    targets,
};

/// Requests of one kind in flight at once.
const AT_ONCE: usize = 16;
/// Rounds of [`AT_ONCE`] requests per kind: at least [`MIN_ROUNDS`], then more until the
/// gateway spent [`MIN_CPU`] on the kind (CPU time is counted in 10 ms ticks), at most
/// [`MAX_ROUNDS`].
const MIN_ROUNDS: usize = 8;
const MAX_ROUNDS: usize = 2_000;
const MIN_CPU: Duration = Duration::from_secs(1);
/// About the size of each body: under the default `max_argument_bytes` (256 KiB), so that
/// calls go the whole way (validated, held for a confirmation, sent upstream).
const SIZE: usize = 240 * 1024;
/// The bound both ratios are held to.
pub const LIMIT: f64 = 100.0;
/// The protocol version of the MCP session the `/mcp` kinds use.
const MCP_VERSION: &str = "2025-11-25";

/// Where a kind's requests go.
#[derive(Clone, Copy)]
enum Route {
    /// `POST /api/v1/mcp/tools/call`.
    Rest,
    /// `POST /mcp`, in a session.
    Mcp,
}

/// One kind of input.
struct Kind {
    name: &'static str,
    route: Route,
    /// The body.
    body: fn() -> Vec<u8>,
    /// Headers besides the usual ones.
    headers: fn() -> Vec<(String, String)>,
}

fn none() -> Vec<(String, String)> {
    Vec::new()
}

/// A REST call of `tool` with `arguments` (raw JSON).
fn rest(tool: &str, arguments: &str) -> Vec<u8> {
    format!(r#"{{"tool":"{tool}","arguments":{arguments}}}"#).into_bytes()
}

/// `n` copies of `item`, comma-separated, in brackets.
fn array_of(item: &str, n: usize) -> String {
    let mut out = String::with_capacity(n * (item.len() + 1) + 2);
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        out.push_str(item);
    }
    out.push(']');
    out
}

/// How many `item`s fill [`SIZE`].
fn fill(item: &str) -> usize {
    SIZE / (item.len() + 1)
}

fn flat() -> Vec<u8> {
    rest(
        "a.echo",
        &format!(r#"{{"message":"{}"}}"#, "x".repeat(SIZE)),
    )
}

fn escapes() -> Vec<u8> {
    rest(
        "a.echo",
        &format!(r#"{{"message":"{}"}}"#, "\\u00e9\\n".repeat(SIZE / 8)),
    )
}

/// Arrays nested 120 deep (under serde_json's recursion bound of 128), side by side.
fn deep() -> Vec<u8> {
    let one = format!("{}{}", "[".repeat(120), "]".repeat(120));
    let extra = array_of(&one, fill(&one));
    rest(
        "a.echo",
        &format!(r#"{{"message":"deep","extra":{extra}}}"#),
    )
}

fn wide() -> Vec<u8> {
    let n = SIZE / 16;
    let mut object = String::with_capacity(SIZE + 64);
    object.push_str(r#"{"message":"wide""#);
    for i in 0..n {
        let _ = write!(object, r#","k{i:08}":1"#);
    }
    object.push('}');
    rest("a.echo", &object)
}

fn small_values() -> Vec<u8> {
    let extra = array_of(r#""a""#, fill(r#""a""#));
    rest(
        "a.echo",
        &format!(r#"{{"message":"many","extra":{extra}}}"#),
    )
}

fn numbers() -> Vec<u8> {
    let number = "1.2345678901234567890123456789e-300";
    let extra = array_of(number, fill(number));
    rest(
        "a.echo",
        &format!(r#"{{"message":"numbers","extra":{extra}}}"#),
    )
}

/// A write: held for a confirmation, which keeps its arguments until approved or expired.
fn held_write() -> Vec<u8> {
    rest(
        "w.echo",
        &format!(r#"{{"message":"{}"}}"#, "x".repeat(SIZE)),
    )
}

fn mcp_call() -> Vec<u8> {
    json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": { "name": "a.echo", "arguments": { "message": "x".repeat(SIZE) } } })
    .to_string()
    .into_bytes()
}

fn mcp_batch() -> Vec<u8> {
    let ping = r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#;
    array_of(ping, fill(ping)).into_bytes()
}

/// A small call under a header block at hyper's bounds: 90 headers of 4 KiB.
fn header_block() -> Vec<(String, String)> {
    (0..90)
        .map(|i| (format!("x-filler-{i}"), "h".repeat(4096)))
        .collect()
}

fn small_call() -> Vec<u8> {
    rest("a.echo", r#"{"message":"small"}"#)
}

const KINDS: &[Kind] = &[
    Kind {
        name: "a long string (REST)",
        route: Route::Rest,
        body: flat,
        headers: none,
    },
    Kind {
        name: "escapes (REST)",
        route: Route::Rest,
        body: escapes,
        headers: none,
    },
    Kind {
        name: "arrays 120 deep (REST)",
        route: Route::Rest,
        body: deep,
        headers: none,
    },
    Kind {
        name: "an object of 15,360 keys (REST)",
        route: Route::Rest,
        body: wide,
        headers: none,
    },
    Kind {
        name: "61,440 small strings (REST)",
        route: Route::Rest,
        body: small_values,
        headers: none,
    },
    Kind {
        name: "long numbers (REST)",
        route: Route::Rest,
        body: numbers,
        headers: none,
    },
    Kind {
        name: "a write held for confirmation (REST)",
        route: Route::Rest,
        body: held_write,
        headers: none,
    },
    Kind {
        name: "a long string (MCP)",
        route: Route::Mcp,
        body: mcp_call,
        headers: none,
    },
    Kind {
        name: "a JSON-RPC batch of 5,994 pings (MCP)",
        route: Route::Mcp,
        body: mcp_batch,
        headers: none,
    },
    Kind {
        name: "90 headers of 4 KiB (REST)",
        route: Route::Rest,
        body: small_call,
        headers: header_block,
    },
];

/// What one kind cost.
pub struct Row {
    pub name: &'static str,
    /// Bytes of one request (body and the extra headers).
    pub input: usize,
    /// Statuses answered, with their counts.
    pub statuses: Vec<(u16, usize)>,
    /// Growth of the peak resident set over the resident set before the kind.
    pub peak_growth: u64,
    /// `peak_growth` over the bytes of [`AT_ONCE`] requests.
    pub memory_ratio: f64,
    /// CPU per request.
    pub cpu: Duration,
    /// CPU per input byte, over the plainest kind's.
    pub cpu_ratio: f64,
}

pub struct AmplificationResult {
    pub rows: Vec<Row>,
}

impl AmplificationResult {
    /// The worst of each ratio.
    pub fn worst(&self) -> (f64, f64) {
        self.rows.iter().fold((0.0, 0.0), |(memory, cpu), row| {
            (memory.max(row.memory_ratio), cpu.max(row.cpu_ratio))
        })
    }

    pub fn section(&self) -> String {
        let mut out = format!(
            "### Amplification\n\nRounds of {AT_ONCE} requests at once per kind (at least \
             {MIN_ROUNDS}, and until the gateway spent {} s of CPU on it), each \
             about {} KiB, to a gateway of its own (the bench fixture behind it; `w.echo` a \
             write). \
             Memory: the growth of the gateway's peak resident set over its resident set \
             before, against the {AT_ONCE} requests' bytes. CPU: per input byte, against the \
             first kind's (the cost of reading that many bytes at all). Both held to \
             {LIMIT:.0}×.\n\n\
             | input | bytes | answers | peak growth MiB | memory × | CPU per request ms | \
             CPU × |\n| --- | ---: | --- | ---: | ---: | ---: | ---: |\n",
            MIN_CPU.as_secs(),
            SIZE / 1024
        );
        for row in &self.rows {
            let statuses: Vec<String> = row
                .statuses
                .iter()
                .map(|(status, n)| format!("{n}× {status}"))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.1} | {:.2} | {:.3} | {:.2} |",
                row.name,
                row.input,
                statuses.join(", "),
                row.peak_growth as f64 / (1024.0 * 1024.0),
                row.memory_ratio,
                row.cpu.as_secs_f64() * 1000.0,
                row.cpu_ratio,
            );
        }
        out.push('\n');
        out
    }
}

pub async fn run(bench: &Bench) -> anyhow::Result<AmplificationResult> {
    let command = vec![bench.exe_str(), "fixture".into(), "bench".into()];
    let upstreams = [
        ("a".to_owned(), Upstream::Stdio(&command)),
        ("w".to_owned(), Upstream::StdioWrites(&command)),
    ];
    let mut rows: Vec<Row> = Vec::new();
    for (i, kind) in KINDS.iter().enumerate() {
        let gateway = bench
            .start_gateway(
                &format!("amplification-{i}"),
                &upstreams,
                Duration::from_secs(10),
            )
            .await?;
        let baseline = rows.first().map(Row::cpu_per_byte);
        let row = measure(&gateway, kind, baseline).await;
        gateway.proc.stop().await;
        rows.push(row?);
    }
    Ok(AmplificationResult { rows })
}

impl Row {
    fn cpu_per_byte(&self) -> f64 {
        self.cpu.as_secs_f64() / self.input as f64
    }
}

/// What `kind` costs `gateway`; `baseline`: the plainest kind's CPU per byte (`None`: this
/// kind is it).
async fn measure(gateway: &Gateway, kind: &Kind, baseline: Option<f64>) -> anyhow::Result<Row> {
    let pid = gateway.proc.pid()?;
    let http = targets::http_client()?;
    let bearer = targets::bearer(&gateway.token)?;
    let body = (kind.body)();
    let extra = (kind.headers)();
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, bearer.clone());
    headers.insert(
        reqwest::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let url = match kind.route {
        Route::Rest => format!("http://{}/api/v1/mcp/tools/call", gateway.addr),
        Route::Mcp => {
            let session = open_session(&http, gateway, &bearer).await?;
            headers.insert(
                reqwest::header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
            headers.insert("mcp-session-id", HeaderValue::from_str(&session)?);
            headers.insert(
                "mcp-protocol-version",
                HeaderValue::from_static(MCP_VERSION),
            );
            format!("http://{}/mcp", gateway.addr)
        }
    };
    for (name, value) in &extra {
        headers.insert(
            HeaderName::from_bytes(name.as_bytes())?,
            HeaderValue::from_str(value)?,
        );
    }
    let input = body.len()
        + extra
            .iter()
            .map(|(n, v)| n.len() + v.len() + 4)
            .sum::<usize>();
    // A warm-up request, so that pools and caches are not counted as the kind's cost.
    send(&http, &url, &headers, &body).await?;
    let before = rss_bytes(pid)?;
    reset_peak(pid)?;
    let cpu_before = cpu_time(pid)?;
    let mut statuses = std::collections::BTreeMap::new();
    let mut rounds = 0;
    while rounds < MIN_ROUNDS
        || (rounds < MAX_ROUNDS && cpu_time(pid)?.saturating_sub(cpu_before) < MIN_CPU)
    {
        let round = (0..AT_ONCE).map(|_| send(&http, &url, &headers, &body));
        for status in futures::future::join_all(round).await {
            *statuses.entry(status?).or_insert(0) += 1;
        }
        rounds += 1;
    }
    let sent = u32::try_from(rounds * AT_ONCE).unwrap_or(u32::MAX);
    let cpu = cpu_time(pid)?.saturating_sub(cpu_before) / sent;
    let peak_growth = peak_bytes(pid)?.saturating_sub(before);
    let cpu_per_byte = cpu.as_secs_f64() / input as f64;
    let baseline = baseline.unwrap_or(cpu_per_byte);
    Ok(Row {
        name: kind.name,
        input,
        statuses: statuses.into_iter().collect(),
        peak_growth,
        memory_ratio: peak_growth as f64 / (AT_ONCE * input) as f64,
        cpu,
        // CPU is read in clock ticks (10 ms): a kind cheaper than the baseline may read as 0.
        cpu_ratio: if baseline > 0.0 {
            cpu_per_byte / baseline
        } else {
            0.0
        },
    })
}

/// Sends one request and reads the whole answer: its status.
async fn send(
    http: &reqwest::Client,
    url: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> anyhow::Result<u16> {
    let response = http
        .post(url)
        .headers(headers.clone())
        .body(body.to_vec())
        .send()
        .await
        .context("a request of the amplification run")?;
    let status = response.status().as_u16();
    response.bytes().await?;
    Ok(status)
}

/// Opens an MCP session on `/mcp`: its id.
async fn open_session(
    http: &reqwest::Client,
    gateway: &Gateway,
    bearer: &HeaderValue,
) -> anyhow::Result<String> {
    let url = format!("http://{}/mcp", gateway.addr);
    let post = |session: Option<&str>, message: Value| {
        let mut request = http
            .post(&url)
            .header(AUTHORIZATION, bearer.clone())
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MCP_VERSION)
            .json(&message);
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let response = post(
        None,
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": MCP_VERSION, "capabilities": {},
            "clientInfo": { "name": "mcpgate-bench", "version": "1" } } }),
    )
    .await?;
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .context("the gateway opened no MCP session")?;
    response.bytes().await?;
    post(
        Some(&session),
        json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    )
    .await?
    .error_for_status()?;
    Ok(session)
}

/// Resets process `pid`'s peak resident set to its resident set now (`clear_refs` 5).
fn reset_peak(pid: u32) -> anyhow::Result<()> {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .context("resetting the gateway's peak resident set (/proc/PID/clear_refs)")
}

/// Process `pid`'s peak resident set (`VmHWM`), in bytes.
fn peak_bytes(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .context("no VmHWM in /proc/PID/status")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_body_fits_the_default_bound_and_is_json() {
        for kind in KINDS {
            let body = (kind.body)();
            assert!(body.len() <= 256 * 1024, "{}: {}", kind.name, body.len());
            let parsed: Result<Value, _> = serde_json::from_slice(&body);
            assert!(parsed.is_ok(), "{}: {parsed:?}", kind.name);
        }
    }

    #[test]
    fn the_counts_in_the_names_are_what_is_sent() {
        let wide: Value = serde_json::from_slice(&wide()).expect("JSON");
        let keys = wide["arguments"].as_object().expect("an object").len() - 1;
        assert_eq!(keys, 15_360);
        let many: Value = serde_json::from_slice(&small_values()).expect("JSON");
        let strings = many["arguments"]["extra"]
            .as_array()
            .expect("an array")
            .len();
        assert_eq!(strings, 61_440);
        let batch: Value = serde_json::from_slice(&mcp_batch()).expect("JSON");
        let pings = batch.as_array().expect("an array").len();
        assert_eq!(pings, 5_994);
    }
}
