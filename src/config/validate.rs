//! Validation of raw configuration into [`super::Config`]; every problem is collected with its
//! field path and reported together.

use std::{
    borrow::Cow,
    collections::{BTreeMap, BTreeSet},
    fmt,
    ops::RangeInclusive,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{
    AccessConfig, AuditConfig, CacheConfig, CallLimits, Config, ConfirmationConfig, Env, Limits,
    PinsConfig, ReconnectConfig, Sandbox, ServerConfig, ServerId, ServerSource, StateConfig,
    access_rules, agent_rules,
    duration::RawDuration,
    gate_rules, limit_rules,
    raw::{RawAccess, RawAgent, RawAudit, RawFile, RawLlm, RawServer, RawService},
    sandbox_rules, server_rules,
};

mod auth_rules;
mod oauth_rules;
pub(super) mod resource_rules;
mod service_rules;
mod user_server_rules;
mod webmcp_rules;

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

/// A section that names servers: as written until every source has added its servers, then
/// checked in [`Draft::finish`]; or already valid when the draft starts from a [`Config`].
#[derive(Debug)]
enum Deferred<Written, Valid> {
    Written(Written),
    Valid(Valid),
}

/// The servers a configuration defines, for the sections that name them.
pub(super) struct Known<'a> {
    /// The valid, enabled servers, in id order.
    pub servers: &'a [ServerConfig],
    /// Every id defined by any source, enabled, disabled or broken.
    pub defined: &'a BTreeMap<ServerId, String>,
    /// Defined with `enabled = false`: may be named, but their tool lists are not checked.
    pub disabled: &'a BTreeSet<ServerId>,
}

/// A configuration being assembled from several sources.
#[derive(Debug)]
pub(super) struct Draft {
    pub limits: Limits,
    pub cache: CacheConfig,
    pub reconnect: ReconnectConfig,
    call_limits: CallLimits,
    confirmations: ConfirmationConfig,
    state: StateConfig,
    shared: super::SharedConfig,
    pins: PinsConfig,
    access: Deferred<Option<RawAccess>, Option<AccessConfig>>,
    audit: Deferred<RawAudit, AuditConfig>,
    servers: Vec<ServerConfig>,
    /// Every id taken so far, enabled or not, with where it was defined (for messages).
    taken: BTreeMap<ServerId, String>,
    /// Ids of servers written with `enabled = false`: other sections may name them.
    disabled: BTreeSet<ServerId>,
    /// `[server]` as written, validated in [`Draft::finish`] with the environment, which may
    /// select its auth mode.
    service: RawService,
    /// `[llm]` and `[agent]` as written, validated in [`Draft::finish`] with the environment
    /// (`MCPGATE_MODEL`, `OPENAI_BASE_URL`, `OPENAI_API_KEY`).
    llm: Option<RawLlm>,
    agent: RawAgent,
    /// The folder that `[server.auth] public_keys` and sandbox paths are relative to.
    base: PathBuf,
    /// `[sandbox]`: what every stdio server added from now on starts from.
    sandbox: Sandbox,
    oauth: super::OAuthConfig,
    webmcp: super::WebMcpConfig,
    user_servers: super::UserServersConfig,
    scan_review: super::ScanReviewConfig,
}

impl Draft {
    /// Starts from `config` (whose servers count as defined by `origin`, in words); its
    /// relative paths are resolved against `base`. Its service settings are those of a file
    /// without `[server]`: [`super::ServiceConfig::default()`] with the `MCPGATE_*`
    /// environment applied. `config.service` is not read, because a validated auth mode no
    /// longer tells "written" from "default", and only a default one yields to
    /// `MCPGATE_JWT_SECRET`. Likewise its model and loop settings are those of a file without
    /// `[llm]` and `[agent]`: the environment may still configure a model.
    pub fn from_config(config: Config, origin: &str, base: &Path) -> Draft {
        let taken = config
            .servers
            .iter()
            .map(|s| (s.id.clone(), origin.to_owned()))
            .collect();
        Draft {
            limits: config.limits,
            cache: config.cache,
            reconnect: config.reconnect,
            call_limits: config.call_limits,
            confirmations: config.confirmations,
            state: gate_rules::resolve_state(config.state, base),
            shared: config.shared,
            pins: PinsConfig {
                file: base.join(config.pins.file),
            },
            access: Deferred::Valid(config.access),
            audit: Deferred::Valid(config.audit),
            servers: config.servers,
            taken,
            disabled: BTreeSet::new(),
            service: RawService::default(),
            llm: None,
            agent: RawAgent::default(),
            base: base.to_path_buf(),
            sandbox: Sandbox::default(),
            oauth: config.oauth,
            webmcp: config.webmcp,
            user_servers: config.user_servers,
            scan_review: config.scan_review,
        }
    }

    /// Starts from a file's sections (its servers are added with [`Draft::add_servers`]);
    /// relative paths are resolved against `base`, the file's folder.
    pub fn from_file(file: RawFile, base: &Path, report: &mut Report) -> Draft {
        Draft {
            limits: limit_rules::limits(&file.limits, report),
            cache: limit_rules::cache(&file.cache, report),
            reconnect: limit_rules::reconnect(&file.reconnect, report),
            call_limits: limit_rules::call_limits(&file.limits, report),
            confirmations: gate_rules::confirmations(&file.confirmations, report),
            state: gate_rules::state(&file.state, base, report),
            shared: gate_rules::shared(&file.state, report),
            pins: gate_rules::pins(&file.pins, base, report),
            access: Deferred::Written(file.access),
            audit: Deferred::Written(file.audit),
            servers: Vec::new(),
            taken: BTreeMap::new(),
            disabled: BTreeSet::new(),
            service: file.server,
            llm: file.llm,
            agent: file.agent,
            base: base.to_path_buf(),
            sandbox: sandbox_rules::defaults(&file.sandbox, base, report),
            oauth: oauth_rules::section(&file.oauth, report),
            webmcp: webmcp_rules::section(&file.webmcp, report),
            user_servers: user_server_rules::section(&file.user_servers, report),
            scan_review: super::ScanReviewConfig {
                enabled: file.scan.model_review.unwrap_or(false),
                blocks: file.scan.model_review_blocks.unwrap_or(false),
            },
        }
    }

    /// Validates `entries`; an id already taken (by this batch or an earlier source) is an
    /// error naming where it was first defined.
    pub fn add_servers(
        &mut self,
        entries: Vec<Entry>,
        source: ServerSource,
        env: &Env,
        report: &mut Report,
    ) {
        for entry in entries {
            let Some(id) = server_id(&entry, report) else {
                continue;
            };
            if id.as_str().starts_with(super::WEBMCP_PREFIX) {
                report.problem(
                    &entry.path,
                    format!(
                        "server ids starting with `{}` are reserved for browser pages' tools",
                        super::WEBMCP_PREFIX
                    ),
                );
                continue;
            }
            if let Some(first) = self.taken.get(&id) {
                report.problem(
                    &entry.path,
                    format!("server id `{id}` is already defined by {first}"),
                );
                continue;
            }
            self.taken.insert(id.clone(), format!("`{}`", entry.path));
            if entry.server.enabled == Some(false) {
                self.disabled.insert(id.clone());
            }
            let sandbox = (&self.sandbox, self.base.as_path());
            if let Some(mut server) = server_rules::validate(id, &entry, env, sandbox, report) {
                server.source = source;
                self.servers.push(server);
            }
        }
    }

    /// Whether no source defined any server yet (enabled or not).
    pub fn defines_no_server(&self) -> bool {
        self.taken.is_empty()
    }

    /// Adds servers already valid (the embedded default's), defined by `origin`.
    pub fn add_valid_servers(&mut self, servers: Vec<ServerConfig>, origin: &str) {
        for server in servers {
            self.taken.insert(server.id.clone(), origin.to_owned());
            self.servers.push(server);
        }
    }

    /// The finished configuration, servers in id order; `env` supplies the service's
    /// `MCPGATE_*` settings.
    pub fn finish(mut self, env: &Env, report: &mut Report) -> Config {
        self.servers.sort_by(|a, b| a.id.cmp(&b.id));
        if self.limits.max_line_bytes < self.limits.max_result_bytes {
            report.warn(
                "limits.max_line_bytes",
                "is below max_result_bytes: a large result from a stdio server fails as an \
                 overlong line instead of as a too-large result",
            );
        }
        if self.limits.max_line_bytes < self.limits.max_view_bytes {
            report.warn(
                "limits.max_line_bytes",
                "is below max_view_bytes: a large MCP Apps view from a stdio server fails as \
                 an overlong line instead of as a too-large result",
            );
        }
        let known = Known {
            servers: &self.servers,
            defined: &self.taken,
            disabled: &self.disabled,
        };
        let access = match self.access {
            Deferred::Written(raw) => raw.map(|raw| access_rules::validate(&raw, &known, report)),
            Deferred::Valid(access) => access,
        };
        let single_tenant = access.is_none();
        let audit = match self.audit {
            Deferred::Written(raw) => gate_rules::audit(&raw, &known, report),
            Deferred::Valid(audit) => audit,
        };
        let service =
            service_rules::validate(&self.service, env, (&self.base, single_tenant), report);
        oauth_rules::check_servers(&self.servers, &self.oauth, &service, report);
        let (llm, models) = agent_rules::llm(self.llm.as_ref(), env, report);
        if self.scan_review.enabled && llm.is_none() {
            report.problem(
                "scan.model_review",
                "needs a model to ask: configure `[llm]` (or MCPGATE_MODEL)",
            );
        }
        if self.scan_review.blocks && !self.scan_review.enabled {
            report.warn(
                "scan.model_review_blocks",
                "does nothing without `model_review = true`",
            );
        }
        if let Some(access) = &access {
            agent_rules::check_tenant_models(access, llm.as_ref(), &models, report);
        }
        user_server_rules::check(
            &self.user_servers,
            &self.servers,
            &self.oauth,
            &service,
            report,
        );
        Config {
            servers: self.servers,
            limits: self.limits,
            cache: self.cache,
            reconnect: self.reconnect,
            access,
            call_limits: self.call_limits,
            confirmations: self.confirmations,
            state: self.state,
            shared: self.shared,
            audit,
            pins: self.pins,
            service,
            llm,
            models,
            agent: agent_rules::agent(&self.agent, report),
            oauth: self.oauth,
            webmcp: self.webmcp,
            user_servers: self.user_servers,
            scan_review: self.scan_review,
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

/// `section.field`'s duration when written and within `range`, else `default` (a problem is
/// reported for a bad one).
pub(super) fn duration_or(
    value: Option<&RawDuration>,
    path: (&str, &str),
    range: &RangeInclusive<Duration>,
    default: Duration,
    report: &mut Report,
) -> Duration {
    let (section, field) = path;
    value
        .and_then(|v| duration(v, range, &format!("{section}.{field}"), report))
        .unwrap_or(default)
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
