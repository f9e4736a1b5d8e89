//! `[webmcp]`: tools that live in browser pages, registered over the bridge's WebSocket.

use std::time::Duration;

use super::{Confirm, ScanMode};

/// Prefix of every page's server id; no configured server may use it.
pub const WEBMCP_PREFIX: &str = "webmcp-";

/// Who may see and call a page's tools besides the user whose token connected it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageVisibility {
    /// The page's own user (in their tenant) alone.
    #[default]
    Owner,
    /// Every user of the page's tenant.
    Tenant,
}

/// `[webmcp]`, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct WebMcpConfig {
    /// Exact origins whose pages may connect; empty (the default): the bridge refuses every
    /// page.
    pub allowed_origins: Vec<String>,
    pub visible_to: PageVisibility,
    /// Canonical ids (`webmcp-<name>.<tool>`) the operator declares read-only whatever the
    /// page claims.
    pub read_only_tools: Vec<String>,
    /// Canonical ids the operator declares writes whatever the page claims.
    pub write_tools: Vec<String>,
    /// Which calls of page tools need a confirmation.
    pub confirm: Confirm,
    /// What a poisoning-scan finding on a page's tool does.
    pub scan: ScanMode,
    /// How long a call waits for the page's answer.
    pub call_timeout: Duration,
    /// How often the gateway pings each page.
    pub heartbeat: Duration,
    /// A page that sent nothing for this long is gone: its tools leave the catalog.
    pub heartbeat_timeout: Duration,
    /// Largest message a page may send; a larger one is refused with a typed error and the
    /// connection kept.
    pub max_frame_bytes: usize,
    /// Most tools one page registers.
    pub max_tools: usize,
    /// Largest input schema of one tool, as JSON.
    pub max_schema_bytes: usize,
    /// Most pages one user has connected at once.
    pub max_pages_per_user: usize,
    /// Most pages connected to this instance at once.
    pub max_pages: usize,
    /// Client ids listed under a name of the operator's (`webmcp-<name>`), instead of their
    /// normalized id; sorted by client id.
    pub names: Vec<(String, super::ServerId)>,
}

impl Default for WebMcpConfig {
    fn default() -> Self {
        WebMcpConfig {
            allowed_origins: Vec::new(),
            visible_to: PageVisibility::Owner,
            read_only_tools: Vec::new(),
            write_tools: Vec::new(),
            confirm: Confirm::Writes,
            scan: ScanMode::Warn,
            call_timeout: Duration::from_secs(30),
            heartbeat: Duration::from_secs(15),
            heartbeat_timeout: Duration::from_secs(45),
            max_frame_bytes: 1024 * 1024,
            max_tools: 128,
            max_schema_bytes: 64 * 1024,
            max_pages_per_user: 16,
            max_pages: 1024,
            names: Vec::new(),
        }
    }
}

impl WebMcpConfig {
    /// Whether any page may connect.
    pub fn enabled(&self) -> bool {
        !self.allowed_origins.is_empty()
    }
}
