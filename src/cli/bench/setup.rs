//! What the benchmarked gateways run with: their configuration files (the whole policy path
//! on: JWT authentication, an access rule, rate limits set high enough not to be hit, the
//! audit log in SQLite) and the caller's token.

use std::{
    fmt::Write as _,
    path::Path,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::Context as _;
use jsonwebtoken::{EncodingKey, Header, encode};
use serde_json::json;

/// The variable the gateway reads its HS256 secret from.
pub const SECRET_ENV: &str = "MCPGATE_JWT_SECRET";
const ISSUER: &str = "mcpgate-bench";
const AUDIENCE: &str = "mcpgate";
/// The tenant and role every benchmark caller has.
const TENANT: &str = "bench";
const ROLE: &str = "bench";

/// An upstream of a benchmarked gateway.
pub enum Upstream<'a> {
    /// Streamable HTTP at this URL (loopback), an upstream session per caller (the default).
    Http(&'a str),
    /// The same, every caller over one shared upstream session (`sessions = "shared"`).
    HttpShared(&'a str),
    /// A stdio server started from this command.
    Stdio(&'a [String]),
    /// The same, its `echo` a write (confirmed with a token) and its `big` a read.
    StdioWrites(&'a [String]),
}

/// A gateway configuration: `upstreams` by id, each exposing `tools` as reads to the bench
/// tenant; state in `dir`.
pub fn gateway_config(
    dir: &Path,
    upstreams: &[(String, Upstream<'_>)],
    list_timeout: Duration,
    memory_state: bool,
    shared: Option<&str>,
) -> String {
    let quote = |s: &str| toml::Value::String(s.to_owned()).to_string();
    let database = if memory_state {
        "memory".to_owned()
    } else {
        dir.join("gateway.db").display().to_string()
    };
    let servers: Vec<String> = upstreams.iter().map(|(id, _)| quote(id)).collect();
    let mut out = format!(
        r#"# Written by `mcpgate bench`: the whole policy path on.
[limits]
list_timeout = "{list_ms}ms"
call_timeout = "30s"
max_result_bytes = 4194304
user_concurrency = 1000
server_concurrency = 1000
user_calls_per_minute = 1000000
server_calls_per_minute = 1000000

[state]
database = {database}
{shared}
[server]
listen = "127.0.0.1:0"

[server.auth]
mode = "jwt"
secret = "${{{SECRET_ENV}}}"
issuer = "{ISSUER}"
audience = "{AUDIENCE}"

[access.tenants.{TENANT}]
servers = [{servers}]

[[access.grants]]
tenant = "{TENANT}"
roles = ["{ROLE}"]
tools = [{tools}]
"#,
        list_ms = list_timeout.as_millis(),
        database = quote(&database),
        // One of several instances: REDIS_URL and DATABASE_URL name the shared stores.
        shared = shared.map_or(String::new(), |instance| {
            format!(
                "redis = \"${{REDIS_URL}}\"\npostgres = \"${{DATABASE_URL}}\"\n\
                 require_shared = true\ninstance = {}\n",
                quote(instance)
            )
        }),
        servers = servers.join(", "),
        tools = upstreams
            .iter()
            .map(|(id, _)| quote(&format!("{id}.*")))
            .collect::<Vec<_>>()
            .join(", "),
    );
    for (id, upstream) in upstreams {
        let _ = writeln!(out, "\n[servers.{id}]");
        match upstream {
            Upstream::Http(url) | Upstream::HttpShared(url) => {
                let _ = writeln!(
                    out,
                    "url = {}\ntransport = \"streamable-http\"\nallow_private = true\n\
                     allow_http = true",
                    quote(url)
                );
                if matches!(upstream, Upstream::HttpShared(_)) {
                    let _ = writeln!(out, "sessions = \"shared\"");
                }
            }
            Upstream::Stdio(command) | Upstream::StdioWrites(command) => {
                let (program, args) = command.split_first().unzip();
                let args: Vec<String> = args.unwrap_or_default().iter().map(|a| quote(a)).collect();
                let _ = writeln!(
                    out,
                    "command = {}\nargs = [{}]",
                    quote(program.map_or("", String::as_str)),
                    args.join(", ")
                );
                // Sandboxed as a user would run it, as the user running the benchmark (root
                // included, named), reading the packages of the scripts it is given (a
                // script's whole `node_modules`, where its imports are).
                let read: Vec<String> = command
                    .iter()
                    .map(Path::new)
                    .filter(|p| p.is_absolute() && p.exists())
                    .filter_map(|p| {
                        p.ancestors()
                            .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
                            .or_else(|| p.parent())
                    })
                    .map(|p| quote(&p.to_string_lossy()))
                    .collect();
                let _ = writeln!(
                    out,
                    "sandbox = {{ run_as = \"{}:{}\", read = [{}] }}",
                    nix::unistd::geteuid(),
                    nix::unistd::getegid(),
                    read.join(", ")
                );
            }
        }
        // The benchmark's tools only read: no confirmation step. The soak's writes server
        // confirms its `echo`.
        let reads = if matches!(upstream, Upstream::StdioWrites(_)) {
            "[\"big\"]"
        } else {
            "[\"echo\", \"big\", \"test_simple_text\"]"
        };
        let _ = writeln!(out, "read_only_tools = {reads}");
    }
    out
}

/// A token for the bench caller, valid for two hours; `admin` adds the admin role (to
/// refresh servers).
pub fn token(secret: &str, admin: bool) -> anyhow::Result<String> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .context("clock before 1970")?
        .as_secs();
    let mut roles = vec![ROLE];
    if admin {
        roles.push("admin");
    }
    let claims = json!({
        "sub": "bench-user",
        "tenant": TENANT,
        "roles": roles,
        "iss": ISSUER,
        "aud": AUDIENCE,
        "iat": now,
        "nbf": now,
        "exp": now + 7200,
    });
    let key = EncodingKey::from_secret(secret.as_bytes()).context("signing key")?;
    encode(&Header::default(), &claims, &key).context("signing the token")
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcpgate::config::{Env, load};

    #[test]
    fn the_configuration_is_valid_and_has_the_policy_path_on() {
        let dir = tempfile::tempdir().expect("temp dir");
        let command = [
            "node".to_owned(),
            "server.js".to_owned(),
            "stdio".to_owned(),
        ];
        let text = gateway_config(
            dir.path(),
            &[
                ("echo".to_owned(), Upstream::Http("http://127.0.0.1:9/mcp")),
                ("everything".to_owned(), Upstream::Stdio(&command)),
            ],
            Duration::from_secs(2),
            false,
            None,
        );
        let path = dir.path().join("mcpgate.toml");
        std::fs::write(&path, &text).expect("write");
        let env = Env::from_pairs([(SECRET_ENV, "x".repeat(32))]);
        let loaded = load(Some(&path), dir.path(), &env, Path::new("/usr/bin/mcpgate"))
            .unwrap_or_else(|e| panic!("invalid configuration: {e}\n{text}"));
        let config = loaded.config;
        assert_eq!(config.servers.len(), 2);
        assert_eq!(config.limits.list_timeout, Duration::from_secs(2));
        assert!(matches!(
            config.state,
            mcpgate::config::StateConfig::Sqlite { .. }
        ));
        assert!(config.access.is_some(), "an access rule");
        assert!(matches!(
            config.service.auth,
            mcpgate::config::AuthConfig::Jwt(_)
        ));
    }

    #[test]
    fn tokens_carry_the_bench_tenant_and_roles() {
        let token = token(&"s".repeat(32), true).expect("token");
        let payload = token.split('.').nth(1).expect("payload");
        assert!(!payload.is_empty());
        assert_eq!(token.split('.').count(), 3);
    }
}
