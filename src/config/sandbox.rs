//! The validated sandbox of a stdio server: who it runs as, its resource limits, the files
//! it may read and write and the network it may reach (applied by
//! [`crate::upstream::supervisor`]).

use std::path::PathBuf;

/// Address space a sandboxed server gets unless told otherwise. Every mapping counts, and
/// Node.js reserves about 1 GiB before it runs any code, so the bound is generous: it stops a
/// runaway allocation, not an ordinary server.
pub const DEFAULT_MEMORY_BYTES: u64 = 4 << 30;
/// Open files (`RLIMIT_NOFILE`) unless told otherwise.
pub const DEFAULT_OPEN_FILES: u64 = 1024;
/// Processes and threads of the server's user (`RLIMIT_NPROC`) unless told otherwise.
pub const DEFAULT_PROCESSES: u64 = 256;

/// How much of the sandbox must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// No sandbox: the server runs as the gateway does (only a cleared environment and its
    /// own process group).
    Off,
    /// User, limits, and Landlock rules as far as the kernel has them; what it lacks is said at
    /// start and in the server's status.
    On,
    /// As `On`, but a kernel without the Landlock rules asked for refuses to start the server.
    Required,
}

/// The user a server runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunAs {
    /// The gateway's own user; refused when that is root (write `run_as = "root"` to mean it).
    Gateway,
    /// A named user: the child drops to `uid` and `gid`, with no supplementary groups.
    User { name: String, uid: u32, gid: u32 },
}

impl RunAs {
    /// Whether the child would run as root, given the gateway's effective user id.
    pub fn is_root(&self, gateway_uid: u32) -> bool {
        match self {
            RunAs::Gateway => gateway_uid == 0,
            RunAs::User { uid, .. } => *uid == 0,
        }
    }
}

/// What a server may reach over the network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Network {
    /// No TCP connections and no listening.
    Off,
    /// Anything the machine allows.
    On,
    /// TCP connections to these ports only (on any address: Landlock rules name ports).
    Ports(Vec<u16>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub mode: SandboxMode,
    pub run_as: RunAs,
    /// Address space (`RLIMIT_AS`), bytes.
    pub memory: Option<u64>,
    /// CPU time (`RLIMIT_CPU`), seconds of the server process's whole life.
    pub cpu_seconds: Option<u64>,
    /// Open files (`RLIMIT_NOFILE`).
    pub open_files: Option<u64>,
    /// Processes and threads (`RLIMIT_NPROC`, counted per user).
    pub processes: Option<u64>,
    /// Paths readable (and executable) beyond the defaults; absolute.
    pub read: Vec<PathBuf>,
    /// Paths writable beyond the server's working folder; absolute.
    pub write: Vec<PathBuf>,
    pub network: Network,
}

impl Default for Sandbox {
    /// On, as the gateway's user, with the default limits, no extra paths, no network.
    fn default() -> Sandbox {
        Sandbox {
            mode: SandboxMode::On,
            run_as: RunAs::Gateway,
            memory: Some(DEFAULT_MEMORY_BYTES),
            cpu_seconds: None,
            open_files: Some(DEFAULT_OPEN_FILES),
            processes: Some(DEFAULT_PROCESSES),
            read: Vec::new(),
            write: Vec::new(),
            network: Network::Off,
        }
    }
}

impl Sandbox {
    /// No sandbox at all (tests and embedders that run trusted servers).
    pub fn off() -> Sandbox {
        Sandbox {
            mode: SandboxMode::Off,
            ..Sandbox::default()
        }
    }

    /// Why this sandbox may not start a server for a gateway running as `gateway_uid`, if
    /// it may not: as root, only when `run_as = "root"` says so.
    pub fn refusal(&self, gateway_uid: u32) -> Option<&'static str> {
        (self.mode != SandboxMode::Off && self.run_as == RunAs::Gateway && gateway_uid == 0)
            .then_some(
                "the gateway runs as root and this server names no user: set `run_as` in [sandbox] \
             or the server's sandbox (e.g. \"nobody\"), or `run_as = \"root\"` to run it as root \
             knowingly",
            )
    }
}
