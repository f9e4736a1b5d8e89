//! Rules for the numeric bounds of `[limits]`, `[cache]` and `[reconnect]`: the gateway-wide
//! limits, the gate's per-call limits, the tool-list cache and reconnect backoff.

use std::{ops::RangeInclusive, time::Duration};

use super::{
    CacheConfig, CallLimits, Limits, ReconnectConfig, ResultOverflow,
    duration::RawDuration,
    raw::{RawCache, RawLimits, RawReconnect, RawResultOverflow},
    validate::{Report, count, duration},
};

/// Timeouts and delays: above zero (a deadline under a millisecond can only fail) and at most
/// an hour (a caller cannot tell a longer wait from a hang).
pub(super) const TIMEOUT_RANGE: RangeInclusive<Duration> =
    Duration::from_millis(1)..=Duration::from_secs(3600);
/// Tool-list cache lifetime: zero asks the upstream on every refresh; a day is already far
/// longer than a tool list should be trusted.
const CACHE_TTL_RANGE: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(86_400);
/// Tool results and stdio lines: 1 KiB holds any error result; 256 MiB bounds what one call
/// may make us hold in memory.
pub(super) const PAYLOAD_BYTES_RANGE: RangeInclusive<usize> = 1024..=256 * 1024 * 1024;
/// Stderr kept per line: enough for a stack-trace line, small enough for a log.
const STDERR_LINE_BYTES_RANGE: RangeInclusive<usize> = 64..=64 * 1024;
/// Tool-list cache entries: at least one; 100 000 servers' lists is beyond any deployment.
const CACHE_ENTRIES_RANGE: RangeInclusive<usize> = 1..=100_000;
/// Items one server lists: at least one; past a million no catalog is usable by a model or a
/// person, and scanning them would take minutes.
const LIST_ITEMS_RANGE: RangeInclusive<usize> = 1..=1_000_000;
/// Reconnect attempts: 0 means a failed server stays down until a manual refresh.
const RECONNECT_ATTEMPTS_RANGE: RangeInclusive<u32> = 0..=1000;
/// Arguments objects: 1 KiB holds any real one; 16 MiB bounds what one call makes us parse,
/// validate against a schema and forward.
const ARGUMENT_BYTES_RANGE: RangeInclusive<usize> = 1024..=16 * 1024 * 1024;
/// Calls in flight per user and server: at least one must be possible; past 10 000 the bound
/// no longer protects a server from one user.
const USER_CONCURRENCY_RANGE: RangeInclusive<u32> = 1..=10_000;
/// Calls in flight per server: at least one; 100 000 is beyond what any upstream serves.
const SERVER_CONCURRENCY_RANGE: RangeInclusive<u32> = 1..=100_000;
/// Waiting for a free slot: zero refuses at once; a caller kept waiting longer than a minute
/// is better told to retry.
const CONCURRENCY_WAIT_RANGE: RangeInclusive<Duration> = Duration::ZERO..=Duration::from_secs(60);
/// Calls per minute: zero disables the limit; a million a minute is beyond any one user or
/// server, so a larger number is a typo.
const CALLS_PER_MINUTE_RANGE: RangeInclusive<u32> = 0..=1_000_000;
/// Retries of a read tool: each one multiplies a failing upstream's load during an outage.
const RETRIES_RANGE: RangeInclusive<u32> = 0..=5;

pub(super) fn limits(raw: &RawLimits, report: &mut Report) -> Limits {
    let d = Limits::default();
    let mut time = |raw: &Option<RawDuration>, field: &str, default: Duration| {
        raw.as_ref()
            .and_then(|r| duration(r, &TIMEOUT_RANGE, &format!("limits.{field}"), report))
            .unwrap_or(default)
    };
    let connect_timeout = time(&raw.connect_timeout, "connect_timeout", d.connect_timeout);
    let call_timeout = time(&raw.call_timeout, "call_timeout", d.call_timeout);
    let list_timeout = time(&raw.list_timeout, "list_timeout", d.list_timeout);
    let mut size = |raw: Option<u64>, field: &str, range, default| {
        raw.and_then(|n| count(n, range, &format!("limits.{field}"), report))
            .unwrap_or(default)
    };
    Limits {
        connect_timeout,
        call_timeout,
        list_timeout,
        max_result_bytes: size(
            raw.max_result_bytes,
            "max_result_bytes",
            &PAYLOAD_BYTES_RANGE,
            d.max_result_bytes,
        ),
        max_view_bytes: size(
            raw.max_view_bytes,
            "max_view_bytes",
            &PAYLOAD_BYTES_RANGE,
            d.max_view_bytes,
        ),
        max_line_bytes: size(
            raw.max_line_bytes,
            "max_line_bytes",
            &PAYLOAD_BYTES_RANGE,
            d.max_line_bytes,
        ),
        max_stderr_line_bytes: size(
            raw.max_stderr_line_bytes,
            "max_stderr_line_bytes",
            &STDERR_LINE_BYTES_RANGE,
            d.max_stderr_line_bytes,
        ),
        max_list_items: size(
            raw.max_list_items,
            "max_list_items",
            &LIST_ITEMS_RANGE,
            d.max_list_items,
        ),
        max_list_bytes: size(
            raw.max_list_bytes,
            "max_list_bytes",
            &PAYLOAD_BYTES_RANGE,
            d.max_list_bytes,
        ),
    }
}

pub(super) fn cache(raw: &RawCache, report: &mut Report) -> CacheConfig {
    let d = CacheConfig::default();
    CacheConfig {
        ttl: raw
            .ttl
            .as_ref()
            .and_then(|r| duration(r, &CACHE_TTL_RANGE, "cache.ttl", report))
            .unwrap_or(d.ttl),
        max_entries: raw
            .max_entries
            .and_then(|n| count(n, &CACHE_ENTRIES_RANGE, "cache.max_entries", report))
            .unwrap_or(d.max_entries),
    }
}

pub(super) fn reconnect(raw: &RawReconnect, report: &mut Report) -> ReconnectConfig {
    let d = ReconnectConfig::default();
    let mut delay = |raw: &Option<RawDuration>, field: &str, default: Duration| {
        raw.as_ref()
            .and_then(|r| duration(r, &TIMEOUT_RANGE, &format!("reconnect.{field}"), report))
            .unwrap_or(default)
    };
    let initial_delay = delay(&raw.initial_delay, "initial_delay", d.initial_delay);
    let max_delay = delay(&raw.max_delay, "max_delay", d.max_delay);
    if max_delay < initial_delay {
        report.problem(
            "reconnect.max_delay",
            format!("is below initial_delay ({initial_delay:?})"),
        );
    }
    let max_attempts = raw
        .max_attempts
        .and_then(|n| {
            count(
                n,
                &RECONNECT_ATTEMPTS_RANGE,
                "reconnect.max_attempts",
                report,
            )
        })
        .unwrap_or(d.max_attempts);
    ReconnectConfig {
        initial_delay,
        max_delay,
        max_attempts,
    }
}

/// The limits of `[limits]` that the gate enforces per call.
pub(super) fn call_limits(raw: &RawLimits, report: &mut Report) -> CallLimits {
    let d = CallLimits::default();
    let mut number = |raw: Option<u64>, field: &str, range: &RangeInclusive<u32>, default| {
        raw.and_then(|n| count(n, range, &format!("limits.{field}"), report))
            .unwrap_or(default)
    };
    let user_concurrency = number(
        raw.user_concurrency,
        "user_concurrency",
        &USER_CONCURRENCY_RANGE,
        d.user_concurrency,
    );
    let server_concurrency = number(
        raw.server_concurrency,
        "server_concurrency",
        &SERVER_CONCURRENCY_RANGE,
        d.server_concurrency,
    );
    let user_calls_per_minute = number(
        raw.user_calls_per_minute,
        "user_calls_per_minute",
        &CALLS_PER_MINUTE_RANGE,
        d.user_calls_per_minute,
    );
    let server_calls_per_minute = number(
        raw.server_calls_per_minute,
        "server_calls_per_minute",
        &CALLS_PER_MINUTE_RANGE,
        d.server_calls_per_minute,
    );
    let retries = number(raw.retries, "retries", &RETRIES_RANGE, d.retries);
    let mut bytes = |raw: Option<u64>, field: &str, range: &RangeInclusive<usize>, default| {
        raw.and_then(|n| count(n, range, &format!("limits.{field}"), report))
            .unwrap_or(default)
    };
    let max_argument_bytes = bytes(
        raw.max_argument_bytes,
        "max_argument_bytes",
        &ARGUMENT_BYTES_RANGE,
        d.max_argument_bytes,
    );
    let max_binary_bytes = bytes(
        raw.max_binary_bytes,
        "max_binary_bytes",
        &PAYLOAD_BYTES_RANGE,
        d.max_binary_bytes,
    );
    let concurrency_wait = raw
        .concurrency_wait
        .as_ref()
        .and_then(|r| {
            duration(
                r,
                &CONCURRENCY_WAIT_RANGE,
                "limits.concurrency_wait",
                report,
            )
        })
        .unwrap_or(d.concurrency_wait);
    let idempotency_window = raw
        .idempotency_window
        .as_ref()
        .and_then(|r| {
            duration(
                r,
                &IDEMPOTENCY_WINDOW_RANGE,
                "limits.idempotency_window",
                report,
            )
        })
        .unwrap_or(d.idempotency_window);
    if user_concurrency > server_concurrency {
        report.warn(
            "limits.user_concurrency",
            "is above server_concurrency, which caps every user anyway",
        );
    }
    CallLimits {
        max_argument_bytes,
        max_binary_bytes,
        result_overflow: match raw.result_overflow {
            None => d.result_overflow,
            Some(RawResultOverflow::Error) => ResultOverflow::Error,
            Some(RawResultOverflow::Truncate) => ResultOverflow::Truncate,
        },
        user_concurrency,
        server_concurrency,
        concurrency_wait,
        user_calls_per_minute,
        server_calls_per_minute,
        retries,
        idempotency_window,
    }
}

/// Up to a week: a client retries within minutes, or hours after an outage.
const IDEMPOTENCY_WINDOW_RANGE: RangeInclusive<Duration> =
    Duration::ZERO..=Duration::from_secs(7 * 24 * 3600);
