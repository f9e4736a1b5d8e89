//! Rules for `[sandbox]` and a server's own `sandbox` table: the mode, the user (resolved to
//! ids now, so a typo is a configuration problem rather than a failed start), the limits, the
//! paths (absolute, relative ones against the configuration's folder) and the network.

use std::path::{Path, PathBuf};

use nix::unistd::{Group, Uid, User};

use super::{
    raw::{RawNetwork, RawSandbox, RawSize},
    sandbox::{Network, RunAs, Sandbox, SandboxMode},
    validate::Report,
};

/// Address space below this cannot start a Node.js or Python server (Node.js alone reserves
/// about 1 GiB): smaller values are refused rather than failing every start.
const MIN_MEMORY_BYTES: u64 = 256 << 20;

/// The `[sandbox]` defaults.
pub(super) fn defaults(raw: &RawSandbox, base: &Path, report: &mut Report) -> Sandbox {
    apply(Sandbox::default(), raw, "sandbox", base, report)
}

/// A server's sandbox: `defaults` with the fields `raw` writes (at `at`) replaced, and its
/// `read` and `write` added to the defaults' lists.
pub(super) fn apply(
    mut sandbox: Sandbox,
    raw: &RawSandbox,
    at: &str,
    base: &Path,
    report: &mut Report,
) -> Sandbox {
    if let Some(mode) = &raw.mode {
        match mode.as_str() {
            "on" => sandbox.mode = SandboxMode::On,
            "required" => sandbox.mode = SandboxMode::Required,
            "off" => sandbox.mode = SandboxMode::Off,
            _ => report.problem(format!("{at}.mode"), "must be `on`, `required` or `off`"),
        }
    }
    if let Some(user) = &raw.run_as
        && let Some(run_as) = run_as(user, &format!("{at}.run_as"), report)
    {
        sandbox.run_as = run_as;
    }
    if let Some(memory) = &raw.memory
        && let Some(bytes) = size(memory, &format!("{at}.memory"), report)
    {
        if bytes < MIN_MEMORY_BYTES {
            report.problem(
                format!("{at}.memory"),
                "is below 256 MiB of address space, which no Node.js or Python server starts in",
            );
        }
        sandbox.memory = Some(bytes);
    }
    let mut count = |value: Option<u64>, field: &str, min: u64, slot: &mut Option<u64>| {
        if let Some(value) = value {
            if value < min {
                report.problem(format!("{at}.{field}"), format!("must be at least {min}"));
            }
            *slot = Some(value);
        }
    };
    count(raw.cpu_seconds, "cpu_seconds", 1, &mut sandbox.cpu_seconds);
    // Below this a runtime cannot open its own libraries and pipes.
    count(raw.open_files, "open_files", 16, &mut sandbox.open_files);
    count(raw.processes, "processes", 1, &mut sandbox.processes);
    let mut paths = |items: &Option<Vec<String>>, field: &str, into: &mut Vec<PathBuf>| {
        for (i, item) in items.iter().flatten().enumerate() {
            let at = format!("{at}.{field}[{i}]");
            if item.is_empty() || item.contains('\0') {
                report.problem(at, "must be a path (non-empty, no NUL)");
                continue;
            }
            let path = base.join(item);
            if !path.exists() {
                report.warn(
                    &at,
                    "does not exist now: the server gets no access to it until it does",
                );
            }
            if !into.contains(&path) {
                into.push(path);
            }
        }
    };
    paths(&raw.read, "read", &mut sandbox.read);
    paths(&raw.write, "write", &mut sandbox.write);
    if let Some(network) = &raw.network {
        sandbox.network = match network {
            RawNetwork::All(true) => Network::On,
            RawNetwork::All(false) => Network::Off,
            RawNetwork::Ports(ports) => Network::Ports(ports_of(ports, at, report)),
        };
    }
    sandbox
}

fn ports_of(ports: &[i64], at: &str, report: &mut Report) -> Vec<u16> {
    let mut valid = Vec::new();
    for (i, port) in ports.iter().enumerate() {
        match u16::try_from(*port) {
            Ok(port) if port > 0 => {
                if !valid.contains(&port) {
                    valid.push(port);
                }
            }
            _ => report.problem(
                format!("{at}.network[{i}]"),
                "must be a TCP port, 1 to 65535",
            ),
        }
    }
    valid.sort_unstable();
    valid
}

/// `user[:group]`, by name or number; the group defaults to the user's own.
fn run_as(text: &str, at: &str, report: &mut Report) -> Option<RunAs> {
    let (user, group) = match text.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (text, None),
    };
    let numeric = user.parse::<u32>().ok();
    let entry = match numeric {
        Some(uid) => User::from_uid(Uid::from_raw(uid)),
        None => User::from_name(user),
    };
    let entry = match entry {
        Ok(entry) => entry,
        Err(err) => {
            report.problem(at, format!("the user database could not be read: {err}"));
            return None;
        }
    };
    // A numeric id with no passwd entry is still a user the kernel can switch to.
    let (uid, own_gid) = match (&entry, numeric) {
        (Some(entry), _) => (entry.uid.as_raw(), Some(entry.gid.as_raw())),
        (None, Some(uid)) => (uid, None),
        (None, None) => {
            report.problem(at, "names no user of this machine");
            return None;
        }
    };
    let gid = match group {
        None => match own_gid {
            Some(gid) => gid,
            None => {
                report.problem(at, "names a user id with no entry: give `uid:gid`");
                return None;
            }
        },
        Some(group) => match group.parse::<u32>() {
            Ok(gid) => gid,
            Err(_) => match Group::from_name(group) {
                Ok(Some(entry)) => entry.gid.as_raw(),
                _ => {
                    report.problem(at, "names no group of this machine");
                    return None;
                }
            },
        },
    };
    Some(RunAs::User {
        name: text.to_owned(),
        uid,
        gid,
    })
}

/// Bytes, or a number with `KiB`, `MiB`, `GiB` (or `K`, `M`, `G`).
fn size(raw: &RawSize, at: &str, report: &mut Report) -> Option<u64> {
    let text = match raw {
        RawSize::Bytes(bytes) => return Some(*bytes),
        RawSize::Text(text) => text.trim(),
    };
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KiB" => 10,
        "M" | "MiB" => 20,
        "G" | "GiB" => 30,
        _ => {
            report.problem(at, "must be bytes or a size with a unit: KiB, MiB or GiB");
            return None;
        }
    };
    let bytes = number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift));
    if bytes.is_none() {
        report.problem(at, "must be bytes or a size with a unit: KiB, MiB or GiB");
    }
    bytes
}
