//! The tool catalog: naming, schema repair, fingerprints and the immutable snapshot.
//! Pure: no async, no clock (time is passed in); the only I/O is reading and writing the pin
//! file (`pins/file.rs`).

mod canonical;
mod fingerprint;
mod naming;
mod parallel;
mod pins;
pub mod review;
mod scan;
mod schema;
mod snapshot;

pub use canonical::canonical_json;
pub use fingerprint::{Fingerprint, args_hash, definition};
pub use naming::{MAX_FUNCTION_NAME_LEN, canonical_id, function_names};
pub use pins::{
    ChangedPin, PinFileProblem, PinReport, PinStatus, Pins, PinsError, check, removed, status,
};
pub use scan::{
    Finding, FindingCode, Severity, cross_catalog, cross_catalog_beside, merge_cross, prepare_scan,
    scan_dropped_keys, scan_tool, scan_tool_cached,
};
pub use schema::{sanitize_input_schema, sanitize_schema};
pub use snapshot::{Catalog, CatalogTool, ServerTools, ToolStatus};
