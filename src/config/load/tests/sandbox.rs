//! Tests of `[sandbox]` and a server's own `sandbox`: defaults reaching every stdio server,
//! overrides field by field, the shorthand mode, users resolved to ids, and every problem
//! with its path.

use super::*;
use crate::config::{Network, RunAs, Sandbox, SandboxMode, StdioConfig};

fn stdio<'a>(loaded: &'a Loaded, id: &str) -> &'a StdioConfig {
    let server = loaded
        .config
        .server(&ServerId::new(id).expect("valid id"))
        .expect("configured");
    match &server.transport {
        TransportConfig::Stdio(stdio) => stdio,
        other => panic!("{id} is not a stdio server: {other:?}"),
    }
}

#[test]
fn the_defaults_reach_every_stdio_server_and_a_server_overrides_them() {
    let dir = TempDir::new().expect("temp dir");
    std::fs::create_dir(dir.path().join("models")).expect("folder");
    std::fs::create_dir(dir.path().join("data")).expect("folder");
    std::fs::write(
        dir.path().join("c.toml"),
        r#"
        [sandbox]
        run_as = "nobody"
        memory = "2GiB"
        read = ["models"]
        network = [443]

        [servers.plain]
        command = "p"

        [servers.own]
        command = "o"
        sandbox = { memory = 1073741824, cpu_seconds = 60, processes = 32, open_files = 64, write = ["data"], network = false }

        [servers.strict]
        command = "s"
        sandbox = "required"

        [servers.loose]
        command = "l"
        sandbox = { mode = "off" }
    "#,
    )
    .expect("write");
    let loaded = load(
        Some(Path::new("c.toml")),
        dir.path(),
        &Env::default(),
        Path::new(EXE),
    )
    .expect("loads");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let plain = &stdio(&loaded, "plain").sandbox;
    assert_eq!(plain.mode, SandboxMode::On);
    assert!(
        matches!(&plain.run_as, RunAs::User { name, uid, .. } if name == "nobody" && *uid != 0),
        "{plain:?}"
    );
    assert_eq!(plain.memory, Some(2 << 30));
    assert_eq!(plain.read, [dir.path().join("models")]);
    assert_eq!(plain.network, Network::Ports(vec![443]));
    assert_eq!(plain.open_files, Sandbox::default().open_files);

    let own = &stdio(&loaded, "own").sandbox;
    assert_eq!(own.run_as, plain.run_as, "what it does not write, it keeps");
    assert_eq!(
        (own.memory, own.cpu_seconds, own.processes, own.open_files),
        (Some(1 << 30), Some(60), Some(32), Some(64))
    );
    assert_eq!(
        own.read,
        [dir.path().join("models")],
        "its lists add to the defaults'"
    );
    assert_eq!(own.write, [dir.path().join("data")]);
    assert_eq!(own.network, Network::Off);

    assert_eq!(stdio(&loaded, "strict").sandbox.mode, SandboxMode::Required);
    assert_eq!(stdio(&loaded, "loose").sandbox.mode, SandboxMode::Off);
}

#[test]
fn without_a_section_every_stdio_server_gets_the_default_sandbox() {
    let loaded =
        load_file("c.toml", "[servers.p]\ncommand = \"p\"\n", &Env::default()).expect("loads");
    assert_eq!(stdio(&loaded, "p").sandbox, Sandbox::default());
    // As root, such a server would be refused: `config check` says so, with its path.
    let problems = loaded.config.sandbox_problems(0);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].path, "servers.p.sandbox.run_as");
    assert!(loaded.config.sandbox_problems(1000).is_empty());
}

#[test]
fn a_json_source_spells_the_fields_in_camel_case() {
    let text = r#"{"mcpServers": {"fs": {"command": "npx", "args": ["x"],
        "sandbox": {"runAs": "65534:65534", "cpuSeconds": 5, "openFiles": 100}}}}"#;
    let loaded = load_file("servers.json", text, &Env::default()).expect("loads");
    let sandbox = &stdio(&loaded, "fs").sandbox;
    assert_eq!(
        sandbox.run_as,
        RunAs::User {
            name: "65534:65534".to_owned(),
            uid: 65534,
            gid: 65534
        }
    );
    assert_eq!(
        (sandbox.cpu_seconds, sandbox.open_files),
        (Some(5), Some(100))
    );
}

#[test]
fn sandbox_problems_are_reported_with_their_paths() {
    let got = problems(
        r#"
        [sandbox]
        mode = "sometimes"
        run_as = "no-such-user-here"
        memory = "12 parsecs"

        [servers.a]
        command = "a"
        sandbox = { run_as = "nobody:no-such-group", memory = "100MiB", open_files = 3, processes = 0, network = [0, 70000, 22], read = [""] }

        [servers.web]
        url = "https://example.com/mcp"
        sandbox = "on"
    "#,
    );
    assert_eq!(
        got,
        [
            "sandbox.mode: must be `on`, `required` or `off`",
            "sandbox.run_as: names no user of this machine",
            "sandbox.memory: must be bytes or a size with a unit: KiB, MiB or GiB",
            "servers.a.sandbox.run_as: names no group of this machine",
            "servers.a.sandbox.memory: is below 256 MiB of address space, which no Node.js or \
             Python server starts in",
            "servers.a.sandbox.open_files: must be at least 16",
            "servers.a.sandbox.processes: must be at least 1",
            "servers.a.sandbox.read[0]: must be a path (non-empty, no NUL)",
            "servers.a.sandbox.network[0]: must be a TCP port, 1 to 65535",
            "servers.a.sandbox.network[1]: must be a TCP port, 1 to 65535",
            "servers.web.sandbox: applies only to a server with `command`",
        ]
    );
    let got = problems("[servers.a]\ncommand = \"a\"\nsandbox = { raed = [\"/srv\"] }\n");
    assert!(got[0].contains("unknown field `raed`"), "{got:?}");
    let got = problems("[sandbox]\nwrtie = []\n");
    assert!(got[0].contains("unknown field `wrtie`"), "{got:?}");
}

#[test]
fn a_missing_path_is_a_warning() {
    let loaded = load_file(
        "c.toml",
        "[sandbox]\nwrite = [\"/nonexistent/mcpgate-data\"]\n",
        &Env::default(),
    )
    .expect("loads");
    assert_eq!(
        loaded.warnings,
        ["sandbox.write[0]: does not exist now: the server gets no access to it until it does"]
    );
}
