//! The process supervisor: a tiny parent that sits between the gateway and a stdio server so
//! that no server process, grandchildren included, outlives the gateway, even a SIGKILLed one.
//!
//! The gateway starts `mcpgate supervise --parent PID -- PROGRAM ARGS...` as the leader of a new
//! process group; the supervisor asks the kernel for SIGTERM when its parent dies
//! (`PR_SET_PDEATHSIG`), runs the server in the same group with stdio inherited, and kills the
//! whole group when the server exits or the gateway goes away. A parent-death signal alone
//! would not do: it covers only the direct child and is cleared across `fork`, so the
//! grandchildren that `npx` and `uvx` start would survive.
//!
//! With `--sandbox PLAN` it first enters the server's sandbox ([`super::sandbox::enter`]), so
//! the server starts inside it, and says on stderr what was enforced.

use std::{ffi::OsString, process::Command, thread};

use super::sandbox::{self, Plan, SANDBOX_FAILED, STATUS_PREFIX};

use nix::{
    sys::signal::{SigSet, Signal, killpg},
    unistd::{Pid, getpgid, getpgrp, getppid, setpgid},
};

/// The exit code when the server's program could not be started (as a shell's).
pub const NOT_STARTED: i32 = 127;

/// Runs `program` under supervision (in the sandbox `plan`, a JSON [`Plan`], describes) and
/// returns the exit code to exit with: the server's, or 128 plus the signal that ended it.
/// Blocks.
pub fn run(parent: u32, plan: Option<&str>, program: OsString, args: Vec<OsString>) -> i32 {
    let signals = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP]
        .into_iter()
        .collect::<SigSet>();
    // Block before anything can deliver them, so `wait` below receives them. The server does
    // not inherit the mask: std resets the signal mask of spawned children.
    if signals.thread_block().is_err() {
        return 70;
    }
    // Before the parent-death signal: a change of user clears it.
    if let Some(plan) = plan {
        let entered = serde_json::from_str::<Plan>(plan)
            .map_err(|err| format!("the sandbox plan is not readable: {err}"))
            .and_then(|plan| sandbox::enter(&plan).map_err(|err| err.to_string()));
        match entered {
            Ok(enforced) => {
                let status = serde_json::to_string(&enforced).unwrap_or_default();
                eprintln!("{STATUS_PREFIX}{status}");
            }
            Err(err) => {
                eprintln!("mcpgate supervise: the sandbox could not be entered: {err}");
                return SANDBOX_FAILED;
            }
        }
    }
    if nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).is_err() {
        return 70;
    }
    // The gateway may have died between our fork and the prctl: then nobody would signal us.
    if getppid() != Pid::from_raw(parent as i32) {
        return 70;
    }
    let mut child = match Command::new(&program).args(&args).spawn() {
        Ok(child) => child,
        Err(err) => {
            eprintln!(
                "mcpgate supervise: cannot start {}: {err}",
                program.to_string_lossy()
            );
            return NOT_STARTED;
        }
    };
    let group = getpgrp();
    thread::spawn(move || {
        // Any of the signals: the gateway died or asked us to stop. Take the group down,
        // ourselves included.
        let _ = signals.wait();
        let _ = killpg(group, Signal::SIGKILL);
    });
    let code = child.wait().ok().map_or(1, |status| {
        use std::os::unix::process::ExitStatusExt as _;
        status
            .code()
            .or_else(|| status.signal().map(|signal| 128 + signal))
            .unwrap_or(1)
    });
    // The server is gone; its descendants must not linger. We lead their group, so we step
    // into the gateway's group first: otherwise the kill would take us too, and the gateway
    // would see a SIGKILL instead of how the server ended (a limit it hit, say).
    let _ = getpgid(Some(Pid::from_raw(parent as i32)))
        .and_then(|gateway| setpgid(Pid::from_raw(0), gateway));
    let _ = killpg(group, Signal::SIGKILL);
    code
}
