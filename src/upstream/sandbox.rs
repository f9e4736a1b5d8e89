//! The sandbox of a stdio server, as the gateway plans it and the supervisor enters it: the
//! user to drop to, the rlimits, and the Landlock rules (system folders and the program's
//! own install folders readable, its working folder and the configured paths writable, TCP
//! off or limited to ports, signals and abstract sockets scoped to the sandbox).
//!
//! The gateway computes the [`Plan`] (it knows the configuration, the environment and the
//! folders it made) and hands it to `mcpgate supervise --sandbox JSON`, which applies it to
//! itself before it starts the server: the server inherits all of it, and the supervisor
//! needs nothing more once the server runs. Doing it in the supervisor, not between `fork`
//! and `exec` of the gateway, keeps the crate free of `unsafe`.

use std::{
    fs,
    io::Read as _,
    path::{Path, PathBuf},
};

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd,
    Ruleset, RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope,
};
use nix::{
    sys::resource::{Resource, setrlimit},
    unistd::{Gid, Uid, getuid, setgroups, setresgid, setresuid},
};
use serde::{Deserialize, Serialize};

use crate::config::{Network, RunAs, Sandbox, SandboxMode, StdioConfig};

/// Folders every sandboxed server may read and execute from: the system's programs,
/// libraries and settings, and the kernel's views of itself and of the process (other
/// processes' secrets in `/proc` stay behind the kernel's ptrace checks, which Landlock
/// tightens to the sandbox's own processes).
const SYSTEM_READ: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/proc", "/sys",
];
/// Device files (`/dev/null`, `/dev/urandom`, a terminal): read, write and ioctl, but nothing
/// made or removed there.
const DEVICES: &str = "/dev";
/// The highest Landlock ABI whose rights the plan asks for; older kernels get what they have
/// (or, under `mode = "required"`, refuse).
const ABI_USED: ABI = ABI::V7;
/// Seconds between the soft CPU limit (SIGXCPU, which a server may catch and report) and the
/// hard one (SIGKILL).
const CPU_GRACE_SECONDS: u64 = 2;
/// The line the supervisor writes on stderr, before the server runs, saying what it
/// enforced; the gateway reads only the first line for it, which the server cannot forge.
pub const STATUS_PREFIX: &str = "mcpgate-sandbox: ";
/// The supervisor's exit code when the sandbox could not be entered (EX_OSERR).
pub const SANDBOX_FAILED: i32 = 71;

/// Everything the supervisor applies, in the order it applies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Drop to this user and group (no supplementary groups); `None`: stay.
    pub user: Option<(u32, u32)>,
    pub memory: Option<u64>,
    pub cpu_seconds: Option<u64>,
    pub open_files: Option<u64>,
    pub processes: Option<u64>,
    /// Refuse to start when the kernel cannot enforce every rule.
    pub required: bool,
    pub read: Vec<PathBuf>,
    pub write: Vec<PathBuf>,
    /// `None`: any network; else the TCP ports it may connect to (none: no TCP at all).
    pub connect: Option<Vec<u16>>,
}

/// The plan for `config`'s sandbox (not off), run in `workdir` with `path` as its `PATH`.
pub fn plan(config: &StdioConfig, workdir: &Path, path: Option<&str>) -> Plan {
    let sandbox = &config.sandbox;
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    for folder in program_folders(&config.command, path) {
        push_new(&mut read, folder);
    }
    for extra in &sandbox.read {
        push_new(&mut read, extra.clone());
    }
    let mut write = vec![workdir.to_path_buf()];
    for extra in &sandbox.write {
        push_new(&mut write, extra.clone());
    }
    Plan {
        user: match &sandbox.run_as {
            RunAs::Gateway => None,
            RunAs::User { uid, gid, .. } => Some((*uid, *gid)),
        },
        memory: sandbox.memory,
        cpu_seconds: sandbox.cpu_seconds,
        open_files: sandbox.open_files,
        processes: sandbox.processes,
        required: sandbox.mode == SandboxMode::Required,
        read,
        write,
        connect: match &sandbox.network {
            Network::On => None,
            Network::Off => Some(Vec::new()),
            Network::Ports(ports) => Some(ports.clone()),
        },
    }
}

fn push_new(paths: &mut Vec<PathBuf>, path: PathBuf) {
    if !paths.iter().any(|p| path.starts_with(p)) {
        paths.push(path);
    }
}

/// Where the program and its interpreter live: the folder of the program as found on `PATH`
/// and of its real file, each with its parent when it is a `bin` folder (a virtualenv, a
/// `node_modules/.bin`, a `~/.cargo/bin`), and the same for the interpreter its `#!` line
/// names. What a runtime needs beside its program is under those (a venv's packages, a
/// package's `node_modules`, a Python's standard library).
fn program_folders(command: &str, path: Option<&str>) -> Vec<PathBuf> {
    let mut folders = Vec::new();
    let Some(found) = find_program(command, path) else {
        return folders;
    };
    add_install_folders(&found, &mut folders);
    if let Some(interpreter) = interpreter(&found, path) {
        add_install_folders(&interpreter, &mut folders);
    }
    folders
}

fn add_install_folders(program: &Path, folders: &mut Vec<PathBuf>) {
    let real = fs::canonicalize(program).ok();
    for file in std::iter::once(program.to_path_buf()).chain(real) {
        let Some(folder) = file.parent() else {
            continue;
        };
        let is_bin = matches!(
            folder.file_name().and_then(|n| n.to_str()),
            Some("bin" | ".bin")
        );
        let install = match folder.parent() {
            Some(parent) if is_bin && parent != Path::new("/") => parent,
            _ => folder,
        };
        if install != Path::new("/") && !folders.iter().any(|f| f == install) {
            folders.push(install.to_path_buf());
        }
    }
}

/// `command` as the child's `execvp` would find it.
fn find_program(command: &str, path: Option<&str>) -> Option<PathBuf> {
    if command.contains('/') {
        return Some(PathBuf::from(command)).filter(|p| p.is_file());
    }
    path?
        .split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(command))
        .find(|candidate| candidate.is_file())
}

/// The interpreter a script's `#!` line names (through `/usr/bin/env NAME`, on `PATH`).
fn interpreter(script: &Path, path: Option<&str>) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let read = fs::File::open(script).ok()?.read(&mut head).ok()?;
    let line = head[..read].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let program = words.next()?;
    if Path::new(program).file_name().is_some_and(|n| n == "env") {
        let name = words.find(|w| !w.starts_with('-'))?;
        return find_program(name, path);
    }
    Some(PathBuf::from(program))
}

/// Why the sandbox could not be entered.
#[derive(Debug, thiserror::Error)]
pub enum EnterError {
    #[error("cannot set {limit}: {source}")]
    Limit {
        limit: &'static str,
        source: nix::Error,
    },
    #[error("the Landlock rules could not be applied: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("Landlock is required, but this kernel does not enforce it")]
    NotEnforced,
    #[error("the socket filter could not be applied: {0}")]
    Sockets(#[from] seccompiler::Error),
    #[error("cannot switch to user {uid} and group {gid}: {source}")]
    User {
        uid: u32,
        gid: u32,
        source: nix::Error,
    },
}

/// What [`enter`] enforced, for the status line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforced {
    /// `full`, `partial` or `none`: how much of the Landlock rules the kernel enforces.
    pub landlock: String,
    /// The user the server runs as.
    pub uid: u32,
}

/// Applies `plan` to this process (the supervisor, before it starts the server): rlimits,
/// Landlock, then the user. Run before any other thread exists, since Landlock restricts the
/// calling thread and what it starts.
pub fn enter(plan: &Plan) -> Result<Enforced, EnterError> {
    limits(plan)?;
    let landlock = landlock(plan)?;
    sockets(plan)?;
    if let Some((uid, gid)) = plan.user {
        switch_user(uid, gid)?;
    }
    Ok(Enforced {
        landlock: landlock.to_owned(),
        uid: getuid().as_raw(),
    })
}

fn limits(plan: &Plan) -> Result<(), EnterError> {
    let set = |resource, limit: &'static str, soft: u64, hard: u64| {
        setrlimit(resource, soft, hard).map_err(|source| EnterError::Limit { limit, source })
    };
    // No core dumps: one would hold the server's memory, secrets included.
    set(Resource::RLIMIT_CORE, "the core dump limit", 0, 0)?;
    if let Some(bytes) = plan.memory {
        set(Resource::RLIMIT_AS, "the memory limit", bytes, bytes)?;
    }
    if let Some(seconds) = plan.cpu_seconds {
        let hard = seconds.saturating_add(CPU_GRACE_SECONDS);
        set(Resource::RLIMIT_CPU, "the CPU limit", seconds, hard)?;
    }
    if let Some(files) = plan.open_files {
        set(
            Resource::RLIMIT_NOFILE,
            "the open files limit",
            files,
            files,
        )?;
    }
    if let Some(processes) = plan.processes {
        set(
            Resource::RLIMIT_NPROC,
            "the process limit",
            processes,
            processes,
        )?;
    }
    Ok(())
}

/// The Landlock rules; how much of them the kernel enforces.
fn landlock(plan: &Plan) -> Result<&'static str, EnterError> {
    let level = if plan.required {
        CompatLevel::HardRequirement
    } else {
        CompatLevel::BestEffort
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(level)
        .handle_access(AccessFs::from_all(ABI_USED))?;
    if plan.connect.is_some() {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let mut created = ruleset
        .scope(Scope::AbstractUnixSocket | Scope::Signal)?
        .create()?;
    let read = AccessFs::from_read(ABI_USED);
    let devices = AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::ReadDir | AccessFs::IoctlDev;
    let rules = plan
        .read
        .iter()
        .map(|path| (path.as_path(), read))
        .chain(
            plan.write
                .iter()
                .map(|p| (p.as_path(), AccessFs::from_all(ABI_USED))),
        )
        .chain(std::iter::once((Path::new(DEVICES), devices)));
    for (path, access) in rules {
        // A folder that does not exist here (`/lib32` on most machines) grants nothing.
        let Ok(fd) = PathFd::new(path) else {
            continue;
        };
        let access = if path.is_dir() {
            access
        } else {
            access & AccessFs::from_file(ABI_USED)
        };
        created = created.add_rule(PathBeneath::new(fd, access))?;
    }
    for port in plan.connect.iter().flatten() {
        created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
    }
    let status = created.restrict_self()?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok("full"),
        RulesetStatus::PartiallyEnforced => Ok("partial"),
        RulesetStatus::NotEnforced if plan.required => Err(EnterError::NotEnforced),
        RulesetStatus::NotEnforced => Ok("none"),
    }
}

/// The address families a server may not open sockets of: with no network, Unix-domain,
/// IP (TCP and UDP alike) and raw packet sockets; with ports, Unix-domain and raw ones (IP
/// stays for TCP, which Landlock limits to the ports, and for DNS over UDP); with any network,
/// none. Socket pairs (`socketpair`) stay: runtimes use them between their own threads.
fn denied_families(plan: &Plan) -> &'static [i32] {
    match &plan.connect {
        None => &[],
        Some(ports) if ports.is_empty() => &[
            libc::AF_UNIX,
            libc::AF_INET,
            libc::AF_INET6,
            libc::AF_PACKET,
        ],
        Some(_) => &[libc::AF_UNIX, libc::AF_PACKET],
    }
}

/// A seccomp filter refusing `socket()` for [`denied_families`] with `EACCES`, as a Landlock
/// refusal reads.
fn sockets(plan: &Plan) -> Result<(), EnterError> {
    use seccompiler::{
        BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule,
    };
    let families = denied_families(plan);
    if families.is_empty() {
        return Ok(());
    }
    let rules = families
        .iter()
        .map(|family| {
            let condition = SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::Eq,
                u64::from(family.unsigned_abs()),
            )?;
            SeccompRule::new(vec![condition])
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(seccompiler::Error::Backend)?;
    let arch = std::env::consts::ARCH
        .try_into()
        .map_err(seccompiler::Error::Backend)?;
    let filter = SeccompFilter::new(
        [(libc::SYS_socket, rules)].into_iter().collect(),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EACCES.unsigned_abs()),
        arch,
    )
    .map_err(seccompiler::Error::Backend)?;
    let program: BpfProgram = filter.try_into().map_err(seccompiler::Error::Backend)?;
    seccompiler::apply_filter(&program)?;
    Ok(())
}

/// Drops to `uid` and `gid` with no supplementary groups, for good (real, effective and
/// saved ids alike); staying the same user needs no privilege.
fn switch_user(uid: u32, gid: u32) -> Result<(), EnterError> {
    let fail = |source| EnterError::User { uid, gid, source };
    if getuid().is_root() {
        setgroups(&[]).map_err(fail)?;
    }
    let (g, u) = (Gid::from_raw(gid), Uid::from_raw(uid));
    setresgid(g, g, g).map_err(fail)?;
    setresuid(u, u, u).map_err(fail)?;
    Ok(())
}

/// What `sandbox` lets a server do, for `mcpgate tools` and the API, with what the kernel
/// `enforced` of it as the supervisor said (`null` until a process reported).
pub fn describe(sandbox: &Sandbox, enforced: Option<&serde_json::Value>) -> serde_json::Value {
    let mode = match sandbox.mode {
        SandboxMode::Off => return serde_json::json!({ "mode": "off" }),
        SandboxMode::On => "on",
        SandboxMode::Required => "required",
    };
    let user = match &sandbox.run_as {
        RunAs::Gateway => "the gateway's user".to_owned(),
        RunAs::User { name, uid, gid } => format!("{name} ({uid}:{gid})"),
    };
    let network = match &sandbox.network {
        Network::Off => serde_json::json!(false),
        Network::On => serde_json::json!(true),
        Network::Ports(ports) => serde_json::json!(ports),
    };
    serde_json::json!({
        "mode": mode,
        "user": user,
        "memoryBytes": sandbox.memory,
        "cpuSeconds": sandbox.cpu_seconds,
        "openFiles": sandbox.open_files,
        "processes": sandbox.processes,
        "read": sandbox.read,
        "write": sandbox.write,
        "network": network,
        "enforced": enforced,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio(command: &str, sandbox: Sandbox) -> StdioConfig {
        StdioConfig {
            command: command.to_owned(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: None,
            sandbox,
        }
    }

    #[test]
    fn a_venv_script_reads_its_venv_and_its_interpreters_install() {
        let dir = tempfile::tempdir().expect("temp dir");
        let python = dir.path().join("python/3.11/bin");
        fs::create_dir_all(&python).expect("python");
        fs::write(python.join("python3.11"), "").expect("interpreter");
        let venv_bin = dir.path().join("venv/bin");
        fs::create_dir_all(&venv_bin).expect("venv");
        std::os::unix::fs::symlink(python.join("python3.11"), venv_bin.join("python"))
            .expect("link");
        let script = venv_bin.join("server");
        fs::write(
            &script,
            format!("#!{}\nimport x\n", venv_bin.join("python").display()),
        )
        .expect("script");
        let plan = plan(
            &stdio(script.to_str().expect("utf-8"), Sandbox::default()),
            Path::new("/work"),
            None,
        );
        let real = |p: &Path| fs::canonicalize(p).expect("exists");
        assert!(plan.read.contains(&dir.path().join("venv")), "{plan:?}");
        assert!(
            plan.read.contains(&real(&dir.path().join("python/3.11"))),
            "{plan:?}"
        );
        assert_eq!(plan.write, [PathBuf::from("/work")]);
        assert_eq!(plan.connect, Some(vec![]), "no network by default");
        assert_eq!(plan.user, None);
    }

    #[test]
    fn a_node_bin_link_reads_its_node_modules_and_env_finds_node_on_path() {
        let dir = tempfile::tempdir().expect("temp dir");
        let node_bin = dir.path().join("node/bin");
        fs::create_dir_all(&node_bin).expect("node");
        fs::write(node_bin.join("node"), "").expect("node");
        let package = dir.path().join("node_modules/pkg/dist");
        fs::create_dir_all(&package).expect("package");
        fs::write(package.join("index.js"), "#!/usr/bin/env -S node\n").expect("script");
        let bin = dir.path().join("node_modules/.bin");
        fs::create_dir_all(&bin).expect(".bin");
        std::os::unix::fs::symlink(package.join("index.js"), bin.join("pkg")).expect("link");
        let path = format!("{}:/nonexistent", node_bin.display());
        let sandbox = Sandbox {
            read: vec![PathBuf::from("/srv/models")],
            write: vec![PathBuf::from("/srv/data")],
            network: Network::Ports(vec![443]),
            mode: SandboxMode::Required,
            ..Sandbox::default()
        };
        let plan = plan(
            &stdio("pkg", sandbox),
            Path::new("/scratch"),
            Some(&format!("{}:{path}", bin.display())),
        );
        let node_modules = fs::canonicalize(dir.path().join("node_modules")).expect("exists");
        assert!(
            plan.read
                .iter()
                .any(|p| fs::canonicalize(p).ok().as_ref() == Some(&node_modules)),
            "{plan:?}"
        );
        assert!(plan.read.contains(&dir.path().join("node")), "{plan:?}");
        assert!(plan.read.contains(&PathBuf::from("/srv/models")));
        assert_eq!(
            plan.write,
            [PathBuf::from("/scratch"), PathBuf::from("/srv/data")]
        );
        assert_eq!(plan.connect, Some(vec![443]));
        assert!(plan.required);
    }

    #[test]
    fn system_folders_are_not_repeated_for_programs_inside_them() {
        let plan = plan(
            &stdio("/usr/bin/env", Sandbox::default()),
            Path::new("/w"),
            None,
        );
        let usr = plan.read.iter().filter(|p| p.starts_with("/usr")).count();
        assert_eq!(usr, 1, "{plan:?}");
    }
}
