//! Validation of raw configuration into [`super::Config`]; every problem is collected with its
//! field path and reported together.

use std::{borrow::Cow, collections::BTreeMap, fmt, ops::RangeInclusive, time::Duration};

use super::{
    CacheConfig, Config, Env, Limits, ReconnectConfig, ServerConfig, ServerId,
    duration::RawDuration,
    raw::{RawCache, RawLimits, RawReconnect, RawServer},
    server_rules,
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
/// Reconnect attempts: 0 means a failed server stays down until a manual refresh.
const RECONNECT_ATTEMPTS_RANGE: RangeInclusive<u32> = 0..=1000;

/// One configuration problem, located by its field path (`servers.github.url`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

/// Every problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "{n} configuration problem{}",
            if n == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  {}: {}", p.path, p.message)?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

/// Problems and warnings collected while loading.
#[derive(Debug, Default)]
pub(super) struct Report {
    problems: Vec<Problem>,
    warnings: Vec<String>,
}

impl Report {
    pub fn problem(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.problems.push(Problem {
            path: path.into(),
            message: message.into(),
        });
    }

    pub fn warn(&mut self, path: &str, message: impl fmt::Display) {
        self.warnings.push(format!("{path}: {message}"));
    }

    #[cfg(test)]
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    pub fn problem_count(&self) -> usize {
        self.problems.len()
    }

    /// The warnings if nothing is wrong, else every problem.
    pub fn finish(self) -> Result<Vec<String>, ConfigError> {
        if self.problems.is_empty() {
            Ok(self.warnings)
        } else {
            Err(ConfigError {
                problems: self.problems,
            })
        }
    }
}

/// How a source spells field names in paths and messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FieldCase {
    Snake,
    Camel,
}

impl FieldCase {
    /// `snake` (as written in the TOML file) in this source's spelling.
    pub fn name(self, snake: &str) -> Cow<'_, str> {
        match self {
            FieldCase::Snake => Cow::Borrowed(snake),
            FieldCase::Camel => {
                let mut parts = snake.split('_');
                let mut out = parts.next().unwrap_or_default().to_owned();
                for part in parts {
                    let mut chars = part.chars();
                    out.extend(chars.next().map(|c| c.to_ascii_uppercase()));
                    out.push_str(chars.as_str());
                }
                Cow::Owned(out)
            }
        }
    }
}

/// One server as read from a source, with what validation needs to name it.
#[derive(Debug)]
pub(super) struct Entry {
    /// The id as written (a TOML table name, a JSON key, or an `id`/`name` field).
    pub key: String,
    /// Where the server is written, e.g. `servers.github` or `EXTERNAL_MCP_SERVERS_JSON[2]`.
    pub path: String,
    /// Whether an id breaking the rule is normalized (imported formats) or an error (ours).
    pub normalize: bool,
    pub case: FieldCase,
    pub server: RawServer,
}

/// `prefix.key`, quoting keys that are not plain words so the path stays unambiguous.
pub(super) fn join(prefix: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if plain {
        format!("{prefix}.{key}")
    } else {
        format!("{prefix}.{key:?}")
    }
}

/// A configuration being assembled from several sources.
#[derive(Debug)]
pub(super) struct Draft {
    pub limits: Limits,
    pub cache: CacheConfig,
    pub reconnect: ReconnectConfig,
    servers: Vec<ServerConfig>,
    /// Every id taken so far, enabled or not, with where it was defined (for messages).
    taken: BTreeMap<ServerId, String>,
}

impl Draft {
    /// Starts from `config` (whose servers count as defined by `origin`, in words).
    pub fn from_config(config: Config, origin: &str) -> Draft {
        let taken = config
            .servers
            .iter()
            .map(|s| (s.id.clone(), origin.to_owned()))
            .collect();
        Draft {
            limits: config.limits,
            cache: config.cache,
            reconnect: config.reconnect,
            servers: config.servers,
            taken,
        }
    }

    /// Starts from a file's sections; servers are added with [`Draft::add_servers`].
    pub fn from_sections(
        limits: &RawLimits,
        cache: &RawCache,
        reconnect: &RawReconnect,
        report: &mut Report,
    ) -> Draft {
        Draft {
            limits: validate_limits(limits, report),
            cache: validate_cache(cache, report),
            reconnect: validate_reconnect(reconnect, report),
            servers: Vec::new(),
            taken: BTreeMap::new(),
        }
    }

    /// Validates `entries`; an id already taken (by this batch or an earlier source) is an
    /// error naming where it was first defined.
    pub fn add_servers(&mut self, entries: Vec<Entry>, env: &Env, report: &mut Report) {
        for entry in entries {
            let Some(id) = server_id(&entry, report) else {
                continue;
            };
            if let Some(first) = self.taken.get(&id) {
                report.problem(
                    &entry.path,
                    format!("server id `{id}` is already defined by {first}"),
                );
                continue;
            }
            self.taken.insert(id.clone(), format!("`{}`", entry.path));
            if let Some(server) = server_rules::validate(id, &entry, env, report) {
                self.servers.push(server);
            }
        }
    }

    /// The finished configuration, servers in id order.
    pub fn finish(mut self, report: &mut Report) -> Config {
        self.servers.sort_by(|a, b| a.id.cmp(&b.id));
        if self.limits.max_line_bytes < self.limits.max_result_bytes {
            report.warn(
                "limits.max_line_bytes",
                "is below max_result_bytes: a large result from a stdio server fails as an \
                 overlong line instead of as a too-large result",
            );
        }
        Config {
            servers: self.servers,
            limits: self.limits,
            cache: self.cache,
            reconnect: self.reconnect,
            ..Config::default()
        }
    }
}

/// The entry's server id; imported keys are normalized with a warning.
fn server_id(entry: &Entry, report: &mut Report) -> Option<ServerId> {
    const RULE: &str = "a server id is a lowercase letter, then lowercase letters, digits or \
                        `-`, at most 32 characters";
    if let Some(id) = ServerId::new(&entry.key) {
        return Some(id);
    }
    if !entry.normalize {
        report.problem(
            &entry.path,
            format!("`{}` is not a valid id: {RULE}", entry.key),
        );
        return None;
    }
    let normalized: String = entry
        .key
        .chars()
        .map(|c| match c {
            '_' | '.' | ' ' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    match ServerId::new(&normalized) {
        Some(id) => {
            report.warn(
                &entry.path,
                format!("server id `{}` normalized to `{id}`", entry.key),
            );
            Some(id)
        }
        None => {
            report.problem(
                &entry.path,
                format!("`{}` cannot be made a valid id: {RULE}", entry.key),
            );
            None
        }
    }
}

/// A duration within `range`, or a problem at `path`.
pub(super) fn duration(
    raw: &RawDuration,
    range: &RangeInclusive<Duration>,
    path: &str,
    report: &mut Report,
) -> Option<Duration> {
    match raw.to_duration() {
        Ok(d) if range.contains(&d) => Some(d),
        Ok(_) => {
            let (min, max) = (range.start(), range.end());
            report.problem(path, format!("must be between {min:?} and {max:?}"));
            None
        }
        Err(message) => {
            report.problem(path, message);
            None
        }
    }
}

/// A count within `range`, or a problem at `path`.
pub(super) fn count<T>(
    raw: u64,
    range: &RangeInclusive<T>,
    path: &str,
    report: &mut Report,
) -> Option<T>
where
    T: TryFrom<u64> + PartialOrd + fmt::Display,
{
    match T::try_from(raw) {
        Ok(n) if range.contains(&n) => Some(n),
        _ => {
            let (min, max) = (range.start(), range.end());
            report.problem(path, format!("must be between {min} and {max}"));
            None
        }
    }
}

fn validate_limits(raw: &RawLimits, report: &mut Report) -> Limits {
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
    }
}

fn validate_cache(raw: &RawCache, report: &mut Report) -> CacheConfig {
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

fn validate_reconnect(raw: &RawReconnect, report: &mut Report) -> ReconnectConfig {
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
