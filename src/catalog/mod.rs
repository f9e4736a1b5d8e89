//! The tool catalog: naming, schema repair, fingerprints and the immutable snapshot.
//! Pure: no I/O, no async, no clock (time is passed in).

mod canonical;
mod fingerprint;
mod naming;
mod schema;
mod snapshot;

pub use canonical::canonical_json;
pub use fingerprint::{Fingerprint, args_hash};
pub use naming::{MAX_FUNCTION_NAME_LEN, canonical_id, function_names};
pub use schema::{sanitize_input_schema, sanitize_schema};
pub use snapshot::{Catalog, CatalogTool, ServerTools};
