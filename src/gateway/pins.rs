//! Reviewing and releasing one tool: its live definition beside the pinned one, and accepting
//! the live one as its pin (the pin file rewritten, the catalog rebuilt, the release audited).
//! The REST API, the page and `mcpgate pin --tool` all do it through here.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::Gateway;
use crate::{
    catalog::{CatalogTool, PinStatus, Pins, PinsError, definition},
    policy::CallContext,
};

/// Why a tool could not be accepted.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("no pin file is configured ([pins] path)")]
    NoPinFile,
    #[error("no tool `{0}` in the live catalog")]
    UnknownTool(String),
    /// The definition changed again after it was shown: what was reviewed is not what runs.
    #[error(
        "the live definition of `{tool}` is no longer the one reviewed (now {live}); review it again"
    )]
    Changed { tool: String, live: String },
    #[error(transparent)]
    File(#[from] PinsError),
    /// The shared pins (PostgreSQL) could not be read or written.
    #[error("the shared pins are unavailable: {0}")]
    Store(#[from] crate::store::StoreError),
}

/// A tool's live definition beside its pinned one.
#[derive(Debug, Clone, PartialEq)]
pub struct PinReview {
    pub tool: String,
    pub server: String,
    /// `ok`, `quarantined`, `pending`, `stale` (as the catalog shows it).
    pub status: &'static str,
    pub live_fingerprint: String,
    /// The fingerprinted definition: name, title, description, schemas, annotations.
    pub live: Value,
    /// `None` when the tool has no pin (new, or its server unpinned).
    pub pinned_fingerprint: Option<String>,
    /// `None` when the pin file keeps no definition for that fingerprint (written before
    /// definitions were kept, or edited).
    pub pinned: Option<Value>,
}

impl PinReview {
    /// The camelCase JSON the API returns.
    pub fn to_json(&self) -> Value {
        json!({
            "tool": self.tool,
            "server": self.server,
            "status": self.status,
            "live": { "fingerprint": self.live_fingerprint, "definition": self.live },
            "pinned": self.pinned_fingerprint.as_ref().map(|fingerprint| json!({
                "fingerprint": fingerprint,
                "definition": self.pinned,
            })),
        })
    }
}

/// A tool accepted at its live definition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcceptedPin {
    pub tool: String,
    pub fingerprint: String,
    /// The fingerprint it was pinned at before, if any.
    pub previous: Option<String>,
    pub path: PathBuf,
}

impl Gateway {
    /// `canonical`'s live definition beside the pinned one; `None` for a tool not in the live
    /// catalog.
    pub fn pin_review(&self, canonical: &str) -> Option<PinReview> {
        let catalog = self.catalog();
        let tool = catalog.by_canonical(canonical)?;
        let pins = self.pins();
        let pinned_fingerprint = match &tool.pin {
            PinStatus::Pinned => Some(tool.fingerprint.as_str().to_owned()),
            PinStatus::Changed { pinned } => Some(pinned.clone()),
            PinStatus::New | PinStatus::Unpinned => None,
        };
        let pinned = pinned_fingerprint
            .as_deref()
            .and_then(|fp| pins.as_deref()?.definition(fp))
            .and_then(|text| serde_json::from_str(text).ok());
        Some(PinReview {
            tool: tool.canonical.clone(),
            server: tool.server.to_string(),
            status: tool.status.as_str(),
            live_fingerprint: tool.fingerprint.as_str().to_owned(),
            live: serde_json::from_str(&definition(tool.received())).unwrap_or(Value::Null),
            pinned_fingerprint,
            pinned,
        })
    }

    /// Accepts `canonical`'s live definition as its pin, as `ctx`: only that tool's pin is
    /// rewritten in the pin file, the catalog is rebuilt (releasing it from quarantine), and
    /// the release is audited (`accepted` / `pinned`, with the fingerprint). With `reviewed`,
    /// the live fingerprint must still be that one: a definition that changed again after it
    /// was shown is not accepted unseen.
    pub async fn accept_pin(
        &self,
        ctx: &CallContext,
        canonical: &str,
        reviewed: Option<&str>,
    ) -> Result<AcceptedPin, PinError> {
        let path = self
            .config()
            .pins
            .path()
            .ok_or(PinError::NoPinFile)?
            .to_owned();
        // One writer at a time: two releases at once must not drop each other's pin.
        let _writing = self.inner.pin_writes.lock().await;
        let catalog = self.catalog();
        let tool: &CatalogTool = catalog
            .by_canonical(canonical)
            .ok_or_else(|| PinError::UnknownTool(canonical.to_owned()))?;
        if let Some(reviewed) = reviewed
            && reviewed != tool.fingerprint.as_str()
        {
            return Err(PinError::Changed {
                tool: tool.canonical.clone(),
                live: tool.fingerprint.as_str().to_owned(),
            });
        }
        let (pins, previous) = match &self.inner.shared.pins {
            // Shared: the row as it is now, held until the new pins are stored; the file is
            // an export.
            Some(shared) => {
                let mut previous = None;
                let stored = shared
                    .update(|current| {
                        let mut pins = match current {
                            Some(json) => Pins::parse_json(json)?,
                            None => Pins::load(&path)?.unwrap_or_default(),
                        };
                        previous = pins
                            .get(&tool.server, &tool.upstream.name)
                            .map(str::to_owned);
                        pins.pin(tool);
                        Ok::<_, PinsError>(Some(pins.to_json()))
                    })
                    .await??;
                let pins = Pins::parse_json(stored.as_deref().unwrap_or("{}"))?;
                if let Err(err) = pins.write(&path) {
                    tracing::warn!(error = %err, "the pin file export could not be written");
                }
                (pins, previous)
            }
            // The file as it is now (another process, `mcpgate pin`, may have written it).
            None => {
                let mut pins = Pins::load(&path)?.unwrap_or_default();
                let previous = pins
                    .get(&tool.server, &tool.upstream.name)
                    .map(str::to_owned);
                pins.pin(tool);
                pins.write(&path)?;
                (pins, previous)
            }
        };
        self.set_pins(Some(pins)).await;
        self.announce(crate::store::redis::Event::PinsChanged).await;
        self.audit_pin_accepted(ctx, tool).await;
        Ok(AcceptedPin {
            tool: tool.canonical.clone(),
            fingerprint: tool.fingerprint.as_str().to_owned(),
            previous,
            path,
        })
    }
}
