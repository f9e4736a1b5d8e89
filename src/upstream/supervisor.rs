//! The process supervisor: a tiny parent that sits between the gateway and a stdio server so
//! that no server process, grandchildren included, outlives the gateway, even a SIGKILLed one.
//!
//! The gateway starts `mcpgate supervise --parent PID -- PROGRAM ARGS...` as the leader of a new
//! process group; the supervisor asks the kernel for SIGTERM when its parent dies
//! (`PR_SET_PDEATHSIG`), runs the server in the same group with stdio inherited, and kills the
//! whole group when the server exits or the gateway goes away. A parent-death signal alone
//! would not do: it covers only the direct child and is cleared across `fork`, so the
//! grandchildren that `npx` and `uvx` start would survive.

use std::{ffi::OsString, process::Command, thread};

use nix::{
    sys::signal::{SigSet, Signal, killpg},
    unistd::{Pid, getpgrp, getppid},
};

/// Runs `program` under supervision and returns the exit code to exit with. Blocks.
pub fn run(parent: u32, program: OsString, args: Vec<OsString>) -> i32 {
    let signals = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP]
        .into_iter()
        .collect::<SigSet>();
    // Block before anything can deliver them, so `wait` below receives them. The server does
    // not inherit the mask: std resets the signal mask of spawned children.
    if signals.thread_block().is_err() {
        return 70;
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
            return 127;
        }
    };
    let group = getpgrp();
    thread::spawn(move || {
        // Any of the signals: the gateway died or asked us to stop. Take the group down,
        // ourselves included.
        let _ = signals.wait();
        let _ = killpg(group, Signal::SIGKILL);
    });
    let code = child.wait().ok().and_then(|s| s.code()).unwrap_or(1);
    // The server is gone; its descendants must not linger.
    let _ = killpg(group, Signal::SIGKILL);
    code
}
