//! Rules for one server: command or URL, the URL policy, tool lists, confirmations and
//! timeouts.

use std::{
    net::IpAddr,
    path::{Path, PathBuf},
};

use url::{Host, Url};

use super::{
    Confirm, Env, HttpConfig, HttpKind, OnChange, Sandbox, ScanMode, SecretTemplate, ServerConfig,
    ServerId, Sessions, StdioConfig, ToolOverride, TransportConfig, UpstreamOAuth,
    limit_rules::TIMEOUT_RANGE,
    raw::{RawConfirm, RawReaction, RawServer, RawSessions, RawTransport, RawUpstreamAuth},
    sandbox_rules,
    secret_rules::{self, Context},
    validate::{Entry, FieldCase, Report, duration, join},
};

/// Names fields of one entry in its source's spelling.
struct Fields<'a> {
    base: &'a str,
    case: FieldCase,
}

impl Fields<'_> {
    fn name(&self, snake: &str) -> String {
        self.case.name(snake).into_owned()
    }

    fn path(&self, snake: &str) -> String {
        format!("{}.{}", self.base, self.case.name(snake))
    }
}

/// The validated server, or `None` when it is disabled or has a problem (then recorded).
pub(super) fn validate(
    id: ServerId,
    entry: &Entry,
    env: &Env,
    sandbox: (&Sandbox, &Path),
    report: &mut Report,
) -> Option<ServerConfig> {
    let before = report.problem_count();
    let raw = &entry.server;
    let f = Fields {
        base: &entry.path,
        case: entry.case,
    };
    let cx = Context {
        env,
        enabled: raw.enabled.unwrap_or(true),
    };
    let transport = transport(raw, &f, &cx, sandbox, report);
    // Misplaced on a command server, where `transport` already reported it.
    let allowed_hosts = match raw.command {
        None => allowed_hosts(raw, &f, report),
        Some(_) => Vec::new(),
    };

    let list = |items: &Option<Vec<String>>, field: &str, report: &mut Report| {
        items
            .as_deref()
            .map(|items| tool_list(items, &f.path(field), report))
            .unwrap_or_default()
    };
    if raw.allowed_tools.as_ref().is_some_and(Vec::is_empty) {
        report.warn(
            &f.path("allowed_tools"),
            "is empty: no tool of this server is exposed",
        );
    }
    let allowed_tools = raw
        .allowed_tools
        .as_deref()
        .map(|items| tool_list(items, &f.path("allowed_tools"), report));
    let denied_tools = list(&raw.denied_tools, "denied_tools", report);
    let read_only_tools = list(&raw.read_only_tools, "read_only_tools", report);
    let write_tools = list(&raw.write_tools, "write_tools", report);
    for tool in write_tools.iter().filter(|t| read_only_tools.contains(t)) {
        report.problem(
            f.path("write_tools"),
            format!("`{tool}` is also in {}", f.name("read_only_tools")),
        );
    }

    let timeout = |raw: &Option<_>, field: &str, report: &mut Report| {
        raw.as_ref()
            .and_then(|d| duration(d, &TIMEOUT_RANGE, &f.path(field), report))
    };
    let connect_timeout = timeout(&raw.connect_timeout, "connect_timeout", report);
    let call_timeout = timeout(&raw.call_timeout, "call_timeout", report);
    let mut tool_timeouts = Vec::new();
    for (tool, d) in raw.tool_timeouts.iter().flatten() {
        let at = join(&f.path("tool_timeouts"), tool);
        if tool.trim().is_empty() {
            report.problem(at, "names no tool");
        } else if let Some(d) = duration(d, &TIMEOUT_RANGE, &at, report) {
            tool_timeouts.push((tool.clone(), d));
        }
    }

    let overrides = overrides(raw, &f, report);

    if !cx.enabled || report.problem_count() > before {
        return None;
    }
    let mut server = ServerConfig::new(id, transport?);
    server.overrides = overrides;
    server.allow_private = raw.allow_private.unwrap_or(false);
    // The effective rule, decided here once: the network layer applies it as it stands.
    server.allow_http = match &server.transport {
        TransportConfig::Http(http) => plain_http_permitted(
            &http.url,
            raw.allow_http.unwrap_or(false),
            server.allow_private,
        ),
        _ => raw.allow_http.unwrap_or(false),
    };
    server.allowed_hosts = allowed_hosts;
    server.allowed_tools = allowed_tools;
    server.denied_tools = denied_tools;
    server.read_only_tools = read_only_tools;
    server.write_tools = write_tools;
    server.confirm = match raw.confirm.unwrap_or(RawConfirm::Writes) {
        RawConfirm::All => Confirm::All,
        RawConfirm::Writes => Confirm::Writes,
        RawConfirm::None => Confirm::None,
    };
    server.trust_annotations = raw.trust_annotations.unwrap_or(false);
    server.sessions = match (raw.sessions, &server.transport) {
        (Some(RawSessions::Shared), _) => Sessions::Shared,
        (_, TransportConfig::Http(_)) => Sessions::PerCaller,
        (Some(RawSessions::PerCaller), _) => {
            report.problem(
                f.path("sessions"),
                "per_caller needs an HTTP server: a stdio server is one process, whose \
                 session every caller shares",
            );
            return None;
        }
        (None, _) => Sessions::Shared,
    };
    server.on_change = match raw.on_change.unwrap_or(RawReaction::Warn) {
        RawReaction::Warn => OnChange::Warn,
        RawReaction::Block => OnChange::Block,
    };
    server.scan = match raw.scan.unwrap_or(RawReaction::Warn) {
        RawReaction::Warn => ScanMode::Warn,
        RawReaction::Block => ScanMode::Block,
    };
    server.connect_timeout = connect_timeout;
    server.call_timeout = call_timeout;
    server.tool_timeouts = tool_timeouts;
    server.oauth = upstream_oauth(raw, &f, &server.transport, report)?;
    Some(server)
}

/// Longest overriding title or description: longer than any real one, short enough that a
/// catalog of them stays small.
const MAX_OVERRIDE_CHARS: usize = 16 * 1024;

/// The `overrides` table: by upstream tool name, a title, a description or both.
fn overrides(raw: &RawServer, f: &Fields<'_>, report: &mut Report) -> Vec<(String, ToolOverride)> {
    let mut out = Vec::new();
    for (tool, entry) in raw.overrides.iter().flatten() {
        let at = join(&f.path("overrides"), tool);
        if tool.trim().is_empty() {
            report.problem(at, "names no tool");
            continue;
        }
        if entry.title.is_none() && entry.description.is_none() {
            report.problem(at, "overrides nothing: give `title`, `description` or both");
            continue;
        }
        let mut fine = true;
        for (field, text) in [("title", &entry.title), ("description", &entry.description)] {
            if text
                .as_ref()
                .is_some_and(|t| t.chars().count() > MAX_OVERRIDE_CHARS)
            {
                report.problem(
                    format!("{at}.{field}"),
                    format!("is longer than {MAX_OVERRIDE_CHARS} characters"),
                );
                fine = false;
            }
        }
        if fine {
            out.push((
                tool.clone(),
                ToolOverride {
                    title: entry.title.clone(),
                    description: entry.description.clone(),
                },
            ));
        }
    }
    out
}

/// `auth = "oauth"` and its `oauth` table: HTTP servers only, without an `Authorization`
/// header of their own (the user's token is the authorization), a client secret only with a
/// client id and only as a `${VAR}` reference.
fn upstream_oauth(
    raw: &RawServer,
    f: &Fields<'_>,
    transport: &TransportConfig,
    report: &mut Report,
) -> Option<Option<UpstreamOAuth>> {
    let before = report.problem_count();
    let wanted = raw.auth == Some(RawUpstreamAuth::Oauth);
    if !wanted {
        if raw.oauth.is_some() {
            report.problem(f.path("oauth"), "applies only with auth = \"oauth\"");
            return None;
        }
        return Some(None);
    }
    let TransportConfig::Http(http) = transport else {
        report.problem(
            f.path("auth"),
            "\"oauth\" needs an HTTP server: a stdio server has no authorization server",
        );
        return None;
    };
    if http
        .headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("authorization"))
    {
        report.problem(
            f.path("headers"),
            "sets Authorization, which auth = \"oauth\" fills with each user's own token",
        );
    }
    let written = raw.oauth.clone().unwrap_or_default();
    let client_id = written.client_id.as_deref().and_then(|text| {
        let template = SecretTemplate::new(text);
        match template.check_syntax() {
            Ok(()) if !text.trim().is_empty() => Some(template),
            Ok(()) => {
                report.problem(f.path("oauth.client_id"), "is empty");
                None
            }
            Err(message) => {
                report.problem(f.path("oauth.client_id"), message);
                None
            }
        }
    });
    let client_secret = written.client_secret.as_deref().and_then(|text| {
        let template = SecretTemplate::new(text);
        if !template.is_single_reference() {
            report.problem(
                f.path("oauth.client_secret"),
                "must be one `${NAME}` reference, with the secret in that environment \
                 variable: a secret is never written in configuration",
            );
            return None;
        }
        Some(template)
    });
    if written.client_secret.is_some() && written.client_id.is_none() {
        report.problem(
            f.path("oauth.client_secret"),
            "needs client_id: a secret belongs to a client registered beforehand",
        );
    }
    let scopes = super::validate::resource_rules::scopes(
        written.scopes.as_deref().unwrap_or_default(),
        &f.path("oauth.scopes"),
        report,
    );
    (report.problem_count() == before).then_some(Some(UpstreamOAuth {
        client_id,
        client_secret,
        scopes,
    }))
}

fn tool_list(items: &[String], path: &str, report: &mut Report) -> Vec<String> {
    let mut out = Vec::with_capacity(items.len());
    for (i, tool) in items.iter().enumerate() {
        if tool.trim().is_empty() {
            report.problem(format!("{path}[{i}]"), "names no tool");
        } else {
            out.push(tool.clone());
        }
    }
    out
}

fn transport(
    raw: &RawServer,
    f: &Fields<'_>,
    cx: &Context<'_>,
    sandbox: (&Sandbox, &Path),
    report: &mut Report,
) -> Option<TransportConfig> {
    let misplaced = |fields: &[(&str, bool)], needs: &str, report: &mut Report| {
        for (field, _) in fields.iter().filter(|(_, present)| *present) {
            report.problem(
                f.path(field),
                format!("applies only to a server with `{needs}`"),
            );
        }
    };
    match (&raw.command, &raw.url) {
        (Some(command), None) => {
            let stdio_ok = matches!(raw.transport, None | Some(RawTransport::Stdio));
            let fields = [
                ("transport", !stdio_ok),
                ("headers", raw.headers.is_some()),
                ("allowed_hosts", raw.allowed_hosts.is_some()),
                ("allow_http", raw.allow_http.is_some()),
                ("allow_private", raw.allow_private.is_some()),
            ];
            misplaced(&fields, "url", report);
            stdio(command, raw, f, cx, sandbox, report).map(TransportConfig::Stdio)
        }
        (None, Some(url)) => {
            let fields = [
                ("args", raw.args.is_some()),
                ("env", raw.env.is_some()),
                ("cwd", raw.cwd.is_some()),
                ("sandbox", raw.sandbox.is_some()),
            ];
            misplaced(&fields, "command", report);
            http(url, raw, f, cx, report).map(TransportConfig::Http)
        }
        (Some(_), Some(_)) => {
            report.problem(f.base, "has both `command` and `url`: give exactly one");
            None
        }
        (None, None) => {
            report.problem(
                f.base,
                "needs `command` (a local program) or `url` (a remote server)",
            );
            None
        }
    }
}

fn stdio(
    command: &str,
    raw: &RawServer,
    f: &Fields<'_>,
    cx: &Context<'_>,
    (defaults, base): (&Sandbox, &Path),
    report: &mut Report,
) -> Option<StdioConfig> {
    let before = report.problem_count();
    if command.trim().is_empty() || command.contains('\0') {
        report.problem(f.path("command"), "must name a program (non-empty, no NUL)");
    }
    let args = raw.args.clone().unwrap_or_default();
    for (i, _) in args.iter().enumerate().filter(|(_, a)| a.contains('\0')) {
        report.problem(format!("{}[{i}]", f.path("args")), "holds a NUL character");
    }
    let env = raw
        .env
        .as_ref()
        .map(|env| secret_rules::env_vars(env, &f.path("env"), cx, report))
        .unwrap_or_default();
    let cwd = raw.cwd.as_ref().map(PathBuf::from);
    if raw
        .cwd
        .as_ref()
        .is_some_and(|c| c.is_empty() || c.contains('\0'))
    {
        report.problem(
            f.path("cwd"),
            "must be a directory path (non-empty, no NUL)",
        );
    }
    let sandbox = match &raw.sandbox {
        Some(own) => {
            let own = own.fields();
            sandbox_rules::apply(defaults.clone(), &own, &f.path("sandbox"), base, report)
        }
        None => defaults.clone(),
    };
    (report.problem_count() == before).then(|| StdioConfig {
        command: command.to_owned(),
        args,
        env,
        cwd,
        sandbox,
    })
}

fn http(
    url_text: &str,
    raw: &RawServer,
    f: &Fields<'_>,
    cx: &Context<'_>,
    report: &mut Report,
) -> Option<HttpConfig> {
    let before = report.problem_count();
    let at = f.path("url");
    let (allow_http, allow_private) = (f.name("allow_http"), f.name("allow_private"));
    let url = match Url::parse(url_text) {
        Ok(url) => url,
        Err(e) => {
            report.problem(at, format!("is not a valid URL: {e}"));
            return None;
        }
    };
    let loopback = is_loopback(&url);
    match url.scheme() {
        "https" => {}
        "http"
            if plain_http_permitted(
                &url,
                raw.allow_http == Some(true),
                raw.allow_private == Some(true),
            ) => {}
        "http" => report.problem(
            &at,
            format!(
                "uses plain http: use https, or set `{allow_http}` to true (for a loopback \
                 address `{allow_private}` is enough)"
            ),
        ),
        other => report.problem(&at, format!("scheme `{other}` is not supported: use https")),
    }
    if url.host().is_none() {
        report.problem(&at, "has no host");
    }
    if !url.username().is_empty() || url.password().is_some() {
        report.problem(
            &at,
            "holds credentials: send them in a header instead, e.g. Authorization = \
             \"Bearer ${NAME}\" with NAME set in the gateway's environment",
        );
    }
    if loopback && raw.allow_private != Some(true) {
        report.problem(
            &at,
            format!("points at a loopback address: set `{allow_private}` to true to permit it"),
        );
    }
    let kind = match raw.transport {
        None | Some(RawTransport::Auto) => HttpKind::Auto,
        Some(RawTransport::StreamableHttp) => HttpKind::Streamable,
        Some(RawTransport::Sse) => HttpKind::Sse,
        Some(RawTransport::Stdio) => {
            report.problem(f.path("transport"), "`stdio` needs `command`, not `url`");
            HttpKind::Auto
        }
    };
    let headers = raw
        .headers
        .as_ref()
        .map(|h| secret_rules::headers(h, &f.path("headers"), cx, report))
        .unwrap_or_default();
    (report.problem_count() == before).then_some(HttpConfig { url, kind, headers })
}

/// Whether plain `http://` may be used for `url`: `allow_http`, or a loopback address with
/// `allow_private` (plain HTTP to loopback never crosses a network, and loopback already needs
/// allow_private: asking for allow_http as well would add friction, not safety).
fn plain_http_permitted(url: &Url, allow_http: bool, allow_private: bool) -> bool {
    allow_http || (is_loopback(url) && allow_private)
}

/// `localhost` (and names under it), `127.0.0.0/8` and `::1`.
pub(super) fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(Host::Domain(d)) => d == "localhost" || d.ends_with(".localhost"),
        Some(Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

/// The host allowlist, normalized as URLs spell hosts; it must admit the URL's own host.
fn allowed_hosts(raw: &RawServer, f: &Fields<'_>, report: &mut Report) -> Vec<String> {
    let Some(items) = &raw.allowed_hosts else {
        return Vec::new();
    };
    let path = f.path("allowed_hosts");
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match super::normal_host(item) {
            Some(host) => out.push(host),
            None => report.problem(format!("{path}[{i}]"), "is not a host name or IP address"),
        }
    }
    let url_host = raw
        .url
        .as_deref()
        .and_then(|u| Url::parse(u).ok())
        .and_then(|u| u.host_str().and_then(super::normal_host));
    if let Some(host) = url_host
        && !out.is_empty()
        && !out.contains(&host)
    {
        report.problem(path, format!("does not include the URL's host `{host}`"));
    }
    out
}

#[cfg(test)]
mod tests;
