//! Pins: the reviewed fingerprint of every tool, kept in the `mcpgate.lock` file, and how a
//! catalog compares to them; the defence against a tool changing after it was approved.

mod file;

use std::{
    collections::{BTreeMap, HashSet},
    fmt,
};

use crate::config::ServerId;

use super::{Catalog, CatalogTool, Fingerprint, definition, scan::escaped};

pub use file::{PinFileProblem, PinsError};

/// Characters of a tool name shown in a report line; names are untrusted.
const MAX_NAME_SHOWN: usize = 80;

/// Hex digits of a fingerprint shown in a report line: enough to tell two apart by eye.
const FINGERPRINT_SHOWN: usize = 12;

/// Reviewed fingerprints by server, then upstream tool name. Pins are keyed by name, so a
/// tool that reappears under another name is new, never trusted through the old pin.
/// Beside them, the reviewed definitions by fingerprint (the exact fingerprinted text), so a
/// changed tool can be shown next to what was reviewed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    servers: BTreeMap<ServerId, BTreeMap<String, String>>,
    definitions: BTreeMap<String, String>,
}

impl Pins {
    /// Pins every tool of `catalog` at its current fingerprint.
    pub fn from_catalog(catalog: &Catalog) -> Pins {
        let mut pins = Pins::default();
        for tool in catalog.tools() {
            pins.pin(tool);
        }
        pins
    }

    /// Pins one catalog tool at its live definition, which is kept with the pin.
    pub fn pin(&mut self, tool: &CatalogTool) {
        self.set(tool.server.clone(), &tool.upstream.name, &tool.fingerprint);
        self.definitions.insert(
            tool.fingerprint.as_str().to_owned(),
            definition(tool.received()),
        );
    }

    /// The reviewed definition pinned as `fingerprint` (canonical JSON), when the file has it:
    /// files written before definitions were kept have fingerprints only.
    pub fn definition(&self, fingerprint: &str) -> Option<&str> {
        self.definitions.get(fingerprint).map(String::as_str)
    }

    /// The kept definitions some pin still refers to, by fingerprint.
    fn referenced_definitions(&self) -> BTreeMap<&str, &str> {
        let pinned: HashSet<&str> = self
            .servers
            .values()
            .flat_map(|section| section.values().map(String::as_str))
            .collect();
        self.definitions
            .iter()
            .filter(|(fp, _)| pinned.contains(fp.as_str()))
            .map(|(fp, text)| (fp.as_str(), text.as_str()))
            .collect()
    }

    /// Pins `tool` of `server` at `fingerprint`, replacing any earlier pin.
    pub fn set(&mut self, server: ServerId, tool: &str, fingerprint: &Fingerprint) {
        self.servers
            .entry(server)
            .or_default()
            .insert(tool.to_owned(), fingerprint.as_str().to_owned());
    }

    /// Pins every tool `catalog` lists for `server` at its current fingerprint. Pins of tools
    /// the catalog does not list stay: a server that is down must not lose its pins.
    pub fn merge_server(&mut self, catalog: &Catalog, server: &ServerId) {
        // A server with no tools still gets its section: a tool it adds later is new.
        self.servers.entry(server.clone()).or_default();
        for tool in catalog.for_server(server) {
            self.pin(tool);
        }
    }

    /// Replaces the section of `server` with exactly the tools `catalog` lists for it (tools
    /// gone from a server that is up lose their pins).
    pub fn replace_server(&mut self, catalog: &Catalog, server: &ServerId) {
        self.servers.remove(server);
        self.merge_server(catalog, server);
    }

    /// The pinned fingerprint of `tool` of `server`.
    pub fn get(&self, server: &ServerId, tool: &str) -> Option<&str> {
        self.servers.get(server)?.get(tool).map(String::as_str)
    }

    /// `server`'s section: tool name to fingerprint; `None` when the file has no section.
    pub fn server(&self, server: &ServerId) -> Option<&BTreeMap<String, String>> {
        self.servers.get(server)
    }

    /// Servers with a section, in id order.
    pub fn servers(&self) -> impl Iterator<Item = &ServerId> {
        self.servers.keys()
    }

    /// Pins across all servers.
    pub fn len(&self) -> usize {
        self.servers.values().map(BTreeMap::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// How one catalog tool stands against the pins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PinStatus {
    /// Pinned at this very fingerprint.
    Pinned,
    /// Pinned at another fingerprint: the definition changed since it was reviewed.
    Changed { pinned: String },
    /// Its server has a section, but no pin for this name (added, or renamed).
    New,
    /// No pin file, or no section for its server: nothing to compare with.
    Unpinned,
}

/// Compares one tool (by upstream name) with its pin.
pub fn status(
    pins: Option<&Pins>,
    server: &ServerId,
    tool: &str,
    fingerprint: &Fingerprint,
) -> PinStatus {
    let Some(section) = pins.and_then(|p| p.server(server)) else {
        return PinStatus::Unpinned;
    };
    match section.get(tool) {
        Some(pinned) if pinned == fingerprint.as_str() => PinStatus::Pinned,
        Some(pinned) => PinStatus::Changed {
            pinned: pinned.clone(),
        },
        None => PinStatus::New,
    }
}

/// Pins with no tool of that name in `catalog`, in server then name order. A removed tool is
/// harmless at run time; `mcpgate pin --check` lists them so the file can be tidied.
pub fn removed(pins: &Pins, catalog: &Catalog) -> Vec<(ServerId, String)> {
    let mut out = Vec::new();
    for (server, section) in &pins.servers {
        let present: HashSet<&str> = catalog
            .for_server(server)
            .iter()
            .map(|t| t.upstream.name.as_ref())
            .collect();
        for tool in section.keys() {
            if !present.contains(tool.as_str()) {
                out.push((server.clone(), tool.clone()));
            }
        }
    }
    out
}

/// A tool whose definition differs from its pin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangedPin {
    pub server: ServerId,
    pub tool: String,
    pub pinned: String,
    pub current: Fingerprint,
}

/// Everything in which a catalog and the pins disagree, each list in server then tool order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PinReport {
    pub changed: Vec<ChangedPin>,
    /// Tools of a pinned server that have no pin.
    pub new: Vec<(ServerId, String)>,
    /// Pins with no tool in the catalog.
    pub removed: Vec<(ServerId, String)>,
    /// Catalog servers with no section in the pin file, with their tool counts.
    pub unpinned: Vec<(ServerId, usize)>,
}

impl PinReport {
    /// The pin file matches the catalog exactly.
    pub fn is_clean(&self) -> bool {
        self.changed.is_empty()
            && self.new.is_empty()
            && self.removed.is_empty()
            && self.unpinned.is_empty()
    }
}

/// One line per finding (nothing when clean); tool names escaped and cut.
impl fmt::Display for PinReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = |fp: &str| fp.chars().take(FINGERPRINT_SHOWN).collect::<String>();
        for c in &self.changed {
            writeln!(
                f,
                "changed   {}: pinned {}…, now {}…",
                shown(&c.server, &c.tool),
                short(&c.pinned),
                short(c.current.as_str())
            )?;
        }
        for (server, tool) in &self.new {
            writeln!(f, "new       {}: not pinned", shown(server, tool))?;
        }
        for (server, tool) in &self.removed {
            writeln!(
                f,
                "removed   {}: pinned but not listed",
                shown(server, tool)
            )?;
        }
        for (server, tools) in &self.unpinned {
            writeln!(
                f,
                "unpinned  {server}: no section in the pin file ({tools} tools)"
            )?;
        }
        Ok(())
    }
}

fn shown(server: &ServerId, tool: &str) -> String {
    format!("{server}.{}", escaped(tool, MAX_NAME_SHOWN))
}

/// Compares every catalog tool and every pin, for `mcpgate pin --check`.
pub fn check(pins: &Pins, catalog: &Catalog) -> PinReport {
    let mut report = PinReport {
        removed: removed(pins, catalog),
        ..PinReport::default()
    };
    for tool in catalog.tools() {
        let name = tool.upstream.name.to_string();
        match status(Some(pins), &tool.server, &name, &tool.fingerprint) {
            PinStatus::Pinned => {}
            PinStatus::Changed { pinned } => report.changed.push(ChangedPin {
                server: tool.server.clone(),
                tool: name,
                pinned,
                current: tool.fingerprint.clone(),
            }),
            PinStatus::New => report.new.push((tool.server.clone(), name)),
            PinStatus::Unpinned => match report.unpinned.last_mut() {
                Some((server, count)) if *server == tool.server => *count += 1,
                _ => report.unpinned.push((tool.server.clone(), 1)),
            },
        }
    }
    report
}

#[cfg(test)]
mod tests;
